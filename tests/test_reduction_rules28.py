"""Max/min reductions that pick elements (`k_transform/ops/lax_window_rules.py`):
`jax.ops.segment_max` / `segment_min` and `x.at[i].max(u)` (lax `scatter-max` /
`scatter-min`), max, min and sum pooling (`lax.reduce_window`: the generic
form kt imports when the init value is a Python float in the user's code, and
`reduce_window_max` / `_min` / `_sum` from library code).

Oracle: JAX on the same function in float64: `jax.grad`, `jax.jvp`,
`jax.hessian`. Inputs hold ties (several equal maxima in a segment or a
window), empty segments, padding, strides, dilations.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

SEG = np.array([0, 0, 1, 1, 1, 3, 7])  # segment 2 is empty, id 7 is dropped (>= 4)
XS = np.array([3.0, 3.0, 2.0, -1.0, 2.0, 0.5, 9.0])  # ties in segments 0 and 1
WS = np.array([1.0, 10.0, 100.0, 1000.0])


def check(f, xs, hessian=True, reverse=True):
    """kt's gradient (every input), jvp and Hessian (first input) equal JAX's
    (forward mode where JAX has no reverse mode: a max pool's window dilation)."""
    at = tuple(range(len(xs)))
    close = dict(rtol=1e-10, atol=1e-12)
    grad = jax.grad if reverse else jax.jacfwd  # the oracles jitted: JAX's eager mode is slow
    for got, want in zip(kt.grad(f, at)(*xs), jax.jit(grad(f, at))(*xs), strict=True):
        np.testing.assert_allclose(got, want, **close)
    vs = tuple(np.cos(np.arange(np.size(x)) + 1.0).reshape(np.shape(x)) for x in xs)
    want = jax.jit(lambda xs, vs: jax.jvp(f, xs, vs)[1])(xs, vs)
    np.testing.assert_allclose(kt.jvp(f, xs, vs)[1], want, **close)
    if hessian:
        want = jax.jit(jax.hessian(f) if reverse else jax.jacfwd(jax.jacfwd(f)))(*xs)
        np.testing.assert_allclose(kt.hessian(f)(*xs), want, **close)


def library(fn):
    """`fn` as library code: imported from its jaxpr, never parsed (a constant
    init value stays one: `reduce_window_max` rather than `reduce_window`)."""
    fn.__module__ = "jax.opaque_for_test"
    return jax.jit(fn)


# -- scatter-max / scatter-min ------------------------------------------------------------
def seg_max(x):
    s = jax.ops.segment_max(x, SEG, num_segments=4)
    return jnp.sum(jnp.where(jnp.isfinite(s), s, 0.0) ** 2 * WS)


def seg_min(x):
    s = jax.ops.segment_min(x, SEG, num_segments=4)
    return jnp.sum(jnp.sin(jnp.where(jnp.isfinite(s), s, 0.0)) * WS)


@pytest.mark.parametrize("f", [seg_max, seg_min])
def test_segment_extremum_ties_and_empty_segments(f):
    """Ties share the sensitivity evenly; an empty segment (-inf) and a dropped
    id give nothing."""
    check(f, (XS,), hessian=f is seg_max)


# library code: kt's own `.at[].max` model is not the imported `scatter-max`
lib_at_max = library(lambda x, u: x.at[np.array([0, 0, 2, 1, 2])].max(u))
lib_at_min = library(lambda x, u: x.at[np.array([1, 1, 3])].min(u))


def at_max(x, u):
    """Updates tie with each other and with the operand element they land on."""
    return jnp.sum(jnp.sin(lib_at_max(x, u)) * np.array([1.0, 2.0, 3.0, 4.0]))


def at_min(x, u):
    return jnp.sum(lib_at_min(x, u) ** 3)


def test_scatter_extremum_ties_with_operand():
    check(at_max, (np.array([2.0, 0.5, 1.0, 7.0]), np.array([2.0, 1.0, 1.0, 0.0, 1.0])))
    check(at_min, (np.array([2.0, 0.5, 1.0, 7.0]), np.array([0.5, 0.5, 7.0])), hessian=False)


# -- reduce_window: max, min and sum pooling -----------------------------------------------
X1 = np.array([1.0, 3.0, 3.0, 0.5, 3.0, -2.0, 3.0])
# NHWC, values from a few levels so that most 2x2 windows hold ties
X4 = np.random.default_rng(0).integers(0, 3, (2, 4, 4, 2)).astype(np.float64)


def user_max_1d(x):
    """The init value is a float of the user's: the generic `reduce_window`."""
    return jnp.sum(jnp.sin(lax.reduce_window(x, -jnp.inf, lax.max, (3,), (2,), ((2, 1),))))


def user_min_1d(x):
    y = lax.reduce_window(x, jnp.inf, lax.min, (2,), (1,), "SAME", window_dilation=(2,))
    return jnp.sum(y**2 * np.arange(1.0, 8.0))


def pool_2x2(op, init):
    def pool(x):
        return lax.reduce_window(x, init, op, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    return pool


lib_max = library(pool_2x2(lax.max, -jnp.inf))
lib_min = library(pool_2x2(lax.min, jnp.inf))
lib_sum = library(pool_2x2(lax.add, 0.0))


def user_maxpool(x):
    y = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jnp.sum(jnp.sin(y))


def lib_maxpool(x):
    return jnp.sum(jnp.sin(lib_max(x)))


def lib_minpool(x):
    return jnp.sum(jnp.cos(lib_min(x)) * lib_min(x))


def lib_avgpool(x):
    return jnp.sum(jnp.sin(lib_sum(x) / 4.0))


def user_avgpool_same(x):
    """Sum pooling with padding and base dilation (the holes hold the init value)."""
    y = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 1, 1), "SAME", (1, 2, 1, 1))
    return jnp.sum(jnp.sin(y))


def user_max_dilated(x):
    y = lax.reduce_window(x, -jnp.inf, lax.max, (3,), (1,), "SAME", base_dilation=(2,))
    return jnp.sum(y**2)


@pytest.mark.parametrize("f", [user_max_1d, user_min_1d, user_max_dilated])
def test_window_1d_ties_padding_strides_dilations(f):
    """A tie goes to the window's first largest (smallest) element, not shared."""
    check(f, (X1,), hessian=f is user_max_1d, reverse=f is not user_min_1d)


@pytest.mark.parametrize("f", [user_maxpool, lib_maxpool, lib_minpool, lib_avgpool])
def test_pool_2x2_stride_2_nhwc(f):
    check(f, (X4,), hessian=f is user_maxpool)  # a 64x64 Hessian: once is enough


def test_sum_pool_padding_base_dilation():
    check(user_avgpool_same, (X4[:1, :, :3],), hessian=False)


def test_max_pool_padding_takes_ties_first():
    """A window of padding and -inf elements: the padding (first) takes it, as in
    JAX; a window of -inf elements gives it to its first."""

    def f(x):
        y = lax.reduce_window(x, -jnp.inf, lax.max, (3,), (1,), ((1, 1),))
        return jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) * np.array([1.0, 10.0, 100.0]))

    x = np.array([-np.inf, -np.inf, 1.0])
    np.testing.assert_array_equal(kt.grad(f)(x), jax.jit(jax.grad(f))(x))
    lib = library(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), "VALID"))
    g = lambda x: jnp.sum(jnp.where(jnp.isfinite(y := lib(x)), y, 0.0) * np.arange(1.0, 3.0))  # noqa: E731
    np.testing.assert_array_equal(kt.grad(g)(x), jax.jit(jax.grad(g))(x))


def test_window_with_nans_routes_as_xla_selects():
    """XLA's select keeps the element it holds while it is >= the next: a NaN
    hands the window to the element after it."""

    def f(x):
        y = lax.reduce_window(x, -jnp.inf, lax.max, (3,), (1,), ((1, 1),))
        return jnp.sum(y * np.arange(1.0, 7.0))

    def g(x):
        return jnp.sum(lax.reduce_window(x, jnp.inf, lax.min, (3,), (1,), ((1, 1),)) * x)

    for x in ([1.0, np.nan, 2.0, np.nan, 0.5, 3.0], [np.nan, 2.0, 5.0, np.nan, np.nan, 1.0]):
        x = np.array(x)
        np.testing.assert_array_equal(kt.grad(f)(x), jax.jit(jax.grad(f))(x))
        np.testing.assert_array_equal(kt.grad(g)(x), jax.jit(jax.grad(g))(x))


def test_generic_window_init_value_gets_its_gradient():
    """A traced init value that is not the identity (JAX has no reverse mode for
    it): the oracle spells it `maximum(init, max pool)`, with no ties."""

    def f(x, c):
        return jnp.sum(lax.reduce_window(x, c, lax.max, (2,), (1,), ((1, 0),)) ** 2)

    def oracle(x, c):
        pooled = lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), ((1, 0),))
        return jnp.sum(jnp.maximum(pooled, c) ** 2)

    x, c = np.array([0.5, -1.0, -3.0, 2.0, -0.7]), 0.25
    for got, want in zip(kt.grad(f, (0, 1))(x, c), jax.grad(oracle, (0, 1))(x, c), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)

    def g(x, c):
        return jnp.sum(lax.reduce_window(x, c, lax.add, (3,), (2,), "SAME"))

    def g_oracle(x, c):  # SAME pads one on each side: 3 windows, 2 padded positions, +1 init each
        return jnp.sum(lax.reduce_window(x, 0.0, lax.add, (3,), (2,), "SAME")) + 5.0 * c

    for got, want in zip(kt.grad(g, (0, 1))(x, c), jax.grad(g_oracle, (0, 1))(x, c), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_other_reducer_still_refused():
    def f(x):
        return jnp.sum(lax.reduce_window(x, 1.0, lax.mul, (2,), (1,), "VALID"))

    with pytest.raises(kt.KTransformError, match="`reduce_window`.*max, min and sum"):
        kt.grad(f)(X1)


# -- the refusal of a Jacobian that would run host code again names the line ------------
def try_pool(x):
    try:
        s = jax.ops.segment_max(x, SEG, num_segments=4)
    except ValueError:
        s = x
    return jnp.sum(jnp.where(jnp.isfinite(s), s, 0.0))


def test_rerun_refusal_names_the_line_that_runs_as_python():
    """`kt.jit(kt.hessian(f))` of a function run as Python (the parser has no
    model of `try`) is refused, as any Jacobian that would run host code again;
    the message blamed "``, line 0 of <unknown>". It names the line and why.
    (Session 29 parses `:=`, which this test used before.)"""
    lines, first = inspect.getsourcelines(try_pool)
    line = first + next(i for i, text in enumerate(lines) if "try:" in text)
    with pytest.raises(kt.KTransformError) as info:
        kt.jit(kt.hessian(try_pool))(XS)
    message = str(info.value)
    assert f"line {line} of {__file__}" in message
    assert "runs try_pool as Python" in message and "try" in message
    assert "<unknown>" not in message
    want = jax.jit(jax.hessian(try_pool))(XS)  # without kt.jit: run once, differentiated
    np.testing.assert_allclose(kt.hessian(try_pool)(XS), want)
