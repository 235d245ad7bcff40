"""Parser methods for calls (mixed into `GraphBuilder`).

`expr_Call` parses the callee and arguments (iterable builtins and
comprehension-like calls first, `k_transform.frontend.parse_sugar`; `*`/`**`
arguments `k_transform.frontend.unpacking`), then:

- `lst.append(v)` and the other in-place list methods rebind `lst`
  (`mutating_call`); other methods of traced values are `method_call`
  (`copy`, a NamedTuple's `_replace`, mapped methods, MindSpore's tensor
  methods, else a `MethodCall`);
- `call` decides by the callee: a graph (user functions, methods, Cells,
  gradient functions and compiled programs through `__kt_graph__`, with
  arguments matched by `bind_call`), a primitive, `functools.partial`
  (`partial_call`; of a user function, `partial_closure`; of a function
  known only when run or a library's, a `PartialOfValue` read where it is
  called or given to a `lax` model, `jax.vmap` or `jax.tree.map`:
  `fixed_partial`), a wrapper (`jax.jit(f)`), a Cell with its own `bprop`,
  `print`, the `lax` control functions and `jax.vmap` as Python models
  (`model_call`, `vmapped_call`, `k_transform.frontend.lax_models`),
  NamedTuple and dataclass constructors, constant folding, mapped library
  functions, numpy functions on traced values (their jnp twin), else a
  `LibraryCall` (given closures over the caller's values, with those values
  as inputs: `batching.with_closures`). A call of the function such a call
  returns (JAX's `grad(closure)(x)`, `value_and_grad`, `jacrev`, ...)
  is one `LibraryCall` of both (`result_call`), so that the function, which
  holds traced values, never leaves the trace. k_transform's own API runs
  on constants (`__kt_static__`) or lowers itself into this graph
  (`__kt_lower__`).

Parsing a callee's graph goes through `self.parse`, which `GraphBuilder`
sets to `k_transform.frontend.parser.parse`.
"""

from __future__ import annotations

import functools
import inspect
import types

import gast
import jax
import jax.numpy as jnp
import numpy as np

from k_transform import runtime as rt
from k_transform.cell import Cell
from k_transform.cell import Parameter as Weight  # (`Parameter`: the IR's)
from k_transform.codegen.static import StaticFacts, is_plain
from k_transform.control import prims as control
from k_transform.errors import KTransformError
from k_transform.frontend import (
    batching,
    callables,
    effects,
    jax_custom,
    lax_models,
    mutability,
    python_code,
    pytrees,
    sugar,
)
from k_transform.frontend.desugar import mutation_base, walk_scope
from k_transform.frontend.effects import LIST_MUTATORS, REFUSED_MUTATORS
from k_transform.frontend.jaxpr import numpy_twin
from k_transform.frontend.mutation import outer_change
from k_transform.frontend.source import is_library_value, is_user_function
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops import tensor_methods
from k_transform.ops.fold import fold_call
from k_transform.ops.host import host_call, is_pure, plain_exception
from k_transform.ops.mapping import Call, adapt_function, adapt_method
from k_transform.protocol import kt_attribute

MUTATING_METHODS = (*LIST_MUTATORS, *effects.MUTATING_METHODS)

# Which arguments are plain Python values whenever the code runs (shapes, ints)
_STATIC = StaticFacts()
# methods whose result is a Python value, which a traced array has none of
_PYTHON_VALUE_METHODS = frozenset(("item", "tolist", "__int__", "__float__", "__index__"))


# Builtins that take functions or order values: no model of them on program
# values (`sorted(xs)`, `map(f, xs)`); a plain function using them runs as Python.
# So do `itertools`' functions (`chain(a, b)`, `accumulate(xs)`): their result is
# an iterator, no JAX type, which a library call of traced values cannot return.
_PYTHON_ONLY_BUILTINS = (sorted, map, filter, zip, iter, next)
# `tree_map(f, tree, *rest)`: calls `f` with one argument per tree.
_TREE_MAPS = (jax.tree.map, jax.tree_util.tree_map)
# Mutable array references: a function making one runs as Python, and its
# jaxpr's reference operations become values (`jaxpr.discharged`).
_REFERENCE_MAKERS = tuple(getattr(jax, n) for n in ("new_ref", "empty_ref") if hasattr(jax, n))


def _python_only(fn, given: list[Node]) -> bool:
    """A builtin with no model on program values `given`, or an `itertools`
    function (`chain.from_iterable` too) given one that may hold an array
    (of Python values, as `product(range(x.shape[0]), repeat=2)`, its
    iterator is a host object, taken by `rt.iterated`)."""
    if any(fn is b for b in _PYTHON_ONLY_BUILTINS):
        return True
    owner = getattr(fn, "__self__", fn)  # (a classmethod's class)
    return getattr(owner, "__module__", None) == "itertools" and not all(
        _STATIC.is_static(a) or _literal(a) or _is_range(a) for a in given
    )


def _is_range(node: Node) -> bool:
    """`range(...)` made where the program runs: a sequence of ints."""
    prim = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    return isinstance(prim, prims.LibraryCall) and prim.fn is range


class CallBuilder:
    """The `GraphBuilder` methods for the calls in the module docstring."""

    def expr_Call(self, e) -> Node:
        builtin = self.iterable_builtin(e)
        if builtin is not None:
            return builtin
        if any(isinstance(a, gast.Starred) for a in e.args) or any(
            k.arg is None for k in e.keywords
        ):
            return self.unpacking_call(e)
        if isinstance(e.func, gast.Attribute) and e.func.attr == "sort":
            return self.sort_call(e)
        if mutation_base(e) is not None:
            receiver = self.read(e.func.value.id, e)
            constant = isinstance(receiver, Constant) and not isinstance(receiver.value, list)
            if not constant and _takes_mutation(e.func.attr, receiver):
                return self.mutating_call(e, receiver)
        if isinstance(e.func, gast.Attribute):
            receiver = self.expr(e.func.value)
            if not isinstance(receiver, Constant) and e.func.attr in (
                *LIST_MUTATORS,
                *effects.IN_PLACE_METHODS,
            ):
                raise self.fp.unsupported(
                    f"the in-place method call `{_called_text(e)}(...)` on an item or attribute", e
                )
            if not isinstance(receiver, Constant) or _array_method_of_parameter(receiver, e):
                self.check_method_effect(receiver, e)
                return self.method_call(receiver, e)
            callee = self.attribute_of(receiver, e.func.attr, e.func)
        else:
            called_here(self, e.func)
            callee = self.expr(e.func)
            if isinstance(callee, Constant) and callee.value is super and not e.args:
                return self.super_call(callee, e)
        args = [self.current(self.expr(a)) for a in e.args]
        kwargs = {k.arg: self.current(self.expr(k.value)) for k in e.keywords}
        return self.call(self.current(callee), args, kwargs, e)

    def super_call(self, callee: Constant, e) -> Node:
        """`super()` as Python means it: `super(__class__, first)`, where
        `__class__` is the cell of the class the method was defined in and
        `first` the current value of its first parameter (CPython reads both
        from the frame). Where Python raises instead (no class cell, no
        positional parameter, inside a comprehension, lambda or nested def
        other than the one parsed here), the function runs as Python."""
        if e.keywords:
            raise self.fp.unsupported("`super()` given keyword arguments", e)
        params = [*self.fdef.args.posonlyargs, *self.fdef.args.args]
        direct = any(n is e for n in walk_scope([self.fdef], enter_roots=True))
        if "__class__" not in self.fp.cells or not params or not direct:
            raise self.fp.unsupported("`super()` outside a method's own body", e)
        cls = self.fp.resolve_global("__class__", e)
        first = self.read(params[0].id, e)
        if isinstance(first, Constant) and first.value is rt.UNDEFINED:
            raise self.fp.unsupported(f"`super()` after `del {params[0].id}`", e)
        return self.call(callee, [cls, self.current(first)], {}, e)

    def mutating_call(self, e, lst: Node) -> Node:
        """`lst.append(v)`, `.extend(s)`, `.insert(i, v)`, `.pop(i)`: `lst` is
        rebound to the new list (`k_transform.frontend.mutation` checks no other
        reference sees the old one); the call's value is Python's."""
        name, method = e.func.value.id, e.func.attr
        if name not in self.locals:
            what = f"`{name}.{method}(...)`"
            where = self.fp.outer_name(name)
            raise outer_change(what, name, where, self.fp.error, self.fp.unsupported, e)
        if method == "update" and effects.is_plain_dict(lst, prims):
            return self.dict_update(name, lst, e)
        if method in REFUSED_MUTATORS or (method == "pop" and effects.is_plain_dict(lst, prims)):
            raise self.fp.unsupported(f"the in-place method call `{name}.{method}(...)`", e)
        arity = {"append": (1, 1), "extend": (1, 1), "insert": (2, 2), "pop": (0, 1)}[method]
        if e.keywords or not arity[0] <= len(e.args) <= arity[1]:
            raise self.fp.error(f"wrong arguments to `{name}.{method}(...)`", e)
        args = [self.expr(a) for a in e.args]
        result = self.const(None, e)
        if method == "pop":
            index = args[0] if args else self.const(-1, e)
            result = self.apply(prims.GetItem(), lst, index, node=e)
            new = self.apply(prims.ListDelete(), lst, index, node=e)
        else:
            prim = {"append": prims.ListAppend, "extend": prims.ListExtend}.get(method)
            new = self.apply((prim or prims.ListInsert)(), lst, *args, node=e)
        self.bind(name, new)
        return result

    def sort_call(self, e) -> Node:
        """`x.sort(...)`: a JAX array's returns the sorted array; a list's (or a
        NumPy array's) sorts it in place: refused, here where the receiver is
        known to be a list, else when the program runs (`rt.sort_method`)."""
        receiver = self.expr(e.func.value)
        value = receiver.value if isinstance(receiver, Constant) else None
        if isinstance(value, (list, np.ndarray)) or (
            isinstance(receiver, Apply) and isinstance(receiver.fn.value, prims.MakeList)
        ):
            what = gast.unparse(e.func.value).strip()
            raise self.fp.unsupported(f"the in-place method call `{what}.sort(...)`", e)
        if isinstance(receiver, Constant):  # `np.sort(x)`, a module's function
            callee = self.attribute_of(receiver, "sort", e.func)
            args = [self.current(self.expr(a)) for a in e.args]
            kwargs = {k.arg: self.current(self.expr(k.value)) for k in e.keywords}
            return self.call(callee, args, kwargs, e)
        args = [self.expr(a) for a in e.args]
        kwnames = tuple(k.arg for k in e.keywords)
        kwvals = [self.expr(k.value) for k in e.keywords]
        where = self.const(self.where(e), e)
        sort = prims.LibraryCall(rt.sort_method, "_rt.sort_method", kwnames)
        return self.apply(sort, receiver, where, *args, *kwvals, node=e)

    def dict_update(self, name: str, d: Node, e) -> Node:
        """`d.update({"k": v, ...}, k2=v2)` on a plain dict: `d` rebound to
        the dict with those items assigned in order (`dict_items`); given
        another mapping, to the dict `rt.dict_updated` makes (a new one: no
        other reference sees `d`, `k_transform.frontend.mutation`)."""
        if len(e.args) > 1 or (e.args and not _literal_dict(e.args[0])):
            args = [self.expr(a) for a in e.args]
            kwnames = tuple(k.arg for k in e.keywords)
            kwvals = [self.expr(k.value) for k in e.keywords]
            update = prims.LibraryCall(rt.dict_updated, "_rt.dict_updated", kwnames)
            self.bind(name, self.apply(update, d, *args, *kwvals, node=e))
            return self.const(None, e)
        keys = [
            *(e.args[0].keys if e.args else []),
            *(gast.Constant(k.arg, None) for k in e.keywords),
        ]
        values = [*(e.args[0].values if e.args else []), *(k.value for k in e.keywords)]
        self.bind(name, self.dict_items(d, keys, values, e))
        return self.const(None, e)

    def dict_items(self, d: Node, keys, values, e) -> Node:
        """`d` with the items `keys[k]: values[k]` assigned in order, every key
        and value evaluated first, as Python evaluates a dict display."""
        parts = [(self.expr(k), self.expr(v)) for k, v in zip(keys, values, strict=True)]
        for key, value in parts:
            d = self.apply(prims.SetItem(), d, key, value, node=e)
        return d

    def dict_merge(self, left: Node, right, e) -> Node | None:
        """`left | right` and `left |= right` when `left` is a plain dict: the
        items of a display assigned in order, else the new dict `rt.dict_or`
        or `rt.dict_ior` makes (the same for `x | {...}` of any `x`); None when
        `left` is not a plain dict and `right` no display. `p |= {...}` of
        another dict is refused (in place on an object others may see)."""
        plain = effects.is_plain_dict(left, prims)
        if plain and _literal_dict(right):
            return self.dict_items(left, right.keys, right.values, e)
        augmented = isinstance(e, gast.AugAssign)
        display = isinstance(right, (gast.Dict, gast.DictComp))
        if plain or (display and not augmented):  # a new dict, or `left` after `|=`
            fn = rt.dict_ior if augmented else rt.dict_or
            call = prims.LibraryCall(fn, f"_rt.{fn.__name__}")
            return self.apply(call, left, self.expr(right), node=e)
        if display:  # `p |= {...}` of a dict another reference may see
            raise self.fp.unsupported("`|` or `|=` of dicts not written as a dict display", e)
        return None

    def check_method_effect(self, receiver: Node, e, method: str | None = None) -> None:
        """Refuse a method of a program value that may change it
        (`k_transform.frontend.effects`): an in-place method of a builtin
        container, or a method of a user class's object writing to `self`
        (`method`, or the one `e` names; `__call__` where the object is called)."""
        method = method or e.func.attr
        receiver = self.outer_value(receiver)  # (in a branch or loop body: what it receives)
        if method in MUTATING_METHODS and _may_change(method, receiver):
            raise self.fp.unsupported(f"the in-place method call `{_called_text(e)}(...)`", e)
        cls = effects.user_class_of(receiver, prims)
        where = effects.method_writes_self(cls, method) if cls is not None else None
        if where is not None:
            raise self.fp.unsupported(
                f"`{_called_text(e)}(...)`, a method of {cls.__name__} that changes its object "
                f"({where}),",
                e,
            )

    def star_function(self, arg: Node, hint: str, e) -> Node:
        """`arg` given to a transform (`kt.grad(inner)`): for the graph of a
        user function taking `*args`, the function itself, whose transform is
        made per number of arguments a call passes (as outside parsed code).
        The graph takes the `*args` tuple as one parameter: its transform took
        the first argument for that tuple (`kt.grad(inner)(*a)` under kt.jit:
        a TypeError, or a wrong value). A nested def, with no function of its
        own to transform, is refused."""
        graph = arg.value if isinstance(arg, Constant) else None
        sig = graph.signature if isinstance(graph, FuncGraph) else None
        if sig is None or sig.vararg is None:
            return arg
        if graph.python_fn is not None:
            return Constant(graph.python_fn, arg.debug, arg.hint)
        raise self.fp.unsupported(
            f"{hint}(...) of the nested function {graph.name!r}, which takes `*{sig.vararg}`", e
        )

    def concrete(self, node: Node, read_args: bool = False, depth: int = 0) -> Node | None:
        """`node` as a value concrete when the program runs, also under jax.jit,
        where it is a pure JAX computation of constants and static values
        (`jnp.ceil(0.8 * x.shape[0])`, `jnp.sqrt(2.0)`, `jnp.arange(3)`):
        each of its calls made a `prims.ConcreteCall`, for a reader that needs
        a Python value (`int(...)`, `float(...)`, `.item()`, a slice bound),
        as JAX computes it outside a jit. None where it is not one (it
        calls host code, or reads an argument and not `read_args`).

        `read_args`: the computation may read the function's arguments, as
        the reader has no gradient whatever it reads (`int(...)`, a slice
        bound): it is concrete when the arguments it reads are at run time
        (`alpha=0.8` left to its default, which no jit traces). A reader with
        a gradient (`float(...)`, `.item()`) reads no argument: there its
        value would be differentiated, which JAX refuses as well."""
        if _STATIC.is_static(node) or (isinstance(node, Constant) and _no_gradient_in(node.value)):
            return node
        if read_args and isinstance(node, Parameter):
            return node
        if depth > 32 or not isinstance(node, Apply) or node.graph is not self.graph:
            return None
        prim = getattr(node.fn, "value", None)
        if isinstance(prim, prims.ConcreteCall):
            return node
        if (
            not isinstance(prim, Primitive)
            or prim.effectful
            or prim.host
            or prim.graph_slots
            or isinstance(prim, (prims.HostValue, prims.KeywordCall))
            or (isinstance(prim, prims.MethodCall) and not _array_method(prim, node.args[0]))
            or (isinstance(prim, prims.LibraryCall) and not is_pure(prim.fn))
        ):
            return None
        args = [self.concrete(a, read_args, depth + 1) for a in node.args]
        if any(a is None for a in args):
            return None
        made = prims.ConcreteCall(prim, read_args)
        return self.graph.apply(Constant(made), *args, debug=node.debug)

    def method_call(self, receiver: Node, e) -> Node:
        args = [self.expr(a) for a in e.args]
        kwnames = tuple(k.arg for k in e.keywords)
        kwvals = [self.expr(k.value) for k in e.keywords]
        if e.func.attr == "copy" and not args and not kwvals:
            return self.apply(prims.Copy(), receiver, node=e)
        if e.func.attr == "_replace" and not args:  # a NamedTuple's
            return self.replace_fields(receiver, dict(zip(kwnames, kwvals, strict=True)), e)
        if effects.user_class_of(self.outer_value(receiver), prims) is not None:
            # an object of the user's class, made by the program: its own method
            # (`acc.add(v)`), not an array method of the same name
            prim = prims.MethodCall(e.func.attr, kwnames)
            return self.apply(prim, receiver, *args, *kwvals, node=e)
        try:
            adapted = adapt_method(
                e.func.attr, Call([receiver, *args], dict(zip(kwnames, kwvals, strict=True)))
            )
        except KTransformError as exc:  # a refused form (`x.at[i].divide(v)`)
            raise self.fp.error(exc.bare_message, e) from None
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        meaning = tensor_methods.method(e.func.attr)  # x.abs(), x.view(3, 1): MindSpore's
        if meaning is not None:
            fn = Constant(meaning, self.debug(e), meaning.__name__)
            return self.call(fn, [receiver, *args], dict(zip(kwnames, kwvals, strict=True)), e)
        prim = prims.MethodCall(e.func.attr, kwnames)
        if e.func.attr in _PYTHON_VALUE_METHODS and _array_method(prim, receiver):
            # `jnp.arange(3).tolist()` of constants: Python values also under a jit
            parts = [self.concrete(a) for a in (receiver, *args, *kwvals)]
            if all(p is not None for p in parts):
                return self.apply(prims.ConcreteCall(prim), *parts, node=e)
        return self.apply(prim, receiver, *args, *kwvals, node=e)

    def call(self, callee: Node, args: list[Node], kwargs: dict[str, Node], e) -> Node:
        if isinstance(callee, Apply) and isinstance(
            getattr(callee.fn, "value", None), prims.Vmapped
        ):
            return self.vmapped_call(callee, args, kwargs, e)
        if batching.library_result(callee, called=True) is not None:  # JAX's `grad(f)(x)`
            return self.result_call(callee, args, kwargs, e)
        parts = _partial_of_value(callee)
        if parts is not None:  # `partial(f, *bound, **kw)(*args)`: f(*bound, *args, **kw)
            fn, bound, kw = parts
            return self.call(fn, [*bound, *args], {**kw, **kwargs}, e)
        if not isinstance(callee, Constant):
            self.check_method_effect(callee, e, "__call__")  # `opt(p, g)`: `opt.__call__`
            if kwargs and not self.fp.primal_only:
                raise self.fp.unsupported("keyword arguments to a function value", e)
            if kwargs:  # bound by the names of the function it is when run
                prim = prims.KeywordCall(tuple(kwargs), _called_text(e))
                return self.apply(prim, callee, *args, *kwargs.values(), node=e)
            return self.apply(callee, *args, node=e)
        value = callee.value
        if value is lax_models.traced_once:  # in a model: its body's host code runs once
            construct, model = args[0].value, args[1].value
            graph = model if isinstance(model, FuncGraph) else self.parse(model)
            body = Constant(graph, self.debug(e), graph.name)
            return self.apply(control.TracedOnce(construct), body, *args[2:], node=e)
        if value is getattr and _constant_attribute(args, kwargs):  # getattr(jnp, "tanh")
            default = args[2] if len(args) == 3 else None  # is `jnp.tanh`
            return self.attribute_of(args[0], args[1].value, e, default)
        if value is hasattr and len(args) == 2 and _constant_attribute(args, kwargs):
            found = self.has_attribute(args[0], args[1].value, e)  # hasattr(jax.nn, "gelu")
            if found is not None:
                return self.const(found, e)
        if value is type and len(args) == 1 and not kwargs and _plain_constant(args[0]):
            return Constant(type(args[0].value), self.debug(e), "type")  # runs no user code
        if value is super and not kwargs and all(isinstance(a, Constant) for a in args):
            try:  # `super(C, self)`: made here, so `.f(x)` is C's parent's method, parsed
                return Constant(super(*[a.value for a in args]), self.debug(e), "super")
            except TypeError:
                pass  # raised when the line runs, as Python does (a LibraryCall below)
        if value is functools.partial and args and not _all_constant([*args, *kwargs.values()]):
            made = self.partial_closure(args[0], args[1:], kwargs, None, e)
            if made is not None:
                return made
            # of a function known when run, or a library's: read where it is called
            prim = prims.PartialOfValue(tuple(kwargs))
            return self.apply(prim, *args, *kwargs.values(), node=e)
        if value is functools.partial and args and _library_function(args[0]):
            # `partial(<JAX's grad>, argnums=1)`: made here (it runs no code), so
            # that its call is the library's call (`partial_call`)
            made = functools.partial(
                *[a.value for a in args], **{k: v.value for k, v in kwargs.items()}
            )
            return Constant(made, self.debug(e), callee.hint)
        if pytrees.is_replace(value) and len(args) == 1:  # dataclasses.replace(p, w=...)
            return self.replace_fields(args[0], kwargs, e)
        if kt_attribute(value, "__kt_compiles__", False) and len(args) == 1:
            if _all_constant(list(kwargs.values())):  # `kt.jit(f)(x)` in the code: f, as
                return args[0]  # `jax.jit(f)(x)` there (its options have no effect)
        if kt_attribute(value, "__kt_static__", False):  # GradOperation(), kt.grad(f), ...
            closures = [a.value for a in args if _reads_the_caller(a)]
            if closures:  # transformed on its own, it would not see the caller's values
                raise self.fp.unsupported(closure_transform(callee.hint, closures[0]), e)
            args = [self.star_function(a, callee.hint, e) for a in args]
            reads = kt_attribute(value, "__kt_reads__", None)  # what it reads of its object
            for owner, name in reads(value.__self__) if reads is not None else ():
                self.fp.guards.read_attribute(owner, name)
            if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]):
                result = value(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
                if isinstance(result, types.GeneratorType):  # (`cell.cells_and_names()`)
                    result = tuple(result)
                return Constant(result, self.debug(e), callee.hint)
            raise self.fp.unsupported(f"{callee.hint}(...) given values known only at run time", e)
        lower = kt_attribute(value, "__kt_lower__", None)
        if lower is not None:  # kt.vjp(f, x), kt.jvp(f, x, v): graphs built here
            return lower(self, args, kwargs, e)
        graph = _graph_for_call(value, args, kwargs)
        if isinstance(graph, FuncGraph):  # a gradient function or compiled program
            value, callee = graph, Constant(graph, callee.debug, callee.hint)
        if isinstance(value, FuncGraph):
            if any(_partial_of_value(a) is not None for a in args):
                args = self.model_functions(value, args, e)
            bound = self.bind_call(value, args, kwargs, e)
            self.check_changed_arguments(value, bound, e)
            result = self.apply(callee, *bound, node=e)
            result = self.thread_nonlocals(value, result, e)
            if value.closure_site is not None:
                self.note_returned_closures(value, result, e)
            return result
        if isinstance(value, types.MethodType) and value.__func__ is Cell.__call__:
            # `super().__call__(x)` in a Cell's own `__call__`: Cell's runs `construct`
            construct = self.attribute_of(Constant(value.__self__), "construct", e)
            return self.call(construct, args, kwargs, e)
        if isinstance(value, types.MethodType) and is_user_function(value.__func__):
            graph = Constant(self.parse(value), self.debug(e), callee.hint)
            return self.call(graph, args, kwargs, e)
        written = effects.library_write(value, tuple(kwargs), [*args, *kwargs.values()])
        if written is not None:
            hint = callee.hint or getattr(value, "__name__", "fn")
            raise self.fp.unsupported(f"`{hint}(...)`, which {written},", e)
        if isinstance(value, Primitive):
            if kwargs:
                raise self.fp.unsupported(f"keyword arguments to the primitive {value.name}", e)
            if hasattr(value, "specialize"):  # constant inputs that become attributes
                value, args = value.specialize(args)
            return self.apply(value, *args, node=e)
        if isinstance(value, functools.partial):
            return self.partial_call(value, args, kwargs, e)
        if jax_custom.users_custom_rule(value):
            return jax_custom.lower_custom(self, value, args, kwargs, e)
        wrapped = self.wrapped_callee(value)  # jax.jit(f) reading a Parameter, a wrapper: f
        if wrapped is not None:
            return self.call(self.fp.value_node(wrapped, callee.hint, e), args, kwargs, e)
        method = callables.user_call_method(value)
        if method is not None and is_user_function(getattr(type(value), "bprop", None)):
            graph = self.parse(method, bound_self=value)
            prim = prims.CustomBpropCall(value, graph)
            return self.apply(prim, *self.bind_call(graph, args, kwargs, e), node=e)
        if method is not None:
            graph = Constant(self.parse(method, bound_self=value), self.debug(e), callee.hint)
            return self.call(graph, args, kwargs, e)
        if isinstance(value, type) and issubclass(value, Primitive):
            if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]):
                pos = [a.value for a in args]
                instance = value(*pos, **{k: v.value for k, v in kwargs.items()})
                return Constant(instance, self.debug(e), callee.hint)
        if _library_cell(value) and all(isinstance(a, Constant) for a in [*args, *kwargs.values()]):
            # `nn.MSELoss()(z, y)`: a Cell of ours made where it is used (PyNative's
            # habit), made here; one with Parameters would be new ones at each call
            instance = value(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
            if any(True for _ in instance.parameters_and_names()):
                raise self.fp.unsupported(
                    f"`{callee.hint or value.__name__}(...)`, a Cell with Parameters, made in "
                    "code being transformed (make it in __init__)",
                    e,
                )
            return Constant(instance, self.debug(e), callee.hint)
        if value is print:
            prim = prims.Print(tuple(kwargs))
            return self.apply(prim, *args, *kwargs.values(), node=e)
        if lax_models.is_modelled(value):
            return self.model_call(value, args, kwargs, e)
        try:
            made = pytrees.constructor(value, args, kwargs)  # a NamedTuple or dataclass
        except KTransformError as exc:
            raise self.fp.error(exc.bare_message, e) from None
        if made is not None:
            return self.apply(made[0], *made[1], node=e)
        folded = fold_call(value, args, kwargs)
        if folded is not None:
            return folded
        constant = all(isinstance(a, Constant) for a in [*args, *kwargs.values()])
        exception = isinstance(value, type) and issubclass(value, BaseException)
        if exception and plain_exception(value):  # `raise MyError(f"... {x}")`
            call = prims.LibraryCall(value, callee.hint or value.__name__, tuple(kwargs))
            return self.apply(call, *args, *kwargs.values(), node=e)
        if _is_user_class(value) and (
            not constant or _holds_jax_arrays(_given_values(args, kwargs))
        ):
            # an instance holding traced values (a JAX array given to the call is
            # one: its trace holds it as an input, whose object would escape)
            raise self.fp.unsupported(f"`{callee.hint or value.__name__}(...)` of arrays", e)
        given = [*args, *kwargs.values()]
        if computes_as_python(value) and all(_STATIC.is_static(a) or _literal(a) for a in given):
            # numpy or math on Python values (`np.prod(x.shape[1:])`,
            # `math.sqrt(x.shape[-1])`, `np.array([1.0, 2.0])`) computes what
            # numpy or math does: a NumPy array of its dtype (float64), as
            # Python gives it to the code it is passed to (`y.dtype`)
            call = prims.PythonValueCall(value, callee.hint or value.__name__, tuple(kwargs))
            return self.apply(call, *given, node=e)
        adapted = adapt_function(value, Call(args, kwargs))
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        hint = callee.hint or getattr(value, "__name__", "fn")
        twin = numpy_twin(value)  # np.multiply on traced values runs as jnp.multiply
        if twin is not value and not all(
            isinstance(a, Constant) for a in [*args, *kwargs.values()]
        ):
            return self.call(Constant(twin, self.debug(e), f"jnp.{twin.__name__}"), args, kwargs, e)
        if any(value is r for r in _REFERENCE_MAKERS):
            raise self.fp.unsupported(f"a mutable array reference (`{hint}(...)`)", e)
        if not constant and _python_only(value, given):
            # JAX's tracer cannot run these on traced values it is given, but the
            # function around them may run as Python (frontend/python_code.py)
            raise self.fp.unsupported(f"`{hint}(...)` of values of the program", e)
        refused = python_code.deferred(value)
        if refused is not None:  # a user function the parser refused, now called
            rebound = self.rebinding_call(value, refused, args, kwargs, e)
            if rebound is not None:
                return rebound
            raise refused
        if python_code.reason(value) is not None:  # run as Python: may it change an argument?
            where = effects.mutated_parameters(value)
            if where is not None:
                raise self.fp.unsupported(
                    f"`{hint}(...)`, a function run as Python that changes an argument ({where}),",
                    e,
                )
        if python_code.reason(value) is not None and inspect.isgeneratorfunction(value):
            # its result is a generator, no array: the caller runs as Python too
            raise self.fp.unsupported(f"a call of the generator function {hint}", e)
        if _jax_derivative_of_computed(value, args, kwargs):
            # a JAX derivative transform (value_and_grad, hessian, ...) of a
            # function that is a parameter: at run time JAX would be given our
            # compiled form of it (in a derivative, its fprop, returning a
            # pullback: no JAX type); the caller runs as Python instead, the
            # user's own call as written, and its trace is imported
            raise self.fp.unsupported(f"`{hint}(...)` of a function known only at run time", e)
        if any(value is m for m in _TREE_MAPS) and args:  # each leaf: f(leaf, *others)
            args = [self.fixed_partial(args[0], len(args) - 1, e), *args[1:]]
        closures = [a for a in [*args, *kwargs.values()] if _holds_the_callers(a)]
        closures += [a for a in [*args, *kwargs.values()] if _computed_defaults(a)]
        library = closures and is_library_value(value)
        lifted = batching.with_closures(self, value, args, kwargs) if library else None
        if lifted is not None:  # the values they read passed to the call
            host = host_call(value, False) or python_code.reason(value) is not None
            prim = prims.LibraryCall(lifted[0], hint, (), host)
            made = self.apply(prim, *lifted[1], node=e)
            if batching.function_transform(value):  # `g = <JAX's grad>(f)`, called later
                self.note_closures_given(made, [*args, *kwargs.values()], hint, e)
            return made
        if closures:  # the library would call it apart from the values it reads
            raise self.fp.unsupported(
                f"`{hint}(...)` given `{_function_name(closures[0])}`, a function reading "
                "variables of the function calling it,",
                e,
            )
        given = [a.value for a in [*args, *kwargs.values()] if isinstance(a, Constant)]
        # code run as Python is host code, unless it is library code of ours (`ode.adjoint`)
        ours = kt_attribute(value, "__kt_library__", False)
        host = host_call(value, constant) or (python_code.reason(value) is not None and not ours)
        host = host or any(python_code.deferred(v) is not None for v in given)
        prim = prims.LibraryCall(value, hint, tuple(kwargs), host)
        made = self.apply(prim, *args, *kwargs.values(), node=e)
        if batching.function_transform(value):  # of a closure over constants
            self.note_closures_given(made, [*args, *kwargs.values()], hint, e)
        return made

    def result_call(self, callee: Apply, args, kwargs, e) -> Node:
        """JAX's `grad(f)(x)` where `grad(f)` is a library call given values
        of the program (`f` a closure over them, `batching.with_closures`;
        `value_and_grad`, `jacrev`, ...): one library call of both
        (`batching.result_called`), differentiated again through its jaxpr."""
        inner = callee.fn.value
        fn = batching.result_called(inner, len(callee.args))
        prim = prims.LibraryCall(fn, f"{inner.hint}(...)", tuple(kwargs))
        return self.apply(prim, *callee.args, *args, *kwargs.values(), node=e)

    def model_call(self, value, args, kwargs, e) -> Node:
        """`lax.scan(f, ...)`, `lax.cond(...)`, `jax.vmap(f)`, ...: a call of the
        Python model of the function (`k_transform.frontend.lax_models`)."""
        if any(value is f for f in lax_models.SAME_VALUES):
            if not args:
                raise self.fp.error(f"{value.__name__}(f) expected", e)
            return args[0]
        if value is jnp.apply_along_axis:
            if len(args) != 3 or kwargs:
                raise self.fp.error("jnp.apply_along_axis(func1d, axis, arr) expected", e)
            made = batching.along_axis(self, args[0], args[1])
            if made is not None:  # batched (`frontend.batching`)
                fn, read = made
                hint = f"jnp.apply_along_axis({getattr(args[0], 'hint', '') or 'func1d'})"
                return self.apply(prims.LibraryCall(fn, hint), *read, args[2], node=e)
            model = Constant(self.parse(lax_models.apply_along_axis), self.debug(e), "model")
            return self.call(model, args, {}, e)
        if value is jax.lax.cond:
            if "operand" in kwargs:  # the old `cond(pred, t, f, operand=x)` form
                kwargs = dict(kwargs)
                args = [*args, kwargs.pop("operand")]
            if len(args) < 3 or kwargs:
                raise self.fp.error("lax.cond(pred, true_fun, false_fun, *operands) expected", e)
            model = lax_models.cond_model(len(args) - 3)
            branches = [self.fixed_partial(b, len(args) - 3, e) for b in args[1:3]]
            args = [args[0], *branches, *args[3:]]
            if self.may_call_host(args[1:3]):
                model = lax_models.traced_branches_model("lax.cond", 2, len(args) - 3)
        elif value is jax.lax.switch:
            if len(args) < 2 or kwargs:
                raise self.fp.error("lax.switch(index, branches, *operands) expected", e)
            branches = self.items_of(args[1], "the branches of lax.switch", e)
            branches = [self.fixed_partial(b, len(args) - 2, e) for b in branches]
            model = lax_models.switch_model(len(branches), len(args) - 2)
            if self.may_call_host(branches):
                n = len(branches)
                model = lax_models.traced_branches_model("lax.switch", n, len(args) - 2)
            args = [args[0], *branches, *args[2:]]
        else:  # jax.vmap(fun, in_axes=0, out_axes=0, ...): a value called later
            if id(e) not in _called(self) and _names_only(e.args[:1]):
                # passed on or returned (jax-md's `map_product`): the function
                # `lambda *a: jax.vmap(fun, ...)(*a)`, which the callers parse
                return self.expr(_eta_expanded(e))
            options = {k: v for k, v in kwargs.items() if k not in ("in_axes", "out_axes")}
            static = [_known(a) for a in [*args[1:], *kwargs.values()]]
            if not args or any(v is _UNKNOWN for v in static):
                raise self.fp.error(
                    "jax.vmap(fun, in_axes, out_axes) with constant axes expected", e
                )
            in_axes = _known(kwargs["in_axes"]) if "in_axes" in kwargs else 0
            in_axes = _known(args[1]) if len(args) > 1 else in_axes
            out_axes = _known(kwargs["out_axes"]) if "out_axes" in kwargs else 0
            out_axes = _known(args[2]) if len(args) > 2 else out_axes
            if isinstance(in_axes, list):
                in_axes = tuple(in_axes)
            if isinstance(in_axes, dict):  # JAX's TypeError too
                raise self.fp.error(
                    "jax.vmap in_axes must be an int, None or a tuple with an entry per "
                    f"positional argument, not the dict {in_axes!r} (write `in_axes=({{...}},)`)",
                    e,
                )
            prim = prims.Vmapped(in_axes, out_axes, tuple(sorted(options)))
            return self.apply(prim, args[0], node=e)
        graph = Constant(self.parse(model), self.debug(e), model.__name__)
        return self.call(graph, args, kwargs, e)

    def may_call_host(self, functions: list[Node]) -> bool:
        """Whether calling one of `functions` may run host code (a function
        known only at run time, or run as Python, may)."""
        for f in functions:
            graph = self.callee_graph(f)
            if graph is not None:
                if graph.may_call_host():
                    return True
                continue
            value = f.value if isinstance(f, Constant) else None
            if not (is_library_value(value) and not host_call(value, False)):  # `jnp.sin`
                return True
        return False

    def vmapped_call(self, callee: Apply, args, kwargs, e) -> Node:
        """`jax.vmap(fun, in_axes, out_axes)(*args)`: one batched library call
        (`frontend.batching`), or the loop its model writes."""
        vm, fun = callee.fn.value, self.current(callee.args[0])  # as Python reads it now
        if kwargs:
            raise self.fp.error("keyword arguments to a jax.vmap function are not supported", e)
        fun = self.fixed_partial(fun, len(args), e)
        made = None
        if not vm.options:
            made = batching.batched(self, fun, vm.in_axes, vm.out_axes, len(args))
        if made is not None:
            mapped, read = made
            hint = f"jax.vmap({getattr(fun, 'hint', '') or 'fun'})"
            return self.apply(prims.LibraryCall(mapped, hint), *read, *args, node=e)
        try:
            axes = lax_models.vmap_axes(
                vm.in_axes, vm.out_axes, len(args), dict.fromkeys(vm.options)
            )
        except KTransformError as exc:
            raise self.fp.error(exc.bare_message, e) from None
        model = lax_models.vmap_model(axes)
        graph = Constant(self.parse(model), self.debug(e), model.__name__)
        return self.call(graph, [fun, *args], {}, e)

    def model_functions(self, graph: FuncGraph, args: list[Node], e) -> list[Node]:
        """`args` of a call of `graph`, where it is the model of `lax.scan`,
        `lax.map`, `lax.while_loop` or `lax.fori_loop`, with each partial of a
        function known when run (`prims.PartialOfValue`) given as the def of
        as many parameters as the model calls it with (`fixed_partial`)."""
        for model, slots in lax_models.FUNCTION_ARITIES.items():
            if self.parse(model) is graph:
                return [
                    self.fixed_partial(a, slots[k], e) if k in slots else a
                    for k, a in enumerate(args)
                ]
        return args

    def fixed_partial(self, node: Node, arity: int, e) -> Node:
        """`node`, or where it is `partial(f, *bound, **kw)` of a function `f`
        known only when run, called with `arity` positional arguments: `def
        f_partial(a0, ...): return f(*bound, a0, ..., **kw)`, a def the
        program can pass on (a `lax` model's body, `jax.vmap`'s function)."""
        parts = _partial_of_value(node)
        if parts is None:
            return node
        fn, bound, kw = parts
        f = self.hidden_name(fn)
        b = self.hidden_name(self.apply(prims.MakeTuple(), *bound, node=e))
        d = self.hidden_name(
            self.apply(
                prims.MakeDict(), *[x for k, v in kw.items() for x in (self.const(k, e), v)], node=e
            )
        )
        params = ", ".join(f"_kt_a{k}" for k in range(arity))
        name = f"{fn.debug.name or 'fn'}_partial" if isinstance(fn, Parameter) else "fn_partial"
        lines = [
            f"def {name}({params}):",
            f"    return {f}(*{b}, {params}{', ' if params else ''}**{d})",
        ]
        fdef = sugar.written_at(lines, e)
        return self.built_now(fdef)

    def items_of(self, node: Node, what: str, e) -> list[Node]:
        """The items of a tuple or list known while parsing."""
        if isinstance(node, Constant) and isinstance(node.value, (tuple, list)):
            return [self.fp.value_node(v, f"item{k}", e) for k, v in enumerate(node.value)]
        if isinstance(node, Apply) and isinstance(node.fn.value, (prims.MakeTuple, prims.MakeList)):
            return list(node.args)
        raise self.fp.error(f"{what} must be a tuple or list written at the call", e)

    def partial_closure(
        self, fn: Node, bound: list[Node], kw: dict, rest: Node | None, e, like=None
    ):
        """`functools.partial(f, *bound, **kw)` (`**rest`: a dict whose keys are
        known when run) of a user function `f`, with values of the program:
        the closure `def f_partial(<f's parameters after bound>): return
        f(*bound, <them>, **kw)`, a parameter with a default passed on only
        where the call gives it (else `kw` or `f`'s default fills it, as in
        Python); `f` takes the parameters of the graph `like` where given.
        None for any other `f` (one with `*args`), which stays a library call."""
        graph = like if like is not None else self.callee_graph(fn)
        sig = graph.signature if graph is not None else None
        positional = sig.positional if sig is not None else graph and graph.param_names
        if positional is None or (sig is not None and sig.vararg) or len(bound) > len(positional):
            return None
        names = list(positional[len(bound) :])
        if any(n in kw for n in names):  # filled by keyword from then on, as in Python
            names = names[: min(names.index(n) for n in names if n in kw)]
        required = [n for n in names if graph.defaults.get(n) is None]
        optional = names[len(required) :]
        absent = self.hidden_name(Constant(ABSENT, hint="absent"))
        f = self.hidden_name(fn)
        b = self.hidden_name(self.apply(prims.MakeTuple(), *bound, node=e))
        d = self.hidden_name(
            rest
            if rest is not None
            else self.apply(
                prims.MakeDict(), *[x for k, v in kw.items() for x in (self.const(k, e), v)], node=e
            )
        )
        params = ", ".join([*required, *(f"{n}={absent}" for n in optional)])
        lines = [f"def {graph.name}_partial({params}):", "    _kt_acc = ()"]
        for k, n in enumerate(optional):  # Python fills them in order
            earlier = " or ".join(f"{m} is {absent}" for m in optional[:k]) or "False"
            lines += [
                f"    if {n} is not {absent}:",
                f"        if {earlier}:",
                f"            raise TypeError('{graph.name}_partial() given {n} but not the "
                "parameters before it: k_transform passes them by position')",
                f"        _kt_acc = ({', '.join(optional[: k + 1])},)",
            ]
        lines.append(f"    return {f}(*{b}, {''.join(n + ', ' for n in required)}*_kt_acc, **{d})")
        fdef = sugar.written_at(lines, e)
        return self.built_now(fdef)

    def passable(self, node: Node, e) -> Node:
        """`node`, a function passed on or returned instead of called where it
        is made, as a closure that the function it reaches can call:

        - the function JAX's `grad(f)` (`jacrev`, `hessian`, ...) returns, `f`
          a closure over the caller's values, or `jax.vmap(f)`: `def
          f_partial(<f's parameters>): return node(<them>)`, each call of
          which is one library call with the call that made it
          (`result_call`, `vmapped_call`), as where it is made; Python's
          function would hold those values, as it does;
        - a nested function whose defaults the caller computes (`lambda r,
          s=scale: ...`): `defaults_read`.
        """
        if e is None:
            return node
        like = batching.returned_function_parameters(node)
        if isinstance(node, Apply) and isinstance(getattr(node.fn, "value", None), prims.Vmapped):
            fun = node.args[0]  # `jax.vmap(f)` takes `f`'s parameters
            like = self.callee_graph(fun) or batching.returned_function_parameters(fun)
        if like is not None:
            made = self.partial_closure(node, [], {}, None, e, like=like)
            return node if made is None else made
        if _computed_defaults(node):
            sig = node.value.signature
            if sig is None or (sig.vararg is None and sig.kwarg is None):
                return self.defaults_read(node, e)
        return node

    def defaults_read(self, fn: Constant, e) -> Node:
        """`def f_defaults(<f's parameters>)`, calling the nested function `f`
        with its parameters, where `f` has defaults the caller computes
        (`batching.dynamic_defaults`): one of those left out is read from the
        value computed where `f` is made, as a closure reads a variable (its
        gradient flows there), where a call of `f` the parser binds passes it.
        A function called where the program runs takes only constant
        defaults."""
        graph, dynamic = fn.value, batching.dynamic_defaults(fn.value)
        absent, f = self.hidden_name(Constant(ABSENT, hint="absent")), self.hidden_name(fn)
        kwonly = graph.signature.kwonly if graph.signature is not None else []
        params, reads = [], []
        for name in graph.param_names:
            default = graph.defaults.get(name)
            if name == (kwonly or [None])[0]:
                params.append("*")
            if name in dynamic:
                params.append(f"{name}={absent}")
                reads += [
                    f"    if {name} is {absent}:",
                    f"        {name} = {self.hidden_name(default)}",
                ]
            else:
                params.append(name if default is None else f"{name}={self.hidden_name(default)}")
        given = [n if n not in kwonly else f"{n}={n}" for n in graph.param_names]
        lines = [f"def {graph.name}_defaults({', '.join(params)}):", *reads]
        lines.append(f"    return {f}({', '.join(given)})")
        return self.built_now(sugar.written_at(lines, e))

    def partial_call(self, p: functools.partial, args, kwargs, e) -> Node:
        """`functools.partial(f, *bound, **kw)(*args, **kwargs)` is
        `f(*bound, *args, **{**kw, **kwargs})`; the bound values are constants."""
        name = getattr(p.func, "__name__", "fn")
        fn = self.fp.value_node(p.func, name, e)
        bound = [self.fp.value_node(v, f"{name}_arg{k}", e) for k, v in enumerate(p.args)]
        keywords = {k: self.fp.value_node(v, k, e) for k, v in p.keywords.items()}
        return self.call(fn, [*bound, *args], {**keywords, **kwargs}, e)

    def replace_fields(self, receiver: Node, kwargs: dict[str, Node], e) -> Node:
        """`receiver` with the fields `kwargs` replaced (`_replace`, `dataclasses.replace`).
        A dataclass JAX does not know as a pytree is an opaque object: replaced
        as Python replaces it (a new instance), from values known while parsing."""
        if isinstance(receiver, Constant) and pytrees.opaque_dataclass(receiver.value):
            if not all(isinstance(v, Constant) for v in kwargs.values()):
                raise self.fp.unsupported(
                    "dataclasses.replace() of a dataclass that is not a pytree, "
                    "with values of the program",
                    e,
                )
        values = self.apply(prims.MakeTuple(), *kwargs.values(), node=e)
        return self.apply(prims.ReplaceFields(tuple(kwargs)), receiver, values, node=e)

    def callee_graph(self, callee: Node) -> FuncGraph | None:
        """The graph a call of `callee` runs: a user function, method or Cell."""
        value = callee.value if isinstance(callee, Constant) else None
        if kt_attribute(value, "__kt_graph_for__", None) is not None:
            return None  # the gradient of a `*args` function: made per number of arguments
        graph = kt_attribute(value, "__kt_graph__", None)
        if isinstance(value, FuncGraph) or isinstance(graph, FuncGraph):
            return value if isinstance(value, FuncGraph) else graph
        if isinstance(value, types.MethodType) and is_user_function(value.__func__):
            return self.parse(value)
        if hasattr(type(value), "__kt_lower__"):  # our API's object: lowered where called
            return None
        method = callables.user_call_method(value)
        if method is not None and not is_user_function(getattr(type(value), "bprop", None)):
            return self.parse(method, bound_self=value)
        if isinstance(value, functools.partial):
            return self.parse(value)
        wrapped = self.wrapped_callee(value)
        return None if wrapped is None else self.parse(wrapped)

    def wrapped_callee(self, value):
        """What a call of the wrapper `value` reads instead
        (`callables.wrapped_target`), or None. A wrapper JAX traces once
        (`callables.traces_once`: `jax.jit(f)`) is called as it is, unless
        `f` reads or assigns a Parameter: in JAX's trace a Parameter would be
        a constant, without its gradient, so `f` is parsed (its Python then
        runs where the call runs)."""
        inner = callables.wrapped_target(value)
        if inner is None or callables.wrapped_target(value, call=True) is not None:
            return inner
        try:
            graph = self.parse(inner)
        except KTransformError:
            return None
        return inner if _uses_parameters(graph) else None

    def rebinding_call(self, fn, refused: KTransformError, args, kwargs, e) -> Node | None:
        """`d = f(..., d, ...)` where user function `f` writes into the
        parameter `d` is bound to and returns it (`refused` names it), `d`
        a dict this function made that no other name sees
        (`mutation.Shared.rebinds`): Python changes that dict and binds `d`
        to it again, so no reference sees it unchanged; `f` is parsed with
        the write made functional. None where that does not hold."""
        written = getattr(refused, "written_parameter", None)
        function = self
        while function.closed:
            function = function.parent
        key = (getattr(e, "lineno", None), getattr(e, "col_offset", None))
        entry = function.shared.rebinds.get(key)
        if written is None or entry is None:
            return None
        name, required = entry
        if not all(k in function.rebound_by_writers for k in required):
            return None  # an earlier `d = g(d)` may have bound `d` to another object
        try:
            graph = self.parse(fn, writable=(written,))
        except KTransformError:
            return None
        if written not in (graph.param_names or ()) or graph.signature is not None:
            return None
        given = [*e.args, *(k.value for k in e.keywords)]
        at = [k for k, a in enumerate(given) if isinstance(a, gast.Name) and a.id == name]
        values = [*args, *kwargs.values()]
        if len(at) != 1 or len(values) != len(given):  # (`*args` spread: not this form)
            return None
        bound = self.bind_call(graph, args, kwargs, e)
        if bound[graph.param_names.index(written)] is not values[at[0]]:
            return None  # `d` given for another parameter
        self.check_changed_arguments(graph, bound, e)
        function.rebound_by_writers.add(key)
        hint = getattr(fn, "__name__", "fn")
        return self.apply(Constant(graph, self.debug(e), hint), *bound, node=e)

    def check_changed_arguments(self, graph: FuncGraph, bound: list[Node], e) -> None:
        """Refuse a call passing an object `graph` would change in place (its
        `changed_parameters`), which the caller would not see change; a
        parameter of the caller passed on makes the caller's own."""
        if not graph.changed_parameters or graph.param_names is None:
            return
        function = self
        while function.closed:
            function = function.parent
        for name, arg in zip(graph.param_names, bound, strict=False):
            if name not in graph.changed_parameters:
                continue
            condition, where, owner = graph.changed_parameters[name]
            if condition == "not None" and isinstance(arg, Constant) and arg.value is None:
                continue
            if condition != "not None" and isinstance(arg, Parameter):
                if arg.graph is function.graph:
                    entry = (condition, where, function.graph.name)
                    effects.note_change(function.graph, arg.name, entry)
                continue
            if condition != "not None" and not _may_change(condition, arg):
                continue
            raise self.fp.unsupported(
                f"`{owner}(...)` given for {name!r} an object it changes in place, "
                f"{where}, which k_transform would not show the caller,",
                e,
            )

    def bind_call(self, graph: FuncGraph, args, kwargs, e) -> list[Node]:
        """Positional and keyword arguments matched to `graph`'s parameters."""
        names = graph.param_names
        if graph.signature is not None:
            return self.bind_signature(graph, args, kwargs, e)
        if names is None:  # a graph still being parsed (recursion): positional only
            if kwargs:
                raise self.fp.unsupported("keyword arguments in a recursive call", e)
            return args
        if len(args) > len(names):
            raise self.fp.error(
                f"{graph.name}() takes {len(names)} arguments but {len(args)} were given", e
            )
        bound = dict(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k not in names or k in bound:
                raise self.fp.error(f"{graph.name}() got an unexpected keyword {k!r}", e)
            bound[k] = v
        out = []
        for name in names:
            if name in bound:
                out.append(bound[name])
            elif name in graph.defaults:
                out.append(self.current(graph.defaults[name]))
            else:
                raise self.fp.error(f"{graph.name}() missing argument {name!r}", e)
        return out


def _takes_mutation(method: str, receiver: Node) -> bool:
    """Whether `name.method(...)` is modelled or refused as a mutation of
    `name`: the list methods and the in-place array methods whatever `name`
    holds; the other mutating names (`update`, `add`) on a builtin container
    (else a method of an object, `acc.add(x)`: `check_method_effect`)."""
    modelled = (*LIST_MUTATORS, *effects.IN_PLACE_METHODS)
    return method in modelled or effects.mutable_builtin(receiver, prims)


def _may_change(method: str, receiver: Node) -> bool:
    """Whether `receiver.method(...)`, a method changing a builtin container
    in place (`update`, `add`, ...; not modelled here), may change it: where
    it is a builtin container, may be one (`d.copy()` of a dict, a library
    call's result: `mutability.may_be_mutable`), or is a value the parser
    does not know (a parameter: a dict the caller passed)."""
    if effects.mutable_builtin(receiver, prims) or mutability.may_be_mutable(receiver, prims):
        return True
    # (`x.add(y)` of a MindSpore Tensor argument is its sum, not a set's add)
    tensor_method = method in tensor_methods.METHODS
    return isinstance(receiver, Parameter) and method in REFUSED_MUTATORS and not tensor_method


def _plain_constant(node: Node) -> bool:
    """A constant that is the Python object it holds (not a parsed function)."""
    return isinstance(node, Constant) and not isinstance(node.value, FuncGraph)


def _literal_dict(e) -> bool:
    """A dict display without `**` unpacking: its keys are known one by one."""
    return isinstance(e, gast.Dict) and all(k is not None for k in e.keys)


def _called_text(e) -> str:
    return gast.unparse(e.func).strip()


def _array_method_of_parameter(receiver: Constant, e) -> bool:
    """`self.w.sum()`, `self.w.abs()`: a method of a Parameter's value (read
    at run time, differentiated), not of the Parameter object (`set_data`)."""
    value = receiver.value
    return kt_attribute(value, "__kt_parameter__", False) and not hasattr(type(value), e.func.attr)


def _uses_parameters(graph: FuncGraph) -> bool:
    """Whether `graph` (or a graph it reaches) reads or assigns a Parameter."""
    for g in graph.reachable():
        for node in g.used_nodes():
            value = node.value if isinstance(node, Constant) else None
            if isinstance(value, Weight) or (isinstance(value, Primitive) and value.parameters()):
                return True
    return False


def _library_cell(value) -> bool:
    """A Cell class of k_transform's (`nn.MSELoss`): its `__init__` is ours."""
    return (
        isinstance(value, type)
        and issubclass(value, Cell)
        and value.__module__.startswith("k_transform.")
    )


def _given_values(args: list, kwargs: dict) -> list:
    """The values of a call's constant arguments."""
    return [a.value for a in [*args, *kwargs.values()] if isinstance(a, Constant)]


def _holds_jax_arrays(values: list) -> bool:
    """Whether a JAX array is among `values` or their tuples, lists and dicts."""
    return any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(values))


def _is_user_class(value) -> bool:
    """A class of the user's (not a library's, not a builtin)."""
    module = getattr(value, "__module__", "") if isinstance(value, type) else "builtins"
    return module != "builtins" and not is_library_value(value)


def closure_transform(api: str, closure: FuncGraph) -> str:
    """The construct a transform (`kt.grad`, `kt.vjp`, ...) of a closure over
    the caller's variables is, in code being transformed: refused by the
    parser, so the caller runs as Python (`python_code`)."""
    names = ", ".join(sorted({n.debug.name or "?" for n in closure.free_variables()}))
    return (
        f"{api} of `{closure.name}`, a function that reads variables of the function "
        f"calling it ({names}; pass them as arguments)"
    )


_UNKNOWN = object()


def called_here(builder, e) -> None:
    """Note that the expression `e` is called where it is written
    (`jax.vmap(f)(x)`, or bound to a name and called later in the same
    function), not passed on."""
    _called(builder).add(id(e))


def _called(builder) -> set[int]:
    if not hasattr(builder, "_called_here"):
        builder._called_here = set()
    return builder._called_here


def _names_only(nodes) -> bool:
    """Whether each expression only reads names (`f`, `self.f`, `vmap(f, 0)`,
    a lambda): evaluated again at each call, it means the same."""
    for node in nodes:
        if isinstance(node, gast.Lambda):
            continue
        if isinstance(node, gast.Call):
            if not _names_only([node.func, *node.args, *(k.value for k in node.keywords)]):
                return False
            continue
        if not all(isinstance(n, _READS) for n in gast.walk(node)):
            return False
    return True


_READS = (gast.Name, gast.Attribute, gast.Constant, gast.Tuple, gast.List, gast.Load)


def _eta_expanded(e) -> gast.Lambda:
    """`lambda _kt_v0, ..., _kt_vn: <e>(_kt_v0, ..., _kt_vn)` at `e`'s place,
    one parameter per item of a literal `in_axes`, else `lambda *_kt_v: <e>(*_kt_v)`."""
    in_axes = e.args[1] if len(e.args) > 1 else None
    in_axes = next((k.value for k in e.keywords if k.arg == "in_axes"), in_axes)
    if isinstance(in_axes, (gast.Tuple, gast.List)):
        names = [f"_kt_v{k}" for k in range(len(in_axes.elts))]
        params, vararg = [gast.Name(n, gast.Param(), None, None) for n in names], None
        passed = [gast.Name(n, gast.Load(), None, None) for n in names]
    else:
        params, vararg = [], gast.Name("_kt_v", gast.Param(), None, None)
        passed = [gast.Starred(value=gast.Name("_kt_v", gast.Load(), None, None), ctx=gast.Load())]
    args = gast.arguments(
        args=params,
        posonlyargs=[],
        vararg=vararg,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    body = gast.Call(func=e, args=passed, keywords=[])
    lam = gast.Lambda(args=args, body=body)
    for node in gast.walk(lam):
        if node is not e and not _within(node, e):
            gast.copy_location(node, e)
            node.end_lineno, node.end_col_offset = e.end_lineno, e.end_col_offset
    return lam


def _within(node, e) -> bool:
    return any(node is n for n in gast.walk(e))


def computes_as_python(fn) -> bool:
    """Whether `fn` (a numpy or `math` function, `abs`, `round`) given only
    Python values (shapes, ints) computes what Python computes, not a traced
    array: `round(math.sqrt(x.shape[-1]))` can be a shape."""
    in_math = getattr(fn, "__module__", None) == "math"
    return numpy_twin(fn) is not fn or in_math or fn is abs or fn is round


def _no_gradient_in(value, depth: int = 0) -> bool:
    """A constant with no gradient: no graph, Cell or `kt.Parameter` (whose
    value is differentiated: `float(self.w.sum())` stays refused)."""
    if isinstance(value, (tuple, list)):
        return depth < 8 and all(_no_gradient_in(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return depth < 8 and all(_no_gradient_in(v, depth + 1) for v in value.values())
    return not (
        isinstance(value, (FuncGraph, Cell)) or kt_attribute(type(value), "__kt_parameter__", False)
    )


def _graph_for_call(value, args: list, kwargs: dict):
    """The graph a call of `value` with `args` runs (`__kt_graph__`); for the
    gradient of a `*args` function called with positional arguments, its
    graph for that many (`__kt_graph_for__`), as a call of it runs: the
    generic graph takes the `*args` tuple as one parameter, which a call
    binding its arguments one by one filled with the first argument's value
    (`kt.grad(inner)(*a)` under kt.jit: TypeError, or a wrong value)."""
    graph_for = kt_attribute(value, "__kt_graph_for__", None)
    if graph_for is not None and not kwargs:
        spec = getattr(value, "spec", None)  # a GradOperation's `sens` is no `*args` value
        return graph_for(len(args) - int(bool(getattr(spec, "sens_param", False))))
    return kt_attribute(value, "__kt_graph__", None)


def _array_method(prim, receiver: Node) -> bool:
    """`a.max()` of an array computed, or held as a constant: no method of a
    user's object, nor one changing its receiver."""
    if prim.method in MUTATING_METHODS:
        return False
    if isinstance(receiver, Constant):
        return isinstance(receiver.value, (jax.Array, np.ndarray, np.generic))
    return isinstance(receiver, Apply)


def static_inputs(args) -> bool:
    """Whether all of `args` are Python values when the code runs (`x.shape[0]`)."""
    return all(_STATIC.is_static(a) for a in args)


def _known(node):
    """The value of a constant, or of a tuple, list or dict literal of them
    (`in_axes=[0, None]`, `in_axes=({"w": None, "b": 0}, 0)`); `_UNKNOWN` otherwise."""
    if isinstance(node, Constant):
        return node.value
    prim = getattr(node.fn, "value", None) if isinstance(node, Apply) else None
    if isinstance(prim, (prims.MakeTuple, prims.MakeList, prims.MakeDict)):
        items = [_known(a) for a in node.args]
        if any(v is _UNKNOWN for v in items):
            return _UNKNOWN
        if isinstance(prim, prims.MakeDict):
            return dict(zip(items[0::2], items[1::2], strict=True))
        return tuple(items) if isinstance(prim, prims.MakeTuple) else items
    return _UNKNOWN


def _partial_of_value(node: Node):
    """`(f, bound, kw)` where `node` is `functools.partial(f, *bound, **kw)` of
    a function known only when run (`prims.PartialOfValue`), else None."""
    prim = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    if not isinstance(prim, prims.PartialOfValue):
        return None
    n = len(node.args) - len(prim.kwnames)
    kw = dict(zip(prim.kwnames, node.args[n:], strict=True))
    return node.args[0], list(node.args[1:n]), kw


def _literal(node) -> bool:
    """Whether `node` is a Python value written in the program: a constant or
    a tuple, list or dict display of them (`[1.0, 2.0]`), arrays in none."""
    return _plain_literal(_known(node))


def _plain_literal(value) -> bool:
    if isinstance(value, dict):
        return all(_plain_literal(k) and _plain_literal(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain_literal(v) for v in value)
    return value is not _UNKNOWN and is_plain(value)


def _constant_attribute(args, kwargs) -> bool:
    """`getattr(obj, "name")` (`hasattr`, `getattr(obj, "name", default)`)
    with both known while parsing (a module, a class, an object the program
    holds): the attribute read `obj.name`."""
    return (
        not kwargs
        and len(args) in (2, 3)
        and all(isinstance(a, Constant) for a in args[:2])
        and isinstance(args[1].value, str)
        and not isinstance(args[0].value, FuncGraph)
    )


# JAX's own function transforms (named so: this package never calls them),
# given the function they transform as their first argument or `fun=`.
_JAX_DERIVATIVES = frozenset(
    ("grad", "value_and_grad", "hessian", "jacfwd", "jacrev", "jacobian", "jvp", "vjp")
    + ("linearize", "linear_transpose", "checkpoint", "remat")
)


def _jax_derivative_of_computed(value, args: list, kwargs: dict) -> bool:
    """Whether `value(*args, **kwargs)` is one of JAX's derivative transforms
    given a function known only at run time (not a constant of the graph)."""
    module = getattr(value, "__module__", None) or ""
    if not module.startswith("jax.") or getattr(value, "__name__", None) not in _JAX_DERIVATIVES:
        return False
    fn = args[0] if args else kwargs.get("fun")
    return fn is not None and not isinstance(fn, Constant) and not _holds_the_callers(fn)


def _reads_the_caller(node) -> bool:
    """Whether `node` is a closure graph reading variables of enclosing graphs."""
    graph = node.value if isinstance(node, Constant) else None
    return (
        isinstance(graph, FuncGraph) and graph.parent is not None and bool(graph.free_variables())
    )


def _computed_defaults(node) -> bool:
    """Whether `node` is a nested function whose defaults the caller computes
    (`lambda p, x=x: ...`): given to a library, those values are its inputs,
    as a closure's are (`batching.with_closures`)."""
    graph = node.value if isinstance(node, Constant) else None
    return isinstance(graph, FuncGraph) and bool(batching.dynamic_defaults(graph))


def _holds_the_callers(node) -> bool:
    """Whether `node` is a function holding values of the caller: a closure
    reading them, or what a library call given them returns
    (JAX's `grad(closure)`, `batching.library_result`)."""
    return _reads_the_caller(node) or batching.library_result(node) is not None


def _may_change(condition: str, arg: Node) -> bool:
    """Whether a change of a parameter under `condition` (`effects.note_change`)
    may change the object `arg` is."""
    own = condition != "items" and mutability.may_be_mutable(arg, prims)
    return own or (condition != "mutable" and mutability.items_may_be_mutable(arg, prims))


def _library_function(node: Node) -> bool:
    """Whether `node` is a library's function (`jax.vmap`, `jnp.sum`), known while parsing."""
    value = node.value if isinstance(node, Constant) else None
    return callable(value) and is_library_value(value) and not isinstance(value, type)


def _function_name(node) -> str:
    if isinstance(node, Constant):
        return node.value.name
    return f"{node.fn.value.hint}(...)"


class _Absent:
    """The default of a parameter a `partial_closure` passes on only if given."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def _all_constant(nodes) -> bool:
    return all(isinstance(a, Constant) for a in nodes)
