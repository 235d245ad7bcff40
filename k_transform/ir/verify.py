"""The IR verifier: structural invariants every graph must keep.

- every Apply in `graph.nodes` is owned by `graph`, and appears once;
- every input is a Constant, or a node owned by the graph itself or by one of
  its lexical ancestors (a free variable), defined before use when owned by
  the graph itself;
- control primitives get graphs in their graph slots, with the right number
  of parameters; primitives with a fixed arity get that many inputs.
"""

from __future__ import annotations

from k_transform.errors import KTransformError
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ir.primitive import Primitive


class VerifyError(KTransformError):
    """The IR broke an invariant (a bug in k_transform, not in user code)."""


def verify(root: FuncGraph) -> None:
    """Check `root` and every graph it reaches; raise VerifyError on a fault."""
    for graph in root.reachable():
        _verify_graph(graph)


def _verify_graph(graph: FuncGraph) -> None:
    defined: set[int] = {id(p) for p in graph.parameters}
    for p in graph.parameters:
        _check(p.graph is graph, f"parameter {p.name} of {graph.name} is owned elsewhere", p)
    for node in graph.nodes:
        _check(node.graph is graph, f"node of {graph.name} is owned by another graph", node)
        _check(id(node) not in defined, f"node appears twice in {graph.name}", node)
        for inp in node.inputs:
            _check_input(graph, inp, defined, node)
        _check_arity(node)
        defined.add(id(node))
    _check(graph.output is not None, f"graph {graph.name} has no output", graph)
    _check_input(graph, graph.output, defined, graph)


def _check_input(graph: FuncGraph, inp: Node, defined: set[int], where) -> None:
    if isinstance(inp, Constant):
        return
    _check(isinstance(inp, (Parameter, Apply)), f"unknown node {inp!r} in {graph.name}", where)
    if inp.graph is graph:
        _check(id(inp) in defined, f"{inp!r} used before it is defined in {graph.name}", where)
    else:
        _check(
            inp.graph is not None and inp.graph.is_ancestor_of(graph),
            f"free variable {inp!r} of {graph.name} is not owned by an enclosing graph",
            where,
        )


def _check_arity(node: Apply) -> None:
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if not isinstance(fn, Primitive):
        if isinstance(fn, FuncGraph):
            want = len(fn.parameters)
            _check(len(node.args) == want, f"call of {fn.name} with {len(node.args)} args", node)
        return
    if fn.n_inputs is not None:
        _check(len(node.args) == fn.n_inputs, f"{fn.name} takes {fn.n_inputs} inputs", node)
    for slot in fn.graph_slots:
        g = node.args[slot].value if isinstance(node.args[slot], Constant) else None
        _check(isinstance(g, FuncGraph), f"{fn.name} needs a graph in slot {slot}", node)
        want = fn.graph_arity(slot, len(node.args))
        _check(
            len(g.parameters) == want,
            f"{fn.name}: graph {g.name} takes {len(g.parameters)} parameters, needs {want}",
            node,
        )


def _check(ok: bool, message: str, where) -> None:
    if not ok:
        raise VerifyError("IR verification failed: " + message, getattr(where, "debug", None))
