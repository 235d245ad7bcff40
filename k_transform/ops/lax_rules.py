"""Gradient rules of the lax primitives (`k_transform.ops.lax.LaxPrimitive`).

One `LaxPrimitive` class stands for every lax primitive, so its registered
getter dispatches on the primitive's name through `RULES`, a table of short
getters `get(p) -> bprop`. `p` is the LaxPrimitive: `p.param` its parameters,
`p.in_avals` the `(shape, dtype)` of its inputs (static: imported graphs are
traced per aval). Each bprop follows the registry contract (inputs, `out`,
`dout` -> one gradient per input; variadic primitives take their inputs
packed as `xs`) and is written with our primitives (mapped `jnp` functions,
operators, `sum_to`, other `LaxPrimitive`s), so the parser reads it and the
DFunctor differentiates it again (second order, jvp).

Lax binary operations broadcast rank-0 operands (weak-typed literals), hence
`sum_to` on their gradients. Integer inputs get None (no gradient), and so
does every input of a primitive whose results are all integers or booleans
(index arithmetic: its sensitivity may be None at run time).

Knowingly unsupported (the getter raises a KTransformError naming the lax
primitive; control flow inside a jaxpr is imported onto our own control
primitives by `k_transform.frontend.jaxpr`): linear algebra primitives
(`cholesky`, `triangular_solve`, `lu`, `eigh`, `qr`, `svd`: jnp.linalg's
mapped functions have rules), windowed reductions (`reduce_window*`,
`select_and_*`), `cummax`/`cummin`, `sort` with several keys, scatters that
multiply or take a min or max, the incomplete gamma and beta functions,
`zeta`, complex numbers, FFTs, random bits, and a float rebuilt from a
float's bits (`ops.lax.FloatFromBits`). `tests/test_lax_sweep.py` probes
every differentiable lax primitive and holds the refused ones (`REFUSED`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import no_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ops.lax import FloatFromBits, LaxPrimitive, lax_op
from k_transform.ops.structural import SumTo

sum_to = SumTo()
RULES: dict[str, object] = {}


def _inexact(aval) -> bool:
    return jnp.issubdtype(aval[1], jnp.inexact)


@bprop_getters.register(LaxPrimitive)
def get_bprop_lax(self):
    getter = RULES.get(self.prim.name)
    if getter is None and not any(_inexact(a) for a in self.in_avals):
        return _no_gradient(self)  # integer and boolean inputs only (an index scatter)
    if getter is None:
        raise KTransformError(
            f"cannot differentiate the lax primitive `{self.prim.name}` (in a library call "
            "imported from its jaxpr): k_transform has no gradient rule for it (see "
            "k_transform/ops/lax_rules.py for what is supported)"
        )
    outs = self.out_avals()
    if not any(_inexact(a) for a in (outs if self.multiple_results else [outs])):
        return _no_gradient(self)  # integer and boolean results (index arithmetic)
    return getter(self)


def lax_rule(*names):
    def register(getter):
        for name in names:
            RULES[name] = getter
        return getter

    return register


# -- no gradient: comparisons, predicates, integer and rounding results ------------
def _no_gradient(p):
    n = len(p.in_avals)
    if p.n_inputs is None:
        return no_gradient(lambda xs, out, dout: (None,) * len(xs))
    if n == 0:
        return no_gradient(lambda out, dout: ())
    if n == 1:
        return no_gradient(lambda x, out, dout: (None,))
    if n == 2:
        return no_gradient(lambda x, y, out, dout: (None, None))
    return no_gradient(lambda x, y, z, out, dout: (None, None, None))


for _name in (
    "eq ne lt le gt ge eq_to le_to lt_to and or not xor is_finite sign floor ceil round nextafter "
    "argmax argmin iota stop_gradient reduce_and reduce_or reduce_xor population_count clz "
    "shift_left shift_right_arithmetic shift_right_logical rng_bit_generator rng_uniform "
    "platform_index"
).split():
    RULES[_name] = _no_gradient


@bprop_getters.register(FloatFromBits)
def get_bprop_float_from_bits(self):
    raise KTransformError(
        "cannot differentiate the lax primitive `bitcast_convert_type` (in a library call "
        "imported from its jaxpr): it rebuilds a float from integer bits computed from a "
        "float's bits (bit manipulation), and integer arithmetic has no gradient, so its "
        "gradient would be a silent zero"
    )


def _identity(p):
    return lambda x, out, dout: (dout,)


RULES["copy"] = _identity
RULES["copy_p"] = _identity
RULES["sharding_constraint"] = _identity


@lax_rule("optimization_barrier", "device_put")
def _identities(p):
    """Several operands, each result its operand (inputs packed: `xs`)."""
    return lambda xs, out, dout: tuple(dout)


@lax_rule("reduce_precision")
def _reduce_precision(p):
    """Its transpose rounds the sensitivity the same way (JAX's linear rule)."""
    again = lax_op("reduce_precision", p.in_avals, **p.param)
    return lambda x, out, dout: (again(dout),)


# -- elementwise unary: derivative(x, out) ------------------------------------------
UNARY: dict[str, object] = {}


def derivative(*names):
    """Register `d(x, out)`, the derivative of an elementwise lax primitive."""

    def register(d):
        for name in names:
            UNARY[name] = d
        return d

    return register


@derivative("neg")
def d_neg(x, out):
    return -jnp.ones_like(x)


@derivative("sin")
def d_sin(x, out):
    return jnp.cos(x)


@derivative("cos")
def d_cos(x, out):
    return -jnp.sin(x)


@derivative("tan")
def d_tan(x, out):
    return 1.0 + out * out


@derivative("asin")
def d_asin(x, out):
    return 1.0 / jnp.sqrt(1.0 - x * x)


@derivative("acos")
def d_acos(x, out):
    return -1.0 / jnp.sqrt(1.0 - x * x)


@derivative("atan")
def d_atan(x, out):
    return 1.0 / (1.0 + x * x)


@derivative("sinh")
def d_sinh(x, out):
    return jnp.cosh(x)


@derivative("cosh")
def d_cosh(x, out):
    return jnp.sinh(x)


@derivative("tanh")
def d_tanh(x, out):
    return 1.0 - out * out


@derivative("asinh")
def d_asinh(x, out):
    return 1.0 / jnp.sqrt(x * x + 1.0)


@derivative("acosh")
def d_acosh(x, out):
    return 1.0 / (jnp.sqrt(x - 1.0) * jnp.sqrt(x + 1.0))


@derivative("atanh")
def d_atanh(x, out):
    return 1.0 / (1.0 - x * x)


@derivative("exp")
def d_exp(x, out):
    return out


@derivative("exp2")
def d_exp2(x, out):
    return out * math.log(2.0)


@derivative("log")
def d_log(x, out):
    return 1.0 / x


@derivative("log1p")
def d_log1p(x, out):
    return 1.0 / (1.0 + x)


@derivative("expm1")
def d_expm1(x, out):
    return out + 1.0


@derivative("sqrt")
def d_sqrt(x, out):
    return 0.5 / out


@derivative("rsqrt")
def d_rsqrt(x, out):
    return -0.5 * out / x


@derivative("cbrt")
def d_cbrt(x, out):
    return 1.0 / (3.0 * out * out)


@derivative("square")
def d_square(x, out):
    return 2.0 * x


@derivative("abs")
def d_abs(x, out):
    return jnp.sign(x)


@derivative("logistic")
def d_logistic(x, out):
    return out * (1.0 - out)


@derivative("erf")
def d_erf(x, out):
    return 2.0 / math.sqrt(math.pi) * jnp.exp(-x * x)


@derivative("erfc")
def d_erfc(x, out):
    return -2.0 / math.sqrt(math.pi) * jnp.exp(-x * x)


@derivative("erf_inv")
def d_erf_inv(x, out):
    return math.sqrt(math.pi) / 2.0 * jnp.exp(out * out)


def _unary(derivative):
    def get(p):
        def bprop(x, out, dout):
            return (dout * derivative(x, out),)

        return bprop

    return get


for _name, _derivative in UNARY.items():
    RULES[_name] = _unary(_derivative)


@lax_rule("integer_pow")
def _integer_pow(p):
    y = p.param["y"]
    if y == 0:
        return lambda x, out, dout: (jnp.zeros_like(x),)

    def bprop(x, out, dout):
        return (dout * (y * x ** (y - 1)),)

    return bprop


@lax_rule("convert_element_type")
def _convert(p):
    if not _inexact(p.in_avals[0]) or not jnp.issubdtype(p.param["new_dtype"], jnp.inexact):
        return _no_gradient(p)
    back = lax_op(
        "convert_element_type",
        [(p.in_avals[0][0], np.dtype(p.param["new_dtype"]))],
        new_dtype=p.in_avals[0][1],
        weak_type=False,
        sharding=None,
    )
    return lambda x, out, dout: (back(dout),)


# -- elementwise binary (rank-0 operands broadcast) ---------------------------------
@lax_rule("add", "add_any")
def _add(p):
    return lambda x, y, out, dout: (sum_to(dout, x), sum_to(dout, y))


@lax_rule("sub")
def _sub(p):
    return lambda x, y, out, dout: (sum_to(dout, x), sum_to(-dout, y))


@lax_rule("mul")
def _mul(p):
    return lambda x, y, out, dout: (sum_to(dout * y, x), sum_to(dout * x, y))


@lax_rule("div")
def _div(p):
    def bprop(x, y, out, dout):
        return sum_to(dout / y, x), sum_to(-dout * out / y, y)

    return bprop


@lax_rule("rem")
def _rem(p):
    def bprop(x, y, out, dout):
        q = x / y
        return sum_to(dout, x), sum_to(-dout * (jnp.sign(q) * jnp.floor(jnp.abs(q))), y)

    return bprop


@lax_rule("pow")
def _pow(p):
    y_float = _inexact(p.in_avals[1])

    def bprop(x, y, out, dout):
        dx = sum_to(dout * (y * x ** (y - 1)), x)
        if not y_float:
            return dx, None
        safe = jnp.where(x == 0, 1.0, x)
        return dx, sum_to(dout * out * jnp.where(x == 0, 0.0, jnp.log(safe)), y)

    return bprop


@lax_rule("atan2")
def _atan2(p):
    def bprop(x, y, out, dout):
        r = x * x + y * y
        return sum_to(dout * y / r, x), sum_to(-dout * x / r, y)

    return bprop


@lax_rule("max", "min")
def _max_min(p):
    above = p.prim.name == "max"

    def bprop(x, y, out, dout):
        wins = (x > y) if above else (x < y)
        share = jnp.where(wins, 1.0, jnp.where(x == y, 0.5, 0.0))
        return sum_to(dout * share, x), sum_to(dout * (1.0 - share), y)

    return bprop


@lax_rule("lgamma")
def _lgamma(p):
    digamma = lax_op("digamma", p.in_avals)
    return lambda x, out, dout: (dout * digamma(x),)


@lax_rule("digamma")
def _digamma(p):
    polygamma = lax_op("polygamma", [p.in_avals[0], p.in_avals[0]])
    one = np.ones(p.in_avals[0][0], p.in_avals[0][1])
    return lambda x, out, dout: (dout * polygamma(one, x),)


@lax_rule("polygamma")
def _polygamma(p):
    polygamma = lax_op("polygamma", p.in_avals)

    def bprop(m, x, out, dout):
        return None, dout * polygamma(m + 1.0, x)

    return bprop


@lax_rule("bessel_i0e")
def _bessel_i0e(p):
    i1e = lax_op("bessel_i1e", p.in_avals)
    return lambda x, out, dout: (dout * (i1e(x) - jnp.sign(x) * out),)


@lax_rule("bessel_i1e")
def _bessel_i1e(p):
    """i1e' = i0e - i1e (sign(x) + 1/x), 1/2 at 0 (JAX's rule, with its safe x)."""
    i0e = lax_op("bessel_i0e", p.in_avals)
    tiny = float(np.finfo(p.in_avals[0][1]).eps)

    def bprop(x, out, dout):
        big = jnp.abs(x) > tiny
        safe_x = jnp.where(big, x, tiny)
        d = i0e(safe_x) - out * (jnp.sign(safe_x) + 1.0 / safe_x)
        return (dout * jnp.where(big, d, 0.5),)

    return bprop


@lax_rule("select_n")
def _select_n(p):
    if len(p.in_avals) == 3:  # a boolean predicate: case 0 where False

        def bprop(xs, out, dout):
            zero = jnp.zeros_like(dout)
            pred = xs[0]
            return (
                None,
                sum_to(jnp.where(pred, zero, dout), xs[1]),
                sum_to(jnp.where(pred, dout, zero), xs[2]),
            )

        return bprop
    picks = tuple(range(len(p.in_avals) - 1))

    def bprop_n(xs, out, dout):
        zero = jnp.zeros_like(dout)
        pred = xs[0]
        grads = [
            sum_to(jnp.where(pred == k, dout, zero), x) for k, x in zip(picks, xs[1:], strict=True)
        ]
        return (None,) + tuple(grads)

    return bprop_n


@lax_rule("clamp")
def _clamp(p):
    def bprop(lo, x, hi, out, dout):
        zero = jnp.zeros_like(dout)
        inside = jnp.logical_and(x >= lo, x <= hi)
        return (
            sum_to(jnp.where(x < lo, dout, zero), lo),
            jnp.where(inside, dout, zero),
            sum_to(jnp.where(x > hi, dout, zero), hi),
        )

    return bprop
