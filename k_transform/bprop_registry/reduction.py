"""Rules for reductions and matrix products.

A reduction's `dout` has the reduced shape; `_unreduce` puts the reduced axes
back (length 1) so it broadcasts against `x`. The axis input gets None.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.helpers import zero_gradient
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


@bprop_getters.register(ops.ReduceProd)
def get_bprop_reduce_prod(self):
    """d prod / d x_i is the product of the others, zeros included: no division by x."""
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        is_zero = x == 0
        zero = jnp.zeros_like(x)
        safe = jnp.where(is_zero, jnp.ones_like(x), x)
        n_zeros = jnp.sum(jnp.where(is_zero, jnp.ones_like(x), zero), axis=axis, keepdims=True)
        rest = jnp.prod(safe, axis=axis, keepdims=True)  # product of the non-zeros
        others = jnp.where(
            is_zero,
            jnp.where(n_zeros == 1, rest, zero),
            jnp.where(n_zeros == 0, rest / safe, zero),
        )
        return _unreduce(dout, axis, keep_dims) * others, None

    return bprop


@bprop_getters.register(ops.LogSumExp)
def get_bprop_logsumexp(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        weights = jnp.exp(x - _unreduce(out, axis, keep_dims))
        return _unreduce(dout, axis, keep_dims) * weights, None

    return bprop


@bprop_getters.register(ops.Var)
def get_bprop_var(self):
    ddof, keep_dims = self.ddof, self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        centred = x - jnp.mean(x, axis=axis, keepdims=True)
        return _unreduce(dout, axis, keep_dims) * centred * (2.0 / (count - ddof)), None

    return bprop


@bprop_getters.register(ops.Std)
def get_bprop_std(self):
    ddof, keep_dims = self.ddof, self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        centred = x - jnp.mean(x, axis=axis, keepdims=True)
        scale = _unreduce(dout, axis, keep_dims) / _unreduce(out, axis, keep_dims)
        return scale * centred / (count - ddof), None

    return bprop


@bprop_getters.register(ops.Cumsum)
def get_bprop_cumsum(self):
    cumsum_back = ops.Cumsum(self.axis, not self.reverse)
    if self.axis is None:  # the flattened scan: back on the flat gradient, then reshaped
        return lambda x, out, dout: (jnp.reshape(cumsum_back(dout), jnp.shape(x)),)
    return lambda x, out, dout: (cumsum_back(dout),)


@bprop_getters.register(ops.Cumprod)
def get_bprop_cumprod(self):
    """dx_i = sum_{j >= i} dout_j prod_{k <= j, k != i} x_k, exact with zeros:
    row i of an (n, n) matrix holds x with x_i replaced by 1, scanned."""
    axis = self.axis
    cumprod_rows = ops.Cumprod(-1)

    def bprop(x, out, dout):
        xm = jnp.moveaxis(x, axis, -1)
        n = jnp.shape(xm)[-1]
        rows = jnp.where(jnp.eye(n, dtype=bool), 1.0, jnp.expand_dims(xm, -2))
        partial = jnp.triu(cumprod_rows(rows))  # [i, j]: prod_{k <= j, k != i}, j >= i
        g = jnp.sum(partial * jnp.expand_dims(jnp.moveaxis(dout, axis, -1), -2), axis=-1)
        return (jnp.moveaxis(g, -1, axis),)

    return bprop


zero_gradient(ops.Argmax, ops.Argmin)


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


@bprop_getters.register(ops.Dot)
def get_bprop_dot(self):
    """`dot(a, b)` contracts a's last axis with b's second-to-last (b's only
    one when 1-D): as a matrix product of `a` flattened to (-1, n) and `b`
    with that axis moved first and flattened to (n, -1)."""

    def bprop(a, b, out, dout):
        if jnp.ndim(a) == 0 or jnp.ndim(b) == 0:
            return sum_to(dout * b, a), sum_to(dout * a, b)
        a2 = jnp.reshape(a, (-1, jnp.shape(a)[-1]))
        if jnp.ndim(b) == 1:
            db = a2.T @ jnp.ravel(dout)
            return jnp.expand_dims(dout, -1) * b, db
        b_moved = jnp.moveaxis(b, -2, 0)
        b2 = jnp.reshape(b_moved, (jnp.shape(b_moved)[0], -1))
        g2 = jnp.reshape(dout, (jnp.shape(a2)[0], jnp.shape(b2)[1]))
        da = jnp.reshape(g2 @ b2.T, jnp.shape(a))
        db = jnp.moveaxis(jnp.reshape(a2.T @ g2, jnp.shape(b_moved)), 0, -2)
        return da, db

    return bprop


@bprop_getters.register(ops.Outer)
def get_bprop_outer(self):
    def bprop(a, b, out, dout):
        da = jnp.reshape(dout @ jnp.ravel(b), jnp.shape(a))
        db = jnp.reshape(jnp.ravel(a) @ dout, jnp.shape(b))
        return da, db

    return bprop
