"""Closure conversion: a closure graph as a top-level graph of its free variables.

`lifted(graph)` copies a closure (a graph reading nodes of the graphs that
enclose it) and the graphs nested in it into a new top-level graph whose
leading parameters are the closure's free variables, in
`graph.free_variables()` order, followed by its own parameters. A caller
passes the values the closure read: `lifted(g)(*free, *args)` computes
`g(*args)`. Used where a closure's body must run apart from its enclosing
function: `jax.vmap` of a closure runs batched as one library call
(`frontend.calls.vmapped_call`).
"""

from __future__ import annotations

from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node


def lifted(graph: FuncGraph) -> FuncGraph | None:
    """The top-level copy of `graph` taking its free variables first; None
    when its signature is not positional, or it calls a closure defined
    outside it, or a graph nested in it is held by a primitive (these are
    not copied here)."""
    if graph.signature is not None:  # `*args`, keyword-only: parameters not in order
        return None
    free = graph.free_variables()
    reached = list(graph.reachable())
    inner = [g for g in reached if g is graph or graph.is_ancestor_of(g)]
    if any(g.parent is not None and g not in inner for g in reached):
        return None  # a closure of an enclosing function (a sibling): not copied here
    held = {
        id(sub)
        for g in inner
        for node in g.nodes
        for sub in getattr(getattr(node.fn, "value", None), "subgraphs", lambda: [])()
    }
    if any(id(g) in held for g in inner):
        return None
    copies = {g.uid: _shell(g) for g in inner}
    top = copies[graph.uid]
    nodes: dict[int, Node] = {}
    for v in free:
        name = getattr(v, "name", None) or v.debug.name or "free"
        nodes[id(v)] = top.add_parameter(name, v.debug)
    for g in inner:
        copy = copies[g.uid]
        copy.parent = None if g is graph else copies[g.parent.uid]
        for p in g.parameters:
            nodes[id(p)] = copy.add_parameter(p.name, p.debug)
        for node in g.nodes:  # shells first: a closure reads nodes made after it
            nodes[id(node)] = _copied(copy, node)
    constants: dict[int, Constant] = {}

    def read(node: Node) -> Node:
        if isinstance(node, Constant):
            value = node.value
            if isinstance(value, FuncGraph) and value.uid in copies:
                if value.uid not in constants:
                    constants[value.uid] = Constant(copies[value.uid], node.debug, node.hint)
                return constants[value.uid]
            return node
        return nodes[id(node)]

    for g in inner:
        copy = copies[g.uid]
        for node in g.nodes:
            nodes[id(node)].inputs = [read(i) for i in node.inputs]
        copy.output = read(g.output)
        copy.defaults = {k: read(v) for k, v in g.defaults.items()}
    if top.param_names is not None:
        top.param_names = [p.name for p in top.parameters]
    return top


def _shell(g: FuncGraph) -> FuncGraph:
    copy = FuncGraph(g.name, None, g.debug, g.kind)
    copy.param_names = list(g.param_names) if g.param_names is not None else None
    copy.signature = g.signature
    copy.closure_site, copy.closure_key = g.closure_site, g.closure_key
    copy.k_order = g.k_order
    return copy


def _copied(graph: FuncGraph, node: Apply) -> Apply:
    copy = Apply(graph, [], node.debug)
    copy.tuple_arity = node.tuple_arity
    copy.calls_value = node.calls_value
    graph.nodes.append(copy)
    return copy
