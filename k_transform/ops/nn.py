"""Neural-network primitives (MindSpore names) and their `jax.nn` spellings.

`Softmax(axis)` and `LogSoftmax(axis)` normalise along `axis` (default -1,
an int or a tuple); `Gelu(approximate)` is `jax.nn.gelu` (tanh form by
default, like jax). `Sigmoid` and `ReLU` live with the math primitives.

`SoftmaxCrossEntropyWithLogits()(logits, labels)` is the per-example loss
`-sum(labels * log_softmax(logits))` over the last axis (for labels summing
to 1, `logsumexp(logits) - sum(labels * logits)`), fused so its gradient
`softmax(logits) - labels` stays finite for huge logits.
`BatchNorm(epsilon)(x, gamma, beta)` normalises x (N, C, ...) with the batch
statistics of each channel and returns `(y, mean, var)` (var biased).
`Dropout(keep_prob)(x, key)` draws its mask from an explicit `jax.random`
key; `DropoutGenMask(keep_prob)(key, shape)` and `DropoutDoMask(keep_prob)(x,
mask)` are its two halves. `OneHot()(indices, depth, dtype)` is
`jax.nn.one_hot`. Convolutions and pooling are in `k_transform.ops.conv`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp

from k_transform.bprop_registry.helpers import rule, unary, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import AttrPrimitive, JaxPrimitive, elementwise
from k_transform.ops.mapping import NONE, map_functions, register_function

Softplus = elementwise("Softplus", jax.nn.softplus, "jax.nn.softplus")


class Softmax(JaxPrimitive):
    """`Softmax(axis)(x)`: `jax.nn.softmax(x, axis)`."""

    jax_fn = staticmethod(jax.nn.softmax)
    jax_name = "jax.nn.softmax"
    jax_kwargs = {"axis": "axis"}
    n_inputs = 1

    def __init__(self, axis=-1):
        super().__init__(axis=axis)


class LogSoftmax(Softmax):
    """`LogSoftmax(axis)(x)`: `jax.nn.log_softmax(x, axis)`."""

    jax_fn = staticmethod(jax.nn.log_softmax)
    jax_name = "jax.nn.log_softmax"


class Gelu(JaxPrimitive):
    """`Gelu(approximate)(x)`: `jax.nn.gelu(x, approximate)`."""

    jax_fn = staticmethod(jax.nn.gelu)
    jax_name = "jax.nn.gelu"
    jax_kwargs = {"approximate": "approximate"}
    n_inputs = 1

    def __init__(self, approximate: bool = True):
        super().__init__(approximate=approximate)


map_functions({Softplus: (jax.nn.softplus,)})


def _with_axis(prim_cls):
    def adapter(call):
        if not call.names_ok(("x", "axis"), 2):
            return None
        return prim_cls(call.static(1, "axis", -1)), [call.arg(0, "x")]

    return adapter


register_function(jax.nn.softmax)(_with_axis(Softmax))
register_function(jax.nn.log_softmax)(_with_axis(LogSoftmax))


@register_function(jax.nn.gelu)
def _gelu(call):
    if not call.names_ok(("x", "approximate"), 2):
        return None
    return Gelu(call.static(1, "approximate", True)), [call.arg(0, "x")]


class SoftmaxCrossEntropyWithLogits(AttrPrimitive):
    """`(logits, labels)`: `-sum(labels * log_softmax(logits), -1)`."""

    n_inputs = 2

    def impl(self, logits, labels):
        return -jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1)


def channel_view(x):
    """x (N, C, ...) as (N, C, rest): statistics reduce axes (0, 2)."""
    return jnp.reshape(x, (jnp.shape(x)[0], jnp.shape(x)[1], -1))


class BatchNorm(AttrPrimitive):
    """`BatchNorm(epsilon)(x, gamma, beta)` -> (y, batch mean, biased batch var)
    per channel (axis 1); gamma and beta have shape (C,)."""

    n_inputs = 3

    def __init__(self, epsilon: float = 1e-5):
        super().__init__(epsilon=epsilon)

    def impl(self, x, gamma, beta):
        x3 = channel_view(x)
        mean = jnp.mean(x3, axis=(0, 2))
        var = jnp.mean(jnp.square(x3 - mean[:, None]), axis=(0, 2))
        scale = gamma * jax.lax.rsqrt(var + self.epsilon)
        y3 = (x3 - mean[:, None]) * scale[:, None] + beta[:, None]
        return jnp.reshape(y3, jnp.shape(x)), mean, var


def dropout_mask(key, shape, keep_prob):
    return jax.random.bernoulli(key, keep_prob, tuple(shape))


class DropoutGenMask(AttrPrimitive):
    """`(key, shape)`: a boolean mask, True with probability keep_prob."""

    n_inputs = 2

    def __init__(self, keep_prob: float = 0.5):
        super().__init__(keep_prob=keep_prob)

    def impl(self, key, shape):
        return dropout_mask(key, shape, self.keep_prob)


class DropoutDoMask(DropoutGenMask):
    """`(x, mask)`: `x / keep_prob` where mask, else 0."""

    def impl(self, x, mask):
        return jnp.where(mask, x / self.keep_prob, jnp.zeros((), jnp.result_type(x)))


class Dropout(DropoutGenMask):
    """`(x, key)`: `DropoutDoMask(x, DropoutGenMask(key, x.shape))`."""

    def impl(self, x, key):
        mask = dropout_mask(key, jnp.shape(x), self.keep_prob)
        return jnp.where(mask, x / self.keep_prob, jnp.zeros((), jnp.result_type(x)))


def one_hot(indices, depth, dtype=None):
    if dtype is None:
        return jax.nn.one_hot(indices, depth)
    return jax.nn.one_hot(indices, depth, dtype=dtype)


OneHot = elementwise("OneHot", one_hot, "one_hot", 3, "`(indices, depth, dtype)`: jax.nn.one_hot.")


@register_function(jax.nn.one_hot)
def _one_hot(call):
    if not call.names_ok(("x", "num_classes", "dtype"), 3):
        return None
    return OneHot(), [call.arg(0, "x"), call.arg(1, "num_classes"), call.arg(2, "dtype", NONE)]


# == gradient rules ==============================================================
# Rules for neural-network primitives, written with their outputs so they
# stay numerically stable (no division by a softmax). Convolutions and pooling
# are in `conv`. Dropout's gradient regenerates the mask from the same key.


@bprop_getters.register(Softmax)
def get_bprop_softmax(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (out * (dout - jnp.sum(dout * out, axis=axis, keepdims=True)),)

    return bprop


@bprop_getters.register(LogSoftmax)
def get_bprop_log_softmax(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (dout - jnp.exp(out) * jnp.sum(dout, axis=axis, keepdims=True),)

    return bprop


@rule(SoftmaxCrossEntropyWithLogits)
def bprop_softmax_cross_entropy(logits, labels, out, dout):
    """d/dlogits = softmax * sum(labels) - labels (softmax - labels for a
    distribution), d/dlabels = -log_softmax: finite for any logits (no exp
    of a large logit, no log of a tiny probability)."""
    g = jnp.expand_dims(dout, -1)
    total = jnp.sum(labels, axis=-1, keepdims=True)
    return (jax.nn.softmax(logits) * total - labels) * g, -jax.nn.log_softmax(logits) * g


@bprop_getters.register(BatchNorm)
def get_bprop_batch_norm(self):
    """With xhat = (x - mean) * rstd and g = dy * gamma, per channel over the
    m = N * H * W entries: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    plus the paths through the mean and var outputs."""
    epsilon = self.epsilon

    def bprop(x, gamma, beta, out, dout):
        dy, dmean, dvar = dout
        x3 = channel_view(x)
        m = jnp.size(x3) // jnp.shape(x3)[1]
        centred = x3 - out[1][:, None]
        rstd = jax.lax.rsqrt(out[2] + epsilon)[:, None]
        xhat = centred * rstd
        dy3 = channel_view(dy)
        g = dy3 * gamma[:, None]
        dx = g - jnp.mean(g, axis=(0, 2), keepdims=True)
        dx = (dx - xhat * jnp.mean(g * xhat, axis=(0, 2), keepdims=True)) * rstd
        dx = dx + dmean[:, None] / m + dvar[:, None] * (2.0 / m) * centred
        return (
            jnp.reshape(dx, jnp.shape(x)),
            jnp.sum(dy3 * xhat, axis=(0, 2)),
            jnp.sum(dy3, axis=(0, 2)),
        )

    return bprop


@bprop_getters.register(Dropout)
def get_bprop_dropout(self):
    gen_mask = DropoutGenMask(self.keep_prob)
    do_mask = DropoutDoMask(self.keep_prob)
    return lambda x, key, out, dout: (do_mask(dout, gen_mask(key, jnp.shape(x))), None)


@bprop_getters.register(DropoutDoMask)
def get_bprop_dropout_do_mask(self):
    do_mask = DropoutDoMask(self.keep_prob)
    return lambda x, mask, out, dout: (do_mask(dout, mask), None)


zero_gradient(DropoutGenMask, OneHot)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)

unary(Softplus, lambda x, out: jax.nn.sigmoid(x))


@bprop_getters.register(Gelu)
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
