"""Gradients of the items of one tuple, list or dict gathered into one.

The DFunctor gathers the gradients of `t[0]`, `t[2]`, `t[-1]` (constant
indices) into one `items_grad(t, (0, 2, -1), ...)`, with zeros only for the
items no index reads (`DFunctor._items_grad`, `runtime.rules.items_grad`).
Oracle: JAX's gradient of the same function, to first and second order.
"""

from __future__ import annotations

import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


class Point(typing.NamedTuple):
    x: object
    y: object
    z: object


def tuple_items(t):
    a = t[0] * t[2]
    b = jnp.sin(t[-1]) * t[0]  # t[-1] is t[3]; t[1] is never read
    return jnp.sum(a * b + t[3])


def list_items(xs):
    return jnp.sum(xs[1] * xs[0] + jnp.cos(xs[-3]))  # xs[-3] is xs[0] again


def dict_items(d):
    return jnp.sum(d["w"] * jnp.tanh(d["b"]) * d["w"])  # "unused" is never read


def named_items(p):
    return jnp.sum(p[0] * jnp.exp(p[2] * 0.1))


def _inputs():
    rng = np.random.default_rng(0)
    a, b, c, d = (jnp.asarray(rng.standard_normal(3)) for _ in range(4))
    return {
        "tuple": (tuple_items, (a, b, c, d)),
        "list": (list_items, [a, b, c]),
        "dict": (dict_items, {"w": a, "b": b, "unused": c}),
        "namedtuple": (named_items, Point(a, b, c)),
    }


CASES = _inputs()


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_first_order_equals_jax(name):
    fn, x = CASES[name]
    got = kt.grad(fn)(x)
    assert type(got) is type(x)  # a list stays a list, a NamedTuple a NamedTuple
    _close(got, jax.grad(fn)(x))


@pytest.mark.parametrize("name", list(CASES))
def test_hvp_equals_jax(name):
    fn, x = CASES[name]
    v = jax.tree_util.tree_map(lambda a: jnp.ones_like(a) * 0.5, x)
    grad_fn = kt.grad(fn)
    _, got = kt.jvp(lambda x: grad_fn(x), (x,), (v,))
    _, want = jax.jvp(jax.grad(fn), (x,), (v,))
    _close(got, want)


def test_grad_of_grad_equals_jax():
    fn, x = CASES["tuple"]

    def scalar(t):
        return jnp.sum(kt.grad(fn)(t)[0])

    got = kt.grad(scalar)(x)
    want = jax.grad(lambda t: jnp.sum(jax.grad(fn)(t)[0]))(x)
    _close(got, want)


def test_one_gathered_gradient_per_tuple():
    source = kt.grad(tuple_items).__kt_source__
    assert source.count("_rt.items_grad(t, ((-1), 0, 2, 3), ") == 1, source
    assert "getitem_grad(t," not in source
