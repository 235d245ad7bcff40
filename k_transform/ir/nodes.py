"""The FuncGraph IR: graphs of `Parameter`, `Constant` and `Apply` nodes (ANF).

Contract:

- A `FuncGraph` has `parameters`, an `output` node, an ordered list `nodes` of
  the `Apply` nodes it owns (program order: side effects such as `print` run
  in this order), and a lexical `parent` graph (None at top level).
- `Parameter` and `Apply` nodes are owned by exactly one graph (`node.graph`).
  A node used by graph G but owned by a graph enclosing G is a *free variable*
  of G; `FuncGraph.free_variables()` lists them in first-use order.
- `Constant` nodes are shared values, owned by no graph: Python values, a
  `Primitive`, or a `FuncGraph` (a function value; a closure when the graph
  has free variables).
- Control flow: branches and loop bodies are FuncGraph constants handed to
  the control primitives in `k_transform.control.prims`. They are *closed*: every
  value they read from the enclosing function arrives as an argument.
- Every node carries a `DebugInfo` with the user's file, line and name.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class DebugInfo:
    """Where a node came from in the user's source."""

    file: str = "<unknown>"
    line: int = 0
    col: int = 0
    source_line: str = ""
    name: str = ""  # the user's variable or function name, if any

    def describe(self) -> str:
        """The ' at file:line' tail of error messages, with the line shown."""
        if self.line <= 0:
            return f"\n  in {self.file}"
        text = f'\n  File "{self.file}", line {self.line}'
        if self.source_line:
            text += f"\n    {self.source_line.strip()}"
        return text

    def named(self, name: str) -> DebugInfo:
        return DebugInfo(self.file, self.line, self.col, self.source_line, name)


NO_DEBUG = DebugInfo()


class Node:
    """A node of the IR. `graph` is the owner (None for constants).

    Two hints for code generation, set by transforms: `sens_of` on a
    sensitivity names the node it is the gradient of (emitted `d_<its name>`);
    `tuple_arity` on a node known to be a tuple (a `(result, bprop)` pair, a
    bprop's gradients) is its length, -1 when unknown, so its items can be
    unpacked by name.
    """

    graph: FuncGraph | None = None
    debug: DebugInfo = NO_DEBUG
    sens_of: Node | None = None
    tuple_arity: int = 0


class Parameter(Node):
    """A formal parameter of `graph`; `name` is the user's name for it."""

    def __init__(self, graph: FuncGraph, name: str, debug: DebugInfo = NO_DEBUG):
        self.graph = graph
        self.name = name
        self.debug = debug.named(name)

    def __repr__(self) -> str:
        return f"Parameter({self.name})"


class Constant(Node):
    """A value known at transform time.

    `hint` is how the user spelled it (`jnp.sin`, `math.pi`), used to name it
    in printed IR and generated code.
    """

    def __init__(self, value, debug: DebugInfo = NO_DEBUG, hint: str = ""):
        self.value = value
        self.debug = debug
        self.hint = hint

    def __repr__(self) -> str:
        return f"Constant({self.hint or self.value!r})"


class Apply(Node):
    """A call `inputs[0](*inputs[1:])` owned by `graph` (MindSpore's CNode).
    `calls_value`: the user's program calls there a function value it knows
    only when it runs (set by the parser; codegen runs such a call of the
    user's Python as host code, `runtime.host_log.called`)."""

    def __init__(self, graph: FuncGraph, inputs: list[Node], debug: DebugInfo = NO_DEBUG):
        self.graph = graph
        self.inputs = list(inputs)
        self.debug = debug
        self.calls_value = False

    @property
    def fn(self) -> Node:
        return self.inputs[0]

    @property
    def args(self) -> list[Node]:
        return self.inputs[1:]

    def __repr__(self) -> str:
        return f"Apply({self.debug.name or '?'}, line {self.debug.line})"


_graph_ids = itertools.count()


class FuncGraph:
    """A function: parameters, ordered Apply nodes, an output, a lexical parent.

    `kind` says what the graph stands for: "function" (a user def or lambda),
    "branch", "loop_cond", "loop_body", or a name given by a transform
    ("fprop", "bprop").

    What the frontend records of a user function: `param_names` (the names a
    call binds, None while the def is still being parsed), `defaults` (default
    values by parameter name, as nodes, used when the graph is called as a
    function value), `signature` (a `frontend.signature.Signature` when the def
    has `*args`, `**kwargs` or keyword-only parameters), and for a closure the
    `closure_site` (the `ClosureSite` of the def or lambda that made it) and
    its `closure_key` there. A graph parsed from a gradient rule has a
    `rule_name` for messages, is `trusted` when shipped with k_transform (its
    gradients' shapes are not checked at trace time), and `no_gradient` when
    it gives no input a gradient. `differentiated_as`: the graph transforms
    differentiate in its place (same signature and results; K of a loop
    keeps each Python iteration's bprop, its twin recomputes it:
    `control.k_loops`). `guards`: for a parsed function, the globals and
    closure cells it read with the values read (`frontend.guards`).
    `k_order`: how many times K made it (1 for an fprop K made of a primal
    graph, 2 for K of that fprop), 0 for a graph K did not make.
    """

    def __init__(
        self,
        name: str,
        parent: FuncGraph | None = None,
        debug: DebugInfo = NO_DEBUG,
        kind: str = "function",
    ):
        self.name = name
        self.parent = parent
        self.debug = debug
        self.kind = kind
        self.parameters: list[Parameter] = []
        self.nodes: list[Apply] = []
        self.output: Node | None = None
        self.uid = next(_graph_ids)
        self.param_names: list[str] | None = None
        self.defaults: dict[str, Node] = {}
        self.signature = None
        self.closure_site = None
        self.closure_key: tuple | None = None
        self.rule_name = ""
        self.trusted = False
        self.no_gradient = False
        self.differentiated_as: FuncGraph | None = None
        # An fprop written for this graph, which K gives in place of
        # transforming it: `(*inputs) -> (out, bprop)` (a user's JAX custom_vjp)
        self.custom_fprop: FuncGraph | None = None
        # Whether this graph is such an fprop: at every order its callers give
        # it the function arguments as the user wrote them (fwd runs them)
        self.is_custom_fprop = False
        # A jvp rule written for this graph: `(*inputs, *tangents) -> (out,
        # tangent_out)`, linear in the tangents (a user's JAX custom_jvp); K
        # makes the custom fprop of it (`dfunctor.own_fprop`)
        self.jvp_rule: FuncGraph | None = None
        self.python_fn = None  # the user's Python function it was parsed from (top level)
        # A parsed function's guards (`frontend.guards`): the globals and
        # closure cells it read, with their values; None until it is built.
        self.guards: tuple | None = None
        # Parameters a parsed function may change in place, by what its
        # caller passes: name -> (condition, where, function); condition
        # "mutable" (an augmented assignment, in place on a list or a NumPy
        # array), "items" (one on an item of it: `a = p[0]; a += v`), both
        # ("mutable or items"), or "not None" (`if acc is None: acc = []` then
        # `acc.append(v)`); `function`: the name of the user's function whose
        # parameter it is (a gradient's graph carries its function's entries).
        self.changed_parameters: dict[str, tuple[str, str, str]] = {}
        # Globals and closure cells the functions it runs as Python may
        # rebind (`frontend.guards.rebinds`): key -> (name, node, function).
        self.rebinds: dict = {}
        self.k_order = 0
        self.k_primal: FuncGraph | None = None  # an fprop's: the graph it is K of

    # -- building ---------------------------------------------------------
    def add_parameter(self, name: str, debug: DebugInfo = NO_DEBUG) -> Parameter:
        param = Parameter(self, name, debug)
        self.parameters.append(param)
        return param

    def apply(self, fn: Node, *args: Node, debug: DebugInfo = NO_DEBUG) -> Apply:
        node = Apply(self, [fn, *args], debug)
        self.nodes.append(node)
        return node

    # -- queries ------------------------------------------------------------
    def ancestors(self):
        graph = self.parent
        while graph is not None:
            yield graph
            graph = graph.parent

    def is_ancestor_of(self, other: FuncGraph) -> bool:
        return any(g is self for g in other.ancestors())

    def children(self) -> list[FuncGraph]:
        """Graphs whose lexical parent is this graph, in first-use order."""
        seen: dict[int, FuncGraph] = {}
        for node in self.nodes:
            for inp in node.inputs:
                if isinstance(inp, Constant) and isinstance(inp.value, FuncGraph):
                    g = inp.value
                    if g.parent is self and g.uid not in seen:
                        seen[g.uid] = g
        if isinstance(self.output, Constant) and isinstance(self.output.value, FuncGraph):
            g = self.output.value
            if g.parent is self:
                seen.setdefault(g.uid, g)
        return list(seen.values())

    def used_nodes(self):
        """Every node this graph reads: Apply inputs and the output."""
        for node in self.nodes:
            yield from node.inputs
        if self.output is not None:
            yield self.output

    def readers(self) -> dict[int, list]:
        """Each node's readers in this graph, by the node's id: the Applies
        that take it as an input, and None where the graph's output or a
        closure reads it."""
        users: dict[int, list] = {id(n): [] for n in [*self.parameters, *self.nodes]}
        for node in self.nodes:
            for a in node.inputs:
                if id(a) in users:
                    users[id(a)].append(node)
        if id(self.output) in users:
            users[id(self.output)].append(None)
        for child in self.children():
            for node in child.free_variables():
                if id(node) in users:
                    users[id(node)].append(None)
        return users

    def free_variables(self, reads=None) -> list[Node]:
        """Nodes owned by enclosing graphs that this graph reads, directly or
        through the closures it uses (children and sibling closures alike).
        `reads(graph) -> (nodes, closures)` may supply each graph's reads
        (`reads_of`, e.g. memoised by codegen)."""
        reads = reads or FuncGraph.reads_of
        found: dict[int, Node] = {}
        seen: set[int] = set()
        todo: list[FuncGraph] = [self]
        while todo:
            graph = todo.pop()
            if graph.uid in seen:
                continue
            seen.add(graph.uid)
            nodes, closures = reads(graph)
            for node in nodes:
                if node.graph is not self and node.graph.is_ancestor_of(self):
                    found.setdefault(id(node), node)
            todo += closures
        return list(found.values())

    def reads_of(self) -> tuple[list[Node], list[FuncGraph]]:
        """The non-constant nodes this graph reads (once each, in first-use
        order) and the closures (graphs with a parent) it uses."""
        return reads_among(self.used_nodes())

    def reachable(self):
        """This graph and every graph its constants reach (closures, branches,
        callees, graphs held by primitives), each once."""
        seen: set[int] = set()
        todo: list[FuncGraph] = [self]
        while todo:
            graph = todo.pop()
            if graph.uid in seen:
                continue
            seen.add(graph.uid)
            yield graph
            for node in graph.used_nodes():
                value = node.value if isinstance(node, Constant) else None
                if isinstance(value, FuncGraph):
                    todo.append(value)
                elif hasattr(value, "subgraphs"):
                    todo.extend(value.subgraphs())

    def calls_host(self) -> bool:
        """Whether running this graph runs host code: a primitive marked
        `host` (`print`, a host call such as `rs.randn(3)`, a branch or loop
        whose graphs do) in it or in a graph it reaches."""
        return any(
            getattr(getattr(node.fn, "value", None), "host", False)
            for graph in self.reachable()
            for node in graph.nodes
        )

    def may_call_host(self) -> bool:
        """`calls_host`, or a call whose host code shows only when it runs: of
        a value known at run time (a function or object it is given), or a
        primitive marked `host_at_run_time` (a method of an object it is
        given, such as `rs.randn(3)` on a generator argument)."""
        return any(
            isinstance(node, Apply)
            and (
                not isinstance(node.fn, Constant)
                or getattr(node.fn.value, "host", False)
                or getattr(node.fn.value, "host_at_run_time", False)
            )
            for graph in self.reachable()
            for node in graph.nodes
        )

    def differentiable(self) -> FuncGraph:
        """The graph transforms differentiate in this one's place (its
        `differentiated_as` twin, if any)."""
        return self.differentiated_as or self

    def __repr__(self) -> str:
        return f"FuncGraph({self.name})"


def reads_among(used) -> tuple[list[Node], list[FuncGraph]]:
    """Of the nodes `used` (inputs a graph reads), the non-constant ones
    (once each, in first-use order) and the closures (graphs with a parent)."""
    nodes: dict[int, Node] = {}
    closures = []
    for node in used:
        if not isinstance(node, Constant):
            nodes.setdefault(id(node), node)
        elif isinstance(node.value, FuncGraph) and node.value.parent is not None:
            closures.append(node.value)
    return list(nodes.values()), closures
