"""Edges of the jaxpr import where a wrong number used to come out (issue 26).

- Bit manipulation (item 3): `jnp.frexp` reads its mantissa from the float's
  bits and `jnp.ldexp` calls it; integer arithmetic has no gradient, so the
  gradient was a silent zero. frexp now has a primal of ours in arithmetic
  (`frontend/jaxpr.py`, `ARITHMETIC_PRIMALS`), and any other float rebuilt
  from a float's bits is refused (`ops.lax.FloatFromBits`).
- `lax.optimization_barrier` (item 4): several results, one per operand; its
  gradient was a 1-tuple and its jvp an IndexError.
- `jnp.interp` (item 9): its jaxpr has a `slice` equation, and the variable
  named after it shadowed the builtin `slice` the generated code calls.

Oracle: `jax.grad` / `jax.jvp` of the same program in float64, and for
frexp/ldexp also central differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt

X = np.array([1.3, -0.37, 5.0e-3, 7.5, -1.0e5, 0.9])
V = np.cos(np.arange(6.0) + 1.0)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _close(a, b, rtol=1e-12, atol=1e-14):
    for u, w in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(w), rtol=rtol, atol=atol)


def _check(f, *xs, second=True):
    """kt.grad (all inputs), kt.jvp and a second derivative against JAX's."""
    at = tuple(range(len(xs)))
    vs = tuple(np.cos(np.arange(np.size(x), dtype=float) + 1.0).reshape(np.shape(x)) for x in xs)
    _close(kt.grad(f, at)(*xs), jax.grad(f, at)(*xs))
    _close(kt.jvp(f, xs, vs), jax.jvp(f, xs, vs))
    if second:

        def dfv(grad):
            return lambda *a: sum(jnp.sum(g * v) for g, v in zip(grad(f, at)(*a), vs, strict=True))

        _close(kt.grad(dfv(kt.grad), at)(*xs), jax.grad(dfv(jax.grad), at)(*xs))


def _differences(f, x, h=1e-5):
    """Central differences of scalar `f` at each element of `x`."""
    grad = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = h
        grad.flat[k] = (f(x + e) - f(x - e)) / (2 * h)
    return grad


# -- item 3: frexp and ldexp ------------------------------------------------------------
def ldexp_program(x):
    return jnp.sum(jnp.sin(jnp.ldexp(x, 1)))


def frexp_program(x):
    return jnp.sum(jnp.sin(jnp.frexp(x)[0]))


def test_ldexp_scalar_repro(mode):
    """The issue's repro: d/dx ldexp(x, 1) = 2 (it was 0, and a tangent 0)."""

    def f(x):
        return jnp.ldexp(x, 1)

    x = jnp.array(1.3)
    _close(kt.grad(f)(x), 2.0)
    _close(kt.jvp(f, x, 1.0), (2.6, 2.0))


def test_frexp_scalar_repro(mode):
    """d/dx frexp(x)[0] = 2**-e (it was 0)."""

    def f(x):
        return jnp.frexp(x)[0]

    x = jnp.array(1.3)
    _close(kt.grad(f)(x), 0.5)
    _close(kt.jvp(f, x, 1.0), (0.65, 0.5))


@pytest.mark.parametrize("program", [ldexp_program, frexp_program])
def test_frexp_ldexp_against_jax_and_differences(program):
    _check(program, X)
    np.testing.assert_allclose(
        np.asarray(kt.grad(program)(X)), _differences(lambda x: float(program(x)), X), rtol=1e-6
    )


def test_ldexp_array_exponents_both_arguments():
    """An integer exponent per element; the float input's gradient is 2**e."""
    e = np.array([3, -2, 0, 7, -30, 1])

    def f(x):
        return jnp.sum(jnp.sin(jnp.ldexp(x, e)) * x)

    _check(f, X)


def test_frexp_values_unchanged():
    """The arithmetic primal of frexp gives JAX's values, bit for bit, at the
    edges: zeros, infinities, nan, subnormals, the largest float; in float64
    and float32."""
    for dtype in (np.float64, np.float32):
        info = np.finfo(dtype)
        x = np.array(
            [
                0.0,
                -0.0,
                np.inf,
                -np.inf,
                np.nan,
                info.smallest_subnormal,
                -3 * info.smallest_subnormal,
                info.tiny,
                info.tiny / 3,
                info.max,
                -info.max,
                1.0,
                0.5,
                -0.75,
                1e-3,
                12345.678,
            ],
            dtype,
        )
        out, _ = kt.jvp(lambda x: jnp.frexp(x)[0], x, np.ones_like(x))
        want = jnp.frexp(x)[0]
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
        # the tangent: 2**-e, exact (JAX's float32 `2.0 ** 125`, a pow, is off by
        # 3e-6); at subnormals and the largest floats, JAX's (XLA's CPU flushes
        # subnormals to zero: inf, 0)
        _, tangent = kt.jvp(lambda x: jnp.frexp(x)[0], x, np.ones_like(x))
        _, e = jnp.frexp(x)
        normal = np.isfinite(x) & (np.abs(x) >= info.tiny) & (np.abs(x) < info.max / 2)
        with np.errstate(over="ignore"):
            exact = np.ldexp(np.ones(x.shape, dtype), -np.asarray(e))
        np.testing.assert_array_equal(np.asarray(tangent)[normal], exact[normal])
        _, want = jax.jvp(lambda x: jnp.frexp(x)[0], (x,), (np.ones_like(x),))
        # (not at subnormals: whether XLA flushes them there differs between its CPU
        # emitters, and the tests compile with the classic ones, see conftest.py)
        edge = ~normal & ~((x != 0) & (np.abs(x) < info.tiny))
        np.testing.assert_array_equal(np.asarray(tangent)[edge], np.asarray(want)[edge])


def _opaque(fn):
    fn.__module__ = "jax.opaque_for_test"  # library code: traced, never parsed
    return jax.jit(fn)


def _keep_high_bits(x):
    """A float rebuilt from its own bits with the low mantissa bits cleared."""
    bits = lax.bitcast_convert_type(x, jnp.int64)
    return lax.bitcast_convert_type(bits & ~0xFFFF, jnp.float64)


def _keep_high_bits_in_loop(x):
    """The same, with the bits carried through a `fori_loop` (a scan)."""
    bits = lax.bitcast_convert_type(x, jnp.int64)
    bits = lax.fori_loop(0, 3, lambda i, b: b & ~(0xFF << (8 * i)), bits)
    return lax.bitcast_convert_type(bits, jnp.float64) * 2.0


def _bits_made_in_loop(x):
    """The bits made inside a `while` body and rebuilt after it."""

    def body(c):
        i, _, y = c
        return i + 1, lax.bitcast_convert_type(y, jnp.int64) & ~0xFF, y * 1.5

    _, bits, _ = lax.while_loop(lambda c: c[0] < 2, body, (0, jnp.zeros_like(x, jnp.int64), x))
    return lax.bitcast_convert_type(bits, jnp.float64)


@pytest.mark.parametrize("fn", [_keep_high_bits, _keep_high_bits_in_loop, _bits_made_in_loop])
def test_float_rebuilt_from_bits_is_refused(fn):
    """JAX gives 0 here; we refuse, naming the primitive, in grad and jvp."""
    opaque = _opaque(fn)

    def f(x):
        return jnp.sum(jnp.sin(opaque(x)))

    with pytest.raises(kt.KTransformError, match="bitcast_convert_type"):
        kt.grad(f)(X)
    with pytest.raises(kt.KTransformError, match="bitcast_convert_type"):
        kt.jvp(f, X, V)


def test_bits_read_for_a_predicate_still_differentiate():
    """`jnp.copysign` reads the sign bit (`signbit`), a boolean: no float is
    rebuilt from bits, so no refusal; random floats from random bits neither."""

    def f(x, y):
        return jnp.sum(jnp.sin(jnp.copysign(x, y)))

    _check(f, X, np.flip(X) - 0.4)
    key = jax.random.key(0)

    def g(x):
        return jnp.sum(jnp.sin(x * jax.random.uniform(key, x.shape, x.dtype)))

    _check(g, X, second=False)


# -- item 4: optimization_barrier -----------------------------------------------------------
def test_optimization_barrier_single(mode):
    def f(x):
        return jnp.sin(lax.optimization_barrier(x))

    def f4(x):
        return lax.optimization_barrier(x)

    x = jnp.array(0.7)
    _close(kt.jvp(f, x, 1.0), jax.jvp(f, (x,), (1.0,)))  # an IndexError before
    d = kt.grad(f4)(x)  # a 1-tuple before
    assert not isinstance(d, tuple)
    _close(d, 1.0)
    _check(lambda x: jnp.sum(jnp.sin(lax.optimization_barrier(x)) * x), X)


def test_optimization_barrier_tuple(mode):
    """Several operands (the rule had the wrong arity), one of them an integer."""

    def f(x, y):
        a, b, n = lax.optimization_barrier((x, y * 2.0, 3))
        return jnp.sum(jnp.sin(a) * b) * n

    _check(f, X, np.flip(X))


# -- item 9: interp, and builtins shadowed in generated code --------------------------------
def test_interp_at_sorted_points(mode):
    """`jnp.interp(0.1, jnp.sort(y), x)` w.r.t. x and y ('DynamicJaxprTracer'
    object is not callable before: a variable named `slice`)."""
    xp = np.array([0.3, 1.2, -0.5, 2.0])
    yp = np.array([0.4, -0.2, 0.9, 0.05])

    def f(x, y):
        return jnp.interp(0.1, jnp.sort(y), x)

    _check(f, xp, yp)


def test_user_variables_named_like_builtins(mode):
    """A user's `slice` and `tuple` must not shadow the builtins generated code calls."""

    def f(x):
        slice = x * 2.0  # noqa: A001
        tuple = slice[1:]  # noqa: A001
        return jnp.sum(jnp.sin(tuple)) + jnp.sum(slice[:2])

    _check(f, X)


def test_checkpoint_name_is_the_identity():
    """`jax.ad_checkpoint.checkpoint_name` (a remat policy's label) binds
    the `name` primitive, which had no rule: refused (helper-25, JAX's
    gradient-checkpointing docs)."""
    from jax.ad_checkpoint import checkpoint_name

    def f(x):
        return jnp.sum(checkpoint_name(jnp.sin(x), name="a") * x)

    x = jnp.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(kt.grad(f)(x), jax.grad(f)(x), rtol=1e-6)
    np.testing.assert_allclose(kt.hessian(f)(x), jax.hessian(f)(x), rtol=1e-5, atol=1e-6)
