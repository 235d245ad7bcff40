"""Forward mode by double reverse: `jit(kt.jvp)` against `jit(jax.jvp)`.

Cases: a 3-layer MLP (batch 64, width 256), a chain of 40 elementwise
functions on a 4096-vector, and the same chain as loops: a `for` over
range(10) of 4 functions (a `lax.scan` for us, unrolled by JAX's tracing of
the same Python) and a `while` on a traced counter (a `lax.while_loop`; the
JAX side runs the same loop as `lax.while_loop`, since JAX cannot trace a
Python `while` on a traced condition). Target ratio (kt / jax steady state):
at most 1.3. Also a Hessian-vector product through the `for` (forward over
reverse, `jvp(grad(f))` under the caller's `jax.jit`): it was 118x JAX's time
before the reverse loops of K of a loop were bounded by the stack they pop
(session 11), and is not at the target yet (J does not map a gradient's loops).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from bench.common import compare, machine

REPEATS = 30


def mlp(w1, w2, w3, x):
    h = jnp.tanh(x @ w1)
    h = jnp.tanh(h @ w2)
    return h @ w3


def chain(x):
    """40 elementwise functions, written out."""
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    x = jnp.cos(x) + x
    return x


def four(x):
    x = jnp.sin(x)
    x = jnp.tanh(x) * 0.9
    x = jnp.exp(x * 0.1)
    return jnp.cos(x) + x


def chain_for(x):
    for _ in range(10):
        x = four(x)
    return x


def chain_while(x):
    i = jnp.zeros(())  # a traced counter: the loop is a lax.while_loop
    while i < 10.0:
        x = four(x)
        i = i + 1.0
    return x


def chain_while_jax(x):
    def body(state):
        return state[0] + 1.0, four(state[1])

    return jax.lax.while_loop(lambda s: s[0] < 10.0, body, (jnp.float32(0.0), x))[1]


def loss_for(x):
    return jnp.sum(chain_for(x) ** 2)


_grad_for = kt.grad(loss_for)


def grad_for(x):
    return _grad_for(x)


def _case(fn, args, tangents, jax_fn=None) -> dict:
    ours = jax.jit(lambda a, t: kt.jvp(fn, a, t))
    theirs = jax.jit(lambda a, t: jax.jvp(jax_fn or fn, a, t))
    got, want = ours(args, tangents), theirs(args, tangents)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-3, atol=1e-4)
    results = compare({"kt": (ours, (args, tangents)), "jax": (theirs, (args, tangents))}, REPEATS)
    results["ratio"] = results["kt"]["median_s"] / results["jax"]["median_s"]
    return results


def run() -> dict:
    rng = np.random.RandomState(0)

    def arr(*shape):
        return jnp.asarray(rng.randn(*shape).astype(np.float32) * 0.1)

    mlp_args = (arr(256, 256), arr(256, 256), arr(256, 10), arr(64, 256))
    mlp_tangents = tuple(arr(*a.shape) for a in mlp_args)
    chain_args, chain_tangents = (arr(4096),), (arr(4096),)
    return {
        "machine": machine(),
        "target_ratio": 1.3,
        "cases": {
            "mlp": _case(mlp, mlp_args, mlp_tangents),
            "elementwise_chain_40": _case(chain, chain_args, chain_tangents),
            "chain_for_10x4": _case(chain_for, chain_args, chain_tangents),
            "chain_while_10x4": _case(chain_while, chain_args, chain_tangents, chain_while_jax),
            "hvp_chain_for_10x4": _case(grad_for, chain_args, chain_tangents, jax.grad(loss_for)),
        },
    }


def summary(results: dict) -> str:
    lines = ["jvp: jit(kt.jvp) vs jit(jax.jvp), steady-state medians"]
    for name, r in results["cases"].items():
        lines.append(
            f"  {name:24s} kt {r['kt']['median_s'] * 1e3:8.3f} ms  "
            f"jax {r['jax']['median_s'] * 1e3:8.3f} ms  ratio {r['ratio']:.2f}"
        )
    return "\n".join(lines)
