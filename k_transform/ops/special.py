"""Library functions JAX differentiates by a rule of its own (a `custom_jvp`),
as primitives whose rules are JAX's formulas.

Their bodies compute the value safely (`where(x == 0, 0, x * log(y))`, a
`max` and an `abs` in `logaddexp`, a Maclaurin constant in `sinc` at 0), and
differentiating those steps gives other numbers than JAX at the special points:
`xlogy(0, y)`' is 0 there (JAX: `log y`), `logaddexp` at a tie has second
derivative 0 (JAX: 1/4), `relu6` at 0 and 6 gets half (JAX: 0), `det` (from
an LU) at a singular matrix and `pinv` (from an `svd`) at repeated or zero
singular values give NaN (JAX: cofactors, a finite formula; those two
primitives and rules are `ops.linalg`'s `Det` and `Pinv`). Each rule
below is the JAX rule written with primitives that differentiate again, so
jvp and second derivatives are JAX's too.

One table, `CUSTOM_JVP`, keyed by (JAX source file, function name) as a
jaxpr's `custom_jvp_call` names its body, gives the primitive a call
becomes; `frontend.jaxpr` imports such a call as that primitive, so a
function passed as a value (`activation=jax.nn.relu`) or reached inside a
library call gets the same rule as a direct call, which the parser maps by
`map_functions`.

`XLogY(x, y)`, `XLog1pY(x, y)`, `LogAddExp(x1, x2)`, `LogAddExp2(x1, x2)`
broadcast; `Erfcx`, `ReLU6Jax`, `Logit`, `XLogX` (`entr`'s and `rel_entr`'s
`_xlogx`), `Log1mExp` and `LogNdtr(body)` are unary (at 0 `logit`' and
`xlogx`' are inf, where their steps' derivative is NaN; `log_ndtr`'s series
has ties and overflows its steps' derivative turns into a halved or NaN
gradient); `SincMaclaurin(k)(x)` is the k-th derivative of `sin(x) / x` at
0, broadcast to x (`jnp.sinc`'s value at 0).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
from jax.extend import core as jax_core

from k_transform.bprop_registry.helpers import rule, unary
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import AttrPrimitive, JaxPrimitive, elementwise
from k_transform.ops.linalg import Det, Pinv
from k_transform.ops.mapping import map_functions
from k_transform.ops.math import ReLU
from k_transform.ops.structural import SumTo


def sinc_maclaurin(x, k: int):
    """The k-th derivative of `sin(x) / x` at 0, shaped like x (JAX's
    `_sinc_maclaurin(k, x)`)."""
    coefficient = 0.0 if k % 2 else (-1) ** (k // 2) / (k + 1)
    return x * 0 + jnp.asarray(coefficient, jnp.result_type(x))


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
    call's body (`exp1`, `expn(2, x)` inside a `vmap`)."""

    n_inputs = 1

    def __init__(self, n: int):
        super().__init__(n=n)

    def impl(self, x):
        return jsp.expn(self.n, x)


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
@rule(Expn)
def bprop_expn(n, x, out, dout):
    # E_n' = -E_(n-1); E_0 = exp(-x) / x, whose slope is -E_0 - E_0 / x (JAX's
    # rule asks E_-1 there, NaN; `maximum` keeps the arm not taken finite)
    lower = jnp.where(n == 0, out + out / x, jsp.expn(jnp.maximum(n - 1, 0), x))
    return None, sum_to(-dout * lower, x)


@bprop_getters.register(ExpnOf)
def get_bprop_expn_of(self):
    if self.n == 0:
        return lambda x, out, dout: (-dout * (out + out / x),)
    lower = ExpnOf(self.n - 1)
    return lambda x, out, dout: (-dout * lower(x),)


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
def _sinc_maclaurin_call(body):
    """`_sinc_maclaurin(k, x)` as `jnp.sinc` calls it: k = 0, whose body is
    `x * 0 + 1`; another k, only JAX's own rule calls, keeps its body (None)."""
    last = body.jaxpr.eqns[-1]
    added = [v.val for v in last.invars if isinstance(v, jax_core.Literal)]
    return SincMaclaurin(0) if last.primitive.name == "add" and added == [1.0] else None


def _calls(jaxpr, name: str) -> bool:
    """Whether `jaxpr` (or one inside it, a `jit`'s) has an equation of lax `name`."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            return True
        inner = eqn.params.get("jaxpr")
        if inner is not None and _calls(getattr(inner, "jaxpr", inner), name):
            return True
    return False


def _expn_call(body):
    """`expn(n, x)` given `n`, or with a Python int `n` JAX baked into the
    body (a literal first operand of its `jit`); else None (its body)."""
    if len(body.jaxpr.invars) == 2:
        return Expn()
    first = body.jaxpr.eqns[0].invars[0] if body.jaxpr.eqns else None
    if isinstance(first, jax_core.Literal) and float(first.val).is_integer():
        return ExpnOf(int(first.val))
    return None


def _pinv_call(body):
    """`jnp.linalg.pinv`'s `_pinv`: `hermitian` is static, so not a parameter
    of the call, but its body then decomposes with `eigh` (else `svd`)."""
    return Pinv(body, hermitian=_calls(body.jaxpr, "eigh"))


# (JAX source file, function name) of a custom_jvp function -> builder(body, a
# ClosedJaxpr) of the primitive a call of it becomes (None: its body is
# imported); the primitive takes the call's operands after its constants, or
# all of them when it `takes_consts`
CUSTOM_JVP = {
    ("jax/_src/scipy/special.py", "xlogy"): lambda body: XLogY(),
    ("jax/_src/scipy/special.py", "xlog1py"): lambda body: XLog1pY(),
    ("jax/_src/scipy/special.py", "_erfcx"): lambda body: Erfcx(),
    ("jax/_src/scipy/special.py", "logit"): lambda body: Logit(),
    ("jax/_src/scipy/special.py", "_xlogx"): lambda body: XLogX(),
    ("jax/_src/scipy/special.py", "log_ndtr"): LogNdtr,
    ("jax/_src/scipy/special.py", "expn"): _expn_call,
    ("jax/_src/scipy/special.py", "expi"): lambda body: Expi(),
    ("jax/_src/nn/functions.py", "log1mexp"): lambda body: Log1mExp(),
    ("jax/_src/lax/other.py", "logaddexp"): lambda body: LogAddExp(),
    ("jax/_src/lax/other.py", "logaddexp2"): lambda body: LogAddExp2(),
    ("jax/_src/nn/functions.py", "relu"): lambda body: ReLU(),
    ("jax/_src/nn/functions.py", "relu6"): lambda body: ReLU6Jax(),
    ("jax/_src/numpy/ufuncs.py", "_sinc_maclaurin"): _sinc_maclaurin_call,
    ("jax/_src/numpy/linalg.py", "_det"): lambda body: Det(),
    ("jax/_src/numpy/linalg.py", "_pinv"): _pinv_call,
}
