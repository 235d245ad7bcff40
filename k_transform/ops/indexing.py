"""Functional index updates: `x.at[i].set(v)`, `.add(v)`, `.multiply(v)`,
`.min(v)`, `.max(v)`, `.get()`, and `x[i] = v`.

The parser sees `x.at[i].set(v)` as a method call on `getitem(x.at, i)`; the
adapters here recognise that shape and turn it into one primitive on
`(x, i, v)` (`.get()`: `x[i]`). `x[i] = v` statements already become
`SetItem`. Other helpers (`.divide`, `.power`, `.apply`, keyword options
such as `mode=`) are refused by name.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import rule
from k_transform.errors import KTransformError
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
    """`x.at[index].multiply(value)`: repeated indices multiply by each."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].multiply(value, unique_indices=_distinct(index))

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].multiply({args[2]})"


def _distinct(index) -> bool:
    """Whether `index` is known to hold no repeated position: an int, or a
    concrete integer array without repeats (JAX differentiates its multiply
    only so; k_transform's rule takes repeats too)."""
    if isinstance(index, (int, np.integer)):
        return True
    if isinstance(index, np.ndarray) and np.issubdtype(index.dtype, np.integer):
        return len(np.unique(index)) == index.size
    return False


class IndexMin(JaxPrimitive):
    """`x.at[index].min(value)`; ties share the gradient equally, as JAX's."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].min(value)

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].min({args[2]})"


class IndexMax(JaxPrimitive):
    """`x.at[index].max(value)`; ties share the gradient equally, as JAX's."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].max(value)

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].max({args[2]})"


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


def _at_update(name: str, prim_cls, n_values: int = 1):
    def adapter(call):
        target = _at_target(call.args[0])
        if target is None:
            return None  # `d.get(k)`, `x.max()`: not an `.at[]` helper
        if call.kwargs or len(call.args) != 1 + n_values:
            raise KTransformError(_refusal(name, "with keyword options or these arguments "))
        return prim_cls(), [*target, *call.args[1:]]

    return adapter


def _refusal(name: str, how: str) -> str:
    return (
        f"`x.at[index].{name}(...)` {how}is not supported (differentiated: "
        "`.get()`, `.set(v)`, `.add(v)`, `.multiply(v)`, `.min(v)`, `.max(v)`)"
    )


def _at_refused(name: str):
    def adapter(call):
        if _at_target(call.args[0]) is not None:
            raise KTransformError(_refusal(name, ""))

    return adapter


register_method("set", helper=True)(_at_update("set", prims.SetItem))
register_method("add", helper=True)(_at_update("add", IndexAdd))
register_method("multiply", "mul", helper=True)(_at_update("multiply", IndexMultiply))
register_method("min", helper=True)(_at_update("min", IndexMin))
register_method("max", helper=True)(_at_update("max", IndexMax))
register_method("get", helper=True)(_at_update("get", prims.GetItem, n_values=0))
for _name in ("divide", "power", "apply"):
    register_method(_name, helper=True)(_at_refused(_name))


# == gradient rules ==============================================================
# `x.at[i].add/multiply`.

sum_to = SumTo()
applied = prims.Written(kept=False)
index_multiply = IndexMultiply()


@rule(IndexAdd)
def bprop_index_add(x, index, value, out, dout):
    # an index out of bounds adds nothing (JAX drops it), so takes no gradient
    return dout, None, sum_to(jnp.where(applied(x, index), dout[index], 0.0), value)


@rule(IndexMultiply)
def bprop_index_multiply(x, index, value, out, dout):
    """Each update's factor is the product of the others at its index: 1 for
    an index written once, else the product over all divided by its own (a
    zero factor repeated gives NaN there, where JAX refuses the gradient)."""
    scale = index_multiply(jnp.ones_like(x), index, value)
    at = jnp.broadcast_to(value, jnp.shape(x[index]))
    once = jnp.zeros_like(x).at[index].add(1.0)[index] == 1.0
    others = jnp.where(once, 1.0, scale[index] / jnp.where(once, 1.0, at))
    read = jnp.where(applied(x, index), dout[index] * x[index] * others, 0.0)
    return dout * scale, None, sum_to(read, value)


def _bprop_index_extremum(x, index, value, out, dout):
    """JAX's convention: each output is shared equally by the inputs equal to
    it (the kept `x` entry and the updates that reached it)."""
    hit = jnp.broadcast_to(value, jnp.shape(out[index])) == out[index]
    kept = x == out
    count = jnp.zeros_like(out).at[index].add(jnp.where(hit, 1.0, 0.0)) + jnp.where(kept, 1.0, 0.0)
    share = dout / count
    return jnp.where(kept, share, 0.0), None, sum_to(jnp.where(hit, share[index], 0.0), value)


@rule(IndexMin)
def bprop_index_min(x, index, value, out, dout):
    return _bprop_index_extremum(x, index, value, out, dout)


@rule(IndexMax)
def bprop_index_max(x, index, value, out, dout):
    return _bprop_index_extremum(x, index, value, out, dout)
