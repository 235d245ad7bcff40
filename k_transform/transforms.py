"""Gradient and jvp as FuncGraphs.

`grad_graph(primal, spec)` is the graph a gradient function runs:

    def f_grad(*args[, sens]):
        out, bprop = f_fprop(*args)          # K(f)
        grads = bprop(sens or ones_like(out))
        return <the input and Parameter gradients the spec asks for>

Because it is an ordinary FuncGraph, the DFunctor can transform it again:
that is grad of grad, and a gradient function called inside user code is a
call of this graph.

`jvp_graph(primal)` is forward mode derived from reverse rules (seed 001),
built in `k_transform.dfunctor.forward`: J maps each primitive to double
reverse of its own rule (`bprop(u)` is linear in `u`, so its reverse mode
with respect to `u` runs `J v`) and each loop to one loop over values and
tangents; graphs J does not reach go by double reverse as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from k_transform.cell import Parameter
from k_transform.dfunctor.builder import Builder, new_graph
from k_transform.dfunctor.dfunctor import k_graph, param_key
from k_transform.dfunctor.forward import double_reverse, forward_jvp
from k_transform.dfunctor.rule_linearity import check_rules_linear
from k_transform.errors import KTransformError, KTransformIndexError
from k_transform.frontend.guards import guards_of
from k_transform.ir.nodes import Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.traced import TracedCallK  # noqa: F401  (installs the DFunctor's services)


@dataclass(frozen=True)
class GradSpec:
    """What a gradient function returns.

    `inputs`: "first" (a bare gradient), "all" (a tuple), an int position or
    a tuple of positions, or None (no input gradients). `weights`: the
    Parameters to differentiate, or None; `single_weight` returns a bare
    gradient for one Parameter. `sens_param`: the last argument is the output
    sensitivity. `has_aux`: the function returns a tuple `(out, *aux)`, only
    `out` is differentiated (by the sensitivity, if given) and the gradients
    come back as `(grads, (aux...))` (MindSpore 2.x). `with_value`: return
    `(value, grads)`, the value being the whole output. `return_ids`: each
    input gradient is `(position, grad)`, each Parameter's `(name, grad)`
    (MindSpore's `return_ids`). `scalar_output`: the output must be a
    scalar, as JAX's API requires (`kt.hessian`). `integer_grads`:
    integer array inputs get their gradient in their own dtype (MindSpore's
    GradOperation), else zeros (JAX's float0 cotangent). `all_trainable`:
    `weights` are the trainable Parameters the function reads (MindSpore's
    `get_by_list` without weights); a call adds those of the Cells it is
    given (`reverse.GradFunction`).
    """

    inputs: object = "first"
    weights: tuple | None = None
    single_weight: bool = False
    sens_param: bool = False
    has_aux: bool = False
    with_value: bool = False
    integer_grads: bool = False
    return_ids: bool = False
    scalar_output: bool = False
    all_trainable: bool = False


def as_weights(weights) -> tuple[tuple | None, bool]:
    """(Parameters, single) from a Parameter, a ParameterTuple, a list or None."""
    if weights is None:
        return None, False
    if isinstance(weights, Parameter):
        return (weights,), True
    try:
        weights = tuple(weights)
    except TypeError:
        raise KTransformError(
            f"weights must be a Parameter, a ParameterTuple or a list of Parameters, not "
            f"{type(weights).__name__}"
        ) from None
    for w in weights:
        if not isinstance(w, Parameter):
            raise KTransformError(f"weights must be Parameters, got {type(w).__name__}")
    return weights, False


def grad_graph(primal: FuncGraph, spec: GradSpec) -> FuncGraph:
    """The gradient of `primal` as a graph (see the module docstring)."""
    names = [p.name for p in primal.parameters]
    graph, args = new_graph(f"{primal.name}_grad", primal, names + ["sens"] * spec.sens_param)
    if not spec.sens_param:  # `grad(f)(a)` leaves `guess` to f's default: so may its gradient
        graph.defaults = dict(primal.defaults or {})
    b = Builder(graph)
    inputs = args[: len(names)]
    # with aux values, only `out` gets a cotangent: none comes back through the aux
    # values (times an infinite slope there, a zero one would be NaN)
    out_used = ((0, None),) if spec.has_aux else None
    fprop = k_graph(primal, _wrt(spec, len(names)), out_used)
    pair = b.call(Constant(fprop, hint="fprop"), *inputs)
    pair.tuple_arity = 2
    out, bprop = b.item(pair, 0, "out"), b.item(pair, 1, "bprop")
    if spec.has_aux:  # MindSpore: `(out, *aux)`, the sensitivity is out's
        first = args[-1] if spec.sens_param else b.prim(structural.OnesLike(), b.item(out, 0))
        dout = b.prim(structural.AuxSens(), out, first)
    elif spec.sens_param:
        dout = args[-1]
    else:
        ones = structural.ScalarSens() if spec.scalar_output else structural.OnesLike()
        dout = b.prim(ones, out)
        dout.debug = dout.debug.named("dout")
    grads = b.call(bprop, dout)
    grads.tuple_arity = len(primal.parameters) + 1
    integers = structural.InputGrad(spec.integer_grads)
    d_inputs = [b.item(grads, k + 1, f"d_{x.name}") for k, x in enumerate(inputs)]
    d_args = [b.prim(integers, d, x) for d, x in zip(d_inputs, inputs, strict=True)]
    env = b.item(grads, 0, "env")
    if spec.weights:
        env = _with_argument_params(b, env, inputs, d_inputs)
    result = _select(b, spec, env, d_args)
    if spec.with_value:
        result = b.tuple(out, result)
    elif spec.has_aux:
        aux = b.prim(prims.GetItem(), out, Constant(slice(1, None)))
        result = b.tuple(result, b.prim(prims.AsSequence("tuple"), aux))
    graph.output = result
    graph.guards = guards_of(primal)  # its names are the primal's (`frontend.guards`)
    return graph


def _wrt(spec: GradSpec, n: int) -> bool | tuple[bool, ...]:
    """Which of `n` inputs K differentiates: those the gradient returns, when
    it returns no weights' (a Parameter is a constant to a K that
    differentiates only some inputs)."""
    positions = {"first": (0,), "all": tuple(range(n)), None: ()}.get(spec.inputs, spec.inputs)
    if isinstance(positions, int):
        positions = (positions,)
    if spec.weights or not all(-n <= k < n for k in positions):
        return True  # (an index out of range is refused by `_select`)
    return tuple(k in {j % n for j in positions} for k in range(n))


def _with_argument_params(b: Builder, env: Node, inputs: list, d_inputs: list) -> Node:
    """`env` with the Parameter gradients of the inputs: a Cell (a Parameter,
    a list, tuple or dict of them) given as an argument of the function
    differentiated gets, as its gradient, the env of its Parameters'
    (`runtime.state.param_env`; an array's adds nothing), which the weights
    read as they read those of the Parameters the function holds."""
    given = b.prim(structural.ParamEnv(), b.tuple(*inputs), b.tuple(*d_inputs))
    return b.prim(structural.AddGrad(), env, given)


def _select(b: Builder, spec: GradSpec, env: Node, d_args: list[Node]) -> Node:
    def arg(k: int) -> Node:
        if not -len(d_args) <= k < len(d_args):
            raise KTransformIndexError(
                f"grad_position {k}: the function {b.graph.name.removesuffix('_grad')} has "
                f"{len(d_args)} inputs"
            )
        return b.tuple(Constant(k), d_args[k]) if spec.return_ids else d_args[k]

    if spec.inputs == "first":
        inputs = arg(0) if d_args else Constant(None)
    elif spec.inputs == "all":
        inputs = b.tuple(*(arg(k) for k in range(len(d_args))))
    elif isinstance(spec.inputs, int):
        inputs = arg(spec.inputs)
    elif isinstance(spec.inputs, tuple):
        inputs = b.tuple(*(arg(k) for k in spec.inputs))
    else:
        inputs = None
    if spec.weights is None:
        return inputs
    weights = [
        b.prim(structural.EnvGet(param_key(p)), env, Constant(p, hint=p.name)) for p in spec.weights
    ]
    if spec.return_ids:
        weights = [b.tuple(Constant(p.name), w) for p, w in zip(spec.weights, weights, strict=True)]
    chosen = weights[0] if spec.single_weight else b.tuple(*weights)
    return chosen if inputs is None else b.tuple(inputs, chosen)


def jvp_graph(primal: FuncGraph, given: tuple | None = None) -> FuncGraph:
    """`(out, J v)` for `primal`: J (forward mode from reverse rules) where it
    reaches, else double reverse of the whole graph (`dfunctor.forward`).
    `given`: flags of the inputs the caller gave (the others, left to their
    defaults, have zero tangents: constants to the transform)."""
    check_rules_linear(primal)  # forward mode transposes users' rules: linear ones only
    mask = None if given is None or all(given) else tuple(given)
    graph = forward_jvp(primal, mask) or double_reverse(primal, mask)
    graph.guards = guards_of(primal)
    return graph


def first_output_graph(primal: FuncGraph) -> FuncGraph:
    """`primal` without its auxiliary outputs: `fn(*xs)[0]` for a `has_aux`
    function returning `(out, *aux)` (what jvp and the Jacobians differentiate)."""
    names = [p.name for p in primal.parameters]
    graph, args = new_graph(f"{primal.name}_out", primal, names)
    b = Builder(graph)
    graph.output = b.item(b.call(Constant(primal, hint=primal.name), *args), 0, "out")
    return graph
