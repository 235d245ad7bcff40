"""A user's object with a method named `update` (a hand-written optimizer
with bias correction, `self.t += 1`) was refused as if it were a dict's
`update` ("mutates 'opt', whose object may be shared"); a dict's `update`
takes one positional argument, so a call with two is a user's method, which
runs as Python runs it (the counter advances on the caller's object too)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt


class Optimizer:
    def __init__(self, lr):
        self.lr = lr
        self.t = 0

    def update(self, g, state):
        self.t += 1
        state = 0.9 * state + g
        return -self.lr * state / (1 - 0.9**self.t), state


def made_inside(w):
    opt = Optimizer(0.1)
    s = jnp.zeros_like(w)
    for _ in range(3):
        upd, s = opt.update(2 * w + jnp.cos(w), s)
        w = w + upd
    return jnp.sum(w**2)


def given(w, opt):
    s = jnp.zeros_like(w)
    for _ in range(3):
        upd, s = opt.update(2 * w + jnp.cos(w), s)
        w = w + upd
    return jnp.sum(w**2)


W = np.array([0.3, -0.7, 1.1])


def test_a_users_update_method_on_a_local_object():
    np.testing.assert_allclose(kt.grad(made_inside)(W), jax.grad(made_inside)(W), rtol=1e-6)


def test_a_users_update_method_on_an_argument_advances_its_counter():
    ours, theirs = Optimizer(0.1), Optimizer(0.1)
    np.testing.assert_allclose(
        kt.grad(given)(W, ours), jax.grad(given)(W, theirs), rtol=1e-6, atol=1e-7
    )
    assert ours.t == theirs.t == 3
