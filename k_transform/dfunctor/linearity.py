"""Whether a jvp rule is linear in its tangents, as its transpose needs.

K of a function with a jvp rule (a user's JAX custom_jvp) transposes the
rule's tangent map (`dfunctor.own_fprop`): its gradient w.r.t. the tangents,
which is the vjp only where the map is linear. JAX's reverse mode refuses a
rule that is not (it has no transpose for `min` in `jnp.clip(t, lo, hi)`);
so does K here, rather than give the derivative of the map at zero tangents
(a number JAX has none for, and not what the rule's forward mode gives).

`nonlinear_step(graph, flags)` walks `graph` from its parameters flagged
(the tangents), following the values that depend on them into the graphs it
calls, and gives the first step that is not linear in them: an elementwise
function (`unary` rules: `sin`, `relu`, `abs`, ...), rounding, `clip`,
`maximum`, `minimum`, `**`, a max, min or product reduction, a softmax, a
product or matrix product of two such values, a division by one, a `where`
whose condition is one, or a call of another function with its own rule.
Other primitives (sums, products by values of the primal, shapes, indexing,
`where` picking between them) are linear in them; steps it cannot see into
(a closure's body, a branch or loop, a library call) are taken as linear.
"""

from __future__ import annotations

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ir.nodes import Apply, Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ops import arithmetic as ar
from k_transform.ops import math as mt
from k_transform.ops import nn
from k_transform.ops import reduce as rd

# Not linear in any input a tangent reaches.
ANY_INPUT = (
    mt.Clip,
    mt.ClipJax,
    mt.Maximum,
    mt.Minimum,
    mt.Sign,
    mt.Floor,
    mt.Ceil,
    mt.Round,
    mt.Atan2,
    ar.Pow,
    rd.ReduceMax,
    rd.ReduceMin,
    rd.ReduceProd,
    rd.Cumprod,
    rd.LogSumExp,
    nn.Softmax,
)
# Products: linear in each input, not in two at once.
PRODUCTS = (ar.Mul, ar.NumpyMatMul, rd.Dot, rd.Outer, rd.MatMul, rd.BatchMatMul)


def _nonlinear(prim: Primitive, reached: list[int]) -> bool:
    """Whether `prim` is not linear in its inputs at the positions `reached`."""
    if isinstance(prim, ANY_INPUT) or bprop_getters.family(prim) == "unary":
        return True
    if isinstance(prim, PRODUCTS):
        return len(reached) > 1
    if isinstance(prim, ar.Div):
        return 1 in reached
    if isinstance(prim, mt.Select):
        return 0 in reached
    return False


def nonlinear_step(graph: FuncGraph, flags: tuple, seen: set | None = None) -> Apply | None:
    """The first step of `graph` not linear in the values that depend on its
    parameters `flags` marks (module docstring), or None."""
    seen = set() if seen is None else seen
    if (graph.uid, flags) in seen:
        return None
    seen.add((graph.uid, flags))
    reached = {id(p) for p, flag in zip(graph.parameters, flags, strict=True) if flag}
    for node in graph.nodes:
        at = [k for k, a in enumerate(node.args) if id(a) in reached]
        if not at:
            continue
        reached.add(id(node))
        fn = node.fn.value if isinstance(node.fn, Constant) else None
        if isinstance(fn, Primitive) and _nonlinear(fn, at):
            return node
        if isinstance(fn, FuncGraph):
            callee = fn.differentiable()
            if callee.custom_fprop is not None or callee.jvp_rule is not None:
                return node
            if len(callee.parameters) == len(node.args):
                inner = tuple(id(a) in reached for a in node.args)
                found = nonlinear_step(callee, inner, seen)
                if found is not None:
                    return found
    return None
