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

from k_transform.frontend.desugar import FUNCTION_SCOPES, mutation_base, walk_scope
from k_transform.frontend.effects import IN_PLACE_METHODS, LIST_MUTATORS, MUTATORS

_SCOPES = FUNCTION_SCOPES
_LOOPS = (gast.For, gast.While)
# Library functions and methods whose result may share memory with an argument.
_VIEWS = frozenset(
    "asarray asanyarray reshape ravel transpose squeeze swapaxes moveaxis view "
    "expand_dims broadcast_to atleast_1d atleast_2d atleast_3d diagonal real imag".split()
)
_FRESH_BUILTINS = frozenset(("list", "dict", "sorted", "tuple"))
_FRESH_METHODS = frozenset(("copy", "astype", "tolist"))


class _Event:
    def __init__(self, name: str, node, index: int, loops: tuple, stmt=None):
        self.name, self.node, self.index, self.loops = name, node, index, loops
        self.stmt = stmt


class _Facts(gast.NodeVisitor):
    """One pass over a function body, statements numbered in source order."""

    def __init__(self, params: set[str], list_names=frozenset(), dict_names=frozenset()):
        self.params = params
        self.list_names = list_names  # names every binding of which makes a list
        self.dict_names = dict_names  # ... a dict
        self.index = 0
        self.loops: tuple = ()
        self.depth = 0  # nesting in if/loop bodies
        self.locals: set[str] = set(params)
        self.mutations: list[_Event] = []
        self.outer = None  # name -> what a name not local is (`check_mutations`)
        self.bindings: dict[str, list[tuple]] = {}  # name -> [(fresh, node, index, top)]
        self.aliases: list[_Event] = []
        self.iterated: list[_Event] = []  # `for _ in a`: the loop node as `loops[-1]`
        self.closure_reads: dict[str, set[str]] = {}  # def name -> names it reads
        self.lists: set[str] = set()  # names bound to a list: `+=` extends them in place
        self.item_aliases: list[_Event] = []  # `r = m[0]`: `.depth` levels of items of `m`
        self.views: list[_Event] = []  # `v = a[1:]`, `v = a.T`: a NumPy view of `a`
        self.augmented: list[_Event] = []  # `a op= v` on a name
        self.none_guards: dict[str, int] = {}  # `if p is None: p = []` at the top: p -> index
        self.in_loop: dict[int, bool] = {}  # statement index -> inside a loop
        self.writable: set[str] = set()  # parameters it may write into (`check_mutations`)

    def run(self, stmts) -> None:
        for s in stmts:
            self.statement(s)

    def statement(self, s) -> None:
        self.index += 1
        self.in_loop[self.index] = bool(self.loops)
        if isinstance(s, gast.FunctionDef) or _is_named_lambda(s):
            for name in [s.name] if isinstance(s, gast.FunctionDef) else _target_names(s):
                self.closure_reads[name] = _reads(s)
                self.locals.add(name)
            return
        for part in _header(s):
            for n in _walk_scope(part):
                base = mutation_base(n)
                if base is not None:
                    self.mutations.append(_Event(base.id, n, self.index, self.loops, s))
                if isinstance(n, gast.NamedExpr):  # `(a := v)` binds like `a = v`
                    self.binding([n.target], n.value, s)
        if isinstance(s, (gast.Assign, gast.AnnAssign, gast.AugAssign)):
            self.assignment(s)
        elif isinstance(s, gast.For):
            self.bind_target(s.target, None, s)
            self.alias_lambdas(s.iter, s)
            for name in _passes(s.iter):
                self.iterated.append(_Event(name, s, self.index, (*self.loops, s)))
            self.alias_items(s.iter, s, 1)
        elif isinstance(s, gast.If) and self.depth == 0 and _none_test(s.test) in self.params:
            self.none_guards[_none_test(s.test)] = self.index
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
            if name is not None:
                self.augmented.append(_Event(name, s, self.index, self.loops))
            in_place = isinstance(value, (gast.List, gast.ListComp)) or (
                isinstance(s.op, gast.BitOr) and isinstance(value, (gast.Dict, gast.Set))
            )
            if name in self.lists or (name and in_place):
                self.mutations.append(_Event(name, s, self.index, self.loops))
            self.alias_calls(s, s)
            return
        self.binding(targets, value, s)
        self.alias_calls(s, s)

    def binding(self, targets: list, value, s) -> None:
        """`targets = value` in statement `s` (an assignment, or `:=` in it)."""
        # `a = b = []`: one object under two names, so neither is a fresh one
        shared = len(targets) > 1 and not isinstance(value, gast.Constant)
        for target in targets:
            self.bind_target(target, None if shared else value, s)
        same = {t.id for t in targets if isinstance(t, gast.Name) and isinstance(value, gast.Name)}
        for name in _passes(value) - same:  # `a = a` makes no new reference
            self.aliases.append(_Event(name, s, self.index, self.loops))
        self.alias_items(value, s, 0)
        for name in _viewed(value) - same:  # nor a view of itself
            self.views.append(_Event(name, s, self.index, self.loops))

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
                if n.func.attr in MUTATORS:
                    for arg in n.args:
                        for name in _passes(arg):
                            self.aliases.append(_Event(name, s, self.index, self.loops))
                        self.alias_items(arg, s, 0)
        self.alias_lambdas(node, s)

    def alias_items(self, e, s, deeper: int) -> None:
        """References to items of a container kept by `e` (`r = m[0]`,
        `(m[0], 1)`, `for v in m[0]`): `depth` levels of items of `m`."""
        for name, depth in _item_passes(e):
            event = _Event(name, s, self.index, self.loops)
            event.depth = depth + deeper
            self.item_aliases.append(event)

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
        if isinstance(e, gast.Subscript) and isinstance(e.slice, gast.Slice):
            # `a[:]` of a list is a copy (of a NumPy array, a view)
            return isinstance(e.value, gast.Name) and e.value.id in self.list_names
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


class Shared:
    """What `check_mutations` leaves to the parser, which knows the values:
    `augmented`, the augmented assignments `a op= v` (by line and column)
    whose object another reference may see (in place on a list or a NumPy
    array, a rebinding on a JAX array or a number); `items`, the augmented
    assignments to an item, `m[i] op= v`, whose item another reference may
    see (the rows of `[[0.0] * 2] * 3`, `r = m[0]` before); `viewed`, the
    item assignments `a[i] = v` (and `a[i] op= v`) after a NumPy view of `a`
    was taken (`v = a[1:]`, `a.T`: the view sees the write; a list's slice is
    a copy); `parameters`, those on a parameter not rebound yet (the
    caller's object); `not_none`, the parameters mutated after `if p is
    None: p = []` (the caller's object unless it passes None), each with the
    mutation's node; `written`, the `writable` parameters the function writes
    into (and returns); `rebinds`, the statements `n = f(..., n, ...)` where
    `n` names a dict this function made and no other reference holds, so a
    helper `f` writing into its parameter and returning it changes what
    only `n` sees (`check_mutations`)."""

    def __init__(self):
        self.augmented: dict[tuple, str] = {}
        self.items: dict[tuple, str] = {}
        self.viewed: dict[tuple, str] = {}
        self.parameters: dict[tuple, str] = {}
        self.not_none: dict[str, object] = {}
        self.written: set[str] = set()  # parameters written and returned (`writable`)
        # `n = f(..., n, ...)` by the call's (line, column): (n, the keys of the
        # earlier such statements of `n` that must also be such calls of writers)
        self.rebinds: dict[tuple, tuple[str, tuple]] = {}


# How `outer(name)` names a variable of the function being transformed, seen
# from a def nested in it (`emit(v)` appending to its caller's list): a change
# the parser has no model of, exact when that function runs as Python.
NESTED_DEF_VARIABLE = "a variable of an enclosing function in"


def outer_change(what: str, name: str, where: str, error, unsupported, node):
    """The refusal of a change of an object outside the function (a global,
    a variable of an enclosing function: `where` says which). One of the
    function transformed, changed by a def nested in it, is a construct the
    parser has no model of (`unsupported`: a plain function runs as Python)."""
    if where.startswith(NESTED_DEF_VARIABLE):
        return unsupported(f"{what}, a change of {name!r}, {where},", node)
    return error(
        f"{what} changes {name!r}, {where}, an object outside the function that its "
        "callers and later calls see; k_transform makes the function a program of its "
        "values and cannot make that change each time Python would (host bookkeeping, "
        "such as a timing log or a cache: keep it outside the function transformed, around "
        "the call of the gradient function; a value the function computes: return it)",
        node,
    )


def _parameter_defaults(fdef) -> dict:
    """Parameter name -> its default's expression, where it is a mutable
    display (`[]`, `{}`, `{1}`) or a `list()`/`dict()`/`set()` call."""
    args = getattr(fdef, "args", None)
    if args is None:
        return {}
    positional = [*getattr(args, "posonlyargs", []), *args.args]
    defaulted = positional[len(positional) - len(args.defaults) :]
    pairs = list(zip(defaulted, args.defaults, strict=True))
    kw = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    pairs += [(a, d) for a, d in kw if d is not None]
    return {
        a.id: d
        for a, d in pairs
        if isinstance(d, (gast.List, gast.Dict, gast.Set))
        or (
            isinstance(d, gast.Call)
            and isinstance(d.func, gast.Name)
            and d.func.id in ("list", "dict", "set")
        )
    }


def check_mutations(
    fdef, params, error, constants=(), unsupported=None, outer=None, writable=(), line=None
) -> Shared:
    """Raise `error(message, node)` where a mutation in `fdef` could be seen
    through another reference (see the module docstring); `unsupported(what,
    node)` where that holds only for a local object (the function then runs
    as Python, exactly). `constants`: names bound to fixed objects (a
    method's `self`), whose method calls are calls. `outer(name)` says what
    a name not local to `fdef` is (a global of a module, ...). `writable`:
    parameters the function may write items of (`p[k] = v`) where it
    returns them on every path and never rebinds them: parsed so for a call
    `n = f(..., n, ...)` that `Shared.rebinds` allows, where the caller's
    object is seen only through `n` (`frontend.calls`). `line(node)`: the
    line of the user's file a node is on, for the messages."""
    dicts = _names_made(fdef, params, _is_dict_value)
    facts = _Facts(set(params), _list_names(fdef, params), dicts)
    facts.defaults = _parameter_defaults(fdef)
    facts.outer = outer or (lambda name: "a variable of an enclosing function or a global")
    facts.line = line or (lambda node: node.lineno)
    facts.run(fdef.body)
    unsupported = unsupported or (lambda what, node: error(f"{what} is not supported", node))
    shared = Shared()
    facts.writable = {p for p in writable if _returns_only(fdef, p)}
    for m in facts.mutations:
        call = isinstance(m.node, gast.Call)
        if call and m.node.func.attr not in (*LIST_MUTATORS, *IN_PLACE_METHODS, "update"):
            continue  # never modelled (`s.add`, `acc.add`): the parser refuses it at the call
        if call and m.node.func.attr == "update" and len(m.node.args) > 1:
            continue  # not a dict's (it takes one positional argument): a user's method
        if not (call and m.name in constants):
            _check_one(m, facts, error, unsupported, shared)
        if isinstance(m.node, gast.Subscript):
            _check_item_store(m, facts, shared)
    for a in facts.augmented:
        _check_augmented(a, facts, shared)
    _find_rebinds(facts, shared)
    return shared


def _check_augmented(a: _Event, facts: _Facts, shared: Shared) -> None:
    key = (a.node.lineno, a.node.col_offset)
    text = f"`{gast.unparse(a.node).strip()}`"
    if a.name in facts.params and not _rebound_before(a, facts):
        shared.parameters[key] = text
    others = [b for b in facts.aliases + facts.iterated + facts.views if b.name == a.name]
    if any(_may_follow(b, a) for b in others):
        shared.augmented[key] = text
    elif any(not fresh for fresh, *_ in facts.bindings.get(a.name, [])):
        shared.augmented[key] = text


def _check_item_store(m: _Event, facts: _Facts, shared: Shared) -> None:
    """`a[i] = v` or `a[i] op= v`: left to the parser (`Shared.items`,
    `Shared.viewed`) where it may change an object another reference sees."""
    key = (m.stmt.lineno, m.stmt.col_offset)
    whole = isinstance(m.stmt, (gast.Assign, gast.AugAssign, gast.AnnAssign))
    text = f"`{gast.unparse(m.stmt if whole else m.node).strip()}`"
    if any(v.name == m.name and _may_follow(v, m) for v in facts.views):
        shared.viewed[key] = text
    augmented = isinstance(m.stmt, gast.AugAssign) and m.stmt.target is m.node
    if augmented and _item_sharing(m, facts, _store_depth(m.node)) is not None:
        shared.items[key] = text  # in place on the item where it is a list or an array


def _check_one(m: _Event, facts: _Facts, error, unsupported, shared: Shared) -> None:
    what = _describe(m.node)
    if isinstance(m.node, gast.Call) and m.name not in facts.locals:
        return  # a module's function (`np.sort(x)`), or a global: see the parser
    if m.name not in facts.locals:
        raise outer_change(what, m.name, facts.outer(m.name), error, unsupported, m.node)
    if isinstance(m.node, gast.Call) and m.node.func.attr in IN_PLACE_METHODS:
        # (of a list or dict the function made: run as Python, exactly)
        if _local_container(m.name, facts):
            raise unsupported(f"the in-place method call {what}", m.node)
        raise error(f"the in-place method call {what} is not supported by k_transform", m.node)
    if isinstance(m.node, gast.Subscript) and _nested_in_list(m, facts):
        _check_items(m, facts, error, unsupported)
    for fresh, node, _, _ in facts.bindings.get(m.name, []):
        if not fresh and _chained(node):  # `a = b = []`: both names local
            raise unsupported(
                f"{what}, a change of {m.name!r} whose object another name shares (`a = b = "
                f"...` at line {facts.line(node)}; a copy, `{m.name}.copy()`, is not shared),",
                m.node,
            )
        if not fresh:
            value = getattr(node, "value", None)
            hint = f"`{m.name}.copy()`"
            if isinstance(value, gast.Subscript) and isinstance(value.slice, gast.Slice):
                hint += (
                    f", or `list(...)`: `{gast.unparse(value).strip()}` is a view of a NumPy "
                    "array, a copy only of a list"
                )
            local = isinstance(value, gast.Name) and _local_container(value.id, facts)
            raise (unsupported if local else error)(
                f"{what} mutates {m.name!r}, whose object may be shared with another reference "
                f"(bound at line {facts.line(node)}); make a copy first ({hint})",
                m.node,
            )
    guard = facts.none_guards.get(m.name)
    if m.name in facts.params and not _rebound_before(m, facts) and guard is not None:
        if guard < m.index:  # `if acc is None: acc = []`: the caller's object unless None
            shared.not_none.setdefault(m.name, m.node)
            return
    if m.name in facts.params and not _rebound_before(m, facts):
        if m.name in facts.writable and _writes_own_items(m) and not facts.bindings.get(m.name):
            shared.written.add(m.name)  # (the caller's call allows it: `check_mutations`)
        elif m.name in facts.defaults:  # `def f(n, _cache={})`: a memo every call shares
            default = facts.defaults[m.name]
            raise (unsupported or error)(
                f"{what}, a change of the default object of {m.name!r} (`{m.name}="
                f"{gast.unparse(default).strip()}` at line {facts.line(default)}), which each call "
                "leaving it out shares: a later call would see the change, which k_transform "
                "does not keep (a memo: compute the value without it, or fill it outside the "
                "function transformed),",
                m.node,
            )
        else:
            exc = error(
                f"{what} mutates the argument {m.name!r}, which the caller also holds; copy it "
                f"first (`{m.name} = {m.name}.copy()`), or return it and call the function "
                f"as `d = f(d, ...)` on a dict `d` the caller made and shares with no other name",
                m.node,
            )
            exc.written_parameter = m.name  # (for that call: `frontend.calls`)
            raise exc
    # (a loop's own reference to what it iterates over ends with the loop)
    iterating = [
        a for a in facts.iterated if a.node in m.loops and not _writes_loop_key(a, m, facts)
    ]
    for a in facts.aliases + iterating:
        if a.name == m.name and _may_follow(a, m):
            # Both names local (a list or dict this function made, not a
            # loop over it growing): Python runs it exactly.
            local = a not in iterating and _local_container(m.name, facts)
            raise (unsupported if local else error)(
                f"{what} mutates {m.name!r} while another reference to it exists (line "
                f"{facts.line(a.node)}); k_transform would not update that reference: copy it "
                f"(`{m.name}.copy()`) where it is shared",
                m.node,
            )


def _local_container(name: str, facts: _Facts) -> bool:
    """Whether every binding of `name` makes a new list or dict here (not a
    parameter): a change through another name of it, refused by the parser,
    is kept exactly when the function runs as Python. (Not an array: JAX's
    arrays do not take item assignment in Python.)"""
    made = name in facts.list_names or name in facts.dict_names
    return made and name not in facts.params


def _writes_own_items(m: _Event) -> bool:
    """`p[k] = v`: a write of an item of `p` itself (not into an item, not
    in place on one: `p[k] += v`)."""
    if isinstance(m.node, gast.Call):
        return False
    s = m.stmt
    return (
        isinstance(s, gast.Assign)
        and any(t is m.node for t in s.targets)
        and isinstance(m.node.value, gast.Name)
    )


def _returns_only(fdef, name: str) -> bool:
    """Whether `fdef` ends with `return name` and returns nothing else."""
    returns = [n for n in walk_scope(fdef.body, FUNCTION_SCOPES) if isinstance(n, gast.Return)]
    last = fdef.body[-1] if fdef.body else None
    return isinstance(last, gast.Return) and all(
        isinstance(r.value, gast.Name) and r.value.id == name for r in returns
    )


def _find_rebinds(facts: _Facts, shared: Shared) -> None:
    """`Shared.rebinds`: each `n = f(..., n, ...)` outside loops, `n` a local
    variable (not a parameter) read once in the call, whose earlier bindings
    made new objects or were such calls, and no other reference to whose
    object was taken before (a write there is seen only through `n`)."""
    candidates = {}  # statement index -> (name, call)
    for name, entries in facts.bindings.items():
        for fresh, node, index, _ in entries:
            call = _rebinding_call(node, name)
            if not fresh and call is not None and not facts.in_loop.get(index):
                candidates[index] = (name, call)
    events = facts.aliases + facts.iterated + facts.views
    for index, (name, call) in candidates.items():
        if name in facts.params:
            continue
        earlier = [(fresh, i) for fresh, _, i, _ in facts.bindings[name] if i < index]
        if any(not fresh and i not in candidates for fresh, i in earlier):
            continue  # (bound to an object another name may hold)
        if any(a.name == name and a.index < index and a.index not in candidates for a in events):
            continue
        required = tuple(_key(candidates[i][1]) for fresh, i in earlier if not fresh)
        shared.rebinds[_key(call)] = (name, required)


def _rebinding_call(s, name: str):
    """The call of `name = f(..., name, ...)` (`name` read once, as an
    argument), else None."""
    if not (isinstance(s, gast.Assign) and len(s.targets) == 1):
        return None
    target, call = s.targets[0], s.value
    if not (isinstance(target, gast.Name) and target.id == name and isinstance(call, gast.Call)):
        return None
    reads = [n for n in gast.walk(call) if isinstance(n, gast.Name) and n.id == name]
    given = [*call.args, *(k.value for k in call.keywords)]
    return call if len(reads) == 1 and any(a is reads[0] for a in given) else None


def _key(call) -> tuple:
    return (call.lineno, call.col_offset)


def _may_follow(alias: _Event, m: _Event) -> bool:
    """The mutation may run after the alias exists: later, or in a common loop."""
    if m.index > alias.index:
        return True
    return any(loop in m.loops for loop in alias.loops)


def _rebound_before(m: _Event, facts: _Facts) -> bool:
    return any(top and index < m.index for _, _, index, top in facts.bindings.get(m.name, []))


def _check_items(m: _Event, facts: _Facts, error, unsupported) -> None:
    """`m[i][j] = v` on a container: exact while the items it writes into are
    objects of their own, referenced only there (see `_item_sharing`)."""
    found = _item_sharing(m, facts, _store_depth(m.node) - 1)
    if found is not None:
        local, what = found
        raise (unsupported if local else _refused(error))(what, m.node)


def _item_sharing(m: _Event, facts: _Facts, depth: int) -> tuple[bool, str] | None:
    """Why the items `depth` levels down in the container `m` writes into
    may be shared, or None: exact while every binding of `m` and every item
    put in since makes new, distinct items (`[[0.0] * 3 for _ in range(3)]`,
    not `[[0.0] * 3] * 3` or `[row, row]`), and no reference to an item is
    taken before (`r = m[0]`). `(local, message)`: `local` where only this
    function's own objects may be shared (it may run as Python)."""
    what = _describe(m.node)
    for fresh, node, _, _ in facts.bindings.get(m.name, []):
        value = getattr(node, "value", None)
        if not (fresh and _distinct(facts, value, depth)):
            # items of this function's own making (`[[0.0] * 3] * 3`): it may run as Python
            local = fresh and not _passes(value) and not _chained(node)
            return local, (
                f"{what}, a change of an item of the container {m.name!r} whose items may be "
                f"shared (bound at line {facts.line(node)}),"
            )
    for e in facts.mutations:
        if e.name == m.name and e is not m and not _puts_distinct(e, facts, depth):
            return False, (
                f"{what}, a change of an item of {m.name!r}, which line {facts.line(e.node)} may "
                "have made shared,"
            )
    for a in facts.item_aliases:
        if a.name == m.name and a.depth <= depth and _may_follow(a, m):
            return True, (
                f"{what}, a change of an item of {m.name!r} that another reference holds "
                f"(line {facts.line(a.node)}),"
            )
    return None


def _refused(error):
    return lambda what, node: error(f"{what} is refused: copy the items it shares", node)


def _chained(s) -> bool:
    return isinstance(s, gast.Assign) and len(s.targets) > 1


def _puts_distinct(e: _Event, facts: _Facts, depth: int) -> bool:
    """Whether mutation `e` of a container puts only new, distinct items in."""
    node = e.node
    if isinstance(e.stmt, gast.AugAssign) and e.stmt.target is node:
        # `m[i] op= v`: the item itself (in place) or a new one, with v's items
        # `_store_depth` levels down
        return _distinct(facts, e.stmt.value, depth - _store_depth(node))
    if isinstance(node, gast.Call):
        attr, args = node.func.attr, node.args
        if attr == "pop":
            return True
        if attr == "extend":
            return len(args) == 1 and _distinct(facts, args[0], depth)
        return bool(args) and _fresh_object(facts, args[-1], depth - 1)
    if isinstance(node, gast.AugAssign):
        return _distinct(facts, node.value, depth)
    if isinstance(node, gast.Subscript) and _store_depth(node) > 1:
        return True  # a deeper change: checked on its own
    value = _stored_value(node, e)
    if value is None:
        return False
    if isinstance(node.slice, gast.Slice):
        return _distinct(facts, value, depth)
    return _fresh_object(facts, value, depth - 1)


def _stored_value(target, e: _Event):
    """The value of the assignment statement storing to `target`."""
    s = e.stmt
    if isinstance(s, gast.Assign) and len(s.targets) == 1 and s.targets[0] is target:
        return s.value
    return None


def _distinct(facts: _Facts, e, depth: int) -> bool:
    """`e` makes a container whose items, `depth` levels down, are new
    objects, each referenced once (a display or comprehension of such)."""
    if depth <= 0:
        return True
    if isinstance(e, (gast.List, gast.Tuple)):
        return all(_fresh_object(facts, x, depth - 1) for x in e.elts)
    if isinstance(e, gast.Dict):
        return all(_fresh_object(facts, x, depth - 1) for x in e.values)
    if isinstance(e, gast.ListComp):
        return _fresh_object(facts, e.elt, depth - 1)
    if isinstance(e, gast.DictComp):
        return _fresh_object(facts, e.value, depth - 1)
    return False


def _fresh_object(facts: _Facts, e, depth: int) -> bool:
    if isinstance(e, gast.Starred):
        return False
    return facts.is_fresh(e) and _distinct(facts, e, depth)


def _store_depth(node) -> int:
    """2 for `m[i][j] = v`: how many subscripts the store goes through."""
    depth = 0
    while isinstance(node, gast.Subscript):
        node, depth = node.value, depth + 1
    return depth


def _nested_in_list(m: _Event, facts: _Facts) -> bool:
    """`a[i][j] = v` where `a` may be a container (a list, dict or tuple, even
    a shallow `.copy()` of one), whose items are objects of their own; an
    array (`jnp.zeros(...)`, arithmetic) is fine."""
    if not isinstance(m.node.value, gast.Subscript):
        return False
    for _, node, _, _ in facts.bindings.get(m.name, []):
        value = getattr(node, "value", None)
        if _container(value) or (isinstance(value, gast.Subscript) and facts.is_fresh(value)):
            return True  # (the second: `m[:]` of a list, a copy sharing its items)
    return any(isinstance(e.node, gast.Call) and e.name == m.name for e in facts.mutations)


def _container(e) -> bool:
    """`e` may make a list, dict or tuple: a display, a copy, `[[0.0] * 3] * 3`."""
    if isinstance(e, (gast.List, gast.ListComp, gast.Dict, gast.DictComp, gast.Tuple)):
        return True
    if isinstance(e, gast.BinOp):
        return _container(e.left) or _container(e.right)
    return _is_list_value(e) or _is_copy(e)


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
    out: set[str] = set()
    for p in _parts(e, keys=True):
        out |= _passes(p)
    return out


def _parts(e, keys: bool) -> list:
    """The subexpressions whose objects `e` may evaluate to or hold in a new
    container (a dict's keys too where `keys`), or pass to a user function."""
    if isinstance(e, (gast.Tuple, gast.List, gast.Set)):
        return e.elts
    if isinstance(e, gast.Dict):  # (`{**a}` holds a's items, not `a`: `_item_passes`)
        values = [v for k, v in zip(e.keys, e.values, strict=True) if k is not None]
        return [*values, *[k for k in e.keys if k is not None and keys]]
    if isinstance(e, gast.IfExp):
        return [e.body, e.orelse]
    if isinstance(e, gast.BoolOp):
        return e.values
    if isinstance(e, gast.Starred):
        return [e.value]
    if isinstance(e, gast.NamedExpr):  # the value, also named by the target
        return [e.target, e.value]
    if _dict_view(e) is not None:  # `d.items()`: a live view of `d` (a loop over it sees writes)
        return [_dict_view(e)]
    if isinstance(e, gast.Call) and _user_call(e.func):
        return [*e.args, *[k.value for k in e.keywords]]
    return []


def _user_call(func) -> bool:
    """A call that may return one of its arguments, or an object holding it:
    a user function or method, a view maker, a library function keeping its
    arguments (`functools.partial(f, d)`: `_KEEPERS`)."""
    if isinstance(func, gast.Name):
        return func.id not in _FRESH_BUILTINS and func.id not in ("len", "print")
    return isinstance(func, gast.Attribute) and func.attr in _VIEWS | _KEEPERS | {"__call__"}


# Library functions (called as `module.name`) whose result holds their arguments.
_KEEPERS = frozenset(
    "partial Partial SimpleNamespace ChainMap MappingProxyType chain replace".split()
)


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


def _item_passes(e) -> set[tuple[str, int]]:
    """`(m, k)` for each `m[i]...` (k subscripts) whose object `e` may
    evaluate to or hold in a new container (see `_passes`)."""
    if isinstance(e, gast.Subscript):
        depth = _store_depth(e)
        root = e
        while isinstance(root, gast.Subscript):
            root = root.value
        return {(root.id, depth)} if isinstance(root, gast.Name) else set()
    out: set = set()
    if isinstance(e, gast.Dict):  # `{**a}`: a new dict holding the items of `a`
        for k, v in zip(e.keys, e.values, strict=True):
            out |= {(v.id, 1)} if k is None and isinstance(v, gast.Name) else set()
            out |= _item_passes(v) if k is None and not isinstance(v, gast.Name) else set()
    for p in _parts(e, keys=False):
        out |= _item_passes(p)
    return out


def _viewed(e) -> set[str]:
    """Names whose NumPy array `e` may be a view of: `a[1:]`, `a[0]`,
    `a.T`, `a.reshape(...)`, `np.asarray(a)` (of a list, a new list or an item)."""
    while isinstance(e, (gast.Subscript, gast.Attribute)):
        e = e.value
    if isinstance(e, gast.Call) and isinstance(e.func, gast.Attribute) and e.func.attr in _VIEWS:
        owner = e.func.value
        return _viewed(owner) | {n for a in e.args for n in _viewed(a) | _passes(a)}
    return {e.id} if isinstance(e, gast.Name) else set()


def _none_test(test) -> str | None:
    """`p` of a test `p is None`."""
    if (
        isinstance(test, gast.Compare)
        and isinstance(test.left, gast.Name)
        and len(test.ops) == 1
        and isinstance(test.ops[0], gast.Is)
        and isinstance(test.comparators[0], gast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def _dict_view(e):
    """`d` of `d.items()`, `d.values()` or `d.keys()`, else None."""
    if isinstance(e, gast.Call) and not e.args and not e.keywords:
        if isinstance(e.func, gast.Attribute) and e.func.attr in ("items", "values", "keys"):
            return e.func.value
    return None


def _writes_loop_key(loop: _Event, m: _Event, facts: _Facts) -> bool:
    """`for k in d: d[k] = ...` (or `+=`; `for k, v in d.items()` too) on a
    dict: a write at the key the loop is at adds no key and changes no value
    the loop reads later, so the loop runs on as Python's would (the
    parser's loop reads the dict's items once, at its start)."""
    s, target = loop.node, m.node
    if not (isinstance(s, gast.For) and m.name in facts.dict_names):
        return False
    key = s.target
    view = _dict_view(s.iter)
    if view is not None and s.iter.func.attr == "items":
        key = s.target.elts[0] if isinstance(s.target, gast.Tuple) else None
    elif view is None and not isinstance(s.iter, gast.Name):
        return False
    elif view is not None and s.iter.func.attr == "values":
        return False
    return (
        isinstance(key, gast.Name)
        and isinstance(target, gast.Subscript)
        and isinstance(target.ctx, gast.Store)
        and isinstance(target.slice, gast.Name)
        and target.slice.id == key.id
        and not any(
            isinstance(n, gast.Name) and n.id == key.id and isinstance(n.ctx, gast.Store)
            for b in s.body
            for n in gast.walk(b)
        )
    )


def _is_dict_value(e) -> bool:
    if isinstance(e, (gast.Dict, gast.DictComp)):
        return True
    return isinstance(e, gast.Call) and isinstance(e.func, gast.Name) and e.func.id == "dict"


def _list_names(fdef, params) -> set[str]:
    """Names every binding of which (in `fdef`, outside nested functions)
    makes a list (a display, a comprehension, `list(...)`): `a[:]` of one is a copy."""
    return _names_made(fdef, params, _is_list_value)


def _names_made(fdef, params, made) -> set[str]:
    """Names every binding of which (in `fdef`, outside nested functions) is
    a value `made(value)` holds for: a new list, a new dict."""
    nodes = list(walk_scope(fdef.body, FUNCTION_SCOPES))
    lists, listed = set(), set()
    for n in nodes:
        if isinstance(n, gast.Assign) and made(n.value):
            for t in n.targets:
                if isinstance(t, gast.Name):
                    lists.add(t.id)
                    listed.add(id(t))
    others = set(params) | {
        n.id
        for n in nodes
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store) and id(n) not in listed
    }
    return lists - others
