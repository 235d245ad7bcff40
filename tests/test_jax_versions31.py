"""What JAX 0.11 (the pin allows it; Python 3.12 installs it) changed under us,
found by running the suite there (session 31): a custom_jvp function of JAX's
renamed (`_i0` -> `i0_impl`) or new (`i1_impl`) had its steps differentiated
instead of its rule (i0'(0) = 1 through `abs`'s kink, for 0); fresnel's steps
are a rational approximation; a traced slice bound's message changed. Each
derivative here is checked against a closed form or finite differences, so
the tests mean the same on either version."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as ssp  # scipy comes with jax
from jax._src.numpy import lax_numpy as jax_numpy_impl  # whose `i1` has a rule (0.11)

import k_transform as kt
from k_transform.errors import KTransformError, needs_static
from k_transform.ops import special

sp = jax.scipy.special
X = np.array([0.0, 1e-5, 0.5, 2.0])


def close(got, want, tol=1e-10):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def i1_sum(x):  # a function value: JAX's jaxpr of it is read
    return jnp.sum(jax.vmap(sp.i1)(x))


def i1_called(x):  # a call in parsed code
    return jnp.sum(sp.i1(x))


def i1_slope_closed(x):
    x = np.asarray(x, dtype=np.float64)
    safe = np.where(x == 0, 1.0, x)
    return np.where(x == 0, 0.5, ssp.i0(x) - ssp.i1(x) / safe)


def i1_second_closed(x):
    """I_1'' = I_1 - I_1' / x + I_1 / x^2 (x != 0)."""
    return ssp.i1(x) - i1_slope_closed(x) / x + ssp.i1(x) / x**2


@pytest.mark.parametrize("fn", [i1_sum, i1_called], ids=["vmapped", "called"])
def test_i1_derivatives_are_bessels(x64, fn):
    """I_1' = I_0 - I_1 / x (1/2 at 0), and I_1'' in closed form; at 0,
    I_1''(0) = 0 and I_1'''(0) = 3/8 (the series x/2 + x^3/16), where the
    steps `exp(|x|) * i1e(x)` give 1 and 1.5 (the slope of `abs` is 1 at 0):
    a call in parsed code is our `I1` on any JAX, a jaxpr's since JAX 0.11
    (whose `i1_impl` has that rule; before, its steps were JAX's answer)."""
    close(kt.grad(fn)(X), i1_slope_closed(X), 1e-9)

    def second(x):
        return jnp.sum(kt.grad(fn)(x))

    def third(x):
        return jnp.sum(kt.grad(second)(x))

    away = np.array([0.5, 2.0])
    close(kt.grad(second)(away), i1_second_closed(away), 1e-9)
    if fn is i1_called or hasattr(jax_numpy_impl, "i1_impl"):
        x0 = np.array([0.0, 1e-6])
        close(kt.grad(second)(x0), [0.0, 0.1875 * 2e-6], 1e-9)
        close(kt.grad(third)(x0), [0.375, 0.375], 1e-9)


def test_i0_through_a_jaxpr_takes_its_rule(x64):
    """i0'(0) = i1(0) = 0 (JAX's rule; `abs`'s slope at 0 is 1 in JAX), i0'' = i1'."""

    def i0_sum(x):
        return jnp.sum(jax.vmap(jnp.i0)(x))

    close(kt.grad(i0_sum)(X), ssp.i1(X))
    close(kt.grad(lambda x: jnp.sum(kt.grad(i0_sum)(x)))(X), i1_slope_closed(X), 1e-9)


def fresnel_mix(x):
    s, c = sp.fresnel(x)
    return jnp.sum(2.0 * s + c)


def fresnel_vmapped(x):
    return jnp.sum(jax.vmap(lambda t: 2.0 * sp.fresnel(t)[0] + sp.fresnel(t)[1])(x))


@pytest.mark.parametrize("fn", [fresnel_mix, fresnel_vmapped], ids=["called", "vmapped"])
def test_fresnel_gradient_is_its_integrand(x64, fn):
    """S' = sin(pi x^2 / 2), C' = cos(pi x^2 / 2), exactly (the steps are a
    rational approximation in two ranges)."""
    x = np.array([0.0, 0.3, 1.7, 4.0, 40.0])
    want = 2.0 * np.sin(0.5 * math.pi * x**2) + np.cos(0.5 * math.pi * x**2)
    close(kt.grad(fn)(x), want, 1e-12)


def test_a_jax_rule_it_does_not_know_runs_but_is_refused_when_differentiated(monkeypatch):
    """The general guard: a JAX custom_jvp function neither in CUSTOM_JVP nor
    in JAX_BODIES (here i0 with its entry taken out, as a JAX release that
    renames it would leave it) runs, and differentiating through it is
    refused naming the function and the user's line; a gradient that does
    not reach it is still given."""
    for key in [k for k in special.CUSTOM_JVP if k[1] in ("_i0", "i0_impl")]:
        monkeypatch.delitem(special.CUSTOM_JVP, key)

    def scaled_i0(x, w):
        return jnp.sum(jax.vmap(jnp.i0)(x) * w)

    x, w = jnp.array([0.0, 0.5]), jnp.array([2.0, 3.0])
    close(kt.jit(scaled_i0)(x, w), scaled_i0(x, w), 1e-6)
    close(kt.grad(scaled_i0, grad_position=1)(x, w), jnp.i0(x), 1e-6)
    with pytest.raises(KTransformError) as info:
        kt.grad(scaled_i0)(x, w)
    message = str(info.value)
    assert "i0" in message and "its own derivative rule" in message
    assert "test_jax_versions31.py" in message and "jax.vmap(jnp.i0)(x) * w" in message


@pytest.mark.parametrize(
    "text",
    [
        "Slice entries must be static integers. Got k at position 0",  # JAX 0.10
        "Array slice indices must have static start/stop/step to be used with NumPy "
        "indexing syntax. Got slice(JitTracer(int32[]), None, None) at position 0.",  # 0.11
    ],
)
def test_a_traced_slice_bound_is_recognised_in_each_versions_words(text):
    assert needs_static(IndexError(text))
    assert not needs_static(IndexError("index 5 is out of bounds for axis 0 with size 3"))
