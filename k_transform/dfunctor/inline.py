"""Inlining gradient rules into bprop graphs.

`inline(rule, args, target, debug)` copies the rule graph's nodes into
`target` with its parameters bound to `args`, simplifying as it goes:

- constant folding (`axis is None`, `2 - 1`), so static `if`s on a rule's
  attributes or constant inputs keep only the taken branch, inlined;
- calls of closed helper graphs (a `lambda` derivative, a shared helper) are
  inlined too, to a bounded depth;
- `(a, b)[0]` becomes `a`.

The result reads like hand-written backward code. A rule with closures over
its own nodes (rare) is called rather than copied.
"""

from __future__ import annotations

from k_transform.context import TRANSFORM
from k_transform.control.prims import Switch
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops.fold import fold, tuple_item

MAX_DEPTH = 8


def _has_free_variables(graph: FuncGraph) -> bool:
    # Rule graphs are complete when inlined and never change: whether a graph
    # reads free variables is asked once per graph (by its never-reused uid).
    reads_free = TRANSFORM.cache("inline.reads_free")
    if graph.uid not in reads_free:
        reads_free[graph.uid] = bool(graph.free_variables())
    return reads_free[graph.uid]


def inline(rule: FuncGraph, args: list[Node], target: FuncGraph, debug, depth: int = 0) -> Node:
    """The output node of `rule(*args)`, its body copied into `target`."""
    if depth > MAX_DEPTH or any(_has_free_variables(c) for c in rule.children()):
        return target.apply(Constant(rule, hint=rule.name), *args, debug=debug)
    mapping: dict[int, Node] = {id(p): a for p, a in zip(rule.parameters, args, strict=True)}
    for node in rule.nodes:
        inputs = [mapping.get(id(i), i) for i in node.inputs]
        mapping[id(node)] = _copy(inputs, target, debug, depth)
    return mapping.get(id(rule.output), rule.output)


def _copy(inputs: list[Node], target: FuncGraph, debug, depth: int) -> Node:
    fn, args = inputs[0], inputs[1:]
    value = fn.value if isinstance(fn, Constant) else None
    if isinstance(value, Switch) and isinstance(args[0], Constant):
        branch = args[1] if args[0].value else args[2]
        return inline(branch.value, args[3:], target, debug, depth + 1)
    if isinstance(value, FuncGraph) and not _has_free_variables(value):
        if len(value.parameters) == len(args):
            return inline(value, args, target, debug, depth + 1)
    folded = fold(value, args)
    if folded is not None:
        return folded
    if isinstance(value, prims.GetItem):
        item = tuple_item(args[0], args[1])
        if item is not None:
            return item
    return target.apply(*inputs, debug=debug)


def outputs(out: Node, n: int, target: FuncGraph, debug) -> list[Node]:
    """The `n` items of a rule's output tuple."""
    maker = out.fn.value if isinstance(out, Apply) and isinstance(out.fn, Constant) else None
    if isinstance(maker, prims.MakeTuple):
        return list(out.args)
    if isinstance(out, Constant) and isinstance(out.value, tuple):
        return [Constant(v) for v in out.value]
    get = Constant(prims.GetItem(), hint="getitem")
    return [target.apply(get, out, Constant(k), debug=debug) for k in range(n)]
