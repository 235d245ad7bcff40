"""Functions made under a trace, as arrays and a skeleton: closure conversion at run time.

A bprop closure made while JAX traces a `lax.cond` branch or a loop body
holds arrays of that trace; to leave the trace (as an output of the cond, as
a loop's per-iteration residuals) it is taken apart: `split(value)` gives the
arrays it holds (its residuals, what JAX's partial evaluation would give) and
a skeleton, and `join(skeleton, arrays)` makes the same functions over other
arrays: the code and every value that is no array stay as they were; closure
cells shared by several functions stay shared.

What `split` sees into: functions' closure cells and defaults, tuples, lists,
dicts, registered pytrees, `functools.partial`, bound methods, and the run
time's own values (classes marked `__kt_parts__`, taken apart by their
`__slots__`: the stacks of `runtime.stack`). Anything else
that is no plain constant is `Opaque`: the caller keeps its other way (for
`lax.cond`, recomputing the branch), so an array hidden in an object is
never carried out of its trace by reference.
"""

from __future__ import annotations

import copy
import functools
import types

import jax
import numpy as np

from k_transform.protocol import kt_attribute
from k_transform.runtime.values import UNDEFINED, is_tracer, pytree_node, rebuild

_CONSTANT = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type,
    range,
    slice,
    types.ModuleType,
    types.BuiltinFunctionType,
    np.ndarray,
    np.generic,
    np.dtype,
    type(Ellipsis),
    type(UNDEFINED),
)


class Opaque(Exception):
    """`split` met a value it cannot see into (its type is the message)."""


def split(value) -> tuple[list, object]:
    """`(arrays, skeleton)`: the JAX arrays (and tracers) `value` holds, and
    what `join` needs to make `value` again over other arrays."""
    return _Splitter().part(value)


def join(skeleton, arrays):
    """`value` of `split(value)`, over `arrays` in place of the ones it held."""
    return _Joiner(list(arrays)).part(skeleton)


class _Splitter:
    def __init__(self):
        self.arrays: list = []
        self.array_ids: dict[int, int] = {}
        self.cells: dict[int, int] = {}  # id(cell) -> its index in `cell_list`
        self.cell_list: list = []
        self.seen: dict[int, object] = {}  # id(container) -> its skeleton (shared once)
        self.keep: list = []  # the containers seen, alive while their ids are keys

    def part(self, value):
        skeleton = self.node(value)
        return self.arrays, ("root", skeleton, self.cell_list)

    def node(self, v):
        if isinstance(v, jax.Array) or is_tracer(v):
            if id(v) not in self.array_ids:  # each array once
                self.array_ids[id(v)] = len(self.arrays)
                self.arrays.append(v)
            return ("array", self.array_ids[id(v)])
        if isinstance(v, _CONSTANT) or kt_attribute(v, "__kt_constant__", False):
            return ("const", v)
        key = id(v)
        if key not in self.seen:  # each container once: closures' envs share sub-envs
            self.keep.append(v)
            self.seen[key] = self.container(v)
        return self.seen[key]

    def container(self, v):
        if isinstance(v, types.FunctionType):
            return self.function(v)
        if type(v) in (tuple, list):
            return ("seq", v, [self.node(x) for x in v])
        if type(v) is dict:
            return ("dict", {k: self.node(x) for k, x in v.items()})
        if isinstance(v, functools.partial):
            kw = {k: self.node(x) for k, x in v.keywords.items()}
            return ("partial", self.node(v.func), [self.node(a) for a in v.args], kw)
        if isinstance(v, types.MethodType):
            return ("method", self.node(v.__func__), self.node(v.__self__))
        if getattr(type(v), "__kt_parts__", False):
            slots = {s: self.node(getattr(v, s)) for s in type(v).__slots__}
            return ("slots", v, slots)
        node = pytree_node(v)
        if node is not None:
            return ("pytree", v, [self.node(c) for c in node[0]])
        if isinstance(v, jax.ShapeDtypeStruct):
            return ("const", v)
        raise Opaque(type(v).__name__)

    def function(self, f):
        if not f.__closure__ and not _holds_arrays(f.__defaults__, f.__kwdefaults__):
            return ("const", f)
        cells = [self.cell(c) for c in f.__closure__ or ()]
        defaults = self.node(f.__defaults__) if f.__defaults__ else None
        kwdefaults = self.node(f.__kwdefaults__) if f.__kwdefaults__ else None
        return ("function", f, cells, defaults, kwdefaults)

    def cell(self, c):
        key = id(c)
        if key not in self.cells:
            self.cells[key] = len(self.cell_list)
            self.cell_list.append(None)  # filled below (a cell may reach itself)
            try:
                contents = c.cell_contents
            except ValueError:  # an empty cell
                self.cell_list[self.cells[key]] = ("empty",)
            else:
                self.cell_list[self.cells[key]] = ("full", self.node(contents))
        return self.cells[key]


def _holds_arrays(*values) -> bool:
    return any(
        isinstance(leaf, jax.Array) or is_tracer(leaf)
        for v in values
        if v
        for leaf in jax.tree_util.tree_leaves(v)
    )


class _Joiner:
    def __init__(self, arrays):
        self.arrays = arrays
        self.cells: dict[int, types.CellType] = {}
        self.cell_list: list = []
        self.made: dict[int, object] = {}

    def part(self, skeleton):
        _, root, self.cell_list = skeleton
        return self.node(root)

    def node(self, s):
        kind = s[0]
        if kind == "array":
            return self.arrays[s[1]]
        if kind == "const":
            return s[1]
        key = id(s)
        if key not in self.made:  # a container shared in the value is shared in its copy
            self.made[key] = self.container(s)
        return self.made[key]

    def container(self, s):
        kind = s[0]
        if kind == "seq":
            return rebuild(s[1], [self.node(x) for x in s[2]])
        if kind == "dict":
            return {k: self.node(x) for k, x in s[1].items()}
        if kind == "partial":
            kw = {k: self.node(x) for k, x in s[3].items()}
            return functools.partial(self.node(s[1]), *[self.node(a) for a in s[2]], **kw)
        if kind == "method":
            return types.MethodType(self.node(s[1]), self.node(s[2]))
        if kind == "slots":
            out = copy.copy(s[1])
            for name, x in s[2].items():
                setattr(out, name, self.node(x))
            return out
        if kind == "pytree":
            return rebuild(s[1], [self.node(c) for c in s[2]])
        if kind == "function":
            return self.function(s)
        raise AssertionError(f"internal: unknown skeleton node {kind!r}")

    def function(self, s):
        _, f, cells, defaults, kwdefaults = s
        closure = tuple(self.cell(k) for k in cells) or None
        g = types.FunctionType(
            f.__code__,
            f.__globals__,
            f.__name__,
            self.node(defaults) if defaults is not None else None,
            closure,
        )
        g.__kwdefaults__ = self.node(kwdefaults) if kwdefaults is not None else None
        g.__qualname__, g.__module__ = f.__qualname__, f.__module__
        g.__dict__.update(f.__dict__)
        return g

    def cell(self, k: int) -> types.CellType:
        if k not in self.cells:
            self.cells[k] = cell = types.CellType()
            entry = self.cell_list[k]
            if entry[0] == "full":
                cell.cell_contents = self.node(entry[1])
        return self.cells[k]
