"""JAX's own-gradient functions written by the user: JAX's `custom_vjp`, `custom_jvp`.

A user's `@custom_vjp` (JAX's) function `f` (also one over `@jax.jit`: the
jitted function is read), called in parsed code, is
differentiated by its own rule, as JAX differentiates it. The call is a call
of a graph running `f.fun` (what a plain call runs), whose K is not a
transform of it but the fprop of its rule (`FuncGraph.custom_fprop`, which
the DFunctor gives in its place): `out, residuals = fwd(*inputs)`, and a
bprop of `bwd(residuals, dout)`. That fprop is parsed Python, so at a
higher order fwd is differentiated through its steps and bwd as any code,
as JAX does. `nondiff_argnums` inputs go to bwd first and get no gradient
(zeros); the functions among them are given as the user wrote them, not
their fprops (a closure over the caller's values is refused).

A user's `@custom_jvp` (JAX's) function runs as its primal and is refused when
differentiated: its rule is a jvp, which this reverse-mode transform would
have to transpose; its steps' gradient is what the rule exists to avoid.

Also refused, never run without the user's rule: `symbolic_zeros=True`, a
function without `defvjp`, and either kind reached only through a jaxpr
(`frontend/jaxpr.py`: `jax.vmap(f)`, code run as Python). JAX's own
custom_vjp and custom_jvp functions (`jax.nn.relu`, ...) are library calls,
differentiated through their steps with the rules of `frontend/jaxpr.py`.
"""

from __future__ import annotations

from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.callables import custom_rule_kind, wrapped_target
from k_transform.frontend.guards import guards_of
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ops import python as prims
from k_transform.ops.structural import EMPTY_ENV, zeros_like


def users_custom_rule(value) -> bool:
    """Whether `value` is a custom_vjp or custom_jvp function the user wrote."""
    if custom_rule_kind(value) is None:
        return False
    fun = wrapped_target(value.fun) or value.fun  # `@custom_vjp @jit def f`: f
    return is_user_function(fun)


def lower_custom(builder, value, args: list, kwargs: dict, e):
    """`f(*args)` for a user's custom_vjp or custom_jvp `f` (module docstring)."""
    name = getattr(value, "__name__", "the function")
    fun = builder.parse(value.fun, primal_only=custom_rule_kind(value) == "custom_vjp")
    inputs = builder.bind_call(fun, args, kwargs, e)
    if custom_rule_kind(value) == "custom_jvp":
        prim = prims.CustomBpropCall(_RefusedJvp(value), fun)
        return builder.apply(prim, *inputs, node=e)
    if value.fwd is None or value.bwd is None:
        raise builder.fp.error(
            f"the JAX custom_vjp function {name} has no rule: call {name}.defvjp(fwd, bwd) "
            "before using it",
            e,
        )
    if value.symbolic_zeros:
        raise builder.fp.unsupported(f"JAX custom_vjp with symbolic_zeros=True ({name})", e)
    graph = _with_fprop(builder, value, len(inputs))
    return builder.apply(Constant(graph, builder.debug(e), name), *inputs, node=e)


def _with_fprop(builder, value, n: int) -> FuncGraph:
    """The graph of `value.fun(*inputs)` for `n` inputs, whose K is the
    custom fprop of `value`'s fwd and bwd (`FuncGraph.custom_fprop`);
    one per function and arity."""
    made = TRANSFORM.cache("jax_custom.graphs")
    entry = made.get((id(value), n))
    if entry is not None and entry[0] is value:
        return entry[1]
    nondiff = tuple(sorted(k % n for k in value.nondiff_argnums))
    where = [None] * n  # each input's place in bwd's result (None: no gradient)
    for j, k in enumerate(k for k in range(n) if k not in nondiff):
        where[k] = j
    name = getattr(value, "__name__", "custom_vjp")
    fun = builder.parse(value.fun, primal_only=True)  # its K is the rule's fprop
    graph = _calling(fun, n, name, "function", packed=False)
    fprop = builder.parse(_fprop(value.fwd, value.bwd, nondiff, tuple(where)), star_arity=n)
    graph.custom_fprop = _calling(fprop, n, f"{name}_fprop", "fprop", packed=True)
    graph.custom_fprop.is_custom_fprop = True
    made[(id(value), n)] = (value, graph)
    return graph


def _calling(callee: FuncGraph, n: int, name: str, kind: str, packed: bool) -> FuncGraph:
    """A graph of `n` parameters calling `callee` with them (`packed`: as
    one tuple, the `*inputs` of a def parsed for `n` of them)."""
    graph = FuncGraph(name, debug=callee.debug, kind=kind)
    params = [graph.add_parameter(f"x{k}") for k in range(n)]
    graph.param_names, graph.defaults = [p.name for p in params], {}
    args = [graph.apply(Constant(prims.MakeTuple()), *params)] if packed else params
    graph.output = graph.apply(Constant(callee, hint=callee.name), *args)
    graph.guards = guards_of(callee)
    return graph


def _fprop(fwd, bwd, nondiff: tuple, where: tuple):
    """`fprop(*inputs) -> (out, bprop)`, as JAX differentiates a custom_vjp
    function: out and the residuals from fwd (differentiated through its
    steps at a higher order), the gradients from bwd; JAX gives bwd the
    `nondiff` inputs first and takes no gradient for them (zeros here)."""

    def fprop(*inputs):
        out, residuals = fwd(*inputs)

        def bprop(dout):
            kept = ()
            for k in nondiff:
                kept = (*kept, inputs[k])
            grads = bwd(*kept, residuals, dout)
            spread = ()
            for k, j in enumerate(where):
                grad = None if j is None else grads[j]
                spread = (*spread, zeros_like(inputs[k]) if grad is None else grad)
            return (EMPTY_ENV, *spread)

        return out, bprop

    return fprop


class _RefusedJvp:
    """What the `CustomBpropCall` of a user's custom_jvp function runs: the
    function; differentiating it is refused (its rule is a jvp, which this
    reverse-mode transform would have to transpose), never done through its
    steps, which is what the rule exists to avoid."""

    def __init__(self, fn):
        self.construct = fn.fun
        self.name = getattr(fn, "__name__", "the function")

    @property
    def bprop(self):
        raise KTransformError(
            f"cannot differentiate the JAX custom_jvp function {self.name}: k_transform "
            "differentiates in reverse mode and does not transpose a jvp rule; its forward "
            "mode (kt.jvp, jacfwd) is built from the reverse one, so it does not use the "
            "jvp rule either (not supported yet); give it its gradient as a JAX custom_vjp "
            "(fwd, bwd), or register a bprop with kt.bprop_getters"
        )
