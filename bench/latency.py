"""First-call latency of a fresh gradient: k_transform vs `jax.jit(jax.grad(f))`.

The first call of a gradient pays for everything before the steady state:
for k_transform, parse + DFunctor + codegen (constructing the gradient
function) and then JAX tracing the generated code + XLA compiling; for JAX,
tracing `jax.grad` + XLA compiling. To keep caches (k_transform's parse
cache, JAX's trace caches) from helping, every trial imports a fresh copy of
the program from its own temporary .py file (k_transform needs real source),
once for each contender. Trials alternate between the contenders; medians
are reported, and the ratio kt / JAX (goal: at most 1.5). A discarded
warm-up trial first pays for one-time process costs (backend start-up,
importing k_transform's rule modules) on both sides.

Programs: the MLP of `bench/models.py` and the GMM objective of
`bench/adbench.py` (d=10, K=25, N=1,000), both w.r.t. all their parameters,
and a forward-over-reverse Hessian-vector product of a k-means cost
(`jvp(grad(f))`, 25 centres, 1,000 points in 10 dimensions), the kmeans
Newton step's pattern (issue 15: it took 3.3x JAX's first call).

    python -m bench.run latency      # writes bench/results/latency.json
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
from bench import adbench, models
from bench.common import machine

TRIALS = 9
HEADER = "import jax\nimport jax.numpy as jnp\n\n\n"


def kmeans_cost(centers, points):
    d = jnp.sum((points[:, None, :] - centers[None, :, :]) ** 2, axis=-1)
    return jnp.sum(jnp.min(d, axis=1))


def kmeans_args(rng):
    centers = rng.standard_normal((25, 10)).astype(np.float32)
    points = rng.standard_normal((1_000, 10)).astype(np.float32)
    return centers, points, np.ones_like(centers)


PROGRAMS = {
    # name: (source of the module, function name, arguments, number of parameters);
    # a program whose name starts with "hvp" is timed as jvp(grad(f)) in its first argument
    "mlp": (
        inspect.getsource(models.mlp),
        "mlp",
        models.mlp_args,
        6,
    ),
    "gmm_d10_K25_N1000": (
        inspect.getsource(adbench.gmm_objective),
        "gmm_objective",
        lambda rng: adbench.gmm_args(rng, 10, 25, 1_000),
        3,
    ),
    "hvp_kmeans_K25_N1000": (inspect.getsource(kmeans_cost), "kmeans_cost", kmeans_args, 1),
}

_counter = [0]


def fresh(directory: Path, source: str, name: str):
    """Import `source` as a brand-new module and return its function `name`."""
    _counter[0] += 1
    module_name = f"_kt_latency_{_counter[0]}"
    path = directory / f"{module_name}.py"
    path.write_text(HEADER + source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def kt_first_call(fn, args, n_params, hvp: bool) -> dict:
    start = time.perf_counter()
    grad_fn = kt.grad(fn, grad_position=tuple(range(n_params)))
    built = time.perf_counter()
    if hvp:  # kt.jvp transforms at its call: counted in trace_compile_s
        x, *rest, v = args
        grad_x = lambda x: grad_fn(x, *rest)  # noqa: E731
        jax.block_until_ready(kt.jvp(grad_x, (x,), (v,)))
    else:
        jax.block_until_ready(grad_fn(*args))
    done = time.perf_counter()
    return {"transform_s": built - start, "trace_compile_s": done - built, "total_s": done - start}


def jax_first_call(fn, args, n_params, hvp: bool) -> dict:
    start = time.perf_counter()
    grad_fn = jax.grad(fn, argnums=tuple(range(n_params)))
    if hvp:
        x, *rest, v = args
        hvp_fn = jax.jit(lambda x, v: jax.jvp(lambda x: grad_fn(x, *rest), (x,), (v,)))
        jax.block_until_ready(hvp_fn(x, v))
    else:
        jax.block_until_ready(jax.jit(grad_fn)(*args))
    return {"total_s": time.perf_counter() - start}


def bench_program(directory: Path, source: str, name: str, args, n_params: int, hvp: bool) -> dict:
    samples = {"kt": [], "jax": []}
    for trial in range(TRIALS + 1):  # trial 0 is the discarded warm-up
        kt_run = kt_first_call(fresh(directory, source, name), args, n_params, hvp)
        jax_run = jax_first_call(fresh(directory, source, name), args, n_params, hvp)
        if trial:
            samples["kt"].append(kt_run)
            samples["jax"].append(jax_run)
    kt_med = {k: statistics.median(r[k] for r in samples["kt"]) for k in samples["kt"][0]}
    jax_med = {"total_s": statistics.median(r["total_s"] for r in samples["jax"])}
    return {
        "kt_median": kt_med,
        "jax_median": jax_med,
        "ratio": kt_med["total_s"] / jax_med["total_s"],
        "samples": samples,
    }


def run() -> dict:
    kt.set_mode("graph")
    start = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="kt_latency_") as tmp:
        for prog, (source, name, make_args, n_params) in PROGRAMS.items():
            args = make_args(np.random.default_rng(0))
            hvp = prog.startswith("hvp")
            results[prog] = bench_program(Path(tmp), source, name, args, n_params, hvp)
            print(f"  {prog}: {time.perf_counter() - start:.1f} s", flush=True)
    return {
        "benchmark": "latency",
        "machine": machine(),
        "trials": TRIALS,
        "cases": results,
        "wall_s": time.perf_counter() - start,
    }


def summary(results: dict) -> str:
    lines = [
        "| program | kt transform ms | kt trace+compile ms | kt total ms | JAX total ms | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["cases"].items():
        k, j = r["kt_median"], r["jax_median"]
        lines.append(
            f"| {name} | {k['transform_s'] * 1e3:.1f} | {k['trace_compile_s'] * 1e3:.1f} "
            f"| {k['total_s'] * 1e3:.1f} | {j['total_s'] * 1e3:.1f} | {r['ratio']:.2f} |"
        )
    lines.append(f"wall: {results['wall_s']:.1f} s")
    return "\n".join(lines)
