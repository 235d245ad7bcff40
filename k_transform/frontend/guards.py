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

A NumPy array read so is a constant of the program, but Python sees its
contents when the line runs: a guard of one also keeps a copy of its bytes
(`(namespace, name, value, snapshot)`; the snapshot None for any other
value), and the graph is stale once the array was changed in place
(`W[0, 0] = 10.0` between two calls). That check reads the array at each
call, as `jax.grad` converts it at each call; a program compiled with
`kt.jit` is traced again (JAX's `jit` would keep the value of its trace).
"""

from __future__ import annotations

import types

import numpy as np

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


def _snapshot(value) -> tuple | None:
    """The shape, dtype and bytes of a NumPy array (None for any other value,
    and for an array of Python objects)."""
    if type(value) is not np.ndarray or value.dtype.hasobject:
        return None
    return value.shape, value.dtype, value.tobytes()


def _changed(array: np.ndarray, snapshot: tuple) -> bool:
    """Whether `array` no longer holds what `snapshot` recorded (its bytes
    compared, so that a NaN equals itself and -0.0 differs from 0.0)."""
    shape, dtype, data = snapshot
    return array.shape != shape or array.dtype != dtype or array.tobytes() != data


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
