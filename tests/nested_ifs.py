"""Helpers nested three deep, each an `if` on a traced value (h1 calls h2 in
both branches, h2 calls h3), and their JAX twins j1, j2, j3 with `lax.cond`
(JAX cannot trace a Python `if` on a traced value), which count their branch
traces in TRACES["jax"]. Used by tests/test_trace_once.py and, as source
text, by bench/branching.py."""

import jax.numpy as jnp
from jax import lax

TRACES = {"jax": 0}


def h3(x, y):
    if jnp.mean(y) > 0.1:
        return x * 0.5 + jnp.tanh(y)
    return x - 0.1 * y


def h2(x, y):
    if jnp.sum(x * y) > 0.0:
        z = h3(jnp.sin(x), y) * y
    else:
        z = h3(jnp.cos(x), x) + y
    return z


def h1(x, y):
    if jnp.sum(x) > 0.0:
        z = h2(jnp.sin(x), y) * y
    else:
        z = h2(jnp.cos(x), x) + y
    return z


def j3(x, y):
    def yes():
        TRACES["jax"] += 1
        return x * 0.5 + jnp.tanh(y)

    def no():
        TRACES["jax"] += 1
        return x - 0.1 * y

    return lax.cond(jnp.mean(y) > 0.1, yes, no)


def j2(x, y):
    def yes():
        TRACES["jax"] += 1
        return j3(jnp.sin(x), y) * y

    def no():
        TRACES["jax"] += 1
        return j3(jnp.cos(x), x) + y

    return lax.cond(jnp.sum(x * y) > 0.0, yes, no)


def j1(x, y):
    def yes():
        TRACES["jax"] += 1
        return j2(jnp.sin(x), y) * y

    def no():
        TRACES["jax"] += 1
        return j2(jnp.cos(x), x) + y

    return lax.cond(jnp.sum(x) > 0.0, yes, no)
