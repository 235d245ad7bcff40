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

Where each construct is parsed (`GraphBuilder` is assembled here from one
mixin per concern; this module keeps `parse`, `FunctionParser`, name
resolution, `apply`/`const`, the function prologue and the visitor dispatch):

- `frontend/statements.py`: `stmt_*` for defs, `return`, assignments
  (`=`, `+=`, annotated), expression statements, `pass`, `assert`, and
  `assign` (assignment targets);
- `frontend/control_flow.py`: `if`, `while`, `for` (`stmt_If`, `stmt_While`,
  `stmt_For`) and the closed subgraphs, outputs and carries they build;
- `frontend/expressions.py`: `expr_*` for operators, `and`/`or`,
  comparisons, `lambda`, `x if c else y`, literals, f-strings, names,
  attributes, subscripts and slices;
- `frontend/calls.py`: `expr_Call` and every kind of callee (`call`): user
  functions, methods, primitives, `functools.partial`, the `lax` models
  (`model_call`, `vmapped_call`), in-place list methods, argument binding
  (`bind_call`);
- comprehensions and iterable builtins `frontend/parse_sugar.py`, unpacking
  `frontend/unpacking.py`, `*args`/`**kwargs` signatures
  `frontend/signature.py`, nested defs and closures `frontend/closures.py`.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import types

import gast

from k_transform import ops
from k_transform import runtime as rt
from k_transform.cell import Parameter as CellParameter
from k_transform.cell import ParameterTuple
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend import callables, guards, lax_models, python_code, pytrees
from k_transform.frontend.calls import CallBuilder
from k_transform.frontend.cell_state import localize_self_attributes
from k_transform.frontend.closures import (
    ClosureScope,
    ClosureSite,
    closure_item,
    dict_closure_item,
    join_closures,
    site_of,
    thread_nonlocal_calls,
)
from k_transform.frontend.control_flow import ControlFlowBuilder
from k_transform.frontend.desugar import JumpLowering, assigned_names, loaded_names
from k_transform.frontend.expressions import ExpressionBuilder
from k_transform.frontend.mutation import NESTED_DEF_VARIABLE, check_mutations
from k_transform.frontend.parse_sugar import SugarBuilder
from k_transform.frontend.signature import Signature, SignatureBinding, signature_params
from k_transform.frontend.source import Source, is_user_function
from k_transform.frontend.statements import StatementBuilder
from k_transform.frontend.unpacking import UnpackingBuilder
from k_transform.ir.nodes import NO_DEBUG, Apply, Constant, FuncGraph, Node
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops.fold import fold, tuple_item, tuple_slice
from k_transform.protocol import kt_attribute

# Names the jump lowering introduces, with how generated code spells them.
_SPECIALS = {
    "_kt_undefined": (rt.UNDEFINED, "_rt.UNDEFINED"),
}

UNDEFINED = Constant(rt.UNDEFINED, hint="UNDEFINED")


def _holds_parameter(value, depth: int = 0) -> bool:
    """Whether `value` is a tuple, list, dict or ParameterTuple with a
    Parameter among its items (nested ones too)."""
    if depth > 8 or type(value) not in (tuple, list, dict, ParameterTuple):
        return False
    items = value.values() if isinstance(value, dict) else value
    return any(isinstance(v, CellParameter) or _holds_parameter(v, depth + 1) for v in items)


class _Unbound(Exception):
    """A local variable read before it is assigned."""


def parse(
    fn,
    bound_self=None,
    star_arity: int | None = None,
    primal_only: bool = False,
    writable: tuple[str, ...] = (),
) -> FuncGraph:
    """The FuncGraph of `fn` (with `self` fixed to `bound_self` for methods).

    `star_arity`: for a def with `*args`, the number of values the call puts
    in `args`. The graph is then specialised to it: `args` is still one tuple
    parameter, but the body sees a tuple of that many items, so `len(args)`,
    `args[:-1]` and `f(*args)` into library functions and the gradient API
    are known while parsing (MindSpore compiles a graph per input signature).

    `primal_only`: the graph is never differentiated (a JAX custom_vjp
    function's, whose K is its rule: `frontend.jax_custom`), so a call of a
    function value with keyword arguments may run as written
    (`prims.KeywordCall`); elsewhere it makes the function run as Python.

    `writable`: parameters the function may write into and return, for a
    call `d = f(d, ...)` whose `d` no other name sees (`CallBuilder.rebinding_call`).

    `fn` may be any callable: wrappers, partials, `jax.jit` functions and
    objects with a user `__call__` are read as `k_transform.frontend.callables`
    says (a library wrapper such as `jax.jit(f)` is read through `__wrapped__`;
    a wrapper written in Python is parsed as written).
    """
    if isinstance(fn, types.MethodType):
        fn, bound_self = fn.__func__, fn.__self__
    inner = callables.unwrap(fn)
    if inner is not fn and (bound_self is None or isinstance(inner, types.FunctionType)):
        return parse(inner, bound_self, star_arity, primal_only, writable)
    if not isinstance(fn, types.FunctionType):
        return parse_callable(fn, star_arity)
    if star_arity is not None and not fn.__code__.co_flags & inspect.CO_VARARGS:
        star_arity = None
    # ids: any function and any `self` will do. A Cell's `training` flag is
    # folded into its graph, so each mode has its own (MindSpore compiles per phase).
    training = getattr(bound_self, "training", None)
    key = (id(fn), id(bound_self), training, star_arity, primal_only, writable)
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
        parser.primal_only, parser.writable = primal_only, writable
        parser.build(graph)
    except BaseException:
        del _cache[key]
        raise
    graph.guards = parser.guards.guards()
    if bound_self is None and star_arity is None and not writable:
        graph.python_fn = fn  # what a library call given this function gets (DFunctor)
    return graph


def parse_callable(value, star_arity: int | None = None) -> FuncGraph:
    """The graph of a callable that is not a Python function nor a wrapper."""
    graph = kt_attribute(value, "__kt_graph__", None)
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
        self.primal_only = False  # (see `parse`)
        self.writable: tuple[str, ...] = ()  # (see `parse`)
        closure = fn.__closure__ or ()
        self.cells = {}
        for name, cell in zip(fn.__code__.co_freevars, closure, strict=True):
            try:
                self.cells[name] = cell.cell_contents
            except ValueError:
                continue  # an empty cell: unassigned in the enclosing function
        self.globals = fn.__globals__
        self.guards = guards.Recorder()  # the names read, so a rebinding is seen
        self.guards.read_function(fn)  # its defaults (a partial's keywords)
        # Names the functions it runs as Python may rebind (`guards.rebinds`),
        # with the node naming such a function, for the message.
        self.rebinds: dict[tuple[int, str | None], tuple[str, object, str]] = {}
        # Nodes whose ids key closure bindings: held, so no id is reused meanwhile.
        self.held: list = []

    def error(self, what: str, node) -> KTransformError:
        return KTransformError(what, self.source.debug(node))

    def outer_name(self, name: str) -> str:
        """What `name`, not local to the function parsed, is: a variable of
        the enclosing function (a closure cell), else a global of its module."""
        if name in self.fn.__code__.co_freevars:
            scopes = self.fn.__qualname__.split(".<locals>.")
            enclosing = scopes[-2] if len(scopes) > 1 else "an enclosing function"
            return f"a variable of the enclosing function `{enclosing}`"
        if name in self.globals:
            return f"a global of the module {self.globals.get('__name__', '?')!r}"
        return f"{NESTED_DEF_VARIABLE} `{self.fn.__qualname__}`"  # a nested def's

    def unsupported(self, construct: str, node) -> KTransformError:
        """The error for a construct the parser has no model of: a plain
        function using it runs as Python instead (`python_code`)."""
        exc = self.error(f"{construct} is not supported by k_transform", node)
        exc.construct = construct
        return exc

    def build(self, graph: FuncGraph) -> None:
        tree = self.source.tree
        builder = GraphBuilder(self, graph, None, closed=False, fdef=tree)
        builder.build_function(tree, self.bound_self)
        graph.rebinds = self.rebinds
        self.check_rebinds(graph)

    def check_rebinds(self, graph: FuncGraph) -> None:
        """Refuse a function that reads a global or closure name which a
        function it calls, run as Python, may rebind (`global SCALE`): the
        graph holds the value read at transform time, Python reads it again."""
        rebound = {}
        for g in graph.reachable():
            rebound.update(g.rebinds)
        names = guards.rebound_reads(graph, self.guards, {k: v[0] for k, v in rebound.items()})
        if names:
            name, node, fn_name = next(v for v in rebound.values() if v[0] == names[0])
            raise self.unsupported(
                f"reading the name {name!r}, which `{fn_name}` (run as Python) may rebind,", node
            )

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
        # Python fails only if this line runs (it may sit in a branch that never
        # does): the function runs as Python (`python_code`), or is refused.
        exc = self.error(f"name {name!r} is not defined", node)
        exc.construct = f"the undefined name {name!r}"
        raise exc

    def value_node(self, value, hint: str, node) -> Constant:
        """A Python value as a node: user functions become graphs (k_transform's
        own API functions, marked `__kt_static__` or `__kt_lower__`, stay values:
        see `call`)."""
        api = (
            kt_attribute(value, "__kt_static__", False)
            or kt_attribute(value, "__kt_lower__") is not None
        )
        api = api or pytrees.is_replace(value)  # a primitive (`call`)
        model = lax_models.fixed_model(value)  # lax.scan, lax.while_loop, ...: Python
        if model is not None:
            return Constant(parse(model), self.source.debug(node), hint)
        if is_user_function(value) and not api and python_code.reason(value) is None:
            try:
                return Constant(parse(value), self.source.debug(node), hint)
            except KTransformError as exc:  # run as Python, if it can be (python_code)
                if not python_code.runs_as_python(value, exc):
                    python_code.defer(value, exc)  # raised where it is called
        if is_user_function(value) and not api:  # run as Python: it may rebind names
            for key, name in guards.rebinds(value).items():
                self.rebinds.setdefault(key, (name, node, hint))
        return Constant(value, self.source.debug(node), hint)


class GraphBuilder(
    StatementBuilder,
    ControlFlowBuilder,
    ExpressionBuilder,
    CallBuilder,
    ClosureScope,
    SugarBuilder,
    UnpackingBuilder,
    SignatureBinding,
):
    """Builds one FuncGraph; `closed` graphs capture enclosing reads as params."""

    parse = staticmethod(parse)  # for the mixins, which cannot import this module

    def __init__(self, fp: FunctionParser, graph, parent, closed: bool, fdef):
        self.fp = fp
        self.graph = graph
        self.parent = parent
        self.closed = closed
        self.vars: dict[str, Node] = {}
        self.captures: dict[str, Node] = {}  # name -> outer node (closed graphs)
        # a loop body's parameter -> the enclosing value it starts as (a carried
        # variable), or ("items", seq) for the item of `for v in seq`
        self.entry_values: dict[Node, object] = {}
        self.fdef = fdef  # the gast FunctionDef this graph's function comes from
        self.locals = parent.locals if closed else set()
        self.load_counts = parent.load_counts if closed else None
        self.returned = False
        self.raised = False  # a `raise` ended this block
        self.loop_live: set[str] = set(parent.loop_live) if closed else set()
        self.nonlocals: tuple[str, ...] = parent.nonlocals if closed else ()
        self.defaults_given: dict[str, Node] | None = None  # a nested def's, from its site
        self.escaped: dict[int, list] = {}  # node id -> closures that left a subgraph
        self.rebound_by_writers: set[tuple] = set()  # `CallBuilder.rebinding_call`'s, done

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

    def refuse_star_function_values(self, values, node, how: str = "passed as an argument") -> None:
        """Refuse a def with `*args` given as an argument to a function (a
        user function, a model, a value known when run) or returned (also in
        a tuple, list or dict): its graph takes `*args` as one tuple
        parameter, which only a call the parser binds (`bind_signature`)
        packs; one called where the program runs would bind its positional
        arguments one by one (`g(x, y)`: the tuple parameter is `y`), a wrong
        value with no error. Refused, a plain function runs as Python."""
        for a in values:
            graph = a.value if isinstance(a, Constant) else None
            sig = graph.signature if isinstance(graph, FuncGraph) else None
            if sig is not None and sig.vararg is not None:
                raise self.fp.unsupported(
                    f"the function {graph.name!r}, which takes `*{sig.vararg}`, {how} "
                    "(to be called where the program runs)",
                    node,
                )
            maker = a.fn.value if isinstance(a, Apply) and isinstance(a.fn, Constant) else None
            if isinstance(maker, (prims.MakeTuple, prims.MakeList, prims.MakeDict)):
                self.refuse_star_function_values(a.args, node, how)

    def apply(self, prim, *args: Node, node=None) -> Node:
        """`prim(*args)`, folded to a constant when it is static."""
        folded = fold(prim, args)
        if folded is not None:
            return folded
        if isinstance(prim, prims.GetItem):
            item = tuple_item(*args) or closure_item(*args) or dict_closure_item(*args)
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
        if not isinstance(fn.value if isinstance(fn, Constant) else None, Primitive):
            args = tuple(self.passable(a, node) for a in args)  # `helper(<JAX's grad>(f), x)`
            self.refuse_star_function_values(args, node)
        debug = self.debug(node) if node is not None else NO_DEBUG
        args = tuple(self.parameters_read(a, debug) for a in args)
        made = self.graph.apply(fn, *args, debug=debug)
        made.calls_value = not isinstance(fn, Constant)  # (see `Apply`)
        return made

    def parameters_read(self, arg: Node, debug) -> Node:
        """`arg`, or where it is a constant tuple, list or dict holding
        Parameters (`self.ws = (self.a, self.b)`), the node building it from
        its items, each read as a Parameter. As one constant it reached run
        time as the Parameter objects: `self.ws[k]` with `k` known only then
        read the value it had when compiled, and its gradient was silently
        zero. (Indexing by a constant folds to the Parameter before this.)"""
        if not (isinstance(arg, Constant) and _holds_parameter(arg.value)):
            return arg
        value, hint = arg.value, arg.hint

        def item(v, at) -> Node:
            return self.parameters_read(Constant(v, debug, f"{hint}[{at!r}]"), debug)

        if isinstance(value, dict):
            kv = [n for k, v in value.items() for n in (Constant(k), item(v, k))]
            return self.graph.apply(Constant(prims.MakeDict(), hint="make_dict"), *kv, debug=debug)
        prim = prims.MakeList() if isinstance(value, list) else prims.MakeTuple()
        items = [item(v, k) for k, v in enumerate(value)]
        return self.graph.apply(Constant(prim, hint=prim.name), *items, debug=debug)

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
        thread_nonlocal_calls(fdef, self.fp.unsupported)
        JumpLowering(self.fp.unsupported).lower_function(fdef)
        constants = {params[0].id} if bound_self is not None and params else set()
        self.shared = check_mutations(
            fdef,
            [a.id for a in params],
            self.fp.error,
            constants,
            self.fp.unsupported,
            self.fp.outer_name,
            self.fp.writable if self.parent is None else (),
            line=lambda node: self.debug(node).line,
        )
        for name, node in self.shared.not_none.items():
            d = self.debug(node)
            where = f"`{gast.unparse(node).strip()}` ({d.file}, line {d.line})"
            self.graph.changed_parameters[name] = ("not None", where, self.graph.name)
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

    # -- dispatch ------------------------------------------------------------------
    def _visit(self, node, prefix: str, unsupported: dict, what: str):
        """Dispatch to the `stmt_*` / `expr_*` method for `node`'s syntax."""
        kind = type(node)
        if kind in unsupported:
            raise self.fp.unsupported(f"`{unsupported[kind]}`", node)
        method = getattr(self, prefix + kind.__name__, None)
        if method is None:
            raise self.fp.unsupported(f"the {what} `{kind.__name__}`", node)
        return method(node)


def _is_closure(node: Constant) -> bool:
    return isinstance(node.value, FuncGraph) and node.value.parent is not None
