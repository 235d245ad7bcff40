"""Parser: Python source (gast) -> FuncGraph.

`parse(fn)` returns the FuncGraph of a Python function (cached; recursion is
allowed because the graph is cached before its body is parsed). The steps:

1. `Source` finds the definition; `desugar.JumpLowering` removes `break`,
   `continue` and non-tail `return`.
2. `GraphBuilder` walks the statements in order, keeping the current SSA
   binding of each variable. One visitor method per syntax node, statements
   first, then expressions, in the order of Python's grammar.
3. Names resolve, in order, to: variables of this function and its enclosing
   parsed functions (free variables), then the Python function's closure
   cells, globals and builtins, as constants. A constant user function
   becomes a FuncGraph constant (parsed lazily), a library function a
   primitive.
4. `if` becomes `switch`, loops `while_loop` / `for_range` / `for_each`
   (`k_transform.control.prims`). Their graphs are *closed*: a read of an
   enclosing variable adds a parameter (a capture). Branch outputs and loop
   carries are the variables assigned inside that are read elsewhere.
5. Nested defs and lambdas keep Python's closure semantics (late binding,
   definition-time defaults, `nonlocal`): `k_transform.frontend.closures`.
6. Mutation (`a[i] = v`, `lst.append(v)`, ...) rebinds the variable to the
   updated value, so it counts as an assignment for carries and outputs;
   `k_transform.frontend.mutation` first refuses mutations another reference
   could observe.
"""

from __future__ import annotations

import builtins
import copy
import functools
import inspect
import types
from collections import Counter

import gast
import jax

from k_transform import ops
from k_transform import runtime as rt
from k_transform.context import TRANSFORM
from k_transform.control import policy
from k_transform.control import prims as control
from k_transform.errors import KTransformError
from k_transform.frontend import callables, guards, lax_models, pytrees
from k_transform.frontend.cell_state import localize_self_attributes
from k_transform.frontend.closures import (
    ClosureScope,
    ClosureSite,
    closure_item,
    join_closures,
    site_of,
    thread_nonlocal_calls,
)
from k_transform.frontend.desugar import (
    LIST_MUTATORS,
    REFUSED_MUTATORS,
    JumpLowering,
    assigned_names,
    exposed_names,
    loaded_names,
    mutation_base,
)
from k_transform.frontend.jaxpr import numpy_twin
from k_transform.frontend.mutation import check_mutations
from k_transform.frontend.parse_sugar import SugarBuilder, View
from k_transform.frontend.signature import Signature, SignatureBinding, signature_params
from k_transform.frontend.source import Source, is_user_function
from k_transform.frontend.unpacking import UnpackingBuilder
from k_transform.ir.nodes import NO_DEBUG, Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops import tensor_methods
from k_transform.ops.fold import fold, fold_call, tuple_item, tuple_slice
from k_transform.ops.host import host_call
from k_transform.ops.mapping import Call, adapt_attribute, adapt_function, adapt_method

MUTATORS = LIST_MUTATORS + REFUSED_MUTATORS

UNSUPPORTED_STATEMENTS = {
    gast.Try: "try/except",
    gast.With: "with",
    gast.AsyncWith: "async with",
    gast.AsyncFor: "async for",
    gast.AsyncFunctionDef: "async def",
    gast.Global: "global",
    gast.Delete: "del",
    gast.ClassDef: "class definition",
    gast.Import: "import",
    gast.ImportFrom: "import",
    gast.Raise: "raise",
}
UNSUPPORTED_EXPRESSIONS = {
    gast.Yield: "yield",
    gast.YieldFrom: "yield from",
    gast.Await: "await",
    gast.SetComp: "set comprehension",
    gast.Set: "set literal",
    gast.NamedExpr: "assignment expression (:=)",
}

_BINOPS = {
    gast.Add: "add",
    gast.Sub: "sub",
    gast.Mult: "mul",
    gast.Div: "truediv",
    gast.FloorDiv: "floordiv",
    gast.Mod: "mod",
    gast.Pow: "pow",
    gast.MatMult: "matmul",
    gast.LShift: "lshift",
    gast.RShift: "rshift",
    gast.BitOr: "bitor",
    gast.BitXor: "bitxor",
    gast.BitAnd: "bitand",
}
_CMPOPS = {
    gast.Eq: "eq",
    gast.NotEq: "ne",
    gast.Lt: "lt",
    gast.LtE: "le",
    gast.Gt: "gt",
    gast.GtE: "ge",
    gast.Is: "is_",
    gast.IsNot: "is_not",
}
_UNARYOPS = {gast.USub: "neg", gast.UAdd: "pos", gast.Invert: "invert"}


# Names the jump lowering introduces, with how generated code spells them.
_SPECIALS = {
    "_kt_undefined": (rt.UNDEFINED, "_rt.UNDEFINED"),
    "_kt_range_cond": (rt.range_cond, "_rt.range_cond"),
}

UNDEFINED = Constant(rt.UNDEFINED, hint="UNDEFINED")


class _Unbound(Exception):
    """A local variable read before it is assigned."""


def parse(fn, bound_self=None, star_arity: int | None = None) -> FuncGraph:
    """The FuncGraph of `fn` (with `self` fixed to `bound_self` for methods).

    `star_arity`: for a def with `*args`, the number of values the call puts
    in `args`. The graph is then specialised to it: `args` is still one tuple
    parameter, but the body sees a tuple of that many items, so `len(args)`,
    `args[:-1]` and `f(*args)` into library functions and the gradient API
    are known while parsing (MindSpore compiles a graph per input signature).

    `fn` may be any callable: wrappers, partials, `jax.jit` functions and
    objects with a user `__call__` are read as `k_transform.frontend.callables`
    says (a library wrapper such as `jax.jit(f)` is read through `__wrapped__`;
    a wrapper written in Python is parsed as written).
    """
    if isinstance(fn, types.MethodType):
        fn, bound_self = fn.__func__, fn.__self__
    inner = callables.unwrap(fn)
    if inner is not fn and (bound_self is None or isinstance(inner, types.FunctionType)):
        return parse(inner, bound_self, star_arity)
    if not isinstance(fn, types.FunctionType):
        return parse_callable(fn, star_arity)
    if star_arity is not None and not fn.__code__.co_flags & inspect.CO_VARARGS:
        star_arity = None
    # ids: any function and any `self` will do. A Cell's `training` flag is
    # folded into its graph, so each mode has its own (MindSpore compiles per phase).
    key = (id(fn), id(bound_self), getattr(bound_self, "training", None), star_arity)
    # Parsed graphs by the ids of the function and of `self` (methods). An
    # entry holds both alive: ids are reused once an object is
    # gone, and a fresh Cell must never get a dead one's graph (its Parameters).
    _cache = TRANSFORM.cache("parser.graphs")
    entry = _cache.get(key)
    if entry is not None and entry[0] is fn and entry[1] is bound_self:
        if not guards.stale(guards.guards_of(entry[2])):
            return entry[2]
    source = Source(fn)
    name = f"{type(bound_self).__name__}.{source.name}" if bound_self is not None else source.name
    graph = FuncGraph(name, debug=source.debug(source.tree, source.name))
    graph.guards = guards.BUILDING
    _cache[key] = (fn, bound_self, graph)
    try:
        parser = FunctionParser(fn, source, bound_self, star_arity)
        parser.build(graph)
    except BaseException:
        del _cache[key]
        raise
    graph.guards = parser.guards.guards()
    return graph


def parse_callable(value, star_arity: int | None = None) -> FuncGraph:
    """The graph of a callable that is not a Python function nor a wrapper."""
    graph = getattr(value, "__kt_graph__", None)
    if isinstance(graph, FuncGraph):  # a gradient function or compiled program
        return graph
    if isinstance(value, functools.partial):
        return parse(callables.partial_function(value))
    method = callables.user_call_method(value)
    if method is not None and is_user_function(getattr(type(value), "bprop", None)):
        return _with_own_bprop(value, parse(method, value, star_arity))
    if method is not None:
        return parse(method, value, star_arity)
    Source(value)  # raises: no Python source
    raise KTransformError(f"k_transform cannot read the callable {value!r}")


def _with_own_bprop(cell, graph: FuncGraph) -> FuncGraph:
    """A graph calling `graph` (`cell`'s `construct`) through `CustomBpropCall`,
    so that `cell`'s own `bprop` is its gradient when `cell` itself is the
    function differentiated, as when it is called from other code."""
    # Graphs of Cells with their own `bprop`, by the uid of `construct`'s graph.
    _own_bprop = TRANSFORM.cache("parser.own_bprop")
    if graph.uid not in _own_bprop:  # uids are never reused; `_cache` holds `graph`
        wrapper = FuncGraph(graph.name, debug=graph.debug)
        params = [wrapper.add_parameter(p.name, p.debug) for p in graph.parameters]
        wrapper.param_names, wrapper.defaults = graph.param_names, graph.defaults
        wrapper.signature = graph.signature
        prim = Constant(prims.CustomBpropCall(cell, graph), graph.debug, type(cell).__name__)
        wrapper.output = wrapper.apply(prim, *params, debug=graph.debug)
        _own_bprop[graph.uid] = wrapper
    return _own_bprop[graph.uid]


class FunctionParser:
    """Parses one Python function (and the nested defs in its source)."""

    def __init__(self, fn, source: Source, bound_self=None, star_arity: int | None = None):
        self.fn = fn
        self.source = source
        self.bound_self = bound_self
        self.star_arity = star_arity
        closure = fn.__closure__ or ()
        self.cells = {}
        for name, cell in zip(fn.__code__.co_freevars, closure, strict=True):
            try:
                self.cells[name] = cell.cell_contents
            except ValueError:
                continue  # an empty cell: unassigned in the enclosing function
        self.globals = fn.__globals__
        self.guards = guards.Recorder()  # the names read, so a rebinding is seen
        # Nodes whose ids key closure bindings: held, so no id is reused meanwhile.
        self.held: list = []

    def error(self, what: str, node) -> KTransformError:
        return KTransformError(what, self.source.debug(node))

    def unsupported(self, construct: str, node) -> KTransformError:
        return self.error(f"{construct} is not supported by k_transform", node)

    def build(self, graph: FuncGraph) -> None:
        tree = self.source.tree
        builder = GraphBuilder(self, graph, None, closed=False, fdef=tree)
        builder.build_function(tree, self.bound_self)

    # -- global names -------------------------------------------------------
    def resolve_global(self, name: str, node) -> Node:
        if name in _SPECIALS:
            value, hint = _SPECIALS[name]
            return Constant(value, hint=hint)
        if name in self.cells:
            index = self.fn.__code__.co_freevars.index(name)
            self.guards.read_cell(self.fn.__closure__[index], self.cells[name])
            return self.value_node(self.cells[name], name, node)
        if name in self.globals:
            self.guards.read_global(self.globals, name, self.globals[name])
            return self.value_node(self.globals[name], name, node)
        if hasattr(builtins, name):
            return self.value_node(getattr(builtins, name), name, node)
        raise self.error(f"name {name!r} is not defined", node)

    def value_node(self, value, hint: str, node) -> Constant:
        """A Python value as a node: user functions become graphs (k_transform's
        own API functions, marked `__kt_static__` or `__kt_lower__`, stay values:
        see `call`)."""
        api = getattr(value, "__kt_static__", False) or hasattr(value, "__kt_lower__")
        api = api or pytrees.is_replace(value)  # a primitive (`call`)
        model = lax_models.fixed_model(value)  # lax.scan, lax.while_loop, ...: Python
        if model is not None:
            return Constant(parse(model), self.source.debug(node), hint)
        if is_user_function(value) and not api:
            return Constant(parse(value), self.source.debug(node), hint)
        return Constant(value, self.source.debug(node), hint)


class GraphBuilder(ClosureScope, SugarBuilder, UnpackingBuilder, SignatureBinding):
    """Builds one FuncGraph; `closed` graphs capture enclosing reads as params."""

    def __init__(self, fp: FunctionParser, graph, parent, closed: bool, fdef):
        self.fp = fp
        self.graph = graph
        self.parent = parent
        self.closed = closed
        self.vars: dict[str, Node] = {}
        self.captures: dict[str, Node] = {}  # name -> outer node (closed graphs)
        self.fdef = fdef  # the gast FunctionDef this graph's function comes from
        self.locals = parent.locals if closed else set()
        self.load_counts = parent.load_counts if closed else None
        self.returned = False
        self.loop_live: set[str] = set(parent.loop_live) if closed else set()
        self.nonlocals: tuple[str, ...] = parent.nonlocals if closed else ()
        self.defaults_given: dict[str, Node] | None = None  # a nested def's, from its site
        self.escaped: dict[int, list] = {}  # node id -> closures that left a subgraph

    # -- names ----------------------------------------------------------------
    def lookup(self, name: str, node) -> Node:
        if name in self.vars:
            value = self.vars[name]
            return self.materialize(value) if isinstance(value, ClosureSite) else value
        if self.closed:
            raw = self.parent.peek(name)
            if isinstance(raw, ClosureSite) and self.view_of(raw) is self:
                self.vars[name] = raw  # rebuilt here, over this graph's bindings
                return self.materialize(raw)
            outer = self.parent.lookup(name, node)
            if isinstance(outer, Constant) and not _is_closure(outer):
                return outer
            site = site_of(outer)
            if site is not None and self.view_of(site) is self:
                self.vars[name] = self.materialize(site)
                return self.vars[name]
            param = self.graph.add_parameter(name, self.fp.source.debug(node))
            self.captures[name] = outer
            self.vars[name] = self.with_closures_rebuilt(outer, param)
            return self.vars[name]
        if name in self.locals:
            raise _Unbound(name)
        if self.parent is not None:
            try:
                return self.parent.lookup(name, node)
            except _Unbound:
                raise self.fp.error(
                    f"the closure {self.graph.name!r} reads {name!r} before it is assigned in "
                    "the enclosing function; assign it before the def",
                    node,
                ) from None
        return self.fp.resolve_global(name, node)

    def read(self, name: str, node) -> Node:
        try:
            return self.lookup(name, node)
        except _Unbound:
            return UNDEFINED

    def bind(self, name: str, value: Node) -> None:
        if isinstance(value, Apply) and not value.debug.name:
            value.debug = value.debug.named(name)
        self.vars[name] = value

    def debug(self, node, name: str = ""):
        return self.fp.source.debug(node, name)

    def apply(self, prim, *args: Node, node=None) -> Node:
        """`prim(*args)`, folded to a constant when it is static."""
        folded = fold(prim, args)
        if folded is not None:
            return folded
        if isinstance(prim, prims.GetItem):
            item = tuple_item(*args) or closure_item(*args)
            if item is not None:
                return item
            items = tuple_slice(*args)
            if items is not None:
                return self.apply(prims.MakeTuple(), *items, node=node)
        if isinstance(prim, ops.BINARY["add"]):
            joined = join_closures(*args)
            if joined is not None:
                return self.apply(*joined)
        fn = prim if isinstance(prim, Node) else Constant(prim, hint=getattr(prim, "name", ""))
        debug = self.debug(node) if node is not None else NO_DEBUG
        return self.graph.apply(fn, *args, debug=debug)

    def const(self, value, node) -> Constant:
        return Constant(value, self.debug(node))

    # -- functions ----------------------------------------------------------------
    def build_function(self, fdef, bound_self=None) -> None:
        args = fdef.args
        if getattr(fdef, "decorator_list", None) and self.parent is not None:
            raise self.fp.unsupported("a decorator on a nested function", fdef)
        params = signature_params(args)
        if bound_self is not None and params and self.parent is None:
            localize_self_attributes(fdef, params[0].id, bound_self, self.fp.error)
        thread_nonlocal_calls(fdef, self.fp.error)
        JumpLowering(self.fp.unsupported).lower_function(fdef)
        constants = {params[0].id} if bound_self is not None and params else set()
        check_mutations(fdef, [a.id for a in params], self.fp.error, constants)
        self.locals = set(assigned_names(fdef.body, mutations=False)) | {a.id for a in params}
        self.nonlocals = self.declare_nonlocals(fdef)
        self.load_counts = loaded_names(fdef)
        names = [a.id for a in params]
        self.graph.param_names = names
        for k, arg in enumerate(params):
            if k == 0 and bound_self is not None:
                self.vars[arg.id] = Constant(bound_self, self.debug(arg), arg.id)
                self.graph.param_names = names[1:]
                continue
            self.vars[arg.id] = self.graph.add_parameter(arg.id, self.debug(arg))
            if arg is args.vararg and self.parent is None and self.fp.star_arity is not None:
                self.vars[arg.id] = self.fixed_length(self.vars[arg.id], self.fp.star_arity, arg)
        if params == args.args:
            self.graph.defaults = self._defaults(args)
        else:
            self.graph.signature = Signature(args, bound_self is not None)
            self.graph.defaults = self.signature_defaults(args)
        self.block(fdef.body)

    def fixed_length(self, seq: Node, n: int, node) -> Node:
        """`seq` seen as a tuple of `n` items (a `*args` of known arity)."""
        items = [self.apply(prims.GetItem(), seq, self.const(k, node), node=node) for k in range(n)]
        return self.apply(prims.MakeTuple(), *items, node=node)

    def _defaults(self, args) -> dict[str, Node]:
        """Default values: the function's own for a parsed Python function,
        else evaluated where the nested def stands (in the enclosing graph)."""
        names = [a.id for a in args.args][len(args.args) - len(args.defaults) :]
        if self.parent is None:
            values = self.fp.fn.__defaults__ or ()
            return {n: self.fp.value_node(v, n, args) for n, v in zip(names, values, strict=True)}
        return dict(self.defaults_given or {})

    # -- statements --------------------------------------------------------------------
    def block(self, stmts) -> None:
        for s in stmts:
            if self.returned:
                return
            self.statement(s)

    def statement(self, s) -> None:
        self._visit(s, "stmt_", UNSUPPORTED_STATEMENTS, "statement")

    def _visit(self, node, prefix: str, unsupported: dict, what: str):
        """Dispatch to the `stmt_*` / `expr_*` method for `node`'s syntax."""
        kind = type(node)
        if kind in unsupported:
            raise self.fp.unsupported(f"`{unsupported[kind]}`", node)
        method = getattr(self, prefix + kind.__name__, None)
        if method is None:
            raise self.fp.unsupported(f"the {what} `{kind.__name__}`", node)
        return method(node)

    def stmt_FunctionDef(self, s) -> None:
        if s.decorator_list:
            raise self.fp.unsupported("a decorator on a nested function", s)
        self.bind_closure(s.name, s)

    def stmt_Return(self, s) -> None:
        value = self.expr(s.value) if s.value is not None else self.const(None, s)
        value = self.current(value)
        if self.nonlocals:  # a closure that rebinds `nonlocal` names returns them too
            values = [self.read(n, s) for n in self.nonlocals]
            value = self.apply(prims.MakeTuple(), value, *values, node=s)
        self.graph.output = value
        self.returned = True

    def stmt_Nonlocal(self, s) -> None:
        return None  # handled by `declare_nonlocals` when the def is built

    def stmt_Assign(self, s) -> None:
        if isinstance(s.value, gast.Lambda) and all(isinstance(t, gast.Name) for t in s.targets):
            for target in s.targets:  # `f = lambda ...`: bound like a def
                self.bind_closure(target.id, _lambda_def(s.value, target.id))
            return
        value = self.expr(s.value)
        for target in s.targets:
            self.assign(target, value, s)

    def stmt_AugAssign(self, s) -> None:
        op = ops.BINARY[_BINOPS[type(s.op)]]()
        load = _as_load(s.target)
        value = self.apply(op, self.expr(load), self.expr(s.value), node=s)
        self.assign(s.target, value, s)

    def stmt_AnnAssign(self, s) -> None:
        if s.value is not None:
            self.assign(s.target, self.expr(s.value), s)

    def stmt_Expr(self, s) -> None:
        if isinstance(s.value, gast.Constant) and isinstance(s.value.value, str):
            return  # a docstring
        if self.append_closure(s.value):
            return
        self.expr(s.value)

    def stmt_Pass(self, s) -> None:
        return None

    def stmt_Assert(self, s) -> None:
        msg = self.expr(s.msg) if s.msg is not None else self.const(None, s)
        self.apply(prims.Assert(), self.expr(s.test), msg, node=s)

    def stmt_If(self, s) -> None:
        cond = self.expr(s.test)
        if isinstance(cond, Constant) and not isinstance(cond.value, FuncGraph):
            try:
                taken = bool(cond.value)
            except Exception:  # an array constant: decided at run time
                taken = None
            if taken is not None:  # a static `if` (a flag, an attribute): only one branch
                self.block(s.body if taken else s.orelse)
                return
        tail = _returns_on_every_path(s)
        outputs = [] if tail else self.live_outputs(s, [*s.body, *s.orelse])
        branches = [self.subgraph("if", s, "true"), self.subgraph("if", s, "false")]
        for builder, body in zip(branches, (s.body, s.orelse), strict=True):
            builder.block(body)
            if not tail:
                builder.set_output([builder.read(v, s) for v in outputs], s)
        args = close_graphs(branches)
        graphs = [Constant(b.graph, hint=b.graph.name) for b in branches]
        result = self.apply(control.Switch(self.where(s)), cond, *graphs, *args, node=s)
        if tail:
            self.graph.output = result
            self.returned = True
        else:
            self.bind_outputs(outputs, result, s)
            self.note_escaping(outputs, branches, s)

    def stmt_While(self, s) -> None:
        carried = self.carried(s, s.body, s.test)
        init = [self.read(v, s) for v in carried]
        cond_b = self.subgraph("while", s, "cond", carried)
        cond_b.graph.output = cond_b.expr(s.test)
        body_b = self.subgraph("while", s, "body", carried)
        body_b.loop_live |= set(carried)
        body_b.block(s.body)
        self.refuse_carried_closures(body_b, carried, s)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([cond_b, body_b])
        prim = control.WhileLoop(len(carried), self.where(s))
        graphs = [Constant(cond_b.graph, hint="cond"), Constant(body_b.graph, hint="body")]
        result = self.apply(prim, *graphs, *init, *inv, node=s)
        self.bind_outputs(carried, result, s)

    def stmt_For(self, s) -> None:
        if s.orelse:
            raise self.fp.unsupported("`for ... else`", s)
        if self.iterates_by_position(s.iter):
            self.indexed_for(s)
            return
        carried = self.carried(s, s.body, s.iter, target=s.target)
        range_args = self.range_args(s.iter)
        head = range_args if range_args is not None else [_cells_of(self.expr(s.iter))]
        if range_args is None and _is_constant_sequence(head[0]):
            self.unrolled_for(s, head[0])
            return
        if range_args is not None and all(isinstance(a, Constant) for a in range_args):
            indices = range(*(a.value for a in range_args))
            if policy.unrolls_when_parsed(len(indices)):
                # A short static range: what the runtime would unroll anyway,
                # unrolled here so the loop differentiates to any order.
                self.unrolled_for(s, Constant(tuple(indices), self.debug(s)))
                return
        init = [self.read(v, s) for v in carried]
        body_b = self.subgraph("for", s, "body", [])
        body_b.loop_live |= set(carried)
        item = body_b.graph.add_parameter("item", self.debug(s.target))
        for v in carried:
            body_b.vars[v] = body_b.graph.add_parameter(v, self.debug(s, v))
        body_b.assign(s.target, item, s)
        body_b.block(s.body)
        self.refuse_carried_closures(body_b, carried, s)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([body_b])
        where, n = self.where(s), len(carried)
        prim = control.ForRange(n, where) if range_args is not None else control.ForEach(n, where)
        body = Constant(body_b.graph, hint="body")
        result = self.apply(prim, *head, body, *init, *inv, node=s)
        self.bind_outputs(carried, result, s)

    def unrolled_for(self, s, seq: Constant) -> None:
        """`for` over a constant tuple or list (sub-Cells, Parameters, numbers):
        the body is repeated for each item, which stays a constant."""
        for item in seq.value:
            self.assign(s.target, self.fp.value_node(item, seq.hint, s), s)
            self.block(s.body)
            if self.returned:
                return

    def positional_loop(self, s, positions: Node, view: View) -> None:
        """`for i in positions: target = view.item(i); body` as a `for_each`."""
        carried = self.carried(s, s.body, s.iter, target=s.target)
        init = [self.read(v, s) for v in carried]
        body_b = self.subgraph("for", s, "body", [])
        body_b.loop_live |= set(carried)
        position = body_b.graph.add_parameter("position", self.debug(s.target))
        for v in carried:
            body_b.vars[v] = body_b.graph.add_parameter(v, self.debug(s, v))
        body_b.assign(s.target, view.item(body_b, position), s)
        body_b.block(s.body)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([body_b])
        prim = control.ForEach(len(carried), self.where(s))
        body = Constant(body_b.graph, hint="body")
        result = self.apply(prim, positions, body, *init, *inv, node=s)
        self.bind_outputs(carried, result, s)

    def range_args(self, it) -> list[Node] | None:
        """[start, stop, step] if `it` is a call of the builtin `range`."""
        if not (isinstance(it, gast.Call) and isinstance(it.func, gast.Name)):
            return None
        if it.keywords or not 1 <= len(it.args) <= 3:
            return None
        fn = self.read(it.func.id, it)
        if not (isinstance(fn, Constant) and fn.value is range):
            return None
        args = [self.expr(a) for a in it.args]
        if len(args) == 1:
            return [self.const(0, it), args[0], self.const(1, it)]
        return [args[0], args[1], args[2] if len(args) == 3 else self.const(1, it)]

    # -- control-flow helpers ----------------------------------------------------
    def where(self, s) -> str:
        d = self.debug(s)
        return f"{d.file}:{d.line}"

    def subgraph(self, kind: str, s, part: str, params=()) -> GraphBuilder:
        d = self.debug(s)
        name = f"{self.fdef_name()}_{kind}{d.line}_{part}"
        graph = FuncGraph(name, parent=self.graph, debug=d, kind=f"{kind}_{part}")
        builder = GraphBuilder(self.fp, graph, self, closed=True, fdef=self.fdef)
        for v in params:
            builder.vars[v] = graph.add_parameter(v, self.debug(s, v))
        return builder

    def fdef_name(self) -> str:
        name = self.fdef.name if self.fdef is not None else self.graph.name
        return name.replace("<", "").replace(">", "")

    def set_output(self, values: list[Node], s) -> None:
        if not self.returned:
            self.graph.output = self.apply(prims.MakeTuple(), *values)

    def bind_outputs(self, names: list[str], result: Node, s) -> None:
        for k, v in enumerate(names):
            self.bind(v, self.apply(prims.GetItem(), result, self.const(k, s), node=s))

    def live_outputs(self, s, parts: list) -> list[str]:
        """Variables assigned in statement `s` that are read outside `parts`
        (its branches or its body) or carried by an enclosing loop."""
        inside = sum((loaded_names(p) for p in parts), Counter())
        return [
            v for v in assigned_names([s]) if self.load_counts[v] > inside[v] or v in self.loop_live
        ]

    def carried(self, s, body, head, target=None) -> list[str]:
        """Loop variables: assigned in the body (or the target) and read again."""
        targets = assigned_names([target]) if target is not None else []
        exposed, _ = exposed_names(body, frozenset(targets))
        read_head = set(loaded_names(head))
        live = set(self.live_outputs(s, [s])) | exposed | read_head
        return [v for v in [*targets, *assigned_names(body)] if v in live and v in self.locals]

    # -- assignment targets ------------------------------------------------------
    def assign(self, target, value: Node, s) -> None:
        if isinstance(target, gast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (gast.Tuple, gast.List)):
            if any(isinstance(e, gast.Starred) for e in target.elts):
                self.assign_starred(target, value, s)
                return
            for k, elt in enumerate(target.elts):
                item = self.apply(prims.GetItem(), value, self.const(k, s), node=s)
                self.assign(elt, item, s)
        elif isinstance(target, gast.Subscript):
            container = self.expr(_as_load(target.value))
            index = self.index(target.slice)
            updated = self.apply(prims.SetItem(), container, index, value, node=s)
            self.assign(_as_store(target.value), updated, s)
        elif isinstance(target, gast.Attribute):
            raise self.fp.unsupported("assignment to an attribute (`obj.attr = ...`)", s)
        else:
            raise self.fp.unsupported(f"assignment to {type(target).__name__}", s)

    # -- expressions --------------------------------------------------------------
    def expr(self, e) -> Node:
        return self._visit(e, "expr_", UNSUPPORTED_EXPRESSIONS, "expression")

    def expr_BoolOp(self, e) -> Node:
        # `a and b` is `b if a else a`; `a or b` is `a if a else b` (short-circuit).
        result = self.expr(e.values[0])
        for operand in e.values[1:]:
            result = self.short_circuit(result, operand, isinstance(e.op, gast.And), e)
        return result

    def short_circuit(self, left: Node, right_expr, is_and: bool, e) -> Node:
        if isinstance(left, Constant):
            keep_left = (not left.value) if is_and else bool(left.value)
            return left if keep_left else self.expr(right_expr)
        evaluate = self.subgraph("bool", e, "rhs")
        evaluate.graph.add_parameter("left")
        evaluate.graph.output = evaluate.expr(right_expr)
        keep = self.subgraph("bool", e, "lhs")
        keep.graph.output = keep.graph.add_parameter("left")
        args = close_graphs([evaluate, keep])
        true_b, false_b = (evaluate, keep) if is_and else (keep, evaluate)
        graphs = [Constant(true_b.graph, hint="then"), Constant(false_b.graph, hint="else")]
        return self.apply(control.Switch(self.where(e)), left, *graphs, left, *args, node=e)

    def expr_BinOp(self, e) -> Node:
        op = ops.BINARY[_BINOPS[type(e.op)]]()
        return self.apply(op, self.expr(e.left), self.expr(e.right), node=e)

    def expr_UnaryOp(self, e) -> Node:
        if isinstance(e.op, gast.Not):
            return self.apply(prims.Not(), self.expr(e.operand), node=e)
        return self.apply(ops.UNARY[_UNARYOPS[type(e.op)]](), self.expr(e.operand), node=e)

    def expr_Lambda(self, e) -> Node:
        name = f"{self.fdef_name()}_lambda{self.debug(e).line}"
        fdef = _lambda_def(e, "<lambda>")
        return self.materialize(ClosureSite(fdef, name, self, self.eval_defaults(fdef), ()))

    def expr_IfExp(self, e) -> Node:
        cond = self.expr(e.test)
        if isinstance(cond, Constant):
            return self.expr(e.body if cond.value else e.orelse)
        branches = [self.subgraph("ifexp", e, "true"), self.subgraph("ifexp", e, "false")]
        for builder, part in zip(branches, (e.body, e.orelse), strict=True):
            builder.graph.output = builder.expr(part)
        args = close_graphs(branches)
        graphs = [Constant(b.graph, hint=b.graph.name) for b in branches]
        result = self.apply(control.Switch(self.where(e)), cond, *graphs, *args, node=e)
        self.note_escaping_value(result, [b.graph.output for b in branches], e)
        return result

    def expr_Dict(self, e) -> Node:
        if any(k is None for k in e.keys):
            raise self.fp.unsupported("`**` unpacking in a dict literal", e)
        items = []
        for k, v in zip(e.keys, e.values, strict=True):
            items += [self.expr(k), self.expr(v)]
        return self.apply(prims.MakeDict(), *items, node=e)

    def expr_Compare(self, e) -> Node:
        left = self.expr(e.left)
        result = None
        for op, right_e in zip(e.ops, e.comparators, strict=True):
            right = self.expr(right_e)
            if isinstance(op, (gast.In, gast.NotIn)):
                step = self.apply(prims.Contains(isinstance(op, gast.NotIn)), left, right, node=e)
            else:
                step = self.apply(ops.BINARY[_CMPOPS[type(op)]](), left, right, node=e)
            result = step if result is None else self.and_nodes(result, step, e)
            left = right
        return result

    def and_nodes(self, a: Node, b: Node, e) -> Node:
        """`a and b` for two already-computed values (chained comparisons)."""
        if isinstance(a, Constant):
            return b if a.value else a
        return self.apply(control.Switch(self.where(e)), a, *self._pick_graphs(e), b, a, node=e)

    def _pick_graphs(self, e):
        graphs = []
        for k, part in enumerate(("second", "first")):
            g = FuncGraph(f"{self.fdef_name()}_and{self.debug(e).line}_{part}", self.graph)
            params = [g.add_parameter("b"), g.add_parameter("a")]
            g.output = params[k]
            graphs.append(Constant(g, hint=g.name))
        return graphs

    def expr_Call(self, e) -> Node:
        builtin = self.iterable_builtin(e)
        if builtin is not None:
            return builtin
        if any(isinstance(a, gast.Starred) for a in e.args) or any(
            k.arg is None for k in e.keywords
        ):
            return self.unpacking_call(e)
        if mutation_base(e) is not None:
            receiver = self.read(e.func.value.id, e)
            if not (isinstance(receiver, Constant) and not isinstance(receiver.value, list)):
                return self.mutating_call(e, receiver)
        if isinstance(e.func, gast.Attribute):
            receiver = self.expr(e.func.value)
            if not isinstance(receiver, Constant) and e.func.attr in MUTATORS:
                raise self.fp.unsupported(
                    f"the in-place method call `.{e.func.attr}(...)` on an item or attribute", e
                )
            if not isinstance(receiver, Constant) or _array_method_of_parameter(receiver, e):
                return self.method_call(receiver, e)
            callee = self.attribute_of(receiver, e.func.attr, e.func)
        else:
            callee = self.expr(e.func)
        args = [self.current(self.expr(a)) for a in e.args]
        kwargs = {k.arg: self.current(self.expr(k.value)) for k in e.keywords}
        return self.call(self.current(callee), args, kwargs, e)

    def mutating_call(self, e, lst: Node) -> Node:
        """`lst.append(v)`, `.extend(s)`, `.insert(i, v)`, `.pop(i)`: `lst` is
        rebound to the new list (`k_transform.frontend.mutation` checks no other
        reference sees the old one); the call's value is Python's."""
        name, method = e.func.value.id, e.func.attr
        if name not in self.locals:
            raise self.fp.error(
                f"`{name}.{method}(...)` mutates {name!r}, a variable of an enclosing function "
                "or a global; k_transform cannot carry that change back (return the new value "
                "instead)",
                e,
            )
        if method in REFUSED_MUTATORS:
            raise self.fp.unsupported(f"the in-place method call `{name}.{method}(...)`", e)
        arity = {"append": (1, 1), "extend": (1, 1), "insert": (2, 2), "pop": (0, 1)}[method]
        if e.keywords or not arity[0] <= len(e.args) <= arity[1]:
            raise self.fp.error(f"wrong arguments to `{name}.{method}(...)`", e)
        args = [self.expr(a) for a in e.args]
        result = self.const(None, e)
        if method == "pop":
            index = args[0] if args else self.const(-1, e)
            result = self.apply(prims.GetItem(), lst, index, node=e)
            new = self.apply(prims.ListDelete(), lst, index, node=e)
        else:
            prim = {"append": prims.ListAppend, "extend": prims.ListExtend}.get(method)
            new = self.apply((prim or prims.ListInsert)(), lst, *args, node=e)
        self.bind(name, new)
        return result

    def method_call(self, receiver: Node, e) -> Node:
        args = [self.expr(a) for a in e.args]
        kwnames = tuple(k.arg for k in e.keywords)
        kwvals = [self.expr(k.value) for k in e.keywords]
        if e.func.attr == "copy" and not args and not kwvals:
            return self.apply(prims.Copy(), receiver, node=e)
        if e.func.attr == "_replace" and not args:  # a NamedTuple's
            return self.replace_fields(receiver, dict(zip(kwnames, kwvals, strict=True)), e)
        adapted = adapt_method(
            e.func.attr, Call([receiver, *args], dict(zip(kwnames, kwvals, strict=True)))
        )
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        meaning = tensor_methods.method(e.func.attr)  # x.abs(), x.view(3, 1): MindSpore's
        if meaning is not None:
            fn = Constant(meaning, self.debug(e), meaning.__name__)
            return self.call(fn, [receiver, *args], dict(zip(kwnames, kwvals, strict=True)), e)
        prim = prims.MethodCall(e.func.attr, kwnames)
        return self.apply(prim, receiver, *args, *kwvals, node=e)

    def call(self, callee: Node, args: list[Node], kwargs: dict[str, Node], e) -> Node:
        if isinstance(callee, Apply) and isinstance(
            getattr(callee.fn, "value", None), prims.Vmapped
        ):
            return self.vmapped_call(callee, args, kwargs, e)
        if not isinstance(callee, Constant):
            if kwargs:
                raise self.fp.unsupported("keyword arguments to a function value", e)
            return self.apply(callee, *args, node=e)
        value = callee.value
        if pytrees.is_replace(value) and len(args) == 1:  # dataclasses.replace(p, w=...)
            return self.replace_fields(args[0], kwargs, e)
        if getattr(value, "__kt_static__", False):  # GradOperation(), kt.grad(f), ...
            if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]):
                result = value(*[a.value for a in args], **{k: v.value for k, v in kwargs.items()})
                return Constant(result, self.debug(e), callee.hint)
        lower = getattr(value, "__kt_lower__", None)
        if lower is not None:  # kt.vjp(f, x), kt.jvp(f, x, v): graphs built here
            return lower(self, args, kwargs, e)
        graph = getattr(value, "__kt_graph__", None)
        if isinstance(graph, FuncGraph):  # a gradient function or compiled program
            value, callee = graph, Constant(graph, callee.debug, callee.hint)
        if isinstance(value, FuncGraph):
            result = self.apply(callee, *self.bind_call(value, args, kwargs, e), node=e)
            result = self.thread_nonlocals(value, result, e)
            if value.closure_site is not None:
                self.note_returned_closures(value, result, e)
            return result
        if isinstance(value, types.MethodType) and is_user_function(value.__func__):
            graph = Constant(parse(value), self.debug(e), callee.hint)
            return self.call(graph, args, kwargs, e)
        if isinstance(value, Primitive):
            if kwargs:
                raise self.fp.unsupported(f"keyword arguments to the primitive {value.name}", e)
            if hasattr(value, "specialize"):  # constant inputs that become attributes
                value, args = value.specialize(args)
            return self.apply(value, *args, node=e)
        if isinstance(value, functools.partial):
            return self.partial_call(value, args, kwargs, e)
        wrapped = callables.wrapped_target(value)  # jax.jit(f), a C-level wrapper: f
        if wrapped is not None:
            return self.call(self.fp.value_node(wrapped, callee.hint, e), args, kwargs, e)
        method = callables.user_call_method(value)
        if method is not None and is_user_function(getattr(type(value), "bprop", None)):
            graph = parse(method, bound_self=value)
            prim = prims.CustomBpropCall(value, graph)
            return self.apply(prim, *self.bind_call(graph, args, kwargs, e), node=e)
        if method is not None:
            graph = Constant(parse(method, bound_self=value), self.debug(e), callee.hint)
            return self.call(graph, args, kwargs, e)
        if isinstance(value, type) and issubclass(value, Primitive):
            if all(isinstance(a, Constant) for a in [*args, *kwargs.values()]):
                pos = [a.value for a in args]
                instance = value(*pos, **{k: v.value for k, v in kwargs.items()})
                return Constant(instance, self.debug(e), callee.hint)
        if value is print:
            prim = prims.Print(tuple(kwargs))
            return self.apply(prim, *args, *kwargs.values(), node=e)
        if lax_models.is_modelled(value):
            return self.model_call(value, args, kwargs, e)
        try:
            made = pytrees.constructor(value, args, kwargs)  # a NamedTuple or dataclass
        except KTransformError as exc:
            raise self.fp.error(exc.bare_message, e) from None
        if made is not None:
            return self.apply(made[0], *made[1], node=e)
        folded = fold_call(value, args, kwargs)
        if folded is not None:
            return folded
        adapted = adapt_function(value, Call(args, kwargs))
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        hint = callee.hint or getattr(value, "__name__", "fn")
        twin = numpy_twin(value)  # np.multiply on traced values runs as jnp.multiply
        if twin is not value and not all(
            isinstance(a, Constant) for a in [*args, *kwargs.values()]
        ):
            return self.call(Constant(twin, self.debug(e), f"jnp.{twin.__name__}"), args, kwargs, e)
        constant = all(isinstance(a, Constant) for a in [*args, *kwargs.values()])
        prim = prims.LibraryCall(value, hint, tuple(kwargs), host_call(value, constant))
        return self.apply(prim, *args, *kwargs.values(), node=e)

    def model_call(self, value, args, kwargs, e) -> Node:
        """`lax.scan(f, ...)`, `lax.cond(...)`, `jax.vmap(f)`, ...: a call of the
        Python model of the function (`k_transform.frontend.lax_models`)."""
        if any(value is f for f in lax_models.SAME_VALUES):
            if not args:
                raise self.fp.error(f"{value.__name__}(f) expected", e)
            return args[0]
        if value is jax.lax.cond:
            if "operand" in kwargs:  # the old `cond(pred, t, f, operand=x)` form
                kwargs = dict(kwargs)
                args = [*args, kwargs.pop("operand")]
            if len(args) < 3 or kwargs:
                raise self.fp.error("lax.cond(pred, true_fun, false_fun, *operands) expected", e)
            model = lax_models.cond_model(len(args) - 3)
        elif value is jax.lax.switch:
            if len(args) < 2 or kwargs:
                raise self.fp.error("lax.switch(index, branches, *operands) expected", e)
            branches = self.items_of(args[1], "the branches of lax.switch", e)
            model = lax_models.switch_model(len(branches), len(args) - 2)
            args = [args[0], *branches, *args[2:]]
        else:  # jax.vmap(fun, in_axes=0, out_axes=0, ...): a value called later
            options = {k: v for k, v in kwargs.items() if k not in ("in_axes", "out_axes")}
            static = [*args[1:], *kwargs.values()]
            if not args or not all(isinstance(a, Constant) for a in static):
                raise self.fp.error(
                    "jax.vmap(fun, in_axes, out_axes) with constant axes expected", e
                )
            in_axes = kwargs["in_axes"].value if "in_axes" in kwargs else 0
            in_axes = args[1].value if len(args) > 1 else in_axes
            out_axes = kwargs["out_axes"].value if "out_axes" in kwargs else 0
            out_axes = args[2].value if len(args) > 2 else out_axes
            if isinstance(in_axes, list):
                in_axes = tuple(in_axes)
            prim = prims.Vmapped(in_axes, out_axes, tuple(sorted(options)))
            return self.apply(prim, args[0], node=e)
        graph = Constant(parse(model), self.debug(e), model.__name__)
        return self.call(graph, args, kwargs, e)

    def vmapped_call(self, callee: Apply, args, kwargs, e) -> Node:
        """`jax.vmap(fun, in_axes)(*args)`: the loop its model writes."""
        vm = callee.fn.value
        try:
            axes = lax_models.vmap_axes(
                vm.in_axes, vm.out_axes, len(args), dict.fromkeys(vm.options)
            )
            if kwargs:
                raise KTransformError("keyword arguments to a jax.vmap function are not supported")
        except KTransformError as exc:
            raise self.fp.error(exc.bare_message, e) from None
        model = lax_models.vmap_model(axes)
        graph = Constant(parse(model), self.debug(e), model.__name__)
        return self.call(graph, [callee.args[0], *args], {}, e)

    def items_of(self, node: Node, what: str, e) -> list[Node]:
        """The items of a tuple or list known while parsing."""
        if isinstance(node, Constant) and isinstance(node.value, (tuple, list)):
            return [self.fp.value_node(v, f"item{k}", e) for k, v in enumerate(node.value)]
        if isinstance(node, Apply) and isinstance(node.fn.value, (prims.MakeTuple, prims.MakeList)):
            return list(node.args)
        raise self.fp.error(f"{what} must be a tuple or list written at the call", e)

    def partial_call(self, p: functools.partial, args, kwargs, e) -> Node:
        """`functools.partial(f, *bound, **kw)(*args, **kwargs)` is
        `f(*bound, *args, **{**kw, **kwargs})`; the bound values are constants."""
        name = getattr(p.func, "__name__", "fn")
        fn = self.fp.value_node(p.func, name, e)
        bound = [self.fp.value_node(v, f"{name}_arg{k}", e) for k, v in enumerate(p.args)]
        keywords = {k: self.fp.value_node(v, k, e) for k, v in p.keywords.items()}
        return self.call(fn, [*bound, *args], {**keywords, **kwargs}, e)

    def replace_fields(self, receiver: Node, kwargs: dict[str, Node], e) -> Node:
        """`receiver` with the fields `kwargs` replaced (`_replace`, `dataclasses.replace`)."""
        values = self.apply(prims.MakeTuple(), *kwargs.values(), node=e)
        return self.apply(prims.ReplaceFields(tuple(kwargs)), receiver, values, node=e)

    def callee_graph(self, callee: Node) -> FuncGraph | None:
        """The graph a call of `callee` runs: a user function, method or Cell."""
        value = callee.value if isinstance(callee, Constant) else None
        graph = getattr(value, "__kt_graph__", None)
        if isinstance(value, FuncGraph) or isinstance(graph, FuncGraph):
            return value if isinstance(value, FuncGraph) else graph
        if isinstance(value, types.MethodType) and is_user_function(value.__func__):
            return parse(value)
        method = callables.user_call_method(value)
        if method is not None and not is_user_function(getattr(type(value), "bprop", None)):
            return parse(method, bound_self=value)
        if isinstance(value, functools.partial) or callables.wrapped_target(value) is not None:
            return parse(value)
        return None

    def unpack(self, node: Node, n: int) -> list[Node]:
        """`n` items of a tuple-valued node; a lone non-tuple node when `n` is 1
        (the `inputs` / `v` convention of `kt.jvp`)."""
        is_tuple = isinstance(node, Apply) and isinstance(node.fn.value, prims.MakeTuple)
        if n == 1 and not is_tuple:  # a tuple of one or a lone value: known when run
            return [self.apply(prims.SoleInput(), node)]
        return [self.apply(prims.GetItem(), node, Constant(k)) for k in range(n)]

    def bind_call(self, graph: FuncGraph, args, kwargs, e) -> list[Node]:
        """Positional and keyword arguments matched to `graph`'s parameters."""
        names = graph.param_names
        if graph.signature is not None:
            return self.bind_signature(graph, args, kwargs, e)
        if names is None:  # a graph still being parsed (recursion): positional only
            if kwargs:
                raise self.fp.unsupported("keyword arguments in a recursive call", e)
            return args
        if len(args) > len(names):
            raise self.fp.error(
                f"{graph.name}() takes {len(names)} arguments but {len(args)} were given", e
            )
        bound = dict(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k not in names or k in bound:
                raise self.fp.error(f"{graph.name}() got an unexpected keyword {k!r}", e)
            bound[k] = v
        out = []
        for name in names:
            if name in bound:
                out.append(bound[name])
            elif name in graph.defaults:
                out.append(self.current(graph.defaults[name]))
            else:
                raise self.fp.error(f"{graph.name}() missing argument {name!r}", e)
        return out

    def expr_FormattedValue(self, e) -> Node:
        raise self.fp.unsupported("a formatted value outside an f-string", e)

    def expr_JoinedStr(self, e) -> Node:
        template, values = [], []
        for part in e.values:
            if isinstance(part, gast.Constant):
                template.append(str(part.value).replace("{", "{{").replace("}", "}}"))
                continue
            spec = ""
            if part.conversion not in (-1, None):
                spec += "!" + chr(part.conversion)
            if part.format_spec is not None:
                inner = part.format_spec.values
                if not all(isinstance(p, gast.Constant) for p in inner):
                    raise self.fp.unsupported("a computed format spec in an f-string", e)
                spec += ":" + "".join(str(p.value) for p in inner)
            template.append("{" + spec + "}")
            values.append(self.expr(part.value))
        fmt = Constant("".join(template), self.debug(e))
        return self.apply(prims.LibraryCall(rt.fstring, "_rt.fstring"), fmt, *values, node=e)

    def expr_Constant(self, e) -> Node:
        return self.const(e.value, e)

    def expr_Attribute(self, e) -> Node:
        value = self.expr(e.value)
        if isinstance(value, Constant):
            return self.attribute_of(value, e.attr, e)
        adapted = adapt_attribute(e.attr, value)
        if adapted is not None:
            return self.apply(adapted[0], *adapted[1], node=e)
        return self.apply(prims.GetAttr(e.attr), value, node=e)

    def attribute_of(self, value: Constant, name: str, e) -> Node:
        """`value.name` for a constant `value` (a module, a Cell, an object)."""
        if isinstance(value.value, FuncGraph):
            raise self.fp.unsupported("attributes of a function", e)
        try:
            attr = getattr(value.value, name)
        except AttributeError:
            what = value.hint or repr(value.value)
            raise self.fp.error(f"{what} has no attribute {name!r}", e) from None
        namespace = guards.attribute_namespace(value.value)
        if namespace is not None and namespace.get(name) is attr:  # `cfg.scale` may be rebound
            self.fp.guards.read_global(namespace, name, attr)
        hint = f"{value.hint}.{name}" if value.hint else name
        return self.fp.value_node(attr, hint, e)

    def expr_Subscript(self, e) -> Node:
        return self.apply(prims.GetItem(), self.expr(e.value), self.index(e.slice), node=e)

    def index(self, s) -> Node:
        if isinstance(s, gast.Slice):
            parts = [
                self.expr(p) if p is not None else self.const(None, s)
                for p in (s.lower, s.upper, s.step)
            ]
            return self.apply(prims.MakeSlice(), *parts, node=s)
        if isinstance(s, gast.Tuple):
            return self.apply(prims.MakeTuple(), *[self.index(p) for p in s.elts], node=s)
        return self.expr(s)

    def expr_Starred(self, e) -> Node:
        raise self.fp.unsupported("star-unpacking (`*x`)", e)

    def expr_Name(self, e) -> Node:
        return self.read(e.id, e)

    def expr_List(self, e) -> Node:
        if any(isinstance(x, gast.Starred) for x in e.elts):
            return self.starred_literal(e, prims.MakeList())
        return self.apply(prims.MakeList(), *[self.expr(x) for x in e.elts], node=e)

    def expr_Tuple(self, e) -> Node:
        if any(isinstance(x, gast.Starred) for x in e.elts):
            return self.starred_literal(e, prims.MakeTuple())
        return self.apply(prims.MakeTuple(), *[self.expr(x) for x in e.elts], node=e)

    def expr_Slice(self, e) -> Node:
        return self.index(e)


def _lambda_def(e, name: str):
    """`lambda args: body` as the FunctionDef `def name(args): return body`."""
    ret = gast.copy_location(gast.Return(value=e.body), e.body)
    fdef = gast.FunctionDef(
        name=name,
        args=e.args,
        body=[ret],
        decorator_list=[],
        returns=None,
        type_comment=None,
        type_params=[],
    )
    return gast.copy_location(fdef, e)


def close_graphs(builders: list[GraphBuilder]) -> list[Node]:
    """Give closed graphs the same captured parameters; return the outer nodes.

    Each graph keeps its own leading parameters (carried values, the loop
    item); captures follow, in the same order in every graph.
    """
    order: dict[str, Node] = {}
    for b in builders:
        for name, outer in b.captures.items():
            order.setdefault(name, outer)
    for b in builders:
        own = b.graph.parameters[: len(b.graph.parameters) - len(b.captures)]
        captured = {p.name: p for p in b.graph.parameters[len(own) :]}
        params = list(own)
        for name in order:
            params.append(captured.get(name) or b.graph.add_parameter(name))
        b.graph.parameters = params
    return list(order.values())


def _array_method_of_parameter(receiver: Constant, e) -> bool:
    """`self.w.sum()`, `self.w.abs()`: a method of a Parameter's value (read
    at run time, differentiated), not of the Parameter object (`set_data`)."""
    value = receiver.value
    return getattr(value, "__kt_parameter__", False) and not hasattr(type(value), e.func.attr)


def _is_constant_sequence(node: Node) -> bool:
    return isinstance(node, Constant) and isinstance(node.value, (tuple, list))


def _cells_of(node: Node) -> Node:
    """A container Cell (`CellList`, `SequentialCell`) as the constant tuple of
    its Cells, for a `for` loop to unroll; any other node as it is."""
    value = node.value if isinstance(node, Constant) else None
    if not hasattr(value, "construct"):
        return node
    if hasattr(type(value), "__iter__"):
        return Constant(tuple(value), node.debug, node.hint)
    if hasattr(type(value), "__getitem__") and hasattr(type(value), "__len__"):
        return Constant(tuple(value[k] for k in range(len(value))), node.debug, node.hint)
    return node


def _is_closure(node: Constant) -> bool:
    return isinstance(node.value, FuncGraph) and node.value.parent is not None


def _returns_on_every_path(s) -> bool:
    def ends(stmts):
        if not stmts:
            return False
        last = stmts[-1]
        if isinstance(last, gast.Return):
            return True
        return isinstance(last, gast.If) and ends(last.body) and ends(last.orelse)

    return ends(s.body) and ends(s.orelse)


def _as_load(target):
    return _with_ctx(target, gast.Load())


def _as_store(target):
    return _with_ctx(target, gast.Store())


def _with_ctx(target, ctx):
    node = copy.deepcopy(target)
    for n in gast.walk(node):
        if hasattr(n, "ctx"):
            n.ctx = gast.Load()
    node.ctx = ctx
    return node
