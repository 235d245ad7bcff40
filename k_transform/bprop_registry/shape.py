"""Rules for shape primitives: each gradient undoes the shape change.

Shapes, permutations, axes and dtypes get None. `Concat`/`SplitLike` and
`Stack`/`Unstack` are each other's gradients, so both differentiate again.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.helpers import zero_gradient
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()
invert_permutation = ops.InvertPermutation()

zero_gradient(ops.Shape, ops.Size, ops.InvertPermutation)


@bprop_getters.register(ops.Transpose)
def get_bprop_transpose(self):
    def bprop(x, perm, out, dout):
        if perm is None:
            return jnp.transpose(dout), None
        return jnp.transpose(dout, invert_permutation(perm)), None

    return bprop


@bprop_getters.register(ops.SwapAxes)
def get_bprop_swapaxes(self):
    def bprop(x, axis1, axis2, out, dout):
        return jnp.swapaxes(dout, axis1, axis2), None, None

    return bprop


@bprop_getters.register(ops.MoveAxis)
def get_bprop_moveaxis(self):
    def bprop(x, source, destination, out, dout):
        return jnp.moveaxis(dout, destination, source), None, None

    return bprop


@bprop_getters.register(ops.Reshape)
def get_bprop_reshape(self):
    def bprop(x, shape, out, dout):
        return jnp.reshape(dout, jnp.shape(x)), None

    return bprop


@bprop_getters.register(ops.ExpandDims)
def get_bprop_expand_dims(self):
    def bprop(x, axis, out, dout):
        return jnp.reshape(dout, jnp.shape(x)), None

    return bprop


@bprop_getters.register(ops.Squeeze)
def get_bprop_squeeze(self):
    def bprop(x, out, dout):
        return (jnp.reshape(dout, jnp.shape(x)),)

    return bprop


@bprop_getters.register(ops.BroadcastTo)
def get_bprop_broadcast_to(self):
    def bprop(x, shape, out, dout):
        return sum_to(dout, x), None

    return bprop


@bprop_getters.register(ops.Cast)
def get_bprop_cast(self):
    def bprop(x, dtype, out, dout):
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
            return dout.astype(jnp.result_type(x)), None
        return None, None

    return bprop


@bprop_getters.register(ops.Concat)
def get_bprop_concat(self):
    split_like = ops.SplitLike(self.axis)

    def bprop(xs, out, dout):
        return (split_like(dout, xs),)

    return bprop


@bprop_getters.register(ops.SplitLike)
def get_bprop_split_like(self):
    axis = self.axis

    def bprop(g, xs, out, dout):
        return jnp.concatenate(dout, axis=axis), None

    return bprop


@bprop_getters.register(ops.Stack)
def get_bprop_stack(self):
    unstack = ops.Unstack(self.axis)

    def bprop(xs, out, dout):
        return (unstack(dout),)

    return bprop


@bprop_getters.register(ops.Unstack)
def get_bprop_unstack(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (jnp.stack(dout, axis=axis),)

    return bprop


def _negate(widths):
    if isinstance(widths, tuple):
        return tuple(_negate(w) for w in widths)
    return -widths


@bprop_getters.register(ops.Tile)
def get_bprop_tile(self):
    tile_grad = ops.TileGrad(self.reps)
    return lambda x, out, dout: (tile_grad(dout, x),)


@bprop_getters.register(ops.TileGrad)
def get_bprop_tile_grad(self):
    tile = ops.Tile(self.reps)
    return lambda g, x, out, dout: (tile(dout), None)


@bprop_getters.register(ops.Pad)
def get_bprop_pad(self):
    crop = ops.Pad(_negate(self.paddings))
    return lambda x, out, dout: (crop(dout),)


@bprop_getters.register(ops.Flip)
def get_bprop_flip(self):
    flip = ops.Flip(self.axis)
    return lambda x, out, dout: (flip(dout),)


@bprop_getters.register(ops.Roll)
def get_bprop_roll(self):
    roll_back = ops.Roll(_negate(self.shift), self.axis)
    return lambda x, out, dout: (roll_back(dout),)


@bprop_getters.register(ops.Split)
def get_bprop_split(self):
    axis = self.axis
    return lambda x, out, dout: (jnp.concatenate(dout, axis=axis),)
