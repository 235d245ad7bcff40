"""`self.attr = value` inside a Cell's `construct` (or any method parsed with
`self` bound), as MindSpore allows.

Contract: `localize_self_attributes(fdef, self_name, bound_self, error)`
rewrites the method's tree before parsing. Every attribute `self.a` that the
method assigns (`self.a = v`, `self.a += v`, `self.a, b = ...`, in the
method's own body, not in a nested def) becomes the local variable
`_kt_self_a` everywhere in the method (nested defs and lambdas read it as a
closure variable); the body starts with `_kt_self_a = self.a` when the
object has the attribute at parse time. So a read after the assignment sees
the new value, through `if` and loops, and gradients flow through it as
through any local variable (MindSpore's graph mode cuts them there, with a
warning; its PyNative mode and ours do not).

Run as plain Python (`net(x)`), the assignment changes the object as Python
does. Under a transform the object is not written back: attributes are read
at transform time, like every attribute of a bound `self`. So an attribute
the method may read before assigning it (`self.count += 1`: state carried
from call to call, which MindSpore's graph mode writes back) is refused with
a KTransformError rather than silently reset each call; so is assigning a
Parameter (it changes through `ops.assign`) or a Cell attribute.
"""

from __future__ import annotations

import gast

from k_transform.frontend.desugar import exposed_names

PREFIX = "_kt_self_"


def _nested(node) -> bool:
    return isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda))


def _own_nodes(body):
    """The nodes of `body`, not descending into nested defs and lambdas."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if not _nested(node):
            stack.extend(reversed(list(gast.iter_child_nodes(node))))


def _is_self_attr(node, self_name: str) -> bool:
    return (
        isinstance(node, gast.Attribute)
        and isinstance(node.value, gast.Name)
        and node.value.id == self_name
    )


def assigned_self_attributes(fdef, self_name: str) -> list[str]:
    """The attributes of `self` the method's own body stores to, in order."""
    names: dict[str, None] = {}
    for node in _own_nodes(fdef.body):
        if _is_self_attr(node, self_name) and isinstance(node.ctx, gast.Store):
            names.setdefault(node.attr, None)
    return list(names)


class _Localize(gast.NodeTransformer):
    def __init__(self, self_name: str, attrs: set[str]):
        self.self_name, self.attrs = self_name, attrs

    def visit_Attribute(self, node):
        if _is_self_attr(node, self.self_name) and node.attr in self.attrs:
            name = gast.Name(
                id=PREFIX + node.attr, ctx=node.ctx, annotation=None, type_comment=None
            )
            return gast.copy_location(name, node)
        return self.generic_visit(node)


def localize_self_attributes(fdef, self_name: str, bound_self, error) -> None:
    """Rewrite `fdef` in place as the module docstring says; `error(what, node)`
    makes the KTransformError for a refused assignment."""
    attrs = assigned_self_attributes(fdef, self_name)
    if not attrs:
        return
    for node in _own_nodes(fdef.body):
        if _is_self_attr(node, self_name) and isinstance(node.ctx, gast.Store):
            current = getattr(bound_self, node.attr, None)
            if getattr(current, "__kt_parameter__", False):
                raise error(
                    f"assigning the Parameter `{self_name}.{node.attr}` inside the method; "
                    f"use ops.assign({self_name}.{node.attr}, value)",
                    node,
                )
            if hasattr(current, "construct"):
                raise error(f"assigning the Cell attribute `{self_name}.{node.attr}`", node)
    _Localize(self_name, set(attrs)).visit(fdef)
    carried = [a for a in attrs if PREFIX + a in exposed_names(fdef.body)[0]]
    if carried:
        node = next(
            n for n in gast.walk(fdef) if isinstance(n, gast.Name) and n.id == PREFIX + carried[0]
        )
        raise error(
            f"`{self_name}.{carried[0]}` is read before the method assigns it: a value carried "
            "from one call to the next is state, which k_transform does not write back to the "
            "object; keep it in a Parameter and update it with ops.assign",
            node,
        )
    first = fdef.body[0]
    prologue = []
    for attr in attrs:
        if hasattr(bound_self, attr):
            load = gast.Name(id=self_name, ctx=gast.Load(), annotation=None, type_comment=None)
            read = gast.Attribute(value=load, attr=attr, ctx=gast.Load())
            store = gast.Name(
                id=PREFIX + attr, ctx=gast.Store(), annotation=None, type_comment=None
            )
            stmt = gast.Assign(targets=[store], value=read, type_comment=None)
            for n in gast.walk(stmt):
                gast.copy_location(n, first)
            prologue.append(stmt)
    fdef.body[:0] = prologue
