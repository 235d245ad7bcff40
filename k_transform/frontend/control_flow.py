"""Parser methods for `if`, `while` and `for` (mixed into `GraphBuilder`).

`if` becomes `switch` (a static condition keeps one branch; an `if` that
returns on every path is the function's tail), `while` a `while_loop`,
`for` a `for_range` over `range(...)` or a `for_each` over a sequence
(`k_transform.control.prims`). A `for` over a constant sequence (sub-Cells,
Parameters) or a short static range is unrolled while parsing; one over
`zip`/`enumerate`/`reversed`/dict views iterates by position
(`positional_loop`, views in `k_transform.frontend.parse_sugar`).

The branch and body graphs are *closed* (`subgraph`): a read of an enclosing
variable adds a parameter, and `close_graphs` gives the graphs of one
construct the same captured parameters. Branch outputs (`live_outputs`) and
loop carries (`carried`) are the variables assigned inside that are read
elsewhere or carried by an enclosing loop. `break`, `continue` and early
`return` were already lowered away (`k_transform.frontend.desugar`).
"""

from __future__ import annotations

from collections import Counter

import gast

from k_transform.control import policy
from k_transform.control import prims as control
from k_transform.frontend.desugar import assigned_names, exposed_names, loaded_names
from k_transform.frontend.parse_sugar import View, cells_of
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, Parameter
from k_transform.ops import python as prims
from k_transform.protocol import kt_attribute


class ControlFlowBuilder:
    """The `GraphBuilder` methods for the constructs in the module docstring."""

    def stmt_If(self, s) -> None:
        cond = self.expr(s.test)
        taken = known_truth(cond)
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
        switch = control.Switch(self.where(s)).with_host([b.graph for b in branches])
        result = self.apply(switch, cond, *graphs, *args, node=s)
        if tail:
            self.graph.output = result
            self.returned = True
        else:
            self.bind_outputs(outputs, result, s)
            self.note_escaping(outputs, branches, s)

    def stmt_While(self, s) -> None:
        carried = self.carried(s, s.body, s.test)
        init = [self.read(v, s) for v in carried]
        cond_b = self.subgraph("while", s, "cond", carried, init)
        cond_b.graph.output = cond_b.expr(s.test)
        body_b = self.subgraph("while", s, "body", carried, init)
        body_b.loop_live |= set(carried)
        body_b.block(s.body)
        self.refuse_carried_closures(body_b, carried, s)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([cond_b, body_b])
        prim = control.WhileLoop(len(carried), self.where(s)).with_host(
            [cond_b.graph, body_b.graph]
        )
        graphs = [Constant(cond_b.graph, hint="cond"), Constant(body_b.graph, hint="body")]
        result = self.apply(prim, *graphs, *init, *inv, node=s)
        self.bind_outputs(carried, result, s)

    def stmt_For(self, s) -> None:
        if s.orelse:
            raise self.fp.unsupported("`for ... else`", s)
        if self.iterates_by_position(s.iter):
            self.indexed_for(s)
            return
        range_args = self.range_args(s.iter)
        head = range_args if range_args is not None else [cells_of(self.expr(s.iter))]
        self.for_loop(s, head, range_args is not None)

    def for_loop(self, s, head: list[Node], over_range: bool) -> None:
        """`for` over `range(*head)` or over the iterable `head[0]` (taken
        item by item when run, `ForEach`, unless known while parsing)."""
        carried = self.carried(s, s.body, s.iter, target=s.target)
        range_args = head if over_range else None
        if range_args is None and _is_constant_sequence(head[0]):
            seq = head[0]
            self.unrolled(s, carried, (self.fp.value_node(v, seq.hint, s) for v in seq.value))
            return
        if range_args is not None and all(isinstance(a, Constant) for a in range_args):
            indices = range(*(a.value for a in range_args))
            if policy.unrolls_when_parsed(len(indices)):
                # A short static range: what the runtime would unroll anyway,
                # unrolled here so the loop differentiates to any order.
                self.unrolled(s, carried, (self.const(i, s) for i in indices))
                return
        init = [self.read(v, s) for v in carried]
        body_b = self.subgraph("for", s, "body", [])
        body_b.loop_live |= set(carried)
        item = body_b.graph.add_parameter("item", self.debug(s.target))
        if range_args is None:
            body_b.entry_values[item] = ("items", head[0])
        for v, value in zip(carried, init, strict=True):
            body_b.vars[v] = body_b.graph.add_parameter(v, self.debug(s, v))
            body_b.entry_values[body_b.vars[v]] = value
        body_b.assign(s.target, item, s)
        body_b.block(s.body)
        self.refuse_carried_closures(body_b, carried, s)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([body_b])
        where, n, until = self.where(s), len(carried), _until(s, carried)
        if range_args is not None:
            prim = control.ForRange(n, where, until=until)
        else:  # it takes no more items after a `break` (an iterator may be unbounded)
            pulls = self.made_outside_by_host(head[0])
            prim = control.ForEach(n, where, until=until, pulls=pulls)
        prim = prim.with_host([body_b.graph])
        body = Constant(body_b.graph, hint="body")
        result = self.apply(prim, *head, body, *init, *inv, node=s)
        self.bind_outputs(carried, result, s)

    def unrolled(self, s, carried: list[str], items) -> None:
        """`for` over constant `items` (nodes: the indices of a short static
        range, sub-Cells, Parameters, numbers): the body is repeated for each,
        its target bound to the item, a constant. What the loop carries is an
        output of the `if`s in the body, as in a loop body (the next copy reads
        it); copies stop after a `break` known while parsing (its flag a
        constant True, `desugar`)."""
        outer_live = self.loop_live
        self.loop_live = outer_live | set(carried)
        flag = getattr(s, "break_flag", None)
        for item in items:
            self.assign(s.target, item, s)
            self.block(s.body)
            if self.returned or (flag is not None and _is_true(self.read(flag, s))):
                break
        self.loop_live = outer_live

    def positional_loop(self, s, positions: Node, view: View) -> None:
        """`for i in positions: target = view.item(i); body` as a `for_each`."""
        carried = self.carried(s, s.body, s.iter, target=s.target)
        init = [self.read(v, s) for v in carried]
        body_b = self.subgraph("for", s, "body", [])
        body_b.loop_live |= set(carried)
        position = body_b.graph.add_parameter("position", self.debug(s.target))
        for v, value in zip(carried, init, strict=True):
            body_b.vars[v] = body_b.graph.add_parameter(v, self.debug(s, v))
            body_b.entry_values[body_b.vars[v]] = value
        body_b.assign(s.target, view.item(body_b, position), s)
        body_b.block(s.body)
        self.refuse_carried_closures(body_b, carried, s)
        body_b.set_output([body_b.read(v, s) for v in carried], s)
        inv = close_graphs([body_b])
        prim = control.ForEach(len(carried), self.where(s), until=_until(s, carried))
        prim = prim.with_host([body_b.graph])
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

    def made_outside_by_host(self, node: Node, here: bool = False) -> bool:
        """Whether `node` is an enclosing graph's value (read by a loop body, a
        branch, a comprehension) that a host call made there (`here`: or in
        this graph): it may be an iterator (`itertools.count()`, `iter(...)`),
        which taking items from changes, so a loop around this graph replays
        that when it runs it again."""
        builder, outside = self, False
        while builder is not None and getattr(node, "graph", None) is not None:
            if node.graph is not builder.graph:  # a free variable: the enclosing graph's
                builder, outside = builder.parent, True
            elif builder.closed and isinstance(node, Parameter):  # a capture
                name = next((n for n in builder.captures if builder.vars.get(n) is node), None)
                if name is None:
                    return False
                builder, node, outside = builder.parent, builder.captures[name], True
            else:
                break
        fn = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
        made = getattr(fn, "host", False) or getattr(fn, "host_at_run_time", False)
        return (outside or here) and made

    # -- control-flow helpers ----------------------------------------------------
    def where(self, s) -> str:
        d = self.debug(s)
        return f"{d.file}:{d.line}"

    def subgraph(self, kind: str, s, part: str, params=(), init=()) -> ControlFlowBuilder:
        """A closed graph's builder; `params`, its leading parameters (a
        loop's carried variables), start as the enclosing values `init`."""
        d = self.debug(s)
        name = f"{self.fdef_name()}_{kind}{d.line}_{part}"
        graph = FuncGraph(name, parent=self.graph, debug=d, kind=f"{kind}_{part}")
        builder = type(self)(self.fp, graph, self, closed=True, fdef=self.fdef)
        for v, value in zip(params, init or [None] * len(params), strict=True):
            builder.vars[v] = graph.add_parameter(v, self.debug(s, v))
            if value is not None:
                builder.entry_values[builder.vars[v]] = value
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


def close_graphs(builders: list[ControlFlowBuilder]) -> list[Node]:
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


def _until(s, carried: list[str]) -> int | None:
    """The carry that is the break flag of loop `s` (`desugar`), if it has one."""
    flag = getattr(s, "break_flag", None)
    return carried.index(flag) if flag in carried else None


def _is_true(node: Node) -> bool:
    return isinstance(node, Constant) and node.value is True


def _is_constant_sequence(node: Node) -> bool:
    return isinstance(node, Constant) and isinstance(node.value, (tuple, list))


def _returns_on_every_path(s) -> bool:
    def ends(stmts):
        if not stmts:
            return False
        last = stmts[-1]
        if isinstance(last, gast.Return):
            return True
        return isinstance(last, gast.If) and ends(last.body) and ends(last.orelse)

    return ends(s.body) and ends(s.orelse)


def known_truth(node: Node) -> bool | None:
    """`bool(node)` where it is known while parsing (a flag, an attribute, a
    constant array), else None: decided where the program runs. A
    `kt.Parameter`'s truth is its value's when the line runs (`if self.flag:`
    after `set_data`), never the value it held while parsing."""
    if not isinstance(node, Constant):
        return None
    if isinstance(node.value, FuncGraph):
        return True  # a function
    if kt_attribute(node.value, "__kt_parameter__", False):
        return None
    try:
        return bool(node.value)
    except Exception:  # noqa: BLE001 - an array of several elements: decided at run time
        return None
