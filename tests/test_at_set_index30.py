"""`x.at[index].set(v)` where `index` is a tuple holding an index array or a
slice the program computes (a hinge loss's `s.at[arange(n), y]`, a diagonal
fill, a `fori_loop`'s `y.at[i, i]`, a row of a triangle `out.at[i, :i + 1]`).
Its rule returned the index's None from one of two `return`s, which the
DFunctor met as a run-time value: a TypeError in the generated bprop. Oracle:
`jax.grad` on the same code, float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")


def hinge(s):
    return jnp.sum(s.at[jnp.arange(3), jnp.array([0, 2, 1])].set(0.0) ** 2)


def diagonal(s):
    i, j = jnp.diag_indices(3)
    return jnp.sum(jnp.sin(s.at[i, j].set(0.0)))


def columns(s):
    return jnp.sum(s.at[:, jnp.array([0, 2])].set(s[0, 1]) ** 2)


def fori_diagonal(s):
    def body(i, y):
        return y.at[i, i].set(y[i, i] * 2 + s[0, 1])

    return jnp.sum(jax.lax.fori_loop(0, 3, body, s) ** 2)


def triangle(s):
    x = s[0]
    out = jnp.zeros((3, 3))
    for i in range(3):
        out = out.at[i, : i + 1].set(x[: i + 1] * (i + 1))
    return jnp.sum(out**2)


S = np.arange(1.0, 10.0).reshape(3, 3) / 5


@pytest.mark.parametrize("f", [hinge, diagonal, columns, fori_diagonal, triangle])
def test_set_at_a_computed_tuple_index_matches_jax(f):
    np.testing.assert_allclose(kt.grad(f)(S), jax.grad(f)(S), rtol=1e-12)
