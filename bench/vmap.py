"""`jax.vmap` inside a loss: GradBench's `ode` and `llsq` shapes (issue 29).

`llsq`: a least-squares loss whose residuals are `jax.vmap(residual)` over
the samples, `residual` a closure over the coefficients being fitted.
`ode`: an RK4 integration whose vector field is `jax.vmap(lane)` over the
components, `lane` a closure over the parameters. Before, k_transform read
`jax.vmap` as a loop (a `lax.scan` under jit: 5-350x JAX); it is now one
batched call of the closure's generated code, closure-converted
(`frontend/batching.py`), differentiated through its batched jaxpr.

Contenders, alternated round by round: `kt.jit(kt.grad(loss))` and
`jax.jit(jax.grad(loss))` on the same Python. Reported per case: first call
(s) and median steady time (ms) of each, and the median of per-round ratios
kt / JAX with its spread (min, max). Goal: the ratio of the same code
without vmap (`llsq_plain`, the residuals broadcast; about 1.0).

    python -m bench.run vmap       # writes bench/results/vmap.json
"""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
from jax import lax

import k_transform as kt
from bench.common import machine, medians_ms, round_ratios, timed

ROUNDS = 15
CALLS = 5  # calls per round and contender


def llsq_loss(coef, n):
    def residual(i):
        t = -1.0 + 2.0 * i / (n.shape[0] - 1.0)
        powers = jnp.cumprod(jnp.full(coef.shape[0], t).at[0].set(1.0))
        return (jnp.sign(t) - jnp.sum(coef * powers)) ** 2

    return 0.5 * jnp.sum(jax.vmap(residual)(n))


def llsq_plain_loss(coef, n):
    """`llsq_loss` without vmap (the residuals broadcast): the goal's reference."""
    t = -1.0 + 2.0 * n / (n.shape[0] - 1.0)
    columns = jnp.broadcast_to(t[:, None], (n.shape[0], coef.shape[0])).at[:, 0].set(1.0)
    powers = jnp.cumprod(columns, axis=1)
    return 0.5 * jnp.sum((jnp.sign(t) - powers @ coef) ** 2)


def ode_loss(x, steps):
    def field(y):
        def lane(k, xk, y_prev):
            return jnp.where(k == 0, xk, xk * y_prev)

        return jax.vmap(lane)(jnp.arange(x.shape[0]), x, jnp.roll(y, 1))

    dt = 1.5 / steps.shape[0]

    def step(y, _):
        a = field(y)
        b = field(y + dt / 2 * a)
        c = field(y + dt / 2 * b)
        d = field(y + dt * c)
        return y + dt / 6 * (a + 2 * b + 2 * c + d), None

    y, _ = lax.scan(step, jnp.zeros_like(x), steps)
    return jnp.sum(y)


def _cases() -> dict:
    cases = {}
    for n in (32, 1024):
        args = (jnp.linspace(0.1, 0.5, 8), jnp.arange(float(n)))
        cases[f"llsq_n{n}"] = (llsq_loss, args)
        cases[f"llsq_plain_n{n}"] = (llsq_plain_loss, args)
    for n in (10, 100, 1000):
        cases[f"ode_n{n}"] = (ode_loss, (jnp.linspace(0.2, 0.9, n), jnp.zeros(64)))
    return cases


def _per_call(fn, args) -> float:
    return statistics.median(timed(fn, args) for _ in range(CALLS))


def run() -> dict:
    results = {"machine": machine(), "rounds": ROUNDS, "calls_per_round": CALLS, "cases": {}}
    for case, (loss, args) in _cases().items():
        contenders = {
            "kt.jit(kt.grad)": kt.jit(kt.grad(loss)),
            "jax.jit(jax.grad)": jax.jit(jax.grad(loss)),
        }
        first = {name: timed(fn, args) for name, fn in contenders.items()}
        times = {name: [] for name in contenders}
        for _ in range(ROUNDS):
            for name, fn in contenders.items():
                times[name].append(_per_call(fn, args))
        ratio, spread = round_ratios(times, "kt.jit(kt.grad)", "jax.jit(jax.grad)")
        results["cases"][case] = {
            "first_call_s": first,
            "median_ms": medians_ms(times),
            "ratio_kt_over_jax": ratio,
            "ratio_spread": spread,
        }
    return results


def summary(results: dict) -> str:
    lines = ["jax.vmap inside a loss (ms; ratio kt / jax, median [min, max])"]
    for case, r in results["cases"].items():
        ms = ", ".join(f"{n} {v:.3f}" for n, v in r["median_ms"].items())
        (lo, hi), ratio = r["ratio_spread"], r["ratio_kt_over_jax"]
        lines.append(f"  {case}: {ms}; ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}]")
    return "\n".join(lines)
