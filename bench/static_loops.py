"""Static Python loops as users write them: `jit(kt.grad)` against
`jit(jax.grad)` of the same Python (JAX unrolls the loop while tracing).

Cases (issue 15, item 3): a 40-step elementwise chain on 4,096 floats, an
RNN of 32 steps (64 hidden units, `for t in range(xs.shape[0])`: the trip
count is known only when the loop runs) and a 200-step update on 1,024
floats, each at the default unroll budget and with the budget at 0 (every
loop longer than 8 trips a `lax.scan`: the policy before the budget).
Target: kt / JAX at most 1.05 in steady state. Each case runs `ROUNDS`
rounds of `REPEATS` alternated calls; its ratio is the median of the
per-round ratios of medians, with their [min, max] (a shared machine).

    python -m bench.run static_loops    # writes bench/results/static_loops.json
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from bench.common import compare, machine, round_ratios

REPEATS = 50
ROUNDS = 5


def chain40(x):
    y = x
    for _ in range(40):
        y = jnp.sin(y) * 1.01 + jnp.cos(y * 0.5)
    return jnp.sum(y)


def rnn32(w, xs):
    h = jnp.zeros(w.shape[0])
    for t in range(xs.shape[0]):
        h = jnp.tanh(w @ h + xs[t])
    return jnp.sum(h * h)


def loop200(x):
    y = x
    for _ in range(200):
        y = y + 0.01 * jnp.sin(y) * x
    return jnp.sum(y * y)


def cases() -> dict:
    key = jax.random.PRNGKey(0)
    k1, k2 = jax.random.split(key)
    return {
        "chain40": (chain40, (jax.random.normal(k1, (4096,)),)),
        "rnn32": (rnn32, (0.1 * jax.random.normal(k1, (64, 64)), jax.random.normal(k2, (32, 64)))),
        "loop200": (loop200, (jax.random.normal(k1, (1024,)),)),
    }


def bench_case(fn, args, budget: int) -> dict:
    old = kt.set_unroll_budget(budget)
    try:
        ours = jax.jit(kt.grad(fn))
        theirs = jax.jit(jax.grad(fn))
        np.testing.assert_allclose(ours(*args), theirs(*args), rtol=1e-4, atol=1e-5)
        ours, theirs = jax.jit(kt.grad(fn)), jax.jit(jax.grad(fn))  # fresh: first call timed
        contenders = {"k_transform": (ours, args), "jax": (theirs, args)}
        rounds = [compare(contenders, REPEATS) for _ in range(ROUNDS)]  # first call in round 0
    finally:
        kt.set_unroll_budget(old)
    medians = {n: [r[n]["median_s"] for r in rounds] for n in ("k_transform", "jax")}
    ratio, spread = round_ratios(medians, "k_transform", "jax")
    times = {n: {**rounds[0][n], "median_s": statistics.median(m)} for n, m in medians.items()}
    return {**times, "ratio": ratio, "spread": spread}


def run() -> dict:
    default = kt.set_unroll_budget(0)
    kt.set_unroll_budget(default)
    results = {"benchmark": "static_loops", "machine": machine(), "cases": {}}
    for name, (fn, args) in cases().items():
        results["cases"][name] = {
            f"budget_{default}": bench_case(fn, args, default),
            "budget_0": bench_case(fn, args, 0),
        }
    return results


def summary(results: dict) -> str:
    rows = [f"{'case':<10}{'budget':>12}{'kt ms':>10}{'jax ms':>10}{'kt/jax':>8}  [min, max]"]
    for name, by_budget in results["cases"].items():
        for budget, r in by_budget.items():
            kt_ms = r["k_transform"]["median_s"] * 1e3
            jax_ms = r["jax"]["median_s"] * 1e3
            lo, hi = r["spread"]
            rows.append(
                f"{name:<10}{budget:>12}{kt_ms:>10.3f}{jax_ms:>10.3f}{r['ratio']:>8.2f}"
                f"  [{lo:.2f}, {hi:.2f}]"
            )
    return "\n".join(rows)
