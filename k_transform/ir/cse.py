"""Common subexpression elimination: the pure nodes of a graph that compute
what an earlier node of the same graph computes.

`common_subexpressions(graph)` reads `graph` and changes nothing: it returns
`{id(duplicate): the earlier node}`, and code generation writes the earlier
node's name wherever the duplicate is read (`codegen.view`). Graphs are
shared (cached K-graphs are differentiated again), so the IR itself is never
rewritten.

Two nodes are merged when

- both are `Apply`s of the same graph (never across graphs: a nested graph
  may run more or fewer times than its parent, or not at all);
- their function is the same *pure* `Primitive` (equal class and
  attributes): not `effectful`, not `host`, reading no `kt.Parameter` (a
  parameter's value changes at an `Assign`), holding no graphs; calls of
  graphs and of function values are never merged;
- their inputs are the same: the same nodes (after merging earlier
  duplicates, so `a * b + c` twice merges as a whole), or constants of equal
  value and type (`2.0` is not `2`, `-0.0` is not `0.0`); FuncGraph,
  Parameter and other object constants only when they are the same object.
"""

from __future__ import annotations

from collections.abc import Callable

from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive
from k_transform.protocol import kt_attribute

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def common_subexpressions(graph: FuncGraph) -> dict[int, Apply]:
    """`{id(node): earlier node computing the same}` for the pure nodes of `graph`."""
    same: dict[int, Apply] = {}
    table = Subexpressions(lambda node: same.get(id(node), node))
    for node in graph.nodes:
        earlier = table.earlier(node)
        if earlier is not None:
            same[id(node)] = earlier
    return same


class Subexpressions:
    """The pure nodes of one graph seen so far, by what they compute.

    `earlier(node)`, asked of each node in program order, is the earlier node
    computing what `node` computes (None: `node` is the first, now recorded).
    `resolve(input)` is the node an input stands for (the earlier node of a
    duplicate), so that a duplicate's readers are duplicates too."""

    def __init__(self, resolve: Callable[[Node], Node]):
        self.resolve = resolve
        self.first: dict[tuple, Apply] = {}

    def earlier(self, node: Node) -> Apply | None:
        if not mergeable(node):
            return None
        key = (primitive_key(node.fn.value), *(_input_key(self.resolve(i)) for i in node.args))
        first = self.first.setdefault(key, node)
        return None if first is node else first


def mergeable(node: Node) -> bool:
    """Whether `node` is an Apply of a pure primitive on no graph and no
    `kt.Parameter` (see the module docstring)."""
    if not isinstance(node, Apply) or not isinstance(node.fn, Constant):
        return False
    prim = node.fn.value
    if not isinstance(prim, Primitive) or not pure_primitive(prim):
        return False
    return not any(isinstance(a, Constant) and _is_state(a.value) for a in node.args)


def pure_primitive(prim: Primitive) -> bool:
    """A primitive whose result depends only on its inputs and attributes."""
    return (
        getattr(prim, "effectful", False) is False
        and getattr(prim, "host", False) is False
        and not prim.graph_slots
        and not prim.parameters()
        and not prim.subgraphs()
    )


def _is_state(value) -> bool:
    """A value read when the code runs: a graph (a call may do anything) or a
    `kt.Parameter` (read through the current binding)."""
    return isinstance(value, FuncGraph) or kt_attribute(value, "__kt_parameter__", False) is True


def _input_key(node: Node) -> tuple:
    if isinstance(node, Constant):
        return ("value", value_key(node.value))
    return ("node", id(node))


def value_key(value) -> tuple:
    """A key equal for two constants exactly when they are the same value of
    the same type: scalars by type and `repr` (so `-0.0` differs from `0.0`),
    tuples item by item, primitives by equality, anything else by identity."""
    if type(value) in _SCALARS:
        return (type(value), repr(value))
    if type(value) is tuple:
        return (tuple, tuple(value_key(v) for v in value))
    if type(value) is slice:
        return (slice, value_key((value.start, value.stop, value.step)))
    if isinstance(value, Primitive):
        return primitive_key(value)
    return ("object", id(value))


def primitive_key(prim: Primitive) -> tuple:
    """Its class and attributes, each by `value_key` (so `Pow(2)` is not
    `Pow(2.0)`, though the two are equal as Python values)."""
    attrs = sorted((kv for kv in vars(prim).items() if kv[0] != "attrs"), key=lambda kv: kv[0])
    return (type(prim), tuple((k, value_key(v)) for k, v in attrs))


__all__ = [
    "Subexpressions",
    "common_subexpressions",
    "mergeable",
    "primitive_key",
    "pure_primitive",
    "value_key",
]
