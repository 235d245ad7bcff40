"""The DFunctor: K(FuncGraph) -> fprop graph returning `(result, bprop)`.

For a graph `g` with parameters `p1..pn`, `K(g)` is a graph `g_fprop` with the
same parameters whose output is `(result, g_bprop)`; `g_bprop(dout)` is a
closure (a child graph of `g_fprop`) returning `(env, d_p1, ..., d_pn)`.

MapParamObject: each parameter of `g` becomes the matching parameter of
`g_fprop` (values are their own K-values: arrays stay arrays).

MapFvObject: a free variable of `g` (owned by an enclosing graph `h`) maps to
the K-value computed in `h_fprop`, read by closure. Its gradient leaves
`g_bprop` in `env`, a dict from free-variable keys to gradients; `h_bprop`
takes the entries of its own nodes out of the env it collected (env_get) and
passes the rest upward. The gradient of a function value *is* its env.
Keys are text derived from the owning graph and the node's place in it
(`fv_key`: `'<graph>@<file>:<line>:<name>'`, the file as `where=` shows it,
relative to its `sys.path` entry), a `kt.Parameter`'s key is
`param_key(<parameter>)`: generated source never depends on what was
transformed before. An env that collects nothing is never built: the bprop
returns the shared `EMPTY_ENV`, and adding to an empty env is the addend.

MapValueObject: a Primitive constant becomes its fprop graph (when it flows
as a value), a FuncGraph constant becomes K of that graph (memoized, so
recursion terminates), a `kt.Parameter` a `read_param` whose gradient goes to
the env under the parameter's key; other constants stay. A graph with a rule
of its own (a user's JAX custom_vjp or custom_jvp, `frontend/jax_custom.py`)
becomes the fprop of its rule instead (`own_fprop`: the one written for it,
or the transpose of its jvp rule, `_transposed_rule`); a call of it that no
active input reaches stays the call, its rule met where K of the graph
holding the call differentiates it (one order up).

MapMorphism: each Apply `y = f(a, b)` of `g`, in program order:
- `f` a primitive: `y = f(a, b)` in `g_fprop`; in `g_bprop` the registered
  rule is inlined, `(da, db) = rule(a, b, y, dy)`, each gradient checked
  against its input's shape;
- a library call with no primitive (`prims.imports_jaxpr`): `(y, bp) =
  LibraryK(call)(K(a), K(b))`, a run-time object that imports the call's
  jaxpr at trace time and runs K of it (`k_transform.traced.TracedCallK`);
- anything else (a user function, a closure value, a control primitive):
  `(y, bp) = K(f)(K(a), K(b))` in `g_fprop`, `(d_f, da, db) = bp(dy)` in
  `g_bprop`, with `d_f` added to the env (or to `f`'s own sensitivity when
  `f` is a value computed in `g`).
The backward pass visits only nodes whose sensitivity is non-zero, in reverse
program order; contributions are summed with `add_grad`. Parameters that
receive nothing get zeros of their shape and dtype. What may get a
sensitivity is found item by item (`liveness`): a node only unread items of
a tuple, a dict or a NamedTuple depend on is not differentiated, and a call
(of a graph, a value, a library function) or a `switch` whose result is read
only in part is K'd for the items read (`DFunctor.used_items`), so an unread
item sends no zero cotangent to meet an infinite slope (`0 * inf`); so is a
graph given to a helper that calls it (`calls_read`), and the body of a
loop, for the carries the loop's result and its iterations read
(`loop_carries`: a carried diagnostic no one reads sends nothing); a
closure's reads count for the items of them it reads (`_closure_reads`),
and those of a closure only called, for the items of its results read
(`_called_closures`); a graph with a twin is read as that twin, which K
differentiates (a loop's K, at second order).

Passive K (`k_graph(g, wrt_inputs=False)`, built by double reverse): `g`'s own
inputs are constants and only the parameters of the closures it builds (its
bprop's `dout`) are differentiated; a node no active input reaches gets no
sensitivity (activity analysis, `DFunctor.is_active`). A gradient w.r.t. some
of `g`'s inputs (`wrt_inputs` a tuple of flags) makes the others constants so:
their gradients are never computed, so a second order cannot meet what they
would hold (`0 * inf` where `log1p(-y)` is infinite at a label `y` of 1).
So does a call of a graph given constants (`loss(logits, LABELS)`): K of the
callee is made for that call's flags (`CallFlags`, `DFunctor.call_k`), with
Parameters, functions and Cells kept active.

For codegen, a node's total sensitivity records the K-value it is the
gradient of (`sens_of`: emitted `d_<its name>`), and tuples it builds or
calls for (`(result, bprop)` pairs, bprop results) their `tuple_arity`, so
they are unpacked by name; both hints carry over when K-graphs are
transformed again.

The DFunctor is a graph-to-graph step: it imports the IR, the primitives,
control flow and the rule registry, never the frontend or codegen
(`tests/test_layout.py`). What it needs from above, the layer that joins
them installs at import (`install`, called by `k_transform.traced`): the
parser for rule graphs, K of a library call at trace time, and which
functions the parser reads only where they are called. Its caches are
tables of `context.TRANSFORM` (memoized K-graphs, env-key labels).
"""

from __future__ import annotations

import types

from k_transform.bprop_registry.helpers import NotDifferentiable
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.context import TRANSFORM
from k_transform.control import k_loops as loops
from k_transform.control import prims as control
from k_transform.control.prims import ControlPrimitive
from k_transform.control.runtime import shown_where
from k_transform.dfunctor.builder import Builder, new_graph
from k_transform.dfunctor.inline import inline, outputs
from k_transform.dfunctor.liveness import (
    Mask,
    builder_keys,
    mask_of,
    masked,
)
from k_transform.dfunctor.reads import (
    calls_read,
    has_rule,
    holds_no_gradient,
    is_bprop_node,
    live_with_closures,
    loop_carries,
    may_read,
    output_mask,
)
from k_transform.dfunctor.rule_linearity import not_linear_in
from k_transform.dfunctor.services import (  # noqa: F401 (install, the Ks: re-exported)
    SERVICES,
    DynamicK,
    LibraryK,
    install,
)
from k_transform.errors import KTransformError
from k_transform.ir.nodes import (
    NO_DEBUG,
    Apply,
    Constant,
    DebugInfo,
    FuncGraph,
    Node,
)
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.ops.mapping import primitive_for_value
from k_transform.ops.state import Assign
from k_transform.protocol import kt_attribute


def k_graph(
    graph: FuncGraph,
    wrt_inputs: bool | tuple[bool, ...] = True,
    out_used: Mask = None,
) -> FuncGraph:
    """K(graph): the fprop graph of a top-level graph. `wrt_inputs=False`
    differentiates only the parameters of the closures `graph` builds (a
    bprop's `dout`), not `graph`'s own inputs; a tuple of flags, only the
    inputs flagged (a gradient w.r.t. some of them: the others' gradients
    are zeros, never computed; see `DFunctor.is_active`). `out_used`: the
    only items of `graph`'s tuple result whose cotangents may be non-zero
    (`DFunctor.used_items`)."""
    if isinstance(wrt_inputs, tuple):
        passive = False if all(wrt_inputs) else wrt_inputs
    else:
        passive = not wrt_inputs
    return _functor(graph, None, passive, out_used).fprop


def _functor(
    graph: FuncGraph,
    parent: DFunctor | None,
    passive: bool | tuple[bool, ...] = False,
    out_used: Mask = None,
) -> DFunctor:
    passive = parent.passive if parent is not None else passive
    out_used = output_mask(graph, out_used)
    # a closure's K is made in its parent's: once for each K of the graphs around it
    made_for = (*(parent.made_for if parent is not None else ()), out_used)
    key = (graph.uid, passive, isinstance(passive, CallFlags), made_for)
    functors = TRANSFORM.cache("dfunctor.functors")
    if key not in functors:
        functor = DFunctor(graph, parent, passive, out_used)
        functors[key] = functor  # before running: recursion finds it
        try:
            functor.run()
        except BaseException:
            del functors[key]
            raise
    return functors[key]


def fv_key(node: Node) -> str:
    """The env key of a node that is a free variable somewhere.

    Derived from the owning graph and the node's place in it, never from
    what was transformed before: `<graph>@<file>:<line>:<name>`, with `#k`
    for the k-th earlier node of that graph carrying the same name.
    """
    keys = TRANSFORM.weak_keys("dfunctor.env_keys")  # node -> env key
    if node not in keys:
        graph = node.graph
        name = _key_name(node)
        same = [n for n in [*graph.parameters, *graph.nodes] if _key_name(n) == name]
        position = next((k for k, n in enumerate(same) if n is node), 0)
        suffix = f"#{position}" if position else ""
        keys[node] = f"{_graph_label(graph)}:{name}{suffix}"
    return keys[node]


def _key_name(node: Node) -> str:
    return getattr(node, "name", "") or node.debug.name or "v"


def _graph_label(graph: FuncGraph) -> str:
    """`<name>@<file>:<line>`, the file as `where=` shows it (relative to
    its `sys.path` entry: never a machine's path), so that graphs of two
    files never share a label; unique among the live graphs (a copy, or a
    graph of another file shown alike, adds `~k`). A label does not depend on
    what was transformed before from another file."""
    labels = TRANSFORM.weak_keys("dfunctor.labels")  # graph -> key prefix
    owners = TRANSFORM.weak_values("dfunctor.label_owners")  # prefix -> graph
    if graph not in labels:
        debug = graph.debug
        where = shown_where(f"{debug.file}:{debug.line}")
        if not debug.line:
            where = where.rpartition(":")[0] or debug.file
        base = label = f"{graph.name}@{where}"
        copy = 1
        while owners.get(label) is not None:
            label, copy = f"{base}~{copy}", copy + 1
        owners[label] = graph
        labels[graph] = label
    return labels[graph]


def param_key(param) -> structural.ParamKey:
    """The env key of a `kt.Parameter`'s gradient (shown as `param_key(<name>)`)."""
    return structural.ParamKey(param)


def _is_param(value) -> bool:
    return kt_attribute(value, "__kt_parameter__", False)


def _may_assign(node: Apply) -> bool:
    """Whether `node` may assign a Parameter (`ops.Assign`, or a call of a
    graph or loop that does; a call of a function value: perhaps)."""
    if not isinstance(node.fn, Constant):
        return True
    fn = node.fn.value
    if isinstance(fn, Assign):
        return True
    values = [fn, *(a.value for a in node.args if isinstance(a, Constant))]
    return any(_graph_assigns(g) for g in values if isinstance(g, FuncGraph))


def _graph_assigns(graph: FuncGraph) -> bool:
    assigning = TRANSFORM.weak_keys("dfunctor.assigning")
    if graph not in assigning:
        assigning[graph] = False  # recursion: assume not, until found
        assigning[graph] = any(_may_assign(n) for n in graph.nodes)
    return assigning[graph]


def _has_gradient(value) -> bool:
    """Constants whose gradient matters: closures (their env), Parameters,
    and objects that hold Parameters (`holds_params`)."""
    return isinstance(value, FuncGraph) or _is_param(value) or holds_params(value)


def holds_params(value, budget: int = 2000) -> bool:
    """Whether the constant `value` is an object (a Cell), a list, tuple or
    dict that holds Parameters in its attributes or items, looked for over at
    most `budget` values: given to a function, its gradient is an env of
    theirs (`runtime.state.param_env`)."""
    stack, seen = [value], set()
    while stack and budget > 0:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        budget -= 1
        if _is_param(v):
            return True
        if isinstance(v, _NO_PARAMS) or hasattr(v, "shape"):
            continue
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        else:
            attrs = getattr(v, "__dict__", None)
            stack.extend(attrs.values() if isinstance(attrs, dict) else ())
    return False


# Values that hold no Parameters of the program (functions are parsed: the
# Parameters they read are constants there)
_NO_PARAMS = (
    FuncGraph,
    Primitive,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    str,
    bytes,
    int,
    float,
    complex,
)


class CallFlags(tuple):
    """Which inputs of a called graph may carry a gradient at a call site
    (`DFunctor.call_k`): the others are constants there (a number, an array
    the program holds), their gradients zeros never computed. Unlike a top
    graph's flags (`k_graph`), Parameters, functions and the objects that
    hold Parameters stay active: the caller may want their gradients."""


def _plain_data(value, budget: int = 64) -> bool:
    """A constant no gradient can reach: a number, a string, None, an array
    (not a `kt.Parameter`), or a small tuple, list or dict of such."""
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return len(items) <= budget and all(_plain_data(v, budget // 2) for v in items)
    if _is_param(value) or callable(value):
        return False
    return isinstance(value, (bool, int, float, complex, str, bytes, type(None))) or (
        hasattr(value, "shape") and hasattr(value, "dtype")
    )


class DFunctor:
    """Builds K of one graph; see the module docstring."""

    def __init__(
        self,
        primal: FuncGraph,
        parent: DFunctor | None,
        passive: bool | tuple[bool, ...] = False,
        out_used: Mask = None,
    ):
        self.primal = primal
        self.parent = parent
        # the top graph's inputs (all, or those a tuple does not flag) are constants
        self.passive = passive
        self.out_used = out_used  # the items of the result a caller reads (None: all)
        # the `out_used` of this K and of the K-graphs around it (`_functor`'s key)
        self.made_for = (*(parent.made_for if parent is not None else ()), out_used)
        self._live: dict[int, Mask] | None = None  # `_may_get_sens`
        self._captured: set[int] = set()  # `_captured_nodes`
        self.active: set[int] = set()  # passive: primal nodes that depend on an active input
        self._active_closures: dict[int, bool] = {}
        fparent = parent.fprop if parent is not None else None
        self.fprop = FuncGraph(f"{primal.name}_fprop", fparent, primal.debug, "fprop")
        self.bprop = FuncGraph(f"{primal.name}_bprop", self.fprop, primal.debug, "bprop")
        self.fprop.param_names = [p.name for p in primal.parameters]
        self.fprop.k_order = primal.k_order + 1
        self.fprop.k_primal = primal
        self.k: dict[int, Node] = {}  # primal node -> its K-value in fprop
        self.bp: dict[int, Node] = {}  # primal Apply -> its bprop closure (calls)
        self.sens: dict[int, list[Node]] = {}
        # node -> (debug of its last read, {(type, index): gradients of node[index]}): `_items_grad`
        self.items: dict[int, tuple[DebugInfo, dict[tuple, list[Node]]]] = {}
        self.env: Node | None = None  # the env being collected in bprop (None: empty)
        self.param_reads: dict[int, Node] = {}  # Parameter -> its read in fprop (since an Assign)
        self.k_args: dict[int, list[Node]] = {}  # primitive node -> its inputs' K-values

    # -- forward ------------------------------------------------------------
    def run(self) -> None:
        for p in self.primal.parameters:
            self.k[id(p)] = self.fprop.add_parameter(p.name, p.debug)
        defaults = self.primal.defaults
        # Constant defaults carry over; a default computed by an enclosing
        # function (or a closure) is only used by dynamic calls, which pass
        # all arguments.
        self.fprop.defaults = {
            name: self.kval(node)
            for name, node in defaults.items()
            if isinstance(node, Constant) and not isinstance(node.value, FuncGraph)
        }
        if self.passive:
            self._find_active()
        for node in self.primal.nodes:
            self.map_morphism(node)
            if self.param_reads and _may_assign(node):  # later reads see the new value
                self.param_reads.clear()
        result = self.kval(self.primal.output)
        self.fprop.output = self.fprop.apply(
            _const(prims.MakeTuple()), result, Constant(self.bprop, hint=self.bprop.name)
        )
        self.backward()

    # -- activity -------------------------------------------------------------
    def _find_active(self) -> None:
        """Passive K (`k_graph(g, wrt_inputs=False)`, what double reverse
        builds): the top graph's inputs and `kt.Parameter`s are constants; a
        closure's parameters are active, and so is every node an active node
        reaches (a closure value is active when it reads an active node).
        Inactive nodes get no sensitivity: the second bprop of a jvp computes
        `d dout` alone, not the gradients of the residuals it never reads."""
        if self.parent is not None:
            self.active |= {id(p) for p in self.primal.parameters}
        elif isinstance(self.passive, tuple):
            flags = zip(self.primal.parameters, self.passive, strict=True)
            self.active |= {id(p) for p, active in flags if active}
        called = isinstance(self.passive, CallFlags)
        while True:  # to a fixed point: a closure may be used before a node it reads is defined
            found = len(self.active)
            self._active_closures.clear()
            for node in self.primal.nodes:
                reads = node.args if holds_no_gradient(node.fn) else node.inputs
                if id(node) not in self.active and (
                    any(self.is_active(i) for i in reads) or (called and may_read(node))
                ):
                    self.active.add(id(node))
            if len(self.active) == found:
                return

    def is_active(self, node: Node) -> bool:
        """Whether `node` may depend on a differentiated input (always, unless passive)."""
        if not self.passive:
            return True
        if isinstance(node, Constant):
            value = node.value
            if isinstance(self.passive, CallFlags):  # (see CallFlags)
                return not _plain_data(value)
            return isinstance(value, FuncGraph) and self._closure_is_active(value)
        owner = self
        while owner is not None and owner.primal is not node.graph:
            owner = owner.parent
        return owner is None or id(node) in owner.active

    def _closure_is_active(self, graph: FuncGraph) -> bool:
        if graph.uid not in self._active_closures:
            self._active_closures[graph.uid] = any(
                self.is_active(v) for v in graph.free_variables()
            )
        return self._active_closures[graph.uid]

    def kval(self, node: Node) -> Node:
        """The K-value of a primal node, as seen from this fprop graph."""
        if isinstance(node, Constant):
            return self.map_value(node)
        owner = self
        while owner.primal is not node.graph:
            owner = owner.parent
            if owner is None:
                raise KTransformError(f"internal: {node!r} is outside the graphs being mapped")
        return owner.k[id(node)]

    def map_value(self, node: Constant, out_used: Mask = None) -> Node:
        """The K-value of a constant; of a graph, K of it made for the items
        `out_used` of its result (a branch of a `switch`: `used_items`)."""
        value = node.value
        if isinstance(value, FuncGraph):
            value = value.differentiable()
            if own_fprop(value) is not None:  # its own rule (frontend/jax_custom.py)
                return Constant(value.custom_fprop, node.debug, node.hint)
            # A closed graph (no free variables) needs no enclosing K-graph.
            closure = value.parent is not None and value.free_variables()
            parent = self._functor_of(value.parent) if closure else None
            fprop = _functor(value, parent, out_used=out_used).fprop
            return Constant(fprop, node.debug, node.hint)
        if isinstance(value, ControlPrimitive):
            return node
        if isinstance(value, LibraryK):  # K of K of an imported call: one order up
            higher = value.k()
            return Constant(higher, node.debug, higher.hint)
        if not isinstance(value, Primitive):
            value = primitive_for_value(value) if callable(value) else None
            if value is None:
                return self._map_plain(node)
        return Constant(prim_fprop(value, node.debug), node.debug, node.hint)

    def _map_plain(self, node: Constant) -> Node:
        if SERVICES.is_modelled(node.value):
            name = getattr(node.value, "__name__", "it")
            raise KTransformError(
                f"`{name}` used as a value in differentiated code: k_transform reads it "
                f"only where it is called (`{name}(...)`), so pass a function that calls it",
                node.debug,
            )
        if not _is_param(node.value):
            return node
        p = node.value
        if id(p) not in self.param_reads:  # one read per graph, in the forward pass
            read = structural.ReadParam(p, param_key(p))
            self.param_reads[id(p)] = self.fprop.apply(_const(read), debug=node.debug.named(p.name))
        return self.param_reads[id(p)]

    def _functor_of(self, graph: FuncGraph) -> DFunctor:
        owner = self
        while owner is not None and owner.primal is not graph:
            owner = owner.parent
        if owner is None:
            raise KTransformError(f"internal: closure {graph.name} used outside its parent")
        return owner

    def map_morphism(self, node: Apply) -> None:
        fn = node.fn.value if isinstance(node.fn, Constant) else None
        args = [self.kval(a) for a in node.args] if not isinstance(fn, ControlPrimitive) else []
        if has_rule(fn) and not self.is_active(node):
            # A function with its own rule called on constants (a JAX custom_jvp's
            # rule calling the function itself, in its K w.r.t. the tangents): the
            # call as written, no fprop (that would run K of the rule again, and
            # again); its rule is met where K of this graph differentiates it.
            args = _own_functions(node.args, args, node.debug)
            self.k[id(node)] = self.fprop.apply(node.fn, *args, debug=node.debug)
            self._copy_hints(node)
            return
        if prims.imports_jaxpr(fn):  # K deferred to trace time (LibraryK)
            # A function given to the library (to call, or to keep) is the user's
            # own, not its fprop: a constant takes no gradient, and the library's
            # jaxpr, differentiated as a whole, holds what its calls compute.
            args = _given(node.args, args)
            k1 = SERVICES.library_k(
                fn, 1, node.debug, self.used_items(node), active=self.call_flags(node)
            )
            traced = Constant(k1, node.debug, k1.hint)
            pair = self.fprop.apply(traced, *args, debug=node.debug)
        elif isinstance(fn, Primitive) and not isinstance(fn, ControlPrimitive):
            self.k_args[id(node)] = args  # its rule reads the same (a Parameter's read then)
            self.k[id(node)] = self.fprop.apply(node.fn, *args, debug=node.debug)
            self._copy_hints(node)
            return
        elif isinstance(fn, ControlPrimitive):
            # Graph slots: K-graphs where the gradient needs them, else primal;
            # a loop's body K'd for the carries read (`loop_carries`): no unread
            # carry sends a zero cotangent into an infinite slope.
            carries = None if fn.k_of_graphs else loop_carries(node, self.used_items(node))
            args = [
                self.map_value(a, carries)
                if carries is not None and k == fn.graph_slots[-1]
                else self.kval(a)
                if k in fn.k_slots or k not in fn.graph_slots
                else a
                for k, a in enumerate(node.args)
            ]
            if isinstance(fn, control.WhileLoop) and _calls_values(node.args[0].value):
                # The condition runs on K-values: a function it is passed is an
                # fprop there, so it runs as the result of K(cond).
                args[0] = Constant(_result_of(self.kval(node.args[0]).value), node.debug)
            # K of a switch is a switch of K-graphs (made for the items of its
            # result the program reads); K of a loop, a graph of loops
            # (`control.k_loops`: a forward loop recording carries, a reverse one).
            if fn.k_of_graphs:
                used = self.used_items(node)
                if used is not None:
                    args = [
                        self.map_value(a, used)
                        if k in fn.k_slots and isinstance(a, Constant)
                        else args[k]
                        for k, a in enumerate(node.args)
                    ]
                pair = self.fprop.apply(node.fn, *args, debug=node.debug)
            else:
                graphs = [args[k].value for k in fn.graph_slots]
                body = node.args[fn.graph_slots[-1]].value  # the primal body
                replays = not isinstance(body, FuncGraph) or body.may_call_host()
                loop_k = loops.k_of(fn, graphs, len(args), node.debug, replays)
                pair = self.fprop.apply(Constant(loop_k, node.debug), *args, debug=node.debug)
        elif isinstance(fn, DynamicK) or not (
            isinstance(node.fn, Constant) or is_bprop_node(node.fn)
        ):
            # A call of a run-time value: its K decides when it runs (DynamicK);
            # K of that call (a higher order) is the same, one order up. A bprop
            # this DFunctor made (`k_function`) is called as it is.
            callee, args = (args[0], args[1:]) if fn is not None else (self.kval(node.fn), args)
            used = self.used_items(node)
            dyn = fn.k(used) if fn is not None else SERVICES.dynamic_k(1, node.debug, used)
            dyn_node = Constant(dyn, node.debug, "call_fprop")
            pair = self.fprop.apply(dyn_node, callee, *args, debug=node.debug)
        else:
            if isinstance(fn, LibraryK):  # a library call K made: given the same functions
                args = _given(node.args, args)
            elif isinstance(fn, FuncGraph) and (
                own_fprop(fn.differentiable()) is not None or fn.is_custom_fprop
            ):  # (a custom fprop differentiated: one order up, the same functions)
                args = _own_functions(node.args, args, node.debug)
            else:
                args = self._functions_given(node, fn, args)
            pair = self.fprop.apply(self.call_k(node, fn), *args, debug=node.debug)
        pair.tuple_arity = 2
        self.k[id(node)] = self._item(self.fprop, pair, 0, node.debug)
        self._copy_hints(node)
        if isinstance(fn, ControlPrimitive):  # the tuple of results of a branch or loop
            self.k[id(node)].tuple_arity = fn.result_arity(node.args) or -1
        self.bp[id(node)] = self._item(self.fprop, pair, 1, NO_DEBUG.named("bp"))
        self.bp[id(node)].k_function = True  # generated code, at every order

    def call_k(self, node: Apply, fn) -> Node:
        """K of the graph `node` calls, differentiated only w.r.t. the
        arguments that may carry a gradient here (`CallFlags`): an input
        the call gives a constant (`loss(logits, LABELS)`) gets zeros, never
        computed. A second order then cannot meet what its gradient would
        hold: `0 * inf` where `log1p(-y)` is infinite at a label `y` of 1,
        NaN where JAX, whose zero tangents are symbolic, has a number."""
        if isinstance(fn, LibraryK):  # K of K of an imported call: one order up
            higher = fn.k(self.used_items(node), self.call_flags(node))
            return Constant(higher, node.fn.debug, higher.hint)
        graph = fn.differentiable() if isinstance(fn, FuncGraph) else None
        if graph is None or own_fprop(graph) is not None:
            return self.kval(node.fn)
        if graph.parent is not None and graph.free_variables():  # K inside its parent's
            used = output_mask(graph, self.used_items(node))
            if used is None or graph is not fn:
                return self.kval(node.fn)
            fprop = _functor(graph, self._functor_of(graph.parent), out_used=used).fprop
            return Constant(fprop, node.fn.debug, node.fn.hint)
        if len(node.args) != len(graph.parameters):
            return self.kval(node.fn)
        flags = self.call_flags(node)
        used = output_mask(graph, self.used_items(node))
        if all(flags) and used is None:
            return self.kval(node.fn)
        passive = False if all(flags) else CallFlags(flags)
        fprop = _functor(graph, None, passive, used).fprop
        return Constant(fprop, node.fn.debug, node.fn.hint)

    def call_flags(self, node: Apply) -> tuple[bool, ...]:
        """Which arguments of the call `node` may carry a gradient: not a
        constant the program holds (a number, an array), nor a node no
        differentiated input reaches (`CallFlags`)."""
        return tuple(
            not _plain_data(a.value) if isinstance(a, Constant) else self.is_active(a)
            for a in node.args
        )

    def _functions_given(self, node: Apply, fn, args: list[Node]) -> list[Node]:
        """`args` (K-values), with each graph given to the graph `fn` (a
        lambda or def: `apply(g, x)`, `apply` calling `g(x)[0]`) K'd for the
        items of its result that `fn`'s calls of it read (`calls_read`), as
        K of a call of it here is (`call_k`): an item no one reads then sends
        no cotangent (`0 * inf` at `log(0)`'s slope), also for a closure over
        this graph's values, which the call of it at run time cannot K again."""
        graph = fn.differentiable() if isinstance(fn, FuncGraph) else None
        if graph is None or len(node.args) != len(graph.parameters):
            return args
        out_used = output_mask(graph, self.used_items(node))
        given = list(args)
        for k, a in enumerate(node.args):
            value = a.value if isinstance(a, Constant) else None
            if isinstance(value, FuncGraph) and own_fprop(value.differentiable()) is None:
                mask = calls_read(graph, k, out_used)
                if mask is not None:
                    given[k] = self.map_value(a, mask)
        return given

    def used_items(self, node: Apply) -> Mask:
        """The items of `node`'s value that may get a sensitivity, where the
        program reads only some at constant keys (`coef, _, _, _ =
        lstsq(a, y)`, `d["s"]`, `nt.total`; a `liveness.Mask`): K of a call
        of a graph, a value or a library function, or of a `switch`, is made
        for them, and gives the others no cotangent, not zeros. Else None
        (all of it; or none, for a node that gets no sensitivity: its bprop
        is never called).
        A zero cotangent is not symbolic: times an infinite slope (`sqrt`'s
        at the unused residual 0) it is NaN, where JAX, whose zeros are
        symbolic, has a number; a second order meets the same in the primal
        result that a gradient computes and drops (`log(0)`)."""
        return self._may_get_sens().get(id(node))

    def _may_get_sens(self) -> dict[int, Mask]:
        """The primal nodes that may get a sensitivity, by id, with the
        items of each that may (`liveness`): from the result's (the items
        the caller reads, `out_used`) and what closures read, through the
        inputs of each active node that passes one back (not a primitive
        with no gradient, such as `ones_like`)."""
        if self._live is None:
            out = [(n, mask) for n, _, mask in masked(self.primal.output, self.out_used)]
            self._live, self._captured = live_with_closures(self.primal, out, self.is_active)
        return self._live

    def _copy_hints(self, node: Apply) -> None:
        """Codegen hints of a primal node, carried to its K-value."""
        knode = self.k[id(node)]
        knode.tuple_arity = node.tuple_arity
        if node.sens_of is not None:
            owner = self
            while owner is not None and owner.primal is not node.sens_of.graph:
                owner = owner.parent
            knode.sens_of = owner.k.get(id(node.sens_of)) if owner is not None else None

    # -- backward -----------------------------------------------------------------------
    def backward(self) -> None:
        dout = self.bprop.add_parameter("dout")
        self.env = None
        captured = self._captured_nodes()
        # only the items of the result the caller reads (`used_items`)
        for node, path, _ in masked(self.primal.output, self.out_used):
            d = dout
            for k in path:
                d = self._item(self.bprop, d, k, NO_DEBUG.named(f"{d.debug.name or 'dout'}_{k}"))
            self.contribute(node, d)
        live = self._may_get_sens()
        for node in reversed(self.primal.nodes):
            if not self.is_active(node) or id(node) not in live:
                continue  # (what reaches a node no sensitivity reaches is zeros)
            d = self.total_sens(node, captured)
            if d is not None:
                self.backprop(node, d)
        grads = []
        for p in self.primal.parameters:
            d = self.total_sens(p, captured)
            if d is None:
                d = self.bprop.apply(_const(structural.ZerosLike()), self.k[id(p)])
            grads.append(d)
        env = self.env if self.env is not None else Constant(structural.EMPTY_ENV, hint="EMPTY_ENV")
        self.bprop.output = self.bprop.apply(_const(prims.MakeTuple()), env, *grads)

    def _captured_nodes(self) -> set[int]:
        """Nodes of the primal graph that closures a sensitivity reaches read
        where it counts (`live_with_closures`): their sens is in env."""
        self._may_get_sens()
        return self._captured

    def total_sens(self, node: Node, captured: set[int]) -> Node | None:
        parts = list(self.sens.get(id(node), []))
        if id(node) in self.items:
            parts.append(self._items_grad(node, *self.items.pop(id(node))))
        if id(node) in captured and self.env is not None:
            key = fv_key(node)
            got = self.bprop.apply(_const(structural.EnvGet(key)), self.env, self.k[id(node)])
            self.env = self.bprop.apply(_const(structural.EnvDel(key)), self.env)
            parts.append(got)
        if not parts:
            return None
        total = self._sum(parts)
        if isinstance(total, Apply):
            # Named after the variable as codegen names it (`d_s_1` for `s_1`).
            line_of = node if len(parts) > 1 else total
            total.debug = line_of.debug.named(f"d_{node.debug.name}" if node.debug.name else "")
            total.sens_of = self.k[id(node)]
        return total

    def _items_grad(self, node: Node, debug: DebugInfo, items: dict) -> Node:
        """One gradient of `node` from those of the items read from it at
        constant indices: `(d0, d1)` built once, not `getitem_grad` per item
        (each with zeros for the other items) summed. `debug`: the line of
        the last read, where the backward pass meets the first of them."""
        order = sorted(items, key=lambda key: (key[0].__name__, key[1]))
        douts = [self._sum(items[key]) for key in order]
        indices = tuple(value for _, value in order)
        prim = structural.ItemsGrad(indices) if len(indices) > 1 else structural.GetItemGrad()
        index = [] if len(indices) > 1 else [Constant(indices[0])]
        return self.bprop.apply(_const(prim), self.k[id(node)], *index, *douts, debug=debug)

    def _sum(self, parts: list[Node]) -> Node:
        total = parts[0]
        for part in parts[1:]:
            total = self.bprop.apply(_const(structural.AddGrad()), total, part)
        return total

    def contribute(self, node: Node, grad: Node) -> None:
        """Add `grad` to the sensitivity of primal `node`: nothing where no
        sensitivity reaches it (`liveness`: `grad` is zeros, such as a rule's
        for an item of a tuple no one reads)."""
        if isinstance(grad, Constant) and grad.value is None or not self.is_active(node):
            return
        if id(node) not in self._may_get_sens():
            return
        if isinstance(node, Constant):
            value = node.value
            if isinstance(value, FuncGraph):
                self.add_to_env(grad)  # a closure's gradient is its env
            elif _is_param(value):
                self.add_env_entry(param_key(value), grad)
            elif holds_params(value):  # a Cell given to a function: its Parameters'
                self.add_to_env(self.bprop.apply(_const(structural.ParamEnv()), node, grad))
            return
        if node.graph is self.primal:
            self.sens.setdefault(id(node), []).append(grad)
        else:
            self.add_env_entry(fv_key(node), grad)

    def add_env_entry(self, key: str, grad: Node) -> None:
        entry = self.bprop.apply(_const(prims.MakeDict()), Constant(key), grad)
        self.add_to_env(entry)

    def add_to_env(self, env_part: Node) -> None:
        if self.env is None:
            self.env = env_part
        else:
            self.env = self.bprop.apply(_const(structural.AddGrad()), self.env, env_part)

    def backprop(self, node: Apply, d: Node) -> None:
        fn = node.fn.value if isinstance(node.fn, Constant) else None
        if id(node) in self.bp:
            result = self.bprop.apply(self.bp[id(node)], d, debug=node.debug.named(""))
            result.tuple_arity = len(fn.parameters) + 1 if isinstance(fn, FuncGraph) else -1
            # A run-time call at a higher order: the callee is its first input.
            callee, args = (
                (node.args[0], node.args[1:])
                if isinstance(fn, DynamicK)
                else (
                    node.fn,
                    node.args,
                )
            )
            d_fn = self._item(self.bprop, result, 0, node.debug.named(_env_name(callee)))
            if isinstance(fn, (FuncGraph, ControlPrimitive)):
                self.add_to_env(d_fn)
            else:
                self.contribute(callee, d_fn)
            for k, arg in enumerate(args):
                index = fn.grad_index(k) if isinstance(fn, ControlPrimitive) else k + 1
                if index is not None:
                    item = self._item(self.bprop, result, index, node.debug.named(""))
                    self.contribute(arg, item)
            return
        self.backprop_primitive(node, fn, d)

    def backprop_primitive(self, node: Apply, prim: Primitive, d: Node) -> None:
        if isinstance(prim, structural.ReadParam):
            # A Parameter read by a gradient this graph computes (a PINN's or a
            # gradient penalty's inner `grad`): its sensitivity is the Parameter's.
            self.add_env_entry(prim.key, d)
            return
        if isinstance(prim, prims.GetItem) and self._gathers(node):
            index = node.args[1].value
            _, items = self.items.setdefault(id(node.args[0]), (node.debug.named(""), {}))
            items.setdefault((type(index), index), []).append(d)
            return
        if isinstance(prim, prims.MakeDict) and self._dict_items_grad(node, d):
            return
        rule = bprop_getters.bprop_graph(prim, len(node.args), SERVICES.parse, node.debug)
        if rule.no_gradient:
            return  # comparisons, shapes, integer results: nothing flows back
        inputs = self.k_args[id(node)]
        rule_inputs = inputs if prim.n_inputs is not None else [self._pack(inputs)]
        debug = node.debug.named("")
        out = inline(rule, [*rule_inputs, self.k[id(node)], d], self.bprop, debug)
        outs = outputs(out, len(node.args), self.bprop, debug)
        if len(outs) != len(node.args):
            raise KTransformError(
                f"{rule.rule_name} returned {len(outs)} gradients for {len(node.args)} inputs",
                node.debug,
            )
        check = structural.CheckGrad(rule.rule_name)
        for k, (arg, karg, grad) in enumerate(zip(node.args, inputs, outs, strict=True)):
            if isinstance(grad, Constant) and isinstance(grad.value, NotDifferentiable):
                if self.is_active(arg):
                    raise KTransformError(f"cannot differentiate {grad.value.what}", node.debug)
                continue
            if isinstance(grad, Constant) and grad.value is None or k in prim.structure_inputs:
                continue
            if isinstance(arg, Constant) and not _has_gradient(arg.value):
                continue
            if not rule.trusted:  # built-in rules are checked by the registry sweep
                grad = self.bprop.apply(_const(check), grad, karg, debug=debug)
            self.contribute(arg, grad)

    def _dict_items_grad(self, node: Apply, d: Node) -> bool:
        """The gradients of the values of a dict display read only in part
        (`d = {"s": a, "bad": b}; d["s"]`): each read value's is its entry
        of `d`, and the others get none. Its rule, a loop over all the
        values, would read them all, and K of it (a second order) would send
        each a zero cotangent: `0 * inf` where one has an infinite slope."""
        used = mask_of(node, self.used_items(node))
        if used is None:
            return False
        keys = builder_keys(node)
        debug = node.debug.named("")
        for key, _ in used:
            position = keys[key][1]
            like = self.k_args[id(node)][position]
            grad = self.bprop.apply(_const(prims.dict_get), d, Constant(key), like, debug=debug)
            self.contribute(node.args[position], grad)
        return True

    def _gathers(self, node: Apply) -> bool:
        """Whether the gradient of `x[k]` (`node`) waits to be gathered with
        the other items of `x` (`_items_grad`): `k` a constant int or str,
        `x` an active node of this graph."""
        x, index = node.args
        return (
            isinstance(index, Constant)
            and type(index.value) in (int, str)
            and not isinstance(x, Constant)
            and x.graph is self.primal
            and self.is_active(x)
        )

    def _pack(self, inputs: list[Node]) -> Node:
        return self.bprop.apply(_const(prims.MakeTuple()), *inputs)

    @staticmethod
    def _item(graph: FuncGraph, tup: Node, k: int, debug) -> Node:
        return graph.apply(_const(prims.GetItem()), tup, Constant(k), debug=debug)


def _env_name(fn: Node) -> str:
    """The name of the gradient of a called function value: its env."""
    name = fn.hint if isinstance(fn, Constant) else fn.debug.name
    return f"env_{name.split('.')[-1]}" if name else "env"


def _const(prim: Primitive) -> Constant:
    return Constant(prim, hint=prim.name)


def prim_fprop(prim: Primitive, debug=NO_DEBUG) -> FuncGraph:
    """The fprop graph of a primitive used as a value: `(prim(*xs), bprop)`."""
    prim_fprops = TRANSFORM.cache("dfunctor.prim_fprops")
    if prim in prim_fprops:
        return prim_fprops[prim]
    n = prim.n_inputs
    if n is None:
        raise KTransformError(
            f"the primitive {prim!r} takes a variable number of inputs and cannot be passed "
            "as a function value to differentiated code; call it directly",
            debug,
        )
    primal = FuncGraph(f"{prim.name}_prim", debug=debug)
    xs = [primal.add_parameter(f"x{k}") for k in range(n)]
    primal.output = primal.apply(_const(prim), *xs, debug=debug)
    primal.param_names = [x.name for x in xs]
    # the inputs a call may leave out keep the primitive's defaults (`jnp.sum` as a value)
    trailing = xs[n - len(prim.input_defaults) :]
    primal.defaults = {
        x.name: Constant(v) for x, v in zip(trailing, prim.input_defaults, strict=True)
    }
    graph = k_graph(primal)
    prim_fprops[prim] = graph
    return graph


def _calls_values(graph: FuncGraph) -> bool:
    """Whether `graph` (or a graph it reaches) calls a value, not a known graph
    or primitive: a function it was passed, which K turns into its fprop (in
    a graph K made, such a call is a `DynamicK`'s: at the next order the
    value is an fprop of an fprop)."""
    return any(
        isinstance(node, Apply)
        and (not isinstance(node.fn, Constant) or isinstance(node.fn.value, DynamicK))
        for g in graph.reachable()
        for node in g.nodes
    )


def _result_of(fprop: FuncGraph) -> FuncGraph:
    """A graph returning item 0 (the result) of the fprop graph `fprop`."""
    results = TRANSFORM.cache("dfunctor.results")
    if fprop.uid not in results:
        g = FuncGraph(f"{fprop.name}_result", debug=fprop.debug)
        params = [g.add_parameter(p.name) for p in fprop.parameters]
        g.param_names = [p.name for p in fprop.parameters]
        pair = g.apply(Constant(fprop), *params, debug=fprop.debug)
        g.output = g.apply(_const(prims.GetItem()), pair, Constant(0), debug=fprop.debug)
        results[fprop.uid] = g
    return results[fprop.uid]


def _given(primal_args: list[Node], k_args: list[Node]) -> list[Node]:
    """A library call's arguments at K: its functions as given (`_as_given`),
    the rest K-values."""
    return [_as_given(a) or k for a, k in zip(primal_args, k_args, strict=True)]


def own_fprop(graph: FuncGraph) -> FuncGraph | None:
    """The fprop K gives in place of transforming `graph`: one written for
    it (`custom_fprop`: a user's JAX custom_vjp), or one made of its jvp
    rule (`jvp_rule`: a user's JAX custom_jvp; `_transposed_rule`), made
    once; None for a graph with neither."""
    if graph.custom_fprop is None and graph.jvp_rule is None:
        return None
    checked = TRANSFORM.weak_keys("dfunctor.own_rules")  # graphs whose rule K took
    if graph not in checked:
        _refuse_parameter_reads(graph)
        if graph.custom_fprop is None:
            graph.custom_fprop = _transposed_rule(graph)
            graph.custom_fprop.is_custom_fprop = True
        # K of `graph`, as a function value (a nested custom_jvp given to `lax.map`);
        # no `k_primal`: K of `graph`'s steps is not K of its rule
        graph.custom_fprop.k_order = graph.k_order + 1
        checked[graph] = True
    return graph.custom_fprop


def _refuse_parameter_reads(graph: FuncGraph) -> None:
    """A function with its own rule reading a `kt.Parameter` it is not given
    (or a Cell holding some): its rule gives what it reads no gradient (its
    bprop's env is empty), so the Parameter's would be lost. Refused (JAX
    refuses a custom_vjp closing over a traced value too)."""
    kind = "custom_jvp" if graph.jvp_rule is not None else "custom_vjp"
    rule = graph.jvp_rule or graph.custom_fprop
    for g in [*graph.reachable(), *rule.reachable()]:
        for node in g.nodes:
            for a in node.inputs:
                if isinstance(a, Constant) and (_is_param(a.value) or holds_params(a.value)):
                    what = getattr(a.value, "name", None) or a.hint or "a Cell"
                    raise KTransformError(
                        f"cannot differentiate the JAX {kind} function {graph.name}: it reads "
                        f"the Parameter {what} (here) without being given it, and its rule "
                        "gives no gradient to what it reads; pass it as an argument",
                        node.debug,
                    )


def _transposed_rule(graph: FuncGraph) -> FuncGraph:
    """The fprop of `graph` made of its jvp rule, `rule(*xs, *ts) -> (out,
    tangent_out)`, linear in the tangents `ts`:

        def f_fprop(*xs):
            (out, _), rule_bprop = K_ts(rule)(*xs, *zeros_like(xs))
            def f_bprop(dout):
                grads = rule_bprop((zeros_like(out), dout))  # (env, d_xs, d_ts)
                return (EMPTY_ENV, *grads[1 + n:])
            return out, f_bprop

    The vjp of `graph` at `xs` is the transpose of its tangent map `ts ->
    tangent_out`, which is linear: its gradient w.r.t. `ts`, the same at any
    `ts` (zeros here), is reverse mode of the rule w.r.t. its tangents only
    (`K_ts`: the inputs `xs` are constants, so nothing of the rule's primal
    steps is differentiated, at this order). So the user's rule, not the
    function's steps, gives the gradient, as JAX transposes a custom_jvp's
    rule; `f_fprop` is a graph like any, differentiated again at a higher
    order (the rule's steps w.r.t. `xs`, as JAX does). `out` is the rule's
    primal output, as JAX's (a rule calling the function itself computes
    it so). An input the rule takes no tangent for (JAX's `nondiff_argnums`)
    gets zeros: its tangent is not read."""
    rule = graph.jvp_rule
    n = len(graph.parameters)
    found = not_linear_in(rule, rule.parameters[n:])
    if found is not None:
        raise KTransformError(
            f"cannot differentiate the JAX custom_jvp function {graph.name}: its jvp rule is "
            f"not linear in the tangents (they go through {found.what} here), so it has no "
            "transpose, which reverse mode needs (JAX's reverse mode refuses it too; "
            "k_transform's forward mode is built from its reverse mode); make the rule linear "
            "in the tangents, or give the function a JAX custom_vjp",
            found.node.debug if found.node is not None else rule.debug,
        )
    k_rule = k_graph(rule, wrt_inputs=(False,) * n + (True,) * n)
    fprop, xs = new_graph(f"{graph.name}_fprop", graph, [p.name for p in graph.parameters], "fprop")
    b = Builder(fprop)
    ts = [b.prim(structural.ZerosLike(), x) for x in xs]
    pair = b.call(Constant(k_rule, hint=k_rule.name), *xs, *ts, arity=2)
    result = b.item(pair, 0)
    result.tuple_arity = 2
    out, rule_bprop = b.item(result, 0, "out"), b.item(pair, 1, "rule_bprop")
    bprop = FuncGraph(f"{graph.name}_bprop", fprop, graph.debug, "bprop")
    bprop.param_names, bprop.defaults = ["dout"], {}
    dout = bprop.add_parameter("dout")
    bb = Builder(bprop)
    sens = bb.tuple(bb.prim(structural.ZerosLike(), out), dout)
    grads = bb.call(rule_bprop, sens, arity=1 + 2 * n)
    d_ts = [bb.item(grads, 1 + n + k, f"d_{x.name}") for k, x in enumerate(xs)]
    bprop.output = bb.tuple(Constant(structural.EMPTY_ENV, hint="EMPTY_ENV"), *d_ts)
    fprop.output = b.tuple(out, Constant(bprop, hint=bprop.name))
    fprop.linear_rule = True  # (the transpose of a rule checked linear: `rule_linearity`)
    return fprop


def _own_functions(primal_args: list[Node], k_args: list[Node], debug) -> list[Node]:
    """The arguments of a call of a graph with a custom fprop (a user's
    JAX custom_vjp, whose fwd and bwd are the user's code): its functions as
    the user wrote them, the rest K-values. A closure over the caller's
    values cannot be given so: refused."""
    out = []
    for a, k in zip(primal_args, k_args, strict=True):
        value = a.value if isinstance(a, Constant) else None
        if isinstance(value, FuncGraph) and value.free_variables():
            raise KTransformError(
                f"{value.name}, a function reading variables of its caller, given to a "
                "JAX custom_vjp function: pass those values as arguments",
                debug,
            )
        given = isinstance(value, FuncGraph) or (callable(value) and not hasattr(value, "shape"))
        out.append(a if given else k)
    return out


def _as_given(node: Node) -> Node | None:
    """What a library call gets for a constant function argument: the user's
    own function (a primitive, a library function, the Python function a
    graph was parsed from), not its fprop; None where K's value is needed
    (data, a Parameter, a closure graph over the caller's values)."""
    if not isinstance(node, Constant):
        return None
    value = node.value
    if isinstance(value, FuncGraph):
        if value.python_fn is None or value.free_variables():
            return None
        return Constant(value.python_fn, node.debug, node.hint)
    if callable(value) and not hasattr(value, "shape") and not isinstance(value, type):
        return node
    return None
