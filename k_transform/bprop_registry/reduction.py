"""Rules for reductions and matrix products."""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.registry import bprop_getters


@bprop_getters.register(ops.ReduceSum)
def get_bprop_reduce_sum(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        if axis is None or keep_dims:
            return jnp.broadcast_to(dout, jnp.shape(x)), None
        return jnp.broadcast_to(jnp.expand_dims(dout, axis), jnp.shape(x)), None

    return bprop


@bprop_getters.register(ops.MatMul)
def get_bprop_matmul(self):
    ta, tb = self.transpose_a, self.transpose_b

    def bprop(a, b, out, dout):
        if ta:
            da = (b @ dout.T) if not tb else (b.T @ dout.T)
        else:
            da = (dout @ b.T) if not tb else (dout @ b)
        if tb:
            db = (dout.T @ a) if not ta else (dout.T @ a.T)
        else:
            db = (a.T @ dout) if not ta else (a @ dout)
        return da, db

    return bprop
