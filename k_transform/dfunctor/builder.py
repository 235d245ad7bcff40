"""Building graphs by hand (the transforms' own graphs: gradient, jvp, J)."""

from __future__ import annotations

from k_transform.ir.nodes import Constant, FuncGraph, Node
from k_transform.ops import python as prims


def new_graph(name: str, primal: FuncGraph, names: list[str], kind: str = "transform"):
    """An empty graph named `name` with parameters `names`, located at `primal`."""
    graph = FuncGraph(name, debug=primal.debug, kind=kind)
    params = [graph.add_parameter(n) for n in names]
    graph.param_names = list(names)
    graph.defaults = {}
    return graph, params


class Builder:
    """Small helpers for building a graph by hand."""

    def __init__(self, graph: FuncGraph):
        self.graph = graph

    def prim(self, prim, *args: Node, debug=None) -> Node:
        node = self.graph.apply(Constant(prim, hint=prim.name), *args)
        if debug is not None:
            node.debug = debug
        return node

    def call(self, fn: Node, *args: Node, arity: int = 0, debug=None) -> Node:
        node = self.graph.apply(fn, *args)
        node.tuple_arity = arity
        if debug is not None:
            node.debug = debug
        return node

    def item(self, tup: Node, k: int, name: str = "") -> Node:
        node = self.prim(prims.GetItem(), tup, Constant(k))
        node.debug = node.debug.named(name)
        return node

    def tuple(self, *items: Node) -> Node:
        return self.prim(prims.MakeTuple(), *items)
