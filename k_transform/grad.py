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
   runs the same generated code op by op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from k_transform import runtime as rt
from k_transform.cell import Cell, Parameter
from k_transform.codegen.compile import compile_graph, emit_source
from k_transform.dfunctor.dfunctor import k_graph, param_key
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.parser import parse
from k_transform.ir.primitive import Primitive
from k_transform.ir.verify import verify
from k_transform.runtime_grad import LoopBoundExceeded, set_loop_bound

_mode = {"jit": True}


def set_mode(mode: str) -> None:
    """ "graph" (jit, the default) or "eager" (generated code op by op)."""
    if mode not in ("graph", "eager"):
        raise ValueError("mode must be 'graph' or 'eager'")
    _mode["jit"] = mode == "graph"


def _target(fn):
    """The Python callable whose source is parsed for `fn`."""
    if isinstance(fn, Cell):
        return fn.construct
    return fn


def stop_gradient(x):
    return jax.lax.stop_gradient(x)


class _Program:
    """The K-transformed program of one function: compiled fprop + Parameters."""

    def __init__(self, fn):
        self.fn = fn
        self.primal = parse(_target(fn))
        verify(self.primal)
        self.fprop_graph = k_graph(self.primal)
        verify(self.fprop_graph)
        self.fprop = compile_graph(self.fprop_graph)
        self.params = _parameters_of(self.primal)

    def source(self) -> str:
        return emit_source(self.fprop_graph)[0]


_programs: dict[int, _Program] = {}


def _program(fn) -> _Program:
    key = id(fn)
    if key not in _programs or _programs[key].fn is not fn:
        _programs[key] = _Program(fn)
    return _programs[key]


def _parameters_of(root: FuncGraph) -> list[Parameter]:
    """Every Parameter constant in the graphs reachable from `root`."""
    found: dict[int, Parameter] = {}
    seen: set[int] = set()
    todo = [root]
    while todo:
        graph = todo.pop()
        if graph.uid in seen:
            continue
        seen.add(graph.uid)
        for node in graph.used_nodes():
            if not isinstance(node, Constant):
                continue
            if isinstance(node.value, FuncGraph):
                todo.append(node.value)
            elif isinstance(node.value, Primitive):
                todo.extend(node.value.subgraphs())
            elif isinstance(node.value, Parameter):
                found.setdefault(id(node.value), node.value)
    return list(found.values())


def _is_static(x) -> bool:
    """Python ints, bools, strings and None are static; floats and arrays traced."""
    return x is None or isinstance(x, (bool, int, str))


@dataclass(frozen=True)
class GradSpec:
    """What a gradient function returns.

    `inputs`: "first" (a bare gradient), "all" (a tuple), an int position or
    a tuple of positions, or None (no input gradients). `weights`: the
    Parameters to differentiate, or None; `single_weight` returns a bare
    gradient for one Parameter. `sens_param`: the last argument is the output
    sensitivity. `has_aux`: the function returns `(out, aux)` and only `out` is
    differentiated. `with_value`: return `(value, grads)`.
    """

    inputs: object = "first"
    weights: tuple | None = None
    single_weight: bool = False
    sens_param: bool = False
    has_aux: bool = False
    with_value: bool = False


class GradFunction:
    """A compiled gradient of `fn` (what `GradOperation(...)(fn)` returns)."""

    def __init__(self, fn, spec: GradSpec, jit: bool | None = None):
        self.fn = fn
        self.spec = spec
        self.jit = jit
        self._jitted: dict[tuple, object] = {}
        self.program = _program(fn)
        self.__kt_source__ = self.program.source()
        self.__kt_graph__ = self.program.fprop_graph

    def __call__(self, *args):
        sens = None
        if self.spec.sens_param:
            if not args:
                raise KTransformError("sens_param=True: pass the output sensitivity last")
            args, sens = args[:-1], args[-1]
        values = tuple(p.data for p in self.program.params)
        use_jit = _mode["jit"] if self.jit is None else self.jit
        if not use_jit:
            return self._compute(values, args, sens)
        static = tuple(k for k, a in enumerate(args) if _is_static(a))
        fixed = {k: args[k] for k in static}
        key = (len(args), tuple(fixed.items()))
        if key not in self._jitted:
            self._jitted[key] = jax.jit(self._with_static(fixed, len(args)))
        traced = tuple(a for k, a in enumerate(args) if k not in static)
        for _ in range(MAX_RETRACES):
            try:
                return self._jitted[key](values, traced, sens)
            except Exception as exc:  # a traced while outgrew its gradient buffer
                if not _grow_loop_bound(exc):
                    raise
                self._jitted[key] = jax.jit(self._with_static(fixed, len(args)))
        raise KTransformError("a traced while loop kept outgrowing its gradient buffer")

    def _with_static(self, fixed: dict, n: int):
        """`_compute` taking only the traced arguments; `fixed` holds the static ones."""

        def compute(values, traced, sens):
            it = iter(traced)
            args = tuple(fixed[k] if k in fixed else next(it) for k in range(n))
            return self._compute(values, args, sens)

        return compute

    def _compute(self, values, args, sens):
        spec = self.spec
        with rt.param_scope(self.program.params, values):
            out, bprop = self.program.fprop(*args)
            if spec.sens_param:
                dout = sens
            elif spec.has_aux:
                _check_aux(out)
                dout = (rt.ones_like_value(out[0]), rt.zeros_like_value(out[1]))
            else:
                dout = rt.ones_like_value(out)
            grads = bprop(dout)
        result = self._select(grads[0], grads[1:], values, args)
        if spec.with_value:
            return out, result
        if spec.has_aux:
            return result, out[1]
        return result

    def _select(self, env, d_args, values, args):
        spec = self.spec
        d_args = tuple(_input_grad(d, a) for d, a in zip(d_args, args, strict=True))
        if spec.inputs == "first":
            if not d_args:
                raise KTransformError("GradOperation: the function takes no inputs")
            inputs = d_args[0]
        elif spec.inputs == "all":
            inputs = d_args
        elif isinstance(spec.inputs, int):
            inputs = d_args[spec.inputs]
        elif isinstance(spec.inputs, tuple):
            inputs = tuple(d_args[k] for k in spec.inputs)
        else:
            inputs = None
        if spec.weights is None:
            return inputs
        bound = {id(p): v for p, v in zip(self.program.params, values, strict=True)}
        grads = tuple(rt.env_get(env, param_key(p), bound.get(id(p), p.data)) for p in spec.weights)
        weights = grads[0] if spec.single_weight else grads
        return weights if inputs is None else (inputs, weights)

    def __repr__(self) -> str:
        return f"<gradient of {getattr(self.fn, '__name__', type(self.fn).__name__)}>"


MAX_RETRACES = 6
_BOUND_MESSAGE = re.compile(r"while loop at (?P<where>.+) ran (?P<n>\d+) iterations")


def _grow_loop_bound(exc: Exception) -> bool:
    """Raise the bound of the loop named in `exc` (x8 over its trip count)."""
    match = _BOUND_MESSAGE.search(str(exc)) if LoopBoundExceeded.MARK in str(exc) else None
    if match is None:
        return False
    set_loop_bound(int(match["n"]) * 8, match["where"])
    return True


def _check_aux(out) -> None:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise KTransformError("has_aux=True: the function must return a pair (output, aux)")


def _input_grad(d, arg):
    """The gradient reported for an input. Static inputs (Python ints, bools)
    and integer arrays get a documented zero, as in MindSpore; so does an
    input nothing flowed to."""
    integer = hasattr(arg, "dtype") and not jnp.issubdtype(arg.dtype, jnp.inexact)
    if d is None or _is_static(arg) or integer:
        return rt.zeros_like_value(arg) if not integer else jnp.zeros_like(arg)
    return d


def _as_weights(weights) -> tuple[tuple | None, bool]:
    """(Parameters, single) from a Parameter, a ParameterTuple, a list or None."""
    if weights is None:
        return None, False
    if isinstance(weights, Parameter):
        return (weights,), True
    weights = tuple(weights)
    for w in weights:
        if not isinstance(w, Parameter):
            raise KTransformError(f"weights must be Parameters, got {type(w).__name__}")
    return weights, False


class GradOperation:
    """MindSpore's GradOperation: `GradOperation(get_all, get_by_list, sens_param)(fn, weights)`.

    First input only by default (a bare array); `get_all`: a tuple over all
    inputs; `get_by_list`: a tuple over `weights` (a bare array for a single
    Parameter); both: `((inputs...), (weights...))`; `sens_param`: the last
    argument is the output sensitivity, else ones like the output.
    `GradOperation(fn)(x)` is shorthand for `GradOperation()(fn)(x)`.
    """

    def __new__(cls, get_all=False, get_by_list=False, sens_param=False):
        if callable(get_all) and not isinstance(get_all, bool):
            return GradOperation()(get_all)
        return super().__new__(cls)

    def __init__(self, get_all=False, get_by_list=False, sens_param=False):
        self.get_all, self.get_by_list, self.sens_param = get_all, get_by_list, sens_param

    def __call__(self, fn, weights=None) -> GradFunction:
        if self.get_by_list and weights is None:
            raise KTransformError("GradOperation(get_by_list=True) needs weights: (fn, weights)")
        params, single = _as_weights(weights) if self.get_by_list else (None, False)
        if self.get_by_list:
            inputs = "all" if self.get_all else None
        else:
            inputs = "all" if self.get_all else "first"
        spec = GradSpec(inputs, params, single, self.sens_param)
        return GradFunction(fn, spec)


def grad(fn, grad_position=0, weights=None, has_aux=False) -> GradFunction:
    """Gradients of `fn` w.r.t. the inputs at `grad_position` (an int, a tuple,
    or None) and `weights`; `(inputs, weights)` when both are asked for."""
    params, single = _as_weights(weights)
    return GradFunction(fn, GradSpec(grad_position, params, single, has_aux=has_aux))


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False) -> GradFunction:
    """`(value, gradients)`; see `grad`."""
    params, single = _as_weights(weights)
    spec = GradSpec(grad_position, params, single, has_aux=has_aux, with_value=True)
    return GradFunction(fn, spec)


def vjp(fn, *inputs):
    """`(out, vjp_fn)`; `vjp_fn(v)` returns one gradient per input, as a tuple."""
    program = _program(fn)
    values = tuple(p.data for p in program.params)
    with rt.param_scope(program.params, values):
        out, bprop = program.fprop(*inputs)

    def vjp_fn(v):
        with rt.param_scope(program.params, values):
            grads = bprop(v)
        return tuple(_input_grad(d, a) for d, a in zip(grads[1:], inputs, strict=True))

    return out, vjp_fn
