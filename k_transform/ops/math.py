"""Elementwise math primitives (MindSpore names) and the library functions
that map onto them (`jnp.sin`, `np.sin`, `math.sin`, `jax.nn.sigmoid`, ...).

Unary functions take one array; `Maximum`, `Minimum` broadcast two;
`Select(c, x, y)` is `jnp.where(c, x, y)`; `Clip(x, lo, hi)` takes None for
a missing bound; `Atan2(y, x)` is `jnp.arctan2`; `Fmod(x, y)` is `jnp.fmod`
(MindSpore's `Mod`); `Tril(k)` / `Triu(k)` keep the lower / upper triangle of
the last two axes. `math.floor`/`math.ceil` are not mapped: they return ints.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np

from k_transform.bprop_registry.helpers import rule, unary, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import (
    NONE,
    map_functions,
    register_attribute,
    register_function,
    register_method,
)
from k_transform.ops.structural import SumTo

Sin = elementwise("Sin", jnp.sin, "jnp.sin")
Cos = elementwise("Cos", jnp.cos, "jnp.cos")
Tan = elementwise("Tan", jnp.tan, "jnp.tan")
Exp = elementwise("Exp", jnp.exp, "jnp.exp")
Log = elementwise("Log", jnp.log, "jnp.log")
Sqrt = elementwise("Sqrt", jnp.sqrt, "jnp.sqrt")
Tanh = elementwise("Tanh", jnp.tanh, "jnp.tanh")
Sigmoid = elementwise("Sigmoid", jax.nn.sigmoid, "jax.nn.sigmoid")
ReLU = elementwise("ReLU", jax.nn.relu, "jax.nn.relu")
Abs = elementwise("Abs", jnp.abs, "jnp.abs", doc="`|x|` (MindSpore's Abs: derivative 0 at 0).")
AbsJax = elementwise("AbsJax", jnp.abs, "jnp.abs", doc="`jnp.abs`: JAX's derivative at 0 is 1.")
Square = elementwise("Square", jnp.square, "jnp.square")
Reciprocal = elementwise("Reciprocal", jnp.reciprocal, "jnp.reciprocal")
Log1p = elementwise("Log1p", jnp.log1p, "jnp.log1p")
Expm1 = elementwise("Expm1", jnp.expm1, "jnp.expm1")
Rsqrt = elementwise("Rsqrt", jax.lax.rsqrt, "jax.lax.rsqrt")
Erf = elementwise("Erf", jsp.erf, "jax.scipy.special.erf")
Sinh = elementwise("Sinh", jnp.sinh, "jnp.sinh")
Cosh = elementwise("Cosh", jnp.cosh, "jnp.cosh")
Atan = elementwise("Atan", jnp.arctan, "jnp.arctan")
Asinh = elementwise("Asinh", jnp.arcsinh, "jnp.arcsinh")
Sign = elementwise("Sign", jnp.sign, "jnp.sign")
Floor = elementwise("Floor", jnp.floor, "jnp.floor")
Ceil = elementwise("Ceil", jnp.ceil, "jnp.ceil")
Round = elementwise("Round", jnp.round, "jnp.round")
Maximum = elementwise("Maximum", jnp.maximum, "jnp.maximum", 2)
Minimum = elementwise("Minimum", jnp.minimum, "jnp.minimum", 2)
Select = elementwise("Select", jnp.where, "jnp.where", 3, "`jnp.where(c, x, y)`.")
Clip = elementwise("Clip", jnp.clip, "jnp.clip", 3, "MindSpore's clamp (x's at a bound).")
ClipJax = elementwise("ClipJax", jnp.clip, "jnp.clip", 3, "`jnp.clip`: ties split, as JAX's.")
Real = elementwise("Real", jnp.real, "jnp.real", doc="`jnp.real(x)`: x itself for a real x.")
Imag = elementwise("Imag", jnp.imag, "jnp.imag", doc="`jnp.imag(x)`: zeros for a real x.")


def imag_grad(x, dout):
    """The adjoint of `jnp.imag` at `x`, in JAX's convention: `-1j * dout`
    (MindSpore's rule gives the conjugate, `+1j * dout`); zeros for a real x."""
    if jnp.iscomplexobj(x):
        return (-1j * dout).astype(x.dtype)
    return jnp.zeros_like(x)


ImagGrad = elementwise("ImagGrad", imag_grad, "imag_grad", 2, "`imag_grad(x, dout)`.")
Atan2 = elementwise("Atan2", jnp.arctan2, "jnp.arctan2", 2, "`jnp.arctan2(y, x)`.")
Fmod = elementwise(
    "Fmod", jnp.fmod, "jnp.fmod", 2, "`jnp.fmod(x, y)`: C's remainder (MindSpore's `ops.Mod`)."
)


class Tril(JaxPrimitive):
    """`Tril(k)(x)`: `jnp.tril(x, k)`, zeros above the k-th diagonal."""

    jax_fn = staticmethod(jnp.tril)
    jax_name = "jnp.tril"
    jax_kwargs = {"k": "k"}
    n_inputs = 1

    def __init__(self, k: int = 0):
        super().__init__(k=k)


class Triu(Tril):
    """`Triu(k)(x)`: `jnp.triu(x, k)`, zeros below the k-th diagonal."""

    jax_fn = staticmethod(jnp.triu)
    jax_name = "jnp.triu"


map_functions(
    {
        Sin: (jnp.sin, np.sin, math.sin),
        Cos: (jnp.cos, np.cos, math.cos),
        Tan: (jnp.tan, np.tan, math.tan),
        Exp: (jnp.exp, np.exp, math.exp),
        Log: (jnp.log, np.log, math.log),
        Sqrt: (jnp.sqrt, np.sqrt, math.sqrt),
        Tanh: (jnp.tanh, np.tanh, math.tanh),
        Sigmoid: (jax.nn.sigmoid,),
        ReLU: (jax.nn.relu,),
        AbsJax: (jnp.abs, np.abs, abs),  # MindSpore's ops.abs: Abs
        Square: (jnp.square, np.square),
        Reciprocal: (jnp.reciprocal, np.reciprocal),
        Log1p: (jnp.log1p, np.log1p, math.log1p),
        Expm1: (jnp.expm1, np.expm1, math.expm1),
        Rsqrt: (jax.lax.rsqrt,),
        Erf: (jsp.erf, jax.lax.erf, math.erf),
        Sinh: (jnp.sinh, np.sinh, math.sinh),
        Cosh: (jnp.cosh, np.cosh, math.cosh),
        Atan: (jnp.arctan, np.arctan, math.atan),
        Asinh: (jnp.arcsinh, np.arcsinh, math.asinh),
        Sign: (jnp.sign, np.sign),
        Floor: (jnp.floor, np.floor),
        Ceil: (jnp.ceil, np.ceil),
        Round: (jnp.round, np.round),
        Real: (jnp.real, np.real),
        Imag: (jnp.imag, np.imag),
    }
)
map_functions(
    {
        Maximum: (jnp.maximum, np.maximum),
        Minimum: (jnp.minimum, np.minimum),
        Atan2: (jnp.arctan2, np.arctan2, math.atan2),
        Fmod: (jnp.fmod, np.fmod, math.fmod),
    },
    n=2,
)
map_functions({Select: (jnp.where, np.where)}, n=3)


@register_function(jnp.clip)
def _clip(call):
    if not call.names_ok(("min", "max"), 3):
        return None
    return ClipJax(), [call.arg(0, "arr"), call.arg(1, "min", NONE), call.arg(2, "max", NONE)]


@register_function(np.clip)
def _np_clip(call):
    if not call.names_ok(("a", "a_min", "a_max"), 3):
        return None
    return ClipJax(), [call.arg(0, "a"), call.arg(1, "a_min", NONE), call.arg(2, "a_max", NONE)]


@register_method("clip")
def _clip_method(call):
    if not call.names_ok(("min", "max"), 3):
        return None
    return Clip(), [call.args[0], call.arg(1, "min", NONE), call.arg(2, "max", NONE)]


def _triangle(prim_cls):
    def adapter(call):
        if not call.names_ok(("m", "k"), 2):
            return None
        return prim_cls(call.static(1, "k", 0)), [call.arg(0, "m")]

    return adapter


register_function(jnp.tril, np.tril)(_triangle(Tril))
register_function(jnp.triu, np.triu)(_triangle(Triu))


# == gradient rules ==============================================================
# Rules for elementwise math: unary ones are one line each, `dout * f'(x)`;
# binary ones (`Maximum`, `Select`, `Clip`) sum their gradients back to each
# input's shape with `sum_to`, since inputs broadcast.
#
# Ties of `Maximum`/`Minimum` split the gradient evenly, like jax.

sum_to = SumTo()
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def _abs_slope(x, out):
    """The factor of `dout` in the gradient of `out = |x|`: `sign(x)`; for a
    complex x, JAX's convention (as for Real and Imag: d/dre - 1j d/dim),
    `conj(x) / |x|`, written `|x| / x` (no rule differentiates `conj`); 0 at 0."""
    if jnp.iscomplexobj(x):
        return jnp.where(x == 0, 0.0, out / jnp.where(x == 0, 1.0, x))
    return jnp.sign(x)


# -- unary ------------------------------------------------------------------------------
unary(Sin, lambda x, out: jnp.cos(x))
unary(Cos, lambda x, out: -jnp.sin(x))
unary(Tan, lambda x, out: 1.0 + out * out)
unary(Exp, lambda x, out: out)
unary(Log, lambda x, out: 1.0 / x)
unary(Sqrt, lambda x, out: 0.5 / out)
unary(Tanh, lambda x, out: 1.0 - out * out)
unary(Sigmoid, lambda x, out: out * (1.0 - out))
unary(ReLU, lambda x, out: jnp.where(x > 0, 1.0, 0.0).astype(out.dtype))
unary(Abs, lambda x, out: _abs_slope(x, out))
unary(AbsJax, lambda x, out: _abs_slope(x, out) + (x == 0))
unary(Square, lambda x, out: 2.0 * x)
unary(Reciprocal, lambda x, out: -out * out)
unary(Log1p, lambda x, out: 1.0 / (1.0 + x))
unary(Expm1, lambda x, out: out + 1.0)
unary(Rsqrt, lambda x, out: -0.5 * out / x)
unary(Erf, lambda x, out: _TWO_OVER_SQRT_PI * jnp.exp(-x * x))
unary(Sinh, lambda x, out: jnp.cosh(x))
unary(Cosh, lambda x, out: jnp.sinh(x))
unary(Atan, lambda x, out: 1.0 / (1.0 + x * x))
unary(Asinh, lambda x, out: 1.0 / jnp.sqrt(x * x + 1.0))

zero_gradient(Sign, Floor, Ceil, Round)


# Real and Imag are linear: their rules are their transposes (a complex x
# gets a complex gradient, JAX's convention).
@rule(Real)
def bprop_real(x, out, dout):
    return (dout * jnp.ones_like(x),)


_imag_grad = ImagGrad()


@rule(Imag)
def bprop_imag(x, out, dout):
    return (_imag_grad(x, dout),)


@rule(ImagGrad)
def bprop_imag_grad(x, dout_in, out, dout):
    return None, jnp.imag(dout)


# -- binary -----------------------------------------------------------------------------
# Each input's share of `dout` is selected, never `dout` less the other's:
# a difference's transpose (jvp and second order differentiate these rules)
# is inf - inf = NaN where the branch not taken has an infinite derivative.
@rule(Maximum)
def bprop_maximum(x, y, out, dout):
    ties = x == y
    return sum_to(_tie_split(x > y, ties, dout), x), sum_to(_tie_split(y > x, ties, dout), y)


@rule(Minimum)
def bprop_minimum(x, y, out, dout):
    ties = x == y
    return sum_to(_tie_split(x < y, ties, dout), x), sum_to(_tie_split(y < x, ties, dout), y)


def _tie_split(wins, ties, dout, tie: float = 0.5):
    """`dout` where `wins`, `tie` of it where `ties`, else zero (broadcast)."""
    zero = jnp.zeros_like(dout)
    return jnp.where(wins, dout, jnp.where(ties, tie * dout, zero))


@rule(Select)
def bprop_select(cond, x, y, out, dout):
    zero = jnp.zeros_like(dout)
    dx = jnp.where(cond, dout, zero)
    dy = jnp.where(cond, zero, dout)
    return None, sum_to(dx, x), sum_to(dy, y)


def _clip_bprop(tie: float):
    """The rule of `clip(x, lo, hi)`, `minimum(maximum(x, lo), hi)` (None:
    no bound), where x at a bound it touches gets `tie` of the gradient and
    the bound the rest: JAX splits ties evenly (`ClipJax`), MindSpore's clamp
    gives them to x (`Clip`)."""

    def bprop(x, lo, hi, out, dout):
        d_mid = dout
        d_hi = None
        if hi is not None:
            mid = x if lo is None else jnp.maximum(x, lo)
            d_mid = _tie_split(mid < hi, mid == hi, dout, tie)
            d_hi = sum_to(_tie_split(mid > hi, mid == hi, dout, 1.0 - tie), hi)
        dx = d_mid
        d_lo = None
        if lo is not None:
            dx = _tie_split(x > lo, x == lo, d_mid, tie)
            d_lo = sum_to(_tie_split(x < lo, x == lo, d_mid, 1.0 - tie), lo)
        return sum_to(dx, x), d_lo, d_hi

    return bprop


rule(Clip)(_clip_bprop(1.0))
rule(ClipJax)(_clip_bprop(0.5))


@rule(Atan2)
def bprop_atan2(y, x, out, dout):
    scale = dout / (x * x + y * y)
    return sum_to(scale * x, y), sum_to(-scale * y, x)


@rule(Fmod)
def bprop_fmod(x, y, out, dout):
    q = x / y  # fmod(x, y) = x - trunc(x / y) * y
    return sum_to(dout, x), sum_to(-dout * (jnp.sign(q) * jnp.floor(jnp.abs(q))), y)


@bprop_getters.register(Tril)
def get_bprop_tril(self):
    tril = Tril(self.k)
    return lambda x, out, dout: (tril(dout),)


@bprop_getters.register(Triu)
def get_bprop_triu(self):
    triu = Triu(self.k)
    return lambda x, out, dout: (triu(dout),)


@register_attribute("real")
def _real_attribute(call):
    return Real(), [call.args[0]]


@register_attribute("imag")
def _imag_attribute(call):
    return Imag(), [call.args[0]]
