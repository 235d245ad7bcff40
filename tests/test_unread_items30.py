"""Unread items send no cotangent, and zero tangents are not multiplied
(oracle: JAX on the same code; sici: the closed form Si'(0) = sinc(0) = 1).

A zero times an infinite slope (`sqrt` or `log` at 0) is NaN, where JAX,
whose zeros are symbolic, has numbers. Each case gave NaN before session 30:
- a closure over the caller's values given to a helper that calls it and
  reads one item (`_calls_read`: K of it is made for the items read);
- `for k, v in d.items()` reading one key (the keys of a dict display, or of
  one a helper returns, are constants: `parse_sugar.static_keys`);
- `kt.jvp(kt.grad(f))` at an infinite second derivative (the bprop is
  called with `ones_like(out)`, whose tangent is zero: J of it takes none);
- `jax.scipy.special.sici`'s Si at 0 (JAX's rule, one primitive per result);
- a slice `t[::2]` or a NamedTuple's `_replace` read in part (`liveness`);
- `cbrt`'' at 0 and `arccosh`'' at 1 (their rules in JAX's forms).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")


# -- a closure given to a helper ---------------------------------------------------------
def apply_first(g, x):
    return g(x)[0]


def apply_whole(g, x):
    return g(x)


def closure_given(x):
    w = x * 2.0
    g = lambda v: (v * w, jnp.log(v - v))  # noqa: E731
    return apply_first(g, x)


def closure_given_on(x):  # `apply_whole` returns the call's tuple; the caller reads item 0
    w = x * 2.0

    def g(v):
        return v * w, jnp.sqrt(v - v)

    a, _ = apply_whole(g, x)
    return a


# -- a dict's items --------------------------------------------------------------------
def make(x):
    return {"a": x * 3.0, "b": jnp.sqrt(x)}


def items_loop(x):
    d = {"a": x * 3.0, "b": jnp.sqrt(x)}
    total = 0.0
    for k, v in d.items():
        if k == "a":
            total += v
    return total


def keys_loop_of_a_helper(x):
    d = make(x)
    total = 0.0
    for k in d.keys():
        if k == "a":
            total += d[k] * 2.0
    return total


def three(x):
    return x * 2.0, jnp.sqrt(x), jnp.log(x)


def four(x):
    return x * 2.0, jnp.sqrt(x), jnp.log(x), x * x


CASES = [closure_given, closure_given_on, items_loop, keys_loop_of_a_helper]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_an_unread_item_sends_no_cotangent(f):
    want = jax.grad(f)(0.0)
    assert np.isfinite(want)
    np.testing.assert_allclose(kt.grad(f)(0.0), want, rtol=1e-12)
    np.testing.assert_allclose(kt.grad(kt.grad(f))(0.0), jax.grad(jax.grad(f))(0.0), rtol=1e-12)


def test_the_items_loop_still_reads_each_key():  # (the keys made constants: both items read)
    def f(x):
        d = {"a": x * 3.0, "b": jnp.sqrt(x)}
        d["c"] = x**3
        total = 0.0
        for k, v in d.items():
            total = total + v * len(k)
        return total

    np.testing.assert_allclose(kt.grad(f)(0.5), jax.grad(f)(0.5), rtol=1e-12)


# -- jvp of a gradient at an infinite second derivative -------------------------------
@pytest.mark.parametrize(
    "fn, x",
    [(jnp.log, 0.0), (jnp.sqrt, 0.0), (jnp.log1p, -1.0)],
    ids=["log", "sqrt", "log1p"],
)
def test_jvp_of_a_gradient_at_an_infinite_slope_matches_jax(fn, x):
    want = jax.jvp(jax.grad(fn), (x,), (1.0,))
    assert np.isinf(want[1])
    np.testing.assert_array_equal(kt.jvp(kt.grad(fn), (x,), (1.0,)), want)


def test_hvp_with_a_loop_at_an_infinite_slope_matches_jax():
    def f(x):
        s = 0.0
        for i in range(3):
            s = s + jnp.sqrt(x * (i + 1.0))
        return jnp.sum(s)

    x = jnp.array([0.0, 0.5])
    v = jnp.ones(2)
    want = jax.jvp(jax.grad(f), (x,), (v,))[1]
    assert np.isneginf(want[0])
    np.testing.assert_array_equal(kt.hvp(f, (x,), v), want)


# -- sici ------------------------------------------------------------------------------
def test_sine_integral_slope_at_zero_is_one():
    def si(x):
        return jnp.sum(jsp.sici(x)[0])

    xs = np.array([0.0, -0.5, 3.0, 7.0])
    np.testing.assert_allclose(kt.grad(si)(xs), np.sinc(xs / np.pi), rtol=1e-12)  # sin(x) / x
    assert kt.grad(kt.grad(si))(0.0) == 0.0

    def both(x):
        s, c = jsp.sici(x)
        return s * c

    np.testing.assert_allclose(kt.grad(both)(0.7), jax.grad(both)(0.7), rtol=1e-12)


# -- second derivatives of imported lax primitives at an infinite slope ----------------
@pytest.mark.parametrize("fn, x", [(jnp.cbrt, 0.0), (jnp.arccosh, 1.0)], ids=["cbrt", "arccosh"])
def test_second_derivative_at_an_infinite_slope_matches_jax(fn, x):
    """Their rules are JAX's forms (`out ** -2 / 3`, `1 / sqrt(x * x - 1)`):
    `1 / (3 * out * out)` and `(x - 1)(x + 1)` met `0 * inf` in the slope."""
    want = jax.grad(jax.grad(fn))(x)
    assert np.isneginf(want)
    second = kt.grad(kt.grad(fn))
    assert second(x) == want
    np.testing.assert_allclose(second(2.5), jax.grad(jax.grad(fn))(2.5), rtol=1e-12)


# -- a slice, a NamedTuple's _replace ----------------------------------------------------
class Pair(NamedTuple):
    a: object
    b: object


def a_slice_of_a_result(x):
    u = three(x)[::2]  # (x * 2, log(x)): the sqrt(x) between is unread
    return u[0] * 3.0


def a_helper_returning_a_slice(x):
    def firsts(v):
        return four(v)[:2]

    return firsts(x)[0] + firsts(x * 2.0)[0]


def a_replaced_field(x):
    p = Pair(x * 2.0, jnp.sqrt(x))
    q = p._replace(b=x * 5.0)
    return q.a + q.b


@pytest.mark.parametrize(
    "f",
    [a_slice_of_a_result, a_helper_returning_a_slice, a_replaced_field],
    ids=lambda f: f.__name__,
)
def test_a_slice_or_replaced_field_sends_no_cotangent_to_unread_items(f):
    want = jax.grad(f)(0.0)
    assert np.isfinite(want)
    np.testing.assert_allclose(kt.grad(f)(0.0), want, rtol=1e-12)
    np.testing.assert_allclose(kt.grad(kt.grad(f))(0.0), jax.grad(jax.grad(f))(0.0), rtol=1e-12)


def test_items_read_through_a_slice_or_replace_keep_their_gradients():
    def f(x):
        t = (x * 2.0, x**3, jnp.sin(x), x * x)
        u = t[1::2]
        p = Pair(jnp.cos(x), x**4)._replace(a=u[1] * 3.0)
        return u[0] * p.a + p.b + p[0]

    np.testing.assert_allclose(kt.grad(f)(0.7), jax.grad(f)(0.7), rtol=1e-12)
    np.testing.assert_allclose(kt.grad(kt.grad(f))(0.7), jax.grad(jax.grad(f))(0.7), rtol=1e-12)
