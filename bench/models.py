"""Steady-state gradient time and memory on small models: k_transform vs JAX.

Each case is one program differentiated two ways in the same process:
`jax.jit(kt.grad(f, grad_position=params))` against
`jax.jit(jax.grad(f, argnums=params))` (for the RNN the JAX side is the same
recurrence written with `lax.scan`, as a JAX user would). Gradients are
checked equal (allclose) before anything is timed. The four timed functions
(kt gradient, JAX gradient, kt forward = `jax.jit(kt.compile(f))`, JAX
forward = `jax.jit(f)`) run alternately, so machine noise hits all alike, and
medians are reported with the ratios:

- `grad_ratio`: kt gradient / JAX gradient medians (goal <= 1.05);
  `paired_grad_ratio`: the median of the per-round ratios (more robust when
  other processes load the machine);
- `kt_grad_over_fwd`, `jax_grad_over_fwd`: gradient / forward, each side;
- `memory_ratio`: XLA's compiled-memory estimate of the gradient
  (`memory_analysis()`: arguments + outputs + temporaries), kt / JAX.

Cases: a 3-layer MLP; a small CNN (k_transform has no convolution primitive
yet, so the 3x3 convolutions are im2col written with static slices,
`jnp.concatenate` and a matmul; pooling is reshape + max); an Elman RNN over
32 and 1,024 steps (a Python `for` over a static range: k_transform makes it
a `lax.scan` above 8 iterations); a chain of 40 elementwise functions
written out as 40 statements.

    python -m bench.run models      # writes bench/results/models.json
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import k_transform as kt
from bench.common import machine, memory, timed

TIME_BUDGET_S = 8.0  # steady-state timing budget per case (all four contenders)
MIN_REPEATS, MAX_REPEATS = 7, 200


# ----------------------------------------------------------------- programs


def mlp(w1, b1, w2, b2, w3, b3, x, labels):
    h = jnp.tanh(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    logits = h @ w3 + b3
    logp = logits - jax.nn.logsumexp(logits, axis=1, keepdims=True)
    return -jnp.mean(jnp.sum(logp * labels, axis=1))


def conv3x3(x, w):
    """'valid' 3x3 convolution of NHWC `x` with `w` of shape (9 * C_in, C_out), im2col."""
    h = x.shape[1] - 2
    v = x.shape[2] - 2
    patches = jnp.concatenate(
        [
            x[:, 0:h, 0:v, :],
            x[:, 0:h, 1 : v + 1, :],
            x[:, 0:h, 2 : v + 2, :],
            x[:, 1 : h + 1, 0:v, :],
            x[:, 1 : h + 1, 1 : v + 1, :],
            x[:, 1 : h + 1, 2 : v + 2, :],
            x[:, 2 : h + 2, 0:v, :],
            x[:, 2 : h + 2, 1 : v + 1, :],
            x[:, 2 : h + 2, 2 : v + 2, :],
        ],
        axis=3,
    )
    return patches @ w


def maxpool2(x):
    b, h, v, c = x.shape
    return jnp.max(jnp.reshape(x, (b, h // 2, 2, v // 2, 2, c)), axis=(2, 4))


def cnn(k1, c1, k2, c2, w3, b3, images, labels):
    h = jax.nn.relu(conv3x3(images, k1) + c1)
    h = maxpool2(h)
    h = jax.nn.relu(conv3x3(h, k2) + c2)
    h = maxpool2(h)
    h = jnp.reshape(h, (h.shape[0], -1))
    logits = h @ w3 + b3
    logp = logits - jax.nn.logsumexp(logits, axis=1, keepdims=True)
    return -jnp.mean(jnp.sum(logp * labels, axis=1))


def rnn_loop(w, u, b, xs, steps):
    h = jnp.zeros((xs.shape[1], w.shape[0]))
    loss = 0.0
    for t in range(steps):
        h = jnp.tanh(h @ w + xs[t] @ u + b)
        loss = loss + jnp.mean(h * h)
    return loss


def rnn_32(w, u, b, xs):
    return rnn_loop(w, u, b, xs, 32)


def rnn_1024(w, u, b, xs):
    return rnn_loop(w, u, b, xs, 1024)


def rnn_scan(w, u, b, xs):
    def step(carry, x):
        h, loss = carry
        h = jnp.tanh(h @ w + x @ u + b)
        return (h, loss + jnp.mean(h * h)), None

    h0 = jnp.zeros((xs.shape[1], w.shape[0]))
    (_, loss), _ = lax.scan(step, (h0, jnp.float32(0.0)), xs)
    return loss


def chain40(x):
    y0 = x
    y1 = jnp.sin(y0)
    y2 = jnp.tanh(1.5 * y1)
    y3 = y2 + 0.5 * jnp.cos(y2)
    y4 = jnp.exp(-0.5 * y3 * y3) + y3
    y5 = jnp.sqrt(y4 * y4 + 1.0)
    y6 = jnp.log(1.0 + y5 * y5) - y5
    y7 = y6 * jax.nn.sigmoid(y6)
    y8 = jnp.maximum(y7, 0.1 * y7)
    y9 = jnp.sin(y8)
    y10 = jnp.tanh(1.5 * y9)
    y11 = y10 + 0.5 * jnp.cos(y10)
    y12 = jnp.exp(-0.5 * y11 * y11) + y11
    y13 = jnp.sqrt(y12 * y12 + 1.0)
    y14 = jnp.log(1.0 + y13 * y13) - y13
    y15 = y14 * jax.nn.sigmoid(y14)
    y16 = jnp.maximum(y15, 0.1 * y15)
    y17 = jnp.sin(y16)
    y18 = jnp.tanh(1.5 * y17)
    y19 = y18 + 0.5 * jnp.cos(y18)
    y20 = jnp.exp(-0.5 * y19 * y19) + y19
    y21 = jnp.sqrt(y20 * y20 + 1.0)
    y22 = jnp.log(1.0 + y21 * y21) - y21
    y23 = y22 * jax.nn.sigmoid(y22)
    y24 = jnp.maximum(y23, 0.1 * y23)
    y25 = jnp.sin(y24)
    y26 = jnp.tanh(1.5 * y25)
    y27 = y26 + 0.5 * jnp.cos(y26)
    y28 = jnp.exp(-0.5 * y27 * y27) + y27
    y29 = jnp.sqrt(y28 * y28 + 1.0)
    y30 = jnp.log(1.0 + y29 * y29) - y29
    y31 = y30 * jax.nn.sigmoid(y30)
    y32 = jnp.maximum(y31, 0.1 * y31)
    y33 = jnp.sin(y32)
    y34 = jnp.tanh(1.5 * y33)
    y35 = y34 + 0.5 * jnp.cos(y34)
    y36 = jnp.exp(-0.5 * y35 * y35) + y35
    y37 = jnp.sqrt(y36 * y36 + 1.0)
    y38 = jnp.log(1.0 + y37 * y37) - y37
    y39 = y38 * jax.nn.sigmoid(y38)
    y40 = jnp.maximum(y39, 0.1 * y39)
    return jnp.sum(y40)


# ------------------------------------------------------------------- inputs


def _f32(rng, *shape, scale=1.0):
    return jnp.asarray(rng.standard_normal(shape) * scale, jnp.float32)


def _one_hot(rng, n, k):
    return jnp.asarray(np.eye(k, dtype=np.float32)[rng.integers(0, k, n)])


def mlp_args(rng, batch=128, sizes=(784, 256, 256, 10)):
    params = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        params += [_f32(rng, a, b, scale=1 / np.sqrt(a)), _f32(rng, b, scale=0.1)]
    return (*params, _f32(rng, batch, sizes[0]), _one_hot(rng, batch, sizes[-1]))


def cnn_args(rng, batch=32, size=18, c0=3, c1=16, c2=32):
    # 18 -conv-> 16 -pool-> 8 -conv-> 6 -pool-> 3
    return (
        _f32(rng, 9 * c0, c1, scale=1 / np.sqrt(9 * c0)),
        _f32(rng, c1, scale=0.1),
        _f32(rng, 9 * c1, c2, scale=1 / np.sqrt(9 * c1)),
        _f32(rng, c2, scale=0.1),
        _f32(rng, 3 * 3 * c2, 10, scale=1 / np.sqrt(9 * c2)),
        _f32(rng, 10, scale=0.1),
        _f32(rng, batch, size, size, c0),
        _one_hot(rng, batch, 10),
    )


def rnn_args(rng, steps, batch=16, hidden=128, inputs=32):
    return (
        _f32(rng, hidden, hidden, scale=1 / np.sqrt(hidden)),
        _f32(rng, inputs, hidden, scale=1 / np.sqrt(inputs)),
        _f32(rng, hidden, scale=0.1),
        _f32(rng, steps, batch, inputs),
    )


# ------------------------------------------------------------------ harness


def check_close(got, want, rtol=1e-4, atol=1e-5) -> float:
    """Raise unless the gradient trees agree; return the largest abs difference."""
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), (len(got_leaves), len(want_leaves))
    worst = 0.0
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        worst = max(worst, float(np.max(np.abs(g - w))) if g.size else 0.0)
    return worst


def alternate(contenders: dict, budget_s: float = TIME_BUDGET_S) -> dict:
    """name -> median seconds; `contenders`: name -> (fn, args), all already warm."""
    one_round = sum(timed(fn, args) for fn, args in contenders.values())
    repeats = int(min(MAX_REPEATS, max(MIN_REPEATS, budget_s / max(one_round, 1e-9))))
    samples = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (fn, args) in contenders.items():
            samples[name].append(timed(fn, args))
    medians = {name: statistics.median(t) for name, t in samples.items()}
    if "kt_grad" in samples and "jax_grad" in samples:
        paired = [k / j for k, j in zip(samples["kt_grad"], samples["jax_grad"], strict=True)]
        medians["paired_grad_ratio"] = statistics.median(paired)
    return medians | {"repeats": repeats}


def bench_case(f, args, n_params, jax_f=None, rtol=1e-4, atol=1e-5, budget_s=TIME_BUDGET_S):
    """Time and measure kt vs JAX gradients of `f` w.r.t. its first `n_params` inputs.

    `jax_f` is the JAX side's program (default: `f` itself)."""
    jax_f = jax_f or f
    positions = tuple(range(n_params))
    start = time.perf_counter()
    kt_grad = jax.jit(kt.grad(f, grad_position=positions))
    jax_grad = jax.jit(jax.grad(jax_f, argnums=positions))
    kt_fwd = jax.jit(kt.compile(f))
    jax_fwd = jax.jit(jax_f)
    first = {
        name: timed(fn, args)
        for name, fn in (
            ("kt_grad", kt_grad),
            ("jax_grad", jax_grad),
            ("kt_fwd", kt_fwd),
            ("jax_fwd", jax_fwd),
        )
    }
    np.testing.assert_allclose(
        np.asarray(kt_fwd(*args)), np.asarray(jax_fwd(*args)), rtol=rtol, atol=atol
    )
    max_abs_diff = check_close(kt_grad(*args), jax_grad(*args), rtol, atol)
    medians = alternate(
        {
            "kt_grad": (kt_grad, args),
            "jax_grad": (jax_grad, args),
            "kt_fwd": (kt_fwd, args),
            "jax_fwd": (jax_fwd, args),
        },
        budget_s,
    )
    kt_mem, jax_mem = memory(kt_grad, args), memory(jax_grad, args)
    out = {
        "median_s": {k: medians[k] for k in ("kt_grad", "jax_grad", "kt_fwd", "jax_fwd")},
        "first_call_s": first,
        "repeats": medians["repeats"],
        "grad_max_abs_diff": max_abs_diff,
        "grad_ratio": medians["kt_grad"] / medians["jax_grad"],
        "paired_grad_ratio": medians["paired_grad_ratio"],
        "fwd_ratio": medians["kt_fwd"] / medians["jax_fwd"],
        "kt_grad_over_fwd": medians["kt_grad"] / medians["kt_fwd"],
        "jax_grad_over_fwd": medians["jax_grad"] / medians["jax_fwd"],
        "kt_memory": kt_mem,
        "jax_memory": jax_mem,
        "case_wall_s": None,
    }
    if kt_mem and jax_mem:
        out["memory_ratio"] = kt_mem["total_bytes"] / jax_mem["total_bytes"]
    out["case_wall_s"] = time.perf_counter() - start
    return out


def cases() -> dict:
    rng = np.random.default_rng(0)
    return {
        "mlp_784-256-256-10_b128": (mlp, mlp_args(rng), 6, None),
        "cnn_im2col_18x18x3_b32": (cnn, cnn_args(rng), 6, None),
        "rnn_32_steps_h128_b16": (rnn_32, rnn_args(rng, 32), 3, rnn_scan),
        "rnn_1024_steps_h128_b16": (rnn_1024, rnn_args(rng, 1024), 3, rnn_scan),
        "chain40_elementwise_n65536": (chain40, (_f32(rng, 1 << 16),), 1, None),
    }


def run() -> dict:
    kt.set_mode("graph")
    start = time.perf_counter()
    results = {}
    for name, (f, args, n_params, jax_f) in cases().items():
        results[name] = bench_case(f, args, n_params, jax_f, rtol=1e-3, atol=1e-4)
        print(f"  {name}: {results[name]['case_wall_s']:.1f} s", flush=True)
    return {
        "benchmark": "models",
        "machine": machine(),
        "cases": results,
        "wall_s": time.perf_counter() - start,
    }


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def _mib(mem: dict) -> str:
    return f"{mem['total_bytes'] / 2**20:.2f}" if mem else "n/a"


def summary(results: dict) -> str:
    lines = [
        "| case | kt grad ms | JAX grad ms | grad ratio | paired ratio | kt grad/fwd "
        "| JAX grad/fwd | kt mem MiB | JAX mem MiB | mem ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["cases"].items():
        m = r["median_s"]
        lines.append(
            f"| {name} | {_ms(m['kt_grad'])} | {_ms(m['jax_grad'])} | {r['grad_ratio']:.3f} "
            f"| {r['paired_grad_ratio']:.3f} "
            f"| {r['kt_grad_over_fwd']:.2f} | {r['jax_grad_over_fwd']:.2f} "
            f"| {_mib(r['kt_memory'])} | {_mib(r['jax_memory'])} "
            f"| {r.get('memory_ratio', float('nan')):.3f} |"
        )
    lines.append(f"wall: {results['wall_s']:.1f} s")
    return "\n".join(lines)
