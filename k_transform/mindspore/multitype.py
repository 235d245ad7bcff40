"""MindSpore's `MultitypeFuncGraph`, `HyperMap` and `Map` (`mindspore.ops`, `C.*`).

`MultitypeFuncGraph(name)` is a function overloaded on the MindSpore types of
its arguments: `@f.register("Tensor", "Number")` adds an overload, and a
call runs the one whose type names match the arguments. The type names are
MindSpore's (`TYPE_PARENTS`): "Tensor" (arrays, Parameters), "Number" and
below it "Bool", "Int", "UInt", "Float" and the sized "Int64", "Float32",
...; "Tuple", "List", "Dictionary", "String", "None", "Function", "Slice",
"TypeType", "Ellipsis". A Python `int` is an "Int64", a `float` a
"Float64", as in MindSpore. Of the overloads that match, the most specific
wins (the fewest steps up `TYPE_PARENTS`; a tie: the first registered), so
`True` picks a "Bool" overload over a "Number" one, as MindSpore's graph
mode does. A MultitypeFuncGraph with one overload runs it whatever the
arguments (MindSpore's rule). No match: `ValueError`, as MindSpore's.

In parsed code a call is lowered (`__kt_lower__`) into a call of a small
Python function written for the overloads of that arity (`_dispatcher`):

    def add_2(a0, a1):
        k = which(a0, a1)          # OverloadIndex: the overload, by the types
        if k == 0:
            return f0(a0, a1)
        if k == 1:
            return f1(a0, a1)
        return k                   # not reached: `which` raises if none matches

`which` gives a Python int when the program runs (types are known then,
under a trace too), so the `if`s are Python's and only the chosen overload
runs. The overloads are parsed as user code: their gradients are
k_transform's, and a traced `if` inside one works as anywhere else. A
Python number given as an *argument* of a transformed function is traced
(DESIGN.md): a 0-d array of weak type, which `Tensor(2.0)` (no dtype) also
makes; MindSpore calls the first a "Number" and the second a "Tensor". Such
a value reads both ways (`type_readings`); where the two readings choose
different overloads, the call is a KTransformError saying so, never a
guess. Number literals and attributes are Python values: "Number".

`HyperMap(fn)(seq, ...)` / `HyperMap()(fn, seq, ...)` apply `fn` to the
items of the sequences, recursively through nested tuples and lists (a list
stays a list); an argument list whose first item is not a tuple or list is
a leaf, `fn(*items)`. `Map` maps one level. In parsed code both are lowered
into a call of a Python function written for `fn` (`_map_model`), with
`fn` one of its globals so the parser lowers each leaf call as the call of
`fn` it is. `F.partial(fn, *bound)` / `P.Partial()(fn, *bound)` given to
them, with bound values known only when the program runs, passes `bound` as
leading arguments of every leaf call.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import types

import jax
import numpy as np

from k_transform.bprop_registry.helpers import zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError, KTransformRuntimeError, KTransformValueError
from k_transform.ir.nodes import Apply, Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.protocol import kt_attribute

# -- MindSpore's type names ---------------------------------------------------
_SIZED = {
    "Int": ("Int8", "Int16", "Int32", "Int64"),
    "UInt": ("UInt8", "UInt16", "UInt32", "UInt64"),
    "Float": ("Float16", "Float32", "Float64", "BFloat16"),
    "Complex": ("Complex64", "Complex128"),
}
# Each type name and the name it is a kind of (None: a root).
TYPE_PARENTS: dict[str, str | None] = {
    "Tensor": None,
    "Number": None,
    "Bool": "Number",
    **{family: "Number" for family in _SIZED},
    **{sized: family for family, names in _SIZED.items() for sized in names},
    "Tuple": None,
    "List": None,
    "Dictionary": None,
    "String": None,
    "None": None,
    "Function": None,
    "Slice": None,
    "TypeType": None,
    "Ellipsis": None,
}
# MindSpore's names for values k_transform does not have.
NO_SUCH_VALUES = (
    "RowTensor COOTensor CSRTensor MapTensor UMonad IOMonad RefKey EnvType Problem External "
    "TypeAnything Keyword"
).split()


def check_type_name(name) -> str:
    """`name` if it is a type name `register` accepts; else MindSpore's error."""
    if not isinstance(name, str):
        raise TypeError(
            f"For 'MultitypeFuncGraph', register takes MindSpore type names (str), got {name!r}"
        )
    if name in NO_SUCH_VALUES:
        raise KTransformError(
            f"MultitypeFuncGraph.register({name!r}): k_transform has no {name} values"
        )
    if name not in TYPE_PARENTS:
        raise KTransformRuntimeError(
            f"Unsupported type name: {name}! (MultitypeFuncGraph.register takes "
            f"{', '.join(TYPE_PARENTS)})"
        )
    return name


def type_name(value) -> str:
    """The MindSpore type name of a value of the program (the most specific)."""
    if value is None:
        return "None"
    if isinstance(value, bool | np.bool_):
        return "Bool"
    if isinstance(value, int | float | complex):
        return next(name for kind, name in _SCALAR_NAMES.items() if isinstance(value, kind))
    if isinstance(value, np.generic):
        return _dtype_name(value.dtype)
    if isinstance(value, jax.Array | np.ndarray) or kt_attribute(value, "__kt_parameter__", False):
        return "Tensor"
    for kind, name in _PYTHON_KINDS:
        if isinstance(value, kind):
            return name
    return "Function" if callable(value) else type(value).__name__


def type_readings(value) -> tuple[str, ...]:
    """The type names `value` may have in MindSpore: one, except for a 0-d
    array of a Python scalar's weak type, which is what a Python number
    passed into a transformed function becomes (MindSpore: a "Number") and
    also what `Tensor(2.0)` makes (a "Tensor")."""
    first = type_name(value)
    if first == "Tensor" and isinstance(value, jax.Array) and value.ndim == 0:
        if jax.typeof(value).weak_type:
            return first, _dtype_name(value.dtype, weak=True)
    return (first,)


_SCALAR_NAMES = {int: "Int64", float: "Float64", complex: "Complex128"}


_PYTHON_KINDS = (
    (str, "String"),
    (tuple, "Tuple"),
    (list, "List"),
    (dict, "Dictionary"),
    (slice, "Slice"),
    (type, "TypeType"),
    (np.dtype, "TypeType"),
    (types.EllipsisType, "Ellipsis"),
)


def _dtype_name(dtype, weak: bool = False) -> str:
    """MindSpore's name of a scalar of `dtype` ("float32" -> "Float32"); `weak`:
    of the Python scalar the weak type stands for ("Float64", "Int64")."""
    name = np.dtype(dtype).name
    if name in ("bool", "bfloat16"):
        return {"bool": "Bool", "bfloat16": "BFloat16"}[name]
    kind = name.rstrip("0123456789")
    if weak:
        return {"int": "Int64", "float": "Float64", "complex": "Complex128"}.get(kind, "Number")
    family = "UInt" if kind == "uint" else kind.capitalize()
    return family + name[len(kind) :]


def distance(value_type: str, wanted: str) -> int | None:
    """Steps from `value_type` up TYPE_PARENTS to `wanted` (None: not a kind of it)."""
    steps, name = 0, value_type
    while name is not None:
        if name == wanted:
            return steps
        name, steps = TYPE_PARENTS.get(name), steps + 1
    return None


class on_instances:
    """`__kt_lower__` of a class of these objects: a call of an instance in
    parsed code is lowered by the method; a call of the class itself
    (`C.HyperMap(add)` in the program) makes the instance while parsing, its
    arguments being constants (`_construct`)."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, cls=None):
        if obj is None:
            return functools.partial(_construct, cls)
        return types.MethodType(self.fn, obj)


def _construct(cls, builder, args: list, kwargs: dict, e):
    nodes = [*args, *kwargs.values()]
    if not all(isinstance(a, Constant) for a in nodes):
        raise builder.fp.error(
            f"{cls.__name__}(...) in the program takes values known when it is parsed", e
        )
    made = cls(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
    return Constant(made, builder.debug(e), cls.__name__)


# -- MultitypeFuncGraph -----------------------------------------------------------
class MultitypeFuncGraph:
    """MindSpore's `ops.MultitypeFuncGraph(name, read_value=False)` (module docstring)."""

    def __init__(self, name: str, read_value: bool = False):
        self.name = name
        self.read_value = read_value  # MindSpore's pass-by-value flag: values are values here
        self.entries: list[tuple[tuple[str, ...], object]] = []

    def __repr__(self) -> str:
        return f"<MultitypeFuncGraph {self.name}>"

    def register(self, *type_names):
        """`@f.register("Tensor", "Number")`: add the decorated function as the
        overload for arguments of those types."""
        names = tuple(check_type_name(n) for n in type_names)

        def deco(fn):
            self.entries.append((names, fn))
            return fn

        return deco

    @property
    def __signature__(self) -> inspect.Signature | None:
        """`(a0, a1, ...)` when every overload takes as many arguments (so
        `grad(f)` of it knows its inputs), else None (`*args`)."""
        arities = {len(names) for names, _ in self.entries}
        if len(arities) != 1:
            return None
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(f"a{k}", kind) for k in range(arities.pop())])

    def candidates(self, n_args: int) -> list[tuple[tuple[str, ...], object]]:
        """The overloads a call with `n_args` arguments may run."""
        if len(self.entries) == 1:
            return list(self.entries)
        return [entry for entry in self.entries if len(entry[0]) == n_args]

    def choose(self, args: tuple, candidates) -> int:
        """The position in `candidates` of the overload for `args`' types
        (`type_readings`: where a value reads two ways and the two readings
        choose different overloads, a KTransformError says so)."""
        if len(self.entries) == 1 and candidates:
            return 0
        readings = list(itertools.product(*(type_readings(a) for a in args)))
        chosen = {_best(reading, candidates) for reading in readings} - {None}
        if not chosen:
            raise KTransformValueError(
                f"For 'MultitypeFuncGraph' {self.name!r}, cannot find fn match given args: "
                f"registered {[names for names, _ in self.entries]}, given {readings[0]}"
            )
        if len(chosen) > 1:
            picked = [candidates[k][0] for k in sorted(chosen)]
            raise KTransformError(
                f"MultitypeFuncGraph {self.name!r}: a 0-d array of a Python number's weak type "
                f"reads as a Tensor (`Tensor(2.0)`) or as a Number (a Python number passed "
                f"into the transformed function), and the two choose different overloads "
                f"{picked}; give the array a dtype (`Tensor(v, ms.float32)`) or keep the number "
                "a constant of the program"
            )
        return chosen.pop()

    def __call__(self, *args):
        candidates = self.candidates(len(args))
        return candidates[self.choose(args, candidates)][1](*args)

    @on_instances
    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        """In parsed code: a call of the dispatcher for this many arguments."""
        if kwargs:
            raise builder.fp.error(f"MultitypeFuncGraph {self.name!r}: no keyword arguments", e)
        fn = _dispatcher(self, len(args), len(self.entries))
        return builder.call(builder.fp.value_node(fn, self.name, e), args, {}, e)


def _best(reading: tuple[str, ...], candidates) -> int | None:
    """The most specific candidate for the type names `reading` (ties: the
    first registered), or None."""
    best, best_cost = None, None
    for k, (names, _) in enumerate(candidates):
        steps = [distance(t, want) for t, want in zip(reading, names, strict=True)]
        if any(s is None for s in steps):
            continue
        if best_cost is None or sum(steps) < best_cost:
            best, best_cost = k, sum(steps)
    return best


class OverloadIndex(Primitive):
    """`which(*args)`: the position of the overload of `mtfg` that runs on
    `args` among `candidates`, a Python int (ValueError: none matches)."""

    def __init__(self, mtfg: MultitypeFuncGraph, candidates: tuple):
        super().__init__(f"{mtfg.name}_overload", mtfg=mtfg, candidates=candidates)

    def impl(self, *args):
        return self.mtfg.choose(args, self.candidates)


zero_gradient(OverloadIndex)


def _dispatcher(mtfg: MultitypeFuncGraph, n_args: int, n_entries: int):
    """The Python function a call of `mtfg` with `n_args` arguments runs
    (module docstring); written again when overloads were added."""
    table = TRANSFORM.cache("mindspore.multitype.dispatchers")
    key = (id(mtfg), n_args, n_entries)
    if key in table and table[key][0] is mtfg:
        return table[key][1]
    candidates = tuple(mtfg.candidates(n_args))
    params = ", ".join(f"a{k}" for k in range(n_args))
    name = _identifier(f"{mtfg.name}_{n_args}")
    lines = [f"def {name}({params}):", f"    k = which({params})"]
    for k in range(len(candidates)):
        lines += [f"    if k == {k}:", f"        return f{k}({params})"]
    lines.append("    return k")  # not reached: `which` raises MindSpore's ValueError
    scope = {f"f{k}": fn for k, (_, fn) in enumerate(candidates)}
    scope["which"] = OverloadIndex(mtfg, candidates)
    fn = _define(name, "\n".join(lines) + "\n", scope, f"MultitypeFuncGraph {mtfg.name}")
    table[key] = (mtfg, fn)
    return fn


# -- HyperMap and Map -----------------------------------------------------------
class HyperMap:
    """MindSpore's `ops.HyperMap(ops=None, reverse=False)` (module docstring)."""

    nested = True

    def __init__(self, ops=None, reverse: bool = False):
        self.ops = ops
        self.reverse = reverse  # MindSpore's order of application: results are the same

    def _split(self, args: tuple | list):
        if self.ops is not None:
            return self.ops, list(args)
        if not args:
            raise TypeError(f"{type(self).__name__}() called without its function")
        return args[0], list(args[1:])

    def __call__(self, *args):
        fn, seqs = self._split(args)
        if not seqs:
            raise TypeError(f"{type(self).__name__} called without sequences")
        return _map_python(fn, seqs, self.nested)

    @on_instances
    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        """In parsed code: a call of the mapping function written for `fn`."""
        name = type(self).__name__
        if kwargs:
            raise builder.fp.error(f"{name} takes no keyword arguments", e)
        fn, seqs = self._split(args)
        if not seqs:
            raise builder.fp.error(f"{name} called without sequences", e)
        bound: list = []
        if not isinstance(fn, Constant) and self.ops is None:
            fn, bound = _partial_parts(fn)
            if fn is None:
                raise builder.fp.error(
                    f"{name}()(fn, ...): `fn` must be known when the program is parsed "
                    "(a function, a MultitypeFuncGraph, or F.partial of one)",
                    e,
                )
        value = fn.value if isinstance(fn, Constant) else fn
        if isinstance(value, FuncGraph) and value.parent is not None:
            # a closure of the caller (`lambda w: w * x`, x a local): a value the
            # mapping function is given, as it cannot read the caller's scope
            model = _map_model(None, len(bound), len(seqs), self.nested)
            bound = [fn, *bound]
        else:
            model = _map_model(value, len(bound), len(seqs), self.nested)
        return builder.call(builder.fp.value_node(model, name, e), [*bound, *seqs], {}, e)


class Map(HyperMap):
    """MindSpore's `ops.Map(ops=None, reverse=False)`: `HyperMap` one level deep."""

    nested = False


class Partial:
    """MindSpore's `P.Partial()` (and `F.partial`, an instance):
    `Partial()(fn, *args)` is `functools.partial(fn, *args)`. In parsed code
    bound constants make the partial while parsing; bound values known only
    when the program runs make a `MakePartial` node, which HyperMap and Map
    read apart (`_partial_parts`)."""

    def __call__(self, fn, *args):
        return functools.partial(fn, *args)

    @on_instances
    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        if kwargs or not args:
            raise builder.fp.error("partial(fn, *args) expected (no keyword arguments)", e)
        if all(isinstance(a, Constant) for a in args):
            fn = args[0].value
            fn = fn.python_fn if isinstance(fn, FuncGraph) and fn.python_fn else fn
            made = functools.partial(fn, *[a.value for a in args[1:]])
            return Constant(made, builder.debug(e), "partial")
        if not isinstance(args[0], Constant):
            raise builder.fp.error("partial(fn, ...): `fn` must be known when parsed", e)
        return builder.apply(MakePartial(), *args, node=e)


class MakePartial(Primitive):
    """`partial(fn, *bound)` of values known only when the program runs."""

    def __init__(self):
        super().__init__("make_partial")

    def impl(self, fn, *bound):
        return functools.partial(fn, *bound)


@bprop_getters.register(MakePartial)
def get_bprop_make_partial(self):
    raise KTransformError(
        "partial(fn, ...) of values known only when the program runs is differentiated "
        "only as the function of HyperMap or Map; elsewhere call fn(...) with the values"
    )


def _partial_parts(node):
    """(the function node, the bound nodes) of `functools.partial(fn, *bound)`
    built in the program; (None, []) for any other node."""
    prim = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    if isinstance(prim, MakePartial):
        return node.args[0], list(node.args[1:])
    return None, []


def _map_python(fn, seqs: list, nested: bool):
    """HyperMap / Map run as Python (outside parsed code)."""
    first = seqs[0]
    if not isinstance(first, tuple | list):
        if nested:
            return fn(*seqs)
        raise TypeError(f"Map: the inputs must be tuples or lists, got {type(first).__name__}")
    _check_lengths(seqs)
    rows = [list(row) for row in zip(*seqs, strict=True)]
    items = [_map_python(fn, row, nested) if nested else fn(*row) for row in rows]
    return items if isinstance(first, list) else tuple(items)


def _check_lengths(seqs: list) -> None:
    for s in seqs[1:]:
        if not isinstance(s, tuple | list) or len(s) != len(seqs[0]):
            raise ValueError(
                "HyperMap/Map: the sequences must all be tuples or lists of one length, got "
                + ", ".join(type(x).__name__ for x in seqs)
            )


def _map_model(fn, n_bound: int, n_seqs: int, nested: bool):
    """The Python function `HyperMap(fn)` (`nested`) or `Map(fn)` means for
    `n_bound` bound values and `n_seqs` sequences, parsed where it is called;
    for `fn` None, one that takes the function as its first argument `fn`."""
    table = TRANSFORM.cache("mindspore.multitype.maps")
    key = (id(fn), n_bound, n_seqs, nested)
    if key in table and table[key][0] is fn:
        return table[key][1]
    given = ["fn"] if fn is None else []
    bound = [f"b{k}" for k in range(n_bound)]
    seqs = [f"a{k}" for k in range(n_seqs)]
    name = "hyper_map" if nested else "map"
    args = ", ".join([*bound, *seqs])
    row = ", ".join([*bound, *(f"{s}[i]" for s in seqs)])
    each = f"{name}({', '.join([*given, row])})" if nested else f"fn({row})"
    same = " and ".join(f"isinstance({s}, (tuple, list)) and len({s}) == len(a0)" for s in seqs)
    lines = [f"def {name}({', '.join([*given, args])}):"]
    if nested:
        lines += ["    if not isinstance(a0, (tuple, list)):", f"        return fn({args})"]
    lines += [
        f"    if not ({same}):",
        f"        raise ValueError({_LENGTHS!r})",
        "    out = []",  # a list, so a long loop unrolls (`control.policy.changes_structure`)
        "    for i in range(len(a0)):",
        f"        out.append({each})",
        "    if isinstance(a0, list):",
        "        return out",
        "    return tuple(out)",
    ]
    scope = {} if fn is None else {"fn": fn}
    what = "HyperMap of a closure" if fn is None else f"HyperMap of {fn!r}"
    model = _define(name, "\n".join(lines) + "\n", scope, what)
    table[key] = (fn, model)
    return model


_LENGTHS = "HyperMap/Map: the sequences must all be tuples or lists of one length"

_serial = itertools.count(1)


def _define(name: str, source: str, scope: dict, what: str):
    """Run `source` (defining `name`) with `scope` as its globals; its text
    is in `linecache`, so the parser reads it as any user function."""
    filename = f"<k_transform: {what} #{next(_serial)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"__name__": __name__, **scope}
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - our own text
    return scope[name]


def _identifier(text: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in text)
    return name if name.isidentifier() else f"fn_{name}"
