"""Mutation and aliasing: which in-place updates the parser may make functional.

The parser turns `a[i] = v`, `a[i][j] = v`, `a[i] op= v`, `a.append(v)`,
`a.extend(s)`, `a.insert(i, v)` and `a.pop(i)` into a new value rebound to
`a` (`a = setitem(a, i, v)`, `a = list_append(a, v)`). That is exactly
Python's meaning only while no other reference sees the object `a` names.
`check_mutations(fdef, params, error)` accepts a function only when, for each
variable `a` it mutates:

1. `a` is a local variable: a nested function mutating a variable of its
   enclosing function, or a function mutating a global, is refused (the
   change would have to reach the other scope).
2. every binding of `a` makes a new object (a list/dict/tuple literal, a
   comprehension, arithmetic, `list(...)`, `x.copy()`, a library call such as
   `jnp.zeros(...)` other than the view makers in `_VIEWS`); a loop target, an
   item, an attribute, another variable or a user function's result may be
   shared, so mutating it is refused. A parameter is mutable only after a
   fresh binding at the top of the body (`x = x.copy()`).
3. no other reference to the object is created before a mutation (or in the
   same loop as one): `b = a`, `(a, 1)`, `c.append(a)`, `d[k] = a`,
   `b = f(a)` with a user function `f`, a lambda reading `a`;
4. a `for` loop does not iterate over `a` while mutating it.

Plain rebinding (`a = a + 1`, `a += 1` on arrays and numbers) is not mutation;
`a += [..]` on a list is (it extends in place). Each refusal is a
`KTransformError` naming the mutation, with the user's line.
"""

from __future__ import annotations

import gast

from k_transform.frontend.desugar import (
    FUNCTION_SCOPES,
    LIST_MUTATORS,
    REFUSED_MUTATORS,
    mutation_base,
    walk_scope,
)

_SCOPES = FUNCTION_SCOPES
_LOOPS = (gast.For, gast.While)
# Library functions and methods whose result may share memory with an argument.
_VIEWS = frozenset(
    "asarray asanyarray reshape ravel transpose squeeze swapaxes moveaxis view "
    "expand_dims broadcast_to atleast_1d atleast_2d atleast_3d diagonal real imag".split()
)
_FRESH_BUILTINS = frozenset(("list", "dict", "sorted", "tuple"))
_FRESH_METHODS = frozenset(("copy", "astype", "tolist"))
_MUTATORS = LIST_MUTATORS + REFUSED_MUTATORS
# Refused before parsing: the list and array methods with no model. The
# others (`d.update`, `s.add`, a user object's `acc.add`) are checked for other
# references here like a list; the parser models or refuses them at the call
# (`frontend.effects`), a plain function then running as Python.
_REFUSED = ("remove", "clear", "reverse", "sort", "fill", "resize", "put", "itemset")


class _Event:
    def __init__(self, name: str, node, index: int, loops: tuple):
        self.name, self.node, self.index, self.loops = name, node, index, loops


class _Facts(gast.NodeVisitor):
    """One pass over a function body, statements numbered in source order."""

    def __init__(self, params: set[str]):
        self.params = params
        self.index = 0
        self.loops: tuple = ()
        self.depth = 0  # nesting in if/loop bodies
        self.locals: set[str] = set(params)
        self.mutations: list[_Event] = []
        self.bindings: dict[str, list[tuple]] = {}  # name -> [(fresh, node, index, top)]
        self.aliases: list[_Event] = []
        self.iterated: list[_Event] = []  # `for _ in a`: the loop node as `loops[-1]`
        self.closure_reads: dict[str, set[str]] = {}  # def name -> names it reads
        self.lists: set[str] = set()  # names bound to a list: `+=` extends them in place

    def run(self, stmts) -> None:
        for s in stmts:
            self.statement(s)

    def statement(self, s) -> None:
        self.index += 1
        if isinstance(s, gast.FunctionDef) or _is_named_lambda(s):
            for name in [s.name] if isinstance(s, gast.FunctionDef) else _target_names(s):
                self.closure_reads[name] = _reads(s)
                self.locals.add(name)
            return
        for part in _header(s):
            for n in _walk_scope(part):
                base = mutation_base(n)
                if base is not None:
                    self.mutations.append(_Event(base.id, n, self.index, self.loops))
        if isinstance(s, (gast.Assign, gast.AnnAssign, gast.AugAssign)):
            self.assignment(s)
        elif isinstance(s, gast.For):
            self.bind_target(s.target, None, s)
            self.alias_lambdas(s.iter, s)
            for name in _passes(s.iter):
                self.iterated.append(_Event(name, s, self.index, (*self.loops, s)))
        else:
            for part in _header(s):
                self.alias_calls(part, s)
        self.nested(s)

    def nested(self, s) -> None:
        bodies = []
        if isinstance(s, gast.If):
            bodies = [s.body, s.orelse]
        elif isinstance(s, _LOOPS):
            bodies = [s.body, s.orelse]
        loops = (*self.loops, s) if isinstance(s, _LOOPS) else self.loops
        saved = self.loops
        self.loops, self.depth = loops, self.depth + 1
        for body in bodies:
            self.run(body)
        self.loops, self.depth = saved, self.depth - 1

    def assignment(self, s) -> None:
        value = s.value
        if value is None:
            return
        targets = s.targets if isinstance(s, gast.Assign) else [s.target]
        if isinstance(s, gast.AugAssign):
            name = s.target.id if isinstance(s.target, gast.Name) else None
            in_place = isinstance(value, (gast.List, gast.ListComp)) or (
                isinstance(s.op, gast.BitOr) and isinstance(value, (gast.Dict, gast.Set))
            )
            if name in self.lists or (name and in_place):
                self.mutations.append(_Event(name, s, self.index, self.loops))
            self.alias_calls(s, s)
            return
        for target in targets:
            self.bind_target(target, value, s)
        same = {t.id for t in targets if isinstance(t, gast.Name) and isinstance(value, gast.Name)}
        for name in _passes(value) - same:  # `a = a` makes no new reference
            self.aliases.append(_Event(name, s, self.index, self.loops))
        self.alias_calls(s, s)

    def bind_target(self, target, value, s) -> None:
        if isinstance(target, gast.Name):
            self.locals.add(target.id)
            same = isinstance(value, gast.Name) and value.id == target.id  # `a = a`
            fresh = value is not None and (same or self.is_fresh(value))
            entry = (fresh, s, self.index, self.depth == 0)
            if _is_list_value(value):
                self.lists.add(target.id)
            self.bindings.setdefault(target.id, []).append(entry)
        elif isinstance(target, (gast.Tuple, gast.List)):
            items = value.elts if isinstance(value, (gast.Tuple, gast.List)) else None
            for k, elt in enumerate(target.elts):
                item = items[k] if items is not None and len(items) == len(target.elts) else None
                self.bind_target(elt, item, s)

    def alias_calls(self, node, s) -> None:
        """References stored by calls: `c.append(a)`, and lambdas reading `a`."""
        for n in _walk_scope(node):
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute):
                if n.func.attr in _MUTATORS:
                    for arg in n.args:
                        for name in _passes(arg):
                            self.aliases.append(_Event(name, s, self.index, self.loops))
        self.alias_lambdas(node, s)

    def alias_lambdas(self, node, s) -> None:
        for n in _walk_scope(node):
            if isinstance(n, gast.Lambda) and n is not node:
                for name in _reads(n):
                    self.aliases.append(_Event(name, s, self.index, self.loops))
            if isinstance(n, gast.Name) and n.id in self.closure_reads:
                if not _is_called(n, s):
                    for name in self.closure_reads[n.id]:
                        self.aliases.append(_Event(name, s, self.index, self.loops))

    def is_fresh(self, e) -> bool:
        if isinstance(e, (gast.List, gast.ListComp, gast.Dict, gast.DictComp, gast.Tuple)):
            return True
        if isinstance(e, (gast.Constant, gast.BinOp, gast.UnaryOp, gast.Compare)):
            return True
        if isinstance(e, gast.IfExp):
            return self.is_fresh(e.body) and self.is_fresh(e.orelse)
        if isinstance(e, gast.Call):
            return self.fresh_call(e.func)
        return False

    def fresh_call(self, func) -> bool:
        if isinstance(func, gast.Name):
            return func.id in _FRESH_BUILTINS and func.id not in self.locals
        if not isinstance(func, gast.Attribute) or func.attr in _VIEWS:
            return False
        if func.attr in _FRESH_METHODS:
            return True
        owner = func.value
        while isinstance(owner, (gast.Attribute, gast.Subscript)):
            if isinstance(owner, gast.Attribute) and owner.attr == "at":
                return True  # x.at[i].set(v): a new array
            owner = owner.value
        # A module's function (jnp.zeros): the owner is not a local variable.
        return isinstance(owner, gast.Name) and owner.id not in self.locals


def check_mutations(fdef, params, error, constants=()) -> None:
    """Raise `error(message, node)` where a mutation in `fdef` could be seen
    through another reference (see the module docstring). `constants`: names
    bound to fixed objects (a method's `self`), whose method calls are calls."""
    facts = _Facts(set(params))
    facts.run(fdef.body)
    for m in facts.mutations:
        call = isinstance(m.node, gast.Call)
        if call and m.node.func.attr not in (*LIST_MUTATORS, *_REFUSED, "update"):
            continue  # never modelled (`s.add`, `acc.add`): the parser refuses it at the call
        if not (call and m.name in constants):
            _check_one(m, facts, error)


def _check_one(m: _Event, facts: _Facts, error) -> None:
    what = _describe(m.node)
    if isinstance(m.node, gast.Call) and m.name not in facts.locals:
        return  # a module's function (`np.sort(x)`), or a global: see the parser
    if m.name not in facts.locals:
        raise error(
            f"{what} mutates {m.name!r}, a variable of an enclosing function or a global; "
            "k_transform cannot carry that change back (return the new value instead)",
            m.node,
        )
    if isinstance(m.node, gast.Call) and m.node.func.attr in _REFUSED:
        raise error(f"the in-place method call {what} is not supported by k_transform", m.node)
    if isinstance(m.node, gast.Subscript) and _nested_in_list(m, facts):
        raise error(
            f"{what} mutates an item of the container {m.name!r}, which other references may "
            "share (for an array, index it as `a[i, j] = v`)",
            m.node,
        )
    for fresh, node, _, _ in facts.bindings.get(m.name, []):
        if not fresh:
            raise error(
                f"{what} mutates {m.name!r}, whose object may be shared with another reference "
                f"(bound at line {node.lineno}); make a copy first (`{m.name}.copy()`)",
                m.node,
            )
    if m.name in facts.params and not _rebound_before(m, facts):
        raise error(
            f"{what} mutates the argument {m.name!r}, which the caller also holds; copy it "
            f"first (`{m.name} = {m.name}.copy()`)",
            m.node,
        )
    for a in facts.aliases + facts.iterated:
        if a.name == m.name and _may_follow(a, m):
            raise error(
                f"{what} mutates {m.name!r} while another reference to it exists (line "
                f"{a.node.lineno}); k_transform would not update that reference: copy it "
                f"(`{m.name}.copy()`) where it is shared",
                m.node,
            )


def _may_follow(alias: _Event, m: _Event) -> bool:
    """The mutation may run after the alias exists: later, or in a common loop."""
    if m.index > alias.index:
        return True
    return any(loop in m.loops for loop in alias.loops)


def _rebound_before(m: _Event, facts: _Facts) -> bool:
    return any(top and index < m.index for _, _, index, top in facts.bindings.get(m.name, []))


def _nested_in_list(m: _Event, facts: _Facts) -> bool:
    """`a[i][j] = v` where `a` may be a container (a list, dict or tuple, even
    a shallow `.copy()` of one), whose items are objects of their own; an
    array (`jnp.zeros(...)`, arithmetic) is fine."""
    if not isinstance(m.node.value, gast.Subscript):
        return False
    containers = (gast.List, gast.ListComp, gast.Dict, gast.DictComp, gast.Tuple)
    for _, node, _, _ in facts.bindings.get(m.name, []):
        value = getattr(node, "value", None)
        if isinstance(value, containers) or _is_list_value(value) or _is_copy(value):
            return True
    return any(isinstance(e.node, gast.Call) and e.name == m.name for e in facts.mutations)


def _is_copy(e) -> bool:
    if not isinstance(e, gast.Call):
        return False
    func = e.func
    return (isinstance(func, gast.Name) and func.id in _FRESH_BUILTINS) or (
        isinstance(func, gast.Attribute) and func.attr == "copy"
    )


def _is_list_value(e) -> bool:
    if isinstance(e, (gast.List, gast.ListComp)):
        return True
    return isinstance(e, gast.Call) and isinstance(e.func, gast.Name) and e.func.id == "list"


def _describe(node) -> str:
    if isinstance(node, gast.Call):
        return f"`{node.func.value.id}.{node.func.attr}(...)`"
    if isinstance(node, gast.AugAssign) and isinstance(node.op, gast.BitOr):
        return f"`{node.target.id} |= ...` (a dict or set updated in place)"
    if isinstance(node, gast.AugAssign):
        return f"`{node.target.id} += ...` (a list extended in place)"
    return f"`{gast.unparse(node)} = ...`"


def _passes(e) -> set[str]:
    """Variables whose object `e` may evaluate to, or hold in a new container."""
    if isinstance(e, gast.Name):
        return {e.id}
    parts: list = []
    if isinstance(e, (gast.Tuple, gast.List, gast.Set)):
        parts = e.elts
    elif isinstance(e, gast.Dict):
        parts = [*e.values, *[k for k in e.keys if k is not None]]
    elif isinstance(e, gast.IfExp):
        parts = [e.body, e.orelse]
    elif isinstance(e, gast.BoolOp):
        parts = e.values
    elif isinstance(e, (gast.Starred, gast.NamedExpr)):
        parts = [e.value]
    elif isinstance(e, gast.Call) and _user_call(e.func):
        parts = [*e.args, *[k.value for k in e.keywords]]
    out: set[str] = set()
    for p in parts:
        out |= _passes(p)
    return out


def _user_call(func) -> bool:
    """A call that may return one of its arguments: a user function or method."""
    if isinstance(func, gast.Name):
        return func.id not in _FRESH_BUILTINS and func.id not in ("len", "print")
    return isinstance(func, gast.Attribute) and func.attr in _VIEWS | {"__call__"}


def _is_named_lambda(s) -> bool:
    """`f = lambda ...`: the parser binds it like a def."""
    return (
        isinstance(s, gast.Assign)
        and isinstance(s.value, gast.Lambda)
        and all(isinstance(t, gast.Name) for t in s.targets)
    )


def _target_names(s) -> list[str]:
    return [t.id for t in s.targets]


def _header(s) -> list:
    """The parts of statement `s` outside its nested blocks."""
    if isinstance(s, (gast.If, gast.While)):
        return [s.test]
    if isinstance(s, gast.For):
        return [s.target, s.iter]
    return [s]


def _reads(fn) -> set[str]:
    return {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}


def _is_called(name: gast.Name, s) -> bool:
    return any(isinstance(n, gast.Call) and n.func is name for n in gast.walk(s))


def _walk_scope(node):
    return walk_scope([node], FUNCTION_SCOPES, enter_roots=True)
