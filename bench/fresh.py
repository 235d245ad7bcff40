"""Fresh gradient objects in a loop: `kt.grad(f)(x)` made anew at each call.

GradBench's `hello` eval (and much user code) writes `grad(square)(x)` inside
the loop that calls it, so every call makes a new gradient object. JAX's
`jax.grad(f)(x)` then costs one eager trace; k_transform used to parse,
transform, generate code and compile again for every new object (88-330 ms;
issue 29). Gradient objects with the same function and options now share one
program (`grad.GradFunction`, checked by the function's guards), so a fresh
object costs a cache look-up and the call.

Contenders, alternated round by round: `kt.grad(f)(x)` (graph mode, the
default) and `jax.grad(f)(x)` (eager, as written), both made afresh per call;
also `jax.jit(jax.grad(f))(x)` made afresh (JAX re-traces and reuses its
compile cache). Reported: the median of per-round ratios kt / JAX and their
spread (min, max). Goal: about what `jax.grad(f)(x)` costs (<= 1.1).

    python -m bench.run fresh      # writes bench/results/fresh.json
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

import k_transform as kt
from bench.common import machine, medians_ms, round_ratios

ROUNDS = 15
CALLS = 20  # fresh gradient objects per round


def square(x):
    return x * x


def mlp_loss(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * h)


CASES = {
    "hello_square": (square, (jnp.array(3.0),)),
    "mlp_loss": (mlp_loss, (jnp.ones((16, 8)) * 0.1, jnp.ones((4, 16)))),
}


def _per_call(make, fn, args) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        jax.block_until_ready(make(fn)(*args))
    return (time.perf_counter() - start) / CALLS


def run() -> dict:
    makers = {
        "kt.grad": lambda f: kt.grad(f),
        "jax.grad": lambda f: jax.grad(f),
        "jax.jit(jax.grad)": lambda f: jax.jit(jax.grad(f)),
    }
    results = {"machine": machine(), "rounds": ROUNDS, "calls_per_round": CALLS, "cases": {}}
    for case, (fn, args) in CASES.items():
        for make in makers.values():
            _per_call(make, fn, args)  # first call: transform, trace, compile
        times = {name: [] for name in makers}
        for _ in range(ROUNDS):
            for name, make in makers.items():
                times[name].append(_per_call(make, fn, args))
        ratio, spread = round_ratios(times, "kt.grad", "jax.grad")
        results["cases"][case] = {
            "median_ms": medians_ms(times),
            "ratio_kt_over_jax_grad": ratio,
            "ratio_spread": spread,
        }
    return results


def summary(results: dict) -> str:
    lines = ["fresh gradient objects per call (ms; ratio kt / jax.grad, median [min, max])"]
    for case, r in results["cases"].items():
        ms = ", ".join(f"{n} {v:.3f}" for n, v in r["median_ms"].items())
        (lo, hi), ratio = r["ratio_spread"], r["ratio_kt_over_jax_grad"]
        lines.append(f"  {case}: {ms}; ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}]")
    return "\n".join(lines)
