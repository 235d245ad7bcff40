"""Closures: Python's late binding, definition-time defaults and `nonlocal`.

A nested `def` or `lambda` is a `ClosureSite`: the statement, the builder of
the scope it was defined in, the enclosing variables its body reads, and its
default values (evaluated where the def statement runs, as Python does).

Python closures read an enclosing variable's value when they are *called*. A
site's graph is therefore built for a set of bindings (its `key`: the nodes
bound to the names it reads, transitively through other closures), and the
parser rebuilds it over the current bindings wherever a closure value is
used: called, passed to a call, returned, or read inside a branch or a loop
body (`GraphBuilder.current`). A closure that leaves a traced loop body or a
branch cannot be rebuilt later; it is refused if a variable it reads has been
rebound by the time it is called.

`nonlocal`: a nested def that rebinds enclosing variables returns
`(result, *new_values)`; each direct call in the defining function binds the
new values there. `thread_nonlocal_calls` checks that such a closure is only
ever called directly (never stored, passed, returned or called from another
closure) and marks the statements that call it as assigning the names it
rebinds, so that branches and loops carry them.
"""

from __future__ import annotations

import gast

from k_transform.ir.desugar import loaded_names

_SCOPES = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)
_DEFERRED = (gast.IfExp, gast.BoolOp, gast.Lambda, gast.ListComp, gast.GeneratorExp)
_SIMPLE = (gast.Expr, gast.Assign, gast.AugAssign, gast.AnnAssign, gast.Return, gast.Assert)


class ClosureSite:
    """One execution of a nested def (or lambda) statement."""

    def __init__(self, fdef, name: str, scope, defaults: dict, writes: tuple[str, ...]):
        self.fdef = fdef
        self.name = name
        self.scope = scope  # the GraphBuilder the def statement ran in
        self.defaults = defaults  # parameter name -> Node, evaluated at the def
        self.writes = writes  # the enclosing variables it rebinds (`nonlocal`)
        params = {a.id for a in fdef.args.args}
        body_reads = loaded_names(gast.Module(body=fdef.body, type_ignores=[]))
        self.reads = [v for v in body_reads if v not in params or v in writes]
        self.graphs: dict[tuple, object] = {}  # key -> Constant of the built graph


def nonlocal_names(fdef) -> tuple[str, ...]:
    """The names a function declares `nonlocal` (not in its nested functions)."""
    names: dict[str, None] = {}
    for n in _walk_scope_body(fdef.body):
        if isinstance(n, gast.Nonlocal):
            names.update(dict.fromkeys(n.names))
    return tuple(names)


def thread_nonlocal_calls(fdef, error) -> dict[str, tuple[str, ...]]:
    """Checks and marks the calls of `fdef`'s nonlocal-writing nested defs.

    Returns {closure name: names it rebinds}. After each statement that calls
    such a closure, `name = name` assignments are inserted for the names it
    rebinds: the value itself is bound at the call, the assignment only makes
    the statement visibly assign them (branch outputs, loop carries).
    `error(message, node)` makes the KTransformError for a refused use.
    """
    writers = {}
    for n in _walk_scope_body(fdef.body):
        if isinstance(n, gast.FunctionDef) and nonlocal_names(n):
            writers[n.name] = nonlocal_names(n)
    if not writers:
        return writers
    _check_direct_calls(fdef, writers, error)
    fdef.body = _mark_block(fdef.body, writers, error)
    return writers


def _check_direct_calls(fdef, writers: dict, error) -> None:
    called = set()
    for n in _walk_scope_body(fdef.body):
        if isinstance(n, gast.Call) and isinstance(n.func, gast.Name):
            called.add(id(n.func))
    for node in gast.walk(gast.Module(body=fdef.body, type_ignores=[])):
        if isinstance(node, _SCOPES):
            for inner in gast.walk(node):
                if isinstance(inner, gast.Name) and inner.id in writers and inner is not node:
                    if not (isinstance(node, gast.FunctionDef) and node.name == inner.id):
                        raise error(
                            _escape_message(inner.id, "used inside another function"), inner
                        )
        if isinstance(node, gast.Name) and node.id in writers and isinstance(node.ctx, gast.Load):
            if id(node) not in called:
                raise error(_escape_message(node.id, "used other than by a direct call"), node)


def _escape_message(name: str, how: str) -> str:
    return (
        f"the closure {name!r} rebinds enclosing variables (`nonlocal`) and is {how}; "
        "k_transform threads `nonlocal` updates only through direct calls in the "
        "function that defines it"
    )


def _mark_block(stmts, writers: dict, error) -> list:
    out = []
    for s in stmts:
        for field in ("body", "orelse"):
            if isinstance(s, (gast.If, gast.For, gast.While)) and getattr(s, field, None):
                setattr(s, field, _mark_block(getattr(s, field), writers, error))
        out.append(s)
        names = _called_writes(s, writers, error)
        for v in names:
            load, store = (
                gast.Name(v, gast.Load(), None, None),
                gast.Name(v, gast.Store(), None, None),
            )
            out.append(gast.copy_location(gast.Assign(targets=[store], value=load), s))
    return out


def _called_writes(s, writers: dict, error) -> list[str]:
    """Names rebound by the writer calls in simple statement `s`."""
    if isinstance(s, (gast.If, gast.For, gast.While)):
        heads = [s.test] if not isinstance(s, gast.For) else [s.iter]
        for h in heads:
            for n in gast.walk(h):
                if isinstance(n, gast.Name) and n.id in writers:
                    raise error(_escape_message(n.id, "called in a loop or `if` header"), n)
        return []
    if not isinstance(s, _SIMPLE):
        return []
    names: dict[str, None] = {}
    for n in _walk_deferred(s, writers, error):
        if isinstance(n, gast.Call) and isinstance(n.func, gast.Name) and n.func.id in writers:
            names.update(dict.fromkeys(writers[n.func.id]))
    return [] if isinstance(s, gast.Return) else list(names)


def _walk_deferred(s, writers, error):
    todo = [s]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, _DEFERRED):
            for inner in gast.walk(n):
                if isinstance(inner, gast.Name) and inner.id in writers:
                    raise error(
                        _escape_message(inner.id, "called inside a conditional expression"), inner
                    )
            continue
        todo.extend(gast.iter_child_nodes(n))


def _walk_scope_body(stmts):
    """Nodes of `stmts`; nested functions are yielded, not entered."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, _SCOPES):
            continue
        todo.extend(gast.iter_child_nodes(n))
