"""Static facts: values that are plain Python values whenever the code runs.

A rule's `if x.ndim == 1:` is parsed into a `switch` like any `if`, since
shapes are unknown when a graph is built. But its condition is known when the
code runs, also under `jax.jit` (shapes, ranks and dtypes are never traced),
so codegen writes such a `switch` as a Python `if` statement with the taken
branch's code inline, not as a `_ctl.switch(...)` call of two functions.

A node is static when it is
- a constant that is no array (None, a bool, number, string, dtype, tuple);
- the result of a primitive whose `static_when` is "always" (`x.ndim`,
  `jnp.shape(x)`, `len(xs)`, `a is None`), or "inputs" (Python operators,
  tuples, indexing, `not`) with every input static;
- a parameter of a branch written inline whose argument is static;
- a `switch` with a static condition whose branches return static values
  (the `and`/`or` of static conditions).
"""

from __future__ import annotations

from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ir.primitive import Primitive

_PLAIN = (type(None), bool, int, float, complex, str, slice)


def is_plain(value) -> bool:
    """A Python value that stays concrete under jax.jit (no array)."""
    if isinstance(value, tuple):
        return all(is_plain(v) for v in value)
    return isinstance(value, _PLAIN) or type(value).__name__ == "dtype"


def is_switch(node: Node) -> bool:
    """`switch(cond, true_graph, false_graph, *args)` with both branches graphs."""
    prim = _primitive(node)
    return (
        prim is not None
        and prim.name == "switch"
        and getattr(prim, "graph_slots", ()) == (1, 2)
        and all(isinstance(a, Constant) and isinstance(a.value, FuncGraph) for a in node.args[1:3])
    )


class StaticFacts:
    """Which nodes are static (see the module docstring); `bound` maps the
    parameters of branches written inline to whether their argument is."""

    def __init__(self):
        self.bound: dict[int, bool] = {}

    def is_static(self, node: Node, depth: int = 0) -> bool:
        if depth > 64:  # a long chain: not worth proving
            return False
        if isinstance(node, Constant):
            return is_plain(node.value)
        if isinstance(node, Parameter):
            return self.bound.get(id(node), False)
        if not isinstance(node, Apply):
            return False
        if is_switch(node):
            return self.static_switch_result(node, depth)
        when = getattr(_primitive(node), "static_when", "")
        if when == "always":
            return True
        return when == "inputs" and all(self.is_static(a, depth + 1) for a in node.args)

    def static_switch(self, node: Node) -> bool:
        """A switch whose condition is static: written as a Python `if`."""
        return is_switch(node) and self.is_static(node.args[0])

    def static_switch_result(self, node: Apply, depth: int) -> bool:
        if not self.is_static(node.args[0], depth + 1):
            return False
        args = [self.is_static(a, depth + 1) for a in node.args[3:]]
        for branch in (node.args[1].value, node.args[2].value):
            if len(branch.parameters) != len(args):
                return False
            saved = {id(p): self.bound.get(id(p)) for p in branch.parameters}
            self.bound.update({id(p): s for p, s in zip(branch.parameters, args, strict=True)})
            try:
                if not self.is_static(branch.output, depth + 1):
                    return False
            finally:
                for key, was in saved.items():
                    if was is None:
                        self.bound.pop(key, None)
                    else:
                        self.bound[key] = was
        return True


def _primitive(node: Node) -> Primitive | None:
    if isinstance(node, Apply) and isinstance(node.fn, Constant):
        value = node.fn.value
        return value if isinstance(value, Primitive) else None
    return None
