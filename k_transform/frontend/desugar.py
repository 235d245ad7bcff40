"""Lowering of jumps (`break`, `continue`, `return`) before IR construction.

After `lower_jumps(fdef)` a function body has only structured control flow:

- Every path of the function ends in `return` (an implicit `return None` is
  made explicit). An `if` whose branch returns receives the statements that
  followed it in its other branch (the continuation), so each `if` either
  contains no `return` or returns on every path: a *tail if*.
- `continue` ends its loop body: the rest of the body moves into the
  non-continuing branch of the `if` around it.
- `break` sets a flag `_kt_breakN = True`. A `while` test becomes
  `not _kt_breakN and test`. A `for` (over a range or a sequence) keeps its
  structure and guards its body with `if not _kt_breakN`; the flag's name is
  left on the `For` node as `break_flag`, so that the loop stops where Python
  stops: the parser unrolling a short static loop stops at a flag it knows to
  be true, and the run time (`for_range`/`for_each` with `until=`) at a flag
  whose value is concrete. Only where the flag is traced do the iterations
  after it run (doing nothing), unrolled or under `lax`. So the index of a
  `for` over a static range stays a Python int wherever Python's iterations
  run (`x[:i]`, `range(i)`, `lst[i]`, `jnp.zeros(i)`, `f"{i}"`), as it does
  in a loop without a jump (`control.policy` unrolls a loop whose body needs
  it).
- `return v` inside a loop sets `_kt_ret = v`, `_kt_has_ret = True` and breaks;
  after the loop `if _kt_has_ret: return _kt_ret` continues the lowering.

The parser resolves names starting with `_kt_` that are not assigned to the
helpers in `SPECIAL_NAMES`.

Helpers at the end (`assigned_names`, `loaded_names`, `exposed_names`) are the
liveness facts the parser uses to choose the outputs of branches and the
carried variables of loops.
"""

from __future__ import annotations

import copy
from collections import Counter

import gast

from k_transform.frontend.effects import IN_PLACE_METHODS, LIST_MUTATORS, MUTATORS

SPECIAL_NAMES = ("_kt_undefined",)


def _name(id_: str, ctx=None) -> gast.Name:
    return gast.Name(id=id_, ctx=ctx or gast.Load(), annotation=None, type_comment=None)


def _assign(target: str, value: gast.expr, at: gast.AST) -> gast.Assign:
    node = gast.Assign(targets=[_name(target, gast.Store())], value=value, type_comment=None)
    return _located(node, at)


def _located(node, at):
    """`node` with the source position of `at` wherever it has none."""
    for n in gast.walk(node):
        if getattr(n, "lineno", None) is None and hasattr(at, "lineno"):
            gast.copy_location(n, at)
    return node


def _const(value) -> gast.Constant:
    return gast.Constant(value=value, kind=None)


class _Loop:
    def __init__(self, brk: str | None):
        self.brk = brk


class JumpLowering:
    """Rewrites one function body; see the module docstring."""

    def __init__(self, error):
        self.error = error  # (construct, node) -> KTransformError
        self.counter = 0
        self.uses_return_flag = False

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"_kt_{stem}{self.counter}"

    def lower_function(self, fdef) -> None:
        body = list(fdef.body)
        if not body or not _always_returns(body):
            body.append(gast.copy_location(gast.Return(value=None), body[-1] if body else fdef))
        body = self.lower_block(body, None)
        if self.uses_return_flag:
            init = [
                _assign("_kt_has_ret", _const(False), fdef),
                _assign("_kt_ret", _name("_kt_undefined"), fdef),
            ]
            body = init + body
        fdef.body = body

    def lower_block(self, stmts: list, loop: _Loop | None) -> list:
        out: list = []
        todo = list(stmts)
        while todo:
            s, rest = todo[0], todo[1:]
            if isinstance(s, gast.Break):
                out.append(_assign(loop.brk, _const(True), s))
                return out
            if isinstance(s, gast.Continue):
                return out
            if isinstance(s, gast.Return):
                if loop is not None:
                    return out + self._return_in_loop(s, loop)
                return out + [s]
            if isinstance(s, gast.If) and _has_jump(s, loop is not None):
                s.body = self.lower_block(s.body + copy.deepcopy(rest), loop)
                s.orelse = self.lower_block(s.orelse + copy.deepcopy(rest), loop)
                return out + [s]
            if isinstance(s, gast.If):  # no jump at this level: lower loops inside
                s.body = self.lower_block(s.body, loop)
                s.orelse = self.lower_block(s.orelse, loop)
                out.append(s)
                todo = rest
                continue
            if isinstance(s, (gast.While, gast.For)):
                lowered = self.lower_loop(s)
                if _is_ret_check(lowered[-1]):
                    # `if _kt_has_ret: return _kt_ret` is lowered like user code.
                    out.extend(lowered[:-1])
                    todo = [lowered[-1], *rest]
                    continue
                out.extend(lowered)
            else:
                out.append(s)
            todo = rest
        return out

    def _return_in_loop(self, s: gast.Return, loop: _Loop) -> list:
        self.uses_return_flag = True
        value = s.value if s.value is not None else _const(None)
        stmts = []
        if not (isinstance(value, gast.Name) and value.id == "_kt_ret"):
            stmts.append(_assign("_kt_ret", value, s))
        stmts.append(_assign("_kt_has_ret", _const(True), s))
        stmts.append(_assign(loop.brk, _const(True), s))
        return stmts

    def lower_loop(self, s) -> list:
        """The loop as jump-free statements, plus `if _kt_has_ret: return ...`."""
        if (
            isinstance(s, gast.While)
            and not s.orelse
            and _contains([s.test], (gast.NamedExpr,), True)
        ):
            # `while (n := n - 1) > 0:` binds `n` for the body and after the loop:
            # the test moves into the body, `while True: if not test: break`.
            stop = gast.If(
                test=gast.UnaryOp(op=gast.Not(), operand=s.test), body=[gast.Break()], orelse=[]
            )
            s.body = [_located(stop, s.test), *s.body]
            s.test = _located(_const(True), s)
        has_break = _contains(s.body, (gast.Break,), into_loops=False) or _contains(
            s.body, (gast.Return,), into_loops=True
        )
        has_return = _contains(s.body, (gast.Return,), into_loops=True)
        if s.orelse:
            raise self.error(f"`{type(s).__name__.lower()} ... else`", s)
        brk = self.fresh("break") if has_break else None
        loop = _Loop(brk)
        pre: list = []
        guard = brk is not None and isinstance(s, gast.For)
        if brk is not None:
            pre.append(_assign(brk, _const(False), s))
            if not guard:
                not_brk = gast.UnaryOp(op=gast.Not(), operand=_name(brk))
                s.test = _located(gast.BoolOp(op=gast.And(), values=[not_brk, s.test]), s)
        s.body = self.lower_block(s.body, loop) or [gast.copy_location(gast.Pass(), s)]
        if guard:
            # A `for` keeps its structure (its target stays what it iterates:
            # a Python int over a static range): an iteration after the break
            # does nothing, and the loop stops at a flag known to be set
            # (`break_flag`, see the module docstring).
            not_brk = gast.UnaryOp(op=gast.Not(), operand=_name(brk))
            skip = gast.If(test=_located(not_brk, s), body=s.body, orelse=[])
            s.body = [_located(skip, s)]
            s.break_flag = brk
        post = []
        if has_return:
            check = gast.If(
                test=_name("_kt_has_ret"),
                body=[gast.copy_location(gast.Return(value=_name("_kt_ret")), s)],
                orelse=[],
            )
            post.append(_located(check, s))
        return [*pre, s, *post]


def _is_ret_check(s) -> bool:
    return isinstance(s, gast.If) and isinstance(s.test, gast.Name) and s.test.id == "_kt_has_ret"


def _always_returns(stmts) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, gast.Return):
        return True
    if isinstance(last, gast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    return False


def _has_jump(s, in_loop: bool) -> bool:
    if _contains([s], (gast.Return,), into_loops=True):
        return True
    return in_loop and _contains([s], (gast.Break, gast.Continue), into_loops=False)


FUNCTION_SCOPES = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)
_SCOPES = (
    *FUNCTION_SCOPES,
    gast.ListComp,  # comprehensions have their own scope (Python 3)
    gast.SetComp,
    gast.DictComp,
    gast.GeneratorExp,
)


def _contains(stmts, kinds, into_loops: bool) -> bool:
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, kinds):
            return True
        if isinstance(node, _SCOPES):
            continue
        for child in gast.iter_child_nodes(node):
            if not into_loops and isinstance(child, (gast.While, gast.For)):
                continue
            todo.append(child)
    return False


# -- liveness facts ----------------------------------------------------------
def walk_scope(roots, stop=_SCOPES, enter_roots: bool = False):
    """Nodes of `roots`; nested scopes (`stop`: functions, classes and
    comprehensions by default) are yielded, not entered (a root itself is
    entered with `enter_roots`)."""
    todo = [(n, True) for n in roots]
    while todo:
        n, is_root = todo.pop()
        yield n
        if isinstance(n, stop) and not (is_root and enter_roots):
            continue
        todo.extend((c, False) for c in gast.iter_child_nodes(n))


def _walk_scope(node):
    return walk_scope([node])


# Methods that mutate their receiver (`frontend.effects`): the parser makes
# the list methods functional (it rebinds the receiver), and a plain dict's
# `update`; the others are refused.


_LIST_AND_ARRAY = (*LIST_MUTATORS, *IN_PLACE_METHODS)


def mutation_base(node) -> gast.Name | None:
    """The variable a mutation writes: `a` of `a[i] = v`, `a[i][j] = v` and
    `a.append(v)`; None for other nodes."""
    if isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Store):
        while isinstance(node, gast.Subscript):
            node = node.value
        return node if isinstance(node, gast.Name) else None
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute):
        receiver = node.func.value
        if node.func.attr in MUTATORS and isinstance(receiver, gast.Name):
            # `self.update(...)`: a method of the object, not a dict's
            own = receiver.id == "self" and node.func.attr not in _LIST_AND_ARRAY
            return None if own else receiver
    return None


def assigned_names(stmts, mutations: bool = True) -> list[str]:
    """Names stored by `stmts` (not inside nested functions), first-store order.
    With `mutations`, a mutated variable (`a[i] = v`, `a.append(v)`) counts as
    stored (it may also be a module: `np.sort(x)`; callers keep local names)."""
    seen: dict[str, None] = {}
    for s in stmts:
        for n in _walk_scope(s):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                seen.setdefault(n.id, None)
            elif mutations and mutation_base(n) is not None:
                seen.setdefault(mutation_base(n).id, None)
            elif isinstance(n, (gast.FunctionDef, gast.ClassDef)):
                seen.setdefault(n.name, None)
        if isinstance(s, (gast.FunctionDef, gast.ClassDef)):
            seen.setdefault(s.name, None)
    return list(seen)


def loaded_names(node) -> Counter:
    """How often each name is read in `node`, nested functions included."""
    counts: Counter = Counter()
    for n in gast.walk(node):
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
            counts[n.id] += 1
        elif isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name):
            counts[n.target.id] += 1
    return counts


def exposed_names(stmts, assigned: frozenset = frozenset()) -> tuple[set, set]:
    """(names read before being assigned in `stmts`, names surely assigned)."""
    done = set(assigned)
    exposed: set = set()
    for s in stmts:
        if isinstance(s, gast.If):
            exposed |= set(loaded_names(s.test)) - done
            e1, a1 = exposed_names(s.body, frozenset(done))
            e2, a2 = exposed_names(s.orelse, frozenset(done))
            exposed |= e1 | e2
            done |= a1 & a2
        elif isinstance(s, (gast.While, gast.For)):
            head = s.test if isinstance(s, gast.While) else s.iter
            exposed |= set(loaded_names(head)) - done
            inner = done | (set(assigned_names([s.target])) if isinstance(s, gast.For) else set())
            e, _ = exposed_names(s.body, frozenset(inner))
            exposed |= e
        else:
            exposed |= set(loaded_names(s)) - done
            done |= set(assigned_names([s]))
    return exposed, done
