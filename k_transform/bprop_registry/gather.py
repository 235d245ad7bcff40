"""Rules for gathers and scatters: each is the other's adjoint.

`Gather` / `GatherGrad` and `TakeAlongAxis` / `TakeAlongAxisGrad` are linear
in their data and pair up; `ScatterAdd` passes `dout` through to x and
gathers it for the updates; `UnsortedSegmentSum` gathers `dout` by segment
id. Indices, and the inputs that only give a shape, get None.
"""

from __future__ import annotations

from k_transform import ops
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()


@bprop_getters.register(ops.Gather)
def get_bprop_gather(self):
    gather_grad = ops.GatherGrad(self.axis)
    return lambda params, indices, out, dout: (gather_grad(params, indices, dout), None)


@bprop_getters.register(ops.GatherGrad)
def get_bprop_gather_grad(self):
    gather = ops.Gather(self.axis)
    return lambda params, indices, g, out, dout: (None, None, gather(dout, indices))


@bprop_getters.register(ops.TakeAlongAxis)
def get_bprop_take_along_axis(self):
    scatter = ops.TakeAlongAxisGrad(self.axis)
    return lambda x, indices, out, dout: (scatter(x, indices, dout), None)


@bprop_getters.register(ops.TakeAlongAxisGrad)
def get_bprop_take_along_axis_grad(self):
    take = ops.TakeAlongAxis(self.axis)
    return lambda x, indices, g, out, dout: (None, None, take(dout, indices))


@bprop_getters.register(ops.ScatterAdd)
def get_bprop_scatter_add(self):
    gather = ops.Gather(0)

    def bprop(x, indices, updates, out, dout):
        return dout, None, sum_to(gather(dout, indices), updates)

    return bprop


@bprop_getters.register(ops.UnsortedSegmentSum)
def get_bprop_unsorted_segment_sum(self):
    gather = ops.Gather(0)
    return lambda data, segment_ids, out, dout: (gather(dout, segment_ids), None)
