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

import copy
import types

import gast

from k_transform import ops
from k_transform.frontend.desugar import FUNCTION_SCOPES, loaded_names, walk_scope
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ops import python as prims

_SCOPES = FUNCTION_SCOPES
# Expressions whose parts run later, or not at all, or in a scope of their
# own: a call of a `nonlocal` writer there is not threaded (refused).
_DEFERRED = {
    gast.IfExp: "called inside a conditional expression",
    gast.BoolOp: "called inside an `and`/`or`",
    gast.Lambda: "called inside a lambda",
    gast.ListComp: "called inside a comprehension",
    gast.GeneratorExp: "called inside a generator expression",
    gast.DictComp: "called inside a comprehension",
    gast.SetComp: "called inside a comprehension",
}
_HOLDERS = (
    prims.MakeTuple,
    prims.MakeList,
    prims.MakeDict,
    prims.SetItem,
    prims.AsSequence,
    ops.BINARY["add"],
)
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
        self.custom = None  # JAX's custom_jvp or custom_vjp (`jax_custom.NestedCustom`)


class ClosureScope:
    """The closure half of `k_transform.frontend.parser.GraphBuilder` (a mixin: it
    uses the builder's `fp`, `graph`, `parent`, `closed`, `vars`, `captures`,
    `locals`, `nonlocals`, `escaped`, `expr`, `read`, `bind` and `apply`)."""

    # -- definitions -----------------------------------------------------------
    def bind_closure(self, name: str, fdef) -> None:
        site = ClosureSite(fdef, name, self, self.eval_defaults(fdef), nonlocal_names(fdef))
        self.vars[name] = site

    def built_now(self, fdef) -> Constant:
        """A nested def that runs right where it is made (the function a
        comprehension becomes): built over the current bindings."""
        site = ClosureSite(fdef, fdef.name, self, self.eval_defaults(fdef), nonlocal_names(fdef))
        return self.materialize(site)

    def eval_defaults(self, fdef) -> dict[str, Node]:
        """A def's default values, evaluated where the def statement runs."""
        args = fdef.args
        names = [a.id for a in args.args][len(args.args) - len(args.defaults) :]
        return {n: self.expr(d) for n, d in zip(names, args.defaults, strict=True)}

    def declare_nonlocals(self, fdef) -> tuple[str, ...]:
        """`nonlocal` names: bound on entry to their value in the enclosing scope."""
        names = nonlocal_names(fdef)
        for name in names:
            if self.parent is None:  # a cell of a function not transformed: Python's
                raise self.fp.unsupported(f"`nonlocal {name}` in the function transformed", fdef)
            if name not in self.parent.locals:
                raise self.fp.error(
                    f"`nonlocal {name}`: {name!r} must be a variable of the function that "
                    "directly encloses this one",
                    fdef,
                )
            self.vars[name] = self.parent.lookup(name, fdef)
        return names

    def nested_function(self, site: ClosureSite, key: tuple) -> Constant:
        """The graph of a nested def or lambda over the current bindings, cached
        in `site` under `key` before its body is parsed (recursion)."""
        fdef, name = site.fdef, site.name
        graph = FuncGraph(name, parent=self.graph, debug=self.debug(fdef, name))
        graph.closure_site, graph.closure_key = site, key
        value = Constant(graph, self.debug(fdef, name), name)
        site.graphs[key] = value
        sub = type(self)(self.fp, graph, self, closed=False, fdef=copy.deepcopy(fdef))
        sub.defaults_given = site.defaults
        sub.build_function(sub.fdef)
        if site.custom is not None:  # JAX's custom_jvp (`jax_custom.NestedCustom`)
            return site.custom.made(self, site, key, value)
        if not graph.free_variables() and not site.defaults and not fdef.decorator_list:
            graph.python_fn = _python_function(self.fp.fn, graph.debug.line, name)
        return value

    def materialize(self, site: ClosureSite) -> Constant:
        """A closure as a graph over the bindings its body reads now.

        Python closures see a variable's value when they run, not when they
        are defined; a closure is therefore built when it is used, and again
        if a variable it reads has been reassigned since
        (`k_transform.frontend.closures`).
        """
        key = self.closure_key(site)
        if key not in site.graphs:
            self.nested_function(site, key)
        return site.graphs[key]

    # -- bindings --------------------------------------------------------------
    def peek(self, name: str):
        """The binding `name` has here, without capturing it (None: global)."""
        builder = self
        while builder is not None:
            value = builder.vars.get(name)
            if value is not None and not _is_capture(builder, name, value):
                return value
            builder = builder.parent
        return None

    def view_of(self, site: ClosureSite) -> ClosureScope | None:
        """The builder, this one or an enclosing one, where the variables of
        `site`'s defining function have their current bindings: the nearest
        one in the same Python function as the def (linked to it by branch
        and loop graphs only). None: `site` is not defined around here."""
        builder = self
        while builder is not None:
            frame = builder
            while frame is not site.scope and frame.closed:
                frame = frame.parent
            if frame is site.scope:
                return builder
            builder = builder.parent
        return None

    def closure_key(self, site: ClosureSite) -> tuple:
        """This builder and the bindings of the names `site` reads, transitively."""
        ids, todo, seen = [], list(site.reads), set()
        self.fp.held.append(self)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            value = self.peek(name)
            self.fp.held.append(value)  # ids stay unique while the function is parsed
            ids.append((name, id(value)))
            if isinstance(value, ClosureSite):
                todo.extend(value.reads)
            elif site_of(value) is not None:
                todo.extend(site_of(value).reads)
        return (id(self), tuple(sorted(ids)))

    # -- uses ------------------------------------------------------------------
    def current(self, value: Node) -> Node:
        """A closure value as Python sees it here: rebuilt over the current
        bindings of its defining scope when one it reads has changed."""
        self.check_escaped(value)
        site = site_of(value)
        if site is None:
            return self.current_items(value)
        view = self.view_of(site)
        if view is None or view.closure_key(site)[1] == value.value.closure_key[1]:
            return value
        return view.materialize(site)

    def current_items(self, value: Node) -> Node:
        """A tuple, list or dict built here whose items include closures,
        refreshed: also through `list(...)` of one and `d[k] = v` (what a list
        or dict comprehension ends with, so that its closures see the final
        value of its variables, as Python's do)."""
        maker = (
            value.fn.value if isinstance(value, Apply) and isinstance(value.fn, Constant) else None
        )
        if isinstance(maker, prims.AsSequence):
            inner = self.current_items(value.args[0])
            return value if inner is value.args[0] else self.apply(maker, inner)
        if isinstance(maker, prims.SetItem):
            items = [
                self.current_items(value.args[0]),
                *value.args[1:2],
                self.current(value.args[2]),
            ]
        elif isinstance(maker, (prims.MakeTuple, prims.MakeList, prims.MakeDict)):
            items = [self.current(a) for a in value.args]
        else:
            return value
        if all(a is b for a, b in zip(items, value.args, strict=True)):
            return value
        return self.apply(maker, *items)

    def with_closures_rebuilt(self, outer: Node, param: Node) -> Node:
        """A captured tuple or list holding closures of this function, rebuilt
        here: its closures over this graph's bindings (they are called here,
        maybe after a rebinding), its other items read from the parameter."""
        sites = [site_of(v) for v in sequence_items(outer) or []]
        if not any(site is not None and self.view_of(site) is self for site in sites):
            return param
        items = []
        for k, site in enumerate(sites):
            if site is not None and self.view_of(site) is self:
                items.append(self.materialize(site))
            else:
                items.append(self.apply(prims.GetItem(), param, Constant(k)))
        maker = prims.MakeList() if sequence_kind(outer) is list else prims.MakeTuple()
        return self.apply(maker, *items)

    def thread_nonlocals(self, graph: FuncGraph, result: Node, e) -> Node:
        """The result of calling `graph`; the `nonlocal` names it rebinds are
        bound here to the values it returns with its result."""
        site = graph.closure_site
        if site is None or not site.writes:
            return result
        for k, name in enumerate(site.writes):
            self.bind(name, self.apply(prims.GetItem(), result, self.const(k + 1, e), node=e))
        return self.apply(prims.GetItem(), result, self.const(0, e), node=e)

    def append_closure(self, e) -> bool:
        """`fs.append(f)` of a closure to a list built here and bound only to
        `fs`: `fs` is rebound to the longer list, whose items stay known
        closures (called later, they see the bindings of that time). False:
        not the append of a closure (the list method runs as usual)."""
        if not (_is_append(e) and self.names_closure(e.args[0])):
            return False
        name = e.func.value.id
        item = self.current(self.expr(e.args[0]))
        old = self.vars.get(name)
        if not (is_maker(old, prims.MakeList) and old.graph is self.graph) or self.aliased(old):
            raise self.fp.error(
                f"appending the closure {site_of(item).name!r} to {name!r}: k_transform keeps "
                "closures in a list only for a list built in the same block and bound to one "
                "name (build the list with `+`, or outside a traced loop)",
                e,
            )
        self.bind(name, self.apply(prims.MakeList(), *old.args, item, node=e))
        return True

    def names_closure(self, e) -> bool:
        """Whether expression `e` is a lambda or a name bound to a closure here."""
        if isinstance(e, gast.Lambda):
            return True
        if not isinstance(e, gast.Name):
            return False
        value = self.peek(e.id)
        return isinstance(value, ClosureSite) or site_of(value) is not None

    def aliased(self, node: Node) -> bool:
        """Whether `node` is used by another node or bound to two names."""
        if sum(v is node for v in self.vars.values()) > 1:
            return True
        return any(node in n.inputs for n in self.graph.nodes)

    # -- closures leaving a branch or a loop -----------------------------------
    def check_escaped(self, value: Node) -> None:
        """Refuses a closure that left a branch if a variable it reads has
        been rebound since: it cannot be rebuilt over the new binding."""
        builder = self
        while builder is not None and id(value) not in builder.escaped:
            builder = builder.parent
        if builder is None:
            return
        for site, key, node in builder.escaped[id(value)]:
            now = self.closure_key(site)[1]
            if now != key:
                if isinstance(site, LibraryReads):
                    raise _runs_as_python(
                        self.fp.error(
                            f"the function {site.factory}(...) returned, given the closure "
                            f"{site.name!r}, is called after a variable it reads was rebound: "
                            "Python would see the new value, k_transform cannot rebind it there "
                            f"(call {site.factory}(...) again after the rebinding)",
                            node,
                        ),
                        "a library's function of a closure reading a variable rebound since",
                    )
                if isinstance(site, OuterReads):
                    changed = sorted({name for name, _ in set(now) ^ set(key)})
                    raise _runs_as_python(
                        self.fp.error(
                            f"the closure {site.name!r} returned by {site.factory}() reads "
                            f"{', '.join(repr(n) for n in changed)} of this function, rebound "
                            "since that call: Python would see the new value, k_transform "
                            "cannot rebind it there (pass the value as an argument, or call "
                            f"{site.factory}() again after the rebinding)",
                            node,
                        ),
                        "a closure reading a variable rebound after its factory's call",
                    )
                raise _runs_as_python(
                    self.fp.error(
                        f"the closure {site.name!r} is defined inside an `if` on a traced value "
                        "and reads a variable rebound after that `if`; k_transform cannot "
                        "rebind it there (define the closure after the `if`, or pass the value "
                        "as an argument)",
                        node,
                    ),
                    "a closure leaving an `if` and reading a variable rebound after it",
                )

    def note_returned_closures(self, graph: FuncGraph, result: Node, e) -> None:
        """`result` of calling the nested function `graph` holds closures that
        read variables of an enclosing function (a factory's closure reading
        this function's `z`): where it is used after such a variable was
        rebound, it is refused (`check_escaped`), since the closure was built
        over the old binding and Python's would read the new one."""
        out = graph.output
        entries = []
        for value in [out, *(sequence_items(out) or [])]:
            site = site_of(value)
            if site is None:
                continue
            outer = sorted({n for n in site.reads if n not in site.scope.locals})
            if outer:
                reads = OuterReads(site.name, graph.name, outer)
                entries.append((reads, self.closure_key(reads)[1], e))
        if entries:
            self.fp.held.append(result)
            self.escaped[id(result)] = entries

    def note_closures_given(self, result: Node, given: list[Node], hint: str, e) -> None:
        """`result` of a library call given closures returns a function of
        them (JAX's `grad(f)`): where it is used after a variable they read
        was rebound, it is refused (`check_escaped`), since the closures were
        read at the call and Python's would read the new value."""
        entries = []
        for value in given:
            site = site_of(value)
            if site is not None:
                reads = LibraryReads(site.name, hint, site.reads)
                entries.append((reads, self.closure_key(reads)[1], e))
            builder = self  # a function such a call returned, given again: its own
            while builder is not None and id(value) not in builder.escaped:
                builder = builder.parent
            entries += builder.escaped[id(value)] if builder is not None else []
        if entries:
            self.fp.held.append(result)
            self.escaped[id(result)] = entries

    def note_escaping(self, names: list[str], branches: list, s) -> None:
        """Records the closures that leave `branches` as the values of `names`."""
        for k, name in enumerate(names):
            outputs = [b.graph.output for b in branches]
            values = [o.args[k] for o in outputs if is_maker(o, prims.MakeTuple)]
            self.note_escaping_value(self.vars[name], values, s)

    def note_escaping_value(self, node: Node, values: list[Node], s) -> None:
        """`node` is one of `values` (branch results): the closures among them,
        with the bindings they read here, are checked again where it is used."""
        sites = [site for site in map(site_of, values) if site is not None]
        if sites:
            self.fp.held.append(node)
            self.escaped[id(node)] = [(site, self.closure_key(site)[1], s) for site in sites]

    def refuse_carried_closures(self, body: ClosureScope, carried: list[str], s) -> None:
        """A closure carried out of a loop body that runs as a loop (not unrolled)
        would have to see the bindings of a later time: refused."""
        for name in carried:
            for site in closure_sites(body.peek(name)):
                raise _runs_as_python(
                    self.fp.error(
                        f"the closure {site.name!r} is created in the body of a loop that is "
                        "not unrolled and used after its iteration; k_transform cannot rebind "
                        "its variables there (define it outside the loop, or use a static range)",
                        s,
                    ),
                    "a closure carried out of a loop that is not unrolled",
                )


def _runs_as_python(exc, construct: str):
    """`exc`, for a closure whose bindings the graph cannot keep as Python's:
    a construct the parser has no model of, so a plain function holding it
    runs as Python (`frontend.python_code`), where Python keeps them."""
    exc.construct = construct
    return exc


class LibraryReads:
    """The variables a closure given to a library call that returns a function of it reads
    (`note_closures_given`)."""

    def __init__(self, name: str, factory: str, reads: list[str]):
        self.name, self.factory, self.reads = name, factory, reads


class OuterReads:
    """The enclosing variables a closure returned by a call reads (`note_returned_closures`)."""

    def __init__(self, name: str, factory: str, reads: list[str]):
        self.name, self.factory, self.reads = name, factory, reads


def _is_append(e) -> bool:
    """`name.append(one_argument)`."""
    return (
        isinstance(e, gast.Call)
        and isinstance(e.func, gast.Attribute)
        and e.func.attr == "append"
        and isinstance(e.func.value, gast.Name)
        and len(e.args) == 1
        and not e.keywords
    )


def site_of(value) -> ClosureSite | None:
    """The closure site of a closure value (a Constant nested-function graph)."""
    if isinstance(value, Constant) and isinstance(value.value, FuncGraph):
        return value.value.closure_site
    return None


def is_maker(node, maker_type) -> bool:
    return (
        isinstance(node, Apply)
        and isinstance(node.fn, Constant)
        and isinstance(node.fn.value, maker_type)
    )


def sequence_items(node) -> list | None:
    """The item nodes of a tuple or list built in the graph (or constant)."""
    if is_maker(node, (prims.MakeTuple, prims.MakeList)):
        return list(node.args)
    if isinstance(node, Constant) and isinstance(node.value, (tuple, list)):
        return [Constant(v, node.debug) for v in node.value]
    return None


def sequence_kind(node) -> type:
    if isinstance(node, Constant):
        return type(node.value)
    return list if is_maker(node, prims.MakeList) else tuple


def closure_item(seq, index) -> Node | None:
    """`seq[index]` when `seq` is a list built in the graph, the index constant
    and the item a closure (which must stay known to be rebuilt at its call)."""
    if not (is_maker(seq, prims.MakeList) and isinstance(index, Constant)):
        return None
    if isinstance(index.value, int) and -len(seq.args) <= index.value < len(seq.args):
        item = seq.args[index.value]
        return item if site_of(item) is not None else None
    return None


def dict_closure_item(d, key) -> Node | None:
    """`d[key]` when `d` is a dict built in the graph (`{...}` and `d[k] = v`
    with constant keys), `key` constant and the item a closure: as
    `closure_item`, so that its call sees the bindings of that time."""
    if not isinstance(key, Constant):
        return None
    while is_maker(d, prims.SetItem):
        k, v = d.args[1], d.args[2]
        if not isinstance(k, Constant):
            return None
        if _same_key(k.value, key.value):
            return v if site_of(v) is not None else None
        d = d.args[0]
    if is_maker(d, prims.MakeDict):
        pairs = list(zip(d.args[0::2], d.args[1::2], strict=True))
        for k, v in reversed(pairs):
            if not isinstance(k, Constant):
                return None
            if _same_key(k.value, key.value):
                return v if site_of(v) is not None else None
    return None


def _same_key(a, b) -> bool:
    try:
        return hash(a) == hash(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an unhashable or odd key: not known here
        return False


def holds_closure(node) -> bool:
    """Whether `node` is a closure or a tuple, list or dict built in the graph
    holding one (at any depth)."""
    if site_of(node) is not None:
        return True
    if is_maker(node, prims.MakeDict):
        return any(holds_closure(v) for v in node.args[1::2])
    return any(holds_closure(v) for v in sequence_items(node) or [])


def closure_sites(node, depth: int = 0) -> list[ClosureSite]:
    """The closures a value built in the graph may hold: through tuples,
    lists, dicts, `+`, `d[k] = v` and `list(...)` (what a loop body carries)."""
    if isinstance(node, ClosureSite):
        return [node]
    site = site_of(node)
    if site is not None:
        return [site]
    if depth > 64 or not isinstance(node, Apply) or not isinstance(node.fn, Constant):
        return []
    if not isinstance(node.fn.value, _HOLDERS):
        return []
    return [s for a in node.args for s in closure_sites(a, depth + 1)]


def join_closures(left, right):
    """`left + right` of two tuples (or two lists) holding closures, as one maker."""
    a, b = sequence_items(left), sequence_items(right)
    if a is None or b is None or not any(holds_closure(v) for v in a + b):
        return None
    kinds = {sequence_kind(left), sequence_kind(right)}
    if len(kinds) != 1:
        return None  # list + tuple: Python's TypeError, raised at run time
    return (prims.MakeList() if kinds == {list} else prims.MakeTuple(), *a, *b)


def nonlocal_names(fdef) -> tuple[str, ...]:
    """The names a function declares `nonlocal` (not in its nested functions)."""
    names: dict[str, None] = {}
    for n in _walk_scope_body(fdef.body):
        if isinstance(n, gast.Nonlocal):
            names.update(dict.fromkeys(n.names))
    return tuple(names)


def thread_nonlocal_calls(fdef, unsupported) -> dict[str, tuple[str, ...]]:
    """Checks and marks the calls of `fdef`'s nonlocal-writing nested defs.

    Returns {closure name: names it rebinds}. After each statement that calls
    such a closure, `name = name` assignments are inserted for the names it
    rebinds: the value itself is bound at the call, the assignment only makes
    the statement visibly assign them (branch outputs, loop carries).
    `unsupported(construct, node)` makes the KTransformError for a refused
    use (a plain function then runs as Python, which keeps the updates).
    """
    writers = {}
    for n in _walk_scope_body(fdef.body):
        if isinstance(n, gast.FunctionDef) and nonlocal_names(n):
            writers[n.name] = nonlocal_names(n)
    if not writers:
        return writers
    _check_direct_calls(fdef, writers, unsupported)
    fdef.body = _mark_block(fdef.body, writers, unsupported)
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
    """A construct, for `unsupported` (a plain function runs as Python)."""
    return (
        f"the closure {name!r}, which rebinds enclosing variables (`nonlocal`: threaded "
        f"only through direct calls in the function defining it), {how},"
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
        how = _DEFERRED.get(type(n))
        if how is not None:
            for inner in gast.walk(n):
                if isinstance(inner, gast.Name) and inner.id in writers:
                    raise error(_escape_message(inner.id, how), inner)
            continue
        todo.extend(gast.iter_child_nodes(n))


def _is_capture(builder, name: str, value) -> bool:
    """Whether `value` is the parameter through which the closed graph of
    `builder` reads the enclosing binding of `name` (not a rebinding there)."""
    return (
        builder.closed
        and name in builder.captures
        and isinstance(value, Parameter)
        and value.graph is builder.graph
    )


def _walk_scope_body(stmts):
    """Nodes of `stmts`; nested functions are yielded, not entered."""
    return walk_scope(stmts, FUNCTION_SCOPES)


def _python_function(fn, line: int, name: str):
    """The Python function a nested def or lambda that reads no variable of
    its enclosing functions is, made from its code object in `fn`'s code (as
    its def statement would make it: no default, no decorator, no cell), for
    a library call given it (`dfunctor._as_given`); None where that code is
    not found once on `line`."""
    found, stack = [], [getattr(fn, "__code__", None)]
    while stack:
        code = stack.pop()
        for const in code.co_consts if code is not None else ():
            if isinstance(const, types.CodeType):
                stack.append(const)
                named = const.co_name in (name, "<lambda>")
                if named and const.co_firstlineno == line and not const.co_freevars:
                    found.append(const)
    if len(found) != 1:
        return None
    return types.FunctionType(found[0], fn.__globals__)
