"""A stable, readable text form of FuncGraphs.

    graph f(x, y)  # file.py:3
      fv: scale
      %1 = mul(x, y)             # line 4
      %z = jnp.sin(%1)           # line 5
      return %z

Nodes are numbered in order within each graph; a node carrying a user name
prints as `%name` (numbered on a clash). Subgraphs print after their parent,
indented. Constants print as values; graphs as `@name`.
"""

from __future__ import annotations

import os

from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive


class _Printer:
    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0
        self.graph_names: dict[int, str] = {}
        self.done: set[int] = set()
        self.todo: list[FuncGraph] = []

    def node_name(self, node: Node) -> str:
        if id(node) not in self.names:
            base = getattr(node, "name", "") or node.debug.name
            if base:
                name, k = base, 0
                while name in self.used:
                    k += 1
                    name = f"{base}.{k}"
            else:
                self.counter += 1
                name = str(self.counter)
            self.used.add(name)
            self.names[id(node)] = name
        name = self.names[id(node)]
        return name if getattr(node, "name", None) and not isinstance(node, Apply) else "%" + name

    def graph_name(self, graph: FuncGraph) -> str:
        if graph.uid not in self.graph_names:
            base, k = graph.name, 0
            taken = set(self.graph_names.values())
            name = base
            while name in taken:
                k += 1
                name = f"{base}.{k}"
            self.graph_names[graph.uid] = name
        return self.graph_names[graph.uid]

    def atom(self, node: Node) -> str:
        if node is None:
            return "None"
        if isinstance(node, Constant):
            value = node.value
            if isinstance(value, FuncGraph):
                if value.uid not in self.done:
                    self.todo.append(value)
                return "@" + self.graph_name(value)
            if isinstance(value, Primitive):
                return repr(value)
            if node.hint:
                return node.hint
            text = repr(value)
            return text if len(text) <= 40 else f"<{type(value).__name__}>"
        return self.node_name(node)

    def graph(self, graph: FuncGraph, indent: str) -> list[str]:
        self.done.add(graph.uid)
        params = ", ".join(self.node_name(p) for p in graph.parameters)
        where = f"{os.path.basename(graph.debug.file)}:{graph.debug.line}"
        lines = [f"{indent}graph {self.graph_name(graph)}({params})  # {where}"]
        fvs = graph.free_variables()
        if fvs:
            lines.append(f"{indent}  fv: {', '.join(self.atom(v) for v in fvs)}")
        for node in graph.nodes:
            call = f"{self.atom(node.fn)}({', '.join(self.atom(a) for a in node.args)})"
            text = f"{indent}  {self.node_name(node)} = {call}"
            if node.debug.line:
                text = f"{text:<48}  # line {node.debug.line}"
            lines.append(text)
        lines.append(f"{indent}  return {self.atom(graph.output)}")
        return lines


def print_graph(graph: FuncGraph) -> str:
    """The text form of `graph` and every graph it reaches."""
    p = _Printer()
    p.todo.append(graph)
    out: list[str] = []
    while p.todo:
        g = p.todo.pop(0)
        if g.uid in p.done:
            continue
        depth = len(list(g.ancestors()))
        out += p.graph(g, "  " * depth)
        out.append("")
    return "\n".join(out).rstrip() + "\n"
