"""Functional index updates: `x.at[i].set(v)`, `.add(v)`, `.multiply(v)`,
`.min(v)`, `.max(v)`, `.get()`, and `x[i] = v`.

The parser sees `x.at[i].set(v)` as a method call on `getitem(x.at, i)`; the
adapters here recognise that shape and turn it into one primitive on
`(x, i, v)` (`.get()`: `x[i]`). `x[i] = v` statements already become
`SetItem`. Other helpers (`.divide`, `.power`, `.apply`) are refused by name.

Keyword options, as JAX reads them. `mode=`: an update drops an index out
of bounds by default (JAX's scatter), so `"drop"`, `"fill"` and
`"promise_in_bounds"` are the default there; `"clip"` clamps the index
(`ClippedUpdate`: the update, and its rule, at the clamped index
`clip_index(x, index)`, a negative index counted from the end first, as
JAX's scatter). `.get(mode=..., fill_value=...)` with a mode other than
the default is `IndexGet`: `"fill"`/`"drop"` read the fill value (NaN by
default) out of bounds, with no gradient there; `"clip"` clamps the index and
its gradient goes to the clamped position. `indices_are_sorted=` and
`unique_indices=` are promises about the index that change no result: kept
for `.get()`, ignored for an update (its rule takes any index).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Apply, Constant
from k_transform.ops import python as prims
from k_transform.ops.base import JaxPrimitive
from k_transform.ops.mapping import NotStatic, register_method
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


class IndexGet(JaxPrimitive):
    """`x.at[index].get(mode=mode, fill_value=fill_value)` for `mode` "fill",
    "drop" or "clip" (a static `fill_value`: a Python number or None)."""

    n_inputs = 2

    def __init__(self, mode: str, fill_value=None):
        super().__init__(mode=mode, fill_value=fill_value)

    def impl(self, x, index):
        return x.at[index].get(mode=self.mode, fill_value=self.fill_value)

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].get(mode={self.mode!r}, fill_value={self.fill_value!r})"


class IndexAddClipped(JaxPrimitive):
    """`x.at[index].add(value, mode="clip")`: the gradient of a clipped read
    (`IndexGet("clip")`), an index out of bounds clamped onto the edge."""

    n_inputs = 3

    def impl(self, x, index, value):
        return x.at[index].add(value, mode="clip")

    def emit(self, e, args):
        return f"{args[0]}.at[{args[1]}].add({args[2]}, mode='clip')"


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


class ClippedUpdate(JaxPrimitive):
    """`x.at[index].<update>(value, mode="clip")`: the update `inner` (a
    primitive on `(x, index, value)`) at `clip_index(x, index)`; its rule is
    `inner`'s there (`get_bprop_clipped_update`)."""

    n_inputs = 3

    def __init__(self, inner):
        super().__init__(inner=inner)

    def impl(self, x, index, value):
        return self.inner.impl(x, clip_index(x, index), value)

    def emit(self, e, args):
        clipped = f"{e.ref(clip_index, '_clip_index')}({args[0]}, {args[1]})"
        return self.inner.emit(e, [args[0], clipped, args[2]])


class ClipIndex(JaxPrimitive):
    """`clip_index(x, index)` (no gradient: an index)."""

    n_inputs = 2

    def impl(self, x, index):
        return clip_index(x, index)

    def emit(self, e, args):
        return f"{e.ref(clip_index, '_clip_index')}({', '.join(args)})"


def clip_index(x, index):
    """`index` into `x` with each integer item clamped into its axis (JAX's
    `mode="clip"`: a negative one counted from the end first, then clamped
    to `[0, n - 1]`); slices (clamped by Python already), `None`, `...`
    and boolean masks are kept."""
    items = index if isinstance(index, tuple) else (index,)
    shape = jnp.shape(x)

    def width(item) -> int:  # the axes of `x` an index item consumes
        if item is None or item is Ellipsis:
            return 0
        if not isinstance(item, slice) and jnp.result_type(item) == jnp.bool_:
            return jnp.ndim(item)
        return 1

    out, axis = [], 0
    for k, item in enumerate(items):
        if item is Ellipsis:
            axis = len(shape) - sum(width(i) for i in items[k + 1 :])
        elif item is not None and not isinstance(item, slice) and width(item) == 1:
            n = shape[axis]
            if isinstance(item, (int, np.integer)):
                item = min(max(item + n if item < 0 else item, 0), n - 1)
            else:
                item = jnp.asarray(item)
                item = jnp.clip(jnp.where(item < 0, item + n, item), 0, n - 1)
        axis += width(item)
        out.append(item)
    return tuple(out) if isinstance(index, tuple) else out[0]


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


_MODES = (None, "promise_in_bounds", "clip", "drop", "fill")
_PROMISES = ("indices_are_sorted", "unique_indices")


def _at_update(name: str, prim_cls, n_values: int = 1):
    def adapter(call):
        target = _at_target(call.args[0])
        if target is None:
            return None  # `d.get(k)`, `x.max()`: not an `.at[]` helper
        allowed = ("mode", *_PROMISES, *(("fill_value",) if name == "get" else ()))
        if len(call.args) != 1 + n_values or not set(call.kwargs) <= set(allowed):
            raise KTransformError(_refusal(name, "with these arguments "))
        keyword = functools.partial(call.static, len(call.args))  # (by name only)
        try:
            mode, fill_value = keyword("mode"), keyword("fill_value")
            [keyword(k) for k in _PROMISES]
        except NotStatic as exc:
            raise KTransformError(_refusal(name, f"with a traced `{exc}=` ")) from None
        if mode not in _MODES or not isinstance(fill_value, (type(None), int, float, bool)):
            raise KTransformError(_refusal(name, f"with mode={mode!r} fill_value={fill_value!r} "))
        if name == "get" and mode in ("fill", "drop", "clip"):
            return IndexGet(mode, fill_value), list(target)
        if name != "get" and mode == "clip":  # the update at the clamped index
            return ClippedUpdate(prim_cls()), [*target, *call.args[1:]]
        return prim_cls(), [*target, *call.args[1:]]  # the default mode

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
index_add = IndexAdd()
index_add_clipped = IndexAddClipped()
index_get_clipped = IndexGet("clip")


@rule(IndexAdd)
def bprop_index_add(x, index, value, out, dout):
    # an index out of bounds adds nothing (JAX drops it), so takes no gradient
    return dout, None, sum_to(jnp.where(applied(x, index), dout[index], 0.0), value)


@bprop_getters.register(IndexGet)
def get_bprop_index_get(self):
    if self.mode == "clip":
        return lambda x, index, out, dout: (index_add_clipped(jnp.zeros_like(x), index, dout), None)
    # "fill"/"drop": an index out of bounds read the fill value, no gradient;
    # `IndexAdd` drops it, as JAX's scatter
    return lambda x, index, out, dout: (index_add(jnp.zeros_like(x), index, dout), None)


@bprop_getters.register(ClippedUpdate)
def get_bprop_clipped_update(self):
    inner = bprop_getters.rule_function(self.inner)
    clip = ClipIndex()

    def bprop(x, index, value, out, dout):
        dx, _, dvalue = inner(x, clip(x, index), value, out, dout)
        return dx, None, dvalue  # (the index's None seen where it is built)

    return bprop


zero_gradient(ClipIndex)


@rule(IndexAddClipped)
def bprop_index_add_clipped(x, index, value, out, dout):
    return dout, None, sum_to(index_get_clipped(dout, index), value)


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
