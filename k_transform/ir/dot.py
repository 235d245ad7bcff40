"""Pictures of FuncGraphs: `to_dot(graph)` writes graphviz DOT text.

Contract:

- Every graph reached from `graph` is drawn (its closures, branch and loop
  bodies, callees, bprop closures, graphs a primitive holds), each as one
  cluster, nested in the cluster of its lexical parent when that parent is
  drawn too. A cluster starts with a header node `name(params)` (the graph's
  kind, file and line below) and ends with a `return` node.
- Parameters are ellipses. Applies are boxes labelled with what they call (a
  primitive and its attributes, `@graph` for a graph, `call` for a computed
  function) and the user's variable name and source line. Constants are plain
  text, one node per use, so they stay next to their use. A graph used as a
  value is an `@name` node.
- Edges: data flows from an input to its use, labelled with the argument
  position when a call has several. An input owned by another graph (a free
  variable) is a dashed edge. A bold blue edge links a call of a graph, or a
  graph value, to that graph's cluster.
- Deterministic: node ids are numbered in first-use order, so the same graph
  structure gives the same text. No `id()`, uid or memory address appears;
  a constant whose repr could hold one is shown by its type.
"""

from __future__ import annotations

import itertools
import os

from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ir.primitive import Primitive

_FILLS = (  # (what a graph's kind starts or ends with, cluster colour)
    ("bprop", "#fbeaea"),
    ("fprop", "#e8f0fb"),
    ("transform", "#f0ecf7"),
    ("if", "#fdf6e3"),
    ("while", "#eef6e8"),
    ("for", "#eef6e8"),
    ("loop", "#eef6e8"),
)
_LINK = 'color="#3465a4", style=bold'
_ATOMS = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis))


def _fill(kind: str) -> str:
    for part, colour in _FILLS:
        if kind.startswith(part) or kind.endswith(part):
            return colour
    return "#f5f5f5"


def _quote(text: str) -> str:
    """A DOT string literal; `\\n` in `text` stays a line break."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _short(text: str, limit: int = 32) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value_text(value) -> str:
    """A constant's value as text with no memory address in it."""
    if isinstance(value, _ATOMS):
        return _short(repr(value))
    if isinstance(value, (tuple, list)) and all(isinstance(v, _ATOMS) for v in value):
        return _short(repr(value))
    if isinstance(value, Primitive):
        return _prim_text(value)
    if isinstance(value, type):
        return value.__name__
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:
        return f"{type(value).__name__} {dtype}{list(shape)}"
    return f"<{type(value).__name__}>"


def _prim_text(prim: Primitive) -> str:
    """`Name[attr=value, ...]`; `where` is left out (the line is shown)."""
    attrs = [f"{k}={_value_text(v)}" for k, v in sorted(prim.attrs.items()) if k != "where"]
    return f"{prim.name}[{', '.join(attrs)}]" if attrs else prim.name


class _Dot:
    """One drawing: graph numbering, node ids, and the lines written."""

    def __init__(self, root: FuncGraph):
        self.graphs = _graphs_from(root)
        self.index = {g.uid: k for k, g in enumerate(self.graphs)}
        self.names = _graph_names(self.graphs)
        self.ids: dict[int, str] = {}  # id(node) -> dot id, for Parameters and Applies
        self.edges: list[str] = []
        self.stubs: list[str] = []
        for k, graph in enumerate(self.graphs):
            for j, param in enumerate(graph.parameters):
                self.ids[id(param)] = f"g{k}_p{j}"
            for j, node in enumerate(graph.nodes):
                self.ids[id(node)] = f"g{k}_n{j}"

    # -- the whole picture ---------------------------------------------------
    def text(self) -> str:
        lines = [
            "digraph k_transform {",
            "  compound=true;",
            "  newrank=true;",
            '  graph [fontname="Helvetica", fontsize=11];',
            '  node [fontname="Helvetica", fontsize=10];',
            '  edge [fontname="Helvetica", fontsize=8];',
        ]
        body: list[str] = []
        for graph in self.graphs:
            if self._drawn_parent(graph) is None:
                body += self.cluster(graph, "  ")
        return "\n".join(lines + self.stubs + body + self.edges + ["}"]) + "\n"

    def _drawn_parent(self, graph: FuncGraph) -> FuncGraph | None:
        parent = graph.parent
        return parent if parent is not None and parent.uid in self.index else None

    def _inside(self, graph: FuncGraph, outer: FuncGraph) -> bool:
        """Whether `graph`'s cluster is `outer`'s or nested in it."""
        while graph is not None:
            if graph is outer:
                return True
            graph = self._drawn_parent(graph)
        return False

    # -- one graph -------------------------------------------------------------
    def cluster(self, graph: FuncGraph, indent: str) -> list[str]:
        k = self.index[graph.uid]
        fill = _fill(graph.kind)
        lines = [
            f"{indent}subgraph cluster_{k} {{",
            f"{indent}  label={_quote(self.names[k])};",
            f'{indent}  style=filled; fillcolor="{fill}"; color="#999999";',
        ]
        inner = indent + "  "
        params = ", ".join(p.name for p in graph.parameters)
        where = f"{graph.kind}  {os.path.basename(graph.debug.file)}:{graph.debug.line}"
        head = f"{self.names[k]}({params})\n{where}"
        lines.append(f"{inner}g{k}_h [shape=note, label={_quote(head)}];")
        for j, param in enumerate(graph.parameters):
            lines.append(f"{inner}g{k}_p{j} [shape=ellipse, label={_quote(param.name)}];")
            self.edges.append(f"  g{k}_h -> g{k}_p{j} [style=invis];")
        uses = itertools.count()
        for j, node in enumerate(graph.nodes):
            lines.append(f"{inner}g{k}_n{j} [shape=box, label={_quote(self.apply_label(node))}];")
            self.apply_edges(graph, node, f"g{k}_n{j}", uses, lines, inner)
        lines.append(f"{inner}g{k}_r [shape=house, label=return];")
        if graph.output is not None:
            self.input_edge(graph, graph.output, f"g{k}_r", "", uses, lines, inner)
        for child in self.graphs:
            if self._drawn_parent(child) is graph:
                lines += self.cluster(child, inner)
        lines.append(f"{indent}}}")
        return lines

    def apply_label(self, node: Apply) -> str:
        fn = node.fn
        if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            callee = _prim_text(fn.value)
        elif isinstance(fn, Constant) and isinstance(fn.value, FuncGraph):
            callee = "@" + self.names[self.index[fn.value.uid]]
        elif isinstance(fn, Constant):
            callee = fn.hint or _value_text(fn.value)
        else:
            callee = "call"
        label = f"{node.debug.name} = {callee}" if node.debug.name else callee
        return f"{label}\nline {node.debug.line}" if node.debug.line > 0 else label

    def apply_edges(self, graph, node: Apply, target: str, uses, lines, indent) -> None:
        fn = node.fn
        if isinstance(fn, Constant) and isinstance(fn.value, FuncGraph):
            self.link(graph, target, fn.value)
        elif isinstance(fn, Constant) and isinstance(fn.value, Primitive):
            for sub in fn.value.subgraphs():
                self.link(graph, target, sub)
        elif not isinstance(fn, Constant):
            self.input_edge(graph, fn, target, "fn", uses, lines, indent)
        several = len(node.args) > 1
        for pos, arg in enumerate(node.args):
            self.input_edge(graph, arg, target, str(pos) if several else "", uses, lines, indent)

    def input_edge(self, graph, node: Node, target: str, label: str, uses, lines, indent):
        attrs = [f"label={_quote(label)}"] if label else []
        if isinstance(node, Constant):
            source = f"g{self.index[graph.uid]}_c{next(uses)}"
            text = self.constant_text(node)
            lines.append(f"{indent}{source} [shape=plaintext, label={_quote(text)}];")
            if isinstance(node.value, FuncGraph):
                self.link(graph, source, node.value)
        else:
            source = self.node_id(node)
            if node.graph is not graph:
                attrs.append("style=dashed")
        tail = f" [{', '.join(attrs)}]" if attrs else ""
        self.edges.append(f"  {source} -> {target}{tail};")

    def constant_text(self, node: Constant) -> str:
        value = node.value
        if isinstance(value, FuncGraph):
            return "@" + self.names[self.index[value.uid]]
        if isinstance(value, Primitive):
            return _prim_text(value)
        return node.hint or _value_text(value)

    def node_id(self, node: Node) -> str:
        """The dot id of a Parameter or Apply; a stub for one no drawn graph owns."""
        if id(node) not in self.ids:
            stub = f"fv{len(self.stubs)}"
            name = node.name if isinstance(node, Parameter) else node.debug.name or "value"
            label = _quote(f"free: {name}")
            self.stubs.append(f"  {stub} [shape=ellipse, style=dashed, label={label}];")
            self.ids[id(node)] = stub
        return self.ids[id(node)]

    def link(self, graph: FuncGraph, source: str, target: FuncGraph) -> None:
        """A bold edge from `source` (in `graph`) to `target`'s cluster."""
        k = self.index[target.uid]
        lhead = "" if self._inside(graph, target) else f", lhead=cluster_{k}"
        self.edges.append(f"  {source} -> g{k}_h [{_LINK}{lhead}];")


def _graphs_from(root: FuncGraph) -> list[FuncGraph]:
    """`root` and every graph it reaches, in first-use order."""
    found: list[FuncGraph] = []
    seen: set[int] = set()
    todo = [root]
    while todo:
        graph = todo.pop(0)
        if graph.uid in seen:
            continue
        seen.add(graph.uid)
        found.append(graph)
        for node in graph.used_nodes():
            value = node.value if isinstance(node, Constant) else None
            if isinstance(value, FuncGraph):
                todo.append(value)
            elif isinstance(value, Primitive):
                todo.extend(value.subgraphs())
    return found


def _graph_names(graphs: list[FuncGraph]) -> list[str]:
    """Graph names, numbered on a clash (`f`, `f.1`) in drawing order."""
    names: list[str] = []
    for graph in graphs:
        name, k = graph.name, 0
        while name in names:
            k += 1
            name = f"{graph.name}.{k}"
        names.append(name)
    return names


def to_dot(graph: FuncGraph) -> str:
    """The DOT text of `graph` and every graph it reaches (module docstring)."""
    return _Dot(graph).text()
