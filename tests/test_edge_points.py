"""Derivatives at the edge of a rule's formula (ops/arithmetic.py).

`x ** 0` has slope 0 everywhere, but `y * x ** (y - 1)` is 0 * inf = NaN
at x = 0. JAX gives 0 for an integer exponent (`integer_pow`'s rule) and
NaN for a float one; the closed form is 0 in both, and so is ours. Oracles:
jax.grad / jax.hessian where JAX is finite, the closed form elsewhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.0, 1.0, -2.0])


def int_zero(x):
    return jnp.sum(x**0)


def float_zero(x):
    return jnp.sum(x**0.0)


def traced_zero(x):
    return jnp.sum(x ** (x[1] * 0.0))


def square(x):
    return jnp.sum(x**2 + (x + 3.0) ** (x + 1.0))


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("fn", [int_zero, square], ids=lambda f: f.__name__)
def test_pow_matches_jax(fn, mode):
    kt.set_mode(mode)
    try:
        grad, hess = kt.grad(fn)(X), kt.hessian(fn)(X)
    finally:
        kt.set_mode("graph")
    np.testing.assert_allclose(grad, jax.grad(fn)(X), rtol=1e-6)
    np.testing.assert_allclose(hess, jax.hessian(fn)(X), rtol=1e-5)


@pytest.mark.parametrize("fn", [float_zero, traced_zero], ids=lambda f: f.__name__)
def test_a_zero_exponent_has_slope_zero_at_zero(fn):
    """The closed form: x ** 0 is 1, its derivatives 0 (JAX: NaN at 0)."""
    np.testing.assert_array_equal(kt.grad(fn)(X)[0], 0.0)
    np.testing.assert_array_equal(jnp.diag(kt.hessian(fn)(X))[0], 0.0)
