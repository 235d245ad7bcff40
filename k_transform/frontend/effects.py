"""Calls that may change their arguments in place: modelled, or refused.

The IR has no effects on objects: a value is what its node computes. The
parser models the in-place changes it understands as a new value rebound to
the variable (`k_transform.frontend.mutation`): `a[i] = v`, the list methods
`append`, `extend`, `insert`, `pop`, and a plain dict's `update(...)` and
`|=` with literal keys (item assignments, one per key). Any other call that
may write into one of its arguments, or into its receiver, would run in the
generated code on a value no later node depends on, or be dropped as dead
code: a silently wrong value and gradient. The parser refuses each one
(`parser.unsupported`, naming the call and the user's line; a plain function
then runs as Python, under JAX's tracer, where the change is Python's own):

- a method known to change its receiver (`MUTATING_METHODS`: the in-place
  methods of lists, dicts, sets, deques and numpy arrays) on a local name the
  parser does not model, an item, an attribute, or an object of the program;
- a numpy function that writes into an argument (`IN_PLACE_FUNCTIONS`:
  `np.fill_diagonal`, `np.copyto`, `np.put`, ..., `np.add.at`), or any
  library call given `out=`;
- a method of an object of a user class made by the program (`acc = Acc()`)
  whose source writes to `self` (`self.total = ...`, `self.items.append(v)`,
  `self.w[i] = v`, a call of another such method), and a call of a user
  function run as Python that writes to one of its parameters
  (`mutated_parameters`);
- a method call of a program value whose result is unused (`acc.add(x)`): it
  can act only by changing its receiver or the host.
"""

from __future__ import annotations

import collections
import inspect
import operator
import types

import gast
import numpy as np

from k_transform import runtime as rt
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.source import Source

# Methods the parser makes functional on a local variable (`mutation.py`).
LIST_MUTATORS = ("append", "extend", "insert", "pop")
# Methods of builtin containers and numpy arrays that change their receiver.
MUTATING_METHODS = (
    "remove clear reverse sort fill resize put itemset setfield partition setflags byteswap "
    "update setdefault popitem add discard intersection_update difference_update "
    "symmetric_difference_update appendleft extendleft popleft rotate"
).split()
# (`x.sort()` is not refused by name: a JAX array's returns a new array, see
# `CallBuilder.sort_call`, which refuses a list's.)
REFUSED_MUTATORS = tuple(m for m in MUTATING_METHODS if m not in (*LIST_MUTATORS, "sort"))
MUTATORS = LIST_MUTATORS + REFUSED_MUTATORS
# The list and array methods that change their receiver with no functional
# model: refused on an item or attribute whatever it is (`calls.py`), and
# before parsing on a variable (`mutation.py`).
IN_PLACE_METHODS = ("remove", "clear", "reverse", "sort", "fill", "resize", "put", "itemset")
_MUTABLE_TYPES = (list, dict, set, bytearray, collections.deque, np.ndarray)

_IN_PLACE_OPERATORS = (
    "add and concat floordiv lshift matmul mod mul or pow rshift sub truediv xor".split()
)
IN_PLACE_FUNCTIONS = (
    np.fill_diagonal,
    np.copyto,
    np.put,
    np.place,
    np.putmask,
    np.put_along_axis,
    np.random.shuffle,
    operator.setitem,
    operator.delitem,
    # `operator.iadd(l, m)` and the other in-place operators extend a list,
    # update a dict or set, or write a NumPy array, as `l += m` does
    *(getattr(operator, "i" + op) for op in _IN_PLACE_OPERATORS),
)


# Modules whose functions change no argument but those named above: any
# other library function given a host object may change it (`heapq.heappush`,
# `bisect.insort`), and the parser reads host objects while it transforms.
_PURE_MODULES = ("jax", "jaxlib", "numpy", "scipy", "math", "builtins", "functools", "operator")


def library_write(fn, kwnames, args=()) -> str | None:
    """How a call of library function `fn` (given the parser's `args`)
    writes into an argument or a host object, or None."""
    if any(fn is f for f in IN_PLACE_FUNCTIONS):
        return "writes into its first argument"
    host = [a.value for a in args if type(a).__name__ == "Constant" and _host_object(a.value)]
    if fn is setattr or fn is delattr:  # as `obj.attr = v`, on whatever object it is given
        what = f"the host object {type(host[0]).__name__}" if host else "an attribute of the object"
        return f"changes {what} it is given"
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "")
    if host and not (module or "").lstrip("_").startswith(_PURE_MODULES + ("k_transform",)):
        return f"may change the host object ({type(host[0]).__name__}) it is given"
    if isinstance(getattr(fn, "__self__", None), np.ufunc) and fn.__name__ == "at":
        return "writes into its first argument"
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, _MUTABLE_TYPES) and getattr(fn, "__name__", "") in (
        *MUTATING_METHODS,
        *LIST_MUTATORS,  # (modelled on a local variable only: here a host object's)
    ):
        return f"changes the {type(owner).__name__} it is called on"
    module = getattr(fn, "__module__", None) or ""
    if "out" in kwnames and not module.startswith(("jax", "k_transform")):
        return "writes into its `out=` argument"
    return None


def _host_object(value) -> bool:
    """Whether `value`, a constant of the program (a global, a closure's
    value, an attribute of one), is an object a call could change: a
    mutable container, a NumPy array, a class or an instance of a user
    class."""
    if isinstance(value, _MUTABLE_TYPES):
        return True
    kind = value if isinstance(value, type) else type(value)
    module = getattr(kind, "__module__", "") or ""
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, types.ModuleType)
        and not (callable(value) and not isinstance(value, type))
        and not module.startswith(_PURE_MODULES + ("k_transform",))
    )


def is_plain_dict(node, prims) -> bool:
    """Whether the parser's `node` surely is a plain `dict` (a display,
    `dict(...)`, `{**a}`, one `update`d or `|=`-merged since, item-assigned since)."""
    while True:
        value = getattr(getattr(node, "fn", None), "value", None)
        if isinstance(value, prims.SetItem):
            node = node.args[0]
            continue
        if isinstance(value, prims.MakeDict):
            return True
        return isinstance(value, prims.LibraryCall) and any(value.fn is f for f in _DICT_MAKERS)


# Functions whose result is a new plain dict (`frontend.calls`, `expr_Dict`).
_DICT_MAKERS = (dict, rt.dict_display, rt.dict_updated, rt.dict_ior)


def mutable_builtin(node, prims) -> bool:
    """Whether `node` surely is a builtin mutable container or a numpy array
    (a display, `set()`, `collections.deque(...)`, a constant one)."""
    if not hasattr(node, "fn"):
        return isinstance(getattr(node, "value", None), _MUTABLE_TYPES)
    value = getattr(getattr(node, "fn", None), "value", None)
    if isinstance(value, (prims.MakeList, prims.ListAppend, prims.ListExtend, prims.ListInsert)):
        return True
    if isinstance(value, prims.LibraryCall) and isinstance(value.fn, type):
        return issubclass(value.fn, _MUTABLE_TYPES)
    return is_plain_dict(node, prims)


def user_class_of(node, prims):
    """The user class whose instance the program made at `node` (`Acc()`)."""
    value = getattr(getattr(node, "fn", None), "value", None)
    if isinstance(value, prims.LibraryCall) and isinstance(value.fn, type):
        cls = value.fn
        if cls.__module__ != "builtins" and not cls.__module__.startswith(("jax", "numpy")):
            return cls
    return None


def method_writes_self(cls, name: str) -> str | None:
    """Where method `name` of user class `cls` writes to `self` (see `mutated_parameters`)."""
    method = inspect.getattr_static(cls, name, None)
    if not isinstance(method, types.FunctionType):
        return None
    return _writes(method, first_only=True)


def mutated_parameters(fn) -> str | None:
    """Where user function `fn` writes into one of its parameters: an
    attribute or item store under it (`p.a = v`, `p[i] = v`, `p.a[i] += v`,
    `del p[k]`), a mutating method of it or of its parts (`p.items.append(v)`),
    `setattr(p, ...)`, or (for `self`) a call of a method that does. A
    description of the first such write, with its line, or None."""
    return _writes(fn, first_only=False)


def _writes(fn, first_only: bool) -> str | None:
    try:
        tree, first_line = _tree(fn)
    except (KTransformError, OSError, TypeError, SyntaxError):
        return None
    params = [a.id for a in tree.args.args + tree.args.posonlyargs + tree.args.kwonlyargs]
    params = params[:1] if first_only else params
    if not params:
        return None
    for node in _own_nodes(tree.body):
        root = _written_root(node)
        if root is not None and root.id in params:
            return _located(node, fn, first_line)
        if first_only and _calls_writing_self(node, params[0], fn):
            return _located(node, fn, first_line)
    return None


def _tree(fn):
    """`fn`'s parsed source and first line, cached for the transform."""
    trees = TRANSFORM.cache("effects.trees")
    entry = trees.get(id(fn))
    if entry is None or entry[0] is not fn:
        source = Source(fn)
        entry = trees[id(fn)] = (fn, source.tree, source.first_line)
    return entry[1], entry[2]


def _located(node, fn, first_line: int) -> str:
    text = gast.unparse(node).strip().splitlines()[0]
    return f"`{text}` ({fn.__code__.co_filename}, line {node.lineno + first_line - 1})"


def _written_root(node) -> gast.Name | None:
    """The variable under the object `node` writes, if it writes into one."""
    targets = []
    if isinstance(node, (gast.Assign, gast.Delete)):
        targets = node.targets
    elif isinstance(node, (gast.AugAssign, gast.AnnAssign)):
        targets = [node.target]
    for t in targets:
        if isinstance(t, (gast.Attribute, gast.Subscript)):
            return _root(t)
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute):
        if node.func.attr in MUTATING_METHODS + list(LIST_MUTATORS):
            return _root(node.func.value)
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name):
        if node.func.id in ("setattr", "delattr") and node.args:
            return _root(node.args[0])
    return None


def _root(e) -> gast.Name | None:
    while isinstance(e, (gast.Attribute, gast.Subscript)):
        e = e.value
    return e if isinstance(e, gast.Name) else None


def _calls_writing_self(node, self_name: str, fn) -> bool:
    """`self.helper(...)` where `helper` writes to `self` (one level deep)."""
    if not (isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute)):
        return False
    owner = node.func.value
    if not (isinstance(owner, gast.Name) and owner.id == self_name):
        return False
    cls = _defining_class(fn)
    other = inspect.getattr_static(cls, node.func.attr, None) if cls is not None else None
    return (
        isinstance(other, types.FunctionType)
        and other is not fn
        and (_writes(other, first_only=True) is not None)
    )


def _defining_class(fn):
    qual = fn.__qualname__.split(".")
    if len(qual) < 2:
        return None
    return fn.__globals__.get(qual[-2])


def _own_nodes(body):
    """The nodes of `body`, not descending into nested defs, lambdas and classes."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            stack.extend(gast.iter_child_nodes(node))


# Python's in-place operators: `a op= v` changes `a` itself where its type has one.
_IN_PLACE_OPERATORS = tuple(
    f"__i{op}__"
    for op in "add sub mul matmul truediv floordiv mod pow lshift rshift and xor or".split()
)


def changed_in_place(value) -> bool:
    """Whether an augmented assignment may change `value` itself (a list,
    dict, set or NumPy array; not a JAX array, a number or a tuple)."""
    return any(hasattr(type(value), name) for name in _IN_PLACE_OPERATORS)


def note_change(graph, name: str, entry: tuple) -> None:
    """Note in `graph.changed_parameters` that the function changes its
    parameter `name` in place, `entry` `(condition, where, function)`: the
    object itself where it is mutable (`"mutable"`), or an item of it where
    that is (`"items"`: `a = p[0]; a += v`), or both."""
    old = graph.changed_parameters.get(name)
    if old is None:
        graph.changed_parameters[name] = entry
    elif old[0] != entry[0] and "not None" not in (old[0], entry[0]):
        graph.changed_parameters[name] = ("mutable or items", *old[1:])


def changed_by(condition: str, value) -> bool:
    """Whether a change of a parameter under `condition` (`note_change`)
    changes the caller's object `value`."""
    if condition == "not None":
        return value is not None
    own = condition != "items" and changed_in_place(value)
    return own or (condition != "mutable" and _item_changed_in_place(value))


def _item_changed_in_place(value) -> bool:
    """Whether an item of `value` may be an object `a op= v` changes (a row
    of a matrix, a list in a list; not a number of a vector: NumPy's item
    is a copy)."""
    if isinstance(value, np.ndarray):
        return value.ndim > 1
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(changed_in_place(v) for v in value)
    return not type(value).__module__.startswith("jax")


def changed_arguments(graph, args: tuple) -> str | None:
    """Why calling `graph` on the caller's `args` would change one of them
    where the caller could not see it (`FuncGraph.changed_parameters`: `l *=
    2` on a list parameter, or in a helper given it), or None. Python would
    change the caller's object; the program computes on its own copy."""
    for k, name in enumerate(graph.param_names or ()):
        if name not in graph.changed_parameters or k >= len(args):
            continue
        condition, where, function = graph.changed_parameters[name]
        arg = args[k]
        if not changed_by(condition, arg):
            continue
        return (
            f"{function}(...) changes its argument {name!r} in place, {where}; given a "
            f"{type(arg).__name__}, Python would change the caller's object, which k_transform "
            "cannot show the caller (pass a JAX array or a copy, or return the new value)"
        )
    return None
