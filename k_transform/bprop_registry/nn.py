"""Rules for neural-network primitives, written with their outputs so they
stay numerically stable (no division by a softmax)."""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.registry import bprop_getters


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
