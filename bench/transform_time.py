"""Transform time: parse + DFunctor + codegen, without tracing or compiling.

`kt.GradOperation()(f)` builds the gradient function: it parses `f` into a
FuncGraph and applies the DFunctor; reading its `__kt_source__` generates
Python source and compiles it with Python's `compile` (a gradient function
does that at its first call) -- nothing calls it, so JAX neither traces nor
compiles anything. That construction is timed here for generated
straight-line functions of 10, 100, 1,000 and 10,000 statements, each
written to its own temporary .py file and imported fresh (k_transform needs
real source; a fresh module also defeats its caches), and for a function
whose `for` loop body has 10, 100 and 1,000 statements. Each statement is one
line with three primitives, e.g. `y7 = jnp.sin(y6) * 0.5 + y5`.

Reported: ms in total and ms per statement (goal: at most 2 ms per
statement on 2 cores) and the growth exponent between consecutive sizes
(log ratio of times / log ratio of sizes: 1 is linear). A size whose
predicted time (from the previous size and the worst exponent so far) is
over MAX_CASE_S is skipped and reported as such. The 1,000-statement case
is also run under cProfile; the top functions by cumulative and by own time
are kept.

First call (issue 29: a 1,000-statement gradient's first call in under a
minute): `kt.grad(f)(x)` (compiled by k_transform) and `jax.jit(jax.grad(f))(x)` of the same
straight-line functions on 1,024 floats, transform + trace + XLA compile +
run, each in a fresh process (no cache), with a limit of FIRST_CALL_LIMIT_S
seconds. On a CPU, XLA's fusion emitters stall on the long fused chain
(700 statements: 8-11 s, 800: over 2 minutes, 1,000: over 10); a program of
more than `k_transform.compiled.LARGE_PROGRAM` graph nodes is compiled with
XLA's classic CPU emitters instead, which scale linearly.

    python -m bench.run transform_time      # writes bench/results/transform_time.json
"""

from __future__ import annotations

import cProfile
import importlib.util
import io
import math
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import k_transform as kt
from bench.common import machine

SIZES = (10, 100, 1_000, 10_000)
LOOP_SIZES = (10, 100, 1_000)
MAX_CASE_S = 60.0
REPEATS = {10: 5, 100: 5, 1_000: 3, 10_000: 1}
PROFILE_SIZE = 1_000
FIRST_CALL_SIZES = (100, 300, 1_000, 2_000)
FIRST_CALL_LIMIT_S = 120
TOP = 25

FUNCTIONS = ("jnp.sin({})", "jnp.tanh({})", "jnp.exp(-{})", "jnp.cos({})")


def _statement(i: int) -> str:
    prev, prev2 = f"y{i - 1}", f"y{max(i - 2, 0)}"
    return f"y{i} = {FUNCTIONS[i % len(FUNCTIONS)].format(prev)} * 0.5 + {prev2}"


def straight_line_source(n: int) -> str:
    body = [f"    {_statement(i)}" for i in range(1, n + 1)]
    return "\n".join(["def f(x):", "    y0 = x", *body, f"    return jnp.sum(y{n})", ""])


def loop_source(n: int) -> str:
    body = [f"        {_statement(i)}" for i in range(1, n + 1)]
    return "\n".join(
        [
            "def f(x):",
            "    for _ in range(16):",
            "        y0 = x",
            *body,
            f"        x = y{n}",
            "    return jnp.sum(x)",
            "",
        ]
    )


_counter = [0]


def fresh(directory: Path, source: str):
    _counter[0] += 1
    module_name = f"_kt_transform_time_{_counter[0]}"
    path = directory / f"{module_name}.py"
    path.write_text("import jax.numpy as jnp\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module.f


def construct_s(directory: Path, source: str) -> float:
    fn = fresh(directory, source)
    start = time.perf_counter()
    _ = kt.GradOperation()(fn).__kt_source__
    return time.perf_counter() - start


def sweep(directory: Path, make_source, sizes) -> dict:
    out, prev, worst_exp = {}, None, 1.0
    for n in sizes:
        if prev is not None:
            predicted = out[str(prev)]["median_s"] * (n / prev) ** worst_exp
            if predicted > MAX_CASE_S:
                out[str(n)] = {"skipped": f"predicted {predicted:.0f} s > {MAX_CASE_S:.0f} s"}
                break
        source = make_source(n)
        times = [construct_s(directory, source) for _ in range(REPEATS.get(n, 1))]
        med = statistics.median(times)
        row = {"statements": n, "median_s": med, "ms_per_statement": med * 1e3 / n}
        if prev is not None:
            exp = math.log(med / out[str(prev)]["median_s"]) / math.log(n / prev)
            row["growth_exponent"] = exp
            worst_exp = max(worst_exp, exp)
        out[str(n)] = row
        prev = n
        print(f"  {n} statements: {med:.3f} s", flush=True)
    return out


_FIRST_CALL = """
import importlib.util, sys, time
import jax, jax.numpy as jnp
import k_transform as kt
spec = importlib.util.spec_from_file_location("stmts", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
x = jnp.linspace(0.0, 1.0, 1024)
start = time.perf_counter()
gradient = kt.grad(module.f) if sys.argv[2] == "kt" else jax.jit(jax.grad(module.f))
jax.block_until_ready(gradient(x))  # kt.grad compiles itself
print(time.perf_counter() - start)
"""


def first_call(directory: Path, sizes=FIRST_CALL_SIZES) -> dict:
    """Seconds to the first gradient, per size and side, each in a fresh process."""
    out = {}
    for n in sizes:
        path = directory / f"_kt_first_call_{n}.py"
        path.write_text("import jax.numpy as jnp\n\n\n" + straight_line_source(n))
        row = {}
        for side in ("kt", "jax"):
            if any(isinstance(r.get(side), str) for r in out.values()):
                row[side] = "not run (a smaller size was over the limit)"
                continue
            command = [sys.executable, "-c", _FIRST_CALL, str(path), side]
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=FIRST_CALL_LIMIT_S
                )
                row[side] = float(done.stdout.split()[-1])
            except subprocess.TimeoutExpired:
                row[side] = f"over {FIRST_CALL_LIMIT_S} s"
            print(f"  first call, {n} statements, {side}: {row[side]}", flush=True)
        out[str(n)] = row
    return out


def profile(directory: Path, n: int) -> dict:
    fn = fresh(directory, straight_line_source(n))
    prof = cProfile.Profile()
    prof.enable()
    _ = kt.GradOperation()(fn).__kt_source__
    prof.disable()
    tables = {}
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(TOP)
        tables[key] = buf.getvalue().splitlines()
    return tables


def run() -> dict:
    kt.set_mode("graph")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kt_transform_time_") as tmp:
        directory = Path(tmp)
        construct_s(directory, straight_line_source(5))  # warm-up: rule modules, caches of rules
        straight = sweep(directory, straight_line_source, SIZES)
        loop = sweep(directory, loop_source, LOOP_SIZES)
        prof = profile(directory, PROFILE_SIZE)
        first = first_call(directory)
    return {
        "benchmark": "transform_time",
        "machine": machine(),
        "straight_line": straight,
        "loop_body": loop,
        "profile_1000": prof,
        "first_call": first,
        "wall_s": time.perf_counter() - start,
    }


def summary(results: dict) -> str:
    lines = [
        "| program | statements | total ms | ms / statement | growth exponent |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind in ("straight_line", "loop_body"):
        for n, r in results[kind].items():
            if "skipped" in r:
                lines.append(f"| {kind} | {n} | skipped: {r['skipped']} | | |")
                continue
            exp = r.get("growth_exponent")
            lines.append(
                f"| {kind} | {n} | {r['median_s'] * 1e3:.1f} | {r['ms_per_statement']:.3f} "
                f"| {'' if exp is None else f'{exp:.2f}'} |"
            )
    lines.append("first call of the gradient, seconds (fresh process):")
    for n, r in results.get("first_call", {}).items():
        lines.append(f"  {n} statements: kt {r['kt']}, JAX {r['jax']}")
    lines.append("cProfile of the 1,000-statement case, by own time:")
    lines += results["profile_1000"]["tottime"][: TOP + 10]
    lines.append(f"wall: {results['wall_s']:.1f} s")
    return "\n".join(lines)
