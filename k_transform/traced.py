"""K at trace time, and the services the DFunctor asks of the layers above it.

A call of a library function with no primitive (`jnp.arccos`, `jax.nn.elu`,
optax code: `prims.imports_jaxpr`) has no graph until the avals of its
arguments are known. K of it is a `TracedCallK(call, 1)` in the fprop graph;
called at trace time, that imports the call's jaxpr at those avals
(`frontend.jaxpr.imported_graph`, cached there), applies the DFunctor
`order` times and runs the generated code (`codegen`, cached here).

This module is the one place that joins the frontend, the DFunctor and
codegen. The DFunctor imports none of them (a graph-to-graph step,
`tests/test_layout.py`); at import this module installs what it needs
(`dfunctor.install`): the parser for rule graphs, `TracedCallK` for library
calls, and `lax_models.is_modelled` (functions read only where called).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types

import jax
import numpy as np

from k_transform.codegen.compile import compile_graph, graph_of
from k_transform.context import TRANSFORM
from k_transform.dfunctor import dfunctor
from k_transform.dfunctor.dfunctor import holds_params, k_graph
from k_transform.dfunctor.reads import output_mask
from k_transform.dfunctor.services import DynamicK, LibraryK
from k_transform.errors import KTransformError
from k_transform.frontend import callables, lax_models
from k_transform.frontend.jaxpr import imported_graph
from k_transform.frontend.parser import parse
from k_transform.frontend.source import is_library_value, is_user_function
from k_transform.ir.nodes import NO_DEBUG, Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.protocol import kt_attribute
from k_transform.runtime import host_log
from k_transform.runtime.state import no_parameter_reads
from k_transform.runtime.values import pytree_node


class TracedCallK(LibraryK):
    """K^order of a library call whose graph is only known at trace time.

    Called with the call's arguments, it imports `fn`'s jaxpr at their avals
    (`frontend.jaxpr.imported_graph`, cached), applies the DFunctor `order`
    times and runs the generated code: order 1 returns `(result, bprop)` as
    any fprop does. K of this object (`map_value`) is the same call one order
    higher, which is what differentiating code that calls it needs (the
    bprop differentiated again: jvp, second order).
    """

    def __init__(
        self,
        call: prims.LibraryCall,
        order: int,
        debug=NO_DEBUG,
        out_used=None,
        lower: tuple = (),
        active: tuple | None = None,
        lower_active: tuple = (),
    ):
        self.call = call
        self.order = order
        # per order, the items of the result the caller reads (`DFunctor.used_items`)
        self.masks = (*(lower or (None,) * (order - 1)), out_used)
        # per order, which of the call's arguments may carry a gradient (None:
        # all); the others are constants at that order's call (`DFunctor.call_flags`)
        self.active = (*(lower_active or (None,) * (order - 1)), active)
        self.debug = debug  # the user's call site, for errors (not part of equality)
        base = "".join(c if c.isalnum() else "_" for c in call.hint).strip("_")
        self.hint = f"{base}_fprop" + (str(order) if order > 1 else "")

    @property
    def effectful(self) -> bool:
        """Kept in program order like the call it differentiates."""
        return self.call.effectful

    @property
    def host(self) -> bool:
        return self.call.host

    def k(self, out_used=None, active=None) -> TracedCallK:
        order = self.order + 1
        return TracedCallK(self.call, order, self.debug, out_used, self.masks, active, self.active)

    def __call__(self, *args):
        if _cell_method(self.call, args):
            # `net.layer(x)`, `net.encode(x)` on a Cell the program was given:
            # the attribute read and a call of its value, which parse it (the
            # Cell's Parameters get their gradients; JAX's trace would hold
            # their values as constants)
            graph = _method_graph(self.call.method, len(args) - 1)
            return _compiled_k(graph, self.order, self.masks)(*args)
        host = self.call.host or _host_receiver(self.call, args)
        # host code: run once where a derivative runs its loop iteration again
        if not host:
            return self._run(host, *args)
        return host_log.host(self._run, kind=self.order)(host, *args)

    def _run(self, host: bool, *args):
        if self.order >= 1:
            args = primal_functions(args, self.order)
            self._check_no_derivative_closures(args)
        try:
            call = self.call
            graph = imported_graph(call.fn, call.hint, call.kwnames, args, host)
            fprop = _compiled_k(graph, self.order, self.masks, self.active)
        except KTransformError as exc:
            if exc.debug is not None and exc.debug.line > 0:
                raise
            raise KTransformError(exc.bare_message, self.debug) from None
        if host and not graph.calls_host():  # its trace computes it for other arrays
            host_log.note_again(functools.partial(self._again, fprop))
        return fprop(*args)

    def _again(self, fprop, host: bool, *args):
        """The call for other arrays, from the trace `fprop` of its first run
        (a body JAX traces once: `runtime.host_log.note_again`)."""
        if self.order >= 1:
            args = primal_functions(args, self.order)
        return fprop(*args)

    def _check_no_derivative_closures(self, args: tuple) -> None:
        """Refuse a function made by the differentiated program given to this
        call (`eom(make_L(w), q)`, `eom` run as Python): here it is its
        derivative form (returning its value and pullback), which the call
        would run as the function itself, and the values it closes over would
        be constants of the call's trace, with no gradient."""
        why = getattr(self.call, "why", None)
        refuse_derivative_closures(self.call.hint, args, self.debug, why)

    def __eq__(self, other):
        return isinstance(other, TracedCallK) and self._key() == other._key()

    def _key(self) -> tuple:
        return (self.call, self.order, self.masks, self.active)

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"K{self.order}[{self.call!r}]"


class DynamicCallK(DynamicK):
    """K^order of calling a value known only when the program runs.

    A K-function (an fprop the generated code made, or a `LibraryK`) is
    called as it is. Any other callable (an instance of a user class,
    `getattr(jnp, name)`, a function a host call returned) is a library call
    (`TracedCallK`): JAX's tracer runs it on the arguments and its jaxpr is
    differentiated by our rules. Unless it is library code (`jax`, `numpy`,
    ...), it is host code: traced again at each call, so its Python runs as
    often as Python runs it, and reading a Parameter there is refused (it
    would get no gradient).
    """

    def __init__(self, order: int, debug=NO_DEBUG, out_used=None, lower: tuple = ()):
        self.order = order
        # per order, the items of the result the caller reads (`DFunctor.used_items`)
        self.masks = (*(lower or (None,) * (order - 1)), out_used)
        self.debug = debug  # the user's call site, for errors (not part of equality)
        self.hint = "call_fprop" + (str(order) if order > 1 else "")

    def k(self, out_used=None) -> DynamicCallK:
        return DynamicCallK(self.order + 1, self.debug, out_used, self.masks)

    def __call__(self, fn, *args):
        if _is_k_function(fn):
            return self._at_order(fn)(*args)
        if not callable(fn):
            raise KTransformError(f"{type(fn).__name__!r} object is not callable", self.debug)
        graph = kt_attribute(fn, "__kt_graph__", None)
        if _graph_called(fn, graph, args):
            # a gradient function made by code run as Python: its graph, as where
            # the parser meets one (one reading Parameters runs as a library call,
            # which refuses their reads: their gradients would not leave it)
            return _compiled_k(graph, self.order, self.masks)(*args)
        inner = fn  # a partial of a user function runs the user's code
        while isinstance(inner, functools.partial):
            inner = inner.func
        hint = getattr(inner, "__name__", None) or type(inner).__name__
        user = not is_library_value(inner)
        if pytree_node(fn) is not None:  # `layer(x)`, a pytree module: its leaves get gradients
            refuse_derivative_closures(hint, (fn, *args), self.debug)  # (run by JAX's tracer)
            with no_parameter_reads(hint) if user else contextlib.nullcontext():
                return _object_call(self.order, len(args))(fn, *args)
        cell = fn  # (`functools.partial(cell)` binding nothing: the Cell)
        while isinstance(cell, functools.partial) and not (cell.args or cell.keywords):
            cell = cell.func
        cell_method = callables.user_call_method(cell) if user else None
        if cell_method is not None and is_user_function(getattr(type(cell), "bprop", None)):
            # a Cell with its own `bprop`, given as an argument (or met in code
            # run as Python): its gradient is that bprop, as where the parser
            # meets the call (`prims.CustomBpropCall`), never its steps'; its
            # bprop gives its inputs' gradients only (the callee's: the empty env)
            graph = _custom_bprop_graph(cell, cell_method, len(args), self.debug)
            return _compiled_k(graph, self.order, self.masks)(*args)
        method = callables.user_call_method(fn) if user else None
        if method is not None and not hasattr(type(fn), "bprop") and holds_params(fn):
            # `layer(x)`, a Cell given as an argument: its `construct` parsed
            # with `self` fixed, as where it is a constant; the gradient of
            # the Cell is the env of its Parameters' (`runtime.state.param_env`)
            return _compiled_k(parse(method, bound_self=fn), self.order, self.masks)(*args)
        if _params_method(fn):  # `net.encode`, a method of such a Cell: the same
            graph = parse(fn.__func__, bound_self=fn.__self__)
            return _compiled_k(graph, self.order, self.masks)(*args)
        refuse_derivative_closures(hint, fn, self.debug)  # (its arguments: `TracedCallK`)
        call = prims.LibraryCall(fn, hint, (), effectful=user)
        with no_parameter_reads(hint) if user else contextlib.nullcontext():
            return TracedCallK(call, self.order, self.debug, self.masks[-1], self.masks[:-1])(*args)

    def _at_order(self, fn):
        """A K-function `fn` made at a lower order than this call's, K'd up
        to this order. At order n the callee is K of what the call one order
        lower was given: a function that call ran as it was (an fprop) is
        here an fprop of the same order; one it differentiated first (the
        user's `act` a gradient function passes on to its fprop) is here its
        lower-order K, which needs K again (`kt.grad(f)(x, jnp.sin)` inside
        a differentiated function). Only a def with no free variables is
        K'd again: a closure's free variables hold values of its own order.
        Such a def is also K'd again for the items of its result the caller
        reads (`masks`), as K of a call of it where it is known: an item no
        one reads then sends no cotangent (`0 * inf` at `log(0)`'s slope)."""
        graph = graph_of(fn)
        # (order 0: a function as the user wrote it, given to a custom rule's
        # fprop (`dfunctor._own_functions`), which a call at order n K's n times)
        if graph is None or not 0 <= graph.k_order <= self.order:
            return fn
        masked = any(mask is not None for mask in self.masks)
        if graph.k_order == self.order and not masked:
            return fn
        if fn.__closure__:
            if graph.k_order == self.order:
                return fn  # (its free variables hold values of its own K: kept)
            raise KTransformError(
                "a closure passed as a function argument to a gradient function is "
                f"differentiated here to order {self.order}, which k_transform does not "
                "support for closures: pass a top-level function (or a lambda without "
                "free variables)",
                self.debug,
            )
        if not any(mask is not None for mask in self.masks[: graph.k_order]):
            return _compiled_k(graph, self.order - graph.k_order, self.masks[graph.k_order :])
        primal = graph
        while primal is not None and primal.k_order > 0:
            primal = getattr(primal, "k_primal", None)
        if primal is not None and not primal.free_variables():
            return _compiled_k(primal, self.order, self.masks)
        if graph.k_order == self.order:
            return fn
        return _compiled_k(graph, self.order - graph.k_order)

    def __eq__(self, other):
        return isinstance(other, DynamicCallK) and (self.order, self.masks) == (
            other.order,
            other.masks,
        )

    def __hash__(self):
        return hash(("dynamic", self.order, self.masks))

    def __repr__(self):
        return f"K{self.order}[call]"


def primal_functions(values, order: int):
    """`values` with each function the differentiated program made that reads
    none of its values (`lambda x: 0.1 * x` given to `jnp.piecewise`), here
    its derivative form of `order`, made the function itself (its primal
    graph compiled): a library or code run as Python calls it as the
    function, and its trace differentiates it with the call
    (`refuse_derivative_closures` refuses the functions that read values)."""
    leaves, tree = jax.tree_util.tree_flatten(values)
    if not any(isinstance(leaf, types.FunctionType) for leaf in leaves):
        return values
    return jax.tree_util.tree_unflatten(tree, [_primal_function(v, order) for v in leaves])


def _primal_function(value, order: int):
    made = graph_of(value) if isinstance(value, types.FunctionType) else None
    if made is None or made.k_order != order or value.__closure__:
        return value
    primal = made
    for _ in range(order):
        primal = getattr(primal, "k_primal", None)
        if primal is None:
            return value
    if primal.k_order != 0 or primal.free_variables() or primal.calls_host():
        return value
    if _reads_parameters(primal):  # `lambda x: self.w * x`: w's gradient is an env's
        return value
    made = TRANSFORM.cache("traced.primal_functions")
    entry = made.get(id(primal))
    if entry is None or entry[0] is not primal:
        entry = made[id(primal)] = (primal, compile_graph(primal))
    return entry[1]


def _graph_called(fn, graph, args) -> bool:
    """Whether a call of `fn` with `args` (all its graph's parameters given)
    is a call of its `graph` (a gradient function's), differentiated here:
    not for one made per arity (its generic graph takes the `*args` tuple),
    nor one whose graph reads Parameters."""
    return (
        isinstance(graph, FuncGraph)
        and kt_attribute(fn, "__kt_graph_for__", None) is None
        and len(args) == len(graph.parameters)
        and not _reads_parameters(graph)
    )


def _reads_parameters(graph: FuncGraph) -> bool:
    """Whether `graph` (or a graph it reaches) reads a `kt.Parameter` or a
    Cell: a constant holding one, or a primitive holding one (an assign)."""
    for g in graph.reachable():
        for node in g.nodes:
            for item in node.inputs:
                value = item.value if isinstance(item, Constant) else None
                if isinstance(value, Primitive):
                    if value.parameters():
                        return True
                elif value is not None and not isinstance(value, FuncGraph):
                    if holds_params(value):
                        return True
    return False


def refuse_derivative_closures(hint: str, values, debug, why: str | None = None) -> None:
    """Refuse a function the differentiated program made (a leaf of `values`,
    or a static field of a pytree in it: `Kernel(lambda a, b: amp * k(a, b))`)
    given to code run as Python or by a library (`hint`): there it is its
    derivative form (returning its value and pullback), which that code would
    call as the function itself, and the values it closes over would be
    constants of the call's trace, with no gradient. `why`: the call's own
    reason, where it has one (`prims.KeywordCall`)."""
    leaves, tree = jax.tree_util.tree_flatten(values)
    found = [leaf for leaf in leaves if isinstance(leaf, types.FunctionType)]
    _static_functions(tree, found)
    for fn in found:
        made = graph_of(fn)
        if made is None or (made.k_order == 0 and not made.free_variables()):
            continue  # (a function reading none of the program's values: `primal_functions`)
        name = made.name.removesuffix("_fprop")
        if why is not None:  # the call says why it cannot take it
            raise KTransformError(f"{why}; here it is given {name}", debug)
        raise KTransformError(
            f"cannot differentiate {hint}(...), run as Python or by a library, given "
            f"{name}, a function of the code being differentiated: there it would be its "
            "derivative form, and the values a closure reads would get no gradient (pass "
            "them as arguments, a pytree's as data fields, or call it in parsed code)",
            debug,
        )


def _static_functions(tree, found: list) -> None:
    """The functions among the static (auxiliary) data of the nodes of `tree`."""
    data = tree.node_data()
    if data is not None:
        aux = data[1]
        items = aux if isinstance(aux, (tuple, list)) else (aux,)
        found += [item for item in items if isinstance(item, types.FunctionType)]
    for child in tree.children():
        _static_functions(child, found)


def _object_call(order: int, n_args: int):
    """The generated function of `DynamicCallK(order)` for a callable pytree
    node (a module registered with `register_pytree_node_class` or
    `register_dataclass`) given `n_args` arguments: `obj(*args)` is
    `obj.__call__(*args)`, a method call whose first input is `obj`, so its
    leaves get gradients as `layer.apply(x)`'s do.

    A call of a run-time value returns `(result, bprop)` with `bprop(dout)`
    giving `(d_callee, *d_args)`; K of a graph call gives `(env, d_obj,
    *d_args)`. So order 1 is the graph `Q_1(obj, *args) = wrap(K(G))`, where
    `G` calls the method and `wrap(k)` returns `k`'s result and a bprop
    without `k`'s first gradient (G's empty env); order n is `wrap(K(Q_n-1))`,
    K of the order below with the same convention, to any order."""
    key = (order, n_args)
    compiled = TRANSFORM.cache("traced.object_calls")
    if key not in compiled:
        graph = _call_method_graph(n_args)
        for _ in range(order):
            graph = _without_env(k_graph(graph), n_args)
        compiled[key] = compile_graph(graph)
    return compiled[key]


def _custom_bprop_graph(cell, method, n_args: int, debug) -> FuncGraph:
    """The graph `(x0, ...) -> CustomBpropCall(cell)(x0, ..., defaults)` for
    a Cell whose class defines `bprop` called with `n_args` positional
    arguments (cached per Cell and count)."""
    key = (id(cell), n_args)
    made = TRANSFORM.cache("traced.custom_bprop")
    if key in made and made[key][0] is cell:
        return made[key][1]
    body = parse(method, bound_self=cell)
    sig = inspect.signature(functools.partial(method, cell))  # (`method` is unbound)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
        raise KTransformError(
            f"{type(cell).__name__} has its own bprop and a construct taking *args or "
            "**kwargs: called here as a value (an argument), k_transform needs its named "
            "parameters (call it where k_transform parses the call, or name them)",
            debug,
        )
    graph = FuncGraph(f"{type(cell).__name__}_call")
    params = [graph.add_parameter(f"x{k}") for k in range(n_args)]
    graph.param_names = [p.name for p in params]
    defaults = [p.default for p in list(sig.parameters.values())[n_args:]]
    if any(d is inspect.Parameter.empty for d in defaults):
        raise KTransformError(
            f"{type(cell).__name__}(...) called with {n_args} arguments: its construct "
            f"takes {len(sig.parameters)}",
            debug,
        )
    inputs = [*params, *(Constant(d) for d in defaults)]
    graph.output = graph.apply(Constant(prims.CustomBpropCall(cell, body)), *inputs)
    made[key] = (cell, graph)
    return graph


def _call_method_graph(n_args: int) -> FuncGraph:
    graph = FuncGraph("call_object")
    params = [graph.add_parameter(n) for n in ["obj", *(f"x{k}" for k in range(n_args))]]
    graph.param_names = [p.name for p in params]
    graph.output = graph.apply(Constant(prims.MethodCall("__call__")), *params)
    return graph


def _without_env(k: FuncGraph, n_args: int) -> FuncGraph:
    """`(obj, *args) -> (result, dout -> bprop(dout)[1:])` of `(result, bprop) = k(obj, *args)`."""
    graph = FuncGraph(f"{k.name}_object")
    params = [graph.add_parameter(n) for n in ["obj", *(f"x{k}" for k in range(n_args))]]
    graph.param_names = [p.name for p in params]
    pair = graph.apply(Constant(k), *params)
    item = Constant(prims.GetItem())
    result, bprop = (graph.apply(item, pair, Constant(j)) for j in (0, 1))
    back = FuncGraph(f"{k.name}_object_bprop", parent=graph)
    grads = back.apply(bprop, back.add_parameter("dout"))
    kept = [back.apply(item, grads, Constant(j)) for j in range(1, n_args + 2)]
    back.output = back.apply(Constant(prims.MakeTuple()), *kept)
    graph.output = graph.apply(Constant(prims.MakeTuple()), result, Constant(back))
    return graph


def _cell_method(call, args) -> bool:
    """Whether `call` is a method call, without keywords, on an object that
    holds Parameters (a Cell: `net.layer(x)`, `net.encode(x)`)."""
    return (
        type(call) is prims.MethodCall
        and not call.kwnames
        and bool(args)
        and pytree_node(args[0]) is None
        and holds_params(args[0])
    )


def _params_method(fn) -> bool:
    """Whether `fn` is a user-written method bound to an object that holds
    Parameters (`net.encode`, `net.construct`)."""
    return (
        isinstance(fn, types.MethodType)
        and is_user_function(fn.__func__)
        and not isinstance(fn.__self__, type)
        and holds_params(fn.__self__)
    )


def _method_graph(method: str, n_args: int) -> FuncGraph:
    """`(obj, *args) -> obj.<method>(*args)` as the attribute read (`GetAttr`,
    whose rule gives `obj` the env of the Parameters the value reaches) and
    a call of the value (`DynamicCallK`: a sub-Cell's `construct` or a
    method, parsed with `self` fixed)."""
    made = TRANSFORM.cache("traced.method_graphs")
    if (method, n_args) not in made:
        graph = FuncGraph(f"call_{method}")
        params = [graph.add_parameter(n) for n in ["obj", *(f"x{k}" for k in range(n_args))]]
        graph.param_names = [p.name for p in params]
        bound = graph.apply(Constant(prims.GetAttr(method)), params[0])
        graph.output = graph.apply(bound, *params[1:])
        made[(method, n_args)] = graph
    return made[(method, n_args)]


def _host_receiver(call, args) -> bool:
    """A method called on a Python object that is no array or container
    (`rs.randn(3)` with `rs` a generator the function was given, a method of
    the user's object): host code, run each time Python runs it, never a
    trace cached by the object (its draw was frozen into every later call)."""
    if not isinstance(call, prims.MethodCall) or not args:
        return False
    values = (jax.Array, np.ndarray, np.generic, dict, list, tuple, str, bytes, int, float, complex)
    return not isinstance(args[0], values)


def _is_k_function(fn) -> bool:
    """Whether `fn` is a K-value of a function: generated code, a `LibraryK`,
    or a function the run time made of them (`_RUN_TIME`). k_transform's
    other functions (`ops.softplus`, the `vjp_fn` `kt.vjp` returns) are
    functions like the user's."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, (LibraryK, DynamicK)):
        return True
    if not isinstance(fn, types.FunctionType):
        return False
    return fn.__code__.co_filename.startswith("<k_transform:") or (fn.__module__ or "").startswith(
        _RUN_TIME
    )


# The run time's packages: the functions they make of K-functions (a traced
# `if` choosing between two: `control.runtime._selected`) are K-functions.
_RUN_TIME = ("k_transform.control.", "k_transform.runtime.")


def _compiled_k(graph: FuncGraph, order: int, masks: tuple = (), active: tuple = ()):
    """The generated function of K^order(graph) (cached with the graph);
    `masks[n]`: the items of K^n's result the caller reads (K^(n+1) gives
    the others no cotangent; None: all); `active[n]`: the inputs K^(n+1)
    differentiates (the others get zeros, never computed; None: all)."""
    masks = masks or (None,) * order
    if masks:
        masks = (output_mask(graph, masks[0]), *masks[1:])
    n_inputs = len(graph.parameters)  # (K^n's inputs are graph's)
    active = tuple(
        flags if flags is not None and len(flags) == n_inputs and not all(flags) else None
        for flags in (active or (None,) * order)
    )
    key = (graph.uid, order, masks, active)
    compiled = TRANSFORM.cache("traced.compiled")
    if key not in compiled:
        k = graph
        for n in range(order):
            k = k_graph(k, True if active[n] is None else active[n], out_used=masks[n])
        compiled[key] = compile_graph(k)
    return compiled[key]


dfunctor.install(
    parse=parse,
    library_k=TracedCallK,
    dynamic_k=DynamicCallK,
    is_modelled=lax_models.is_modelled,
)
