"""Library functions JAX differentiates by a rule of its own (a `custom_jvp`),
as primitives whose rules are JAX's formulas.

Their bodies compute the value safely (`where(x == 0, 0, x * log(y))`, a
`max` and an `abs` in `logaddexp`, a Maclaurin constant in `sinc` at 0), and
differentiating those steps gives other numbers than JAX at the special points:
`xlogy(0, y)`' is 0 there (JAX: `log y`), `logaddexp` at a tie has second
derivative 0 (JAX: 1/4), `relu6` at 0 and 6 gets half (JAX: 0), `det` (from
an LU) at a singular matrix and `pinv` (from an `svd`) at repeated or zero
singular values give NaN (JAX: cofactors, a finite formula; those two
primitives and rules are `ops.linalg`'s `Det` and `Pinv`). A body that
returns a constant branch at a point has slope 0 there: `hyp1f1(a, b, 0)`,
`hyp2f1(a, b, c, 0)`, `poch(z, 0)` in m, `owens_t` at |a| = 1, `i0` at 0
(through `abs`: slope 1, JAX's 0). Each rule below is the JAX rule written
with primitives that differentiate again, so jvp and second derivatives are
JAX's too; where JAX's rule reads a value of its own that is off (`expn(n,
0)`: 1/n, not 1/(n - 1)), ours takes the true one (`expn_exact`).

One table, `CUSTOM_JVP`, keyed by (JAX source file, function name) as a
jaxpr's `custom_jvp_call` names its body, gives the primitive a call
becomes (a tuple, one per result, for `sici`: `Si`, `Ci`); `frontend.jaxpr`
imports such a call as that primitive, so a function passed as a value
(`activation=jax.nn.relu`) or reached inside a library call gets the same
rule as a direct call, which the parser maps by `map_functions`.

`XLogY(x, y)`, `XLog1pY(x, y)`, `LogAddExp(x1, x2)`, `LogAddExp2(x1, x2)`
broadcast; `Erfcx`, `ReLU6Jax`, `Logit`, `XLogX` (`entr`'s and `rel_entr`'s
`_xlogx`), `Log1mExp` and `LogNdtr(body)` are unary (at 0 `logit`' and
`xlogx`' are inf, where their steps' derivative is NaN; `log_ndtr`'s series
has ties and overflows its steps' derivative turns into a halved or NaN
gradient); `SincMaclaurin(k)(x)` is the k-th derivative of `sin(x) / x` at
0, broadcast to x (`jnp.sinc`'s value at 0). `Expn(n, x)`, `ExpnExact(n, x)`,
`Poch(z, m)`, `OwensT(h, a)`, `Hyp1F1(a, b, x)` and `Hyp2F1(a, b, c, x)`
broadcast; `Dawsn`, `I0`, `Si`, `Ci` are unary.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax._src.scipy import special as jax_special  # hypergeometric slopes (no public name)
from jax.extend import core as jax_core

from k_transform.bprop_registry.helpers import rule, unary
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ops.base import AttrPrimitive, JaxPrimitive, elementwise
from k_transform.ops.linalg import Det, Pinv
from k_transform.ops.mapping import map_functions
from k_transform.ops.math import ReLU
from k_transform.ops.structural import SumTo


def sinc_maclaurin(x, k: int):
    """The k-th derivative of `sin(x) / x` at 0, shaped like x (JAX's
    `_sinc_maclaurin(k, x)`)."""
    return x * 0 + jnp.asarray(sinc_maclaurin_coefficient(k), jnp.result_type(x))


def sinc_maclaurin_coefficient(k: int) -> float:
    """The k-th derivative of `sin(x) / x` at 0."""
    return 0.0 if k % 2 else (-1) ** (k // 2) / (k + 1)


XLogY = elementwise("XLogY", jsp.xlogy, "jax.scipy.special.xlogy", 2, "`x * log(y)`, 0 at x = 0.")
XLog1pY = elementwise("XLog1pY", jsp.xlog1py, "jax.scipy.special.xlog1py", 2)
LogAddExp = elementwise("LogAddExp", jnp.logaddexp, "jnp.logaddexp", 2)
LogAddExp2 = elementwise("LogAddExp2", jnp.logaddexp2, "jnp.logaddexp2", 2)
Erfcx = elementwise("Erfcx", jsp.erfcx, "jax.scipy.special.erfcx")
ReLU6Jax = elementwise("ReLU6Jax", jax.nn.relu6, "jax.nn.relu6", doc="JAX's: derivative 0 at 0, 6.")
Logit = elementwise("Logit", jsp.logit, "jax.scipy.special.logit", doc="`log(x / (1 - x))`.")
XLogX = elementwise("XLogX", lambda x: jsp.xlogy(x, x), "xlogx", doc="`x * log(x)`, 0 at 0.")
Log1mExp = elementwise("Log1mExp", jax.nn.log1mexp, "jax.nn.log1mexp", doc="`log(1 - exp(-x))`.")
Expn = elementwise("Expn", jsp.expn, "jax.scipy.special.expn", 2, "`E_n(x)`; n gets no gradient.")
Expi = elementwise("Expi", jsp.expi, "jax.scipy.special.expi", doc="`Ei(x)`.")
Hyp1F1 = elementwise("Hyp1F1", jsp.hyp1f1, "jax.scipy.special.hyp1f1", 3, "`1F1(a; b; x)`.")
Hyp2F1 = elementwise("Hyp2F1", jsp.hyp2f1, "jax.scipy.special.hyp2f1", 4, "`2F1(a, b; c; x)`.")
Poch = elementwise("Poch", jsp.poch, "jax.scipy.special.poch", 2, "`(z)_m`, 1 at m = 0.")
OwensT = elementwise("OwensT", jsp.owens_t, "jax.scipy.special.owens_t", 2, "Owen's `T(h, a)`.")
Dawsn = elementwise("Dawsn", jsp.dawsn, "jax.scipy.special.dawsn", doc="Dawson's `F(x)`.")
I0 = elementwise("I0", jnp.i0, "jnp.i0", doc="`I_0(x)`, from `exp(|x|) * i0e(|x|)`.")
I1 = elementwise("I1", jsp.i1, "jax.scipy.special.i1", doc="`I_1(x)`, `exp(|x|) * i1e(x)`.")


def fresnel_s(x):
    """`S(x)`, the first result of `jax.scipy.special.fresnel`."""
    return jsp.fresnel(x)[0]


def fresnel_c(x):
    """`C(x)`, the second result of `jax.scipy.special.fresnel`."""
    return jsp.fresnel(x)[1]


FresnelS = elementwise("FresnelS", fresnel_s, "fresnel_s", doc="Fresnel's `S(x)`.")
FresnelC = elementwise("FresnelC", fresnel_c, "fresnel_c", doc="Fresnel's `C(x)`.")


def sine_integral(x):
    """`Si(x)`, the first result of `jax.scipy.special.sici`."""
    return jsp.sici(x)[0]


def cosine_integral(x):
    """`Ci(x)`, the second result of `jax.scipy.special.sici`."""
    return jsp.sici(x)[1]


Si = elementwise("Si", sine_integral, "sine_integral", doc="`Si(x)`, sici's first result.")
Ci = elementwise("Ci", cosine_integral, "cosine_integral", doc="`Ci(x)`, sici's second result.")


def expn_exact(n, x):
    """`expn(n, x)` with its limit at x = 0, `E_n(0) = 1 / (n - 1)` for
    n >= 2, where JAX's `expn` gives 1 / n (scipy: 1 / (n - 1)); elsewhere
    JAX's value. What the slopes of `expn` read (`bprop_expn`): the value a
    user's call computes stays JAX's, its derivative is the true one."""
    n, x = jnp.asarray(n), jnp.asarray(x)
    limit = 1.0 / jnp.maximum(n - 1, 1).astype(jnp.result_type(x))
    return jnp.where((x == 0) & (n >= 2), limit, jsp.expn(n, x))


ExpnExact = elementwise(
    "ExpnExact", expn_exact, "expn_exact", 2, "`E_n(x)`, exact at 0; n gets no gradient."
)


class LogNdtr(AttrPrimitive):
    """`LogNdtr(body)(x)`: `jax.scipy.special.log_ndtr(x, series_order)`
    computed by `body`, the ClosedJaxpr of JAX's custom_jvp `log_ndtr` as a
    jaxpr's `custom_jvp_call` holds it (the static `series_order` is baked
    in); its rule reads only `x` and the value."""

    n_inputs = 1

    def __init__(self, body):
        super().__init__(body=body)

    def impl(self, x):
        return jax_core.jaxpr_as_fun(self.body)(x)[0]

    def __repr__(self):
        return "LogNdtr"


class ExpnOf(AttrPrimitive):
    """`ExpnOf(n)(x)`: `expn(n, x)` for a Python int `n` JAX baked into the
    call's body (`exp1`, `expn(2, x)` inside a `vmap`); `exact`: `expn_exact`
    (in its derivatives)."""

    n_inputs = 1

    def __init__(self, n: int, exact: bool = False):
        super().__init__(n=n, exact=exact)

    def impl(self, x):
        return expn_exact(self.n, x) if self.exact else jsp.expn(self.n, x)


class SincMaclaurin(JaxPrimitive):
    """`SincMaclaurin(k)(x)`: `sinc_maclaurin(x, k)`, a constant; its
    derivative is `SincMaclaurin(k + 1)`."""

    jax_fn = staticmethod(sinc_maclaurin)
    jax_name = "sinc_maclaurin"
    jax_kwargs = {"k": "k"}
    n_inputs = 1

    def __init__(self, k: int = 0):
        super().__init__(k=k)


map_functions(
    {Erfcx: (jsp.erfcx,), Logit: (jsp.logit,), Log1mExp: (jax.nn.log1mexp,), Expi: (jsp.expi,)}
)  # jax.nn.relu6, log_ndtr, entr's `_xlogx`: through their jaxprs
map_functions({Dawsn: (jsp.dawsn,), I0: (jnp.i0, jsp.i0), I1: (jsp.i1,)})  # jsp.i0 is jnp.i0
map_functions({Poch: (jsp.poch,), OwensT: (jsp.owens_t,)}, n=2)
map_functions({Hyp1F1: (jsp.hyp1f1,)}, n=3)
map_functions({Hyp2F1: (jsp.hyp2f1,)}, n=4)
map_functions(
    {
        XLogY: (jsp.xlogy,),
        XLog1pY: (jsp.xlog1py,),
        LogAddExp: (jnp.logaddexp, np.logaddexp),
        LogAddExp2: (jnp.logaddexp2, np.logaddexp2),
        Expn: (jsp.expn,),
    },
    n=2,
)


# == gradient rules: JAX's jvp rules, transposed =================================
sum_to = SumTo()
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2 = math.log(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _replace_inf(x):
    """x with +inf as 0 (JAX's `_replace_inf` in `logaddexp`'s rule)."""
    return jnp.where(x == jnp.inf, jnp.zeros_like(x), x)


@rule(XLogY)
def bprop_xlogy(x, y, out, dout):
    return sum_to(dout * jnp.log(y), x), sum_to(dout * x / y, y)


@rule(XLog1pY)
def bprop_xlog1py(x, y, out, dout):
    return sum_to(dout * jnp.log1p(y), x), sum_to(dout * x / (1.0 + y), y)


@rule(LogAddExp)
def bprop_logaddexp(x1, x2, out, dout):
    dx1 = dout * jnp.exp(_replace_inf(x1) - _replace_inf(out))
    dx2 = dout * jnp.exp(_replace_inf(x2) - _replace_inf(out))
    return sum_to(dx1, x1), sum_to(dx2, x2)


@rule(LogAddExp2)
def bprop_logaddexp2(x1, x2, out, dout):
    dx1 = dout * jnp.exp(_LN2 * (_replace_inf(x1) - _replace_inf(out)))
    dx2 = dout * jnp.exp(_LN2 * (_replace_inf(x2) - _replace_inf(out)))
    return sum_to(dx1, x1), sum_to(dx2, x2)


unary(Erfcx, lambda x, out: 2.0 * x * out - _TWO_OVER_SQRT_PI)
unary(Expi, lambda x, out: jnp.exp(x) / x)


# `expn`'s steps (a piecewise of a series loop and a continued fraction)
# meet `0 / 0` in a select's arm not taken: NaN where JAX's rule is finite
expn_exact_ = ExpnExact()


@rule(Expn)
@rule(ExpnExact)
def bprop_expn(n, x, out, dout):
    # E_n' = -E_(n-1); E_0 = exp(-x) / x, whose slope is -E_0 - E_0 / x (JAX's
    # rule asks E_-1 there, NaN; `maximum` and `x0` keep the arm not taken
    # finite, and so its slope at second order). E_(n-1) at 0 is 1 / (n - 2),
    # not JAX's value there, 1 / (n - 1): JAX's rule gives expn(3, .) half its
    # slope at 0, we the true one
    x0 = jnp.where(n == 0, x, 1.0)
    lower = jnp.where(n == 0, out + out / x0, expn_exact_(jnp.maximum(n - 1, 0), x))
    return None, sum_to(-dout * lower, x)


@bprop_getters.register(ExpnOf)
def get_bprop_expn_of(self):
    if self.n == 0:
        return lambda x, out, dout: (-dout * (out + out / x),)
    lower = ExpnOf(self.n - 1, exact=True)  # (see `bprop_expn`)
    return lambda x, out, dout: (-dout * lower(x),)


# The hypergeometric functions' bodies select a constant at x = 0 (their
# series loops run no step) and where a = b (`exp(x)`), a = 0 or c = a, ...:
# no slope there (or NaN) where JAX's rule has one. Their slopes in a, b, c
# are JAX's series (private functions of `jax.scipy.special`).
@rule(Hyp1F1)
def bprop_hyp1f1(a, b, x, out, dout):
    da = dout * jax_special._hyp1f1_a_derivative(a, b, x)
    db = dout * jax_special._hyp1f1_b_derivative(a, b, x)
    dx = dout * a / b * jsp.hyp1f1(a + 1.0, b + 1.0, x)
    return sum_to(da, a), sum_to(db, b), sum_to(dx, x)


@rule(Hyp2F1)
def bprop_hyp2f1(a, b, c, x, out, dout):
    da = dout * jax_special._hyp2f1_a_derivative(a, b, c, x)
    db = dout * jax_special._hyp2f1_b_derivative(a, b, c, x)
    dc = dout * jax_special._hyp2f1_c_derivative(a, b, c, x)
    dx = dout * a * b / c * jsp.hyp2f1(a + 1.0, b + 1.0, c + 1.0, x)
    return sum_to(da, a), sum_to(db, b), sum_to(dc, c), sum_to(dx, x)


# `poch(z, m)` is `where(m == 0, 1, gamma(z + m) / gamma(z))`: slope 0 in m at 0
@rule(Poch)
def bprop_poch(z, m, out, dout):
    upper = jsp.digamma(z + m)
    return sum_to(dout * (upper - jsp.digamma(z)) * out, z), sum_to(dout * upper * out, m)


# Owen's T is exact formulas at h = 0 and |a| = 1, a quadrature elsewhere
@rule(OwensT)
def bprop_owens_t(h, a, out, dout):
    dh = -jnp.exp(-0.5 * h * h) * jax.lax.erf(a * h / math.sqrt(2.0)) / (2.0 * _SQRT_2PI)
    da = jnp.exp(-0.5 * (a * a + 1.0) * h * h) / (2.0 * math.pi * (a * a + 1.0))
    return sum_to(dout * dh, h), sum_to(dout * da, a)


# `sici`'s body selects a series, an asymptotic expansion and `log(|x|)` (NaN
# slopes at 0 in the arms not taken); JAX's rule, one line per result, each
# its own primitive: reading Si alone sends Ci's `cos(x) / x` (inf at 0) nothing
unary(Si, lambda x, out: jnp.sinc(x / math.pi))
unary(Ci, lambda x, out: jnp.cos(x) / x)


# dawsn's body divides by x (NaN at 0); i0's, `exp(|x|) * i0e(|x|)`, has the
# kink of `abs` at 0 (slope 1 there, JAX's 0). JAX's i0 rule is `where(x == 0,
# 0, slope)`, its second derivative at 0 then 0; `i1` is that slope without the
# `where` (i1(0) = 0), whose own slope at 0 is the true 1/2
unary(Dawsn, lambda x, out: 1.0 - 2.0 * x * out)
unary(I0, lambda x, out: jsp.i1(x))


def i1_slope(x, out):
    """`I_1'(x) = I_0(x) - I_1(x) / x`, 0/0 at 0: near 0 its Maclaurin terms
    `1/2 + 3 x^2 / 16` (JAX 0.11's rule does the same below sqrt(eps)), which
    also give the higher derivatives there. Below 3.5e-4 (float32's
    sqrt(eps)) the next term, `5 x^4 / 128`, is under float64's rounding."""
    small = jnp.abs(x) <= 3.5e-4
    safe = jnp.where(small, jnp.ones_like(x), x)
    return jnp.where(small, 0.5 + 0.1875 * x * x, jnp.i0(x) - out / safe)


unary(I1, i1_slope)

# fresnel's body is a rational approximation in two ranges: JAX's rule is the
# exact integrand, one primitive per result as for sici
unary(FresnelS, lambda x, out: jnp.sin(0.5 * math.pi * x * x))
unary(FresnelC, lambda x, out: jnp.cos(0.5 * math.pi * x * x))


class JaxOwnRule(AttrPrimitive):
    """`JaxOwnRule(body, index, name)(*operands)`: result `index` of JAX's
    custom_jvp function `name`, computed by `body` (the ClosedJaxpr a
    jaxpr's `custom_jvp_call` holds), for a function of JAX's whose rule
    k_transform does not know (`CUSTOM_JVP`) and whose steps are not known
    to have the same derivative (`JAX_BODIES`): a JAX version that renamed
    `_i0` to `i0_impl` would otherwise have differentiated `abs`'s kink
    (slope 1 at 0, JAX's rule 0). It runs; differentiating through it is
    refused, naming the user's line."""

    takes_consts = True

    def __init__(self, body, index: int, name: str):
        super().__init__(body=body, index=index, function=name)
        self.n_inputs = len(body.jaxpr.invars)

    def impl(self, *args):
        return jax_core.jaxpr_as_fun(self.body)(*args)[self.index]

    def __repr__(self):
        return f"JaxOwnRule[{self.function}, {self.index}]"


@bprop_getters.register(JaxOwnRule)
def get_bprop_jax_own_rule(self):
    """Asked for only when a cotangent reaches the call: refused (the
    registry names the user's line)."""
    raise KTransformError(
        f"cannot differentiate JAX's `{self.function}` (jax {jax.__version__}): JAX gives "
        "it its own derivative rule, which k_transform does not know for this version of "
        "JAX, and its steps may have another derivative (a kink, a branch); k_transform "
        "knows the rules of JAX's functions by name (ops/special.py `CUSTOM_JVP`)"
    )


unary(Logit, lambda x, out: 1.0 / (x * (1.0 - x)))
unary(XLogX, lambda x, out: jnp.log(x) + 1.0)
unary(Log1mExp, lambda x, out: 1.0 / jnp.expm1(x))
unary(LogNdtr, lambda x, out: jnp.exp(-0.5 * jnp.square(x) - _LOG_SQRT_2PI - out))
unary(ReLU6Jax, lambda x, out: jnp.where((x > 0) & (x < 6), 1.0, 0.0).astype(out.dtype))


@bprop_getters.register(SincMaclaurin)
def get_bprop_sinc_maclaurin(self):
    derivative = SincMaclaurin(self.k + 1)
    return lambda x, out, dout: (dout * derivative(x),)


# == a jaxpr's custom_jvp calls ===================================================
def _sinc_maclaurin_call(eqn):
    """`_sinc_maclaurin(k, x)`: `SincMaclaurin(k)`. `jnp.sinc` calls it with
    k = 0, JAX's own rule with k + 1 (in the jaxpr of JAX's gradient of `jnp.sinc`
    run by a user's code: k = 1, then 2, ..., one per derivative JAX took).
    k is static, baked into the body: `x * 0 + c_k` for an even k (`c_k`
    tells k), `x * 0` for every odd k, whose k is one less than that of the
    call `_sinc_maclaurin(k + 1, x)` its rule makes (`_next_term`). A body
    of another form (another JAX version's) is imported as it is (None)."""
    body = _body(eqn)
    k = _maclaurin_order(body)
    eqns = body.jaxpr.eqns
    if k is None and len(eqns) == 1 and _times_zero(eqns[0]):
        after = _next_term(eqn)
        k = None if after is None else _maclaurin_order(after)
        if k is None:
            raise KTransformError(
                "cannot read the order of a jnp.sinc Maclaurin term (`_sinc_maclaurin`) in "
                "this JAX version: its derivative at 0 would be lost"
            )
        k -= 1
    return None if k is None else SincMaclaurin(k)


def _literals(eqn) -> list[float]:
    return [float(v.val) for v in eqn.invars if isinstance(v, jax_core.Literal)]


def _times_zero(eqn) -> bool:
    """Whether `eqn` is `x * 0` (`_sinc_maclaurin`'s body for an odd k)."""
    return eqn.primitive.name == "mul" and _literals(eqn) == [0.0]


def _maclaurin_order(body) -> int | None:
    """The even k of a `_sinc_maclaurin(k, x)` body `x * 0 + c_k`, else None."""
    eqns = body.jaxpr.eqns
    if len(eqns) != 2 or not _times_zero(eqns[0]):
        return None
    added = _literals(eqns[1])
    if eqns[1].primitive.name != "add" or len(added) != 1 or added[0] == 0.0:
        return None
    k = round(1.0 / abs(added[0])) - 1
    exact = math.isclose(sinc_maclaurin_coefficient(k), added[0], rel_tol=1e-6)
    return k if k % 2 == 0 and exact else None


def _next_term(eqn):
    """The body of the call `_sinc_maclaurin(k + 1, x)` that the rule of the
    call `eqn` makes (`_sinc_maclaurin(k, x), _sinc_maclaurin(k + 1, x) * t`,
    read from its trace: traced, not differentiated), or None."""
    zeros = [False] * (len(eqn.invars) - eqn.params["num_consts"])  # (no symbolic zeros)
    fun = eqn.params.get("jvp_jaxpr_fun")  # (older JAX: a `jvp_jaxpr_thunk`)
    traced = fun.call_wrapped(*zeros) if fun is not None else eqn.params["jvp_jaxpr_thunk"](*zeros)
    rule = getattr(traced[0], "jaxpr", traced[0])
    calls = [e for e in rule.eqns if e.primitive.name == "custom_jvp_call"]
    return calls[1].params["call_jaxpr"] if len(calls) == 2 else None


def _calls(jaxpr, name: str) -> bool:
    """Whether `jaxpr` (or one inside it, a `jit`'s) has an equation of lax `name`."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            return True
        inner = eqn.params.get("jaxpr")
        if inner is not None and _calls(getattr(inner, "jaxpr", inner), name):
            return True
    return False


def _body(eqn):
    """The body of a jaxpr's `custom_jvp_call` (a ClosedJaxpr)."""
    return eqn.params["call_jaxpr"]


def _expn_call(eqn):
    """`expn(n, x)` given `n`, or with a Python int `n` JAX baked into the
    body (a literal first operand of its `jit`); else None (its body)."""
    body = _body(eqn)
    if len(body.jaxpr.invars) == 2:
        return Expn()
    first = body.jaxpr.eqns[0].invars[0] if body.jaxpr.eqns else None
    if isinstance(first, jax_core.Literal) and float(first.val).is_integer():
        return ExpnOf(int(first.val))
    return None


def _pinv_call(eqn):
    """`jnp.linalg.pinv`'s `_pinv`: `hermitian` is static, so not a parameter
    of the call, but its body then decomposes with `eigh` (else `svd`)."""
    body = _body(eqn)
    return Pinv(body, hermitian=_calls(body.jaxpr, "eigh"))


# (JAX source file, function name) of a custom_jvp function -> builder(eqn, the
# jaxpr's `custom_jvp_call`) of the primitive a call of it becomes (None: its
# body is imported); the primitive takes the call's operands after its constants, or
# all of them when it `takes_consts`
CUSTOM_JVP = {
    ("jax/_src/scipy/special.py", "xlogy"): lambda eqn: XLogY(),
    ("jax/_src/scipy/special.py", "xlog1py"): lambda eqn: XLog1pY(),
    ("jax/_src/scipy/special.py", "_erfcx"): lambda eqn: Erfcx(),
    ("jax/_src/scipy/special.py", "logit"): lambda eqn: Logit(),
    ("jax/_src/scipy/special.py", "_xlogx"): lambda eqn: XLogX(),
    ("jax/_src/scipy/special.py", "log_ndtr"): lambda eqn: LogNdtr(_body(eqn)),
    ("jax/_src/scipy/special.py", "expn"): _expn_call,
    ("jax/_src/scipy/special.py", "expi"): lambda eqn: Expi(),
    ("jax/_src/scipy/special.py", "hyp1f1"): lambda eqn: Hyp1F1(),
    ("jax/_src/scipy/special.py", "hyp2f1"): lambda eqn: Hyp2F1(),
    ("jax/_src/scipy/special.py", "poch"): lambda eqn: Poch(),
    ("jax/_src/scipy/special.py", "_owens_t_impl"): lambda eqn: OwensT(),
    ("jax/_src/scipy/special.py", "_dawsn"): lambda eqn: Dawsn(),
    ("jax/_src/scipy/special.py", "sici"): lambda eqn: (Si(), Ci()),
    ("jax/_src/numpy/lax_numpy.py", "_i0"): lambda eqn: I0(),
    ("jax/_src/numpy/lax_numpy.py", "i0_impl"): lambda eqn: I0(),  # JAX 0.11
    ("jax/_src/numpy/lax_numpy.py", "i1_impl"): lambda eqn: I1(),  # JAX 0.11
    ("jax/_src/third_party/scipy/special.py", "fresnel"): lambda eqn: (FresnelS(), FresnelC()),
    ("jax/_src/nn/functions.py", "log1mexp"): lambda eqn: Log1mExp(),
    ("jax/_src/lax/other.py", "logaddexp"): lambda eqn: LogAddExp(),
    ("jax/_src/lax/other.py", "logaddexp2"): lambda eqn: LogAddExp2(),
    ("jax/_src/nn/functions.py", "relu"): lambda eqn: ReLU(),
    ("jax/_src/nn/functions.py", "relu6"): lambda eqn: ReLU6Jax(),
    ("jax/_src/numpy/ufuncs.py", "_sinc_maclaurin"): _sinc_maclaurin_call,
    ("jax/_src/numpy/linalg.py", "_det"): lambda eqn: Det(),
    ("jax/_src/numpy/linalg.py", "_pinv"): _pinv_call,
}

# JAX's custom_jvp functions whose steps have the derivative of JAX's rule
# (the rule is there for speed or stability): their bodies are imported. Any
# other JAX function with a rule of its own, not in `CUSTOM_JVP`, becomes a
# `JaxOwnRule`, which runs but is not differentiated.
JAX_BODIES = {
    ("jax/_src/nn/functions.py", "_softmax"),  # exp(x - stop_gradient(max)) / sum
    ("jax/_src/numpy/linalg.py", "_slogdet_small"),
    ("jax/_src/numpy/linalg.py", "_slogdet_lu"),
    ("jax/_src/numpy/linalg.py", "_slogdet_qr"),
    ("jax/_src/numpy/linalg.py", "_det_2x2"),  # JAX 0.11: polynomials
    ("jax/_src/numpy/linalg.py", "_det_3x3"),
    ("jax/_src/scipy/special.py", "zeta"),  # lax's `zeta` (its rule: ops/lax_rules.py)
}
