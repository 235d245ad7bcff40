"""Control primitives: how `if`, `while` and `for` appear in the IR.

Branches, conditions and loop bodies are closed FuncGraph constants (every
value they read arrives as an argument):

    switch(cond, true_graph, false_graph, *args)
        -> true_graph(*args) if cond else false_graph(*args)
    while_loop[n_carry](cond_graph, body_graph, *carry, *invariants)
        cond_graph(*carry, *inv) -> bool; body_graph(*carry, *inv) -> carry tuple
    for_range[n_carry](start, stop, step, body_graph, *carry, *invariants)
        body_graph(i, *carry, *inv) -> carry tuple
    for_each[n_carry](sequence, body_graph, *carry, *invariants)
        body_graph(item, *carry, *inv) -> carry tuple

A `for` with a `break` has `until=k`: carry k is its break flag (the body
does nothing once it is set), and the loop stops where it is known to be set.

Loops return the final carry tuple. `break`, `continue` and early `return`
are lowered before this point (`k_transform.frontend.desugar`). At run time each
primitive picks Python control flow for concrete conditions and `lax.cond`,
`lax.while_loop` or `lax.scan` for traced ones (`k_transform.control.runtime`).
`where` ("file:line") names the statement in run-time errors.
"""

from __future__ import annotations

from k_transform.bprop_registry.helpers import no_gradient, rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.control import runtime as ctl
from k_transform.ir.nodes import Apply, Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ops.base import RuntimeCall
from k_transform.ops.python import MakeTuple
from k_transform.runtime import host_log
from k_transform.runtime import stack as rs


class ControlPrimitive(Primitive):
    """A primitive whose inputs include FuncGraphs; `graph_slots` says where.

    `k_slots`: graph slots whose K-graph the gradient needs (a `while`
    condition stays primal); `nondiff_slots`: inputs that get no gradient
    (graphs, conditions, range bounds).
    """

    k_slots: tuple[int, ...] = ()
    nondiff_slots: tuple[int, ...] = ()
    host = False  # its graphs run host code: Python control flow (`with_host`)
    k_of_graphs = False  # K of it is itself, applied to K-graphs (`switch`)

    def with_host(self, graphs) -> ControlPrimitive:
        """This primitive, marked `host` if one of its `graphs` runs host code
        (`FuncGraph.calls_host`): the run time then keeps Python's control
        flow (a loop's iterations, a branch's one test) under a trace too, so
        host code runs as often as Python runs it, and refuses a traced test."""
        return _marked_host(self) if any(g.calls_host() for g in graphs) else self

    def grad_index(self, k: int) -> int | None:
        """Where the gradient of input k is in the bprop's result (None: nowhere)."""
        return None if k in self.nondiff_slots else k + 1

    def call_parts(self, args: list[str]) -> list[str]:
        """The arguments of the runtime helper call, as source text."""
        return list(args)

    def emit(self, e, args):
        return self._emit_call(e, self.name, self.call_parts(args))

    def options(self) -> dict:
        """Keyword arguments of the runtime helper: `where`, and the loop's
        options when set (`grads`, `host`, `popping`, `records`, `until`)."""
        out = {"where": self.where} if self.where else {}
        for flag in ("grads", "host"):
            if self.attrs.get(flag):
                out[flag] = True
        for name in ("popping", "records", "until"):
            if self.attrs.get(name) is not None:
                out[name] = self.attrs[name]
        return out

    def _emit_call(self, e, fn: str, parts: list[str], module=ctl, alias: str = "_ctl") -> str:
        options = self.options()
        if "where" in options:  # relative: the source reads the same on every machine
            options["where"] = ctl.shown_where(options["where"])
        parts = [*parts, *(f"{k}={v!r}" for k, v in options.items())]
        return f"{e.ref(module, alias)}.{fn}({', '.join(parts)})"


def _marked_host(prim: ControlPrimitive) -> ControlPrimitive:
    marked = type(prim).__new__(type(prim))
    marked.__dict__.update(prim.__dict__, attrs={**prim.attrs, "host": True}, host=True)
    return marked


class LoopPrimitive(ControlPrimitive):
    """A loop; `grads=True` marks a loop whose carries are gradients (a loop of
    a derivative, see `k_transform.control.k_loops`): None is zero there."""

    def __init__(self, name: str, n_carry: int, where: str, grads: bool, **options):
        # `records`: the carry, a stack, each iteration pushes its carry on (the
        # forward loops of `k_loops`): see `control.runtime.while_loop`.
        flags = {"grads": True} if grads else {}
        options = {k: v for k, v in options.items() if v is not None}
        super().__init__(name, n_carry=n_carry, where=where, **flags, **options)

    def with_carries(self, n_carry: int, records: int | None = None) -> LoopPrimitive:
        """The same loop over `n_carry` carries (more, appended after its own),
        recording on carry `records` if given."""
        drop = ("n_carry", "where", "records", "host")
        options = {k: v for k, v in self.attrs.items() if k not in drop}
        loop = type(self)(n_carry, self.where, records=records, **options)
        return _marked_host(loop) if self.host else loop


class Switch(ControlPrimitive):
    graph_slots = (1, 2)
    k_slots = (1, 2)
    nondiff_slots = (0, 1, 2)
    k_of_graphs = True

    def grad_index(self, k):
        # K(switch) is a switch of K-graphs: its bprop is the taken branch's,
        # returning (env, d_args...) for the branch arguments args[3:].
        return None if k < 3 else k - 2

    def __init__(self, where: str = ""):
        super().__init__("switch", where=where)

    def result_arity(self, args) -> int:
        """Branches that return a tuple literal: its length."""
        return _tuple_arity(args[1])

    def graph_arity(self, slot, n_args):
        return n_args - 3

    def impl(self, cond, true_fn, false_fn, *args):
        return ctl.switch(cond, true_fn, false_fn, *args, **self.options())


class HostReplay(ControlPrimitive):
    """`host_replay(log, graph, *args)`: `graph(*args)` with each host call in
    it taking its result from `log` instead of running (`runtime.host_log`):
    how K of a loop runs an iteration again. Like a switch, K of it is the
    same primitive of the K-graph, whose bprop gives `(env, d_args...)`."""

    graph_slots = (1,)
    k_slots = (1,)
    nondiff_slots = (0, 1)
    k_of_graphs = True

    def __init__(self, where: str = ""):
        super().__init__("host_replay", where=where)

    def grad_index(self, k):
        return None if k < 2 else k - 1

    def result_arity(self, args) -> int:
        return _tuple_arity(args[1])

    def graph_arity(self, slot, n_args):
        return n_args - 2

    def impl(self, log, fn, *args):
        return host_log.replay(log, fn, *args, **self.options())

    def emit(self, e, args):
        return self._emit_call(e, "replay", args, host_log, "_hl")


class TracedOnce(ControlPrimitive):
    """`traced_once(graph, *args)`: `graph(*args)`, the model of a JAX
    construct (`construct`: `lax.scan`, `jax.vmap`, ...) whose body JAX
    traces once: the body's host code runs in its first run only, the later
    ones (each begun by `body_run()`) replaying its results
    (`runtime.host_log.traced_once`). Like a switch, K of it is the same
    primitive of the K-graph, whose bprop gives `(env, d_args...)`."""

    graph_slots = (0,)
    k_slots = (0,)
    nondiff_slots = (0,)
    k_of_graphs = True

    def __init__(self, construct: str):
        super().__init__("traced_once", construct=construct)

    def grad_index(self, k):
        return None if k < 1 else k

    def result_arity(self, args) -> int:
        return _tuple_arity(args[0])

    def graph_arity(self, slot, n_args):
        return n_args - 1

    def impl(self, fn, *args):
        return host_log.traced_once(self.construct, fn, *args)

    def emit(self, e, args):
        parts = [repr(self.construct), *args]
        return f"{e.ref(host_log, '_hl')}.traced_once({', '.join(parts)})"


class BodyRun(RuntimeCall):
    """`body_run(key, after)`: a run of the body (its function `key`) of the
    innermost `traced_once` starts (kept in program order: before the call),
    after `after` is computed (a run for host code only, its value unused:
    kept, and given no gradient)."""

    module, alias, rt_name, n_inputs = host_log, "_hl", "body_run", 2
    effectful = True

    def __init__(self):
        super().__init__(self.rt_name)


zero_gradient(BodyRun)


body_run = BodyRun()


def _tuple_arity(graph_node) -> int:
    """The length of the tuple literal the graph constant `graph_node` returns (0: none)."""
    graph = graph_node.value if isinstance(graph_node, Constant) else None
    out = graph.output if isinstance(graph, FuncGraph) else None
    maker = out.fn.value if isinstance(out, Apply) and isinstance(out.fn, Constant) else None
    return len(out.args) if isinstance(maker, MakeTuple) else 0


class WhileLoop(LoopPrimitive):
    graph_slots = (0, 1)
    k_slots = (1,)
    nondiff_slots = (0, 1)

    def __init__(
        self, n_carry: int, where: str = "", grads: bool = False, popping=None, records=None
    ):
        # `popping`: the carry, a stack, that each iteration pops until it is
        # empty (the reverse loops of `k_loops`): its size bounds the trip count.
        super().__init__("while_loop", n_carry, where, grads, popping=popping, records=records)

    def graph_arity(self, slot, n_args):
        return n_args - 2

    def impl(self, cond_fn, body_fn, *values):
        return ctl.while_loop(cond_fn, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:2], str(self.n_carry), *args[2:]]


class ForRange(LoopPrimitive):
    graph_slots = (3,)
    k_slots = (3,)
    nondiff_slots = (0, 1, 2, 3)

    def __init__(
        self, n_carry: int, where: str = "", grads: bool = False, records=None, until=None
    ):
        # `until`: the carry that is the loop's break flag (see the module docstring)
        super().__init__("for_range", n_carry, where, grads, records=records, until=until)

    def graph_arity(self, slot, n_args):
        return n_args - 4 + 1

    def impl(self, start, stop, step, body_fn, *values):
        return ctl.for_range(start, stop, step, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:4], str(self.n_carry), *args[4:]]


class ForEach(LoopPrimitive):
    graph_slots = (1,)
    k_slots = (1,)
    nondiff_slots = (1,)

    def __init__(
        self, n_carry: int, where: str = "", grads=False, records=None, until=None, pulls=None
    ):
        # `until`: the carry holding the loop's break flag: no item is taken once it
        # is set. `pulls`: the sequence may be an iterator a host call made outside
        # the graph holding the loop (its items are host calls: `host_at_run_time`,
        # so a loop around this one replays them when it runs its body again)
        options = {"records": records, "until": until, "pulls": pulls or None}
        super().__init__("for_each", n_carry, where, grads, **options)

    @property
    def host_at_run_time(self) -> bool:
        return bool(self.attrs.get("pulls"))

    def graph_arity(self, slot, n_args):
        return n_args - 2 + 1

    def impl(self, seq, body_fn, *values):
        return ctl.for_each(seq, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:2], str(self.n_carry), *args[2:]]


# -- the items of a `for` over a sequence, read from its tangent or gradient ----------
class EachItem(RuntimeCall):
    """`each_item(x, seq, k)`: item `k` of `x` (shaped like `seq`) as `for item
    in seq` meets it; None for a dict `seq` (it iterates its keys)."""

    module, alias, rt_name, n_inputs = ctl, "_ctl", "each_item", 3

    def __init__(self):
        super().__init__(self.rt_name)


class EachItemGrad(RuntimeCall):
    """`each_item_grad(like, seq, k, dout)`: zeros like `like` with `dout` at
    item `k` (only zeros for a dict `seq`): `EachItem`'s transpose."""

    module, alias, rt_name, n_inputs = ctl, "_ctl", "each_item_grad", 4

    def __init__(self):
        super().__init__(self.rt_name)


# -- stacks: K of loops written as IR (k_transform.control.k_loops) ----------------
class _StackCall(RuntimeCall):
    """A stack primitive: `_rs.<rt_name>(...)`, named `rt_name` unless `name_` says."""

    module = rs
    alias = "_rs"
    name_ = ""

    def __init__(self):
        super().__init__(self.name_ or self.rt_name)


class StackNew(_StackCall):
    """An empty stack (`k_transform.runtime.stack`)."""

    n_inputs = 0
    rt_name = "stack_new"


class StackPush(_StackCall):
    """`stack` with `item` on top."""

    n_inputs = 2
    rt_name = "stack_push"


class StackPop(_StackCall):
    """`(top, rest)`; a zero (None) gradient stack pops zeros like `like`."""

    n_inputs = 2
    rt_name = "stack_pop"


class StackPushMemo(_StackCall):
    """`stack_push(stack, item, memo)`: a Python stack keeps `memo` beside the
    item (K of a loop keeps each Python iteration's bprop). Never
    differentiated: transforms use the graph's `differentiated_as` twin."""

    n_inputs = 3
    rt_name = "stack_push"
    name_ = "stack_push_memo"


class StackHasMemo(_StackCall):
    """Whether the top of a stack has a memo: a Python bool (a Python loop pushed it)."""

    n_inputs = 1
    rt_name = "stack_has_memo"
    static_when = "always"  # never traced: codegen writes its switch as an `if`


class StackMemo(_StackCall):
    """The memo on top of a stack."""

    n_inputs = 1
    rt_name = "stack_memo"


class StackLog(_StackCall):
    """The host calls of the iteration that pushed the top of a stack (`stack_log`)."""

    n_inputs = 1
    rt_name = "stack_log"


class StackPushOnce(_StackCall):
    """`stack_push` on a stack each slot of which is pushed once (started
    empty: the `lax.scan` model's ys): its gradient pops without zeroing the
    slot (`stack_pop`, not `stack_pop_grad`), so that K of a loop popping it
    may rebuild its versions from its final buffer (`runtime.stack.heavy`)."""

    n_inputs = 2
    rt_name = "stack_push"
    name_ = "stack_push_once"


class RowsStack(_StackCall):
    """`rows_stack(xs, n, flip)`: a stack of the rows of `xs` (as `lax.scan` reads them)."""

    n_inputs = 3
    rt_name = "rows_stack"


class StackRows(_StackCall):
    """`stack_rows(stack, flip)`: the items of a stack as rows (`lax.scan`'s ys)."""

    n_inputs = 2
    rt_name = "stack_rows"


class RowsGrad(_StackCall):
    """`rows_grad(dout, stack, flip)`: `stack_rows`'s transpose, a gradient stack."""

    n_inputs = 3
    rt_name = "rows_grad"


class StackPushGrad(_StackCall):
    """Pop's gradient: `d_rest` with `d_item` added at its top (`stack_push_grad`)."""

    n_inputs = 2
    rt_name = "stack_push_grad"


class StackPopGrad(_StackCall):
    """Push's gradient: `(d_item, d_stack)`, the popped slot zeroed (`stack_pop_grad`)."""

    n_inputs = 2
    rt_name = "stack_pop_grad"


class StackNonEmpty(_StackCall):
    """Whether a stack holds an item (traced under lax)."""

    n_inputs = 1
    rt_name = "stack_nonempty"


class StackLight(_StackCall):
    """An item to push with its BufStacks as counts (`runtime.stack.light`)."""

    n_inputs = 1
    rt_name = "light"


class StackHeavy(_StackCall):
    """A popped `light` item with its stacks' buffers from `like` (`heavy`)."""

    n_inputs = 2
    rt_name = "heavy"


class LightGrad(_StackCall):
    """`light_grad(dout, x)`: the gradient of `light(x)`, None at x's stacks."""

    n_inputs = 2
    rt_name = "light_grad"


class HeavyGrad(_StackCall):
    """`heavy_grad(dout, stored, like)`: the gradient of `heavy` for `like`."""

    n_inputs = 3
    rt_name = "heavy_grad"


class HeavyGradBack(_StackCall):
    """`heavy_grad_back(dd, stored, like)`: `heavy_grad`'s transpose in its `dout`."""

    n_inputs = 3
    rt_name = "heavy_grad_back"


# == gradient rules ==============================================================
# -- the items of a `for` over a sequence: EachItem and EachItemGrad are transposes ---
each_item = EachItem()
each_item_grad = EachItemGrad()


@rule(EachItem)
def bprop_each_item(x, seq, k, out, dout):
    return each_item_grad(x, seq, k, dout), None, None


@rule(EachItemGrad)
def bprop_each_item_grad(like, seq, k, dout_, out, dd):
    return None, None, None, each_item(dd, seq, k)


# -- stacks (K of loops as IR): push/pop and their gradients are transposes -----------
stack_push = StackPush()
stack_pop = StackPop()
stack_push_grad = StackPushGrad()
stack_pop_grad = StackPopGrad()


@rule(StackPush)
def bprop_stack_push(stack, item, out, dout):
    d_item_rest = stack_pop_grad(dout, item)
    return d_item_rest[1], d_item_rest[0]


@rule(StackPop)
def bprop_stack_pop(stack, like, out, dout):
    return stack_push_grad(dout[1], dout[0]), None


@rule(StackPushGrad)
def bprop_stack_push_grad(d_rest, d_item, out, dout):
    dd_item_rest = stack_pop(dout, d_item)
    return dd_item_rest[1], dd_item_rest[0]


@rule(StackPopGrad)
def bprop_stack_pop_grad(d_out, like, out, dout):
    return stack_push(dout[1], dout[0]), None


@bprop_getters.register(StackNew)
def get_bprop_stack_new(self):
    return no_gradient(lambda out, dout: ())


# -- rows as stacks (the `lax.scan` model): each is the other's transpose ------------
stack_new = StackNew()
stack_push_once = StackPushOnce()
rows_stack = RowsStack()
stack_rows = StackRows()
rows_grad = RowsGrad()


@rule(StackPushOnce)
def bprop_stack_push_once(stack, item, out, dout):
    d_item_rest = stack_pop(dout, item)
    return d_item_rest[1], d_item_rest[0]


@rule(RowsStack)
def bprop_rows_stack(xs, n, flip, out, dout):
    return stack_rows(dout, flip), None, None


@rule(StackRows)
def bprop_stack_rows(stack, flip, out, dout):
    return rows_grad(dout, stack, flip), None


@rule(RowsGrad)
def bprop_rows_grad(dout, stack, flip, out, dd):
    return stack_rows(dd, flip), None, None


zero_gradient(StackNonEmpty)
zero_gradient(StackLog)

# -- light/heavy (stacks in a loop's carry stored as counts): each gradient is linear
# in `dout`; `light_grad` is its own transpose, `heavy_grad` and `heavy_grad_back`
# are each other's, so these five rules close under differentiation.
light_grad = LightGrad()
heavy_grad = HeavyGrad()
heavy_grad_back = HeavyGradBack()


@rule(StackLight)
def bprop_light(x, out, dout):
    return (light_grad(dout, x),)


@rule(StackHeavy)
def bprop_heavy(stored, like, out, dout):
    return light_grad(dout, like), heavy_grad(dout, stored, like)


@rule(LightGrad)
def bprop_light_grad(dout, x, out, ddx):
    return light_grad(ddx, x), None


@rule(HeavyGrad)
def bprop_heavy_grad(dout, stored, like, out, dd):
    return heavy_grad_back(dd, stored, like), None, None


@rule(HeavyGradBack)
def bprop_heavy_grad_back(dd, stored, like, out, d):
    return heavy_grad(d, stored, like), None, None
