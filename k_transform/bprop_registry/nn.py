"""Rules for neural-network primitives, written with their outputs so they
stay numerically stable (no division by a softmax). Convolutions and pooling
are in `conv`. Dropout's gradient regenerates the mask from the same key."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.helpers import zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.nn import channel_view


@bprop_getters.register(ops.Softmax)
def get_bprop_softmax(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (out * (dout - jnp.sum(dout * out, axis=axis, keepdims=True)),)

    return bprop


@bprop_getters.register(ops.LogSoftmax)
def get_bprop_log_softmax(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (dout - jnp.exp(out) * jnp.sum(dout, axis=axis, keepdims=True),)

    return bprop


@bprop_getters.register(ops.SoftmaxCrossEntropyWithLogits)
def get_bprop_softmax_cross_entropy(self):
    """d/dlogits = softmax * sum(labels) - labels (softmax - labels for a
    distribution), d/dlabels = -log_softmax: finite for any logits (no exp
    of a large logit, no log of a tiny probability)."""

    def bprop(logits, labels, out, dout):
        g = jnp.expand_dims(dout, -1)
        total = jnp.sum(labels, axis=-1, keepdims=True)
        return (jax.nn.softmax(logits) * total - labels) * g, -jax.nn.log_softmax(logits) * g

    return bprop


@bprop_getters.register(ops.BatchNorm)
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


@bprop_getters.register(ops.Dropout)
def get_bprop_dropout(self):
    gen_mask = ops.DropoutGenMask(self.keep_prob)
    do_mask = ops.DropoutDoMask(self.keep_prob)
    return lambda x, key, out, dout: (do_mask(dout, gen_mask(key, jnp.shape(x))), None)


@bprop_getters.register(ops.DropoutDoMask)
def get_bprop_dropout_do_mask(self):
    do_mask = ops.DropoutDoMask(self.keep_prob)
    return lambda x, mask, out, dout: (do_mask(dout, mask), None)


zero_gradient(ops.DropoutGenMask, ops.OneHot)
