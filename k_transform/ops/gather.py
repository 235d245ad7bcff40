"""Gathers and scatters with integer index arrays (MindSpore names).

- `Gather(axis)(params, indices)`: `jnp.take(params, indices, axis)` (an
  embedding lookup); `GatherGrad(axis)(params, indices, dout)` adds `dout`
  into zeros shaped like params at `indices` (params gives the shape).
- `TakeAlongAxis(axis)(x, indices)` and its scatter-add adjoint
  `TakeAlongAxisGrad(axis)(x, indices, dout)`.
- `ScatterAdd()(x, indices, updates)`: `x.at[indices].add(updates)` along axis 0.
- `UnsortedSegmentSum(num_segments)(data, segment_ids)`: `jax.ops.segment_sum`.

Indices never get a gradient; repeated indices accumulate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import JaxPrimitive
from k_transform.ops.mapping import register_function
from k_transform.ops.python import Written
from k_transform.ops.structural import SumTo


def take(params, indices, axis: int = 0):
    return jnp.take(params, indices, axis=axis)


def gather_grad(params, indices, dout, axis: int = 0):
    """Zeros like params with `dout` added at `indices` along `axis`."""
    index = (slice(None),) * (axis % jnp.ndim(params)) + (indices,)
    return jnp.zeros_like(params, dtype=jnp.result_type(dout)).at[index].add(dout)


def _along_axis_index(x, indices, axis: int, out_shape) -> tuple:
    """The full index into `x` of each element of `take_along_axis(x,
    indices, axis)` (of shape `out_shape`: `x` and `indices` broadcast
    against each other off `axis`): `indices` on `axis`, elsewhere an open
    grid, or 0 where `x` has one element along that axis (broadcast)."""
    axis = axis % jnp.ndim(x)
    indices = jnp.broadcast_to(indices, out_shape)
    index = []
    for k, n in enumerate(out_shape):
        if k == axis:
            index.append(indices)
        else:
            shape = [1] * len(out_shape)
            shape[k] = n
            grid = jnp.arange(n) if jnp.shape(x)[k] == n else jnp.zeros(n, jnp.int32)
            index.append(jnp.reshape(grid, shape))
    return tuple(index)


def take_along_axis_grad(x, indices, dout, axis: int):
    zeros = jnp.zeros_like(x, dtype=jnp.result_type(dout))
    return zeros.at[_along_axis_index(x, indices, axis, jnp.shape(dout))].add(dout)


def scatter_add(x, indices, updates):
    return x.at[indices].add(updates)


def segment_sum(data, segment_ids, num_segments: int):
    return jax.ops.segment_sum(data, segment_ids, num_segments)


class _AxisIndexing(JaxPrimitive):
    jax_kwargs = {"axis": "axis"}
    n_inputs = 2

    def __init__(self, axis: int = 0):
        super().__init__(axis=axis)


class Gather(_AxisIndexing):
    """`Gather(axis)(params, indices)`: `jnp.take(params, indices, axis)`."""

    jax_fn = staticmethod(take)
    jax_name = "take"


class GatherGrad(_AxisIndexing):
    """`GatherGrad(axis)(params, indices, dout)`: the adjoint of `Gather`."""

    jax_fn = staticmethod(gather_grad)
    jax_name = "gather_grad"
    n_inputs = 3


class TakeAlongAxis(_AxisIndexing):
    """`TakeAlongAxis(axis)(x, indices)`: `jnp.take_along_axis(x, indices, axis)`."""

    jax_fn = staticmethod(jnp.take_along_axis)
    jax_name = "jnp.take_along_axis"


class TakeAlongAxisGrad(_AxisIndexing):
    """`TakeAlongAxisGrad(axis)(x, indices, dout)`: the adjoint of `TakeAlongAxis`."""

    jax_fn = staticmethod(take_along_axis_grad)
    jax_name = "take_along_axis_grad"
    n_inputs = 3


class ScatterAdd(JaxPrimitive):
    """`ScatterAdd()(x, indices, updates)`: `x.at[indices].add(updates)`."""

    jax_fn = staticmethod(scatter_add)
    jax_name = "scatter_add"
    n_inputs = 3


class UnsortedSegmentSum(JaxPrimitive):
    """`UnsortedSegmentSum(num_segments)(data, segment_ids)`: sums of the rows
    of data per segment id (`jax.ops.segment_sum`)."""

    jax_fn = staticmethod(segment_sum)
    jax_name = "segment_sum"
    jax_kwargs = {"num_segments": "num_segments"}
    n_inputs = 2

    def __init__(self, num_segments: int = 1):
        super().__init__(num_segments=num_segments)


@register_function(jnp.take)
def _take(call):
    """`jnp.take(a, indices, axis)` with a static int axis."""
    if not call.names_ok(("a", "indices", "axis"), 3):
        return None
    axis = call.static(2, "axis")
    return (
        (Gather(axis), [call.arg(0, "a"), call.arg(1, "indices")])
        if isinstance(axis, int)
        else None
    )


@register_function(jnp.take_along_axis, np.take_along_axis)
def _take_along_axis(call):
    if not call.names_ok(("arr", "indices", "axis"), 3):
        return None
    axis = call.static(2, "axis")
    if not isinstance(axis, int):
        return None
    return TakeAlongAxis(axis), [call.arg(0, "arr"), call.arg(1, "indices")]


@register_function(jax.ops.segment_sum)
def _segment_sum(call):
    if not call.names_ok(("data", "segment_ids", "num_segments"), 3):
        return None
    n = call.static(2, "num_segments")
    return (UnsortedSegmentSum(n), [call.arg(0, "data"), call.arg(1, "segment_ids")]) if n else None


# == gradient rules ==============================================================
# Rules for gathers and scatters: each is the other's adjoint.
#
# `Gather` / `GatherGrad` and `TakeAlongAxis` / `TakeAlongAxisGrad` are linear
# in their data and pair up; `ScatterAdd` passes `dout` through to x and
# gathers it for the updates; `UnsortedSegmentSum` gathers `dout` by segment
# id. Indices, and the inputs that only give a shape, get None.

sum_to = SumTo()
applied = Written(kept=False)


@bprop_getters.register(Gather)
def get_bprop_gather(self):
    gather_grad = GatherGrad(self.axis)
    return lambda params, indices, out, dout: (gather_grad(params, indices, dout), None)


@bprop_getters.register(GatherGrad)
def get_bprop_gather_grad(self):
    gather = Gather(self.axis)
    return lambda params, indices, g, out, dout: (None, None, gather(dout, indices))


@bprop_getters.register(TakeAlongAxis)
def get_bprop_take_along_axis(self):
    scatter = TakeAlongAxisGrad(self.axis)
    return lambda x, indices, out, dout: (scatter(x, indices, dout), None)


@bprop_getters.register(TakeAlongAxisGrad)
def get_bprop_take_along_axis_grad(self):
    take = TakeAlongAxis(self.axis)
    return lambda x, indices, g, out, dout: (None, None, take(dout, indices))


@bprop_getters.register(ScatterAdd)
def get_bprop_scatter_add(self):
    gather = Gather(0)

    def bprop(x, indices, updates, out, dout):
        read = jnp.where(applied(x, indices), gather(dout, indices), 0.0)  # (drops: none)
        return dout, None, sum_to(read, updates)

    return bprop


@bprop_getters.register(UnsortedSegmentSum)
def get_bprop_unsorted_segment_sum(self):
    gather = Gather(0)
    n = self.num_segments

    def bprop(data, segment_ids, out, dout):
        # a row whose id is out of range (a padding id, -1) is dropped: no gradient
        inside = (segment_ids >= 0) & (segment_ids < n)
        rows = gather(dout, jnp.where(inside, segment_ids, 0))
        trailing = (1,) * (jnp.ndim(rows) - jnp.ndim(inside))
        return jnp.where(jnp.reshape(inside, jnp.shape(inside) + trailing), rows, 0.0), None

    return bprop
