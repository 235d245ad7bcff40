"""Gradients of writes a scatter drops or overrides (found by helper-33 on
transformer, HMC and graph-network code).

`x.at[i].set(v)` keeps one of repeated indices and, like `.add`, drops an
index out of bounds; `segment_sum` drops ids outside `[0, num_segments)`
(a padding id, -1). The rules read `dout` at every index as if each write
applied: a dropped or overridden update got a gradient (clamped reads), or
NaN (a gather filling out-of-range reads with NaN). Checked against JAX, and
`.multiply` with repeated indices (JAX refuses its gradient) against central
differences, in float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


@pytest.fixture(autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


X = np.array([0.3, -1.1, 2.0, 0.7])


def repeated_set(x):
    return jnp.sum(jnp.zeros(3).at[jnp.array([1, 1])].set(x[:2]) ** 2)


def set_out_of_bounds(x):
    return jnp.sum(x.at[jnp.array([6, 1])].set(x[0]) ** 2)


def add_out_of_bounds(x):
    return jnp.sum(jnp.zeros(3).at[5].add(x[0]) + x[1])


def padded_segments(x):
    s = jax.ops.segment_sum(x**2, jnp.array([0, 5, 1, -1]), num_segments=3)
    return jnp.sum(s * jnp.array([1.0, 2.0, 3.0]))


def bincount_padded(x):  # through the imported jaxpr's scatter-add
    return jnp.sum(jnp.bincount(jnp.array([0, 1, 1, 3]), weights=x, length=2) ** 2)


@pytest.mark.parametrize(
    "f", [repeated_set, set_out_of_bounds, add_out_of_bounds, padded_segments, bincount_padded]
)
def test_a_dropped_or_overridden_write_takes_no_gradient(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-10, atol=1e-12)
    got, want = kt.jvp(f, (X,), (X,)), jax.jvp(f, (X,), (X,))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)


def repeated_multiply(x):
    return jnp.sum(jnp.ones(4).at[jnp.array([0, 0, 3, 5])].multiply(x) * jnp.arange(1.0, 5.0))


def test_multiply_at_repeated_indices():
    """The rule assumed distinct indices (and the value was computed with
    `unique_indices=True`): each update's gradient is now the product of
    the other factors at its index."""
    np.testing.assert_allclose(kt.jit(repeated_multiply)(X), repeated_multiply(X))
    step = 1e-6
    central = [
        (repeated_multiply(X + step * e) - repeated_multiply(X - step * e)) / (2 * step)
        for e in np.eye(4)
    ]
    np.testing.assert_allclose(kt.grad(repeated_multiply)(X), central, rtol=1e-7, atol=1e-8)
