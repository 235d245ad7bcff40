"""Rules for elementwise math: unary ones are one line each, `dout * f'(x)`;
binary ones (`Maximum`, `Select`, `Clip`) sum their gradients back to each
input's shape with `sum_to`, since inputs broadcast.

Ties of `Maximum`/`Minimum` split the gradient evenly, like jax.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp

from k_transform import ops
from k_transform.bprop_registry.helpers import unary, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)

# -- unary ------------------------------------------------------------------------------
unary(ops.Sin, lambda x, out: jnp.cos(x))
unary(ops.Cos, lambda x, out: -jnp.sin(x))
unary(ops.Tan, lambda x, out: 1.0 + out * out)
unary(ops.Exp, lambda x, out: out)
unary(ops.Log, lambda x, out: 1.0 / x)
unary(ops.Sqrt, lambda x, out: 0.5 / out)
unary(ops.Tanh, lambda x, out: 1.0 - out * out)
unary(ops.Sigmoid, lambda x, out: out * (1.0 - out))
unary(ops.ReLU, lambda x, out: jnp.where(x > 0, 1.0, 0.0).astype(out.dtype))
unary(ops.Abs, lambda x, out: jnp.sign(x))
unary(ops.Square, lambda x, out: 2.0 * x)
unary(ops.Reciprocal, lambda x, out: -out * out)
unary(ops.Log1p, lambda x, out: 1.0 / (1.0 + x))
unary(ops.Expm1, lambda x, out: out + 1.0)
unary(ops.Rsqrt, lambda x, out: -0.5 * out / x)
unary(ops.Erf, lambda x, out: _TWO_OVER_SQRT_PI * jnp.exp(-x * x))
unary(ops.Sinh, lambda x, out: jnp.cosh(x))
unary(ops.Cosh, lambda x, out: jnp.sinh(x))
unary(ops.Atan, lambda x, out: 1.0 / (1.0 + x * x))
unary(ops.Softplus, lambda x, out: jax.nn.sigmoid(x))

zero_gradient(ops.Sign, ops.Floor, ops.Ceil, ops.Round)


@bprop_getters.register(ops.Gelu)
def get_bprop_gelu(self):
    if self.approximate:
        return lambda x, out, dout: (dout * _gelu_tanh_derivative(x),)
    return lambda x, out, dout: (dout * _gelu_erf_derivative(x),)


def _gelu_erf_derivative(x):
    """d/dx x * Phi(x) = Phi(x) + x * phi(x)."""
    cdf = 0.5 * (1.0 + jsp.erf(x * _INV_SQRT_2))
    pdf = jnp.exp(-0.5 * x * x) * (0.5 * _TWO_OVER_SQRT_PI * _INV_SQRT_2)
    return cdf + x * pdf


def _gelu_tanh_derivative(x):
    """d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    k = math.sqrt(2.0 / math.pi)
    t = jnp.tanh(k * (x + 0.044715 * x * x * x))
    du = k * (1.0 + 3.0 * 0.044715 * x * x)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du


# -- binary -----------------------------------------------------------------------------
@bprop_getters.register(ops.Maximum)
def get_bprop_maximum(self):
    def bprop(x, y, out, dout):
        dx = _tie_split(x > y, x == y, dout)
        return sum_to(dx, x), sum_to(dout - dx, y)

    return bprop


@bprop_getters.register(ops.Minimum)
def get_bprop_minimum(self):
    def bprop(x, y, out, dout):
        dx = _tie_split(x < y, x == y, dout)
        return sum_to(dx, x), sum_to(dout - dx, y)

    return bprop


def _tie_split(wins, ties, dout):
    """`dout` where `wins`, half of it where `ties`, else zero (broadcast)."""
    zero = jnp.zeros_like(dout)
    return jnp.where(wins, dout, jnp.where(ties, 0.5 * dout, zero))


@bprop_getters.register(ops.Select)
def get_bprop_select(self):
    def bprop(cond, x, y, out, dout):
        zero = jnp.zeros_like(dout)
        dx = jnp.where(cond, dout, zero)
        return None, sum_to(dx, x), sum_to(dout - dx, y)

    return bprop


@bprop_getters.register(ops.Clip)
def get_bprop_clip(self):
    """`clip(x, lo, hi)` is `minimum(maximum(x, lo), hi)`; None: no bound."""

    def bprop(x, lo, hi, out, dout):
        zero = jnp.zeros_like(dout)
        d_mid = dout
        d_hi = None
        if hi is not None:
            mid = x if lo is None else jnp.maximum(x, lo)
            d_mid = jnp.where(mid > hi, zero, dout)
            d_hi = sum_to(dout - d_mid, hi)
        dx = d_mid
        d_lo = None
        if lo is not None:
            dx = jnp.where(x < lo, zero, d_mid)
            d_lo = sum_to(d_mid - dx, lo)
        return sum_to(dx, x), d_lo, d_hi

    return bprop


@bprop_getters.register(ops.Atan2)
def get_bprop_atan2(self):
    def bprop(y, x, out, dout):
        scale = dout / (x * x + y * y)
        return sum_to(scale * x, y), sum_to(-scale * y, x)

    return bprop


@bprop_getters.register(ops.Tril)
def get_bprop_tril(self):
    tril = ops.Tril(self.k)
    return lambda x, out, dout: (tril(dout),)


@bprop_getters.register(ops.Triu)
def get_bprop_triu(self):
    triu = ops.Triu(self.k)
    return lambda x, out, dout: (triu(dout),)
