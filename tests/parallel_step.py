"""Data-parallel training with k_transform gradients on 8 simulated CPU devices.

Run as a script (tests/test_parallel.py starts it in a subprocess, because the
device count must be fixed before jax is imported):

    python tests/parallel_step.py

The training step is a pure function of the parameter arrays and the batch,
jitted with `jax.jit`; the batch is sharded over a 1-D mesh ('data',) and the
parameters are replicated. k_transform only generates the JAX program for the
gradient; XLA's SPMD partitioner inserts the cross-device reductions. The
final parameters must match the same loop run on one device, and the same
loop with `jax.grad` as the oracle. Also checks per-example gradients with
`jax.vmap` over a k_transform gradient function. Prints "PARALLEL OK".
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import k_transform as kt  # noqa: E402

N_DEVICES = 8
BATCH, N_IN, N_HIDDEN, N_OUT = 32, 6, 16, 3
LR = 0.1
STEPS = 5
TOL = 1e-5


def loss(w1, b1, w2, b2, x, y):
    """Mean squared error of a two-layer tanh MLP over a batch."""
    h = jnp.tanh(x @ w1 + b1)
    out = h @ w2 + b2
    return jnp.mean((out - y) ** 2)


def loss_single(w1, b1, w2, b2, x, y):
    """The same loss for one example (x: (N_IN,), y: (N_OUT,))."""
    h = jnp.tanh(x @ w1 + b1)
    out = h @ w2 + b2
    return jnp.sum((out - y) ** 2)


kt_grad = kt.grad(loss, grad_position=(0, 1, 2, 3))
_kt_all = kt.GradOperation(get_all=True)(loss)  # gradients for all six inputs


def kt_grad_all(*args):
    return _kt_all(*args)[:4]


ref_grad = jax.grad(loss, argnums=(0, 1, 2, 3))


def make_step(grad_fn):
    @jax.jit
    def step(params, x, y):
        grads = grad_fn(*params, x, y)
        new = tuple(p - LR * g for p, g in zip(params, grads, strict=True))
        return new, loss(*params, x, y), grads

    return step


def init_params(seed=0):
    rng = np.random.RandomState(seed)
    return (
        jnp.asarray(rng.randn(N_IN, N_HIDDEN).astype(np.float32) * 0.5),
        jnp.asarray(rng.randn(N_HIDDEN).astype(np.float32) * 0.1),
        jnp.asarray(rng.randn(N_HIDDEN, N_OUT).astype(np.float32) * 0.5),
        jnp.asarray(rng.randn(N_OUT).astype(np.float32) * 0.1),
    )


def make_batches(seed=1):
    rng = np.random.RandomState(seed)
    return [
        (
            rng.randn(BATCH, N_IN).astype(np.float32),
            rng.randn(BATCH, N_OUT).astype(np.float32),
        )
        for _ in range(STEPS)
    ]


def train(step, params, batches, put_batch=None, put_params=None):
    if put_params is not None:
        params = put_params(params)
    losses = []
    last_grads = None
    for x, y in batches:
        x, y = jnp.asarray(x), jnp.asarray(y)
        if put_batch is not None:
            x, y = put_batch(x), put_batch(y)
        params, value, last_grads = step(params, x, y)
        losses.append(float(value))
    return params, losses, last_grads


def assert_close(a, b, what):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), what
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=TOL, atol=TOL, err_msg=what)


def check_data_parallel():
    devices = jax.devices()
    assert len(devices) == N_DEVICES, f"expected {N_DEVICES} CPU devices, got {devices}"
    mesh = Mesh(np.array(devices), ("data",))
    batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())

    def put_batch(a):
        return jax.device_put(a, batch_sharding)

    def put_params(ps):
        return tuple(jax.device_put(p, replicated) for p in ps)

    params0 = init_params()
    batches = make_batches()

    # The batch really is split across the 8 devices, one shard each.
    x0 = put_batch(jnp.asarray(batches[0][0]))
    assert x0.sharding.is_fully_replicated is False
    assert len(x0.sharding.device_set) == N_DEVICES
    assert {s.data.shape for s in x0.addressable_shards} == {(BATCH // N_DEVICES, N_IN)}

    kt_step = make_step(kt_grad)
    sharded, sharded_losses, sharded_grads = train(kt_step, params0, batches, put_batch, put_params)

    # Parameters, gradients and the loss come back replicated over the mesh.
    for p in (*sharded, *sharded_grads):
        assert p.sharding.is_fully_replicated, p.sharding
        assert len(p.sharding.device_set) == N_DEVICES
    # The compiled step is SPMD-partitioned: each device holds 1/8 of the batch
    # and XLA inserted a cross-device reduction for the gradients.
    hlo = kt_step.lower(put_params(params0), x0, put_batch(jnp.asarray(batches[0][1]))).compile()
    text = hlo.as_text()
    assert "all-reduce" in text, "expected an all-reduce in the sharded step"

    # Same loop, one device, no sharding at all.
    cpu0 = devices[0]
    single, single_losses, _ = train(
        kt_step,
        params0,
        batches,
        lambda a: jax.device_put(a, cpu0),
        lambda ps: tuple(jax.device_put(p, cpu0) for p in ps),
    )
    assert len(single[0].sharding.device_set) == 1
    assert_close(sharded, single, "sharded vs single-device parameters")
    np.testing.assert_allclose(sharded_losses, single_losses, rtol=TOL, atol=TOL)

    # Same loop, sharded, GradOperation(get_all=True) instead of kt.grad.
    via_op, _, _ = train(make_step(kt_grad_all), params0, batches, put_batch, put_params)
    assert_close(via_op, sharded, "GradOperation(get_all) vs kt.grad")

    # The oracle: jax.grad, sharded and on one device.
    ref_step = make_step(ref_grad)
    oracle, oracle_losses, _ = train(ref_step, params0, batches, put_batch, put_params)
    assert_close(sharded, oracle, "k_transform vs jax.grad (sharded)")
    oracle1, _, _ = train(ref_step, params0, batches)
    assert_close(single, oracle1, "k_transform vs jax.grad (single device)")
    np.testing.assert_allclose(sharded_losses, oracle_losses, rtol=TOL, atol=TOL)
    assert sharded_losses[-1] < sharded_losses[0], sharded_losses
    print("data parallel: losses", [round(v, 5) for v in sharded_losses])


def check_per_example():
    params = init_params(2)
    x, y = make_batches(3)[0]
    axes = (None, None, None, None, 0, 0)
    kt_pe = jax.vmap(kt.grad(loss_single, grad_position=(0, 1, 2, 3)), in_axes=axes)
    ref_pe = jax.vmap(jax.grad(loss_single, argnums=(0, 1, 2, 3)), in_axes=axes)
    got = kt_pe(*params, x, y)
    want = ref_pe(*params, x, y)
    assert got[0].shape == (BATCH, N_IN, N_HIDDEN), got[0].shape
    assert_close(got, want, "per-example gradients (vmap)")
    # Per-example gradients averaged over the batch equal the batch gradient.
    mean = tuple(g.mean(0) for g in got)
    batch = kt.grad(loss, grad_position=(0, 1, 2, 3))(*params, x, y)
    # loss is a mean over batch and outputs; loss_single sums over outputs.
    assert_close(tuple(g / N_OUT for g in mean), batch, "mean of per-example gradients")

    # Per-example gradients on the mesh: the vmapped batch axis is sharded.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    shard = NamedSharding(mesh, PartitionSpec("data"))
    xs, ys = jax.device_put(x, shard), jax.device_put(y, shard)
    got_sharded = jax.jit(kt_pe)(*params, xs, ys)
    assert_close(got_sharded, want, "per-example gradients (vmap, sharded)")
    assert not got_sharded[0].sharding.is_fully_replicated
    print("per-example: ok")


def main():
    check_data_parallel()
    check_per_example()
    print("PARALLEL OK")


if __name__ == "__main__":
    main()
