"""Shared measuring helpers for the benchmarks.

`compare(contenders, repeats)` runs each contender once (first call:
transform + trace + compile), checks nothing, then alternates the steady-state
runs so that machine noise hits all contenders alike, and reports medians.
"""

from __future__ import annotations

import platform
import statistics
import time

import jax


def timed(fn, args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def compare(contenders: dict, repeats: int) -> dict:
    """name -> {first_call_s, median_s} for `contenders`: name -> (fn, args)."""
    results = {name: {"first_call_s": timed(fn, args)} for name, (fn, args) in contenders.items()}
    samples = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (fn, args) in contenders.items():
            samples[name].append(timed(fn, args))
    for name, times in samples.items():
        results[name]["median_s"] = statistics.median(times)
    return results


def round_ratios(times: dict, ours: str, peer: str) -> tuple[float, list[float]]:
    """The median of the per-round ratios `ours` / `peer` (contenders timed
    alternately, one entry per round) and their spread [min, max]."""
    ratios = [a / b for a, b in zip(times[ours], times[peer], strict=True)]
    return statistics.median(ratios), [min(ratios), max(ratios)]


def medians_ms(times: dict) -> dict:
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def memory(jitted, args) -> dict:
    """XLA's compile-time memory estimate of `jitted` on `args` (bytes)."""
    stats = jitted.lower(*args).compile().memory_analysis()
    if stats is None:
        return {}
    parts = {
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
    }
    return {**parts, "total_bytes": sum(parts.values())}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }
