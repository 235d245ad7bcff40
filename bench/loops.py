"""Gradient time and memory of loops: k_transform vs `jax.grad` of `lax.scan`.

Two programs, each iterating `y <- y + 0.01 * sin(y) * x` n times on a
float32 vector of SIZE entries, for n in 10, 100, 1,000, 10,000 and 100,000:

- `while_program(x, stop)`: a `while` whose condition is traced (`t < stop`,
  stop a traced float), so k_transform stores each iteration's carry in a
  buffer whose bound grows (x8 over the trip count) and retraces;
- `for_program(x, n)`: `for _ in range(n)` with a static n (a `lax.scan`
  under jit once n > 8).

Checkpointed loops (`checkpointed` in the results): the same `while` under the
user's own `jax.jit(kt.grad(...))`, which cannot retrace, so it keeps at most
`loop_bound` (1,024) + 64 checkpoints and recomputes the rest
(`k_transform/control/checkpoint.py`), for n up to 1,000,000 on a vector of
CKPT_SIZE entries: time, XLA's memory estimate, and the recompute factor
(iterations run in all / n: forward, recomputation and reverse count 1 each
per iteration in a store-everything scan, i.e. 2.0), against the scan storing
every carry (median of per-round ratios and their spread; at 1,000,000
only compiled for its memory estimate, not run).

The baselines are `jax.jit(jax.grad(scan_program))` and
`jax.jit(jax.grad(fori_program))`, the same iteration written with
`lax.scan` and with `lax.fori_loop` (static bounds: JAX reverse-differentiates
no other); against the latter each k_transform contender reports the median
of per-round ratios and their spread (`round_ratio_vs_fori`, goal 1.1) and
its first call's ratio (goal 1.5). Times are medians over REPEATS calls, alternating between
the contenders so drift hits all of them alike; `first_call_s` includes
tracing and compiling (and, for the while loop, the retraces while its bound
grows). Memory is XLA's compiled-memory estimate (`memory_analysis()` of the
lowered jitted function: arguments + outputs + temporaries), and the device's
`peak_bytes_in_use` where the backend reports it (GPU; process-wide, so it
only ever grows across the run).

    python -m bench.run loops      # writes bench/results/loops.json
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import k_transform as kt
from bench.common import memory, round_ratios

SIZE = 1024
TRIP_COUNTS = (10, 100, 1_000, 10_000, 100_000)
CKPT_SIZE = 64
CKPT_TRIP_COUNTS = (10, 5_000, 100_000, 1_000_000)
# a cap for a short lease (the GPU runs): KT_BENCH_MAX_TRIPS=100000 leaves out 1,000,000
MAX_TRIPS = int(os.environ.get("KT_BENCH_MAX_TRIPS", 10**9))
REPEATS = 7


def while_program(x, stop):
    y = x
    t = stop * 0.0
    while t < stop:
        y = y + 0.01 * jnp.sin(y) * x
        t = t + 1.0
    return jnp.sum(y * y)


def while_program_user_jit(x, stop):
    """`while_program` again: its loop's bound is its own (the trip-count cases
    above grow `while_program`'s to 16,384 by retracing)."""
    y = x
    t = stop * 0.0
    while t < stop:
        y = y + 0.01 * jnp.sin(y) * x
        t = t + 1.0
    return jnp.sum(y * y)


def for_program(x, n):
    y = x
    for _ in range(n):
        y = y + 0.01 * jnp.sin(y) * x
    return jnp.sum(y * y)


def scan_program(x, n):
    def body(y, _):
        return y + 0.01 * jnp.sin(y) * x, None

    y, _ = lax.scan(body, x, None, length=n)
    return jnp.sum(y * y)


def fori_program(x, n):
    y = lax.fori_loop(0, n, lambda i, y: y + 0.01 * jnp.sin(y) * x, x)
    return jnp.sum(y * y)


def _timed(fn, args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def _device_peak() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def _contenders(n: int, x):
    """name -> (gradient function, its arguments, the same jitted for lowering)."""
    kt_while = kt.GradOperation()(while_program)
    kt_for = kt.GradOperation()(for_program)
    scan_grad = jax.jit(jax.grad(scan_program), static_argnums=1)
    fori_grad = jax.jit(jax.grad(fori_program), static_argnums=1)
    stop = jnp.float32(n)
    return {
        "kt_while": (kt_while, (x, stop), jax.jit(kt_while)),
        "kt_for_range": (kt_for, (x, n), jax.jit(kt_for, static_argnums=1)),
        "jax_scan": (scan_grad, (x, n), scan_grad),
        "jax_fori_loop": (fori_grad, (x, n), fori_grad),
    }


def bench_trip_count(n: int, x) -> dict:
    contenders = _contenders(n, x)
    results = {
        name: {"first_call_s": _timed(fn, args)} for name, (fn, args, _) in contenders.items()
    }
    want = np.asarray(contenders["jax_scan"][0](x, n))
    for name, (fn, args, _) in contenders.items():
        np.testing.assert_allclose(np.asarray(fn(*args)), want, rtol=1e-3, atol=1e-4)
        results[name]["times_s"] = []
    for _ in range(REPEATS):
        for name, (fn, args, _) in contenders.items():
            results[name]["times_s"].append(_timed(fn, args))
    for name, (_, args, jitted) in contenders.items():
        r = results[name]
        r["median_s"] = statistics.median(r["times_s"])
        r["memory"] = memory(jitted, args)
        r["device_peak_bytes"] = _device_peak()
    base = results["jax_scan"]
    times = {name: r["times_s"] for name, r in results.items()}
    for name in ("kt_while", "kt_for_range"):
        r = results[name]
        r["time_ratio_vs_scan"] = r["median_s"] / base["median_s"]
        r["round_ratio_vs_fori"], r["round_ratio_spread"] = round_ratios(
            times, name, "jax_fori_loop"
        )
        r["first_call_ratio_vs_fori"] = r["first_call_s"] / results["jax_fori_loop"]["first_call_s"]
        if r["memory"] and base["memory"]:
            r["memory_ratio_vs_scan"] = r["memory"]["total_bytes"] / base["memory"]["total_bytes"]
    return results


def bench_checkpointed(n: int, x) -> dict:
    """The user's jax.jit of kt's gradient of the `while` vs the scan."""
    kt_user = jax.jit(kt.GradOperation()(while_program_user_jit))
    scan_grad = jax.jit(jax.grad(scan_program), static_argnums=1)
    stop = jnp.float32(n)
    results = {
        "kt_user_jit": {"first_call_s": _timed(kt_user, (x, stop))},
        "jax_scan": {"memory": memory(scan_grad, (x, n))},
    }
    run_scan = n <= 100_000
    if run_scan:
        results["jax_scan"]["first_call_s"] = _timed(scan_grad, (x, n))
        want = np.asarray(scan_grad(x, n))
        np.testing.assert_allclose(np.asarray(kt_user(x, stop)), want, rtol=1e-3, atol=1e-4)
    repeats = 5 if n >= 100_000 else REPEATS
    times = {"kt_user_jit": [], "jax_scan": []}
    for _ in range(repeats):
        times["kt_user_jit"].append(_timed(kt_user, (x, stop)))
        if run_scan:
            times["jax_scan"].append(_timed(scan_grad, (x, n)))
    bounds = kt.runtime.bounds  # the recompute count, from a copy traced to report it
    with bounds.tracking_recompute():
        bounds.recompute_stats.clear()
        jax.block_until_ready(jax.jit(kt.GradOperation()(while_program_user_jit))(x, stop))
        jax.effects_barrier()  # the report is a host callback (asynchronous on a GPU)
    ((trips, recomputed),) = bounds.recompute_stats.values()
    kt_r = results["kt_user_jit"]
    kt_r["median_s"] = statistics.median(times["kt_user_jit"])
    kt_r["memory"] = memory(kt_user, (x, stop))
    kt_r["recomputed_iterations"] = recomputed
    kt_r["recompute_factor"] = (2 * trips + recomputed) / max(trips, 1)
    base = results["jax_scan"]
    if run_scan:
        base["median_s"] = statistics.median(times["jax_scan"])
        kt_r["time_ratio_vs_scan"] = kt_r["median_s"] / base["median_s"]
        kt_r["round_ratio_vs_scan"], kt_r["round_ratio_spread"] = round_ratios(
            times, "kt_user_jit", "jax_scan"
        )
    if kt_r["memory"] and base["memory"]:
        kt_r["memory_ratio_vs_scan"] = kt_r["memory"]["total_bytes"] / base["memory"]["total_bytes"]
    return results


def run() -> dict:
    kt.set_mode("graph")
    x = jnp.asarray(np.random.RandomState(0).uniform(-1.0, 1.0, SIZE), jnp.float32)
    start = time.perf_counter()
    by_n = {str(n): bench_trip_count(n, x) for n in TRIP_COUNTS if n <= MAX_TRIPS}
    small = x[:CKPT_SIZE] * 0.1
    checkpointed = {
        str(n): bench_checkpointed(n, small) for n in CKPT_TRIP_COUNTS if n <= MAX_TRIPS
    }
    return {
        "benchmark": "loops",
        "size": SIZE,
        "repeats": REPEATS,
        "device": str(jax.devices()[0]),
        "jax_version": jax.__version__,
        "python": platform.python_version(),
        "wall_s": time.perf_counter() - start,
        "trip_counts": by_n,
        "checkpointed": checkpointed,
    }


def summary(results: dict) -> str:
    """A table of the results, for the terminal."""
    lines = [f"{'n':>6} {'contender':<13} {'median ms':>10} {'first s':>8} {'memory MiB':>11}"]
    for n, by_name in results["trip_counts"].items():
        for name, r in by_name.items():
            mem = r["memory"].get("total_bytes", float("nan")) / 2**20
            ratio = ""
            if "round_ratio_vs_fori" in r:
                lo, hi = r["round_ratio_spread"]
                ratio = (
                    f"  vs fori_loop {r['round_ratio_vs_fori']:.2f} [{lo:.2f}, {hi:.2f}], "
                    f"first call {r['first_call_ratio_vs_fori']:.2f}"
                )
            lines.append(
                f"{n:>6} {name:<13} {r['median_s'] * 1e3:>10.3f} "
                f"{r['first_call_s']:>8.2f} {mem:>11.2f}{ratio}"
            )
    lines.append(
        f"{'n':>8} checkpointed  {'kt ms':>9} {'scan ms':>9} {'kt MiB':>8} "
        f"{'scan MiB':>9} {'recompute':>9}  kt/scan per round [min, max]"
    )
    for n, r in results.get("checkpointed", {}).items():
        k, b = r["kt_user_jit"], r["jax_scan"]
        scan_ms = b.get("median_s", float("nan")) * 1e3
        lines.append(
            f"{n:>8} {'':12} {k['median_s'] * 1e3:>9.1f} {scan_ms:>9.1f} "
            f"{k['memory'].get('total_bytes', 0) / 2**20:>8.2f} "
            f"{b['memory'].get('total_bytes', 0) / 2**20:>9.2f} {k['recompute_factor']:>9.2f}"
            + _round_ratio(k)
        )
    return "\n".join(lines)


def _round_ratio(r: dict) -> str:
    if "round_ratio_vs_scan" not in r:
        return ""
    lo, hi = r["round_ratio_spread"]
    return f"  {r['round_ratio_vs_scan']:.2f} [{lo:.2f}, {hi:.2f}]"


if __name__ == "__main__":
    from bench.run import main

    main(["loops"])
