"""Guards: the globals and closure cells a parsed graph read, and their values.

The parser resolves a global or closure name to its value while it builds a
graph (a constant of the graph). Python reads the name each time the line
runs, so a graph is only right while every name it read still holds the
value it read (`x * scale` after `scale = 3.0` at module level). Each parsed
graph records its reads as guards (`FuncGraph.guards`): `(namespace, name,
value)` for a global or an attribute of a user module or plain object
(`cfg.scale`: its `__dict__` is the namespace; a Cell's attributes alike:
`self.training`), `(cell, None, value)` for a closure cell. An attribute
read is guarded along Python's look-up (`attribute_reads`): the object's own
`__dict__`, then each user class of its method resolution order up to the
one holding the name, a class standing for its `__dict__` and a namespace
without the name recording it missing; so `Config.eps = 5.0`, `self.eps`
set on the class or on the object, an inherited value set on a base class,
a method or staticmethod replaced on the class (monkeypatching) are all
seen. A graph is
stale when a guard of it, or of any graph it reaches (the helpers it calls),
fails; the parse cache then parses the function again, and a gradient or
compiled function transforms again before its next call (`grad.CompiledGraph`).
Checks compare identities, so a call pays one dictionary look-up per name.

A NumPy array, list, dict or set read so is a constant of the program, but
Python sees its contents when the line runs: a guard of one also keeps a
snapshot of them (`(namespace, name, value, snapshot)`: an array's bytes; a
container's items, nested, each kept by identity, a number or string by
value; None for any other value), and the graph is stale once the value was
changed in place (`W[0, 0] = 10.0`, `CFG["lr"] = 0.1`, `ks.append(k)` between
two calls). Each call checks the items by identity: about 1 us for a
small dict of lists, 15 us for a list of a thousand floats. An array's
bytes are read at each call (Python reads the array then); a program
compiled with `kt.jit` is traced again (JAX's `jit` would keep the value of its trace).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import math
import operator
import types

import numpy as np

from k_transform.context import TRANSFORM
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import FuncGraph
from k_transform.ir.primitive import Primitive

_MISSING = object()
BUILDING = ("building",)  # `FuncGraph.guards` while the parser builds the graph


class Recorder:
    """The guards one parsed function collects (its nested defs included)."""

    def __init__(self):
        self.reads: dict[tuple[int, str | None], tuple] = {}

    def read_global(self, namespace: dict, name: str, value) -> None:
        if (id(namespace), name) not in self.reads:
            self.reads[id(namespace), name] = (namespace, name, value, _snapshot(value))

    def read_attribute(self, owner, name: str) -> None:
        for namespace, value in attribute_reads(owner, name):
            self.read_global(namespace, name, value)

    def read_function(self, fn) -> None:
        """What the parsed function's own object holds that its graph takes:
        its defaults (`def f(x, s=SCALES)`, the list changed in place, or
        `f.__defaults__` replaced), and for the function written for a
        `functools.partial` (`callables.partial_function`) the partial's
        function, arguments and keywords (`p.keywords["t"] = 2.0`)."""
        for attr in ("__defaults__", "__kwdefaults__"):
            self.read_global(fn, attr, getattr(fn, attr))
        partial = fn.__dict__.get("__kt_partial__")
        if partial is not None:
            self.read_global(fn.__dict__, "__kt_partial__", partial)

    def read_missing(self, owner, name: str) -> None:
        """A look-up `owner.name` that failed (`hasattr(cfg, "lr")` False,
        `getattr(cfg, "lr", 0.1)` the default): the graph holds while the
        name stays absent from the namespaces it consulted."""
        for namespace in attribute_misses(owner, name):
            self.read_global(namespace, name, _MISSING)

    def read_cell(self, cell, value) -> None:
        if (id(cell), None) not in self.reads:
            self.reads[id(cell), None] = (cell, None, value, _snapshot(value))

    def guards(self) -> tuple:
        return tuple(self.reads.values())


# Modules whose attributes a program reads but never sees rebound.
_LIBRARIES = ("jax", "jaxlib", "numpy", "math", "k_transform", "builtins", "functools", "operator")


def _is_library(value) -> bool:
    """A module or class of a library (never rebound while a program runs)."""
    name = value.__name__ if isinstance(value, types.ModuleType) else value.__module__
    name = name if isinstance(name, str) else ""
    return any(name == root or name.startswith(root + ".") for root in _LIBRARIES)


def _is_data_descriptor(value) -> bool:
    kind = type(value)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def attribute_reads(owner, name: str) -> list[tuple[object, object]]:
    """What Python's look-up of `owner.name` consults, as `(namespace,
    value)` pairs, `value` being `_MISSING` where the namespace lacks the
    name: the `__dict__` of `owner` (a user module, a plain object, a Cell),
    unless a data descriptor of its class (a property) takes precedence;
    then, when the name is not there, the user classes of its method
    resolution order up to the one that holds it (`owner`'s own for a class;
    a class stands for its `__dict__`, which `_current` reads), and for a
    `__slots__` field the object itself (its value, read by `getattr`). Empty for a
    library module, a Primitive or a graph, and where no namespace holds the
    name (a value a `__getattr__` makes); a library class is not guarded."""
    if isinstance(owner, (Primitive, FuncGraph)):
        return []
    if isinstance(owner, types.ModuleType) and _is_library(owner):
        return []
    is_class = isinstance(owner, type)
    mro = owner.__mro__ if is_class else type(owner).__mro__
    found = next((k for k, cls in enumerate(mro) if name in cls.__dict__), None)
    reads: list[tuple[object, object]] = []
    own = None if is_class else getattr(owner, "__dict__", None)
    descriptor = found is not None and _is_data_descriptor(mro[found].__dict__[name])
    if isinstance(own, dict) and not descriptor:  # a property wins over the object's own
        if name in own:
            return [(own, own[name])]
        reads.append((own, _MISSING))
    if found is None:
        return []
    reads += [(cls, _MISSING) for cls in mro[:found] if not _is_library(cls)]
    if not _is_library(mro[found]):
        entry = mro[found].__dict__[name]
        reads.append((mro[found], entry))
        if not is_class and type(entry) is types.MemberDescriptorType:  # a `__slots__` field
            reads.append((owner, getattr(owner, name)))  # read by `getattr` (`_current`)
    return reads


def attribute_misses(owner, name: str) -> list[object]:
    """The namespaces a failed look-up of `owner.name` consulted, which a
    later assignment of the name would fill (`attribute_reads`' namespaces:
    the object's `__dict__`, its user classes; none of a library's)."""
    if isinstance(owner, (Primitive, FuncGraph)) or _is_library(owner):
        return []
    is_class = isinstance(owner, type)
    own = None if is_class else getattr(owner, "__dict__", None)
    mro = owner.__mro__ if is_class else type(owner).__mro__
    classes = [cls for cls in mro if not _is_library(cls)]  # a class stands for its `__dict__`
    return [own, *classes] if isinstance(own, dict) else classes


def property_getter(owner, name: str):
    """The getter of a user-written property `owner.name` reads (an object's,
    not a class's), or None: Python runs it each time the line runs, so the
    parser calls it rather than reading the attribute (`self.w2` returning
    `self.w * 2` of a Parameter then has its gradient)."""
    if isinstance(owner, type):
        return None
    found = next((cls.__dict__[name] for cls in type(owner).__mro__ if name in cls.__dict__), None)
    getter = found.fget if type(found) is property else None
    return getter if is_user_function(getter) else None


def uncached_property(owner, name: str) -> bool:
    """Whether `owner.name` is a `functools.cached_property` not computed yet
    for the object `owner`: Python runs its getter where the line first runs
    (and keeps the value in the object's `__dict__`), so the parser does not
    read it (which would run the getter while transforming)."""
    if isinstance(owner, type):
        return False
    own = getattr(owner, "__dict__", None)
    found = next((cls.__dict__[name] for cls in type(owner).__mro__ if name in cls.__dict__), None)
    return type(found) is functools.cached_property and isinstance(own, dict) and name not in own


def _current(container, name):
    if name is None:
        try:
            return container.cell_contents
        except ValueError:  # emptied
            return _MISSING
    if type(container) is dict:  # globals, an object's `__dict__`
        return container.get(name, _MISSING)
    if isinstance(container, type):  # a class: its namespace (a fresh proxy per read)
        return container.__dict__.get(name, _MISSING)
    return getattr(container, name, _MISSING)  # a function's `__defaults__`, a slot


def guards_of(graph: FuncGraph) -> tuple:
    """The guards of `graph` and of every graph it reaches (cached on `graph`
    once every graph it reaches is built)."""
    cached = getattr(graph, "_all_guards", None)
    if cached is not None:
        return cached
    found: dict[tuple[int, str | None], tuple] = {}
    complete = True
    for g in graph.reachable():
        if g.guards is BUILDING:
            complete = False  # still being parsed (recursion)
            continue
        for guard in g.guards or ():
            found.setdefault((id(guard[0]), guard[1]), guard)
    result = tuple(found.values())
    if complete:
        graph._all_guards = result
    return result


def _snapshot(value, depth: int = 0):
    """What the program took from `value` that can change in place: the
    shape, dtype and bytes of a NumPy array; the items of a list, dict or set
    (nested: `(index, snapshot)` for each item with its own); the function,
    arguments and keywords of a `functools.partial`. None for any
    other value (an immutable one, or one only its identity is kept of)."""
    kind = type(value)
    if kind is np.ndarray:
        return None if value.dtype.hasobject else (kind, value.shape, value.dtype, value.tobytes())
    if depth > _DEPTH:
        return None
    if kind is functools.partial:  # what a call of it passes (`p.keywords["t"] = 2.0`)
        return (kind, _snapshot(_partial_state(value), depth + 1))
    if kind not in _CONTAINERS:
        return None
    if kind is set:
        return (kind, frozenset(value))
    items = tuple(value.values()) if kind is dict else tuple(value)
    inner = tuple((i, _snapshot(v, depth + 1)) for i, v in enumerate(items))
    inner = tuple(entry for entry in inner if entry[1] is not None)
    if kind is tuple and not inner:
        return None  # immutable all through: its identity says it all
    return (kind, items, inner, tuple(value) if kind is dict else None)


def _partial_state(p: functools.partial) -> tuple:
    return (p.func, p.args, p.keywords)


def snapshot(value):
    """What `value` holds that can change in place (`_snapshot`), for `unchanged`."""
    return _snapshot(value)


def unchanged(value, snap) -> bool:
    """Whether `value` still holds what `snapshot` recorded of it."""
    return snap is None or not _changed(value, snap)


_CONTAINERS = (list, dict, set, tuple)
_DEPTH = 16  # deeper than this (or a list holding itself), identities only
_ATOMS = (int, float, complex, bool, str, bytes)


def _same(now, then) -> bool:
    """Whether an item is the one recorded, or an equal number or string."""
    if now is then:
        return True
    if type(now) is not type(then) or type(now) not in _ATOMS or now != then:
        return False
    # -0.0 == 0.0, yet `1 / x` tells them apart
    return type(now) is not float or math.copysign(1.0, now) == math.copysign(1.0, then)


def _changed(value, snapshot: tuple) -> bool:
    """Whether `value` no longer holds what `snapshot` recorded (an array's
    bytes compared, so that a NaN equals itself and -0.0 differs from 0.0;
    a container's items by identity first, the common case, then as equal
    numbers and strings)."""
    kind = snapshot[0]
    if type(value) is not kind:
        return True
    if kind is functools.partial:
        return _changed(_partial_state(value), snapshot[1])
    if kind is np.ndarray:
        _, shape, dtype, data = snapshot
        return value.shape != shape or value.dtype != dtype or value.tobytes() != data
    if kind is set:
        return value != snapshot[1]
    _, items, inner, keys = snapshot
    if len(value) != len(items):
        return True
    now = value.values() if kind is dict else value
    if not all(map(operator.is_, now, items)) and not all(map(_same, now, items)):
        return True
    if keys is not None and not all(map(operator.is_, value, keys)):
        if not all(map(_same, value, keys)):
            return True
    if inner:
        now = items if kind is dict else value  # the same items (checked above)
        return any(_changed(now[i], snap) for i, snap in inner)
    return False


def _fails(container, name, value, snapshot) -> bool:
    if _current(container, name) is not value:
        return True
    return snapshot is not None and _changed(value, snapshot)


def stale(guards: tuple) -> bool:
    """Whether a name a guard read no longer holds the value read then (or
    an array read then was changed in place)."""
    for container, name, value, snapshot in guards:  # a loop: this runs at every call
        if _current(container, name) is not value:
            return True
        if snapshot is not None and _changed(value, snapshot):
            return True
    return False


def stale_names(guards: tuple) -> list[str]:
    """The names of the failed guards (for messages)."""
    return [g[1] or "<closure cell>" for g in guards if _fails(*g)]


# -- names a call may rebind ---------------------------------------------------
# A function run as Python (`python_code`) may rebind a global (`global
# SCALE; SCALE += 1`) or a closure cell (`nonlocal`) while the program runs:
# a graph that read that name holds the value read at transform time, where
# Python reads the name again after the call. `rebinds` lists the names a
# function's code (its nested code, and the user functions it names, in
# turn) stores to, so that the parser refuses a function reading one of them
# (`FunctionParser.check_rebinds`): it then runs as Python, exact.


def _stores(code: types.CodeType) -> tuple[set[str], set[str], set[str]]:
    """The global and cell names `code` (and the code nested in it) stores
    to or deletes, and the global names it loads (cached for the transform)."""
    cache = TRANSFORM.cache("guards.stores")
    entry = cache.get(id(code))
    if entry is None or entry[0] is not code:
        entry = cache[id(code)] = (code, *_read_stores(code))
    return entry[1:]


def _read_stores(code: types.CodeType) -> tuple[set[str], set[str], set[str]]:
    stores: set[str] = set()
    cells: set[str] = set()
    loads: set[str] = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            stores.add(ins.argval)
        elif ins.opname in ("STORE_DEREF", "DELETE_DEREF"):
            cells.add(ins.argval)
        elif ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            loads.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _stores(const)
            stores |= inner[0]
            loads |= inner[2]
            cells |= inner[1] & set(code.co_freevars)  # the enclosing function's cells
    return stores, cells, loads


def rebinds(fn) -> dict[tuple[int, str | None], str]:
    """The names `fn` may rebind when it runs: `(id(namespace), name)` for a
    global, `(id(cell), None)` for a closure cell, each with the name for
    messages; through the user functions it names, in turn."""
    return {(id(place), key): name for place, key, name in rebound_places(fn)}


def rebound_places(fn) -> list[tuple[object, str | None, str]]:
    """The places behind `rebinds(fn)`: `(namespace, name, name)` for a
    global, `(cell, None, name)` for a closure cell."""
    found: dict[tuple[int, str | None], tuple[object, str | None, str]] = {}
    seen: set[int] = set()
    todo = [fn]
    while todo:
        fn = todo.pop()
        if id(fn) in seen or not is_user_function(fn):
            continue
        code = fn.__code__
        seen.add(id(fn))
        stores, cells, loads = _stores(code)
        namespace = fn.__globals__
        for name in stores:
            found[id(namespace), name] = (namespace, name, name)
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            if name in cells:
                found[id(cell), None] = (cell, None, name)
            with contextlib.suppress(ValueError):  # an empty cell
                todo.append(cell.cell_contents)
        todo.extend(namespace[name] for name in loads if name in namespace)
    return list(found.values())


def rebound_reads(graph: FuncGraph, recorder: Recorder, rebound: dict) -> list[str]:
    """The names `graph` (its own reads in `recorder`, while it is built, and
    those of the graphs it reaches) read that `rebound` (from `rebinds`) says
    a call may rebind."""
    read = set(recorder.reads) | {(id(g[0]), g[1]) for g in guards_of(graph)}
    return [name for key, name in rebound.items() if key in read]
