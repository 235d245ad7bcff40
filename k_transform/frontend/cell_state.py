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
does. Under a transform the final value is written back after the call, as
MindSpore's graph mode does: before each `return` of the method (and at its
end) the rewrite adds `self._kt_assign(self._kt_slot_a, _kt_self_a)`, an
`ops.Assign` of the value to a `runtime.state.AttrSlot` that sets the
attribute when the call's state updates are written back. (An attribute the
object lacks at parse time starts as None, so a call that does not assign it
leaves it None.) An attribute the method may read before assigning it
(`self.count += 1`: state carried from call to call) is refused with a
KTransformError, since the value would be read at transform time; so is
assigning a Cell attribute.

Rebinding a Parameter attribute (`self.p = self.p + 1`, `self.p += g`) is
an `ops.Assign` of the Parameter, as in MindSpore (both modes, and under
`GradOperation`): the statement becomes `self._kt_assign(self.p, value)`, so
later reads see the new value and the state is written back after the call
(`ops.state`); a Parameter in a tuple or loop target is refused.
"""

from __future__ import annotations

import ast

import gast

from k_transform.frontend.desugar import exposed_names
from k_transform.ops.state import Assign
from k_transform.runtime.state import AttrSlot

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
    params = {a for a in attrs if getattr(getattr(bound_self, a, None), "__kt_parameter__", False)}
    if params:
        object.__setattr__(bound_self, "_kt_assign", Assign())
        _AssignParameters(self_name, params, error).visit(fdef)
        attrs = [a for a in attrs if a not in params]
        if not attrs:
            return
    for node in _own_nodes(fdef.body):
        if _is_self_attr(node, self_name) and isinstance(node.ctx, gast.Store):
            if hasattr(getattr(bound_self, node.attr, None), "construct"):
                raise error(f"assigning the Cell attribute `{self_name}.{node.attr}`", node)
    _Localize(self_name, set(attrs)).visit(fdef)
    carried = [a for a in attrs if PREFIX + a in exposed_names(fdef.body)[0]]
    if carried:
        node = next(
            n for n in gast.walk(fdef) if isinstance(n, gast.Name) and n.id == PREFIX + carried[0]
        )
        if hasattr(type(bound_self), "construct"):  # a Cell
            advice = "keep it in a Parameter and update it with ops.assign"
        else:  # a plain object's counter, a running record
            advice = (
                f"a count or record kept on the {type(bound_self).__name__} object: keep it "
                "outside the function transformed (around the call of the gradient function), "
                "or make the object a Cell holding a Parameter updated with ops.assign"
            )
        raise error(
            f"`{self_name}.{carried[0]}` is read before the method assigns it: a value carried "
            "from one call to the next is state, which k_transform does not write back to the "
            f"object; {advice}",
            node,
        )
    first = fdef.body[0]
    prologue = [_stmt(f"{PREFIX}{attr} = {self_name}.{attr}", first) for attr in attrs]
    for attr in attrs:
        if not hasattr(bound_self, attr):
            object.__setattr__(bound_self, attr, None)
        if not isinstance(bound_self.__dict__.get(f"_kt_slot_{attr}"), AttrSlot):
            object.__setattr__(bound_self, f"_kt_slot_{attr}", AttrSlot(bound_self, attr))
    object.__setattr__(bound_self, "_kt_assign", Assign())
    fdef.body[:0] = prologue
    _WriteBack(self_name, attrs).visit(fdef)
    if not isinstance(fdef.body[-1], gast.Return):
        fdef.body.extend(_write_back(self_name, attrs, fdef.body[-1]))


def _stmt(text: str, where):
    """The statement `text` as gast, located at `where`."""
    stmt = gast.ast_to_gast(ast.parse(text)).body[0]
    for n in gast.walk(stmt):
        gast.copy_location(n, where)
    return stmt


def _write_back(self_name: str, attrs: list[str], where) -> list:
    return [
        _stmt(f"{self_name}._kt_assign({self_name}._kt_slot_{a}, {PREFIX}{a})", where)
        for a in attrs
    ]


class _OwnBody(gast.NodeTransformer):
    """Visits the method's own statements: not those of a nested def or lambda."""

    def visit_FunctionDef(self, node):
        if getattr(self, "_inside", False):
            return node  # a nested def's statements are its own
        self._inside = True
        return self.generic_visit(node)

    def visit_Lambda(self, node):
        return node


class _AssignParameters(_OwnBody):
    """`self.p = v` -> `self._kt_assign(self.p, v)`; `self.p op= v` ->
    `self._kt_assign(self.p, self.p op v)` (the method's own statements)."""

    def __init__(self, self_name: str, params: set[str], error):
        self.self_name, self.params, self.error = self_name, params, error

    def _param(self, target) -> bool:
        return _is_self_attr(target, self.self_name) and target.attr in self.params

    def _assign(self, target, value, where):
        call = _stmt(f"{self.self_name}._kt_assign({self.self_name}.{target.attr}, None)", where)
        call.value.args[1] = value
        return call

    def visit_Assign(self, node):
        if len(node.targets) == 1 and self._param(node.targets[0]):
            return self._assign(node.targets[0], node.value, node)
        return self.generic_visit(node)

    def visit_AugAssign(self, node):
        if not self._param(node.target):
            return self.generic_visit(node)
        read = gast.Attribute(
            value=gast.Name(id=self.self_name, ctx=gast.Load(), annotation=None, type_comment=None),
            attr=node.target.attr,
            ctx=gast.Load(),
        )
        value = gast.BinOp(left=gast.copy_location(read, node), op=node.op, right=node.value)
        return self._assign(node.target, gast.copy_location(value, node), node)

    def visit_Attribute(self, node):
        if self._param(node) and isinstance(node.ctx, gast.Store):
            raise self.error(
                f"assigning the Parameter `{self.self_name}.{node.attr}` here (a tuple, loop or "
                f"`with` target); write `{self.self_name}.{node.attr} = value` alone",
                node,
            )
        return self.generic_visit(node)


class _WriteBack(_OwnBody):
    """`return e` -> `_kt_ret = e`, the write-backs, `return _kt_ret` (not in nested defs)."""

    def __init__(self, self_name: str, attrs: list[str]):
        self.self_name, self.attrs = self_name, attrs

    def visit_Return(self, node):
        value = node.value or gast.Constant(value=None, kind=None)
        keep = _stmt(f"{PREFIX}ret = None", node)
        keep.value = value
        done = _stmt(f"return {PREFIX}ret", node)
        return [keep, *_write_back(self.self_name, self.attrs, node), done]
