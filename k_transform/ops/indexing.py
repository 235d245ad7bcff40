"""Functional index updates: `x.at[i].set(v)`, `x.at[i].add(v)`, `x[i] = v`.

The parser sees `x.at[i].set(v)` as a method call on `getitem(x.at, i)`; the
adapters here recognise that shape and turn it into one primitive on
`(x, i, v)`. `x[i] = v` statements already become `SetItem`.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform.bprop_registry.helpers import rule
from k_transform.ir.nodes import Apply, Constant
from k_transform.ops import python as prims
from k_transform.ops.base import JaxPrimitive
from k_transform.ops.mapping import register_method
from k_transform.ops.structural import SumTo


class IndexAdd(JaxPrimitive):
    """`x.at[index].add(value)`."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].add(value)

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].add({args[2]})"


class IndexMultiply(JaxPrimitive):
    """`x.at[index].multiply(value)`; its gradient assumes distinct indices."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].multiply(value, unique_indices=True)

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].multiply({args[2]})"


def _at_target(node):
    """(x, index) when `node` is `x.at[index]`, else None."""
    if not (isinstance(node, Apply) and isinstance(node.fn, Constant)):
        return None
    if not isinstance(node.fn.value, prims.GetItem):
        return None
    at = node.args[0]
    if not (isinstance(at, Apply) and isinstance(at.fn, Constant)):
        return None
    getattr_prim = at.fn.value
    if not (isinstance(getattr_prim, prims.GetAttr) and getattr_prim.attr == "at"):
        return None
    return at.args[0], node.args[1]


def _at_update(prim_cls):
    def adapter(call):
        target = _at_target(call.args[0])
        if target is None or call.kwargs or len(call.args) != 2:
            return None
        return prim_cls(), [*target, call.args[1]]

    return adapter


register_method("set")(_at_update(prims.SetItem))
register_method("add")(_at_update(IndexAdd))
register_method("multiply")(_at_update(IndexMultiply))


# == gradient rules ==============================================================
# `x.at[i].add/multiply`.

sum_to = SumTo()


@rule(IndexAdd)
def bprop_index_add(x, index, value, out, dout):
    return dout, None, sum_to(dout[index], value)


@rule(IndexMultiply)
def bprop_index_multiply(x, index, value, out, dout):
    scale = jnp.ones_like(x).at[index].set(value)
    return dout * scale, None, sum_to(dout[index] * x[index], value)
