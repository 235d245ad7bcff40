"""Whether a value may be an object an augmented assignment changes in place.

`a += v` on a list or a NumPy array changes the object itself, so every
alias sees it; on a JAX array, a number or a tuple it rebinds `a` only. The
parser models the second and refuses the first where the object is shared
(`frontend.statements`, `frontend.calls`). `may_be_mutable` answers the
question from the IR, as far as the parser knows, following values through
items, operators, user functions, branches and loops.
"""

from __future__ import annotations

import numpy as np

from k_transform.context import TRANSFORM
from k_transform.control.prims import ControlPrimitive, ForEach, LoopPrimitive
from k_transform.ir.nodes import Constant, FuncGraph, Parameter
from k_transform.ops.arithmetic import BINARY, UNARY

_OPERATORS = (*BINARY.values(), *UNARY.values())  # the operator primitives
_IMMUTABLE_TYPES = (int, float, complex, str, bytes, tuple, frozenset, type(None), np.generic)


_SEARCH = 5_000  # steps of one question (see `may_be_mutable`)


def may_be_mutable(node, prims, depth: int = 0, resolve=None, items: bool = False) -> bool:
    """Whether `node`'s value may be a list, a NumPy array or another object
    an augmented assignment changes in place (`a += v`), as far as the parser
    knows: a display, a mutable constant, a library function's result (not
    JAX's), an item of such (where the item is known, `[x, [y]][0]`, that
    item), an operator on such (`l * 2`), what a user function returns.

    `resolve(p, items)` says what a parameter `p` stands for: a node of an
    enclosing graph (a loop's carried value at entry, a captured variable),
    `("items", seq)` for the item of a loop over `seq`, or None. A
    parameter it leaves unknown counts as an array (the caller checks what
    it passes: `FuncGraph.changed_parameters`); `items`: the question is of
    an item of `p` (`a = p[0]; a += v` changes a row of a matrix, not a
    number of a vector).

    Past `_SEARCH` steps of one question (loops, branches and helpers
    nest), the answer is the cautious one: it may be."""
    steps = TRANSFORM.cache("mutability.may_be_mutable")  # what is left of this question's
    if depth == 0:
        steps["left"] = _SEARCH
    steps["left"] = steps.get("left", _SEARCH) - 1
    if steps["left"] < 0 or depth > 64:
        return True
    if isinstance(node, Parameter):
        found = resolve(node, items) if resolve is not None else None
        if isinstance(found, tuple):  # ("items", seq)
            return _item_may_be_mutable(found[1], None, prims, depth + 1, resolve)
        return found is not None and may_be_mutable(found, prims, depth + 1, resolve)
    if not hasattr(node, "fn"):  # a Constant
        value = getattr(node, "value", None)
        return hasattr(node, "value") and not (
            isinstance(value, _IMMUTABLE_TYPES) or type(value).__module__.startswith("jax")
        )
    prim = getattr(node.fn, "value", None)
    if isinstance(prim, FuncGraph):  # a user function's result: what it returns
        return _returns_mutable(prim, node.args, prims, depth + 1, resolve)
    if isinstance(prim, ControlPrimitive):  # an `if` that returns on every path
        return _control_may_be_mutable(node, None, prims, depth + 1, resolve)
    if isinstance(prim, prims.GetItem) and isinstance(_key(node.args[1]), int):
        owner = getattr(getattr(node.args[0], "fn", None), "value", None)
        if isinstance(owner, ControlPrimitive):  # a variable an `if` or a loop set
            k = _key(node.args[1])
            return _control_may_be_mutable(node.args[0], k, prims, depth + 1, resolve)
    if prim is None or not hasattr(prim, "impl"):
        return False  # a closure's result (a value known when the program runs)
    if isinstance(prim, prims.LibraryCall):
        module = getattr(prim.fn, "__module__", None) or ""
        return not module.startswith(("jax", "k_transform"))
    if type(prim).__module__ == prims.__name__:
        if isinstance(prim, prims.GetItem) and not _is_slice(node.args[1], prims):
            return _item_may_be_mutable(node.args[0], node.args[1], prims, depth + 1, resolve)
        if isinstance(prim, (prims.GetItem, prims.SetItem)):  # a slice: a list or a view
            return may_be_mutable(node.args[0], prims, depth + 1, resolve)
        if isinstance(prim, prims.AsSequence):  # a comprehension's, `list(x)`'s
            return prim.kind == "list"
        return isinstance(prim, _MUTABLE_MAKERS(prims))
    if isinstance(prim, _OPERATORS):  # `l * 2` of a list, `a + b` of NumPy arrays
        return any(may_be_mutable(a, prims, depth + 1, resolve) for a in node.args)
    return False


def _returns_mutable(graph: FuncGraph, args, prims, depth: int, resolve) -> bool:
    """Whether user function `graph`, called on `args`, may return a mutable
    object (its parameters stand for `args`); unknown while it is parsed."""
    if graph.output is None or len(args) != len(graph.parameters):
        return True
    position = {id(p): k for k, p in enumerate(graph.parameters)}

    def inner(p, items=False):
        k = position.get(id(p))
        if k is not None and p.graph is graph:
            return args[k]
        return resolve(p, items) if resolve is not None else None

    return may_be_mutable(graph.output, prims, depth, inner)


def _control_may_be_mutable(node, k, prims, depth: int, resolve) -> bool:
    """Whether output `k` of control primitive `node` (its whole result where
    `k` is None) may be mutable: what a branch or a loop body gives it, or,
    for a loop, its value at entry. A graph's parameters stand for the
    values after its graph arguments (a loop's carried ones as at entry),
    its leading extra one for the item of a `for_each`."""
    prim, args = node.fn.value, node.args
    if not prim.k_slots:
        return True
    values = args[max(prim.graph_slots) + 1 :]
    loop = isinstance(prim, LoopPrimitive)
    if loop and (k is None or k >= len(values) or may_be_mutable(values[k], prims, depth, resolve)):
        return True
    for slot in prim.k_slots:
        graph = getattr(args[slot], "value", None)
        if not isinstance(graph, FuncGraph) or graph.output is None:
            return True
        out = graph.output
        maker = getattr(getattr(out, "fn", None), "value", None)
        if k is not None:
            if not isinstance(maker, prims.MakeTuple) or k >= len(out.args):
                return True
            out = out.args[k]
        extra = len(graph.parameters) - len(values)
        position = {id(p): j for j, p in enumerate(graph.parameters)}
        each = isinstance(prim, ForEach)

        def inner(p, items=False, graph=graph, extra=extra, position=position, each=each):
            j = position.get(id(p))
            if j is None or p.graph is not graph:
                return resolve(p, items) if resolve is not None else None
            if j >= extra:
                return values[j - extra]
            return ("items", args[0]) if each else None  # a `for`'s item (of a range: an int)

        if may_be_mutable(out, prims, depth, inner):
            return True
    return False


def _item_may_be_mutable(container, index, prims, depth: int, resolve) -> bool:
    items = _item_candidates(container, index, prims, resolve)
    if items is None:  # an item of an unknown container: as the container
        return may_be_mutable(container, prims, depth, resolve, items=True)
    return any(may_be_mutable(item, prims, depth, resolve) for item in items)


def items_may_be_mutable(container, prims) -> bool:
    """Whether an item of `container` may be changed in place (`may_be_mutable`)."""
    return _item_may_be_mutable(container, None, prims, 0, None)


def _item_candidates(container, index, prims, resolve, depth: int = 0) -> list | None:
    """The nodes item `index` of `container` may be (any item where `index`
    is None or not a constant), or None where the parser does not know
    them: the items of a list or tuple display, an item assigned, appended
    or inserted, the items of `l * n` and `l + k`."""
    if depth > 8:
        return None
    if isinstance(container, Parameter):
        found = resolve(container, True) if resolve is not None else None
        if found is None or isinstance(found, tuple):
            return None
        return _item_candidates(found, index, prims, resolve, depth + 1)
    if isinstance(container, Constant):
        value = container.value
        return [Constant(v) for v in value] if isinstance(value, (list, tuple)) else None
    prim = getattr(getattr(container, "fn", None), "value", None)
    args = getattr(container, "args", ())
    k = _key(index) if isinstance(_key(index), int) else None
    if isinstance(prim, (prims.MakeList, prims.MakeTuple)):
        return [args[k]] if k is not None and -len(args) <= k < len(args) else list(args)
    if isinstance(prim, prims.MakeDict):
        return list(args[1::2])
    parts: list = []
    if isinstance(prim, prims.SetItem):
        parts, new = [args[0]], [args[2]]
        if _key(args[1]) is not None and _key(index) is not None:
            if _key(args[1]) == _key(index):
                return [args[2]]
            new = []  # another item assigned
    elif isinstance(prim, (prims.AsSequence, prims.Copy)):  # the same items
        parts, new = [args[0]], []
    elif isinstance(prim, FuncGraph) and prim.output is not None and not prim.parameters:
        parts, new = [prim.output], []  # a comprehension's graph, `list(x)`'s
    elif isinstance(prim, (prims.ListAppend, prims.ListInsert)):
        parts, new = [args[0]], [args[-1]]
    elif isinstance(prim, (prims.ListExtend, *_OPERATORS)):  # `l + k`, `l * n`
        parts = [a for a in args if not (isinstance(a, Constant) and isinstance(a.value, int))]
        new = []
    else:
        return None
    found = list(new)
    for part in parts:
        items = _item_candidates(part, None, prims, resolve, depth + 1)
        if items is None:
            return None
        found += items
    return found


def _key(index):
    """A constant int or str index, else None."""
    value = index.value if isinstance(index, Constant) else None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _is_slice(index, prims) -> bool:
    if isinstance(index, Constant):
        return isinstance(index.value, slice)
    return isinstance(getattr(getattr(index, "fn", None), "value", None), prims.MakeSlice)


def _MUTABLE_MAKERS(prims) -> tuple:
    return (
        prims.MakeList,
        prims.MakeDict,
        prims.ListAppend,
        prims.ListExtend,
        prims.ListInsert,
        prims.ListDelete,
        prims.Copy,
        prims.MethodCall,
    )
