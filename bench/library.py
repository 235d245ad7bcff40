"""Library calls differentiated through their jaxprs: `jit(kt.grad)` against `jit(jax.grad)`.

Cases whose gradient comes from the jaxpr import (`k_transform/frontend/jaxpr.py`):
none of the library functions called has a primitive of ours (checked).
- `special`: `jsp.ndtri` (a `scan` and selects in its jaxpr), `jnp.arccos`,
  `jnp.logaddexp`, `jax.nn.glu` on 4,096 floats.
- `polyval`: `jnp.polyval` of a degree-16 polynomial (a `scan`) on 4,096 floats.
- `sorted_loss`: a loss through `jnp.sort` and `jnp.cumsum` on 4,096 floats.
And `scan_rnn`, a `lax.scan` RNN called by the user (width 64, 200 steps),
read as its Python model, whose loops run as JAX's (xs and ys as the scans'
rows, `control.runtime._slot_scan`): issue 29's 1.05 for a user's `lax.scan`.
Target ratio (kt / jax steady state): at most 1.05. `ratio` is the median
of per-round ratios (the contenders timed alternately), `spread` their
[min, max].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np

import k_transform as kt
from bench.common import machine, round_ratios, timed
from k_transform.ops.mapping import primitive_for_value

REPEATS = 100
IMPORTED = (jsp.ndtri, jnp.arccos, jnp.logaddexp, jax.nn.glu, jnp.polyval, jnp.sort)


def special(x):
    u = 0.05 + 0.9 * jax.nn.sigmoid(x)
    y = jsp.ndtri(u) + jnp.arccos(u * 0.9) + jnp.logaddexp(x, 0.5 * x)
    return jnp.sum(jax.nn.glu(y.reshape(2, -1), axis=0) ** 2)


def polyval(x):
    coef = jnp.linspace(-1.0, 1.0, 17)
    return jnp.sum(jnp.polyval(coef, jnp.tanh(x)))


def sorted_loss(x):
    s = jnp.sort(x)
    return jnp.sum(jnp.cumsum(s) * jnp.linspace(0.0, 1.0, x.shape[0]))


def scan_rnn(x):
    w = jnp.tanh(x[:64])

    def step(h, xt):
        h = jnp.tanh(h * w + xt)
        return h, jnp.sum(h)

    h, ys = jax.lax.scan(step, jnp.zeros(64), x.reshape(-1, 64)[:200])
    return jnp.sum(h) + jnp.sum(ys)


def _case(fn, x) -> dict:
    ours, theirs = jax.jit(kt.grad(fn)), jax.jit(jax.grad(fn))
    np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), rtol=2e-4, atol=1e-5)
    contenders = {"kt": ours, "jax": theirs}
    results = {name: {"first_call_s": timed(fn, (x,))} for name, fn in contenders.items()}
    times = {name: [] for name in contenders}
    for _ in range(REPEATS):
        for name, fn in contenders.items():
            times[name].append(timed(fn, (x,)))
    for name, samples in times.items():
        results[name]["median_s"] = float(np.median(samples))
    results["ratio"], results["spread"] = round_ratios(times, "kt", "jax")
    return results


def run() -> dict:
    assert all(primitive_for_value(f) is None for f in IMPORTED), "a case is no longer imported"
    rng = np.random.RandomState(0)
    x = jnp.asarray(rng.randn(4096).astype(np.float32))
    rnn_x = jnp.asarray(rng.randn(200 * 64).astype(np.float32) * 0.3)
    cases = {
        "special": _case(special, x),
        "polyval": _case(polyval, x),
        "sorted_loss": _case(sorted_loss, x),
        "scan_rnn": _case(scan_rnn, rnn_x),
    }
    return {"machine": machine(), "target_ratio": 1.05, "cases": cases}


def summary(results: dict) -> str:
    lines = ["library calls (jaxpr import): jit(kt.grad) / jit(jax.grad), steady state"]
    for name, r in results["cases"].items():
        lines.append(
            f"  {name:12s} kt {r['kt']['median_s'] * 1e6:9.1f} us  "
            f"jax {r['jax']['median_s'] * 1e6:9.1f} us  ratio {r['ratio']:.2f} "
            f"[{r['spread'][0]:.2f}, {r['spread'][1]:.2f}]"
        )
    return "\n".join(lines)
