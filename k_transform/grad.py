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
from k_transform.errors import KTransformError
from k_transform.frontend import callables
from k_transform.frontend.parser import parse
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ir.verify import verify
from k_transform.ops.state import Assign
from k_transform.runtime.bounds import LoopBoundExceeded, bounded_loops, set_loop_bound
from k_transform.transforms import GradSpec, grad_graph, jvp_graph

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


class CompiledGraph:
    """A transform graph compiled to Python and run with Parameters bound.

    Called like the graph; jitted by default with static Python scalars
    (`set_mode("eager")` or `jit=False` runs the generated code op by op).
    `__kt_graph__` lets user code that calls this object be transformed too.
    """

    def __init__(self, graph: FuncGraph, fn=None, jit: bool | None = None):
        verify(graph)
        self.fn = fn
        self.jit = jit
        self.__kt_graph__ = graph
        self.run = compile_graph(graph)
        self.__kt_source__ = self.run.__kt_source__
        self.params = parameters_of(graph)
        self.assigns = any(
            isinstance(getattr(n.fn, "value", None), Assign)
            for g in graph.reachable()
            for n in g.nodes
        )
        self._jitted: dict[tuple, object] = {}
        self.bound_loops = False  # gradient and jvp functions: see `_eager`

    def __call__(self, *args):
        values = tuple(p.data for p in self.params)
        use_jit = _mode["jit"] if self.jit is None else self.jit
        if not use_jit:
            return self._eager(values, rt.as_jax_inputs(args))
        static = tuple(k for k, a in enumerate(args) if _is_static(a))
        fixed = {k: args[k] for k in static}
        key = (len(args), tuple((k, type(v), _hashable(v)) for k, v in fixed.items()))
        if key not in self._jitted:
            self._jitted[key] = jax.jit(self._with_static(fixed, len(args)))
        traced = tuple(a for k, a in enumerate(args) if k not in static)
        for _ in range(MAX_RETRACES):
            try:
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
        super().__init__(grad_graph(primal, spec), fn, jit)
        self.bound_loops = True

    def __call__(self, *args, **kwargs):
        if self.spec.sens_param and not args:
            raise KTransformError("sens_param=True: pass the output sensitivity last")
        if self.api is not None:
            n = len(args) - self.spec.sens_param
            check_float_inputs(self.api, args[:n], _positions(self.spec.inputs, n))
        n_inputs = len(args) - self.spec.sens_param
        defaulted = self._n_params is not None and n_inputs < self._n_params
        if kwargs or self._binds or defaulted:
            return self._keyword_call(args, kwargs)
        return super().__call__(*args)

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


MAX_RETRACES = 6
_BOUND_MESSAGE = re.compile(r"while loop at (?P<where>.+) ran (?P<n>\d+) iterations")


def _grow_loop_bound(exc: Exception) -> bool:
    """Raise the bound of the loop named in `exc` to the power of two above its
    trip count (at most twice the memory the loop needs; few retraces)."""
    match = _BOUND_MESSAGE.search(str(exc)) if LoopBoundExceeded.MARK in str(exc) else None
    if match is None:
        return False
    set_loop_bound(1 << int(match["n"]).bit_length(), match["where"])
    return True


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

    __kt_static__ = True  # built at transform time when called inside user code

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
        spec = GradSpec(inputs, params, single, self.sens_param, integer_grads=True)
        return GradFunction(fn, spec)


def grad(fn, grad_position=0, weights=None, has_aux=False) -> GradFunction:
    """Gradients of `fn` w.r.t. the inputs at `grad_position` (an int, a tuple,
    or None) and `weights`; `(inputs, weights)` when both are asked for."""
    params, single = _as_weights(weights)
    spec = GradSpec(grad_position, params, single, has_aux=has_aux)
    return GradFunction(fn, spec, api="kt.grad")


def value_and_grad(fn, grad_position=0, weights=None, has_aux=False) -> GradFunction:
    """`(value, gradients)`; see `grad`."""
    params, single = _as_weights(weights)
    spec = GradSpec(grad_position, params, single, has_aux=has_aux, with_value=True)
    return GradFunction(fn, spec, api="kt.value_and_grad")


grad.__kt_static__ = True
value_and_grad.__kt_static__ = True


def vjp(fn, *inputs):
    """`(out, vjp_fn)`; `vjp_fn(v)` returns one gradient per input, as a tuple."""
    primal = graph_of(fn)
    grad_fn = GradFunction(primal, GradSpec(inputs="all", sens_param=True))
    forward = CompiledGraph(primal)
    forward.bound_loops = True
    out = forward(*inputs)
    return out, lambda v: grad_fn(*inputs, v)


def jvp(fn, inputs, v):
    """`(out, J v)`: forward mode by double reverse. `inputs` and `v` are an
    array or a tuple of them (MindSpore's convention)."""
    single = not isinstance(inputs, (tuple, list))
    xs, vs = ((inputs,), (v,)) if single else (tuple(inputs), tuple(v))
    if len(xs) != len(vs):
        raise KTransformError(f"jvp: {len(xs)} inputs but {len(vs)} tangents")
    vs = tuple(_integer_tangent(xs, k, t) for k, t in enumerate(vs))
    return _jvp(fn, xs, vs)


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


_jvp_cache: dict[int, tuple] = {}


def _jvp_function(fn) -> CompiledGraph:
    entry = _jvp_cache.get(id(fn))
    if entry is None or entry[0] is not fn:
        entry = (fn, CompiledGraph(jvp_graph(graph_of(fn)), fn))
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
    """What `jacrev(fn, argnum)` / `jacfwd(fn, argnum)` return: called on
    arrays, the Jacobian of `fn` w.r.t. input `argnum` (one vjp per output
    element, or one jvp per input element, vmapped); called inside code being
    transformed, it lowers to graphs (`lowering.lower_jacobian`)."""

    def __init__(self, fn, argnum: int, forward: bool):
        self.fn, self.argnum, self.forward = fn, argnum, forward

    def __call__(self, *args):
        check_float_inputs("kt.jacfwd" if self.forward else "kt.jacrev", args, (self.argnum,))
        return self._forward(args) if self.forward else self._reverse(args)

    def _reverse(self, args):
        """One vmapped vjp per output leaf; a pytree output and input give
        JAX's nesting: the output's structure of the input's structure."""
        grad_fn = GradFunction(self.fn, GradSpec(inputs=self.argnum, sens_param=True))
        out = CompiledGraph(graph_of(self.fn))(*args)
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
                    args[self.argnum],
                )
            )
        return jax.tree_util.tree_unflatten(tree, blocks)

    def _forward(self, args):
        """One vmapped jvp per input leaf, regrouped as `_reverse` nests them."""
        x_leaves, x_tree = jax.tree_util.tree_flatten(args[self.argnum])
        per_input = []
        for k, leaf in enumerate(x_leaves):
            leaf = jnp.asarray(leaf)

            def column(v, k=k):
                seed = [v if j == k else jnp.zeros_like(o) for j, o in enumerate(x_leaves)]
                tangents = tuple(
                    jax.tree_util.tree_unflatten(x_tree, seed)
                    if i == self.argnum
                    else jax.tree_util.tree_map(jnp.zeros_like, a)
                    for i, a in enumerate(args)
                )
                return _jvp(self.fn, tuple(args), tangents)[1]

            cols = jax.vmap(column)(_basis(leaf))
            out_leaves, out_tree = jax.tree_util.tree_flatten(cols)
            per_input.append([_columns_last(c, leaf) for c in out_leaves])
        blocks = [
            jax.tree_util.tree_unflatten(x_tree, [cols[j] for cols in per_input])
            for j in range(len(per_input[0]))
        ]
        return jax.tree_util.tree_unflatten(out_tree, blocks)

    def __kt_lower__(self, builder, args, kwargs, e):
        return lowering.lower_jacobian(builder, self.fn, self.argnum, self.forward, args, e)


def _basis(leaf):
    """The unit vectors of `leaf`'s space, stacked: shape (size, *leaf.shape)."""
    size, shape = int(np.prod(jnp.shape(leaf))), jnp.shape(leaf)
    return jnp.eye(size, dtype=jnp.result_type(leaf)).reshape(size, *shape)


def _columns_last(cols, leaf):
    """Columns stacked first (size, *out) as a Jacobian block (*out, *leaf.shape)."""
    out_shape = cols.shape[1:]
    return jnp.moveaxis(cols.reshape(cols.shape[0], -1), 0, -1).reshape(*out_shape, *leaf.shape)


def jacrev(fn, argnum: int = 0) -> Jacobian:
    """The Jacobian of `fn` w.r.t. input `argnum`, by reverse mode."""
    return Jacobian(fn, argnum, forward=False)


def jacfwd(fn, argnum: int = 0) -> Jacobian:
    """The Jacobian of `fn` w.r.t. input `argnum`, by forward mode."""
    return Jacobian(fn, argnum, forward=True)


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

    def compiled(self) -> CompiledGraph:
        """The program for the Cell's current `training` flag (MindSpore
        compiles a Cell once per phase: `set_train` switches between them)."""
        mode = getattr(self.__wrapped__, "training", None)
        if mode not in self._compiled:
            self._compiled[mode] = CompiledGraph(graph_of(self.__wrapped__), self.__wrapped__)
        return self._compiled[mode]

    @property
    def __kt_graph__(self) -> FuncGraph:
        """The graph of `fn` (while `fn` is being parsed, the graph being built:
        so a recursive `@kt.jit` function calls itself as plain recursion)."""
        return parse(self.__wrapped__)

    def __call__(self, *args, **kwargs):
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
