"""Reverse-mode API: `GradOperation`, `grad`, `value_and_grad`, `vjp`, `mutable`.

A gradient function (`GradFunction`, a `CompiledGraph`: see
`k_transform.compiled` for how it runs) parses its target once (a function,
a bound method or a Cell's `construct`), applies the DFunctor and generates
the fprop/bprop module; one program is shared by every gradient object made
for the same function and options while the function's names hold.

Pytrees. Inputs, outputs, sensitivities, tangents and `has_aux` values may
be nested tuples, lists, dicts, NamedTuples and registered dataclasses or
classes; gradients come back with the input's structure and types, and
`jacrev`/`jacfwd`/`hessian` nest as JAX's do (the output's structure of the
input's). Pytree fields read inside the program are differentiated
(`ops.python.GetAttr`, `MakeNode`, `ReplaceFields`).

Integer inputs. `grad` and `value_and_grad` are MindSpore's and follow it
(checked against MindSpore 2.10, PYNATIVE and GRAPH mode): an integer array
input gets its gradient in its own dtype (as `GradOperation` below), and a
Python int or bool at a differentiated position is left out of the
gradients: `grad(f, grad_position=1)(x, 2)` is `()`, `grad_position=(0, 1)`
gives the bare gradient of `x` (a tuple of one left is bare, as in
MindSpore), and the value of `value_and_grad` is computed as usual (a Python
int for `f(3, 4)`). Difference kept on purpose: MindSpore also leaves out
Python floats; ours are traced and differentiated (the design card).
The JAX-style API (`jvp`, `jacfwd`, `jacrev`, `hessian`, `hvp`, and `grad`
or `value_and_grad` spelled with JAX's `argnums=`) raises TypeError, as JAX
does, when an input it differentiates is an integer or boolean (array or
Python int).
`vjp` accepts them, as JAX's vjp does, and gives them a zero gradient (JAX
gives a float0 zero); `jvp` has no float0 tangents, so it refuses them.
`GradOperation` follows MindSpore 2.x (checked against MindSpore 2.10,
PYNATIVE and GRAPH mode): an integer array input gets its gradient, computed
by the rules and cast to its own integer dtype (`x * x` at int32 `[3, 4]`
gives int32 `[6, 8]`). Differences from MindSpore, kept on purpose:
MindSpore's `Cast` passes the gradient through a cast to an integer
(truncated), as ours does for `ops.Cast`/`ops.cast` (`ops.shape.MsCast`)
but not for `.astype`, `jnp.asarray` or `lax.convert_element_type`, which
follow JAX (no gradient through a cast to an integer or bool), and it leaves Python
scalars (ints and floats) out of the gradient tuple altogether, where ours
keeps one entry per input: a zero for a Python int (static), the gradient
for a Python float (traced, as the design card says).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from operator import getitem

import jax

from k_transform import lowering
from k_transform import runtime as rt
from k_transform.api import graph_of
from k_transform.cell import Cell, Parameter
from k_transform.compiled import (
    CompiledGraph,
    bind_keywords,
    check_float_inputs,
    parameters_of,
    takes_star_args,
    with_defaults,
)
from k_transform.context import TRANSFORM
from k_transform.dfunctor.builder import Builder, new_graph
from k_transform.errors import KTransformError, KTransformRuntimeError, KTransformValueError
from k_transform.frontend.guards import guards_of, stale
from k_transform.frontend.targets import arity, is_library, target_of
from k_transform.ir.nodes import Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.protocol import kt_attribute
from k_transform.runtime import host_log
from k_transform.transforms import (
    GradSpec,
    as_weights,
    grad_graph,
)


def stop_gradient(x):
    """`x`, with no gradient flowing back (the `StopGradient` primitive)."""
    return jax.lax.stop_gradient(x)


class GradOperation:
    """MindSpore's GradOperation: `GradOperation(get_all, get_by_list, sens_param)(fn, weights)`.

    First input only by default (a bare array); `get_all`: a tuple over all
    inputs; `get_by_list`: a tuple over `weights` (a bare array for a single
    Parameter); both: `((inputs...), (weights...))`; `sens_param`: the last
    argument is the output sensitivity, else ones like the output.
    `GradOperation(fn)(x)` is shorthand for `GradOperation()(fn)(x)`.
    As in MindSpore 2.x, `get_by_list` without weights means all trainable
    Parameters (a function's: those it reads, and those of the Cells it is
    given or gives a function), and a tuple or list argument is a constant
    left out of the gradients unless passed as `kt.mutable(xs)`
    (`_drop_constants`).
    """

    def __new__(cls, get_all=False, get_by_list=False, sens_param=False):
        if callable(get_all) and not isinstance(get_all, bool):
            return GradOperation()(get_all)
        return super().__new__(cls)

    __kt_static__ = True  # built at transform time when called inside user code

    def __init__(self, get_all=False, get_by_list=False, sens_param=False):
        self.get_all, self.get_by_list, self.sens_param = get_all, get_by_list, sens_param

    def __call__(self, fn, weights=None) -> GradFunction:
        every = self.get_by_list and weights is None and not isinstance(fn, Cell)
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
        spec = GradSpec(
            inputs, params, single, self.sens_param, integer_grads=True, all_trainable=every
        )
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
    graph = graph_of(fn)
    found = {id(p): p for p in parameters_of(graph)}
    # a Cell it gives a function (`loss(NET, x)`), which reads it when it runs
    given = _given_params(_constant_arguments(graph), {}, tuple(found.values()))
    return [p for p in [*found.values(), *given] if p.requires_grad]


def _constant_arguments(root: FuncGraph) -> tuple:
    """The constants the graphs reachable from `root` pass to calls."""
    return tuple(
        a.value
        for graph in root.reachable()
        for node in graph.nodes
        for a in node.args
        if isinstance(a, Constant)
    )


def _graph_inputs(inputs, signature):
    """The inputs of a gradient's graph (what a transform of the gradient
    function differentiates: `kt.hessian(f, argnums=1)`) for the positions
    `inputs` a call counts as passed (`_keyword_call` binds each call): the
    same positions where the positional parameters come first in the graph
    ("all": those parameters, not the keyword-only ones after them); behind
    a `*args` tuple they are not positions of the graph, which then takes
    the first ("first")."""
    if signature.vararg is not None:
        return "first"
    if inputs == "all":
        return tuple(range(len(signature.positional)))
    return inputs


def position(grad_position, argnums, api: str):
    """The input position(s) asked for: MindSpore's `grad_position`, or
    JAX's `argnums` spelling of it (a JAX user's `grad(f, argnums=1)`)."""
    if argnums is None:
        return grad_position
    if grad_position not in (0, argnums):
        raise KTransformValueError(
            f"{api}: grad_position={grad_position!r} and argnums={argnums!r} both given "
            "(they are one argument: MindSpore's spelling and JAX's)"
        )
    return argnums


def grad(
    fn,
    grad_position=0,
    weights=None,
    has_aux=False,
    return_ids=False,
    sens_param=False,
    *,
    argnums=None,
) -> GradFunction:
    """MindSpore's `grad`: gradients of `fn` w.r.t. the inputs at
    `grad_position` (an int, a tuple, or None) and `weights`;
    `(inputs, weights)` when both are asked for. `has_aux`: `fn` returns
    `(out, *aux)` and the result is `(grads, (aux...))`. `return_ids`: each
    gradient as `(position, grad)` or `(parameter name, grad)`. `sens_param`:
    the last argument is the output's sensitivity (the first output's with
    `has_aux`).

    Integer inputs, as MindSpore's `grad`: an integer array gets its gradient
    in its own dtype (`x * x` at int32 `[3, 4]` gives int32 `[6, 8]`); a
    Python int or bool is left out of the gradients (`()` when nothing is
    left, the bare gradient when one is: `grad(f, (0, 1))(x, 2)` is f's
    gradient w.r.t. `x`). Python floats are differentiated. `argnums`: JAX's
    name for `grad_position`; spelled so, the call follows JAX on integer
    inputs too (a TypeError, as JAX's gradient raises given an integer input)."""
    options = (weights, has_aux, return_ids, sens_param)
    return _gradient("kt.grad", fn, position(grad_position, argnums, "kt.grad"), options, argnums)


def _gradient(api: str, fn, grad_position, options: tuple, argnums=None) -> GradFunction:
    """`grad` and `value_and_grad` (`api`): `options` is `(weights, has_aux,
    return_ids, sens_param)`. JAX's `argnums` spelling makes it JAX's API
    (not in `MINDSPORE_APIS`): integer inputs at those positions raise."""
    spec = _grad_spec(grad_position, *options, api == "kt.value_and_grad")
    if argnums is not None:
        api = f"{api}(argnums={argnums!r})"
    return GradFunction(_library_target(fn), spec, api=api)


def get_grad(gradients, identifier):
    """MindSpore's `get_grad`: from the gradients of `grad(..., return_ids=True)`
    (pairs `(position, gradient)` and `(Parameter name, gradient)`, in
    tuples), the gradient of input `identifier` (an int) or of the Parameter
    `identifier`; a RuntimeError when there is none."""
    key = identifier if isinstance(identifier, int) else getattr(identifier, "name", None)
    if key is None or isinstance(identifier, bool):
        raise TypeError(
            f"get_grad: the identifier must be an int or a Parameter, not "
            f"{type(identifier).__name__}"
        )
    todo = [gradients]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, (tuple, list)):
            continue
        if len(item) == 2 and isinstance(item[0], (int, str)) and not isinstance(item[0], bool):
            if item[0] == key and type(item[0]) is type(key):
                return item[1]
            continue
        todo.extend(item)
    raise RuntimeError(f"get_grad: no gradient for {identifier!r} in the gradients given")


def value_and_grad(
    fn,
    grad_position=0,
    weights=None,
    has_aux=False,
    return_ids=False,
    sens_param=False,
    *,
    argnums=None,
) -> GradFunction:
    """`(value, gradients)`, the value being `fn`'s whole output (with
    `has_aux`, `(out, *aux)`); see `grad`."""
    api, options = "kt.value_and_grad", (weights, has_aux, return_ids, sens_param)
    return _gradient(api, fn, position(grad_position, argnums, api), options, argnums)


def _grad_spec(grad_position, weights, has_aux, return_ids, sens_param, with_value) -> GradSpec:
    if grad_position is None and weights is None:
        raise KTransformValueError("grad: grad_position and weights cannot both be None")
    if isinstance(grad_position, (tuple, list)) and not grad_position:
        raise KTransformRuntimeError(
            "grad: grad_position is an empty tuple (MindSpore refuses it too): give the "
            "positions, or None for the weights' gradients alone"
        )
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
        integer_grads=True,  # MindSpore: an integer array's gradient in its dtype
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
    `(input gradients, weight gradients)` (a bare gradient for one Parameter).
    For a tuple output, `vjp_fn(v0, v1)` (MindSpore's) is `vjp_fn((v0, v1))`.
    `fn` may take `*args` (`spread_args`); a parameter left to its default
    is passed its default and has no gradient, as in JAX's vjp."""
    target = spread_args(target_of(fn, len(inputs)), len(inputs))
    primal = graph_of(target)
    given, inputs = len(inputs), with_defaults(target, inputs)
    params, single = as_weights(weights)
    positions = "all" if len(inputs) == given else tuple(range(given))
    spec = GradSpec(positions, params, single, sens_param=True, has_aux=bool(has_aux))
    grad_fn = GradFunction(primal, spec)
    if primal.may_call_host():
        # the value as the pullback computes it (K of `fn`): host code runs once,
        # there, and each call of the pullback replays it (as JAX's would)
        run = host_log.OneRun()
        value_spec = dataclasses.replace(spec, sens_param=False, with_value=True)
        out = run(GradFunction(primal, value_spec), *inputs)[0]
    else:
        run = host_log.call
        forward = CompiledGraph(primal)
        forward.bound_loops = True
        out = forward(*inputs)

    def vjp_fn(*cotangents):
        v = cotangents[0] if len(cotangents) == 1 else cotangents
        grads = run(grad_fn, *inputs, v)
        return grads[0] if has_aux else grads

    if not has_aux:
        return out, vjp_fn
    out, aux = rt.split_aux(out)
    return out, vjp_fn, aux


def spread_args(fn, n: int):
    """`fn`, or for a function taking `*args` (a Cell whose `construct`
    does), a graph of `n` parameters calling it with them, `fn(x0, ...,
    x{n-1})`: what vjp, jvp and the Jacobians differentiate, one input per
    parameter (the graph of a `*args` function takes the tuple); for the
    gradient of a `*args` function, its gradient for `n` arguments."""
    graph_for = kt_attribute(fn, "__kt_graph_for__", None)
    if graph_for is not None:
        return graph_for(n)
    if not takes_star_args(fn):
        return fn
    made = TRANSFORM.cache("grad.spread_args")
    entry = made.get((id(fn), n))
    if entry is None or entry[0] is not fn:
        entry = (fn, _spread_graph(fn, n))
        made[(id(fn), n)] = entry
    return entry[1]


def _spread_graph(fn, n: int) -> FuncGraph:
    # `*args` holds the arguments past the named positional parameters
    star = sum(k is not None for _, k in bind_keywords(fn, tuple(range(n)), {})[1])
    primal = graph_of(fn, star_arity=star)
    graph, params = new_graph(f"{primal.name}_spread", primal, [f"x{k}" for k in range(n)])
    b = Builder(graph)
    flat, _ = bind_keywords(fn, tuple(params), {})
    args = [
        b.tuple(*item)
        if isinstance(item, tuple)
        else Constant(item, hint=repr(item))
        if not isinstance(item, Node)
        else item
        for item in flat
    ]
    graph.output = b.call(Constant(primal, hint=primal.name), *args)
    graph.guards = guards_of(primal)
    return graph


vjp.__kt_lower__ = lowering.lower_vjp


# MindSpore's `grad` and `value_and_grad`: integer inputs give a result (see
# the module docstring); the rest of the JAX-style API refuses them.
MINDSPORE_APIS = ("kt.grad", "kt.value_and_grad")

# Gradient programs kept for new gradient objects (the most recent ones):
# a process making gradients of ever new functions must not keep them all.
SHARED_PROGRAMS = 64


class GradFunction(CompiledGraph):
    """A gradient function: what `GradOperation(...)(fn)` returns.

    `api` names the function that made it (`kt.grad`, `kt.hessian`, ...):
    MindSpore's (`MINDSPORE_APIS`) leave Python ints out of the gradients,
    the JAX-style ones refuse integer inputs at the differentiated
    positions, as JAX does.
    """

    def __init__(
        self,
        fn,
        spec: GradSpec,
        jit: bool | None = None,
        api: str | None = None,
        bound: bool = False,
        jit_host: bool = False,
    ):
        self.spec = spec
        self.api = api
        self.constant_sequences = False  # GradOperation: see `_drop_constants`
        # One program per (function, options), shared by every gradient
        # object asking for it: a fresh `kt.grad(f)(x)` transforms nothing
        # and reuses the compiled code while f's names hold (guards). A
        # program compiled with host code in it shares its graph and
        # generated code, not its traces (`CompiledGraph.traces_host`): the
        # host code runs again at the new object's first trace.
        made = TRANSFORM.cache("grad.functions")
        key = (id(fn), getattr(fn, "training", None), spec, jit, api, bound, jit_host)
        entry = made.get(key)
        if entry is not None and entry[0] is fn and not stale(entry[1].guards):
            self.__dict__.update(entry[1].__dict__, constant_sequences=False)
            if self.__dict__.get("traces_host"):
                self.own_traces()
                self._by_keywords = {}  # (made again: each with traces of its own)
                if "_star" in self.__dict__:
                    self._arities = {}
            return
        remake = functools.partial(GradFunction, fn, spec, jit, api, bound, jit_host)
        self._made = (fn, spec, jit, api, bound)
        self._by_keywords: dict[tuple, GradFunction] = {}
        star = not bound and (
            (isinstance(fn, types.FunctionType) and takes_star_args(fn))
            or kt_attribute(fn, "__kt_graph_for__", None) is not None  # grad(grad(f)), f(*args)
        )
        if star:
            # `def summed(*args): return jnp.sum(fun(*args))` (a user's `egrad`):
            # called with positional arguments, it is made per number of them,
            # so `fun(*args)` is a call of known arity and, nested
            # (`egrad(egrad(f))`), each level a function of those arguments.
            self._star = (fn, spec, jit, api, bound, jit_host)
            self._arities: dict[int, GradFunction] = {}
            self.__kt_graph_for__ = lambda n: self._for_arity(n).__kt_graph__
        try:
            primal = graph_of(fn)
        except KTransformError:
            if not star:
                raise
            return  # made per arity only (keywords then cannot be bound)
        # `bound` (or a graph given): called with the graph's own parameters
        # (see `_keyword_call`).
        graph_given = isinstance(fn, FuncGraph)
        self._binds = not bound and not graph_given and primal.signature is not None
        # Parameters a call may leave to their defaults (bound like keywords).
        names, defaults = primal.param_names or (), primal.defaults
        self._n_params = (
            len(names) if defaults and not bound and not isinstance(fn, FuncGraph) else None
        )
        if self._binds:  # positions in `spec` count the arguments as passed
            spec = dataclasses.replace(spec, inputs=_graph_inputs(spec.inputs, primal.signature))
        # `return_ids`: the ids are attached after the call (strings are no
        # jit outputs); called inside transformed code, the graph holds them.
        graph = grad_graph(primal, dataclasses.replace(spec, return_ids=False))
        super().__init__(graph, fn, jit, primal=primal, remake=remake, jit_host=jit_host)
        if isinstance(fn, (types.FunctionType, functools.partial)) and not spec.sens_param:
            # called as `fn` is (`grad(grad(f))(a)` leaves f's defaults to it;
            # a partial's keywords are keyword defaults)
            self.__signature__ = inspect.signature(fn)
        if spec.return_ids:
            self.__kt_graph__ = grad_graph(primal, spec)
        self.bound_loops = True
        made[key] = (fn, self)  # only once made: a refusal leaves no entry
        while len(made) > SHARED_PROGRAMS:  # each holds compiled XLA programs
            del made[next(iter(made))]

    def __repr__(self) -> str:
        if "_star" in self.__dict__:
            return f"<k_transform gradient of {getattr(self._star[0], '__name__', '?')}(*args)>"
        return super().__repr__()

    def under_jit(self) -> GradFunction:
        """This gradient function as `kt.jit` runs it (see `CompiledGraph`):
        made again with the same target and options, so that it binds
        keywords, defaults and `*args` as a call of it does."""
        fn, spec, jit, api, bound = self._made
        made = GradFunction(fn, spec, jit, api, bound, jit_host=True)
        made.constant_sequences = self.constant_sequences  # GradOperation's
        return made

    def _with_weights(self, more: tuple) -> GradFunction:
        """This gradient (`all_trainable`) with the Parameters `more` added to its weights."""
        made = self.__dict__.setdefault("_widened", {})
        key = tuple(id(p) for p in more)
        if key not in made or made[key][0] != more:
            weights = (*self.spec.weights, *more)
            spec = dataclasses.replace(self.spec, weights=weights, all_trainable=False)
            grad_fn = GradFunction(self.fn, spec, self.jit, self.api)
            grad_fn.constant_sequences = self.constant_sequences
            made[key] = (more, grad_fn)
        return made[key][1]

    def _per_arity(self, kwargs: dict) -> bool:
        """Whether this call goes to the per-arity gradient of a `*args`
        function (keywords keep the generic graph, where there is one)."""
        return "_star" in self.__dict__ and not (kwargs and "_graph" in self.__dict__)

    def _for_arity(self, n: int) -> GradFunction:
        """A `*args` function's gradient for `n` arguments (its graph specialised)."""
        if n not in self._arities:
            fn, spec, jit, api, bound, jit_host = self._star
            made = GradFunction(spread_args(fn, n), spec, jit, api, bound, jit_host)
            self._arities[n] = made
        return self._arities[n]

    def __call__(self, *args, **kwargs):
        if self.spec.all_trainable:
            n = len(args) - self.spec.sens_param
            given = _given_params(args[:n], kwargs, self.spec.weights)
            if given:  # the trainable Parameters of the Cells it is given, too
                return self._with_weights(given)(*args, **kwargs)
        if self._per_arity(kwargs):
            return self._for_arity(len(args) - self.spec.sens_param)(*args, **kwargs)
        if not self.constant_sequences:
            return self._call(args, kwargs)
        n = len(args) - self.spec.sens_param
        constant = {k for k in range(n) if _constant_sequence(args[k])}
        result = self._call(tuple(_plain(a) for a in args), kwargs)
        return _drop_constants(result, self.spec, constant) if constant else result

    def _call(self, args: tuple, kwargs: dict):
        if self.spec.sens_param and not args:
            raise KTransformError("sens_param=True: pass the output sensitivity last")
        n_inputs = len(args) - self.spec.sens_param
        if self.spec.weights:
            _refuse_weights_given(self.spec.weights, args[:n_inputs], kwargs, self.fn)
        positions = _positions(self.spec.inputs, n_inputs)
        static = ()
        if self.api in MINDSPORE_APIS:
            static = tuple(k for k in positions if 0 <= k < n_inputs and _python_int(args[k]))
        elif self.api is not None:
            check_float_inputs(self.api, args[:n_inputs], positions)
        defaulted = self._n_params is not None and n_inputs < self._n_params
        if kwargs or self._binds or defaulted:
            result = self._keyword_call(args, kwargs)
        else:
            result = super().__call__(*args)
        if static:
            result = _without_inputs(result, self.spec, n_inputs, static)
        if self.spec.return_ids:
            return _with_ids(result, self.spec, n_inputs, static)
        return result

    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        """Called inside code being transformed: a call of its graph (as any
        `__kt_graph__`); for MindSpore's `grad` a Python int constant at a
        differentiated position is left out of the gradients, as `__call__`
        leaves it out."""
        if self._per_arity(kwargs):
            n = len(args) - self.spec.sens_param
            return self._for_arity(n).__kt_lower__(builder, args, kwargs, e)
        graph = self.__kt_graph__
        result = builder.call(Constant(graph, hint=graph.name), args, kwargs, e)
        n = len(args) - self.spec.sens_param
        static = ()
        if self.api in MINDSPORE_APIS and not kwargs and not self._binds:
            static = tuple(
                k
                for k in _positions(self.spec.inputs, n)
                if 0 <= k < n and isinstance(args[k], Constant) and _python_int(args[k].value)
            )
        if not static:
            return result

        def item(node, k):
            return builder.apply(prims.GetItem(), node, Constant(k), node=e)

        def make(*nodes):
            return builder.apply(prims.MakeTuple(), *nodes, node=e)

        return _without_inputs(result, self.spec, n, static, item, make)

    def _keyword_call(self, args: tuple, kwargs: dict):
        """Keyword arguments are passed, not differentiated (MindSpore's and
        JAX's semantics): "all" means the positional inputs only. With
        `*args`, input positions count the arguments as passed."""
        sens = args[-1:] if self.spec.sens_param else ()
        inputs = args[: len(args) - len(sens)]
        flat, where = bind_keywords(self.fn, inputs, kwargs)
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
            self._by_keywords[key] = GradFunction(
                self.fn, spec, self.jit, bound=True, jit_host=self.jit_host
            )
        return CompiledGraph.__call__(self._by_keywords[key], *flat, *sens)


def _given_params(args: tuple, kwargs: dict, weights: tuple) -> tuple:
    """The trainable Parameters of the Cells among the arguments (in lists,
    tuples and dicts too) that are not among `weights`, in order."""
    known = {id(p) for p in weights}
    found: dict[int, Parameter] = {}
    todo = [*args, *kwargs.values()]
    while todo:
        value = todo.pop(0)
        if isinstance(value, Cell):
            found.update((id(p), p) for p in value.trainable_params() if id(p) not in known)
        elif isinstance(value, (list, tuple)):
            todo.extend(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
    return tuple(found.values())


def _refuse_weights_given(weights: tuple, args: tuple, kwargs: dict, fn) -> None:
    """A Parameter among the weights given as an argument (or an item of
    one): the program sees its value, an array, and the weights' gradients
    (the env of the Parameters the function holds or reaches through a Cell
    argument) would miss what flows through it: refused, never a zero. A
    Cell argument's Parameters are its attributes, not leaves: they count."""
    wanted = {id(p) for p in weights}
    is_param = lambda v: isinstance(v, Parameter)  # noqa: E731
    leaves = jax.tree_util.tree_flatten_with_path((args, kwargs), is_leaf=is_param)[0]
    for path, leaf in leaves:
        if is_param(leaf) and id(leaf) in wanted:
            where = f"argument {path[1].idx}" if path[0].idx == 0 else f"keyword {path[1].key!r}"
            inner = jax.tree_util.keystr(path[2:])
            name = getattr(fn, "__qualname__", None) or type(fn).__name__
            raise KTransformError(
                f"{name}: the Parameter {leaf.name!r}, one of the weights, is given as "
                f"{where}{f' (at {inner})' if inner else ''}, where the program sees only its "
                "value: its gradient through the argument would be lost. Read it where the "
                "function holds it (a global, a closure, an attribute of a Cell given as an "
                "argument), or differentiate w.r.t. that argument (grad_position)"
            )


def _with_ids(result, spec: GradSpec, n: int, left_out: tuple = ()):
    """MindSpore's `return_ids`: each input gradient as `(position, grad)`,
    each Parameter's as `(name, grad)`, in the structure `spec` returns
    (without the positions `left_out`, see `_without_inputs`)."""
    if spec.with_value:
        plain = dataclasses.replace(spec, with_value=False)
        return result[0], _with_ids(result[1], plain, n, left_out)
    if spec.has_aux:
        plain = dataclasses.replace(spec, has_aux=False)
        return _with_ids(result[0], plain, n, left_out), result[1]
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
        plain = dataclasses.replace(spec, weights=None)
        return _with_ids(result[0], plain, n, left_out), named
    if inputs in ("first", "all", None) or isinstance(inputs, tuple):
        positions = {"first": 0, "all": tuple(range(n)), None: ()}.get(inputs, inputs)
    else:
        positions = inputs
    if left_out:
        positions = _kept(_positions(positions, n), left_out)
    if isinstance(positions, int):
        return (positions, result)
    return tuple(zip(positions, result, strict=True))


def _python_int(x) -> bool:
    """A Python int or bool argument (static): MindSpore's `grad` gives it
    no gradient."""
    return isinstance(x, (int, bool)) and not hasattr(x, "dtype")


def _kept(items: tuple, left_out_items: tuple):
    """MindSpore's shape of what is left: `()`, a bare item, or a tuple."""
    kept = tuple(x for x in items if x not in left_out_items)
    return kept[0] if len(kept) == 1 else kept


def _tuple(*items):
    return items


def _without_inputs(result, spec: GradSpec, n: int, left_out: tuple, item=getitem, make=_tuple):
    """The gradients of MindSpore's `grad` without those of the inputs at
    positions `left_out` (Python ints): `()` when none is left, the bare
    gradient when one is (probed on MindSpore 2.10, both modes). The value,
    aux values and weight gradients are kept. `item` and `make` take tuples
    apart and build them: Python's, or nodes of a graph (`__kt_lower__`)."""
    if spec.with_value:
        plain = dataclasses.replace(spec, with_value=False, has_aux=False)
        grads = _without_inputs(item(result, 1), plain, n, left_out, item, make)
        return make(item(result, 0), grads)
    if spec.has_aux:
        plain = dataclasses.replace(spec, has_aux=False)
        return make(
            _without_inputs(item(result, 0), plain, n, left_out, item, make), item(result, 1)
        )
    if spec.inputs is None:
        return result
    grads = item(result, 0) if spec.weights is not None else result
    bare = isinstance(spec.inputs, int) or spec.inputs == "first"
    positions = _positions(spec.inputs, n)
    kept = [grads if bare else item(grads, j) for j, p in enumerate(positions) if p not in left_out]
    kept = kept[0] if len(kept) == 1 else make(*kept)
    return make(kept, item(result, 1)) if spec.weights is not None else kept


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


def _positions(inputs, n: int) -> tuple[int, ...]:
    """The argument positions a GradSpec's `inputs` differentiates."""
    if inputs == "first":
        return (0,) if n else ()
    if inputs == "all":
        return tuple(range(n))
    if isinstance(inputs, int):
        return (inputs + n if inputs < 0 else inputs,)
    if isinstance(inputs, tuple):
        return tuple(k + n if k < 0 else k for k in inputs)
    return ()
