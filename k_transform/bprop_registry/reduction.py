"""Rules for reductions and matrix products.

A reduction's `dout` has the reduced shape; `_unreduce` puts the reduced axes
back (length 1) so it broadcasts against `x`. The axis input gets None.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()


def _unreduce(g, axis, keep_dims):
    """`g` (reduced over `axis`) with the reduced axes back as length 1."""
    if axis is None or keep_dims:
        return g
    return jnp.expand_dims(g, axis)


@bprop_getters.register(ops.ReduceSum)
def get_bprop_reduce_sum(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        return jnp.broadcast_to(_unreduce(dout, axis, keep_dims), jnp.shape(x)), None

    return bprop


@bprop_getters.register(ops.ReduceMean)
def get_bprop_reduce_mean(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        dx = jnp.broadcast_to(_unreduce(dout, axis, keep_dims), jnp.shape(x))
        return dx / count, None

    return bprop


def _get_bprop_reduce_extremum(self):
    """max/min: `dout` split evenly among the positions reaching the extremum."""
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        at = x == _unreduce(out, axis, keep_dims)
        zero = jnp.zeros_like(x)
        hits = jnp.where(at, jnp.ones_like(x), zero)
        count = jnp.sum(hits, axis=axis, keepdims=True)
        return jnp.where(at, _unreduce(dout, axis, keep_dims) / count, zero), None

    return bprop


bprop_getters.register(ops.ReduceMax)(_get_bprop_reduce_extremum)
bprop_getters.register(ops.ReduceMin)(_get_bprop_reduce_extremum)


@bprop_getters.register(ops.LogSumExp)
def get_bprop_logsumexp(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        weights = jnp.exp(x - _unreduce(out, axis, keep_dims))
        return _unreduce(dout, axis, keep_dims) * weights, None

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


@bprop_getters.register(ops.BatchMatMul)
def get_bprop_batch_matmul(self):
    ta, tb = self.transpose_a, self.transpose_b

    def bprop(a, b, out, dout):
        a_ = jnp.swapaxes(a, -1, -2) if ta else a
        b_ = jnp.swapaxes(b, -1, -2) if tb else b
        da = dout @ jnp.swapaxes(b_, -1, -2)
        db = jnp.swapaxes(a_, -1, -2) @ dout
        if ta:
            da = jnp.swapaxes(da, -1, -2)
        if tb:
            db = jnp.swapaxes(db, -1, -2)
        return sum_to(da, a), sum_to(db, b)

    return bprop
