"""Data parallelism and per-example gradients with k_transform gradients.

The sharded training check runs tests/parallel_step.py in a subprocess: it
needs 8 simulated CPU devices, and XLA_FLAGS must be set before jax is
imported. Per-example gradients (jax.vmap over a k_transform gradient
function) are checked in process against jax.vmap(jax.grad(...)).
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt

SCRIPT = Path(__file__).with_name("parallel_step.py")
ROOT = SCRIPT.parent.parent


def close(a, b, tol=1e-5):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


def test_sharded_training_matches_single_device_and_jax():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    if proc.returncode != 0 or "PARALLEL OK" not in proc.stdout:
        print(proc.stdout)
        print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "PARALLEL OK" in proc.stdout


# -- per-example gradients ------------------------------------------------------
RNG = np.random.RandomState(0)
W1 = jnp.asarray(RNG.randn(4, 5).astype(np.float32) * 0.5)
B1 = jnp.asarray(RNG.randn(5).astype(np.float32) * 0.1)
W2 = jnp.asarray(RNG.randn(5, 2).astype(np.float32) * 0.5)
XS = jnp.asarray(RNG.randn(7, 4).astype(np.float32))
YS = jnp.asarray(RNG.randn(7, 2).astype(np.float32))


def loss_single(w1, b1, w2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    return jnp.sum((h @ w2 - y) ** 2)


def test_per_example_grad_vmap():
    axes = (None, None, None, 0, 0)
    got = jax.vmap(kt.grad(loss_single, grad_position=(0, 1, 2)), in_axes=axes)(W1, B1, W2, XS, YS)
    want = jax.vmap(jax.grad(loss_single, argnums=(0, 1, 2)), in_axes=axes)(W1, B1, W2, XS, YS)
    assert got[0].shape == (7, 4, 5)
    close(got, want)


def test_per_example_grad_vmap_under_jit():
    axes = (None, None, None, 0, 0)
    pe = jax.jit(jax.vmap(kt.GradOperation(get_all=True)(loss_single), in_axes=axes))
    want = jax.vmap(jax.grad(loss_single, argnums=(0, 1, 2, 3, 4)), in_axes=axes)(
        W1, B1, W2, XS, YS
    )
    close(pe(W1, B1, W2, XS, YS), want)


class Dense(kt.Cell):
    def __init__(self, w, b):
        super().__init__()
        self.weight = kt.Parameter(w)
        self.bias = kt.Parameter(b)

    def construct(self, x):
        return x @ self.weight + self.bias


class Net(kt.Cell):
    def __init__(self):
        super().__init__()
        self.l1 = Dense(W1, B1)
        self.w2 = kt.Parameter(W2)

    def construct(self, x, y):
        h = jnp.tanh(self.l1(x))
        return jnp.sum((h @ self.w2 - y) ** 2)


def test_per_example_grad_vmap_cell_get_by_list():
    net = Net()
    # trainable_params() lists a Cell's own Parameters before its sub-cells'
    # (w2 first); pass the order explicitly.
    params = kt.ParameterTuple([net.l1.weight, net.l1.bias, net.w2])
    assert {id(p) for p in params} == {id(p) for p in net.trainable_params()}
    grad_fn = kt.GradOperation(get_by_list=True)(net, params)
    got = jax.vmap(grad_fn)(XS, YS)
    want = jax.vmap(jax.grad(loss_single, argnums=(0, 1, 2)), in_axes=(None, None, None, 0, 0))(
        W1, B1, W2, XS, YS
    )
    assert got[0].shape == (7, 4, 5)
    close(got, want)
    # Parameters are read at call time, also under vmap.
    params[2].set_data(W2 * 2.0)
    got = jax.vmap(grad_fn)(XS, YS)
    want = jax.vmap(jax.grad(loss_single, argnums=(0, 1, 2)), in_axes=(None, None, None, 0, 0))(
        W1, B1, W2 * 2.0, XS, YS
    )
    close(got, want)
