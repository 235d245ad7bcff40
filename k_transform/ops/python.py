"""Primitives the parser emits for Python syntax itself.

Operators (`a + b`, `a @ b`, `not a`), containers (tuple/list/dict literals,
slices, indexing), pytree nodes (a NamedTuple or registered dataclass built
by `MakeNode`, read by `GetAttr`, updated by `ReplaceFields`: `_replace`,
`dataclasses.replace`; their gradients are the same type, with zeros in the
fields not read), attribute and method access on runtime values, calls to
library functions that have no dedicated primitive (`LibraryCall`), and the
effects `print` and `assert`. Library functions with a dedicated primitive
(`jnp.sin` -> `ops.Sin`) are mapped by `k_transform.ir.resolve`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import no_gradient, rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ir.primitive import MakeTuple, Primitive
from k_transform.ops.base import RuntimeCall
from k_transform.ops.host import is_pure
from k_transform.ops.structural import AddGrad, AttrEnv, GetItemGrad, SumTo, ZerosLike
from k_transform.protocol import kt_attribute
from k_transform.runtime import host_log


# -- operators ------------------------------------------------------------
# Arithmetic and comparison operators are `k_transform.ops.arithmetic`.
class Not(Primitive):
    """`not x`: Python's `not` when concrete, `logical_not` when traced."""

    n_inputs = 1
    static_when = "inputs"  # codegen.static

    def __init__(self):
        super().__init__("not_")

    def impl(self, x):
        return rt.not_(x)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.not_({args[0]})"


class Contains(Primitive):
    """`a in b` (`negate`: `a not in b`)."""

    n_inputs = 2

    def __init__(self, negate: bool = False):
        super().__init__("not_in" if negate else "in_", negate=negate)

    def impl(self, a, b):
        return (a not in b) if self.negate else (a in b)

    def emit(self, e, args):
        return f"{args[0]} {'not in' if self.negate else 'in'} {args[1]}"


# -- containers -------------------------------------------------------------
class MakeList(Primitive):
    def __init__(self):
        super().__init__("make_list")

    def impl(self, *items):
        return list(items)

    def emit(self, e, args):
        return f"[{', '.join(args)}]"


class MakeDict(Primitive):
    """`{k0: v0, ...}`: the inputs are keys and values interleaved."""

    def __init__(self):
        super().__init__("make_dict")

    def impl(self, *kv):
        return dict(zip(kv[0::2], kv[1::2], strict=True))

    def emit(self, e, args):
        pairs = [f"{k}: {v}" for k, v in zip(args[0::2], args[1::2], strict=True)]
        return "{" + ", ".join(pairs) + "}"


class AsSequence(Primitive):
    """`list(x)` / `tuple(x)` of a tuple or list built elsewhere (`kind`:
    "list" or "tuple"); None (a zero gradient) stays None. Comprehensions
    collect into a tuple and end with `AsSequence("list")`."""

    n_inputs = 1

    def __init__(self, kind: str):
        super().__init__(f"as_{kind}", kind=kind)

    def impl(self, x):
        return rt.as_sequence(x, self.kind)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.as_sequence({args[0]}, {self.kind!r})"


class MakeSlice(Primitive):
    n_inputs = 3

    def __init__(self):
        super().__init__("make_slice")

    def impl(self, start, stop, step):
        return slice(start, stop, step)

    def emit(self, e, args):
        return f"slice({', '.join(args)})"


class GetItem(Primitive):
    """`x[i]` for arrays, tuples, lists and dicts."""

    n_inputs = 2
    static_when = "inputs"
    reads_item = True

    def __init__(self):
        super().__init__("getitem")

    def impl(self, x, index):
        return x[index]

    def emit(self, e, args):
        return f"{args[0]}[{args[1]}]"


class ArrayIndex(RuntimeCall):
    """A list used as the index of `x[index]`: NumPy's integer (or boolean)
    array index where `x` is an array, else the list itself (`rt.array_index`)."""

    n_inputs = 2
    static_when = "inputs"
    rt_name = "array_index"

    def __init__(self):
        super().__init__("array_index")


class SetItem(Primitive):
    """`x[i] = v` made functional: returns the updated copy of `x`."""

    n_inputs = 3

    def __init__(self):
        super().__init__("setitem")

    def impl(self, x, index, value):
        return rt.setitem(x, index, value)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.setitem({', '.join(args)})"


class GetAttr(Primitive):
    """`x.attr` on a runtime value (`x.T`, `x.shape`, `x.at`)."""

    n_inputs = 1

    def __init__(self, attr: str):
        super().__init__("getattr", attr=attr)

    @property
    def static_when(self) -> str:
        """A shape, rank, size or dtype is a Python value under jit (codegen.static)."""
        return "always" if self.attr in STATIC_ATTRIBUTES else ""

    def impl(self, x):
        return getattr(x, self.attr)

    def emit(self, e, args):
        return f"{args[0]}.{self.attr}"

    def __repr__(self):
        return f"getattr.{self.attr}"


class MakeNode(Primitive):
    """`cls(name0=v0, ...)`: a NamedTuple or dataclass registered as a pytree,
    built from its fields (the parser names positional arguments)."""

    def __init__(self, cls: type, names: tuple[str, ...]):
        super().__init__(cls.__name__, cls=cls, names=tuple(names))

    def impl(self, *values):
        return self.cls(**dict(zip(self.names, values, strict=True)))

    def emit(self, e, args):
        fields = ", ".join(f"{k}={v}" for k, v in zip(self.names, args, strict=True))
        return f"{e.ref(self.cls, self.cls.__name__)}({fields})"


class Unflatten(Primitive):
    """A registered pytree node (a class, a NamedTuple, a dataclass) made of
    its children, one level down (`jax.tree_util.tree_unflatten`): what a
    call imported from its jaxpr returns (jax-cosmo's `Cosmology`)."""

    def __init__(self, treedef):
        super().__init__("unflatten", treedef=treedef)

    def impl(self, *children):
        return jax.tree_util.tree_unflatten(self.treedef, list(children))

    def emit(self, e, args):
        unflatten = e.ref(jax.tree_util.tree_unflatten, "tree_unflatten")
        return f"{unflatten}({e.ref(self.treedef, 'treedef')}, [{', '.join(args)}])"


class Written(RuntimeCall):
    """`written(x, index, kept)`: which items of `x[index]` an update of
    `x.at[index]` applies (`runtime.python.written`); no gradient."""

    n_inputs = 2
    rt_name = "written"

    def __init__(self, kept: bool):
        super().__init__("written", kept=kept)

    def extra(self) -> list:
        return [self.kept]


class FieldsOf(RuntimeCall):
    """The tuple of fields `names` of a pytree node (Nones for a None
    gradient). `cls`, the node's class where it is known (the gradient of
    `cls(...)`): a NamedTuple's gradient may come as a plain tuple of its
    items (`runtime.values.fields_of`)."""

    n_inputs = 1
    rt_name = "fields_of"

    def __init__(self, names: tuple[str, ...], cls: type | None = None):
        super().__init__("fields_of", names=tuple(names), cls=cls)

    def extra(self) -> list:
        return [self.names] if self.cls is None else [self.names, self.cls]

    def emit(self, e, args):
        if self.cls is None:
            return super().emit(e, args)
        cls = e.ref(self.cls, self.cls.__name__)
        return f"{e.ref(self.module, self.alias)}.fields_of({args[0]}, {self.names!r}, {cls})"


class ReplaceFields(RuntimeCall):
    """`x` with its fields `names` set to the tuple `values` (`x._replace(...)`,
    `dataclasses.replace(x, ...)`; `grad`: of gradient values, see
    `runtime.values.replace_fields`)."""

    n_inputs = 2
    rt_name = "replace_fields"

    def __init__(self, names: tuple[str, ...], grad: bool = False):
        super().__init__("replace_fields", names=tuple(names), grad=grad)

    def extra(self) -> list:
        return [self.names, True] if self.grad else [self.names]


class MethodCall(Primitive):
    """`x.method(*args, **kwargs)`; the last `len(kwnames)` inputs are keywords.
    It has no rule of its own: like a `LibraryCall` of `fn` (the method called
    on its first input), it is differentiated through its jaxpr at trace time
    (`imports_jaxpr`): `d.get("a", 0.0)` on a dict of arrays, a method of a
    user object (host code: `traced._host_receiver`, known when it runs)."""

    host_at_run_time = True

    def __init__(self, method: str, kwnames: tuple[str, ...] = ()):
        super().__init__("method", method=method, kwnames=tuple(kwnames))

    @property
    def fn(self):
        return _method_caller(self.method)

    @property
    def hint(self) -> str:
        return f".{self.method}"

    def impl(self, x, *args):
        pos, kw = split_kwargs(args, self.kwnames)
        method = x if self.method == "__call__" else getattr(x, self.method)
        return host_log.called(method)(*pos, **kw)

    def emit(self, e, args):
        # a method of the user's object is host code (`host_log.called`), as a
        # gradient runs it (`traced._host_receiver`)
        method = args[0] if self.method == "__call__" else f"{args[0]}.{self.method}"
        called = e.ref(host_log.called, "_called")
        return f"{called}({method})({call_args(args[1:], self.kwnames)})"

    def __repr__(self):
        return f"method.{self.method}" + (f"[{', '.join(self.kwnames)}=]" if self.kwnames else "")


class KeywordCall(MethodCall):
    """`f(*args, k=v)` where `f` is a function value known only when the
    program runs (a parameter: the solver a custom_vjp function is given).
    Python binds `k` by the parameter names of the function it gets, which
    the parser does not know: the call runs as written (`f.__call__`). It is
    differentiated as any `MethodCall`, through JAX's tracer: a library
    function or a user object is; a function the differentiated program made
    is refused there, naming the call (`why`: pass the arguments by position)."""

    def __init__(self, kwnames: tuple[str, ...], called: str = "f"):
        Primitive.__init__(self, "method", method="__call__", kwnames=tuple(kwnames))
        self.called = called

    @property
    def hint(self) -> str:
        return self.called

    @property
    def why(self) -> str:
        return (
            f"the call of the function value {self.called!r} with keyword arguments "
            f"({', '.join(self.kwnames)}=) is not differentiated: k_transform binds such a "
            "function's arguments by position (pass them positionally)"
        )


@functools.cache
def _method_caller(method: str):
    def call(x, *args, **kwargs):
        return getattr(x, method)(*args, **kwargs)

    call.__name__ = call.__qualname__ = method
    return call


class Vmapped(Primitive):
    """`jax.vmap(fun, in_axes, out_axes)`: a function value the parser reads
    when it is called (`k_transform.frontend.lax_models`); it has no rule, so
    one passed on or returned, not called, is refused by the DFunctor."""

    n_inputs = 1

    def __init__(self, in_axes=0, out_axes=0, options: tuple = ()):
        super().__init__("vmap", in_axes=in_axes, out_axes=out_axes, options=options)

    def impl(self, fun):
        return jax.vmap(fun, in_axes=self.in_axes, out_axes=self.out_axes)


class LibraryCall(Primitive):
    """A call to a library function with no dedicated primitive (`jax.nn.relu`).

    `host` (the constructor's `effectful`): a host call (`ops.host.host_call`:
    `rs.randn(3)`, `next(it)`, `time.time()`), run once each time Python would
    run it. A call of a function not known to be pure (`ops.host.is_pure`) is
    `effectful`: kept in program order and never dropped, its result used or
    not (`list.append(rows, v)` was dropped as dead code)."""

    def __init__(self, fn, hint: str, kwnames: tuple[str, ...] = (), effectful: bool = False):
        super().__init__(hint, fn=fn, kwnames=tuple(kwnames), host_call=effectful)
        self.hint = hint
        self.effectful = effectful or not is_pure(fn)

    @property
    def host(self) -> bool:
        """A host call runs host code (see `Primitive.host`)."""
        return self.host_call

    @property
    def static_when(self) -> str:
        """Sizes and types are Python values under jit (codegen.static)."""
        return "always" if not self.host_call and _is_static_call(self.fn) else ""

    def impl(self, *args):
        pos, kw = split_kwargs(args, self.kwnames)
        return (host_log.host(self.fn) if self.host_call else self.fn)(*pos, **kw)

    def emit(self, e, args):
        fn = e.ref(self.fn, self.hint)
        if self.host_call:  # run once where a derivative runs its loop iteration again
            fn = f"{e.ref(host_log.host, '_host')}({fn})"
        return f"{fn}({call_args(args, self.kwnames)})"

    def __repr__(self):
        return self.hint + (f"[{', '.join(self.kwnames)}=]" if self.kwnames else "")


class PartialOfValue(LibraryCall):
    """`functools.partial(f, *bound, **kw)` given values of the program, of a
    function `f` known only when the program runs (a parameter) or of one
    with no graph (a library's: `jnp.dot`): the parser reads its call as `f(*bound,
    *args, **kw)`, and gives it to a `lax` model or `jax.vmap` as the def of
    as many parameters as they call it with (`CallBuilder.fixed_partial`).
    Where it escapes it is this call, whose K (through its jaxpr) refuses a
    partial holding traced values. Pure: dropped where unused."""

    def __init__(self, kwnames: tuple[str, ...] = ()):
        super().__init__(functools.partial, "functools.partial", kwnames)
        self.effectful = False


def _is_static_call(fn) -> bool:
    return any(fn is f for f in (len, isinstance, jnp.shape, jnp.ndim, jnp.size))


class PythonValueCall(LibraryCall):
    """numpy, `math`, `abs` or `round` given Python values (`x.shape[-1]`),
    or an f-string (a str, whatever it formats): computed as Python computes
    it, a Python value again (codegen.static), so that
    `round(math.sqrt(x.shape[-1]))` can be a shape; no gradient."""

    static_when = "inputs"


class Concretely:
    """`prim(*args)` given no traced value run as JAX runs it on concrete
    values, also mid-trace (`jax.ensure_compile_time_eval`): a concrete
    array, not a traced one. Given a traced value, it is `prim(*args)`."""

    def __init__(self, prim: Primitive):
        self.prim = prim
        self.__name__ = f"concretely_{prim.name}"

    def __call__(self, *args):
        if rt.any_traced(args):
            return self.prim(*args)
        with jax.ensure_compile_time_eval():
            return self.prim(*args)

    def __eq__(self, other):
        return isinstance(other, Concretely) and self.prim == other.prim

    def __hash__(self):
        return hash(("concretely", self.prim))


class ConcreteCall(PythonValueCall):
    """A pure JAX computation of constants and static values (`jnp.ceil(a *
    x.shape[0])`, `jnp.argmax(jnp.array([1.0, 5.0]))`), computed where the
    program runs as a concrete array, also under jax.jit, where a value that
    must be a Python one (`int(...)`, `.item()`, a slice bound) reads it: what
    JAX computes outside a jit. Made only for such a reader
    (`CallBuilder.concrete`): an array every call site makes (`jnp.ones(x.shape)`)
    stays a traced one, not a constant of the compiled program. No gradient:
    its inputs are constants, or feed a reader with none (`int(...)`, a slice
    bound), which may read an argument (`reads_args`): then it is concrete
    only where the arguments are (a default left to itself), so not static
    (codegen.static)."""

    def __init__(self, prim: Primitive, reads_args: bool = False):
        super().__init__(Concretely(prim), f"concretely_{prim.name}")
        self.effectful = False
        self.reads_args = reads_args

    @property
    def static_when(self) -> str:
        return "inputs" if self.reads_args else "always"


class HostValue(LibraryCall):
    """A host call given no arrays (`rs.randn(3)`, `next(it)`): its result is a
    value of the host, with no gradient; it runs each time it is reached."""

    def __init__(self, fn, hint: str, kwnames: tuple[str, ...] = ()):
        super().__init__(fn, hint, kwnames, effectful=True)


def split_kwargs(args, kwnames):
    n = len(args) - len(kwnames)
    return args[:n], dict(zip(kwnames, args[n:], strict=True))


def call_args(args: list[str], kwnames) -> str:
    n = len(args) - len(kwnames)
    parts = list(args[:n]) + [f"{k}={v}" for k, v in zip(kwnames, args[n:], strict=True)]
    return ", ".join(parts)


# -- effects ----------------------------------------------------------------
class Print(Primitive):
    """`print(...)`: Python's print when concrete, a debug callback (printing
    at run time, to the same `file`) when traced."""

    effectful = True
    host = True

    def __init__(self, kwnames: tuple[str, ...] = ()):
        super().__init__("print", kwnames=tuple(kwnames))

    def impl(self, *args):
        pos, kw = split_kwargs(args, self.kwnames)
        return rt.print_(*pos, **kw)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.print_({call_args(args, self.kwnames)})"


class Assert(Primitive):
    """`assert cond, msg`: checked when concrete; when traced, checked at run
    time (`runtime.python.assert_`)."""

    effectful = True
    n_inputs = 2

    def __init__(self):
        super().__init__("assert")

    def impl(self, cond, msg):
        return rt.assert_(cond, msg)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.assert_({', '.join(args)})"


class CheckUnpack(Primitive):
    """`a, b = seq` (`n` targets; `at_least`: beside a starred one): Python's
    ValueError when `seq` has another number of items (`runtime.python.check_unpack`;
    the items are then read one by one)."""

    effectful = True
    n_inputs = 1

    def __init__(self, n: int, at_least: bool = False):
        super().__init__("check_unpack", n=n, at_least=at_least)

    def impl(self, seq):
        return rt.check_unpack(seq, self.n, self.at_least)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.check_unpack({args[0]}, {self.n}, {self.at_least})"


class CheckStarArgs(Primitive):
    """`fn(a, *seq)` with `seq`'s length known only when run: Python's
    TypeError when `seq` fills too few or too many of `fn`'s parameters
    (`runtime.python.check_star_args`; the parameters are then read by position)."""

    effectful = True
    n_inputs = 1

    def __init__(self, fn: str, given: int, names: tuple, required: int, star: bool):
        super().__init__(
            "check_star_args", fn=fn, given=given, names=names, required=required, star=star
        )

    def extra(self) -> list:
        return [self.fn, self.given, self.names, self.required, self.star]

    def impl(self, seq):
        return rt.check_star_args(seq, *self.extra())

    def emit(self, e, args):
        extra = ", ".join(repr(v) for v in self.extra())
        return f"{e.ref(rt, '_rt')}.check_star_args({args[0]}, {extra})"


class ZipStrictEnd(RuntimeCall):
    """The end of `for ... in zip(..., strict=True)` over iterables of these
    lengths: `(broke, *lengths)`, Python's ValueError for unequal lengths
    unless the loop broke (the loop runs over the shortest first, its
    effects before the error, as in Python: `rt.zip_strict_end`)."""

    effectful = True
    n_inputs = None
    rt_name = "zip_strict_end"

    def __init__(self):
        super().__init__("zip_strict_end")


class Raise(Primitive):
    """`raise exc` / `raise exc from cause` (`cause`: whether `from` is given;
    its input is None otherwise): raised where it is reached when concrete;
    inside a branch or loop body traced for `lax`, raised at run time when
    the program reaches it (`runtime.python.raise_`)."""

    effectful = True

    def __init__(self, cause: bool = False):
        super().__init__("raise", cause=cause)

    def impl(self, exc, cause):
        return rt.raise_(exc, cause if self.cause else rt.NO_CAUSE)

    def emit(self, e, args):
        args = args if self.cause else args[:1]
        return f"{e.ref(rt, '_rt')}.raise_({', '.join(args)})"


class CustomBpropCall(Primitive):
    """A call of a Cell whose class defines `bprop(self, *inputs, out, dout)`.

    Forward runs the Cell's `construct` graph; the gradient is the Cell's own
    `bprop` (registered for this class in `bprop_registry.structural`).
    """

    def __init__(self, cell, graph):
        super().__init__(type(cell).__name__, cell=cell)
        self.graph = graph
        self.n_inputs = len(graph.parameters)

    def impl(self, *args):
        return self.cell.construct(*args)

    def emit(self, e, args):
        return f"{e.graph_ref(self.graph)}({', '.join(args)})"

    def subgraphs(self):
        return [self.graph]


# -- list mutation, made functional ------------------------------------------
# `lst.append(v)` and its kin rebind `lst` to the updated copy (the parser
# writes `lst = list_append(lst, v)`); see `k_transform.frontend.mutation`.
class ListAppend(Primitive):
    """`lst.append(v)`: the new list `lst + [v]`."""

    n_inputs = 2

    def __init__(self):
        super().__init__("list_append")

    def impl(self, lst, value):
        return rt.list_append(lst, value)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.list_append({', '.join(args)})"


class ListExtend(Primitive):
    """`lst.extend(seq)` (and `lst += seq`): the new list `lst + list(seq)`."""

    n_inputs = 2

    def __init__(self):
        super().__init__("list_extend")

    def impl(self, lst, seq):
        return rt.list_extend(lst, seq)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.list_extend({', '.join(args)})"


class ListInsert(Primitive):
    """`lst.insert(i, v)`: the new list with `v` at position `i`."""

    n_inputs = 3

    def __init__(self):
        super().__init__("list_insert")

    def impl(self, lst, index, value):
        return rt.list_insert(lst, index, value)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.list_insert({', '.join(args)})"


class ListDelete(Primitive):
    """What `lst.pop(i)` leaves: the new list without item `i` (the parser
    reads the popped item first, with `getitem`)."""

    n_inputs = 2

    def __init__(self):
        super().__init__("list_delete")

    def impl(self, lst, index):
        return rt.list_delete(lst, index)

    def emit(self, e, args):
        return f"{e.ref(rt, '_rt')}.list_delete({', '.join(args)})"


class Copy(Primitive):
    """`x.copy()` of an array or list (`kind` "copy"), and `list(x)` / `tuple(x)`
    of a list, tuple or array (`kind` "list" / "tuple"): a new object, so
    mutating it never shows through `x`."""

    n_inputs = 1

    def __init__(self, kind: str = "copy"):
        super().__init__({"copy": "copy", "list": "to_list", "tuple": "to_tuple"}[kind], kind=kind)

    def impl(self, x):
        return getattr(rt, self.name if self.kind != "copy" else "copy_value")(x)

    def emit(self, e, args):
        fn = self.name if self.kind != "copy" else "copy_value"
        return f"{e.ref(rt, '_rt')}.{fn}({args[0]})"


class BindInputs(RuntimeCall):
    """The values of a function's positional parameters when `kt.jvp(fn,
    inputs, v)` / `kt.hvp` give it `inputs` known only when run (no tuple
    display): `(inputs, fills) -> tuple`, the items of a tuple or list (else
    `inputs` alone: the eager call's and MindSpore's convention), then from
    `fills` the defaults of the parameters they leave out; fewer items than
    the `required` parameters, or more than all, is an error (`rt.bind_inputs`)."""

    n_inputs = 2
    rt_name = "bind_inputs"

    def __init__(self, api: str, required: int):
        super().__init__("bind_inputs", api=api, required=required)

    def extra(self):
        return [self.api, self.required]


class BindInputsGrad(RuntimeCall):
    """`(inputs, fills, d) -> (d_inputs, d_fills)`: the gradients of
    `BindInputs`' arguments from `d`, that of its result (`rt.bind_inputs_grad`)."""

    n_inputs = 3
    rt_name = "bind_inputs_grad"

    def __init__(self, api: str, required: int):
        super().__init__("bind_inputs_grad", api=api, required=required)

    def extra(self):
        return [self.api, self.required]


class Iterated(RuntimeCall):
    """What `for item in seq` visits, read by position (comprehensions,
    `list(seq)`): a dict's keys, an iterator's items, else `seq`
    (`rt.iterated`). `pulls`: `seq` may be an iterator a host call made
    outside the graph holding this (taking its items is host code there:
    `host_at_run_time`, see `control.prims.ForEach`)."""

    n_inputs = 1
    rt_name = "iterated"

    def __init__(self, pulls: bool = False):
        super().__init__("iterated", **({"pulls": True} if pulls else {}))

    @property
    def host_at_run_time(self) -> bool:
        return bool(self.attrs.get("pulls"))


class IteratedUpTo(Iterated):
    """`iterated(seq, limit)`: `Iterated`, an iterator giving at most `limit`
    items (None: all), as many as `zip` takes from it (`rt.zip_limit`)."""

    n_inputs = 2

    def __init__(self, pulls: bool = False):
        super().__init__(pulls)
        self.name = "iterated_up_to"


class IteratedGrad(RuntimeCall):
    """The gradient of `seq` from the gradient `d` of `iterated(seq)`: none
    for a dict, else `d`."""

    n_inputs = 2
    rt_name = "iterated_grad"

    def __init__(self):
        super().__init__("iterated_grad")


class Zipped(RuntimeCall):
    """`zipped(parts)`: the items a `for` over `zip(*parts)` or
    `enumerate(*parts)` (`kind`) takes where a host call made each iterable
    (`parse_sugar.iterated_loop`): read by position where one has a length,
    so they keep their gradient, else Python's lazy object, taken item by
    item (`rt.zipped`). An iterator's items are host calls (`host_at_run_time`,
    see `control.prims.ForEach`); effectful: an iterator is advanced once."""

    n_inputs = 1
    rt_name = "zipped"
    effectful = True
    host_at_run_time = True

    def __init__(self, kind: str, strict: bool = False):
        super().__init__("zipped", kind=kind, strict=strict)

    def extra(self) -> list:
        return [self.kind, self.strict]


class ZippedGrad(RuntimeCall):
    """`zipped_grad(parts, d)`: the gradients of `parts` from the gradient `d`
    of `zipped(parts)` (`rt.zipped_grad`); linear in `d`."""

    n_inputs = 2
    rt_name = "zipped_grad"

    def __init__(self, kind: str, strict: bool = False):
        super().__init__("zipped_grad", kind=kind, strict=strict)

    def extra(self) -> list:
        return [self.kind, self.strict]


class ZippedGradT(RuntimeCall):
    """`zipped_grad_t(parts, dd)`: `ZippedGrad`'s transpose in `d`."""

    n_inputs = 2
    rt_name = "zipped_grad_t"

    def __init__(self, kind: str, strict: bool = False):
        super().__init__("zipped_grad_t", kind=kind, strict=strict)

    def extra(self) -> list:
        return [self.kind, self.strict]


# == gradient rules ==============================================================
# Tuples, lists and dicts are variadic: their inputs come packed (see the registry).

getitem_grad = GetItemGrad()
sum_to = SumTo()
zeros_like = ZerosLike()
set_item = SetItem()
kept_writes = Written(kept=True)
to_list = Copy("list")
to_tuple = Copy("tuple")
zeros_value = zeros_like


@rule(MakeTuple)
def bprop_make_tuple(xs, out, dout):
    return dout


@rule(MakeList)
def bprop_make_list(xs, out, dout):
    return dout


@bprop_getters.register(AsSequence)
def get_bprop_as_sequence(self):
    back = AsSequence("tuple" if self.kind == "list" else "list")

    def bprop(x, out, dout):
        return (back(dout),)

    return bprop


class DictGet(RuntimeCall):
    """`d[key]`, or zeros like `like` when `d` has no `key`: an entry of a
    dict's gradient (an absent entry is a zero gradient, as in an env)."""

    n_inputs = 3
    rt_name = "env_get"

    def __init__(self):
        super().__init__("dict_get")


dict_get = DictGet()


@rule(MakeDict)
def bprop_make_dict(kv, out, dout):
    # `{"b": x, "b": y}` is `{"b": y}`: a value whose key comes again is replaced
    grads = ()
    for k in range(0, len(kv), 2):
        replaced = kv[k] in kv[k + 2 :: 2]
        grads = grads + (None, None if replaced else dict_get(dout, kv[k], kv[k + 1]))
    return grads


@rule(DictGet)
def bprop_dict_get(d, key, like, out, dout):
    return ({key: dout}, None, None)


# Library functions whose result does not depend smoothly on their inputs:
# sizes, types, constructors from shapes, predicates, integer results.
NON_DIFFERENTIABLE_CALLS = (
    len,
    isinstance,
    range,
    slice,  # a slice object: positions to index with, whatever it holds
    type,
    int,
    bool,
    jnp.shape,
    jnp.ndim,
    jnp.size,
    jnp.zeros,
    jnp.ones,
    jnp.empty,
    jnp.eye,
    jnp.arange,
    jnp.argmax,
    jnp.argmin,
    jnp.argsort,
    jnp.isnan,
    jnp.isfinite,
    jnp.isinf,
    jnp.logical_and,
    jnp.logical_or,
    jnp.logical_not,
    jnp.equal,
    jnp.not_equal,
    jnp.less,
    jnp.greater,
    jnp.less_equal,
    jnp.greater_equal,
    jnp.floor_divide,
    jnp.result_type,
    jnp.issubdtype,
    jnp.array_equal,
    jnp.allclose,
    jnp.all,
    jnp.any,
    jnp.count_nonzero,
    jax.nn.one_hot,
    jax.random.bernoulli,
    jax.random.normal,
    jax.random.uniform,
    jax.random.split,
    jax.random.PRNGKey,
    rt.insert_position,
    rt.assigned_span,
    rt.pop_position,
    rt.indices,  # positions, lengths and keys of iteration by position (parse_sugar)
    rt.seq_len,
    rt.trip_count,  # the reverse loops of `for`s (control.k_loops)
    rt.each_count,
    rt.zip_length,
    rt.sized_len,
    rt.zip_limit,
    rt.dict_keys,
    rt.keys_within,
    rt.to_int,
    rt.to_bool,
    rt.truth_any,
    rt.truth_all,
    rt.static_filter,
)


def imports_jaxpr(prim) -> bool:
    """A library call the DFunctor differentiates through its jaxpr, imported at
    trace time (`k_transform.frontend.jaxpr`): anything but the calls above and
    k_transform's own run-time helpers."""
    if isinstance(prim, MethodCall):
        return True
    if not isinstance(prim, LibraryCall) or isinstance(prim, (HostValue, PythonValueCall)):
        return False
    if _no_gradient_call(prim.fn):
        return False
    if kt_attribute(prim.fn, "__kt_library__", False):  # `ops.tensor_methods`: jnp code of ours
        return True
    return not (getattr(prim.fn, "__module__", None) or "").startswith("k_transform.")


def _no_gradient_call(fn) -> bool:
    """A call whose result has no gradient: the run-time helpers above, and
    exception classes (`raise ValueError(...)`)."""
    if isinstance(fn, type) and issubclass(fn, BaseException):
        return True
    return any(fn is f for f in NON_DIFFERENTIABLE_CALLS)


@bprop_getters.register(LibraryCall)
def get_bprop_library_call(self):
    if not _no_gradient_call(self.fn):
        raise KTransformError(
            f"cannot differentiate the call {self.hint}(...): it has no primitive with a "
            "gradient rule (write it with differentiable operations, or make it a "
            "kt.Primitive with a registered bprop)"
        )
    return no_gradient(lambda xs, out, dout: (None,) * len(xs))


@bprop_getters.register(HostValue)
def get_bprop_host_value(self):
    return no_gradient(lambda xs, out, dout: (None,) * len(xs))


@bprop_getters.register(PythonValueCall)
def get_bprop_python_value_call(self):  # its inputs are Python values: no gradient
    return no_gradient(lambda xs, out, dout: (None,) * len(xs))


@rule(GetItem)
def bprop_getitem(x, index, out, dout):
    return getitem_grad(x, index, dout), None


@rule(SetItem)
def bprop_setitem(x, index, value, out, dout):
    # (one return: the DFunctor reads the index's None from the result's display;
    # a None from one of several returns reached it as a run-time value)
    if isinstance(dout, tuple):  # the gradient of a list may come as a tuple
        dout = to_list(dout)
    if isinstance(index, slice) and isinstance(x, list):  # the list may grow or shrink
        span = rt.assigned_span(len(x), index, len(out))
        dvalue = dout[span]
        if isinstance(value, tuple):
            dvalue = to_tuple(dvalue)
        elif not isinstance(value, list):  # the rows of an array
            dvalue = jnp.stack(dvalue)
        dx = set_item(dout, span, zeros_value(x[index]))
    else:
        # Read row `index` before writing it: XLA updates `dout` in place then
        # (written the other way round, a loop copied the whole array every step).
        if isinstance(dout, dict) and index not in dout:  # a gradient built without the
            read = zeros_like(value)  # key (a second order's, from the dict before it): zero
        else:
            read = dout[index]
        if not isinstance(x, (list, dict)):  # only the writes kept take a gradient
            read = jnp.where(kept_writes(x, index), read, 0.0)
        dvalue = sum_to(read, value)  # value may broadcast
        if isinstance(x, list) or (isinstance(x, dict) and index in x):
            # the item it replaced, whose structure `x`'s gradient keeps (`m[0] += [v]`
            # makes a longer row)
            dx = set_item(dout, index, zeros_like(x[index]))
        else:
            dx = set_item(dout, index, zeros_like(value))
    return dx, None, dvalue


# -- list mutation, made functional (the parser rebinds the list) ---------
@rule(ListAppend)
def bprop_list_append(lst, value, out, dout):
    d = to_list(dout)
    return d[: len(lst)], d[len(lst)]


@rule(ListExtend)
def bprop_list_extend(lst, seq, out, dout):
    d = to_list(dout)
    rest = d[len(lst) :]
    return d[: len(lst)], (to_tuple(rest) if isinstance(seq, tuple) else rest)


@rule(ListInsert)
def bprop_list_insert(lst, index, value, out, dout):
    j = rt.insert_position(len(lst), index)
    d = to_list(dout)
    return d[:j] + d[j + 1 :], None, d[j]


@rule(ListDelete)
def bprop_list_delete(lst, index, out, dout):
    j = rt.pop_position(len(lst), index)
    d = to_list(dout)
    return d[:j] + [zeros_value(lst[j])] + d[j:], None


@rule(Copy)
def bprop_copy(x, out, dout):
    if isinstance(x, tuple):
        return (to_tuple(dout),)
    if isinstance(x, list):
        return (to_list(dout),)
    if isinstance(dout, (list, tuple)):  # `list(array)`: its rows
        return (jnp.stack(dout),)
    return (dout,)


# Attributes that describe an array rather than compute from it.
STATIC_ATTRIBUTES = ("shape", "ndim", "size", "dtype", "nbytes", "itemsize")


@bprop_getters.register(GetAttr)
def get_bprop_getattr(self):
    """A field of a pytree node (`params.w`): the gradient is the node's type
    with `dout` in that field and zeros elsewhere; any other attribute of a
    value fails when the rule runs (`runtime.values.replace_fields`). An
    attribute of an object that holds Parameters (`net.w`, `net.layer` of a
    Cell given as an argument) gives the object an env of their gradients
    (`runtime.state.attr_env`)."""
    if self.attr in STATIC_ATTRIBUTES:
        return no_gradient(lambda x, out, dout: (None,))
    put = ReplaceFields((self.attr,), grad=True)
    add_grad, attr_env = AddGrad(), AttrEnv()

    def bprop(x, out, dout):
        return (add_grad(put(zeros_like(x), (dout,)), attr_env(x, out, dout)),)

    return bprop


@bprop_getters.register(MakeNode)
def get_bprop_make_node(self):
    fields = FieldsOf(self.names, self.cls)

    def bprop(xs, out, dout):
        return fields(dout)

    return bprop


@bprop_getters.register(Unflatten)
def get_bprop_unflatten(self):
    children = FieldsOf(tuple(range(self.treedef.num_leaves)))

    def bprop(xs, out, dout):
        return children(dout)

    return bprop


@bprop_getters.register(FieldsOf)
def get_bprop_fields_of(self):
    put = ReplaceFields(self.names, grad=True)

    def bprop(x, out, dout):
        return (put(zeros_like(x), dout),)

    return bprop


@bprop_getters.register(ReplaceFields)
def get_bprop_replace_fields(self):
    put = ReplaceFields(self.names, grad=True)
    fields = FieldsOf(self.names)

    def bprop(x, values, out, dout):
        return put(dout, zeros_like(values)), fields(dout)

    return bprop


@bprop_getters.register(CustomBpropCall)
def get_bprop_custom_cell(self):
    return self.cell.bprop  # the Cell's own bprop(*inputs, out, dout)


zero_gradient(Not, Contains, MakeSlice, Written, ArrayIndex)


# BindInputsGrad is linear in `d`; its transpose binds the gradients as BindInputs binds values.
@bprop_getters.register(BindInputs)
def get_bprop_bind_inputs(self):
    spread = BindInputsGrad(self.api, self.required)

    def bprop(inputs, fills, out, dout):
        d = spread(inputs, fills, dout)
        return d[0], d[1]

    return bprop


@bprop_getters.register(BindInputsGrad)
def get_bprop_bind_inputs_grad(self):
    bind = BindInputs(self.api, self.required)

    def bprop(inputs, fills, d, out, dout):
        return zeros_like(inputs), zeros_like(fills), bind(dout[0], dout[1])

    return bprop


@bprop_getters.register(Iterated)
def get_bprop_iterated(self):
    back = IteratedGrad()

    def bprop(seq, out, dout):
        return (back(seq, dout),)

    return bprop


@bprop_getters.register(IteratedUpTo)
def get_bprop_iterated_up_to(self):
    back = IteratedGrad()

    def bprop(seq, limit, out, dout):
        return back(seq, dout), None

    return bprop


@bprop_getters.register(IteratedGrad)
def get_bprop_iterated_grad(self):
    back = IteratedGrad()

    def bprop(seq, d, out, dout):
        return None, back(seq, dout)

    return bprop


@bprop_getters.register(Zipped)
def get_bprop_zipped(self):
    back = ZippedGrad(self.kind, self.strict)

    def bprop(parts, out, dout):
        return (back(parts, dout),)

    return bprop


@bprop_getters.register(ZippedGrad)
def get_bprop_zipped_grad(self):
    back = ZippedGradT(self.kind, self.strict)

    def bprop(parts, d, out, dout):
        return None, back(parts, dout)

    return bprop


@bprop_getters.register(ZippedGradT)
def get_bprop_zipped_grad_t(self):
    back = ZippedGrad(self.kind, self.strict)

    def bprop(parts, dd, out, dout):
        return None, back(parts, dout)

    return bprop
