"""Gradients of every corpus program against JAX on the same program.

For each program and seed, `kt.GradOperation(get_all=True, sens_param=True)`
is compared with `jax.vjp` of the program run as plain Python by JAX (JAX's
tracer keeps concrete values, so the programs' Python `if`/`while` on data
run as written), with one fixed random cotangent per output leaf. Inputs that
are static (`n`, `k`, `flag`) are closed over; the traced int input `i` and
the floats are differentiated where JAX allows (integer inputs get zero).

The gradient runs eagerly (`set_mode("eager")`) and jitted, once each per
program. Programs whose output has no float leaves are left out below, each
with its reason.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.corpus import PROGRAMS

# Outputs that are not differentiable at all (integers, booleans, None).
NOT_DIFFERENTIABLE = {}

CASES = [
    pytest.param(prog, seed, mode, id=f"{prog.name}-seed{seed}-{mode}")
    for prog in PROGRAMS.values()
    for seed in prog.seeds[:2]
    for mode in ("eager", "graph")
    if prog.name not in NOT_DIFFERENTIABLE
]


def _dtype(x):
    """The dtype of an array, a Python scalar, or a tuple of arrays."""
    leaves = jax.tree_util.tree_leaves(x)
    return jnp.result_type(*[v.dtype if hasattr(v, "dtype") else type(v) for v in leaves])


def _float_leaves(tree):
    return [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(_dtype(x), jnp.inexact)]


@functools.cache
def grad_fn(name):
    return kt.GradOperation(get_all=True, sens_param=True)(PROGRAMS[name].fn)


def cotangent(out):
    rng = np.random.RandomState(0)

    def make(x):
        dtype = _dtype(x)
        if jnp.issubdtype(dtype, jnp.inexact):
            return jnp.asarray(rng.randn(*jnp.shape(x)), dtype)
        return np.zeros(jnp.shape(x), jax.dtypes.float0)

    return jax.tree_util.tree_map(make, out)


def oracle(prog, args, cot):
    """jax.vjp of the program w.r.t. its float inputs (others closed over)."""
    diff = [k for k, a in enumerate(args) if not isinstance(a, (bool, int)) and _is_float(a)]

    def restricted(*xs):
        full = list(args)
        for k, x in zip(diff, xs, strict=True):
            full[k] = x
        return prog.fn(*full)

    _, vjp = jax.vjp(restricted, *[args[k] for k in diff])
    grads = vjp(cot)
    return dict(zip(diff, grads, strict=True))


def _is_float(a):
    return jnp.issubdtype(_dtype(a), jnp.inexact)


@pytest.mark.parametrize(("prog", "seed", "mode"), CASES)
def test_gradient_matches_jax(prog, seed, mode):
    args = prog.args(seed)
    out = prog.fn(*args)
    if not _float_leaves(out):
        pytest.fail(f"{prog.name} has no float output; list it in NOT_DIFFERENTIABLE")
    cot = cotangent(out)
    want = oracle(prog, args, cot)
    kt_cot = jax.tree_util.tree_map(
        lambda c, o: jnp.zeros(jnp.shape(o), jnp.float32) if c.dtype == jax.dtypes.float0 else c,
        cot,
        out,
    )
    kt.set_mode(mode)
    try:
        # MindSpore's GradOperation leaves tuple arguments out unless `mutable`
        got = grad_fn(prog.name)(*(kt.mutable(a) for a in args), kt_cot)
    finally:
        kt.set_mode("graph")
    for k, g in want.items():
        np.testing.assert_allclose(
            np.asarray(got[k], np.float64),
            np.asarray(g, np.float64),
            rtol=2e-4,
            atol=2e-4,
            err_msg=f"input {prog.arg_names[k]}",
        )
