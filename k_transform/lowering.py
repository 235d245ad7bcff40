"""The gradient API called inside code that is itself being transformed.

`kt.grad(f)`, `kt.value_and_grad(f)`, `GradOperation()(f)`, `kt.jacrev(f)`,
`kt.jacfwd(f)` and `kt.hessian(f)` are `__kt_static__`: the parser calls
them at transform time and the gradient function (or `Jacobian`) they
return is a constant. A value with a `__kt_lower__(builder, args, kwargs,
e)` method is not called at all: the parser hands it the call's argument
nodes and it builds the call out of graphs, so the result is differentiable
again like any user code:

- `kt.vjp(f, *xs)` -> `(f(*xs), vjp_fn)`, `vjp_fn` a closure graph over the
  `xs` calling f's gradient graph (all inputs, sensitivity last; `weights`
  and `has_aux` constants, the aux values split off by `SplitAux`);
- `kt.jvp(f, inputs, v)` -> a call of f's jvp graph (inputs and tangents
  unpacked: a tuple display's items, else a tuple's or list's items or a
  lone value, told apart when run (`BindInputs`), defaults after them; with
  `has_aux`, the jvp graph of `f(...)[0]` and the aux values of a call of f);
- `kt.hvp(f, args, v)` -> the jvp graph of f's gradient graph;
- a `Jacobian(xs)` -> `_jacrev_rows` / `_jacfwd_columns` below (parsed like
  user code): one call of a row (vjp) or column (jvp) closure per basis
  vector, in a `for` loop over the static size, giving a matrix per
  position; for a tuple of positions the matrices side by side are the
  Jacobian w.r.t. the tuple of those inputs, nested output-major as JAX's
  (`jac[i][j]` = d out_i / d in_j); with `has_aux` the aux values of a call
  of f.

`builder` is the parser's GraphBuilder of the calling function: its
`apply`, `bind_call`, `debug`, `graph` and `fp.error`/`fp.unsupported` are used.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform.api import graph_of
from k_transform.errors import KTransformError
from k_transform.frontend import python_code
from k_transform.frontend.calls import closure_transform
from k_transform.frontend.targets import is_library, is_target_call, target_of
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops import structural, trees
from k_transform.transforms import GradSpec, as_weights, first_output_graph, grad_graph, jvp_graph


def _static_fn(builder, api: str, args, e, n_inputs: int | None = None):
    """The function argument of an API call in transformed code (a constant),
    taking `n_inputs` arguments (default: the call's arguments after it)."""
    if not args or not isinstance(args[0], Constant):
        raise builder.fp.unsupported(f"{api} of a computed function", e)
    fn = args[0].value
    n = len(args) - 1 if n_inputs is None else n_inputs
    return target_of(fn, n) if is_library(fn) else fn


def _n_inputs(args) -> int:
    """How many inputs `kt.jvp(fn, inputs, v)` / `kt.hvp(fn, args, v)` give
    `fn`: a tuple's length, else one."""
    node = args[1] if len(args) > 1 else None
    return len(node.args) if _is_tuple_display(node) else 1


def _primal(builder, api: str, fn, e, reruns: bool = False) -> FuncGraph:
    """The graph of the function an API call transforms. A closure over the
    caller's variables is refused: its graph is transformed on its own, where
    those variables are not (pass them as arguments instead). `reruns`: the
    lowered call runs the function more than once (its value, then in each
    vjp, row or column of its derivative), so one calling host code (a
    random draw, a print) is refused: each run would draw anew, a wrong
    derivative with no error."""
    primal = graph_of(fn)
    if primal.parent is not None and primal.free_variables():
        raise builder.fp.unsupported(closure_transform(api, primal), e)
    if reruns and primal.calls_host():
        site, what = _host_site(primal)
        exc = builder.fp.unsupported(
            f"{api} of {primal.name}, which {what} (`{site.source_line.strip()}`, "
            f"line {site.line} of {site.file}) inside transformed code: there {api} runs it "
            "again for its derivative, where Python runs it once (call it outside the "
            "function transformed)",
            e,
        )
        if is_target_call(builder.fp.fn):  # `kt.jit(kt.jacrev(f))`: no line of the user's
            moved = KTransformError(exc.bare_message, site)  # calls it: the host call's line
            moved.construct = exc.construct
            raise moved
        raise exc
    return primal


def _host_site(primal: FuncGraph):
    """Where `primal` (or a graph it reaches) calls host code: the call's
    debug info (a branch or loop holding it only if no call is found), and
    what it does there: "calls host code", or for a user function the parser
    refused, "runs f as Python" and the construct it has no model of (the
    debug info: the line it refused)."""
    sites = [
        node
        for graph in primal.reachable()
        for node in graph.nodes
        if getattr(getattr(node.fn, "value", None), "host", False)
    ]
    calls = [n for n in sites if not hasattr(n.fn.value, "subgraphs")]
    node = (calls or sites)[0]
    call = node.fn.value
    fn = getattr(getattr(call, "call", call), "fn", None)  # a LibraryCall, or K of one
    refused = python_code.reason(fn) if callable(fn) else None
    if refused is None:
        return node.debug, "calls host code"
    what = f"runs {getattr(fn, '__name__', 'it')} as Python"
    construct = getattr(refused, "construct", None)
    if construct is not None:
        what += f", the parser having no model of its {construct}"
    return node.debug, what


def _with_defaults(builder, primal: FuncGraph, inputs: list, e) -> list:
    """`inputs`, then the defaults of the parameters of `primal` they leave
    out (`energy(q, k=3.0)` given `q`), bound as a call of `primal` binds
    them: the graphs made from `primal` (its gradient, its jvp) take every
    parameter. The inputs keep their positions (a `*args` function's are
    left as given)."""
    sig = primal.signature
    if len(inputs) >= len(primal.parameters) or (sig is not None and sig.vararg is not None):
        return list(inputs)
    return builder.bind_call(primal, list(inputs), {}, e)


def _options(builder, api: str, kwargs, defaults: dict, e) -> dict:
    """The keyword options of an API call, each a constant named in `defaults`."""
    options = dict(defaults)
    for name, node in kwargs.items():
        if name not in defaults:
            raise builder.fp.error(f"{api} got an unexpected keyword argument {name!r}", e)
        if not isinstance(node, Constant):
            raise builder.fp.unsupported(f"{api}({name}=...) with a computed value", e)
        options[name] = node.value
    return options


def _closure(builder, name: str, e, body) -> Constant:
    """A one-parameter closure graph inside the caller; `body(graph, u)` gives its output."""
    graph = FuncGraph(name, parent=builder.graph, debug=builder.debug(e))
    u = graph.add_parameter("u")
    graph.param_names, graph.defaults = ["u"], {}
    graph.output = body(graph, u)
    return Constant(graph, hint=name)


def _same_count(builder, api: str, inputs: Node, v: Node, e) -> None:
    """Refuse a tuple display of inputs and one of tangents of other lengths."""
    counts = [len(n.args) for n in (inputs, v) if _is_tuple_display(n)]
    if len(counts) == 2 and counts[0] != counts[1]:
        raise builder.fp.error(f"{api}: {counts[0]} inputs but {counts[1]} tangents", e)


def _is_tuple_display(node: Node) -> bool:
    return isinstance(node, Apply) and isinstance(getattr(node.fn, "value", None), prims.MakeTuple)


def _checked(builder, api: str, x: Node, v: Node, k: int | None, e) -> Node:
    """The tangent `v` of input `k`, `x` (None: of all the inputs): checked
    when run to have its structure and shapes."""
    return builder.apply(structural.CheckTangent(api, k), x, v, node=e)


def _zeros(builder, x, e):
    return builder.apply(structural.ZerosLike(), x, node=e)


def _prim(graph: FuncGraph, prim, *args):
    return graph.apply(Constant(prim, hint=prim.name), *args)


def _call(graph_value: FuncGraph) -> Constant:
    return Constant(graph_value, hint=graph_value.name)


def lower_vjp(builder, args, kwargs, e):
    """`kt.vjp(fn, *inputs, weights=None, has_aux=False)`: `(fn(*inputs),
    vjp_fn)`, or `(out, vjp_fn, aux)`; `vjp_fn(v)` gives the inputs'
    gradients, with `weights` `(inputs' gradients, weights' gradients)`."""
    fn = _static_fn(builder, "kt.vjp", args, e)
    options = _options(builder, "kt.vjp", kwargs, {"weights": None, "has_aux": False}, e)
    weights, single = as_weights(options["weights"])
    has_aux = bool(options["has_aux"])
    primal = _primal(builder, "kt.vjp", fn, e, reruns=True)
    inputs = _with_defaults(builder, primal, args[1:], e)
    out = builder.apply(_call(primal), *inputs, node=e)
    # the gradients of the inputs given (not of the defaults), as outside
    given = "all" if len(inputs) == len(args) - 1 else tuple(range(len(args) - 1))
    spec = GradSpec(given, weights, single, sens_param=True, has_aux=has_aux)
    grads = grad_graph(primal, spec)

    def gradients(g, u):
        result = g.apply(_call(grads), *inputs, u)
        return _prim(g, prims.GetItem(), result, Constant(0)) if has_aux else result

    vjp_fn = _closure(builder, f"{primal.name}_vjp_fn", e, gradients)
    if not has_aux:
        return builder.apply(prims.MakeTuple(), out, vjp_fn, node=e)
    value, aux = _split(builder, out, e)
    return builder.apply(prims.MakeTuple(), value, vjp_fn, aux, node=e)


def _split(builder, out, e):
    """`(value, aux)` of a `has_aux` output, as two nodes."""
    pair = builder.apply(structural.SplitAux(), out, node=e)
    return [builder.apply(prims.GetItem(), pair, Constant(k), node=e) for k in (0, 1)]


def lower_jvp(builder, args, kwargs, e):
    """`kt.jvp(fn, inputs, v, has_aux=False)`: `(out, J v)`, or `(out, J v,
    aux)` (only `out` is differentiated)."""
    fn = _static_fn(builder, "kt.jvp", args, e, _n_inputs(args))
    has_aux = bool(_options(builder, "kt.jvp", kwargs, {"has_aux": False}, e)["has_aux"])
    if len(args) != 3:
        raise builder.fp.error("kt.jvp takes (fn, inputs, v)", e)
    primal = _primal(builder, "kt.jvp", fn, e, reruns=has_aux)
    graph = jvp_graph(first_output_graph(primal) if has_aux else primal)
    xs = _given_inputs(builder, "kt.jvp", primal, args[1], e)
    vs = _given_tangents(builder, "kt.jvp", primal, args[1], args[2], e)
    vs += [_zeros(builder, x, e) for x in xs[len(vs) :]]  # a keyword-only default's tangent
    pair = builder.apply(_call(graph), *xs, *vs, node=e)
    if not has_aux:
        return pair
    _, aux = _split(builder, builder.apply(_call(primal), *xs, node=e), e)
    jv = builder.apply(prims.GetItem(), pair, Constant(1), node=e)
    out = builder.apply(prims.GetItem(), pair, Constant(0), node=e)
    return builder.apply(prims.MakeTuple(), out, jv, aux, node=e)


def _given_inputs(builder, api: str, primal: FuncGraph, inputs: Node, e) -> list:
    """The values `kt.jvp(fn, inputs, v)` / `kt.hvp` give `primal`'s
    parameters: a tuple display's items, else the items of the value
    `inputs` (or `inputs` alone), told apart when run (`BindInputs`); then
    the defaults of the parameters they leave out (`_with_defaults`)."""
    if _is_tuple_display(inputs):
        return _with_defaults(builder, primal, list(inputs.args), e)
    required, fills = _positional(builder, primal, e)
    return _with_defaults(builder, primal, _bound(builder, api, inputs, required, fills, e), e)


def _given_tangents(builder, api: str, primal: FuncGraph, inputs: Node, v: Node, e) -> list:
    """The tangents `v` of `kt.jvp(fn, inputs, v)`, checked against `inputs`
    and bound to `primal`'s positional parameters as `_given_inputs` binds
    `inputs` (a default not given has a zero tangent)."""
    if _is_tuple_display(inputs) and _is_tuple_display(v):
        _same_count(builder, api, inputs, v, e)
        pairs = enumerate(zip(inputs.args, v.args, strict=True))
        return [_checked(builder, api, x, t, k, e) for k, (x, t) in pairs]
    if _is_tuple_display(inputs):
        checked = _checked(builder, api, inputs, v, None, e)  # as many as the inputs
        return _bound(builder, api, checked, len(inputs.args), [], e)
    required, fills = _positional(builder, primal, e)
    checked = _checked(builder, api, inputs, v, None, e)  # as many as the inputs
    zeros = [_zeros(builder, x, e) for x in fills]
    return _bound(builder, api, checked, required, zeros, e)


def _positional(builder, primal: FuncGraph, e) -> tuple[int, list]:
    """How many of `primal`'s positional parameters have no default, and the
    defaults of the others (for `BindInputs`). A `*args` function's
    parameters are each one input (the `*args` tuple one of them)."""
    sig = primal.signature
    names = sig.positional if sig is not None else primal.param_names
    if names is None or (sig is not None and sig.vararg is not None):  # (None: being parsed)
        return len(primal.parameters), []
    defaults = primal.defaults or {}
    required = next((k for k, name in enumerate(names) if name in defaults), len(names))
    placeholders = [Constant(None)] * required
    return required, builder.bind_call(primal, placeholders, {}, e)[required : len(names)]


def _bound(builder, api: str, value: Node, required: int, fills: list, e) -> list:
    """`value`'s items (or `value` alone) then the `fills` they leave out, as
    nodes: `BindInputs`, whose count is checked when run."""
    fill = builder.apply(prims.MakeTuple(), *fills, node=e)
    bound = builder.apply(prims.BindInputs(api, required), value, fill, node=e)
    n = required + len(fills)
    return [builder.apply(prims.GetItem(), bound, Constant(k), node=e) for k in range(n)]


def lower_hvp(builder, args, kwargs, e):
    """`kt.hvp(fn, args, v)`: the jvp of fn's gradient (w.r.t. input 0)."""
    if kwargs:
        raise builder.fp.unsupported("kt.hvp with keyword arguments", e)
    fn = _static_fn(builder, "kt.hvp", args, e, _n_inputs(args))
    if len(args) != 3:
        raise builder.fp.error("kt.hvp takes (fn, args, v) inside transformed code", e)
    primal = _primal(builder, "kt.hvp", fn, e)
    graph = jvp_graph(grad_graph(primal, GradSpec(inputs=0)))
    xs = _given_inputs(builder, "kt.hvp", primal, args[1], e)
    zeros = [_zeros(builder, x, e) for x in xs[1:]]
    v = _checked(builder, "kt.hvp", xs[0], args[2], 0, e)
    pair = builder.apply(_call(graph), *xs, v, *zeros, node=e)
    return builder.apply(prims.GetItem(), pair, Constant(1), node=e)


def lower_jacobian(builder, jac, args, kwargs, e):
    """`kt.jacrev(fn, grad_position, has_aux)(*args)` or `kt.jacfwd(...)` as
    graphs: a Jacobian per position (a tuple for a tuple of positions), with
    `has_aux` `(jacobian, aux)`. Parameters left out get their defaults."""
    fn = target_of(jac.fn, len(args)) if is_library(jac.fn) else jac.fn
    primal = _primal(builder, "jacfwd" if jac.forward else "jacrev", fn, e, reruns=True)
    star = primal.signature is not None and primal.signature.vararg is not None
    if kwargs and star:
        raise builder.fp.error(
            f"a Jacobian of a function with *args got the keyword argument "
            f"{next(iter(kwargs))!r}: differentiate a wrapper with named parameters",
            e,
        )
    target = first_output_graph(primal) if jac.has_aux else primal
    for k in jac.positions:
        if not -len(args) <= k < len(args):
            raise builder.fp.error(
                f"jacfwd/jacrev: grad_position {k} but the function got {len(args)} inputs", e
            )
    positions = [k % len(args) for k in jac.positions]
    if kwargs:  # passed, not differentiated (JAX's); the positional inputs keep their places
        args = builder.bind_call(primal, list(args), dict(kwargs), e)
    else:
        args = _with_defaults(builder, primal, args, e)
    out = builder.apply(_call(target), *args, node=e)
    matrices = [_jacobian(builder, target, k, jac.forward, args, out, e) for k in positions]
    if isinstance(jac.argnum, tuple):  # w.r.t. the tuple of inputs: output-major
        ms = builder.apply(prims.MakeTuple(), *matrices, node=e)
        xs = builder.apply(prims.MakeTuple(), *[args[k] for k in positions], node=e)
        result = builder.apply(_call(graph_of(_side_by_side)), ms, out, xs, node=e)
    else:
        result = builder.apply(trees.JacobianBlocks(), matrices[0], out, args[positions[0]], node=e)
    if not jac.has_aux:
        return result
    _, aux = _split(builder, builder.apply(_call(primal), *args, node=e), e)
    if jac.nested_aux:  # `hessian`: a gradient's `(grad, (aux, ...))`
        aux = builder.apply(_call(graph_of(_bare_aux)), aux, node=e)
    return builder.apply(prims.MakeTuple(), result, aux, node=e)


def _jacobian(builder, primal: FuncGraph, argnum: int, forward: bool, args, out, e):
    """The Jacobian matrix of `primal` (its output `out`) w.r.t. input
    `argnum`: one row (vjp) or column (jvp) closure call per basis vector."""
    if forward:
        jv = jvp_graph(primal)

        def column(g, v):
            tangents = [
                v if k == argnum else _prim(g, structural.ZerosLike(), a)
                for k, a in enumerate(args)
            ]
            return _prim(g, prims.GetItem(), g.apply(_call(jv), *args, *tangents), Constant(1))

        helper = _closure(builder, f"{primal.name}_jvp_column", e, column)
        sweep = graph_of(_jacfwd_columns)
    else:
        grads = grad_graph(primal, GradSpec(inputs=argnum, sens_param=True))
        helper = _closure(
            builder, f"{primal.name}_vjp_row", e, lambda g, u: g.apply(_call(grads), *args, u)
        )
        sweep = graph_of(_jacrev_rows)
    return builder.apply(_call(sweep), helper, out, args[argnum], node=e)


# -- parsed like user code ----------------------------------------------------------
# `out` and `x` may be pytrees: rows of trees are read as rows of a matrix
# (`tree_size(out)` by `tree_size(x)`), which `jacobian_blocks` nests as JAX
# nests Jacobians (`out`'s structure of `x`'s).
def _jacrev_rows(row, out, x):
    n = trees.tree_size(out)
    basis = trees.unravel_rows(jnp.eye(n), out)
    rows = trees.unravel_rows(jnp.zeros((n, trees.tree_size(x))), x)
    for k in range(n):
        rows = trees.tree_set(rows, k, row(trees.tree_index(basis, k)))
    return trees.ravel_rows(rows)


def _jacfwd_columns(column, out, x):
    n = trees.tree_size(x)
    basis = trees.unravel_rows(jnp.eye(n), x)
    columns = trees.unravel_rows(jnp.zeros((n, trees.tree_size(out))), out)
    for k in range(n):
        columns = trees.tree_set(columns, k, column(trees.tree_index(basis, k)))
    return jnp.transpose(trees.ravel_rows(columns))


def _bare_aux(aux):
    """A gradient function's aux tuple as `fn` returned it: one value bare."""
    if len(aux) == 1:
        return aux[0]
    return aux


def _side_by_side(ms, out, xs):
    """The Jacobian w.r.t. the tuple `xs` of several inputs, from one matrix
    per input: `out`'s structure of tuples over `xs` (output-major)."""
    return trees.jacobian_blocks(jnp.concatenate(ms, axis=1), out, xs)
