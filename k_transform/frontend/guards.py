"""Guards: the globals and closure cells a parsed graph read, and their values.

The parser resolves a global or closure name to its value while it builds a
graph (a constant of the graph). Python reads the name each time the line
runs, so a graph is only right while every name it read still holds the
value it read (`x * scale` after `scale = 3.0` at module level). Each parsed
graph records its reads as guards (`FuncGraph.guards`): `(namespace, name,
value)` for a global or an attribute of a user module or plain object
(`cfg.scale`: its `__dict__` is the namespace; a Cell's attributes alike:
`self.training`), `(cell, None, value)` for a
closure cell. A graph is
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

    def read_cell(self, cell, value) -> None:
        if (id(cell), None) not in self.reads:
            self.reads[id(cell), None] = (cell, None, value, _snapshot(value))

    def guards(self) -> tuple:
        return tuple(self.reads.values())


# Modules whose attributes a program reads but never sees rebound.
_LIBRARIES = ("jax", "jaxlib", "numpy", "math", "k_transform", "builtins", "functools", "operator")


def attribute_namespace(owner) -> dict | None:
    """Where `owner.name` lives when a rebinding of it must be seen: the
    `__dict__` of a user module, of a plain object (a config object, a
    namespace) or of a Cell (`self.training`, which `set_train` rebinds; a
    sub-Cell or Parameter replaced; its Parameters' values change in place,
    read when the program runs). Not a library module."""
    if isinstance(owner, (Primitive, FuncGraph, type)):
        return None
    if isinstance(owner, types.ModuleType):
        name = owner.__name__
        if any(name == root or name.startswith(root + ".") for root in _LIBRARIES):
            return None
    namespace = getattr(owner, "__dict__", None)
    return namespace if isinstance(namespace, dict) else None


def _current(container, name):
    if name is None:
        try:
            return container.cell_contents
        except ValueError:  # emptied
            return _MISSING
    return container.get(name, _MISSING)


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
    (nested: `(index, snapshot)` for each item with its own). None for any
    other value (an immutable one, or one only its identity is kept of)."""
    kind = type(value)
    if kind is np.ndarray:
        return None if value.dtype.hasobject else (kind, value.shape, value.dtype, value.tobytes())
    if depth > _DEPTH or kind not in _CONTAINERS:
        return None
    if kind is set:
        return (kind, frozenset(value))
    items = tuple(value.values()) if kind is dict else tuple(value)
    inner = tuple((i, _snapshot(v, depth + 1)) for i, v in enumerate(items))
    inner = tuple(entry for entry in inner if entry[1] is not None)
    if kind is tuple and not inner:
        return None  # immutable all through: its identity says it all
    return (kind, items, inner, tuple(value) if kind is dict else None)


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
    found: dict[tuple[int, str | None], str] = {}
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
            found[id(namespace), name] = name
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            if name in cells:
                found[id(cell), None] = name
            with contextlib.suppress(ValueError):  # an empty cell
                todo.append(cell.cell_contents)
        todo.extend(namespace[name] for name in loads if name in namespace)
    return found


def rebound_reads(graph: FuncGraph, recorder: Recorder, rebound: dict) -> list[str]:
    """The names `graph` (its own reads in `recorder`, while it is built, and
    those of the graphs it reaches) read that `rebound` (from `rebinds`) says
    a call may rebind."""
    read = set(recorder.reads) | {(id(g[0]), g[1]) for g in guards_of(graph)}
    return [name for key, name in rebound.items() if key in read]
