"""User functions k_transform cannot parse run as Python under JAX's tracer.

A user function whose source k_transform refuses (a `try`, a class it
constructs, a generator, `sorted` of Python numbers, ...) is not an error
on that account: as under JAX's own gradient, it runs as Python, at each call
(at trace under a jit), and the array operations it performs, recorded by
`jax.make_jaxpr`, are differentiated by our rules like any library call
(`frontend.jaxpr.imported_graph`, `traced.TracedCallK`). It is host code
(`ops.host`): its trace is never cached, so its Python runs once per call,
in program order, and a program calling it is not compiled ahead.

What JAX's tracer cannot run is refused as under `jax.jit` (a Python `if`
on a traced value, `float(x)`), with the reason the source was refused;
an exception Python itself raises running it (a KeyError, a StopIteration)
is raised as it is (`jaxpr.imported_graph`). Where running it would lose a
gradient it is refused too: a Parameter it reads without being passed it
(`runtime.state.no_parameter_reads`), and a Cell's method. At the top (the
function given to a transform, `python_graph`) it may be a bound method or
an object with a `__call__`, and take defaults (it sees the default
objects themselves) and keyword-only parameters; not `*args` or `**kwargs`.
"""

from __future__ import annotations

import inspect
import types

from k_transform.cell import Cell
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.callables import user_call_method
from k_transform.frontend.signature import signature_of
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import NO_DEBUG, Constant, FuncGraph
from k_transform.ops import python as prims

_strict = {"on": False}


def set_strict(on: bool = True) -> None:
    """`kt.set_strict(True)`: refuse, with the parser's error, what it cannot
    parse, instead of running it as Python (every function then has a graph
    and generated source: MindSpore's graph mode). Transforms made before
    are dropped (`kt.clear_caches()`): they were made under the other mode."""
    if _strict["on"] != bool(on):
        TRANSFORM.clear()
    _strict["on"] = bool(on)


def reason(fn) -> KTransformError | None:
    """Why `fn` runs as Python (its parse error), or None if it is parsed."""
    entry = TRANSFORM.cache("python_code.functions").get(id(fn))
    return entry[1] if entry is not None and entry[0] is fn else None


def runs_as_python(fn, exc: KTransformError) -> bool:
    """Record that `fn`, refused by the parser with `exc`, runs as Python;
    False (nothing recorded) when it cannot: not a plain user function, or
    refused for another reason than a construct the parser has no model of
    (`parser.unsupported`: a `try`, a `yield`, `max(key=...)`): a mutation
    the caller would not see, a closure rebound, stay errors."""
    if _strict["on"] or not (isinstance(fn, types.FunctionType) and is_user_function(fn)):
        return False
    if getattr(exc, "construct", None) is None:
        return False
    TRANSFORM.cache("python_code.functions")[id(fn)] = (fn, exc)
    return True


def defer(fn, exc: KTransformError) -> None:
    """Record that user function `fn`, named as a value, cannot be parsed
    (`exc`). Naming a function runs none of it: the error is raised where
    transformed code calls it (`raise_deferred`); given to a library (a host
    callback for `jax.debug.callback`), it is the user's Python function."""
    TRANSFORM.cache("python_code.deferred")[id(fn)] = (fn, exc)


def deferred(fn) -> KTransformError | None:
    """The parse error `defer` recorded for `fn`, if any."""
    try:
        entry = TRANSFORM.cache("python_code.deferred").get(id(fn))
    except TypeError:
        return None
    return entry[1] if entry is not None and entry[0] is fn else None


def python_graph(fn, exc: KTransformError) -> FuncGraph:
    """The graph of a top-level `fn` the parser refused with `exc`: one host
    call of `fn` on its parameters (keyword-only ones passed by keyword).
    `fn` is a function, a bound method or an object with a user `__call__`
    (`self` is the object itself, as in a call). A default the caller does
    not pass is the default object itself, as Python passes it (the graph's
    defaults; `compiled.CompiledGraph` keeps such an argument as it is).
    Raises `exc` when `fn` cannot run so: a signature with `*args` or
    `**kwargs` (the graph would take them packed), or a Cell's method (its
    Parameters' gradients and its `bprop` are read from its parsed graph:
    run as Python, they would be lost)."""
    target = _host_target(fn, exc)
    params = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise exc
    if not runs_as_python(target, exc):
        raise exc
    if fn is not target:  # what the graph calls is what runs as Python (`reason`)
        TRANSFORM.cache("python_code.functions")[id(fn)] = (fn, exc)
    name = getattr(target, "__name__", type(fn).__name__)
    graph = FuncGraph(name)
    names = [p.name for p in params]
    args = [graph.add_parameter(n) for n in names]
    graph.param_names = names
    graph.defaults = {p.name: Constant(p.default, hint=p.name) for p in params if _defaulted(p)}
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        graph.signature = signature_of(params)
    kwnames = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)  # (last, in graph order)
    call = prims.LibraryCall(fn, name, kwnames, effectful=True)
    # the call's line is the one the parser refused: errors about the host call point there
    graph.output = graph.apply(Constant(call, hint=name), *args, debug=exc.debug or NO_DEBUG)
    graph.guards = ()
    return graph


def _defaulted(p: inspect.Parameter) -> bool:
    return p.default is not p.empty


def _host_target(fn, exc: KTransformError):
    """The user function `fn` runs (a bound method's, a callable object's
    `__call__`); `exc`, with the reason, raised for a Cell's method."""
    if isinstance(fn, types.FunctionType):
        return fn
    owner = fn.__self__ if isinstance(fn, types.MethodType) else fn
    if isinstance(owner, Cell):
        raise KTransformError(
            f"{exc.bare_message} (a Cell's method is not run as Python: its Parameters' "
            "gradients and its bprop are read from its parsed graph, and would be lost)",
            exc.debug,
        ) from None
    if isinstance(fn, types.MethodType):
        return fn.__func__ if is_user_function(fn.__func__) else None
    method = user_call_method(fn)
    return method if method is not None and method.__name__ == "__call__" else None
