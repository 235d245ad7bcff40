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
on a traced value, `float(x)`), with the reason the source was refused.
Where running it would lose a gradient it is refused too: a Parameter it
reads without being passed it (`runtime.state.no_parameter_reads`), and a method of a
Cell, a `*args` or keyword-only signature at the top (these stay errors).
"""

from __future__ import annotations

import inspect
import types

from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import Constant, FuncGraph
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
    call of `fn` on its parameters. Raises `exc` when `fn` cannot run so
    (a method, a Cell's `construct`, a signature with `*args`, `**kwargs`,
    keyword-only parameters or defaults: the gradient API passes a default
    as an array, where Python would see the default itself)."""
    if isinstance(fn, types.MethodType) or not isinstance(fn, types.FunctionType):
        raise exc
    params = inspect.signature(fn).parameters.values()
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in plain or p.default is not p.empty for p in params):
        raise exc
    if not runs_as_python(fn, exc):
        raise exc
    graph = FuncGraph(fn.__name__)
    names = [p.name for p in params]
    args = [graph.add_parameter(name) for name in names]
    graph.param_names = names
    graph.defaults = {}
    call = prims.LibraryCall(fn, fn.__name__, (), effectful=True)
    graph.output = graph.apply(Constant(call, hint=fn.__name__), *args)
    graph.guards = ()
    return graph
