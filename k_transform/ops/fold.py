"""Constant folding: evaluating static computations at transform time.

Python-level arithmetic on constants (`n - 1`, `len((a, b))`, `math.sqrt(2.0)`,
`None is None`, tuple and slice building, indexing constant tuples) is done
while building or inlining graphs, so static control flow (`if n == 0:`,
`if axis is None:`) picks its branch then. Only pure operations whose
result is a plain Python value are folded: a call is evaluated only when its
function is known to be pure (`ops.host.is_pure`), so nothing a user wrote,
and no random generator, counter or clock, runs at transform time.
"""

from __future__ import annotations

import jax
import numpy as np

from k_transform import runtime as rt
from k_transform.ir.nodes import NO_DEBUG, Apply, Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops.arithmetic import Is, IsNot
from k_transform.ops.base import OperatorPrimitive
from k_transform.ops.host import is_pure

_FOLDABLE_PRIMS = (
    OperatorPrimitive,
    prims.Not,
    prims.MakeTuple,
    prims.MakeSlice,
    prims.GetItem,
    prims.Contains,
)


def fold(prim, args) -> Constant | None:
    """`prim(*args)` as a Constant if all args are constants and it is static."""
    if not isinstance(prim, Primitive) or not all(isinstance(a, Constant) for a in args):
        return None
    values = [a.value for a in args]
    if any(isinstance(v, FuncGraph) or v is rt.UNDEFINED for v in values):
        return None
    if isinstance(prim, prims.LibraryCall):
        if not is_pure(prim.fn):
            return None
        pos, kw = prims.split_kwargs(values, prim.kwnames)
        return _evaluate(prim.fn, pos, kw)
    if not isinstance(prim, _FOLDABLE_PRIMS):
        return None
    if isinstance(prim, OperatorPrimitive) and not isinstance(prim, (Is, IsNot)):
        if _holds_array(values):  # `w * 0.5`: an array, never a constant
            return None
    if isinstance(prim, prims.GetItem) and isinstance(values[0], (tuple, list, dict)):
        # An item of a constant container is a constant, whatever it holds
        # (a sub-Cell, a Parameter, an array): `self.layers[2]`, `self.moments[k]`.
        try:
            return Constant(values[0][values[1]], NO_DEBUG)
        except (IndexError, KeyError, TypeError):
            return None
    if isinstance(prim, prims.GetItem) and _container_cell(values[0]):
        try:  # `self.blocks[i]` of a CellList: the sub-Cell (its code is k_transform's)
            return Constant(values[0][values[1]], NO_DEBUG)
        except (IndexError, KeyError, TypeError):
            return None
    return _evaluate(prim.impl, values, {})


def _container_cell(value) -> bool:
    """A Cell whose items k_transform's own code reads (`CellList`, `SequentialCell`)."""
    getitem = getattr(type(value), "__getitem__", None)
    return hasattr(value, "construct") and (getattr(getitem, "__module__", "") or "").startswith(
        "k_transform."
    )


def fold_call(fn, args, kwargs) -> Constant | None:
    """A call of a pure builtin or `math` function on constants, evaluated."""
    if not (is_pure(fn) and all(isinstance(a, Constant) for a in [*args, *kwargs.values()])):
        return None
    if fn is type and len(args) == 1 and not kwargs and not _holds_array([args[0].value]):
        # `type(self)`: the class, whose attributes are then read while parsing
        # and guarded (`type(self).eps` set on the class is seen)
        return Constant(type(args[0].value), NO_DEBUG)
    return _evaluate(fn, [a.value for a in args], {k: v.value for k, v in kwargs.items()})


def _holds_array(values) -> bool:
    """Whether `values` (or a tuple or list among them) holds a JAX array or a Parameter."""
    for v in values:
        if isinstance(v, (tuple, list)):
            if _holds_array(v):
                return True
        elif isinstance(v, jax.Array) or getattr(type(v), "__kt_parameter__", False):
            return True
    return False


def _evaluate(fn, args, kwargs) -> Constant | None:
    if not callable(fn):
        return None
    module = getattr(fn, "__module__", None) or ""
    try:
        if module == "jax" or module.startswith("jax."):
            result = _staged(fn, args, kwargs)
        else:
            result = fn(*args, **kwargs)
    except Exception:
        return None
    return Constant(result, NO_DEBUG) if is_static(result) else None


def _staged(fn, args, kwargs):
    """`fn(*args, **kwargs)` run under a throwaway trace (`jax.make_jaxpr`): a
    JAX function's Python result (a shape, a dtype test) is the same, while
    an array result is a traced value, no constant, and no XLA program is
    compiled for it. Run eagerly, each such call compiled one per shape at
    transform time (10-70 ms): LeNet-5's `jnp.transpose(self.weight)`s cost
    0.3 s of its first training step."""
    result = []
    jax.make_jaxpr(lambda: result.append(fn(*args, **kwargs)))()
    return result[0]


def is_static(value) -> bool:
    """A plain Python value that can stand in generated code as a literal."""
    if isinstance(value, tuple):
        return all(is_static(v) for v in value)
    if isinstance(value, slice):
        return all(is_static(v) for v in (value.start, value.stop, value.step))
    return (
        value is None
        or value is Ellipsis
        or isinstance(value, (bool, int, float, str, range, np.generic))
    )


__all__ = ["fold", "fold_call", "is_static"]


def tuple_item(tup, index) -> object | None:
    """`tup[index]` when `tup` is a tuple built in the graph and `index` constant:
    the item itself (`a, b = x, y` then needs no indexing)."""
    if not (isinstance(tup, Apply) and isinstance(index, Constant)):
        return None
    maker = tup.fn.value if isinstance(tup.fn, Constant) else None
    if isinstance(maker, prims.MakeTuple) and isinstance(index.value, int):
        if -len(tup.args) <= index.value < len(tup.args):
            return tup.args[index.value]
    return None


def tuple_slice(tup, index) -> list | None:
    """The items `tup[index]` takes when `tup` is a tuple built in the graph
    and `index` a constant slice (`args[:-1]` of a `*args` of known arity)."""
    if not (isinstance(tup, Apply) and isinstance(index, Constant)):
        return None
    maker = tup.fn.value if isinstance(tup.fn, Constant) else None
    if isinstance(maker, prims.MakeTuple) and isinstance(index.value, slice):
        return list(tup.args[index.value])
    return None
