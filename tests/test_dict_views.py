"""Writing a dict while a loop runs over it (frontend/mutation.py).

Python's loop over `d`, `d.keys()` or `d.items()` reads the dict as it goes:
a write at the key the loop is at changes nothing the loop reads later (so
the parser's loop, which reads the items once, is exact), but a write at
another key is seen by a later `items()` or `values()` step, and a view
bound to a name (`items = d.items()`) sees every later write. Those are
refused; before, the loop read the old values with no error. Oracle: JAX on
the same Python.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import line_of, strict_refusal

X = jnp.array([0.3, -0.2, 0.5])
WRITE = 'd["q"] ='  # the refused write, as the functions below spell it


def each_key(x):
    d = {"p": x, "q": 2.0 * x}
    for k in d:
        d[k] = jnp.tanh(d[k])
    for k in d.keys():
        d[k] += x
    return jnp.sum(d["p"] * d["q"])


def own_item(x):
    d = {"p": x, "q": 2.0 * x}
    for k, v in d.items():
        d[k] = v * 3.0 + d["q"]
    return jnp.sum(d["p"] * d["q"])


def copied_items(x):
    d = {"p": x, "q": 2.0 * x}
    for _, v in list(d.items()):
        d["q"] = v * 3.0
    return jnp.sum(d["p"] * d["q"])


def other_key_in_items(x):
    d = {"p": x, "q": 2.0 * x}
    for _, v in d.items():
        d["q"] = v * 3.0  # the next step reads this value
    return jnp.sum(d["p"] * d["q"])


def other_key_in_values(x):
    d = {"p": x, "q": 2.0 * x}
    for v in d.values():
        d["q"] = v * 3.0
    return jnp.sum(d["p"] * d["q"])


def view_bound_to_a_name(x):
    d = {"p": x, "q": 2.0 * x}
    items = d.items()
    d["q"] = 5.0 * x  # the view sees it
    return sum(jnp.sum(v) for _, v in items) * x[0]


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("fn", [each_key, own_item, copied_items], ids=lambda f: f.__name__)
def test_writes_the_loop_cannot_see_are_modelled(fn, mode):
    kt.set_mode(mode)
    try:
        value, grad = kt.value_and_grad(fn)(X)
    finally:
        kt.set_mode("graph")
    ref_value, ref_grad = jax.value_and_grad(fn)(X)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)


@pytest.mark.parametrize(
    "fn", [other_key_in_items, other_key_in_values, view_bound_to_a_name], ids=lambda f: f.__name__
)
def test_writes_a_live_view_sees_are_refused(fn):
    if fn is view_bound_to_a_name:
        # the view and the dict are the function's own: run as Python, exactly
        np.testing.assert_allclose(kt.grad(fn)(X), jax.grad(fn)(X), rtol=1e-6)
        message = strict_refusal(fn, X)
    else:
        with pytest.raises(kt.KTransformError) as info:
            kt.value_and_grad(fn)(X)
        message = str(info.value)
    assert "d['q'] = ..." in message and "another reference" in message
    assert f"line {line_of(fn, WRITE)}" in message


def test_jvp_of_a_dict_comprehension_before_a_traced_loop_matches_jax():
    """Found by the fuzzer (`dicts`): forward mode through a dict built by a
    comprehension read a key the second order's gradient of the dict, built
    from the dict before the key was set, lacked (KeyError)."""

    def f(x):
        y = x * 0.5 + 0.1
        d1 = {"p": jnp.exp(jnp.tanh(-0.5 * x)), "q": 0.2 * jnp.sum(jnp.sin(x)) * y}
        e2 = {k: w * 0.5 for k, w in d1.items()}
        z = e2["q"] + sum(list(e2.values())) + d1["p"]
        z = jnp.exp(jnp.tanh(x[0] * z))
        k = 0
        while jnp.mean(jnp.sin(x)) > -1.5 and k < 5:
            k = k + 1
        return jnp.sum(jnp.tanh(z)) + jnp.sum(y * z)

    x, t = jnp.array([0.3, -0.2, 0.5]), jnp.array([1.0, 0.5, -0.3])
    want = jax.jvp(f, (x,), (t,))[1]
    kt.set_mode("eager")
    try:
        np.testing.assert_allclose(kt.jvp(f, (x,), (t,))[1], want, rtol=1e-5)
    finally:
        kt.set_mode("graph")
    np.testing.assert_allclose(kt.jvp(f, (x,), (t,))[1], want, rtol=1e-5)
