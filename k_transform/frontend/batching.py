"""`jax.vmap(fun, ...)(*args)`, `jnp.apply_along_axis`, library calls given closures.

The call becomes one library call of `jax.vmap` applied to the Python code
generated from `fun`'s graph, closure-converted (`ir.lift`): the values the
closure reads from its enclosing function are passed as extra arguments,
mapped over no axis (`in_axes` None). At trace time the call is imported
from its jaxpr like any library call (`frontend.jaxpr`), so the forward
pass and every order of derivative run as XLA's batched operations, and
the gradients of the values it read are summed over the batch as they are
in JAX. `jax.vmap` is JAX's batching, not its differentiation.

A library call given such a closure (JAX's `grad(f)`, `f` reading the
caller's values) returns a function holding those values: `jax.vmap` of it,
a call of it (`result_called`) or a JAX transform of it (`grad(grad(f))`)
is one library call with the call that made it, its inputs first, so that
the function is made and used inside one trace. k_transform calls no JAX
derivative itself: the user's own call runs as written, like any library
call of a plain function, and the jaxpr it leaves is what our rules
differentiate.

`fun` runs as k_transform parsed it (its generated code), so its Python
runs once per trace, as under `jax.vmap`; a gradient function or compiled
program (`kt.grad(loss)`: per-example gradients) is batched through its
graph, a library's function (`jnp.sin`) as it is. A function that reads or
writes a Parameter, runs host code or has effects (it would run once, its
reads folded into the trace), or calls a closure of its enclosing function
(`ir.lift` does not copy it) or a function it reads from it (a function
value, known when the program runs), stays the sequential model of
`frontend.lax_models.vmap_model`; so do a function value known only when
the program runs, a user's callable object, and a function with a rule of
its own (a JAX custom_jvp defined in the function: its trace would lose it).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from k_transform.codegen.compile import compile_graph
from k_transform.context import TRANSFORM
from k_transform.frontend.source import is_library_value, is_user_function
from k_transform.ir.lift import lifted
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.protocol import kt_attribute


def batched(builder, fun: Node, in_axes, out_axes, n_args: int):
    """`(batched function, the values it reads)` for `jax.vmap(fun, ...)`
    called with `n_args` arguments: called as `batched(*read, *args)`; None
    where the call stays the model."""
    made = converted(builder, fun)
    if made is None:
        return None
    fn, free = made
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n_args
    if len(axes) != n_args:
        return None  # JAX's own error, from the model
    mapped = jax.vmap(fn, in_axes=(*[None] * len(free), *axes), out_axes=out_axes)
    # (JAX's wrapper takes `fn`'s module, ours where `fn` binds computed defaults)
    mapped.__kt_library__ = True  # differentiated through its jaxpr, as JAX's
    return mapped, free


def along_axis(builder, fun: Node, axis: Node):
    """`(function, the values it reads)` for `jnp.apply_along_axis(fun, axis,
    arr)`, called as `function(*read, arr)` (JAX maps it with `vmap`); None
    where the call stays the model."""
    made = converted(builder, fun)
    if made is None or not isinstance(axis, Constant) or not isinstance(axis.value, int):
        return None
    fn, free = made
    n, k = len(free), axis.value

    def apply_along_axis(*values):
        read, arr = values[:n], values[n]
        return jnp.apply_along_axis(lambda row: fn(*read, row), k, arr)

    apply_along_axis.__kt_library__ = True  # differentiated through its jaxpr, as JAX's
    return apply_along_axis, free


def with_closures(builder, value, args: list[Node], kwargs: dict[str, Node]):
    """`(function, inputs)` for a library call `value(*args, **kwargs)` given
    closures over the caller's values (`jax.tree.map(lambda g: lr * g, u)`):
    each closure closure-converted (`converted`), the values it reads passed
    as inputs of the call, so that JAX's tracer sees them as the call's
    arguments (their gradients flow) rather than constants baked into its
    trace; called as `function(*inputs)`. None where one cannot run apart
    from the program (see the module)."""
    given = [*args, *kwargs.values()]
    parts, read = [], []  # per argument: (fn, how many values it reads) or None
    for a in given:
        graph = a.value if isinstance(a, Constant) else None
        closure = isinstance(graph, FuncGraph) and (
            graph.free_variables() or dynamic_defaults(graph)
        )
        if not closure and library_result(a) is None:
            parts.append(None)
            continue
        made = converted(builder, a)
        if made is None:
            return None
        parts.append((made[0], len(made[1])))
        read += made[1]
    n_args, names = len(args), tuple(kwargs)

    def call(*values):
        at, closures = 0, []
        for part in parts:
            if part is not None:
                fn, n = part
                closures.append(functools.partial(fn, *values[at : at + n]))
                at += n
        rest, made = iter(values[at:]), iter(closures)
        full = [next(rest) if part is None else next(made) for part in parts]
        return value(*full[:n_args], **dict(zip(names, full[n_args:], strict=True)))

    call.__name__ = getattr(value, "__name__", "call")
    call.__kt_library__ = True  # differentiated through its jaxpr, as JAX's
    call.transform = value if function_transform(value) else None  # (`library_result`)
    call.takes = _parameters_of(given[0]) if call.transform is not None and given else None
    plain = [a for a, part in zip(given, parts, strict=True) if part is None]
    return call, [*read, *plain]


def library_result(node: Node, called: bool = False):
    """The `LibraryCall` whose call `node` is, where it is pure, given values
    of the program and returns a function (it is `called`, or it is one of
    JAX's function transforms given a closure: its `grad(f)`, `f` a closure
    over them): a function holding those values, that runs only inside a
    call of it (`result_called`); else None."""
    prim = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    if type(prim) is not prims.LibraryCall or prim.effectful:
        return None
    if all(isinstance(a, Constant) for a in node.args):
        return None
    return prim if called or getattr(prim.fn, "transform", None) is not None else None


def returned_function_parameters(node: Node) -> FuncGraph | None:
    """The graph whose parameters the function that `node` returns takes,
    where `node` is a call of JAX's function transforms given a closure over
    the caller's values (`library_result`: `grad(f)` takes `f`'s); else None."""
    prim = library_result(node)
    return getattr(prim.fn, "takes", None) if prim is not None else None


def _parameters_of(fun: Node) -> FuncGraph | None:
    """The graph whose parameters the function `fun` takes: its own, or of
    `grad(f)` given to a transform again, `f`'s."""
    if isinstance(fun, Constant) and isinstance(fun.value, FuncGraph):
        return fun.value
    return returned_function_parameters(fun)


def result_called(prim, n_inputs: int):
    """`prim(*inputs)(*args, **kw)` as one function of `(*inputs, *args,
    **kw)`, `prim` a `LibraryCall` with `n_inputs` inputs: a call of
    what a library call returns (JAX's `grad(f)(x)`, `f` a closure over the
    caller's values given as inputs by `with_closures`), so that the
    function it returns, which holds the call's traced values, is made and
    called inside one trace (imported from its jaxpr, `frontend.jaxpr`)
    instead of escaping it. The same Python runs, in the same order."""

    def called(*values, **kw):
        return prim.impl(*values[:n_inputs])(*values[n_inputs:], **kw)

    called.__name__ = getattr(prim.fn, "__name__", "call")
    called.__kt_library__ = True  # differentiated through its jaxpr, as JAX's
    return called


# JAX's transforms that return a function of the function they are given
_FUNCTION_TRANSFORMS = ("grad", "value_and_grad", "jacfwd", "jacrev", "jacobian", "hessian")
_FUNCTION_TRANSFORMS += ("checkpoint", "remat")


def function_transform(value) -> bool:
    """Whether `value` is one of JAX's transforms that return a function of
    the function they are given (`grad`, `hessian`, ...)."""
    module = getattr(value, "__module__", None) or ""
    return module.startswith("jax") and getattr(value, "__name__", None) in _FUNCTION_TRANSFORMS


def converted(builder, fun: Node):
    """`(fn, free)`: a Python function computing `fun` that takes the values
    `fun` reads from its enclosing function (the nodes `free`) first; None
    where `fun` cannot run apart from the program (see the module)."""
    prim = library_result(fun, called=True)
    if prim is not None:  # JAX's `grad(closure)`: the values it is given first
        return result_called(prim, len(fun.args)), list(fun.args)
    if not isinstance(fun, Constant):
        return None
    value = fun.value
    graph = kt_attribute(value, "__kt_graph__", None)  # a gradient function, a compiled program
    if isinstance(graph, FuncGraph):
        value = graph
    if isinstance(value, FuncGraph) or is_user_function(value):
        graph = value if isinstance(value, FuncGraph) else builder.parse(value)
        if graph.signature is not None:  # `*args`, keyword-only: not its parameters in order
            return None
        if graph.jvp_rule is not None or graph.custom_fprop is not None:
            return None  # its own rule (a nested JAX custom_jvp): the model keeps it
        free = graph.free_variables()
        if _calls_any(graph, free):  # a function it reads: known when the program runs
            return None
        top = lifted(graph) if free else graph
        if top is None or not _pure(top):
            return None
        return _with_defaults(_compiled(top), graph, list(free))
    if is_library_value(value) and callable(value) and not isinstance(value, type):
        return value, []  # a library function (`jnp.sin`)
    return None


def dynamic_defaults(graph: FuncGraph) -> list[str]:
    """The parameters of `graph`, a function nested in the one parsed, whose
    defaults that function computes (`lambda p, x=x: ...`, the loop-capture
    idiom)."""
    if graph.parent is None:
        return []
    names = graph.param_names or []
    return [n for n in names if not isinstance(graph.defaults.get(n, Constant(None)), Constant)]


def _with_defaults(fn, graph: FuncGraph, free: list):
    """`(fn, free)` for `converted`, where `graph` has `dynamic_defaults`:
    those values are read as the free ones are, after them, and a call
    leaving the parameters out gets them, as Python gives a function its
    defaults."""
    names, dynamic = graph.param_names or [], dynamic_defaults(graph)
    if not dynamic:
        return fn, free
    n_free, fixed = len(free), {n: d.value for n, d in graph.defaults.items() if n not in dynamic}

    def called(*values):
        given = dict(zip(dynamic, values[n_free : n_free + len(dynamic)], strict=True))
        args = list(values[n_free + len(dynamic) :])
        for name in names[len(args) :]:
            args.append(given[name] if name in given else fixed[name])
        return fn(*values[:n_free], *args)

    called.__name__ = getattr(fn, "__name__", "called")
    return called, [*free, *(graph.defaults[n] for n in dynamic)]


def _calls_any(graph: FuncGraph, values) -> bool:
    """Whether `graph` (or a graph it reaches) calls one of the nodes `values`."""
    ids = {id(v) for v in values}
    return any(
        isinstance(node, Apply) and id(node.fn) in ids
        for g in graph.reachable()
        for node in g.nodes
    )


def _compiled(graph: FuncGraph):
    """The Python code generated from `graph` (cached per graph)."""
    compiled = TRANSFORM.cache("batching.compiled")
    entry = compiled.get(graph.uid)
    if entry is None:
        entry = compiled[graph.uid] = (graph, compile_graph(graph))
    return entry[1]


def _pure(graph: FuncGraph) -> bool:
    """No Parameter read or written, no host code, no effect, in `graph` or
    a graph it reaches."""
    for g in graph.reachable():
        for node in g.nodes:
            prim = getattr(node.fn, "value", None)
            if prim is None:
                continue
            if getattr(prim, "host", False) or getattr(prim, "effectful", False):
                return False
            params = getattr(prim, "parameters", None)
            if callable(params) and params():
                return False
    return True
