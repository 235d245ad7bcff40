"""Every differentiable `jax.lax` primitive: differentiated right, or refused.

The universe is every `Primitive` object in the public `jax.lax` and
`jax.lax.linalg` namespaces that JAX can differentiate (it has a JVP or a
transpose rule): `differentiable_primitives()`. Each has a probe in `PROBES`
(`name -> (fn, inputs)`): a small float64 program calling a `jax.lax`
function whose jaxpr holds that primitive (checked). The probe is made
library code (traced, never parsed: `program`), so k_transform imports it
from its jaxpr (`k_transform/frontend/jaxpr.py`) and differentiates it with
its lax rules (`k_transform/ops/lax_rules.py`, `lax_shape_rules.py`).

For `f(*xs) = sum(sin(probe(*xs)))` (over the probe's float results), one of
two outcomes is allowed:

- `kt.grad` (w.r.t. every input), `kt.jvp` and a second derivative (the
  gradient of `<grad f, v>`) equal JAX's (`jax.grad`, or `jax.jacfwd` for
  `while`, which JAX cannot reverse, and `jax.jvp`) in float64;
- a `KTransformError` naming the primitive (it is in `REFUSED`, with the
  reason).

Anything else fails: a wrong number, an exception of another type, or a
primitive that moved between the two outcomes (a refused one that now
passes must leave `REFUSED`).

Collectives (`psum`, `all_gather`, ...) exist only inside `shard_map` (or
`pmap`); their probes run under `shard_map` on one device, which the
importer refuses as a whole. `NOT_PROBED` holds the two that no probe can
put in front of a value being differentiated.

Cost: about 40 s on one busy core (eager mode; 143 probes, three
derivatives each, on both sides).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src.interpreters import ad
from jax._src.lax import windowed_reductions
from jax.extend import core as jex_core
from jax.sharding import PartitionSpec

import k_transform as kt

RNG = np.random.default_rng(1)
X = RNG.uniform(0.15, 0.85, (2, 3))  # distinct, in (0, 1)
Y = RNG.uniform(0.15, 0.85, (2, 3))
BIG = X + 1.5
SPD = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, -0.2], [0.1, -0.2, 1.8]])
SQ = SPD + np.array([[0.0, 0.4, 0.0], [-0.1, 0.0, 0.3], [0.2, 0.0, 0.0]])
VEC = RNG.uniform(0.15, 0.85, 4)


def _where(pred, x, y):
    return lax.select(pred, x, y)


def _to_float(n):
    return lax.convert_element_type(n, np.float64)


def _int_of(x, scale=10.0, dtype=np.int32):
    return lax.convert_element_type(x * scale, dtype)


def _mesh():
    return jax.make_mesh((1,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def _sharded(fn):
    """`fn` under `shard_map` over a one-device axis `i`."""
    return jax.shard_map(
        fn,
        mesh=_mesh(),
        in_specs=PartitionSpec("i"),
        out_specs=PartitionSpec("i"),
        check_vma=False,
    )


def _cmp(p):
    return lambda x, y: _where(p.bind(x, y), x * y, x - y)


def _reduce_two(x, y):
    """A variadic `reduce` (JAX keeps a sum as reduce_sum): a sum and a product."""
    return lax.reduce((x, y), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] * b[1]), (1,))


def _select_and_gather_add(x, t):
    return windowed_reductions._select_and_gather_add(
        t, x, lax.ge_p, (1, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)
    )


def _select_and_scatter_add(x, s):
    return windowed_reductions._select_and_scatter_add(
        s[:, :2], x, lax.ge_p, (1, 2), (1, 1), ((0, 0), (0, 0))
    )


def _solve(m, b):
    return lax.custom_linear_solve(lambda v: m @ v, b, lambda _, v: jnp.linalg.solve(m, v))


def _while(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.sin(c[1]) * 1.2), (0, x))[1]


# name -> (probe, inputs). Probes return floats; integer and boolean results
# are mixed into float ones, so their (zero) gradient is checked too.
PROBES = {
    # -- elementwise, one operand
    "abs": (lax.abs, (X - 0.5,)),
    "acos": (lax.acos, (X,)),
    "acosh": (lax.acosh, (BIG,)),
    "asin": (lax.asin, (X,)),
    "asinh": (lax.asinh, (X,)),
    "atan": (lax.atan, (X,)),
    "atanh": (lax.atanh, (X,)),
    "bessel_i0e": (lax.bessel_i0e, (X - 0.5,)),
    "bessel_i1e": (lax.bessel_i1e, (X - 0.5,)),
    "cbrt": (lax.cbrt, (X,)),
    "ceil": (lambda x: x * lax.ceil(3.0 * x), (X,)),
    "cos": (lax.cos, (X,)),
    "cosh": (lax.cosh, (X,)),
    "digamma": (lax.digamma, (BIG,)),
    "erf": (lax.erf, (X,)),
    "erf_inv": (lax.erf_inv, (X - 0.5,)),
    "erfc": (lax.erfc, (X,)),
    "exp": (lax.exp, (X,)),
    "exp2": (lax.exp2, (X,)),
    "expm1": (lax.expm1, (X,)),
    "floor": (lambda x: x * lax.floor(3.0 * x), (X,)),
    "integer_pow": (lambda x: lax.integer_pow(x, 3), (X,)),
    "is_finite": (lambda x: _where(lax.is_finite(1.0 / (x - 0.5)), x, 2.0 * x), (X,)),
    "lgamma": (lax.lgamma, (BIG,)),
    "log": (lax.log, (X,)),
    "log1p": (lax.log1p, (X,)),
    "logistic": (lax.logistic, (X,)),
    "neg": (lax.neg, (X,)),
    "round": (lambda x: x * lax.round(3.0 * x), (X,)),
    "rsqrt": (lax.rsqrt, (X,)),
    "sign": (lambda x: x * lax.sign(x - 0.5), (X,)),
    "sin": (lax.sin, (X,)),
    "sinh": (lax.sinh, (X,)),
    "sqrt": (lax.sqrt, (X,)),
    "square": (lax.square, (X,)),
    "tan": (lax.tan, (X,)),
    "tanh": (lax.tanh, (X,)),
    "polygamma": (lambda x: lax.polygamma(np.ones((2, 3)), x), (BIG,)),
    "reduce_precision": (
        lambda x: lax.reduce_precision(x * 3.3, exponent_bits=5, mantissa_bits=4) * x,
        (X,),
    ),
    "convert_element_type": (lambda x: _to_float(lax.convert_element_type(x, np.float32)), (X,)),
    "bitcast_convert_type": (
        lambda x: lax.bitcast_convert_type(lax.bitcast_convert_type(x, np.int64), np.float64),
        (X,),
    ),
    "copy": (lambda x: lax.copy_p.bind(x) * x, (X,)),
    "stop_gradient": (lambda x: x * lax.stop_gradient(x), (X,)),
    "optimization_barrier": (lambda x, y: lax.optimization_barrier((x, y * 2.0)), (X, Y)),
    "device_put": (lambda x: jax.device_put(x) * x, (X,)),
    "sharding_constraint": (
        lambda x: lax.with_sharding_constraint(x, jax.NamedSharding(_mesh(), PartitionSpec())),
        (X,),
    ),
    "dce_sink": (lambda x: (lax.dce_sink(x), x * 2.0)[1], (X,)),
    # -- elementwise, several operands
    "add": (lax.add, (X, Y)),
    "sub": (lax.sub, (X, Y)),
    "mul": (lax.mul, (X, Y)),
    "div": (lax.div, (X, Y)),
    "rem": (lambda x, y: lax.rem(3.0 * x, y), (X, Y)),
    "pow": (lax.pow, (X, Y)),
    "atan2": (lax.atan2, (X, Y)),
    "max": (lax.max, (X, Y)),
    "min": (lax.min, (X, Y)),
    "clamp": (lambda x: lax.clamp(0.3, x, 0.7), (X,)),
    "select_n": (lambda x, y: lax.select_n(_int_of(x, 2.9), x, y, x * y), (X, Y)),
    "igamma": (lax.igamma, (BIG, X)),
    "igammac": (lax.igammac, (BIG, X)),
    "regularized_incomplete_beta": (
        lambda a, x: lax.betainc(a, a + 0.5, x),
        (BIG, X),
    ),
    # -- comparisons and bits (no gradient through them)
    "eq": (_cmp(lax.eq_p), (X, np.where(X > 0.5, X, Y))),
    "ne": (_cmp(lax.ne_p), (X, np.where(X > 0.5, X, Y))),
    "lt": (_cmp(lax.lt_p), (X, Y)),
    "le": (_cmp(lax.le_p), (X, Y)),
    "gt": (_cmp(lax.gt_p), (X, Y)),
    "ge": (_cmp(lax.ge_p), (X, Y)),
    "eq_to": (_cmp(lax.eq_to_p), (X, np.where(X > 0.5, X, Y))),
    "le_to": (_cmp(lax.le_to_p), (X, Y)),
    "lt_to": (_cmp(lax.lt_to_p), (X, Y)),
    "and": (lambda x: _where(lax.bitwise_and(x > 0.3, x < 0.7), x, x * x), (X,)),
    "or": (lambda x: _where(lax.bitwise_or(x < 0.3, x > 0.7), x, x * x), (X,)),
    "xor": (lambda x: _where(lax.bitwise_xor(x < 0.3, x < 0.7), x, x * x), (X,)),
    "not": (lambda x: _where(lax.bitwise_not(x < 0.5), x, x * x), (X,)),
    "shift_left": (lambda x: x * _to_float(lax.shift_left(_int_of(x), np.int32(2))), (X,)),
    "shift_right_arithmetic": (
        lambda x: x * _to_float(lax.shift_right_arithmetic(_int_of(x), np.int32(1))),
        (X,),
    ),
    "shift_right_logical": (
        lambda x: x * _to_float(lax.shift_right_logical(_int_of(x), np.int32(1))),
        (X,),
    ),
    "mulhi": (
        lambda x: x * _to_float(lax.mulhi(_int_of(x, 1e9, np.uint32), np.uint32(3_000_000_000))),
        (X,),
    ),
    "argmax": (lambda x: x * _to_float(lax.argmax(x, 1, np.int32))[:, None], (X,)),
    "argmin": (lambda x: x * _to_float(lax.argmin(x, 1, np.int32))[:, None], (X,)),
    # -- complex numbers
    "complex": (lambda x, y: lax.real(lax.complex(x, y) * lax.complex(y, x)), (X, Y)),
    "real": (lambda x, y: lax.real(lax.complex(x, y)), (X, Y)),
    "imag": (lambda x, y: lax.imag(lax.complex(x, y)), (X, Y)),
    "conj": (lambda x, y: lax.imag(lax.conj(lax.complex(x, y))), (X, Y)),
    "fft": (lambda x: lax.real(jnp.fft.fft(x)), (X,)),
    # -- reductions, cumulative
    "reduce_sum": (lambda x: lax.reduce_sum(x, (1,)), (X,)),
    "reduce_max": (lambda x: lax.reduce_max(x, (0,)), (X,)),
    "reduce_min": (lambda x: lax.reduce_min(x, (1,)), (X,)),
    "reduce_prod": (lambda x: lax.reduce_prod(x, (1,)), (X,)),
    "reduce": (_reduce_two, (X, Y)),
    "cumsum": (lambda x: lax.cumsum(x, axis=1, reverse=True), (X,)),
    "cumprod": (lambda x: lax.cumprod(x, axis=1), (X,)),
    "cumlogsumexp": (lambda x: lax.cumlogsumexp(x, axis=1), (X,)),
    "cummax": (lambda x: lax.cummax(x, axis=1), (X,)),
    "cummin": (lambda x: lax.cummin(x, axis=1), (X,)),
    # -- contraction, convolution
    "dot_general": (lambda x, y: lax.dot_general(x, y, (((1,), (1,)), ((), ()))), (X, Y)),
    "conv_general_dilated": (
        lambda x, w: lax.conv_general_dilated(
            x[None, None], w[None, None, :, :2], (1, 1), "SAME", lhs_dilation=(1, 1)
        ),
        (X, Y),
    ),
    # -- shapes
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (4, 2, 3), (1, 2)), (X,)),
    "reshape": (lambda x: lax.reshape(x, (3, 2)), (X,)),
    "squeeze": (lambda x: lax.squeeze(x[:1], (0,)), (X,)),
    "transpose": (lambda x: lax.transpose(x, (1, 0)), (X,)),
    "rev": (lambda x: lax.rev(x, (1,)) * x, (X,)),
    "pad": (lambda x: lax.pad(x, 0.5, ((1, 2, 1), (0, -1, 0))), (X,)),
    "concatenate": (lambda x, y: lax.concatenate([x, y, x], 1), (X, Y)),
    "slice": (lambda x: lax.slice(x, (0, 1), (2, 3), (1, 2)), (X,)),
    "tile": (lambda x: lax.tile(x, (2, 1)), (X,)),
    "split": (lambda x: lax.split(x, (1, 2), axis=1)[1], (X,)),
    "stack": (lambda x, y: lax.stack([x, y * 2.0], axis=1), (X, Y)),
    "unstack": (lambda x: lax.unstack(x, axis=1)[2] * x[:, 0], (X,)),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (1, 1), (1, 2)), (X,)),
    "dynamic_update_slice": (
        lambda x, y: lax.dynamic_update_slice(x, y[:1, :2] * 3.0, (1, 0)),
        (X, Y),
    ),
    "gather": (lambda x: x[np.array([1, 0, 1]), np.array([2, 2, 0])], (X,)),
    "scatter": (lambda x, y: x.at[np.array([0, 1, 0]), 1].set(y[0]), (X, Y)),
    "scatter-add": (lambda x, y: x.at[np.array([0, 1, 0]), 1].add(y[0]), (X, Y)),
    "scatter-sub": (lambda x, y: x.at[np.array([0, 1, 0]), 1].subtract(y[0]), (X, Y)),
    "scatter-mul": (lambda x, y: x.at[np.array([0, 1, 0]), 1].multiply(y[0]), (X, Y)),
    "scatter-min": (lambda x, y: x.at[np.array([0, 1]), 1].min(y[0, :2]), (X, Y)),
    "scatter-max": (lambda x, y: x.at[np.array([0, 1]), 1].max(y[0, :2]), (X, Y)),
    "sort": (lambda x, y: lax.sort((x, y), dimension=1, num_keys=1)[1] * x, (X, Y)),
    "top_k": (lambda x: lax.top_k(x, 2)[0], (X,)),
    "approx_top_k": (lambda x: lax.approx_max_k(x, 2)[0], (X,)),
    # -- windows
    "reduce_window_sum": (
        lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2), (1, 1), "VALID"),
        (X,),
    ),
    "reduce_window_max": (
        lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 2), (1, 1), "VALID"),
        (X,),
    ),
    "reduce_window_min": (
        lambda x: lax.reduce_window(x, np.inf, lax.min, (1, 2), (1, 1), "VALID"),
        (X,),
    ),
    "reduce_window": (
        lambda x: lax.reduce_window(x, 1.0, lambda a, b: a * b + 0.5, (1, 2), (1, 1), "VALID"),
        (X,),
    ),
    "select_and_gather_add": (_select_and_gather_add, (X, Y)),
    "select_and_scatter_add": (_select_and_scatter_add, (X, Y)),
    # -- control flow
    "cond": (lambda x: lax.cond(jnp.sum(x) > 1.0, jnp.sin, jnp.cos, x), (X,)),
    "while": (_while, (X,)),
    "scan": (lambda x: lax.scan(lambda c, r: (c * r, c + r), x[0], x)[1], (X,)),
    "custom_linear_solve": (_solve, (SPD, VEC[:3])),
    # -- linear algebra
    "cholesky": (lambda m: lax.linalg.cholesky(m), (SPD,)),
    "eig": (lambda m: lax.real(lax.linalg.eig(m, compute_left_eigenvectors=False)[0]), (SQ,)),
    "eigh": (lambda m: lax.linalg.eigh(m)[1], (SPD,)),
    "lu": (lambda m: lax.linalg.lu(m)[0], (SQ,)),
    "qr": (lambda m: lax.linalg.qr(m)[1], (SQ,)),
    "svd": (lambda m: lax.linalg.svd(m, compute_uv=False), (SQ,)),
    "triangular_solve": (
        lambda m, b: lax.linalg.triangular_solve(m, b, left_side=True, lower=True),
        (SPD, SQ),
    ),
    "tridiagonal_solve": (
        lambda d, b: lax.linalg.tridiagonal_solve(d[:3] * 0.1, d[:3] + 2.0, d[1:] * 0.2, b),
        (VEC, SQ),
    ),
    # -- collectives: only inside shard_map (refused as a whole)
    "psum": (_sharded(lambda x: lax.psum(x, "i")), (X,)),
    "all_gather": (_sharded(lambda x: lax.all_gather(x, "i", tiled=True)), (X,)),
    "all_to_all": (_sharded(lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True)), (X,)),
    "ppermute": (_sharded(lambda x: lax.ppermute(x, "i", [(0, 0)])), (X,)),
}

# Primitives a newer JAX added (0.11.2): probed where this JAX has them.
NEWER = {
    "log2": lambda: (lax.log2, (X,)),
    "one_minus_square": lambda: (lax.one_minus_square, (X,)),
}
PROBES.update({name: probe() for name, probe in NEWER.items() if hasattr(lax, name)})
# Probed, but without a JVP or transpose rule in a newer JAX (0.11.2), where
# the probe still runs: JAX's marker that keeps a value from dead-code removal.
RULE_DROPPED_BY_NEWER_JAX = {"dce_sink"}

# Differentiable primitives with no probe, and why.
NOT_PROBED = {
    "stage": "the identity that lifts a constant into a trace: a traced operand is never "
    "staged, so no jaxpr applies it to a value being differentiated",
    "ragged_all_to_all": "a collective of ragged buffers (offsets and sizes per device), "
    "only inside shard_map, which is refused as a whole (see the `psum` probe)",
}

_NO_RULE = "no lax rule"
_SHARD_MAP = "a collective: only inside `shard_map`, which has no rule (refused as a whole)"
# Primitives refused with a KTransformError, and why.
REFUSED = {
    "bitcast_convert_type": "a float rebuilt from a float's bits: integer arithmetic has no "
    "gradient (JAX gives 0)",
    "complex": "complex numbers",
    "real": "complex numbers",
    "imag": "complex numbers",
    "conj": "complex numbers",
    "fft": "complex numbers",
    "igamma": "its derivative w.r.t. a differentiated again (JAX has none)",
    "igammac": "its derivative w.r.t. a differentiated again (JAX has none)",
    "regularized_incomplete_beta": "w.r.t. a and b (JAX has no such derivative)",
    "reduce": _NO_RULE + " (a reducer given as a jaxpr)",
    "scatter-mul": _NO_RULE,
    "approx_top_k": _NO_RULE,
    "reduce_window": _NO_RULE + " (a reducer other than max, min or add)",
    "select_and_gather_add": _NO_RULE + " (windowed reductions)",
    "select_and_scatter_add": _NO_RULE + " (windowed reductions)",
    "custom_linear_solve": _NO_RULE + " (no `transpose_solve`: JAX refuses reverse mode too)",
    "eig": _NO_RULE + " (linear algebra inside a jaxpr)",
    "tridiagonal_solve": _NO_RULE + " (linear algebra inside a jaxpr)",
    "psum": _SHARD_MAP,
    "all_gather": _SHARD_MAP,
    "all_to_all": _SHARD_MAP,
    "ppermute": _SHARD_MAP,
}


# The primitive a refusal names, where it is not the probe's own: the probe's
# first step back (`real` of a complex result), or the `shard_map` around it.
REFUSED_AS = {
    "igamma": "igamma_grad_a",
    "igammac": "igamma_grad_a",
    "complex": "real",
    "conj": "imag",
    "eig": "real",
    "fft": "real",
    "psum": "shard_map",
    "all_gather": "shard_map",
    "all_to_all": "shard_map",
    "ppermute": "shard_map",
}


def differentiable_primitives() -> set[str]:
    """Names of the Primitive objects of `jax.lax` and `jax.lax.linalg` with a
    JVP or transpose rule."""
    names = set()
    for module in (jax.lax, jax.lax.linalg):
        for value in vars(module).values():
            if isinstance(value, jex_core.Primitive) and (
                value in ad.primitive_jvps or value in ad.primitive_transposes
            ):
                names.add(value.name)
    return names


pytestmark = pytest.mark.usefixtures("x64_eager")


def summed(fn):
    """`sum(sin(r))` over the float results `r` of `fn(*xs)`."""

    def probe(*xs):
        total = 0.0
        for r in jax.tree.leaves(fn(*xs)):
            if jnp.issubdtype(r.dtype, jnp.floating):
                total = total + jnp.sum(jnp.sin(r))
        return total

    return probe


def program(fn, n_inputs: int):
    """A user function calling `summed(fn)` as library code (traced and imported
    from its jaxpr, never parsed)."""
    probe = summed(fn)
    probe.__module__ = "jax.opaque_for_test"
    opaque = jax.jit(probe)
    if n_inputs == 1:

        def f(x):
            return opaque(x)

    else:

        def f(x, y):
            return opaque(x, y)

    return f


def _primitives_in(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    sub = sub.jaxpr
                if isinstance(sub, jex_core.Jaxpr):
                    names |= _primitives_in(sub)
    return names


def derivatives(f, grad, jvp, xs):
    """Gradient, jvp and a second derivative (the gradient of `<grad f, v>`)."""
    at = tuple(range(len(xs)))
    vs = tuple(np.cos(x + 1.0) for x in xs)

    def dfv(*args):
        return sum(jnp.sum(g * v) for g, v in zip(grad(f, at)(*args), vs, strict=True))

    return grad(f, at)(*xs), jvp(f, xs, vs), grad(dfv, at)(*xs)


def _jax_grad(f, at):
    """JAX's gradient (`jacfwd` where JAX has no reverse mode: `while`)."""

    def grad(*xs):
        try:
            return jax.grad(f, at)(*xs)
        except ValueError as e:
            if "Reverse-mode differentiation does not work" not in str(e):
                raise
            return jax.jacfwd(f, at)(*xs)

    return grad


def test_every_differentiable_primitive_is_probed():
    universe = differentiable_primitives()
    assert not set(PROBES) & set(NOT_PROBED)
    missing = universe - set(PROBES) - set(NOT_PROBED)
    assert not missing, f"give these lax primitives a probe in PROBES: {sorted(missing)}"
    stale = (set(PROBES) | set(NOT_PROBED)) - universe - RULE_DROPPED_BY_NEWER_JAX
    assert not stale, f"no longer differentiable lax primitives: {sorted(stale)}"
    assert set(REFUSED) <= set(PROBES)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_lax_primitive(name):
    fn, xs = PROBES[name]
    structs = [jax.ShapeDtypeStruct(np.shape(x), np.float64) for x in xs]
    assert name in _primitives_in(jax.make_jaxpr(fn)(*structs).jaxpr), "the probe misses it"
    f = program(fn, len(xs))
    if name in REFUSED:
        named = re.escape(f"the lax primitive `{REFUSED_AS.get(name, name)}`")
        with pytest.raises(kt.KTransformError, match=named):
            derivatives(f, kt.grad, kt.jvp, xs)
        return
    got = derivatives(f, kt.grad, kt.jvp, xs)
    want = derivatives(summed(fn), _jax_grad, jax.jvp, xs)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-11)
