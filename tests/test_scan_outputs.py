"""A differentiated `lax.scan` that stays a `lax.scan` (12 steps, the unroll
budget 0: `scan_loops`): its Python model reads xs from a stack of rows and
pushes ys on one, and the run time's scans take those stacks' items as xs
and give them as ys (`control.runtime._slot_scan`), as does the reverse
loop popping what the forward one stored. Oracle: `jax.grad` / `jax.jvp`
of the same program in float64 (JAX differentiates `lax.scan` itself).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt
from k_transform.frontend.jaxpr import _scan_counts

pytestmark = pytest.mark.usefixtures("x64", "scan_loops")

RNG = np.random.default_rng(20)
X = RNG.uniform(-0.8, 0.8, (12, 3))
V = RNG.normal(size=(12, 3))


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def rnn(x):
    w = jnp.tanh(x[0])  # a closure over a value that depends on x

    def step(h, xt):
        h = jnp.tanh(h * w + xt)
        return h, jnp.sum(h * h)

    h, ys = lax.scan(step, jnp.zeros(3), x)
    return jnp.sum(h) + jnp.sum(ys * jnp.arange(1.0, 13.0))


def reverse_pytrees(x):
    def step(carry, item):
        a, b = carry
        a = a * jnp.cos(item["row"]) + item["scale"]
        b = b + jnp.sin(a)
        return (a, b), {"a": a, "sums": (jnp.sum(b), b[0] * a[1])}

    (a, b), ys = lax.scan(step, (x[0], 0.5 * x[1]), {"row": x, "scale": x[:, 0]}, reverse=True)
    return jnp.sum(a * b) + jnp.sum(ys["a"] ** 2) + jnp.sum(ys["sums"][0] * ys["sums"][1])


def length_only(x):
    def step(c, _):
        c = c * jnp.sin(c) + 0.1
        return c, c[1] * c

    c, ys = lax.scan(step, x[1], None, length=12)
    return jnp.sum(c) + jnp.sum(jnp.cos(ys))


def unrolled(x):
    def step(c, xt):
        return jnp.sin(c) * xt + c, (c, xt * c)

    c, (cs, ps) = lax.scan(step, x[0], x, unroll=3)
    return jnp.sum(c) + jnp.sum(cs[::2] ** 2) + jnp.sum(ps)


def no_ys(x):
    c, ys = lax.scan(lambda c, xt: (c * jnp.cos(xt) + xt, None), x[2], x)
    assert ys is None
    return jnp.sum(c**2)


def map_rows(x):
    w = jnp.sin(x[1])
    return jnp.sum(lax.map(lambda r: (jnp.tanh(r * w), jnp.sum(r)), x)[0] ** 2)


def int_xs(x):
    idx = jnp.arange(12) % 3  # an integer leaf of xs and of ys (no gradient)

    def step(c, item):
        row, k = item
        c = c * jnp.cos(row[k]) + row
        return c, (c[k], k)

    c, (ys, ks) = lax.scan(step, x[0], (x, idx))
    return jnp.sum(c) + jnp.sum(ys * ks)


def nested(x):
    def outer(c, row):
        def inner(d, e):
            return d * jnp.sin(e) + 0.1, d[0]

        d, zs = lax.scan(inner, c, jnp.tile(row, (10, 1)))
        return d, jnp.sum(zs)

    c, ys = lax.scan(outer, x[0], x)
    return jnp.sum(c) + jnp.sum(ys)


def masked(x):
    """Each step's bprop reads a mask of an `iota`: the same in every iteration."""

    def step(c, xt):
        k = jnp.arange(3)
        c = jnp.where(k == 0, xt, xt * jnp.roll(c, 1)) + 0.5 * c
        return c, jnp.where(k > 1, c, 0.0)

    c, ys = lax.scan(step, x[0], x)
    return jnp.sum(c**2) + jnp.sum(jnp.sin(ys))


PROGRAMS = [rnn, reverse_pytrees, length_only, unrolled, no_ys, map_rows, int_xs, nested, masked]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_grad(f):
    close(kt.grad(f)(X), jax.grad(f)(X))


@pytest.mark.parametrize("f", [rnn, reverse_pytrees], ids=lambda f: f.__name__)
def test_grad_eager(f):
    """Run op by op, the model's stacks are Python's (a cons list of ys)."""
    kt.set_mode("eager")
    try:
        close(kt.grad(f)(X), jax.grad(f)(X))
    finally:
        kt.set_mode("graph")


@pytest.mark.parametrize("f", [rnn, reverse_pytrees, length_only, masked])
def test_jvp_and_second_order(f):
    out, tangent = kt.jvp(f, X, V)
    want_out, want_tangent = jax.jvp(f, (X,), (V,))
    close(out, want_out)
    close(tangent, want_tangent)

    def hvp(x):
        return jnp.sum(kt.grad(f)(x) * V)

    close(kt.grad(hvp)(X), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) * V))(X), 1e-7)


def test_outputs_are_scan_outputs():
    """The gradient of the RNN is two `lax.scan`s and no `while`: ys leave the
    forward scan as its outputs, and the reverse scan takes the ys'
    cotangents and the stored residuals as its xs and gives the xs'
    cotangents as its outputs (no buffer carried, as `jax.grad` has it)."""
    jaxpr = jax.make_jaxpr(jax.jit(kt.grad(rnn)))(X)
    scans, whiles = [], []

    def walk(j):
        for eqn in j.eqns:
            if eqn.primitive.name == "scan":
                scans.append(eqn)
            whiles.extend([eqn] if eqn.primitive.name == "while" else [])
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jaxpr.jaxpr)
    assert not whiles
    assert sorted(e.params["reverse"] for e in scans) == [False, True]
    for e in scans:  # only the recurrent state is carried
        n_consts, n_carry = _scan_counts(e.params)
        carried = e.params["jaxpr"].jaxpr.invars[n_consts:][:n_carry]
        assert all(v.aval.shape in ((), (3,)) for v in carried), carried


def _scans(jaxpr) -> list:
    found = []
    for eqn in jaxpr.eqns:
        found += [eqn] if eqn.primitive.name == "scan" else []
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += _scans(inner)
    return found


def test_loop_invariant_residuals_are_computed_once():
    """The masks `masked`'s bprops read depend on neither the carry nor the
    row: they are computed once before the forward scan and read from there
    by the reverse one (`control.invariants`), not stored per iteration as
    the scan's outputs (JAX's partial evaluation keeps them out too)."""
    jaxpr = jax.make_jaxpr(jax.jit(kt.grad(masked)))(X)
    forward = [e for e in _scans(jaxpr.jaxpr) if not e.params["reverse"]]
    assert forward
    for e in forward:
        stacked = e.outvars[_scan_counts(e.params)[1] :]
        assert not [v for v in stacked if v.aval.dtype == jnp.bool_], stacked


def hoisted_in_a_branch(x):
    y = x * 0.5 + 0.1
    z = jnp.sin(x)
    if jnp.sum(x) > 0.0:
        for _ in range(10):  # its residual tanh(tanh(y)[0]) is the same every iteration
            z = z.at[0].set(jnp.tanh(jnp.tanh(y)[0]))
    return jnp.sum(y * z)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_hoisted_residual_leaves_a_branch_as_an_output(sign):
    """A loop inside a traced `if` whose residual depends on no carry is
    computed once, in the branch's trace; held as the memos' static data it
    left the branch by reference and the program failed with JAX's
    UnexpectedTracerError (found by the fuzzer). The arrays a memo reads
    are now the memos' pytree leaves. Oracle: jax.value_and_grad."""
    x = sign * jnp.asarray([0.3, -0.7, 1.1])
    got = kt.value_and_grad(hoisted_in_a_branch)(x)
    want = jax.value_and_grad(hoisted_in_a_branch)(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)
