"""The gradient API called inside code that is itself being transformed.

`kt.grad(f)`, `kt.value_and_grad(f)`, `GradOperation()(f)`, `kt.jacrev(f)`,
`kt.jacfwd(f)` and `kt.hessian(f)` are `__kt_static__`: the parser calls
them at transform time and the gradient function (or `Jacobian`) they
return is a constant. A value with a `__kt_lower__(builder, args, kwargs,
e)` method is not called at all: the parser hands it the call's argument
nodes and it builds the call out of graphs, so the result is differentiable
again like any user code:

- `kt.vjp(f, *xs)` -> `(f(*xs), vjp_fn)`, `vjp_fn` a closure graph over the
  `xs` calling f's gradient graph (all inputs, sensitivity last);
- `kt.jvp(f, inputs, v)` -> a call of f's jvp graph (inputs and tangents
  unpacked: a lone value when f has one parameter and it is no tuple);
- `kt.hvp(f, args, v)` -> the jvp graph of f's gradient graph;
- a `Jacobian(xs)` -> `_jacrev_rows` / `_jacfwd_columns` below (parsed like
  user code): one call of a row (vjp) or column (jvp) closure per basis
  vector, in a `for` loop over the static size.

`builder` is the parser's GraphBuilder of the calling function: its
`apply`, `unpack`, `debug`, `graph` and `fp.error`/`fp.unsupported` are used.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform.api import graph_of
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.transforms import GradSpec, grad_graph, jvp_graph


def _static_fn(builder, api: str, args, kwargs, e):
    """The function argument of an API call in transformed code (a constant)."""
    if kwargs or not args or not isinstance(args[0], Constant):
        raise builder.fp.unsupported(f"{api} with keywords or a computed function", e)
    return args[0].value


def _closure(builder, name: str, e, body) -> Constant:
    """A one-parameter closure graph inside the caller; `body(graph, u)` gives its output."""
    graph = FuncGraph(name, parent=builder.graph, debug=builder.debug(e))
    u = graph.add_parameter("u")
    graph.param_names, graph.defaults = ["u"], {}
    graph.output = body(graph, u)
    return Constant(graph, hint=name)


def _prim(graph: FuncGraph, prim, *args):
    return graph.apply(Constant(prim, hint=prim.name), *args)


def _call(graph_value: FuncGraph) -> Constant:
    return Constant(graph_value, hint=graph_value.name)


def lower_vjp(builder, args, kwargs, e):
    """`kt.vjp(fn, *inputs)`: `(fn(*inputs), vjp_fn)`."""
    primal = graph_of(_static_fn(builder, "kt.vjp", args, kwargs, e))
    inputs = args[1:]
    out = builder.apply(_call(primal), *inputs, node=e)
    grads = grad_graph(primal, GradSpec(inputs="all", sens_param=True))
    vjp_fn = _closure(
        builder, f"{primal.name}_vjp_fn", e, lambda g, u: g.apply(_call(grads), *inputs, u)
    )
    return builder.apply(prims.MakeTuple(), out, vjp_fn, node=e)


def lower_jvp(builder, args, kwargs, e):
    """`kt.jvp(fn, inputs, v)`: `(out, J v)`."""
    fn = _static_fn(builder, "kt.jvp", args, kwargs, e)
    if len(args) != 3:
        raise builder.fp.error("kt.jvp takes (fn, inputs, v)", e)
    graph = jvp_graph(graph_of(fn))
    n = len(graph.parameters) // 2
    xs, vs = builder.unpack(args[1], n), builder.unpack(args[2], n)
    return builder.apply(_call(graph), *xs, *vs, node=e)


def lower_hvp(builder, args, kwargs, e):
    """`kt.hvp(fn, args, v)`: the jvp of fn's gradient (w.r.t. input 0)."""
    fn = _static_fn(builder, "kt.hvp", args, kwargs, e)
    if len(args) != 3:
        raise builder.fp.error("kt.hvp takes (fn, args, v) inside transformed code", e)
    primal = graph_of(fn)
    graph = jvp_graph(grad_graph(primal, GradSpec(inputs=0)))
    xs = builder.unpack(args[1], len(primal.parameters))
    zeros = [builder.apply(structural.ZerosLike(), x, node=e) for x in xs[1:]]
    pair = builder.apply(_call(graph), *xs, args[2], *zeros, node=e)
    return builder.apply(prims.GetItem(), pair, Constant(1), node=e)


def lower_jacobian(builder, fn, argnum: int, forward: bool, args, e):
    """`kt.jacrev(fn, argnum)(*args)` or `kt.jacfwd(...)` as graphs."""
    primal = graph_of(fn)
    out = builder.apply(_call(primal), *args, node=e)
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
def _jacrev_rows(row, out, x):
    n = jnp.size(out)
    basis = jnp.eye(n, dtype=jnp.result_type(out))
    jac = jnp.zeros((n,) + jnp.shape(x), jnp.result_type(x))
    for k in range(n):
        jac = jac.at[k].set(row(jnp.reshape(basis[k], jnp.shape(out))))
    return jnp.reshape(jac, jnp.shape(out) + jnp.shape(x))


def _jacfwd_columns(column, out, x):
    n = jnp.size(x)
    basis = jnp.eye(n, dtype=jnp.result_type(x))
    jac = jnp.zeros((n,) + jnp.shape(out), jnp.result_type(out))
    for k in range(n):
        jac = jac.at[k].set(column(jnp.reshape(basis[k], jnp.shape(x))))
    jac = jnp.moveaxis(jnp.reshape(jac, (n, jnp.size(out))), 0, -1)
    return jnp.reshape(jac, jnp.shape(out) + jnp.shape(x))
