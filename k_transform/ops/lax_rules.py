"""Gradient rules of the lax primitives with no `ops` twin (`ops.lax`).

A lax primitive that means what an `ops` primitive means is imported as that
primitive (`ops.lax_map.TWINS`), and differentiated by its rule. The others
are imported as `lax_class(name)` instances; `@lax_rule(name)` registers a
getter for that class, `get(p) -> bprop`, where `p` is the instance:
`p.param` its parameters, `p.in_avals` the `(shape, dtype)` of its inputs
(static: imported graphs are traced per aval). Each bprop follows the
registry contract (inputs, `out`, `dout` -> one gradient per input;
variadic primitives take their inputs packed as `xs`) and is written with
our primitives (mapped `jnp` functions, operators, `sum_to`, other lax
primitives), so the parser reads it and the DFunctor differentiates it again
(second order, jvp). An instance whose results are all integers or booleans
(a rule's index arithmetic, differentiated again) gets no gradient.

Lax binary operations broadcast rank-0 operands (weak-typed literals), hence
`sum_to` on their gradients. Integer inputs get None (no gradient).

A lax class with no rule of its own gets `LaxPrimitive`'s, which refuses,
naming the lax primitive (or gives no gradient when no input is a float):
`eig`, `tridiagonal_solve` and a complex `triangular_solve` (`eigh`, `svd`,
`qr`, `lu`, `cholesky`, `custom_linear_solve`: `lax_linalg_rules`), JAX's
own max-pooling gradient steps (`select_and_*`), scatters that multiply,
complex numbers, FFTs. `sort` with several keys refuses in its rule, a
`reduce_window` whose reducer is not max, min or add in its, and the rules
of `regularized_incomplete_beta` (w.r.t. a, b), `zeta` (w.r.t. s) and
`igamma_grad_a` (w.r.t. a) refuse where they have no derivative
(`NotDifferentiable`: only when that input is differentiated). This module holds the elementwise
rules, `lax_shape_rules`, `lax_window_rules` (windowed reductions,
`scatter-max`/`scatter-min`) and `lax_linalg_rules` the others
(`cummax`/`cummin` are imported as JAX's scan: `lax_map`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import NotDifferentiable, no_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ops import lax_map  # noqa: F401 - the twins (`ops.lax.TWINNED`)
from k_transform.ops.lax import (
    EffectCall,
    FloatFromBits,
    IndexArithmetic,
    LaxPrimitive,
    lax_class,
    lax_op,
)
from k_transform.ops.structural import SumTo

sum_to = SumTo()


def _inexact(aval) -> bool:
    return jnp.issubdtype(aval[1], jnp.inexact)


@bprop_getters.register(LaxPrimitive)
def get_bprop_lax(self):
    """A lax primitive with no rule: refused, unless no input is a float."""
    if not any(_inexact(a) for a in self.in_avals):
        return _no_gradient(self)  # integer and boolean inputs only (an index scatter)
    raise KTransformError(
        f"cannot differentiate the lax primitive `{self.prim.name}` (in a library call "
        "imported from its jaxpr): k_transform has no gradient rule for it (see "
        "k_transform/ops/lax_rules.py for what is supported)"
    )


def lax_rule(*names):
    """Register the decorated getter as the rule of the lax classes of `names`."""

    def register(getter):
        def get_bprop(self):
            outs = self.out_avals()
            if not any(_inexact(a) for a in (outs if self.multiple_results else [outs])):
                return _no_gradient(self)  # integer and boolean results (index arithmetic)
            return getter(self)

        get_bprop.__qualname__ = f"lax_rule({getter.__name__})"
        for name in names:
            bprop_getters.register(lax_class(name))(get_bprop)
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


# Float results that do not depend smoothly on the inputs (integer and boolean
# results are `IndexArithmetic`, whatever the primitive).
lax_rule("round", "nextafter", "iota", "rng_uniform", "stop_gradient")(_no_gradient)
bprop_getters.register(IndexArithmetic)(_no_gradient)
bprop_getters.register(EffectCall)(_no_gradient)


# Refused on purpose, each by its class (a lax primitive missing here and from
# every table is refused by `LaxPrimitive`'s rule, with the same message).
_LINALG = "this linear-algebra primitive"
REFUSED = {
    **dict.fromkeys(("complex", "real", "imag", "conj", "fft"), "complex numbers"),
    "random_gamma_grad": "the derivative of gamma samples",
    "reduce": "a reducer given as a jaxpr",
    "scatter-mul": "a scatter that multiplies",
    "approx_top_k": "approximate top-k",
    **dict.fromkeys(
        ("select_and_gather_add", "select_and_scatter_add"),
        "windowed reductions (JAX's own gradient steps of max pooling)",
    ),
    **dict.fromkeys(
        ("eig", "triangular_solve", "tridiagonal_solve"),
        _LINALG,
    ),
}


def _refused(p):
    raise KTransformError(
        f"cannot differentiate the lax primitive `{p.prim.name}` (in a library call imported "
        f"from its jaxpr): k_transform has no gradient rule for {REFUSED[p.prim.name]}"
    )


for _name in REFUSED:
    bprop_getters.register(lax_class(_name))(_refused)


@lax_rule("bitcast_convert_type")
def _bitcast(p):
    """A float made of integer bits (random bits), not a float's: no gradient.
    A float's own bits rebuilt into a float are `FloatFromBits`."""
    if _inexact(p.in_avals[0]):
        return _refused_bitcast(p)
    return _no_gradient(p)


@bprop_getters.register(FloatFromBits)
def _refused_bitcast(self):
    raise KTransformError(
        "cannot differentiate the lax primitive `bitcast_convert_type` (in a library call "
        "imported from its jaxpr): it rebuilds a float from integer bits computed from a "
        "float's bits (bit manipulation), and integer arithmetic has no gradient, so its "
        "gradient would be a silent zero"
    )


@lax_rule("sharding_constraint", "name")  # name: jax.ad_checkpoint.checkpoint_name
def _identity(p):
    return lambda x, out, dout: (dout,)


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


@derivative("asin")
def d_asin(x, out):
    return 1.0 / jnp.sqrt(1.0 - x * x)


@derivative("acos")
def d_acos(x, out):
    return -1.0 / jnp.sqrt(1.0 - x * x)


@derivative("acosh")  # JAX's x^2 - 1: (x - 1)(x + 1)'s slope at 1 is 0 * inf (NaN)
def d_acosh(x, out):
    return 1.0 / jnp.sqrt(x * x - 1.0)


@derivative("atanh")
def d_atanh(x, out):
    return 1.0 / (1.0 - x * x)


@derivative("exp2")
def d_exp2(x, out):
    return out * math.log(2.0)


@derivative("log2")  # JAX 0.11.2+: jnp.log2 is this primitive (earlier, log(x) / log(2))
def d_log2(x, out):
    return 1.0 / (x * math.log(2.0))


@derivative("one_minus_square")  # JAX 0.11.2+: 1 - x^2, in JAX's own rules for tanh, asin, ...
def d_one_minus_square(x, out):
    return -2.0 * x


@derivative("cbrt")  # JAX's out^-2: out * out's slope at 0 is 0 * inf (NaN)
def d_cbrt(x, out):
    return out**-2.0 / 3.0


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
    lax_rule(_name)(_unary(_derivative))


@lax_rule("integer_pow")
def _integer_pow(p):
    y = p.param["y"]
    if y == 0:
        return lambda x, out, dout: (jnp.zeros_like(x),)

    def bprop(x, out, dout):
        return (dout * (y * x ** (y - 1)),)

    return bprop


# -- elementwise binary (rank-0 operands broadcast) ---------------------------------
@lax_rule("rem")
def _rem(p):
    def bprop(x, y, out, dout):
        q = x / y
        return sum_to(dout, x), sum_to(-dout * (jnp.sign(q) * jnp.floor(jnp.abs(q))), y)

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


# The incomplete gamma and beta functions and the Hurwitz zeta function:
# JAX's derivatives (`jax._src.lax.special`), and its refusals where it has none.
@lax_rule("igamma", "igammac")
def _igamma(p):
    """d/dx P(a, x) = x^(a-1) e^-x / Gamma(a); d/da is the primitive
    `igamma_grad_a`. Q = 1 - P (`igammac`): the negatives."""
    grad_a = lax_op("igamma_grad_a", p.in_avals)
    lgamma = lax_op("lgamma", p.in_avals[:1])
    sign = -1.0 if p.prim.name == "igammac" else 1.0

    def bprop(a, x, out, dout):
        d_x = jnp.exp(-x + (a - 1.0) * jnp.log(x) - lgamma(a))
        return sum_to(sign * dout * grad_a(a, x), a), sum_to(sign * dout * d_x, x)

    return bprop


_IGAMMA_GRAD_A_A = NotDifferentiable(
    "the lax primitive `igamma_grad_a` w.r.t. a: the incomplete gamma function twice "
    "w.r.t. its parameter a (JAX has no such derivative either)"
)


@lax_rule("igamma_grad_a")
def _igamma_grad_a(p):
    """d/dx of dP/da = d/da of x^(a-1) e^-x / Gamma(a) = that * (log x - digamma(a))."""
    lgamma = lax_op("lgamma", p.in_avals[:1])
    digamma = lax_op("digamma", p.in_avals[:1])

    def bprop(a, x, out, dout):
        d_x = jnp.exp(-x + (a - 1.0) * jnp.log(x) - lgamma(a)) * (jnp.log(x) - digamma(a))
        return _IGAMMA_GRAD_A_A, sum_to(dout * d_x, x)

    return bprop


_BETA_SHAPE = NotDifferentiable(
    "the lax primitive `regularized_incomplete_beta` w.r.t. a or b: the incomplete beta "
    "function `betainc(a, b, x)` has a derivative w.r.t. x only (JAX has no other either)"
)


@lax_rule("regularized_incomplete_beta")
def _betainc(p):
    """d/dx I_x(a, b) = x^(a-1) (1-x)^(b-1) / B(a, b)."""
    lgamma = lax_op("lgamma", p.in_avals[:1])
    lgamma_b = lax_op("lgamma", p.in_avals[1:2])

    def bprop(a, b, x, out, dout):
        lbeta = lgamma(a) + lgamma_b(b) - lgamma(a + b)
        d_x = jnp.exp((b - 1.0) * jnp.log1p(-x) + (a - 1.0) * jnp.log(x) - lbeta)
        return _BETA_SHAPE, _BETA_SHAPE, sum_to(dout * d_x, x)

    return bprop


_ZETA_S = NotDifferentiable(
    "the lax primitive `zeta` w.r.t. s: the Hurwitz zeta function `zeta(s, q)` has a "
    "derivative w.r.t. q only here"
)


@lax_rule("zeta")
def _zeta(p):
    """d/dq zeta(s, q) = -s zeta(s + 1, q)."""
    zeta = lax_op("zeta", p.in_avals)

    def bprop(s, q, out, dout):
        return _ZETA_S, sum_to(-dout * s * zeta(s + 1.0, q), q)

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
