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
        _check(p.graph is graph, p, "parameter {} of {} is owned elsewhere", p.name, graph.name)
    for node in graph.nodes:
        _check(node.graph is graph, node, "node of {} is owned by another graph", graph.name)
        _check(id(node) not in defined, node, "node appears twice in {}", graph.name)
        for inp in node.inputs:
            _check_input(graph, inp, defined, node)
        _check_arity(node)
        defined.add(id(node))
    _check(graph.output is not None, graph, "graph {} has no output", graph.name)
    _check_input(graph, graph.output, defined, graph)


def _check_input(graph: FuncGraph, inp: Node, defined: set[int], where) -> None:
    if isinstance(inp, Constant):
        return
    _check(isinstance(inp, (Parameter, Apply)), where, "unknown node {!r} in {}", inp, graph.name)
    if inp.graph is graph:
        _check(id(inp) in defined, where, "{!r} used before it is defined in {}", inp, graph.name)
    else:
        owned = inp.graph is not None and inp.graph.is_ancestor_of(graph)
        message = "free variable {!r} of {} is not owned by an enclosing graph"
        _check(owned, where, message, inp, graph.name)


def _check_arity(node: Apply) -> None:
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if not isinstance(fn, Primitive):
        if isinstance(fn, FuncGraph):
            n = len(node.args)
            _check(n == len(fn.parameters), node, "call of {} with {} args", fn.name, n)
        return
    if fn.n_inputs is not None:
        _check(len(node.args) == fn.n_inputs, node, "{} takes {} inputs", fn.name, fn.n_inputs)
    for slot in fn.graph_slots:
        g = node.args[slot].value if isinstance(node.args[slot], Constant) else None
        _check(isinstance(g, FuncGraph), node, "{} needs a graph in slot {}", fn.name, slot)
        want, has = fn.graph_arity(slot, len(node.args)), len(g.parameters)
        message = "{}: graph {} takes {} parameters, needs {}"
        _check(has == want, node, message, fn.name, g.name, has, want)


def _check(ok: bool, where, message: str, *args) -> None:
    """Raise when not `ok`; `message.format(*args)` is built only then."""
    if not ok:
        text = "IR verification failed: " + message.format(*args)
        raise VerifyError(text, getattr(where, "debug", None))
