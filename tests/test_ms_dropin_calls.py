"""Calling conventions of MindSpore's jvp/vjp/jacfwd/jacrev (issue 30).

A function taking `*args` (with and without `has_aux`), and `vjp_fn(v0, v1)`
with the cotangents of a tuple output unpacked. Structures are MindSpore
2.10's (probed, PYNATIVE mode); values are checked against jax.jvp,
jax.vjp and jax.jacrev / jax.jacfwd of the same functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([1.0, 2.0])
Y = jnp.array([3.0, -0.5])
V = jnp.array([0.5, -1.5])


def close(got, want, tol=1e-5):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def star(*args):
    return jnp.sin(args[0]) * args[1]


def star_aux(*args):
    return jnp.sin(args[0]) * args[1], args[0] + 1.0


def named_star(x, *rest, scale=2.0):
    return scale * x * jnp.cos(rest[0]) + rest[1] ** 2


def two(a, b):
    return a * b, jnp.sin(a) + b


class StarCell(kt.Cell):
    def construct(self, *inputs):
        return jnp.tanh(inputs[0] * inputs[1])


def first(out):
    return out[0]


def test_jvp_of_star_args(mode):
    close(kt.jvp(star, (X, Y), (V, X)), jax.jvp(star, (X, Y), (V, X)))
    close(kt.jvp(named_star, (X, Y, V), (V, X, Y)), jax.jvp(named_star, (X, Y, V), (V, X, Y)))
    close(kt.jvp(StarCell(), (X, Y), (V, X)), jax.jvp(StarCell().construct, (X, Y), (V, X)))


def test_jvp_of_star_args_with_aux(mode):
    out, tangent, aux = kt.jvp(star_aux, (X, Y), (V, X), has_aux=True)
    want_out, want_tangent, want_aux = jax.jvp(star_aux, (X, Y), (V, X), has_aux=True)
    close((out, tangent, aux), (want_out, want_tangent, want_aux))


def test_vjp_of_star_args(mode):
    out, back = kt.vjp(star, X, Y)
    want_out, want_back = jax.vjp(star, X, Y)
    close(out, want_out)
    close(back(V), want_back(V))
    out, back = kt.vjp(named_star, X, Y, V)
    want_out, want_back = jax.vjp(named_star, X, Y, V)
    close((out, back(V)), (want_out, want_back(V)))


def test_vjp_of_star_args_with_aux(mode):
    out, back, aux = kt.vjp(star_aux, X, Y, has_aux=True)
    want_out, want_back, want_aux = jax.vjp(star_aux, X, Y, has_aux=True)
    close((out, back(V), aux), (want_out, want_back(V), want_aux))


def test_vjp_fn_takes_cotangents_unpacked(mode):
    # MindSpore: vjp_fn(v0, v1) and vjp_fn((v0, v1)) are the same
    out, back = kt.vjp(two, X, Y)
    want_out, want_back = jax.vjp(two, X, Y)
    close(out, want_out)
    close(back(V, X), want_back((V, X)))
    close(back((V, X)), want_back((V, X)))


@pytest.mark.parametrize("jac, oracle", [(kt.jacrev, jax.jacrev), (kt.jacfwd, jax.jacfwd)])
def test_jacobians_of_star_args(jac, oracle):
    close(jac(star, grad_position=(0, 1))(X, Y), oracle(star, argnums=(0, 1))(X, Y))
    close(jac(star, grad_position=1)(X, Y), oracle(star, argnums=1)(X, Y))
    got, aux = jac(star_aux, grad_position=(0, 1), has_aux=True)(X, Y)
    want, want_aux = oracle(star_aux, argnums=(0, 1), has_aux=True)(X, Y)
    close((got, aux), (want, want_aux))
    close(jac(named_star, grad_position=2)(X, Y, V), oracle(named_star, argnums=2)(X, Y, V))


def test_a_cell_of_ours_made_where_it_is_used():
    """`nn.MSELoss()(z, y)` inside the function differentiated (PyNative
    code does this): refused with "no primitive with a gradient rule"
    (helper-27). Made at transform time now; one with Parameters (new ones
    at each call in MindSpore) is refused, naming it. MindSpore 2.10:
    [-0.3333, -0.6667, 0.6667]."""
    import k_transform.mindspore as ms
    from k_transform.mindspore import Tensor, nn

    z = Tensor(np.array([0.5, -1.0, 2.0], np.float32))
    y = Tensor(np.array([1.0, 0.0, 1.0], np.float32))

    def loss(z):
        return nn.MSELoss()(nn.ReLU()(z) + z, y)

    want = jax.grad(lambda z: jnp.mean((jax.nn.relu(z) + z - y) ** 2))(z)
    np.testing.assert_allclose(ms.grad(loss)(z), want, rtol=1e-6)

    def mse(z):
        return nn.MSELoss()(z, y)

    np.testing.assert_allclose(ms.grad(mse)(z), [-1 / 3, -2 / 3, 2 / 3], rtol=1e-5)

    def with_weights(z):
        return nn.Dense(3, 1)(z[None]).sum()

    with pytest.raises(kt.KTransformError, match="Parameter"):
        ms.grad(with_weights)(z)
