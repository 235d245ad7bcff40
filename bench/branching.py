"""A static loop over helpers with traced branches: first call, first and second order.

The program: `for i in range(n)` (a Python int, static) calling helpers
nested three deep (h1 calls h2 in both branches, h2 calls h3), each an `if`
on a traced value; its JAX twin is the same code with `lax.cond` (JAX cannot
trace a Python `if` on a traced value). The helpers are tests/nested_ifs.py's,
which tests/test_trace_once.py checks against JAX. Timed: the first call
(transform, trace, compile) of `jit(kt.grad(f))` against `jit(jax.grad(g))`
and of a Hessian-vector product, `jit(kt.jvp(kt.grad))` against
`jit(jax.jvp(jax.grad))`, each round from a freshly imported module (no
cache of either side carries over), the two sides alternating. Goal (issue
29): second order within 5x of JAX's time. Before session 18 a traced `if`
traced each branch four times per enclosing trace (twice to probe its
shapes, twice in `lax.cond`) and its bprop re-ran the branch: nesting d
deep traced 4^d times (first order 4.1 s, second order 24.6 s against
JAX's 1.7 and 2.9 s, n=10).

Also the same loop with UNROLLED_TRIPS trips, which unrolls (each trip
calls the helpers again): before session 20 its second order grew
exponentially with the trips (1.3 s for one, 12.8 s for two, over 300 s
for three) as each call's bprop env held those of the calls before it.

Also: transform time (parse, DFunctor, codegen; nothing traced) of the
same program at n = 10, 100, 1,000 trips: it must not grow with a static
trip count.

    python -m bench.run branching      # writes bench/results/branching.json
"""

from __future__ import annotations

import importlib.util
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from bench.common import machine, round_ratios
from tests import nested_ifs

ROUNDS = 3
TRIPS = 10
UNROLLED_TRIPS = 4  # at most policy.UNROLL_LIMIT: the loop unrolls, each trip calls again
TRANSFORM_TRIPS = (10, 100, 1_000)

# the helpers and their JAX twins (tests/nested_ifs.py, which the tests use
# too), then the loops over them with N trips
LOOPS = """

N = {n}


def f(x, y):
    for i in range(N):
        x = h1(x, y)
        y = h3(y, x)
    return jnp.sum(x * y)


def g(x, y):
    for i in range(N):
        x = j1(x, y)
        y = j3(y, x)
    return jnp.sum(x * y)
"""

_counter = [0]


def fresh(directory: Path, n: int):
    """A freshly imported module of the program at `n` trips."""
    _counter[0] += 1
    name = f"_kt_bench_branching_{_counter[0]}"
    path = directory / f"{name}.py"
    path.write_text(inspect.getsource(nested_ifs) + LOOPS.format(n=n))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _programs(module, x, y, v):
    f, g = module.f, module.g
    return {
        "kt_grad": (jax.jit(kt.grad(f)), (x, y)),
        "jax_grad": (jax.jit(jax.grad(g)), (x, y)),
        "kt_hvp": (jax.jit(lambda a: kt.jvp(lambda b: kt.grad(f)(b, y), a, v)[1]), (x,)),
        "jax_hvp": (jax.jit(lambda a: jax.jvp(lambda b: jax.grad(g)(b, y), (a,), (v,))[1]), (x,)),
    }


def first_calls(directory: Path, trips: int = TRIPS) -> dict:
    x, y = jnp.linspace(-1.0, 1.0, 8), jnp.linspace(0.5, -0.3, 8)
    v = jnp.ones(8)
    times = {name: [] for name in ("kt_grad", "jax_grad", "kt_hvp", "jax_hvp")}
    for _ in range(ROUNDS):
        programs = _programs(fresh(directory, trips), x, y, v)
        values = {}
        for name, (fn, args) in programs.items():
            start = time.perf_counter()
            values[name] = jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - start)
        for order in ("grad", "hvp"):
            np.testing.assert_allclose(
                values[f"kt_{order}"], values[f"jax_{order}"], rtol=2e-4, atol=1e-5
            )
    out = {"trips": trips, "rounds": ROUNDS}
    for order in ("grad", "hvp"):
        ratio, spread = round_ratios(times, f"kt_{order}", f"jax_{order}")
        out[order] = {
            "kt_median_s": statistics.median(times[f"kt_{order}"]),
            "jax_median_s": statistics.median(times[f"jax_{order}"]),
            "ratio": ratio,
            "spread": spread,
        }
    return out


def transform_times(directory: Path) -> dict:
    out = {}
    for n in TRANSFORM_TRIPS:
        samples = []
        for _ in range(3):
            f = fresh(directory, n).f
            start = time.perf_counter()
            _ = kt.GradOperation()(f).__kt_source__
            samples.append(time.perf_counter() - start)
        out[str(n)] = {"median_s": statistics.median(samples)}
    return out


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="kt_bench_branching_") as tmp:
        directory = Path(tmp)
        return {
            "benchmark": "branching",
            "machine": machine(),
            "first_call": first_calls(directory),
            "first_call_unrolled": first_calls(directory, UNROLLED_TRIPS),
            "transform_by_trips": transform_times(directory),
        }


def summary(results: dict) -> str:
    lines = []
    for case in ("first_call", "first_call_unrolled"):
        r = results[case]
        lines.append(f"static loop over branching helpers (n={r['trips']}), first call, kt / JAX:")
        for order in ("grad", "hvp"):
            o = r[order]
            lines.append(
                f"  {order:5s} kt {o['kt_median_s']:.2f} s  jax {o['jax_median_s']:.2f} s  "
                f"ratio {o['ratio']:.2f} [{o['spread'][0]:.2f}, {o['spread'][1]:.2f}]"
            )
    lines.append("transform time by static trip count:")
    for n, t in results["transform_by_trips"].items():
        lines.append(f"  {n:>5s} trips: {t['median_s'] * 1e3:.1f} ms")
    return "\n".join(lines)
