"""LeNet-5's first training step: k_transform against JAX and MindSpore (issue 29).

The network is `examples/lenet_mindspore.py`'s `LeNet5` (a MindSpore script
that k_transform runs with its imports changed): two 5x5 convolutions with
ReLU and 2x2 max pooling, three Dense layers, on 1x16x16 images, batch 32.
A training step is `TrainOneStepCell(WithLossCell(net, softmax cross
entropy), Momentum)`.

Contenders, each round one fresh process apiece, alternated:

- `k_transform`: the example file itself, `kt.jit` of the training step;
- `jax`: the same network and step written in JAX (`lax.conv_general_dilated`,
  `lax.reduce_window`, the momentum update), `jax.jit(step)`;
- `mindspore` (when `KT_BENCH_MINDSPORE` names a Python with MindSpore): the
  example file with MindSpore's imports, in GRAPH_MODE, which compiles the
  step at its first call.

Measured in each process after its imports: the first call (building the
network, transforming, tracing, compiling, one step) and the median of
`STEADY` further steps. Reported: medians over the rounds and the medians of
per-round ratios k_transform / peer with their spread [min, max].

    python -m bench.run lenet       # writes bench/results/lenet.json
    KT_BENCH_MINDSPORE=/path/to/python python -m bench.run lenet
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, round_ratios

ROUNDS = 3
STEADY = 20
BATCH = 32
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "lenet_mindspore.py"

# The example's imports, and MindSpore's (its docstring says they are all that differs).
KT_IMPORTS = """import k_transform as ms
from k_transform import dataset as ds
from k_transform import nn
from k_transform.common.initializer import Normal
"""
MS_IMPORTS = """import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.common.initializer import Normal
"""

# Appended to the example's text: one run of the first step and STEADY more.
# `compiled(step)`: kt.jit for k_transform; MindSpore's GRAPH_MODE compiles a Cell itself.
DRIVER = """

def _measure(compiled, steady, batch):
    import json as _json
    import time as _time

    images, labels = make_dataset(2 * batch, seed=0)
    x, y = ms.Tensor(images[:batch], ms.float32), ms.Tensor(labels[:batch], ms.int32)
    ms.set_seed(1)
    start = _time.perf_counter()
    net = LeNet5()
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    step = compiled(nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.02, 0.9)))
    out = step(x, y)
    first_loss = float(out.asnumpy() if hasattr(out, "asnumpy") else out)  # waits for it
    first = _time.perf_counter() - start
    times = []
    for _ in range(steady):
        t = _time.perf_counter()
        out = step(x, y)
        float(out.asnumpy() if hasattr(out, "asnumpy") else out)  # waits for the step
        times.append(_time.perf_counter() - t)
    times.sort()
    print(_json.dumps({"first_call_s": first, "step_s": times[len(times) // 2],
                       "first_loss": first_loss}))
"""


def _script(kind: str) -> str:
    text = EXAMPLE.read_text()
    assert KT_IMPORTS in text, "the example's imports changed: update bench/lenet.py"
    main = text.index("\nif __name__ ==")
    text = text[:main]
    if kind == "mindspore":
        text = text.replace(KT_IMPORTS, MS_IMPORTS)
        compiled = "ms.set_context(mode=ms.GRAPH_MODE)\n_compiled = lambda step: step\n"
    else:
        compiled = "_compiled = ms.jit\n"
    call = f"\n{compiled}_measure(_compiled, {STEADY}, {BATCH})\n"
    return text + DRIVER + call


def _run_script(python: str, kind: str, directory: str) -> dict:
    path = Path(directory) / f"lenet_{kind}.py"  # a file: MindSpore's GRAPH_MODE reads source
    path.write_text(_script(kind))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parent), os.getcwd()])}
    done = subprocess.run([python, str(path)], capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"lenet {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _jax_process() -> dict:
    """The JAX contender, run as `python -m bench.lenet jax` (a fresh process)."""
    import jax  # noqa: PLC0415 - timed from after the imports, as the others
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    from jax import lax  # noqa: PLC0415

    sys.path.insert(0, str(EXAMPLE.parent))
    from shapes_data import make_dataset  # noqa: PLC0415

    images, labels = make_dataset(2 * BATCH, seed=0)
    x, y = jnp.asarray(images[:BATCH]), jnp.asarray(labels[:BATCH])
    start = time.perf_counter()
    rng = np.random.default_rng(1)

    def dense(n_in, n_out):
        bound = np.sqrt(6.0 / n_in)
        w = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)
        return jnp.asarray(w), jnp.zeros(n_out, jnp.float32)

    def conv(c_in, c_out):  # no bias: MindSpore's Conv2d has none by default
        return jnp.asarray(rng.normal(0.0, 0.1, (c_out, c_in, 5, 5)).astype(np.float32))

    params = [conv(1, 6), conv(6, 16), dense(256, 120), dense(120, 84), dense(84, 10)]

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def forward(params, x):
        c1, c2, *fcs = params
        h = pool(jax.nn.relu(lax.conv_general_dilated(x, c1, (1, 1), "SAME")))
        h = lax.conv_general_dilated(h, c2, (1, 1), "SAME")
        h = pool(jax.nn.relu(h)).reshape(x.shape[0], -1)
        for k, (w, b) in enumerate(fcs):
            h = h @ w.T + b
            h = jax.nn.relu(h) if k < 2 else h
        return h

    def loss(params, x, y):
        logits = forward(params, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    @jax.jit
    def step(params, moments, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        moments = jax.tree.map(lambda m, g: 0.9 * m + g, moments, grads)
        params = jax.tree.map(lambda p, m: p - 0.02 * m, params, moments)
        return value, params, moments

    moments = jax.tree.map(jnp.zeros_like, params)
    first_loss, params, moments = step(params, moments, x, y)
    first_loss = float(first_loss)
    first = time.perf_counter() - start
    times = []
    for _ in range(STEADY):
        t = time.perf_counter()
        value, params, moments = step(params, moments, x, y)
        float(value)
        times.append(time.perf_counter() - t)
    return {"first_call_s": first, "step_s": statistics.median(times), "first_loss": first_loss}


def _jax_run() -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.lenet", "jax"], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"lenet jax failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run() -> dict:
    mindspore = os.environ.get("KT_BENCH_MINDSPORE")
    runs = {"k_transform": [], "jax": []} | ({"mindspore": []} if mindspore else {})
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(ROUNDS):
            runs["k_transform"].append(_run_script(sys.executable, "kt", directory))
            runs["jax"].append(_jax_run())
            if mindspore:
                runs["mindspore"].append(_run_script(mindspore, "mindspore", directory))
    results = {"machine": machine(), "rounds": ROUNDS, "steady_steps": STEADY, "batch": BATCH}
    for name, rs in runs.items():
        results[name] = {
            "first_call_s": statistics.median(r["first_call_s"] for r in rs),
            "step_s": statistics.median(r["step_s"] for r in rs),
            "runs": rs,
        }
    for peer in runs.keys() - {"k_transform"}:
        for what in ("first_call_s", "step_s"):
            times = {n: [r[what] for r in runs[n]] for n in ("k_transform", peer)}
            ratio, spread = round_ratios(times, "k_transform", peer)
            results[f"{what}_ratio_vs_{peer}"] = {"median": ratio, "spread": spread}
    return results


def summary(results: dict) -> str:
    lines = ["LeNet-5 training step (first call: build + transform + compile + one step)"]
    for name in ("k_transform", "jax", "mindspore"):
        if name in results:
            r = results[name]
            lines.append(
                f"  {name:12s} first call {r['first_call_s']:.3f} s, "
                f"step {r['step_s'] * 1e3:.3f} ms"
            )
    for key, r in results.items():
        if key.endswith(("_vs_jax", "_vs_mindspore")):
            lo, hi = r["spread"]
            lines.append(f"  {key}: {r['median']:.2f} [{lo:.2f}, {hi:.2f}]")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["jax"]:
        print(json.dumps(_jax_process()))
