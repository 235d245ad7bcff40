"""Reverse-mode API: `GradOperation`, `grad`, `value_and_grad`, `vjp`.

A gradient function parses its target once (a function, a bound method or a
Cell's `construct`), applies the DFunctor, generates the fprop/bprop module,
and on each call:

1. reads the current value of every Parameter the program uses (never baked
   in: `p.set_data(...)` is seen by the next call without recompiling);
2. runs `fprop(*args)` -> `(out, bprop)` with those values bound, then
   `bprop(sens)` -> `(env, d_args...)`; Parameter gradients come out of the
   env under their keys;
3. is jitted by default: Python ints, bools, strings and None are static
   arguments, floats and arrays traced. `set_mode("eager")` (or `jit=False`)
   runs the same generated code op by op; NumPy inputs become JAX arrays in
   both modes. In both, the concrete `while` loops of gradient and jvp
   functions are bounded (see `runtime.bounds.bounded_loops`).

Pytrees. Inputs, outputs, sensitivities, tangents and `has_aux` values may
be nested tuples, lists, dicts, NamedTuples and registered dataclasses or
classes; gradients come back with the input's structure and types, and
`jacrev`/`jacfwd`/`hessian` nest as JAX's do (the output's structure of the
input's). Pytree fields read inside the program are differentiated
(`ops.python.GetAttr`, `MakeNode`, `ReplaceFields`).

Integer inputs. The JAX-style API (`grad`, `value_and_grad`, `jvp`,
`jacfwd`, `jacrev`, `hessian`, `hvp`) raises TypeError, as JAX does, when an
input it differentiates is an integer or boolean (array or Python int).
`vjp` accepts them, as JAX's vjp does, and gives them a zero gradient (JAX
gives a float0 zero); `jvp` has no float0 tangents, so it refuses them.
`GradOperation` follows MindSpore 2.x (checked against MindSpore 2.10,
PYNATIVE and GRAPH mode): an integer array input gets its gradient, computed
by the rules and cast to its own integer dtype (`x * x` at int32 `[3, 4]`
gives int32 `[6, 8]`). Differences from MindSpore, kept on purpose:
MindSpore also casts the sensitivity at each integer `Cast` on the way (ours
passes none back through a cast from an integer), and it leaves Python
scalars (ints and floats) out of the gradient tuple altogether, where ours
keeps one entry per input: a zero for a Python int (static), the gradient
for a Python float (traced, as the design card says).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import lowering
from k_transform import runtime as rt
from k_transform.api import graph_of
from k_transform.cell import Cell, Parameter
from k_transform.codegen.compile import compile_graph
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend import callables
from k_transform.frontend.guards import guards_of, stale, stale_names
from k_transform.frontend.parser import parse
from k_transform.frontend.targets import arity, is_library, target_of
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ir.verify import verify
from k_transform.ops.python import LibraryCall
from k_transform.ops.state import Assign
from k_transform.runtime.bounds import (
    LoopBoundExceeded,
    bounded_loops,
    retracing,
    set_loop_bound,
)
from k_transform.traced import TracedCallK
from k_transform.transforms import (
    GradSpec,
    as_weights,
    first_output_graph,
    grad_graph,
    jvp_graph,
)

_mode = {"jit": True}


def set_mode(mode: str) -> None:
    """ "graph" (jit, the default) or "eager" (generated code op by op)."""
    if mode not in ("graph", "eager"):
        raise ValueError("mode must be 'graph' or 'eager'")
    _mode["jit"] = mode == "graph"


def stop_gradient(x):
    """`x`, with no gradient flowing back (the `StopGradient` primitive)."""
    return jax.lax.stop_gradient(x)


def parameters_of(root: FuncGraph) -> list[Parameter]:
    """Every Parameter the graphs reachable from `root` read or assign."""
    found: dict[int, Parameter] = {}
    for graph in root.reachable():
        for node in graph.used_nodes():
            value = node.value if isinstance(node, Constant) else None
            if isinstance(value, Primitive):
                for p in value.parameters():
                    found.setdefault(id(p), p)
            elif isinstance(value, Parameter):
                found.setdefault(id(value), value)
    return list(found.values())


def _is_static(x) -> bool:
    """Python ints, bools, strings, None, slices, dtypes and tuples of them are
    static (part of the compile key); floats and arrays are traced."""
    if isinstance(x, tuple):
        return all(_is_static(v) for v in x)
    if isinstance(x, type) or isinstance(x, np.dtype):
        return True
    return x is None or x is Ellipsis or isinstance(x, (bool, int, str, slice))


def _hashable(x):
    """A hashable stand-in for a static argument (slices are unhashable)."""
    if isinstance(x, tuple):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, slice):
        return ("slice", x.start, x.stop, x.step)
    return x


def host_calls(graph: FuncGraph) -> bool:
    """Whether the graphs reachable from `graph` call host code (`ops.host`)."""
    return any(
        isinstance(value, (LibraryCall, TracedCallK)) and value.effectful
        for g in graph.reachable()
        for value in (getattr(n.fn, "value", None) for n in g.nodes)
    )


class CompiledGraph:
    """A transform graph compiled to Python and run with Parameters bound.

    Called like the graph; jitted by default with static Python scalars
    (`set_mode("eager")` or `jit=False` runs the generated code op by op).
    `__kt_graph__` lets user code that calls this object be transformed too;
    the graph is compiled to Python at the first call (or `__kt_source__`
    read), so a gradient function only used inside another transform
    (`kt.jvp(kt.grad(f), ...)`) never generates its own code.

    Python's names are read when a call runs: before each call the guards of
    the parsed graphs (`frontend.guards`: the globals and closure cells read,
    with their values) are checked, and if a name was rebound since, the
    program is made again by `remake` (a function returning a fresh
    CompiledGraph; `primal`: the parsed graph whose guards count).
    """

    def __init__(
        self,
        graph: FuncGraph,
        fn=None,
        jit: bool | None = None,
        primal: FuncGraph | None = None,
        remake=None,
        jit_host: bool = False,
    ):
        self.guards = guards_of(primal or graph)
        self.remake = remake
        self.fn = fn
        self.jit = jit
        self.__kt_graph__ = graph
        self._compiled_graph = graph  # `__kt_graph__` may be replaced (see GradFunction)
        self.params = parameters_of(graph)
        self.assigns = any(
            isinstance(getattr(n.fn, "value", None), Assign)
            for g in graph.reachable()
            for n in g.nodes
        )
        self._jitted: dict[tuple, object] = {}
        self.bound_loops = False  # gradient and jvp functions: see `_eager`
        # Host calls (a random generator, a counter) run per call, as without
        # a jit: such a program is not compiled unless asked (`kt.jit`, jit=True).
        # `jit_host` (kt.jit): compiled all the same, host code runs at trace.
        self.host = host_calls(graph) and not jit_host

    @functools.cached_property
    def run(self):
        """The graph's generated Python function."""
        verify(self._compiled_graph)
        return compile_graph(self._compiled_graph)

    @property
    def __kt_source__(self) -> str:
        return self.run.__kt_source__

    def refresh(self) -> None:
        """Made again if a global or closure name it read was rebound."""
        if not stale(self.guards):
            return
        if self.remake is None:
            names = ", ".join(stale_names(self.guards))
            raise KTransformError(
                f"{self.__kt_graph__.name} read {names}, rebound since it was transformed: "
                "make the function again (kt.grad(f), kt.jit(f), ...)"
            )
        fresh = self.remake()
        kept = {k: v for k, v in vars(self).items() if k in ("bound_loops", "constant_sequences")}
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__, **kept)

    def __call__(self, *args):
        self.refresh()
        values = tuple(p.data for p in self.params)
        use_jit = (_mode["jit"] and not self.host) if self.jit is None else self.jit
        if not use_jit:
            return self._eager(values, rt.as_jax_inputs(args))
        static = tuple(k for k, a in enumerate(args) if _is_static(a))
        fixed = {k: args[k] for k in static}
        key = (len(args), tuple((k, type(v), _hashable(v)) for k, v in fixed.items()))
        if key not in self._jitted:
            self._jitted[key] = jax.jit(self._with_static(fixed, len(args)))
        traced = tuple(a for k, a in enumerate(args) if k not in static)
        # Under a user's own jax.jit no retrace can happen: loops checkpoint instead.
        retrace = not rt.any_traced((values, traced))
        for _ in range(MAX_RETRACES):
            try:
                with retracing(retrace):
                    return self._write_back(self._jitted[key](values, traced))
            except Exception as exc:  # a traced while outgrew its gradient buffer
                if not _grow_loop_bound(exc):
                    raise
                self._jitted[key] = jax.jit(self._with_static(fixed, len(args)))
        raise KTransformError("a traced while loop kept outgrowing its gradient buffer")

    def _eager(self, values, args):
        """The generated code run op by op; gradient and jvp functions bound
        their concrete `while` loops (`runtime.bounds.bounded_loops`)."""
        with bounded_loops(self.bound_loops):
            return self._write_back(self._compute(values, args))

    def _with_static(self, fixed: dict, n: int):
        """`_compute` taking only the traced arguments; `fixed` holds the static ones."""

        def compute(values, traced):
            it = iter(traced)
            args = tuple(fixed[k] if k in fixed else next(it) for k in range(n))
            return self._compute(values, args)

        return compute

    def _compute(self, values, args):
        """(result, {index: new value}) for the Parameters the program assigned."""
        with rt.param_scope(self.params, values, assigns=self.assigns) as scope:
            result = self.run(*args)
        index = {id(p): k for k, p in enumerate(self.params)}
        return result, {index[i]: v for i, v in scope.updates.items() if i in index}

    def _write_back(self, output):
        result, updates = output
        for k, value in updates.items():
            if isinstance(value, jax.core.Tracer):
                raise KTransformError(
                    f"{self.__kt_graph__.name} assigns the Parameter {self.params[k].name}; "
                    "a program with state updates cannot run inside your own jax.jit: call it "
                    "directly (it is compiled already)"
                )
            self.params[k].set_data(value)
        return result

    def __repr__(self) -> str:
        return f"<k_transform {self.__kt_graph__.name}>"


class GradFunction(CompiledGraph):
    """A gradient function: what `GradOperation(...)(fn)` returns.

    `api` names the JAX-style function that made it (`kt.grad`, ...); those
    refuse integer inputs at the differentiated positions, as JAX does.
    """

    def __init__(
        self,
        fn,
        spec: GradSpec,
        jit: bool | None = None,
        api: str | None = None,
        bound: bool = False,
    ):
        self.spec = spec
        self.api = api
        self.constant_sequences = False  # GradOperation: see `_drop_constants`
        # One program per (function, options), shared by every gradient
        # object asking for it: a fresh `kt.grad(f)(x)` transforms nothing
        # and reuses the compiled code while f's names hold (guards).
        made = TRANSFORM.cache("grad.functions")
        key = (id(fn), getattr(fn, "training", None), spec, jit, api, bound)
        entry = made.get(key)
        if entry is not None and entry[0] is fn and not stale(entry[1].guards):
            self.__dict__.update(entry[1].__dict__, constant_sequences=False)
            return
        made[key] = (fn, self)
        remake = functools.partial(GradFunction, fn, spec, jit, api, bound)
        self._by_keywords: dict[tuple, GradFunction] = {}
        primal = graph_of(fn)
        # `bound`: called with the graph's own parameters (see `_keyword_call`).
        self._binds = not bound and primal.signature is not None
        # Parameters a call may leave to their defaults (bound like keywords).
        names, defaults = primal.param_names or (), primal.defaults
        self._n_params = (
            len(names) if defaults and not bound and not isinstance(fn, FuncGraph) else None
        )
        if self._binds:  # positions in `spec` count the arguments as passed
            spec = dataclasses.replace(spec, inputs="first")
        # `return_ids`: the ids are attached after the call (strings are no
        # jit outputs); called inside transformed code, the graph holds them.
        graph = grad_graph(primal, dataclasses.replace(spec, return_ids=False))
        super().__init__(graph, fn, jit, primal=primal, remake=remake)
        if spec.return_ids:
            self.__kt_graph__ = grad_graph(primal, spec)
        self.bound_loops = True

    def __call__(self, *args, **kwargs):
        if not self.constant_sequences:
            return self._call(args, kwargs)
        n = len(args) - self.spec.sens_param
        constant = {k for k in range(n) if _constant_sequence(args[k])}
        result = self._call(tuple(_plain(a) for a in args), kwargs)
        return _drop_constants(result, self.spec, constant) if constant else result

    def _call(self, args: tuple, kwargs: dict):
        if self.spec.sens_param and not args:
            raise KTransformError("sens_param=True: pass the output sensitivity last")
        if self.api is not None:
            n = len(args) - self.spec.sens_param
            check_float_inputs(self.api, args[:n], _positions(self.spec.inputs, n))
        n_inputs = len(args) - self.spec.sens_param
        defaulted = self._n_params is not None and n_inputs < self._n_params
        if kwargs or self._binds or defaulted:
            result = self._keyword_call(args, kwargs)
        else:
            result = super().__call__(*args)
        return _with_ids(result, self.spec, n_inputs) if self.spec.return_ids else result

    def _keyword_call(self, args: tuple, kwargs: dict):
        """Keyword arguments are passed, not differentiated (MindSpore's and
        JAX's semantics): "all" means the positional inputs only. With
        `*args`, input positions count the arguments as passed."""
        sens = args[-1:] if self.spec.sens_param else ()
        inputs = args[: len(args) - len(sens)]
        flat, where = _bind_keywords(self.fn, inputs, kwargs)
        spec = self.spec
        positions = spec.inputs
        if positions in ("first", "all"):
            positions = 0 if positions == "first" else tuple(range(len(inputs)))
        bare = isinstance(positions, int)
        wanted = (positions,) if bare else tuple(positions or ())
        if not any(where[p][1] is not None for p in wanted):
            inputs_spec = spec.inputs if spec.inputs != "all" else positions
            return self._run_spec(dataclasses.replace(spec, inputs=inputs_spec), flat, sens)
        if spec.weights is not None or spec.with_value or spec.has_aux:
            raise KTransformError(
                "the gradient w.r.t. *args of a function, with weights, has_aux or the value: "
                "differentiate a wrapper with named parameters"
            )
        graph_positions = tuple(sorted({where[p][0] for p in wanted}))
        grads = self._run_spec(dataclasses.replace(spec, inputs=graph_positions), flat, sens)

        def pick(p):
            index, item = where[p]
            g = grads[graph_positions.index(index)]
            return g if item is None else g[item]

        return pick(positions) if bare else tuple(pick(p) for p in wanted)

    def _run_spec(self, spec: GradSpec, flat: tuple, sens: tuple):
        key = (spec.inputs, len(flat))
        if key not in self._by_keywords:
            self._by_keywords[key] = GradFunction(self.fn, spec, self.jit, bound=True)
        return CompiledGraph.__call__(self._by_keywords[key], *flat, *sens)


def _with_ids(result, spec: GradSpec, n: int):
    """MindSpore's `return_ids`: each input gradient as `(position, grad)`,
    each Parameter's as `(name, grad)`, in the structure `spec` returns."""
    if spec.with_value:
        return result[0], _with_ids(result[1], dataclasses.replace(spec, with_value=False), n)
    if spec.has_aux:
        return _with_ids(result[0], dataclasses.replace(spec, has_aux=False), n), result[1]
    inputs, weights = spec.inputs, spec.weights
    if weights is not None:
        names = [p.name for p in weights]
        named = (
            (names[0], result if inputs is None else result[1])
            if spec.single_weight
            else tuple(zip(names, result if inputs is None else result[1], strict=True))
        )
        if inputs is None:
            return named
        return _with_ids(result[0], dataclasses.replace(spec, weights=None), n), named
    if inputs in ("first", "all", None) or isinstance(inputs, tuple):
        positions = {"first": 0, "all": tuple(range(n)), None: ()}.get(inputs, inputs)
    else:
        positions = inputs
    if isinstance(positions, int):
        return (positions, result)
    return tuple(zip(positions, result, strict=True))


class _MutableTuple(tuple):
    """A tuple argument marked `kt.mutable`: differentiated by GradOperation."""


class _MutableList(list):
    """A list argument marked `kt.mutable`: differentiated by GradOperation."""


jax.tree_util.register_pytree_node(_MutableTuple, lambda t: (tuple(t), None), lambda _, c: tuple(c))
jax.tree_util.register_pytree_node(_MutableList, lambda t: (list(t), None), lambda _, c: list(c))


def mutable(x):
    """MindSpore's `mutable`: a tuple or list argument that `GradOperation`
    differentiates (its gradient is a tuple or list of the items' gradients,
    as in MindSpore's GRAPH_MODE). Other values are returned as they are."""
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return _MutableTuple(x)
    if isinstance(x, list):
        return _MutableList(x)
    return x


def _constant_sequence(x) -> bool:
    """MindSpore 2.x treats a tuple or list argument as a constant: it is left
    out of GradOperation's gradients unless marked `mutable`."""
    return type(x) in (tuple, list)


def _plain(x):
    if isinstance(x, _MutableTuple):
        return tuple(x)
    if isinstance(x, _MutableList):
        return list(x)
    return x


def _drop_constants(result, spec: GradSpec, constant: set):
    """GradOperation's gradients without those of constant (tuple or list)
    arguments, as MindSpore returns them (probed on MindSpore 2.10, PYNATIVE
    and GRAPH mode): `get_all` leaves them out of the tuple; the first input
    being one gives `()`."""
    if spec.inputs is None:
        return result
    inputs = result[0] if spec.weights is not None else result
    if spec.inputs == "first":
        inputs = () if 0 in constant else inputs
    else:
        inputs = tuple(g for k, g in enumerate(inputs) if k not in constant)
    return (inputs, result[1]) if spec.weights is not None else inputs


def _without_aux(fn):
    """The graph of `fn(*xs)[0]` (cached per graph of `fn`)."""
    primal = graph_of(fn)
    _first_outputs = TRANSFORM.cache("grad.first_outputs")
    entry = _first_outputs.get(id(primal))
    if entry is None or entry[0] is not primal:
        entry = (primal, first_output_graph(primal))
        _first_outputs[id(primal)] = entry
    return entry[1]


def _bind_keywords(fn, args: tuple, kwargs: dict) -> tuple[tuple, list]:
    """`args` and `kwargs` as the positional arguments of `fn`'s graph, and
    for each of `args`: (the graph parameter it went to, its index in `*args`
    or None)."""
    target = fn.construct if isinstance(fn, Cell) else fn
    try:
        sig = inspect.signature(callables.unwrap(target), follow_wrapped=False)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise KTransformError(f"calling {getattr(target, '__name__', target)}: {exc}") from None
    bound.apply_defaults()
    flat, where = [], []
    for name, p in sig.parameters.items():
        if p.kind is p.VAR_POSITIONAL:
            where += [(len(flat), k) for k in range(len(bound.arguments[name]))]
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and len(where) < len(args):
            where.append((len(flat), None))
        flat.append(bound.arguments[name])
    return tuple(flat), where


def _takes_star_args(fn) -> bool:
    """Whether `fn` (a Cell: its `construct`) has a `*args` parameter. A
    gradient or compiled function (it carries its graph) takes its target's
    parameters, whatever its Python signature."""
    if isinstance(fn, FuncGraph) or isinstance(getattr(fn, "__kt_graph__", None), FuncGraph):
        return False
    target = callables.unwrap(fn.construct if isinstance(fn, Cell) else fn)
    try:
        params = inspect.signature(target, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_POSITIONAL for p in params)


def _positions(inputs, n: int) -> tuple[int, ...]:
    """The argument positions a GradSpec's `inputs` differentiates."""
    if inputs == "first":
        return (0,) if n else ()
    if inputs == "all":
        return tuple(range(n))
    if isinstance(inputs, int):
        return (inputs,)
    return tuple(inputs) if isinstance(inputs, tuple) else ()


def check_float_inputs(api: str, args, positions) -> None:
    """JAX's rule for its differentiation API: the inputs differentiated must
    be float (or complex) arrays or Python floats; an integer or boolean input
    raises TypeError instead of getting a silent zero gradient."""
    for k in positions:
        if k >= len(args):
            continue
        for leaf in jax.tree_util.tree_leaves(args[k]):
            dtype = leaf.dtype if hasattr(leaf, "dtype") else np.result_type(type(leaf))
            if not jnp.issubdtype(dtype, jnp.inexact):
                raise TypeError(
                    f"{api} requires real- or complex-valued inputs (a float dtype), but input "
                    f"{k} is {type(leaf).__name__} of dtype {dtype}; pass a float array "
                    "(e.g. x.astype(jnp.float32)) or leave it out of the differentiated inputs "
                    "(kt.GradOperation gives integer arrays an integer gradient, as MindSpore)"
                )


MAX_RETRACES = 12  # each retrace sizes one loop's buffer to its measured trip count
_BOUND_MESSAGE = re.compile(r"while loop at (?P<where>.+) ran (?P<n>\d+) iterations")


def _grow_loop_bound(exc: Exception) -> bool:
    """Raise the bound of the loop named in `exc` to the power of two above its
    trip count (at most twice the memory the loop needs; few retraces)."""
    match = _BOUND_MESSAGE.search(str(exc)) if LoopBoundExceeded.MARK in str(exc) else None
    if match is None:
        return False
    set_loop_bound(1 << int(match["n"]).bit_length(), match["where"])
    return True


class GradOperation:
    """MindSpore's GradOperation: `GradOperation(get_all, get_by_list, sens_param)(fn, weights)`.

    First input only by default (a bare array); `get_all`: a tuple over all
    inputs; `get_by_list`: a tuple over `weights` (a bare array for a single
    Parameter); both: `((inputs...), (weights...))`; `sens_param`: the last
    argument is the output sensitivity, else ones like the output.
    `GradOperation(fn)(x)` is shorthand for `GradOperation()(fn)(x)`.
    As in MindSpore 2.x, `get_by_list` without weights means all trainable
    Parameters, and a tuple or list argument is a constant left out of the
    gradients unless passed as `kt.mutable(xs)` (`_drop_constants`).
    """

    def __new__(cls, get_all=False, get_by_list=False, sens_param=False):
        if callable(get_all) and not isinstance(get_all, bool):
            return GradOperation()(get_all)
        return super().__new__(cls)

    __kt_static__ = True  # built at transform time when called inside user code

    def __init__(self, get_all=False, get_by_list=False, sens_param=False):
        self.get_all, self.get_by_list, self.sens_param = get_all, get_by_list, sens_param

    def __call__(self, fn, weights=None) -> GradFunction:
        if self.get_by_list and weights is None:  # MindSpore: all trainable Parameters
            weights = _trainable_params(fn)
        params, single = as_weights(weights) if self.get_by_list else (None, False)
        if self.get_by_list:
            inputs = "all" if self.get_all else None
        else:
            inputs = "all" if self.get_all else "first"
        target = target_of(fn, arity(fn)) if is_library(fn) else fn
        if inputs == "first" and _takes_no_inputs(target):
            inputs = "all"  # MindSpore: `()` for a network without inputs
        spec = GradSpec(inputs, params, single, self.sens_param, integer_grads=True)
        grad_fn = GradFunction(target, spec)
        grad_fn.constant_sequences = True
        return grad_fn


def _takes_no_inputs(fn) -> bool:
    """Whether `fn` (a function or Cell) is called with no arguments at all."""
    graph = graph_of(fn)
    return graph.signature is None and not graph.param_names


def _trainable_params(fn) -> list[Parameter]:
    """A Cell's trainable Parameters, or the trainable Parameters a function
    reads (what MindSpore's `GradOperation(get_by_list=True)(fn)` without
    weights differentiates, PYNATIVE mode)."""
    if isinstance(fn, Cell):
        return list(fn.trainable_params())
    return [p for p in parameters_of(graph_of(fn)) if p.requires_grad]


def grad(
    fn, grad_position=0, weights=None, has_aux=False, return_ids=False, sens_param=False
) -> GradFunction:
    """MindSpore's `grad`: gradients of `fn` w.r.t. the inputs at
    `grad_position` (an int, a tuple, or None) and `weights`;
    `(inputs, weights)` when both are asked for. `has_aux`: `fn` returns
    `(out, *aux)` and the result is `(grads, (aux...))`. `return_ids`: each
    gradient as `(position, grad)` or `(parameter name, grad)`. `sens_param`:
    the last argument is the output's sensitivity (the first output's with
    `has_aux`)."""
    return GradFunction(
        _library_target(fn),
        _grad_spec(grad_position, weights, has_aux, return_ids, sens_param, False),
        api="kt.grad",
    )


def value_and_grad(
    fn, grad_position=0, weights=None, has_aux=False, return_ids=False, sens_param=False
) -> GradFunction:
    """`(value, gradients)`, the value being `fn`'s whole output (with
    `has_aux`, `(out, *aux)`); see `grad`."""
    return GradFunction(
        _library_target(fn),
        _grad_spec(grad_position, weights, has_aux, return_ids, sens_param, True),
        api="kt.value_and_grad",
    )


def _grad_spec(grad_position, weights, has_aux, return_ids, sens_param, with_value) -> GradSpec:
    if grad_position is None and weights is None:
        raise KTransformError("grad: grad_position and weights cannot both be None")
    ok = isinstance(grad_position, int) or grad_position is None
    if isinstance(grad_position, (tuple, list)):
        ok = all(isinstance(k, int) and not isinstance(k, bool) for k in grad_position)
        grad_position = tuple(grad_position)
    if not ok or isinstance(grad_position, bool):
        raise KTransformError(
            f"grad: grad_position must be an int, a tuple of ints or None, not {grad_position!r}"
        )
    params, single = as_weights(weights)
    return GradSpec(
        grad_position,
        params,
        single,
        sens_param=bool(sens_param),
        has_aux=bool(has_aux),
        with_value=with_value,
        return_ids=bool(return_ids),
    )


def _library_target(fn):
    """A library function as the target of `grad`-like functions: wrapped for
    the number of positional parameters its signature requires."""
    if not is_library(fn):
        return fn
    return target_of(fn, arity(fn))


grad.__kt_static__ = True
value_and_grad.__kt_static__ = True


def vjp(fn, *inputs, weights=None, has_aux=False):
    """MindSpore's `vjp(fn, *inputs, weights=None, has_aux=False)`:
    `(out, vjp_fn)`, or `(out, vjp_fn, aux)` with `has_aux` (`fn` returns
    `(out, *aux)`; one aux value bare, several as a tuple). `vjp_fn(v)`
    returns a tuple of the inputs' gradients; with `weights`,
    `(input gradients, weight gradients)` (a bare gradient for one Parameter)."""
    primal = graph_of(target_of(fn, len(inputs)))
    params, single = as_weights(weights)
    spec = GradSpec("all", params, single, sens_param=True, has_aux=bool(has_aux))
    grad_fn = GradFunction(primal, spec)
    forward = CompiledGraph(primal)
    forward.bound_loops = True
    out = forward(*inputs)
    if not has_aux:
        return out, lambda v: grad_fn(*inputs, v)
    out, aux = rt.split_aux(out)
    return out, lambda v: grad_fn(*inputs, v)[0], aux


def jvp(fn, inputs, v, has_aux=False):
    """`(out, J v)`, or `(out, J v, aux)` with `has_aux` (`fn` returns
    `(out, *aux)`; one aux value bare, several as a tuple): forward mode by
    double reverse. `inputs` and `v` are an array or a tuple of them
    (MindSpore's convention)."""
    single = not isinstance(inputs, (tuple, list))
    xs, vs = ((inputs,), (v,)) if single else (tuple(inputs), tuple(v))
    if len(xs) != len(vs):
        raise KTransformError(f"jvp: {len(xs)} inputs but {len(vs)} tangents")
    vs = tuple(_integer_tangent(xs, k, t) for k, t in enumerate(vs))
    fn = target_of(fn, len(xs))
    if not has_aux:
        return _jvp(fn, xs, vs)
    out, jv = _jvp(_without_aux(fn), xs, vs)
    return out, jv, rt.split_aux(_forward(fn)(*xs))[1]


def _forward(fn) -> CompiledGraph:
    """`fn` compiled (cached per graph), for the aux values of `has_aux`."""
    primal = graph_of(fn)
    _forwards = TRANSFORM.cache("grad.forwards")
    entry = _forwards.get(id(primal))
    if entry is None or entry[0] is not primal:
        entry = (primal, CompiledGraph(primal, remake=lambda: _forward(fn)))
        entry[1].bound_loops = True
        _forwards[id(primal)] = entry
    return entry[1]


def _integer_tangent(xs, k: int, t):
    """JAX's rule for the tangent of an integer or boolean input `xs[k]`: it
    must be float0 (a zero of no dtype; made zeros here) or, ours too, a zero
    of an integer or boolean dtype; anything else is a TypeError."""
    leaves = jax.tree_util.tree_leaves
    if all(jnp.issubdtype(_dtype_of(leaf), jnp.inexact) for leaf in leaves(xs[k])):
        return t
    if getattr(t, "dtype", None) == jax.dtypes.float0:
        return jnp.zeros_like(xs[k])
    integral = all(not jnp.issubdtype(_dtype_of(leaf), jnp.inexact) for leaf in leaves(t))
    nonzero = any(
        not isinstance(leaf, jax.core.Tracer) and np.any(np.asarray(leaf)) for leaf in leaves(t)
    )
    if not integral or nonzero:
        check_float_inputs("kt.jvp", xs, (k,))
    return t


def _dtype_of(leaf):
    return leaf.dtype if hasattr(leaf, "dtype") else np.result_type(type(leaf))


vjp.__kt_lower__ = lowering.lower_vjp
jvp.__kt_lower__ = lowering.lower_jvp


def _jvp(fn, inputs, v):
    """`jvp` without the input check (jacfwd and hvp check their own input)."""
    single = not isinstance(inputs, (tuple, list))
    xs = (inputs,) if single else tuple(inputs)
    vs = (v,) if single else tuple(v)  # J v is shaped like the output either way
    if len(xs) != len(vs):
        raise KTransformError(f"jvp: {len(xs)} inputs but {len(vs)} tangents")
    return _jvp_function(fn)(*xs, *vs)


def _jvp_remake(fn):
    def remake():
        del TRANSFORM.cache("grad.jvp")[id(fn)]
        return _jvp_function(fn)

    return remake


def _jvp_function(fn) -> CompiledGraph:
    _jvp_cache = TRANSFORM.cache("grad.jvp")
    entry = _jvp_cache.get(id(fn))
    if entry is None or entry[0] is not fn:
        primal = graph_of(fn)
        entry = (fn, CompiledGraph(jvp_graph(primal), fn, primal=primal, remake=_jvp_remake(fn)))
        entry[1].bound_loops = True
        _jvp_cache[id(fn)] = entry
    return entry[1]


class Jvp:
    """MindSpore-style `Jvp(fn)(inputs, v) -> (out, jvp_out)`."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, inputs, v):
        return jvp(self.fn, inputs, v)


class Jacobian:
    """What `jacrev(fn, grad_position, has_aux)` / `jacfwd(...)` return:
    called on arrays, the Jacobian of `fn` w.r.t. the input at
    `grad_position` (one vjp per output element, or one jvp per input
    element, vmapped); for a tuple of positions output-major, as JAX's and
    MindSpore's: the output's structure of tuples over the positions
    (`jac[i][j]` = d out_i / d in_j for a tuple output); and
    `(jacobian, aux)` with `has_aux` (MindSpore's structure: one aux value
    bare, several as a tuple); called inside code being transformed, it
    lowers to graphs (`lowering.lower_jacobian`)."""

    def __init__(self, fn, argnum, forward: bool, has_aux: bool = False):
        if isinstance(argnum, list):
            argnum = tuple(argnum)
        positions = argnum if isinstance(argnum, tuple) else (argnum,)
        if not positions or not all(
            isinstance(k, int) and not isinstance(k, bool) for k in positions
        ):
            raise KTransformError(
                f"jacfwd/jacrev: grad_position must be an int or a tuple of ints, not {argnum!r}"
            )
        self.fn, self.argnum, self.forward, self.has_aux = fn, argnum, forward, bool(has_aux)
        self.positions = positions
        try:  # its inputs are fn's: what a Jacobian of it is called with (`arity`)
            self.__signature__ = inspect.signature(fn)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args):
        check_float_inputs("kt.jacfwd" if self.forward else "kt.jacrev", args, self.positions)
        for k in self.positions:
            if not -len(args) <= k < len(args):
                raise KTransformError(
                    f"jacfwd/jacrev: grad_position {k} but the function got {len(args)} inputs"
                )
        fn = target_of(self.fn, len(args))
        target = _without_aux(fn) if self.has_aux else fn
        one = self._forward if self.forward else self._reverse
        parts = [one(target, k % len(args), args) for k in self.positions]
        tree = parts[0][0]
        if isinstance(self.argnum, tuple):  # each output leaf: a tuple over the positions
            blocks = [tuple(p[1][i] for p in parts) for i in range(tree.num_leaves)]
        else:
            blocks = parts[0][1]
        jac = jax.tree_util.tree_unflatten(tree, blocks)
        return (jac, rt.split_aux(_forward(fn)(*args))[1]) if self.has_aux else jac

    def _reverse(self, fn, argnum: int, args):
        """One vmapped vjp per output leaf: `(the output's treedef, a block
        per output leaf)`, each block shaped as input `argnum` (JAX's nesting:
        the output's structure of the input's structure)."""
        grad_fn = GradFunction(fn, GradSpec(inputs=argnum, sens_param=True))
        out = CompiledGraph(graph_of(fn))(*args)
        leaves, tree = jax.tree_util.tree_flatten(out)
        blocks = []
        for k, leaf in enumerate(leaves):
            basis = _basis(leaf)

            def row(u, k=k):
                sens = [u if j == k else jnp.zeros_like(other) for j, other in enumerate(leaves)]
                return grad_fn(*args, jax.tree_util.tree_unflatten(tree, sens))

            rows = jax.vmap(row)(basis)
            blocks.append(
                jax.tree_util.tree_map(
                    lambda r, x, leaf=leaf: r.reshape(*jnp.shape(leaf), *jnp.shape(x)),
                    rows,
                    args[argnum],
                )
            )
        return tree, blocks

    def _forward(self, fn, argnum: int, args):
        """One vmapped jvp per input leaf, regrouped as `_reverse` gives them."""
        x_leaves, x_tree = jax.tree_util.tree_flatten(args[argnum])
        per_input = []
        for k, leaf in enumerate(x_leaves):
            leaf = jnp.asarray(leaf)

            def column(v, k=k):
                seed = [v if j == k else jnp.zeros_like(o) for j, o in enumerate(x_leaves)]
                tangents = tuple(
                    jax.tree_util.tree_unflatten(x_tree, seed)
                    if i == argnum
                    else jax.tree_util.tree_map(jnp.zeros_like, a)
                    for i, a in enumerate(args)
                )
                return _jvp(fn, tuple(args), tangents)[1]

            cols = jax.vmap(column)(_basis(leaf))
            out_leaves, out_tree = jax.tree_util.tree_flatten(cols)
            per_input.append([_columns_last(c, leaf) for c in out_leaves])
        blocks = [
            jax.tree_util.tree_unflatten(x_tree, [cols[j] for cols in per_input])
            for j in range(len(per_input[0]))
        ]
        return out_tree, blocks

    def __kt_lower__(self, builder, args, kwargs, e):
        return lowering.lower_jacobian(builder, self, args, e)


def _basis(leaf):
    """The unit vectors of `leaf`'s space, stacked: shape (size, *leaf.shape)."""
    size, shape = int(np.prod(jnp.shape(leaf))), jnp.shape(leaf)
    return jnp.eye(size, dtype=jnp.result_type(leaf)).reshape(size, *shape)


def _columns_last(cols, leaf):
    """Columns stacked first (size, *out) as a Jacobian block (*out, *leaf.shape)."""
    out_shape = cols.shape[1:]
    return jnp.moveaxis(cols.reshape(cols.shape[0], -1), 0, -1).reshape(*out_shape, *leaf.shape)


def jacrev(fn, grad_position=0, has_aux: bool = False) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position`, by
    reverse mode (MindSpore's `jacrev`; see `Jacobian`)."""
    return Jacobian(fn, grad_position, forward=False, has_aux=has_aux)


def jacfwd(fn, grad_position=0, has_aux: bool = False) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position`, by
    forward mode (MindSpore's `jacfwd`; see `Jacobian`)."""
    return Jacobian(fn, grad_position, forward=True, has_aux=has_aux)


def hessian(fn, argnum: int = 0) -> Jacobian:
    """The Hessian of a scalar `fn`: reverse over reverse (jacrev of the gradient)."""
    return jacrev(GradFunction(fn, GradSpec(inputs=argnum), api="kt.hessian"), argnum)


def hvp(fn, args, v, argnum: int = 0):
    """A Hessian-vector product by forward over reverse: jvp of the gradient."""
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    check_float_inputs("kt.hvp", args, (argnum,))
    grad_fn = GradFunction(fn, GradSpec(inputs=argnum))
    zeros = jax.tree_util.tree_map
    tangents = tuple(v if k == argnum else zeros(jnp.zeros_like, a) for k, a in enumerate(args))
    return _jvp(grad_fn, args, tangents)[1]


class Jit:
    """What `kt.jit(fn)` returns: `fn` compiled as one program at its first
    call, as MindSpore's `jit` transforms lazily (so `@kt.jit` works on a
    recursive function, and on one calling functions defined after it).
    Keyword arguments and defaults bind as in a call of `fn`. Inside
    transformed code it is `fn`'s graph. A Cell is compiled once per
    `training` flag, read at each call."""

    def __init__(self, fn):
        self.__wrapped__ = fn
        self._compiled: dict[object, CompiledGraph] = {}

    def compiled(self, star_arity: int | None = None) -> CompiledGraph:
        """The program for the Cell's current `training` flag (MindSpore
        compiles a Cell once per phase: `set_train` switches between them)
        and, for a function with `*args`, for the number of values in it."""
        key = (getattr(self.__wrapped__, "training", None), star_arity)
        if key not in self._compiled:
            graph = graph_of(self.__wrapped__, star_arity)
            remake = functools.partial(self._remake, key, star_arity)
            self._compiled[key] = CompiledGraph(
                graph, self.__wrapped__, remake=remake, jit_host=True
            )
        return self._compiled[key]

    def _remake(self, key, star_arity) -> CompiledGraph:
        if isinstance(self.__wrapped__, CompiledGraph):  # kt.jit(kt.grad(f))
            self.__wrapped__.refresh()
        del self._compiled[key]
        return self.compiled(star_arity)

    @property
    def __kt_graph__(self) -> FuncGraph:
        """The graph of `fn` (while `fn` is being parsed, the graph being built:
        so a recursive `@kt.jit` function calls itself as plain recursion)."""
        return parse(self.__wrapped__)

    def __call__(self, *args, **kwargs):
        if _takes_star_args(self.__wrapped__):
            args, where = _bind_keywords(self.__wrapped__, args, kwargs)
            return self.compiled(sum(k is not None for _, k in where))(*args)
        compiled = self.compiled()
        graph = compiled.__kt_graph__
        defaulted = len(args) < len(graph.param_names or ())
        if kwargs or graph.signature is not None or defaulted:
            args = _bind_keywords(self.__wrapped__, args, kwargs)[0]
        return compiled(*args)

    def __getattr__(self, name):  # `params`, ...: the compiled program's
        if name.startswith("__") or name == "_compiled":  # the parser asks before compiling
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"<k_transform jit of {self.__wrapped__!r}>"


def jit(fn=None, *, backend: str | None = None, **options):
    """`fn` (a function or Cell, e.g. a `TrainOneStepCell`) compiled as one
    program at its first call: Parameters are read when called and their
    `Assign`ed values written back afterwards; jitted, with Python scalars
    static. MindSpore's `backend`, `jit_level` and other options are
    accepted and have no effect (XLA compiles every program);
    `@kt.jit(backend=...)` works as a decorator factory."""
    if fn is None:
        return lambda f: Jit(f)
    return Jit(fn)


jacrev.__kt_static__ = jacfwd.__kt_static__ = hessian.__kt_static__ = True
hvp.__kt_lower__ = lowering.lower_hvp
