"""Derivatives at kinks follow the API they are spelled in. JAX and MindSpore
choose differently where a function has no derivative: `jnp.abs` at 0 is 1
in JAX and `ops.abs` 0 in MindSpore; `jnp.clip` at a bound splits the
gradient between x and the bound, MindSpore's `ops.clamp` gives it to x.
k_transform gave MindSpore's numbers to the JAX spellings (found on HIPS
autograd's ode_net: an L1 loss at an exact zero residual, 1/60 off). Oracles:
`jax.grad` for the JAX spellings, MindSpore 2.10's printed gradients for its
own (`ops.grad`, CPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.mindspore import Tensor, ops

X = jnp.array([0.0, 1.0, -1.0, 0.5, 2.0], jnp.float32)  # 0, and both of clip's bounds

JAX_SPELLINGS = {
    "jnp.abs": lambda x: jnp.sum(jnp.abs(x)),
    "np.abs": (lambda x: jnp.sum(np.abs(x)), lambda x: jnp.sum(jnp.abs(x))),
    "jnp.clip": lambda x: jnp.sum(jnp.clip(x, 0.0, 1.0)),
    "np.clip": (lambda x: jnp.sum(np.clip(x, 0.0, 1.0)), lambda x: jnp.sum(jnp.clip(x, 0.0, 1.0))),
    "jnp.clip, upper only": lambda x: jnp.sum(jnp.clip(x, None, 1.0)),
    "jnp.maximum": lambda x: jnp.sum(jnp.maximum(x, 0.0)),
    "jnp.minimum": lambda x: jnp.sum(jnp.minimum(x, 1.0)),
    "jax.nn.relu": lambda x: jnp.sum(jax.nn.relu(x)),
    "abs times x": lambda x: jnp.sum(jnp.abs(x) * jnp.clip(x, 0.0, 1.0)),
}


@pytest.mark.parametrize("name", list(JAX_SPELLINGS))
def test_jax_spellings_give_jaxs_derivative_at_a_kink(name):
    ours = JAX_SPELLINGS[name]
    ours, oracle = ours if isinstance(ours, tuple) else (ours, ours)  # (numpy's: on jnp)
    np.testing.assert_allclose(kt.grad(ours)(X), jax.grad(oracle)(X), rtol=1e-6)


def test_clip_with_equal_bounds_and_their_gradients():
    def f(x, lo, hi):
        return jnp.sum(jnp.clip(x, lo, hi) ** 2)

    for point in [(0.5, 0.5, 0.5), (0.5, 0.5, 1.0), (1.0, 0.5, 1.0)]:
        got = kt.grad(f, argnums=(0, 1, 2))(*point)
        np.testing.assert_allclose(got, jax.grad(f, argnums=(0, 1, 2))(*point), rtol=1e-6)


def test_second_order_at_a_bound():
    def f(x):
        return jnp.sum(jnp.clip(x, 0.0, 1.0) ** 2 + jnp.abs(x) * x)

    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-6, atol=1e-6)


# MindSpore 2.10 (CPU) printed these for ops.grad at [0, 1, -1, 0.5, 2]
MINDSPORE = {
    "ops.abs": (lambda x: ops.abs(x).sum(), [0.0, 1.0, -1.0, 1.0, 1.0]),
    "ops.clamp": (lambda x: ops.clamp(x, 0.0, 1.0).sum(), [1.0, 1.0, 0.0, 1.0, 0.0]),
    "ops.maximum": (
        lambda x: ops.maximum(x, Tensor(np.zeros(5, np.float32))).sum(),
        [0.5, 1.0, 0.0, 1.0, 1.0],
    ),
}


@pytest.mark.parametrize("name", list(MINDSPORE))
def test_mindspore_spellings_give_mindspores_derivative_at_a_kink(name):
    f, printed = MINDSPORE[name]
    got = ops.grad(f)(Tensor(np.asarray(X)))
    np.testing.assert_allclose(
        np.asarray(got.asnumpy() if hasattr(got, "asnumpy") else got), printed
    )
