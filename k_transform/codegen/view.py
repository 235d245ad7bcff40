"""The graphs as codegen writes them: the IR read through simplifications
that change no graph (graphs are shared: cached K-graphs are differentiated
again, and their source must not depend on what was printed before).

- Common subexpressions (`ir.cse`): a node computing what an earlier pure
  node of its graph computes is read as that node (`dout * x` once).
- Tuples taken apart and put back: `t[k]` of a tuple built as
  `(a_0, ..., a_n)` is `a_k`; `(t[0], ..., t[n-1])` of a tuple `t` of `n`
  items is `t`.
- A tuple's gradient from a gradient for each of its items is the tuple of
  them: `getitem_grad(t, 0, d)` of a 1-tuple is `(d,)`, `items_grad(t, (1,
  0), b, a)` of a pair is `(a, b)`: no zeros, no run-time call.

"A tuple" is a value known to be a Python tuple of known length when the
code runs (`shape`): built by `make_tuple`, returned by a graph called by
name or by a function value known to be such a graph (a bprop closure), the
item of such a tuple, or the result of a `switch` whose branches both give
one. The same facts give codegen the length of more tuples to unpack into
names (`arity`).

`CodeView.inputs(node)` are the inputs codegen reads for `node` (rewritten,
each the node whose name it writes), `emitted(node)` the Apply it writes for
it, `canon(node)` the node whose name stands for `node`.
"""

from __future__ import annotations

from k_transform.codegen.static import is_switch
from k_transform.ir.cse import Subexpressions
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import MakeTuple, Primitive

MAX_DEPTH = 32  # calls followed to find a result's shape


_TUPLE = Constant(MakeTuple(), hint="make_tuple")


class Shape:
    """What is known of a value: a tuple of `items` (each a Shape or None), or
    a function value that is one of `graphs`."""

    __slots__ = ("graphs", "items")

    def __init__(self, items: tuple | None = None, graphs: tuple = ()):
        self.items, self.graphs = items, graphs


def meet(a: Shape | None, b: Shape | None) -> Shape | None:
    """What is known of a value that is either `a` or `b`."""
    if a is None or b is None:
        return None
    if a.items is not None and b.items is not None and len(a.items) == len(b.items):
        return Shape(tuple(meet(x, y) for x, y in zip(a.items, b.items, strict=True)))
    if a.graphs and b.graphs:
        return Shape(graphs=(*a.graphs, *(g for g in b.graphs if g not in a.graphs)))
    return None


def prim_name(node: Node) -> str:
    """The name of the k_transform primitive `node` applies ('' for other
    calls, and for users' primitives, whatever their names)."""
    value = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    if isinstance(value, Primitive) and _OWN.setdefault(
        type(value), type(value).__module__.startswith("k_transform.")
    ):
        return value.name
    return ""


_OWN: dict[type, bool] = {}  # primitive class -> whether k_transform defines it


def constant_index(node: Node, n: int) -> int | None:
    """`node` as an index into a tuple of `n` items (negative ones counted
    from the end), or None."""
    value = node.value if isinstance(node, Constant) else None
    if type(value) is not int or not -n <= value < n:
        return None
    return value % n


class CodeView:
    """The simplified reading of every graph of one module (see the module
    docstring); each graph is read once, when a node of it is first asked for."""

    def __init__(self):
        self.same: dict[int, Node] = {}  # id(node) -> the node whose name it gets
        self.rewrites: dict[int, Apply] = {}  # id(node) -> the Apply written for it
        self._read: set[int] = set()  # graphs whose nodes are read (or being read)
        self._done: set[int] = set()  # graphs read
        self._inputs: dict[int, list[Node]] = {}  # id(node) -> inputs(node), once read
        self._shapes: dict[int, Shape | None] = {}
        self._visiting: set[int] = set()

    # -- what codegen reads --------------------------------------------------------------
    def canon(self, node: Node) -> Node:
        if isinstance(node, Apply):
            if node.graph.uid not in self._read:
                self._read_graph(node.graph)
            return self.same.get(id(node), node)
        return node

    def emitted(self, node: Apply) -> Apply:
        if node.graph.uid not in self._read:
            self._read_graph(node.graph)
        return self.rewrites.get(id(node), node)

    def inputs(self, node: Apply) -> list[Node]:
        known = self._inputs.get(id(node))
        if known is None:
            known = [self.canon(i) for i in self.emitted(node).inputs]
            if node.graph.uid in self._done:  # final: no alias is added later
                self._inputs[id(node)] = known
        return known

    def args(self, node: Apply) -> list[Node]:
        return self.inputs(node)[1:]

    def is_alias(self, node: Node) -> bool:
        """Whether `node` is written as another node (never computed itself)."""
        return self.canon(node) is not node

    def arity(self, node: Apply) -> int:
        """The length of the tuple `node` is (-1: a tuple of unknown length,
        0: not known to be a tuple)."""
        shape = self.shape(node)
        if shape is not None and shape.items is not None:
            return len(shape.items)
        prim = node.fn.value if isinstance(node.fn, Constant) else None
        return node.tuple_arity or (
            prim.result_arity(node.args) if isinstance(prim, Primitive) else 0
        )

    # -- simplifications ---------------------------------------------------------------
    def _read_graph(self, graph: FuncGraph) -> None:
        if graph.uid in self._read:
            return
        self._read.add(graph.uid)
        table = Subexpressions(self.canon)  # inputs read as their earlier twins
        for node in graph.nodes:
            alias = self._item_of_tuple(node) or self._rebuilt_tuple(node)
            alias = alias or table.earlier(node)
            if alias is not None:
                self.same[id(node)] = self.canon(alias)
                continue
            rewrite = self._tuple_grad(node)
            if rewrite is not None:
                self.rewrites[id(node)] = rewrite
        self._done.add(graph.uid)

    def _item_of_tuple(self, node: Apply) -> Node | None:
        """`a_k` for `(a_0, ..., a_n)[k]`."""
        if prim_name(node) != "getitem":
            return None
        built = self.canon(node.args[0])
        if prim_name(built) != "make_tuple":
            return None
        k = constant_index(node.args[1], len(built.args))
        return None if k is None else built.args[k]

    def _rebuilt_tuple(self, node: Apply) -> Node | None:
        """`t` for `(t[0], ..., t[n-1])`, `t` a tuple of `n` items."""
        if prim_name(node) != "make_tuple" or not node.args:
            return None
        source = None
        for k, item in enumerate(self.canon(a) for a in node.args):
            if prim_name(item) != "getitem":
                return None
            tup = self.canon(item.args[0])
            if (source is not None and tup is not source) or constant_index(
                item.args[1], len(node.args)
            ) != k:
                return None
            source = tup
        shape = self.shape(source)
        if shape is None or shape.items is None or len(shape.items) != len(node.args):
            return None
        return source

    def _tuple_grad(self, node: Apply) -> Apply | None:
        """`(d_0, ..., d_n)` for the gradient of a tuple of `n` items given
        one gradient per item (`getitem_grad` of a 1-tuple, `items_grad`
        reading each item once)."""
        name = prim_name(node)
        if name == "GetItemGrad":
            x, index, d = node.args
            indices, douts = (index.value if isinstance(index, Constant) else None,), [d]
        elif name == "items_grad":
            x, douts = node.args[0], node.args[1:]
            indices = node.fn.value.indices
        else:
            return None
        shape = self.shape(x)
        if shape is None or shape.items is None or len(shape.items) != len(douts):
            return None
        n = len(douts)
        order = [constant_index(Constant(i), n) for i in indices]
        if sorted(k for k in order if k is not None) != list(range(n)) or None in order:
            return None
        by_item = [douts[order.index(k)] for k in range(n)]
        return Apply(node.graph, [_TUPLE, *by_item], node.debug)

    # -- shapes ------------------------------------------------------------------------
    def shape(self, node: Node) -> Shape | None:
        """What is known of `node`'s value (see the module docstring)."""
        if isinstance(node, Constant):
            return _value_shape(node.value)
        if not isinstance(node, Apply):
            return None
        node = self.canon(node)
        if id(node) in self._shapes:
            return self._shapes[id(node)]
        if id(node) in self._visiting or len(self._visiting) > MAX_DEPTH:
            return None  # recursion
        self._visiting.add(id(node))
        try:
            shape = self._apply_shape(self.emitted(node))
        finally:
            self._visiting.discard(id(node))
        self._shapes[id(node)] = shape
        return shape

    def _apply_shape(self, node: Apply) -> Shape | None:
        name = prim_name(node)
        args = [self.canon(a) for a in node.args]
        if name == "make_tuple":
            return Shape(tuple(self.shape(a) for a in args))
        if name == "getitem":
            tup = self.shape(args[0])
            if tup is None or tup.items is None:
                return None
            k = constant_index(args[1], len(tup.items))
            return None if k is None else tup.items[k]
        if is_switch(node):
            branches = [self._result_shape(a.value) for a in node.args[1:3]]
            return meet(*branches)
        fn = self.shape(self.canon(node.fn))
        if fn is None or not fn.graphs:
            return None
        results = [self._result_shape(g) for g in fn.graphs]
        shape = results[0]
        for other in results[1:]:
            shape = meet(shape, other)
        return shape

    def _result_shape(self, graph: FuncGraph) -> Shape | None:
        return self.shape(graph.output)


def _value_shape(value) -> Shape | None:
    if type(value) is tuple:
        return Shape(tuple(_value_shape(v) for v in value))
    if isinstance(value, FuncGraph):
        return Shape(graphs=(value,))
    return None


__all__ = ["CodeView", "Shape"]
