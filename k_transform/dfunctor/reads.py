"""Which items of values a K-graph reads: item-level liveness across calls,
loops and closures (`liveness` within one graph; here, through the graphs a
node calls or is given to).

K of a node is made for the items of its result that are read
(`DFunctor.used_items`), and a function is differentiated only for the
inputs a call of it reads: a loop's body for the carries read after it
(`loop_carries`), a closure for what its calls read (`closure_reads`,
`live_with_closures`). An unread item then meets no cotangent: where its
local derivative is infinite (`sqrt(0)`), 0 * inf would be NaN.
"""

from __future__ import annotations

import functools
import itertools

from k_transform.bprop_registry.helpers import NotDifferentiable
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.context import TRANSFORM
from k_transform.control import prims as control
from k_transform.control.prims import ControlPrimitive, LoopPrimitive
from k_transform.dfunctor.liveness import EACH, Mask, liveness, mask_of, masked, sorted_mask, union
from k_transform.dfunctor.services import SERVICES, DynamicK
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node, reads_among
from k_transform.ir.primitive import Primitive
from k_transform.ops import python as prims
from k_transform.ops import structural


def output_mask(graph: FuncGraph, used: Mask) -> Mask:
    """`used` (the items of `graph`'s result a caller reads) where it leaves
    some of it out (`liveness.mask_of`); None (all of it) otherwise."""
    return mask_of(graph.output, used)


def _builds_tuple(node: Node) -> bool:
    """A tuple display, or a NamedTuple made of its fields (`Stats(m, s)`)."""
    maker = node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None
    return isinstance(maker, prims.MakeTuple) or (
        isinstance(maker, prims.MakeNode) and issubclass(maker.cls, tuple)
    )


def has_rule(fn) -> bool:
    """Whether `fn` is a graph whose K is made of its own rule (`own_fprop`)."""
    if not isinstance(fn, FuncGraph):
        return False
    graph = fn.differentiable()
    return graph.custom_fprop is not None or graph.jvp_rule is not None


def _passes_to(node: Apply, k: int) -> bool:
    """Whether the rule of `node` may give its input `k` a gradient: not a
    primitive with no gradient (`ones_like`) nor one whose rule returns None
    there (the tuple `getitem_grad` reads only for its structure), nor a
    graph's parameter (a branch's) that K of it sends none (`_params_reached`)."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    callees = _callees(node, k)
    if callees is not None:
        return any(j in _params_reached(g) for g, j in callees)
    if not isinstance(fn, Primitive) or isinstance(fn, ControlPrimitive):
        return True
    if k in fn.structure_inputs:
        return False
    if prims.imports_jaxpr(fn) or isinstance(fn, structural.ReadParam):
        return True
    try:
        rule = bprop_getters.bprop_graph(fn, len(node.args), SERVICES.parse, node.debug)
    except KTransformError:
        return True  # (the backward pass says so, if it gets there)
    if rule.no_gradient:
        return False
    out = rule.output
    if fn.n_inputs is None or not _builds_tuple(out) or k >= len(out.args):
        return True
    given = out.args[k]
    return not (isinstance(given, Constant) and _gives_nothing(given.value))


def _gives_nothing(grad) -> bool:
    return grad is None or isinstance(grad, NotDifferentiable)


def _arg_mask(node: Apply, k: int, mask: Mask) -> Mask:
    """The items of input `k` of `node` (whose result is read as `mask`)
    that may get a sensitivity, where it is given to a graph (a branch) that
    reads only some (`_params_reached`): `use(d)` with `use` reading
    `d["s"]`; a loop's carry or invariant, the items its iterations read
    (`_loop_inputs`). None: all of them."""
    loop = _loop_inputs(node, mask)
    if loop is not None and k in loop:
        return loop[k]
    callees = _callees(node, k)
    if callees is None:
        return _items_iterated(node, k, mask)
    reached = [_params_reached(g, mask) for g, _ in callees]
    masks = [r[j] for r, (_, j) in zip(reached, callees, strict=True) if j in r]
    return functools.reduce(union, masks) if masks else ()


def _items_iterated(node: Apply, k: int, mask: Mask) -> Mask:
    """The items of the sequence a `for` loop iterates (input `k` of a
    `for_each` whose result is read as `mask`) that may get a sensitivity:
    each item as the body, K'd for the carries read (`loop_carries`), reads
    its parameter (`for a, *rest in [h(x), h(y)]` reads item 0 of each; `EACH`
    item where the sequence is not a display: a loop's K given the list).
    None (all) elsewhere."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if not isinstance(fn, control.ForEach) or k != 0:
        return None
    body = node.args[1].value if isinstance(node.args[1], Constant) else None
    if not isinstance(body, FuncGraph) or body.differentiable() is not body or body.custom_fprop:
        return None
    item = _params_reached(body, loop_carries(node, mask)).get(0, ()) if body.parameters else None
    if not item:
        return item
    if isinstance(_maker_of(node.args[0]), (prims.MakeTuple, prims.MakeList)):
        return tuple((j, item) for j in range(len(node.args[0].args)))
    return ((EACH, item),)


def _loop_body(node: Apply) -> FuncGraph | None:
    """The body of the loop `node` (`for_range`, `for_each`, `while_loop`)
    where K of the loop is made of K of it by the DFunctor; else None."""
    fn = _maker_of(node)
    if not isinstance(fn, LoopPrimitive):
        return None
    slot = fn.graph_slots[-1]
    body = node.args[slot].value if isinstance(node.args[slot], Constant) else None
    if not isinstance(body, FuncGraph) or body.differentiable() is not body:
        return None
    if body.custom_fprop is not None or body.is_custom_fprop:
        return None
    if len(body.parameters) != fn.graph_arity(slot, len(node.args)):
        return None
    return body


def loop_carries(node: Apply, used: Mask) -> Mask:
    """The items of the carries of the loop `node` that may get a
    sensitivity where the items `used` of its result (its final carries)
    are read: those, and what an iteration's body reads of its carries for
    them, to a fixed point (`fori_loop(0, n, body, (a, diag))[0]` never
    reads `diag`: K of the body is made for `a`, so `sqrt(diag)` at 0 sends
    no `0 * inf`). None: all of them."""
    body = _loop_body(node) if used is not None else None
    if body is None:
        return None
    n, heads = _maker_of(node).n_carry, _loop_heads(node)
    items: dict = {}
    for key, sub in used:  # (a key of the result: a carry's index)
        j = key + n if type(key) is int and -n <= key < 0 else key
        if type(j) is not int or not 0 <= j < n:
            return None
        items[j] = union(items[j], sub) if j in items else sub
    carries = sorted_mask(items)
    for rounds in itertools.count():
        reached = _params_reached(body, carries)
        read = {j: reached[heads + j] for j in range(n) if heads + j in reached}
        more = union(carries, sorted_mask(read))
        if more == carries:
            return carries
        carries = more if rounds < WIDEN_AFTER else _widened(carries, more)


WIDEN_AFTER = 8  # rounds of `loop_carries` before a carry still growing is read whole


def _widened(old: Mask, new: Mask) -> Mask:
    """`new` with each carry whose mask grew since `old` read whole: a mask
    may grow without end (`while stack: stack.pop()` over a list of unknown
    length reads its item -1, then -2 of the list before, ...); whole, the
    fixed point is reached, as each carry can only grow to whole once."""
    before = dict(old)
    return sorted_mask({j: (sub if before.get(j, ()) == sub else None) for j, sub in new})


def _loop_heads(node: Apply) -> int:
    """The body's parameters before its carries: the index or item of a `for`."""
    return 0 if isinstance(_maker_of(node), control.WhileLoop) else 1


def _loop_inputs(node: Apply, used: Mask) -> dict[int, Mask] | None:
    """`{input: mask}` for the carries and invariants of the loop `node`
    read as `used` (`loop_carries`): what the body reads of each, an
    unread carry nothing (`()`). None where all may get one."""
    carries = loop_carries(node, used)
    if carries is None:
        return None
    fn, heads = _maker_of(node), _loop_heads(node)
    first, n = max(fn.graph_slots) + 1, fn.n_carry
    reached = _params_reached(_loop_body(node), carries)
    read = dict(carries)
    masks = {first + j: read.get(j, ()) for j in range(n)}
    for k in range(first + n, len(node.args)):
        masks[k] = reached.get(k - first + heads, ())
    return masks


def _maker_of(node: Node):
    return node.fn.value if isinstance(node, Apply) and isinstance(node.fn, Constant) else None


def _callees(node: Apply, k: int) -> list[tuple[FuncGraph, int]] | None:
    """`(graph, j)` where input `k` of `node` is parameter `j` of a graph
    that K of `node` differentiates with the DFunctor (a call of it, the
    branches of a `switch`); None elsewhere (a graph with a rule of its own,
    one given fewer arguments than it has parameters, a run-time value)."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    if isinstance(fn, FuncGraph):
        graphs, j, n = [fn], k, len(node.args)
    elif isinstance(fn, ControlPrimitive) and fn.k_of_graphs and fn.grad_index(k) is not None:
        slots = [node.args[s] for s in fn.graph_slots]
        if not all(isinstance(g, Constant) and isinstance(g.value, FuncGraph) for g in slots):
            return None
        graphs, j = [g.value for g in slots], fn.grad_index(k) - 1
        n = fn.graph_arity(fn.graph_slots[0], len(node.args))
    else:
        return None
    graphs = [g.differentiable() for g in graphs]  # (what K of a graph differentiates)
    for g in graphs:
        if g.custom_fprop is not None or g.is_custom_fprop or n != len(g.parameters):
            return None
    return [(g, j) for g in graphs]


def _params_reached(graph: FuncGraph, used: Mask = None) -> dict[int, Mask]:
    """The parameters of `graph` that K of it may send a gradient, by
    position, each with the items of it that may get one (`liveness`):
    those its result (the items `used` of it: `liveness.mask_of`) reaches,
    or a closure it makes reads where it counts. The others get zeros, so a
    caller sends nothing on to what it gave there (a value a rule reads for
    its structure only, in a branch: `set_item(dout, k, zeros_like(value))`;
    a dict item no one reads; a loop's carry no iteration reads)."""
    table = TRANSFORM.weak_keys("dfunctor.params_reached").setdefault(graph, {})
    if used not in table:
        table[used] = dict.fromkeys(range(len(graph.parameters)))  # a recursion: all, for now
        out = [(n, m) for n, _, m in masked(graph.output, mask_of(graph.output, used))]
        live = live_with_closures(graph, out)[0]
        params = enumerate(graph.parameters)
        table[used] = {k: live[id(p)] for k, p in params if id(p) in live}
    return table[used]


def calls_read(graph: FuncGraph, j: int, out_used: Mask, outer: frozenset = frozenset()) -> Mask:
    """The items of the results of `graph`'s calls of its parameter `j` (a
    function it is given) that may get a sensitivity (`liveness`), where the
    items `out_used` of `graph`'s result are read: `g(x)[0]` reads item 0.
    The parameter may also be given on to a graph that calls it so, or read
    by a closure that does (`_calls_of`). None (all of them) where it goes
    anywhere else: returned, stored in a container, given to a library, in
    a recursion."""
    table = TRANSFORM.weak_keys("dfunctor.calls_read").setdefault(graph, {})
    if (j, out_used) in table:
        return table[(j, out_used)]
    if graph.uid in outer or j >= len(graph.parameters):
        return None
    mask = _calls_of(graph, graph.parameters[j], out_used, outer | {graph.uid})
    table[(j, out_used)] = mask
    return mask


def _calls_of(graph: FuncGraph, fn: Node, out_used: Mask, outer: frozenset) -> Mask:
    """`calls_read` of `fn`, a parameter of `graph` or a node of a graph
    around it that it reads: its calls in `graph` and in the closures of
    `graph` that read it (each for its whole result: the bprop of a loop's
    K replays the body it is given)."""
    if graph.output is fn:
        return None
    out = [(n, m) for n, _, m in masked(graph.output, out_used)]
    live = live_with_closures(graph, out)[0]
    mask: Mask = ()
    for reader in graph.nodes:
        given = [k for k, a in enumerate(reader.args) if a is fn]
        if reader.fn is not fn and not given:
            continue
        read = live.get(id(reader), ())
        maker = _maker_of(reader)
        if reader.fn is fn and not given:
            mask = union(mask, read)  # `g(x)`
        elif isinstance(maker, DynamicK) and given == [0]:
            mask = union(mask, read)  # `g(x)` in a K-graph: `call_fprop(g, x)`
        elif isinstance(maker, structural.ZerosLike):
            continue  # (its zero gradient, an empty env: a loop's K starts `d_f` so)
        elif given and all(_given_to(reader, k, read) for k in given):
            for k in given:  # `apply(g, x)`: how `apply` reads what it calls `g` for
                for callee, at, callee_used in _given_to(reader, k, read):
                    mask = union(mask, calls_read(callee, at, callee_used, outer))
        else:
            return None
        if mask is None:
            return None
    for child in graph.children():
        if any(v is fn for v in child.free_variables()):
            mask = union(mask, _calls_of(child, fn, None, outer))
            if mask is None:
                return None
    return mask


def _given_to(node: Apply, k: int, read: Mask) -> list[tuple[FuncGraph, int, Mask]]:
    """`(graph, j, used)` where input `k` of `node` (whose result is read as
    `read`) is parameter `j` of a graph the DFunctor differentiates for the
    items `used` of its result: a graph called, a `switch`'s branches, the
    body of a loop (`k` an invariant: the body is K'd for the carries the
    loop reads, `loop_carries`). Empty elsewhere."""
    body = _loop_body(node)
    if body is not None:
        fn = _maker_of(node)
        first = max(fn.graph_slots) + 1
        if k < first + fn.n_carry:
            return []
        carries = loop_carries(node, read)
        return [(body, k - first + _loop_heads(node), output_mask(body, carries))]
    callees = _callees(node, k)
    if callees is None:
        return []
    return [(g, j, output_mask(g, read)) for g, j in callees]


def live_with_closures(graph: FuncGraph, starts: list, active=None) -> tuple[dict, set[int]]:
    """`_closures_live`: each node's mask, and the ids of those closures read."""
    live, _, captured = _closures_live(graph, starts, active)
    return live, captured


def _closures_live(graph: FuncGraph, starts: list, active=None) -> tuple[dict, list, set[int]]:
    """`liveness` of `graph` from `starts` (`active`: see there), where the
    nodes of `graph` that its closures read (where it counts: `_live_reads`)
    get a sensitivity too, for the items the closures read of them
    (`_closure_reads`); the nodes the sensitivities come through; and the
    ids of the nodes closures read (their sensitivity comes in the env).
    A closure `graph` only calls (`_called_closures`: the comprehension of
    `list(d.values())`) reads what K of each call, made for the items of its
    result read (`DFunctor.call_k`), reads: to a fixed point, as a call
    reached may reach another. Every other closure counts, whether a
    sensitivity reaches it or not, for its whole result, and so does one
    only called where no call is reached: counting only those reached lost
    what a second derivative needs (an hvp through a loop over an object's
    method, wrong numbers: tests/test_host_python.py)."""
    captured: dict[int, tuple[Node, Mask]] = {}

    def count(child: FuncGraph, used: Mask) -> None:
        for key, (v, mask) in _closure_reads(child, used).items():
            if v.graph is graph:
                captured[key] = (v, union(captured[key][1], mask) if key in captured else mask)

    called = _called_closures(graph)
    for child in graph.children():
        if child not in called:
            count(child, None)
    counted: dict[FuncGraph, Mask] = {}

    def count_calls(live: dict, unreached: bool) -> bool:
        """Count each closure for its calls reached (`unreached`: those with
        none, whole); whether that counted more."""
        more = False
        for child, calls in called.items():
            reached = [live[c] for c in calls if c in live]
            if not reached and not unreached:
                continue
            used = output_mask(child, functools.reduce(union, reached) if reached else None)
            was = counted.get(child, ())
            if child not in counted or union(was, used) != was:
                counted[child] = union(was, used)
                count(child, counted[child])
                more = True
        return more

    while True:
        live, through = liveness(
            graph, [*starts, *captured.values()], _passes_to, active, _arg_mask
        )
        if not count_calls(live, False) and not count_calls(live, True):
            return live, through, set(captured)


def _called_closures(graph: FuncGraph) -> dict[FuncGraph, list[int]]:
    """The closures of `graph` that it only calls, each with the ids of its
    calls: used nowhere else (not as a value, not in another graph), and K
    of a call of it made for the items of its result read (`DFunctor.call_k`)."""
    cache = TRANSFORM.weak_keys("dfunctor.called_closures")
    if graph not in cache:  # (by uid: no entry keeps its graph alive)
        cache[graph] = _only_called(graph)
    return {g: cache[graph][g.uid] for g in graph.children() if g.uid in cache[graph]}


def _only_called(graph: FuncGraph) -> dict[int, list[int]]:
    calls: dict[int, list[int]] = {}
    elsewhere: set[int] = set()
    for node in graph.nodes:
        for k, g in _graphs_in(node.inputs):
            if g.parent is graph:
                if k == 0:
                    calls.setdefault(g.uid, []).append(id(node))
                else:
                    elsewhere.add(g.uid)
    todo = list(graph.children())
    seen: set[int] = set()
    while todo:  # (a nested graph using one: read whole)
        inner = todo.pop()
        if inner.uid in seen:
            continue
        seen.add(inner.uid)
        todo += inner.children()
        elsewhere.update(g.uid for _, g in _graphs_in([*inner.used_nodes()]))
        if inner.parent is graph and (
            inner.differentiable() is not inner
            or inner.custom_fprop is not None
            or inner.jvp_rule is not None
            or inner.is_custom_fprop
        ):
            elsewhere.add(inner.uid)
    elsewhere.update(g.uid for _, g in _graphs_in([graph.output]))
    return {uid: ids for uid, ids in calls.items() if uid not in elsewhere}


def _graphs_in(nodes: list[Node]) -> list[tuple[int, FuncGraph]]:
    """`(position, graph)` for each graph constant among `nodes`."""
    return [
        (k, n.value)
        for k, n in enumerate(nodes)
        if isinstance(n, Constant) and isinstance(n.value, FuncGraph)
    ]


def _closure_reads(closure: FuncGraph, used: Mask = None) -> dict[int, tuple[Node, Mask]]:
    """`{id: (node, mask)}`: the nodes of enclosing graphs that `closure`
    reads where it counts (`_live_reads`), itself or through the closures
    it uses, each with the items of it that K of `closure` may send a
    sensitivity (`liveness` from the items `used` of its result: the bprop
    of a loop K reads its final carries for those the reverse loop reads);
    whole where another closure reads it, or in a recursion of closures."""
    cache = TRANSFORM.weak_keys("dfunctor.closure_reads").setdefault(closure, {})
    if used in cache:
        made = cache[used]
        if made is None:  # (a recursion: all of what it reads, whole)
            return {id(v): (v, None) for v in closure.free_variables(reads=_live_reads)}
        return made
    cache[used] = None
    out = [(n, m) for n, _, m in masked(closure.output, mask_of(closure.output, used))]
    live = live_with_closures(closure, out)[0]
    nodes, closures = _live_reads(closure, used)
    reads: dict[int, tuple[Node, Mask]] = {}
    for v in nodes:
        if v.graph is not closure and v.graph.is_ancestor_of(closure):
            reads[id(v)] = (v, live.get(id(v)))
    for other in closures:
        if other is closure:
            continue
        for key, (v, mask) in _closure_reads(other).items():
            if v.graph is not closure and v.graph.is_ancestor_of(closure):
                reads[key] = (v, union(reads[key][1], mask) if key in reads else mask)
    cache[used] = reads
    return reads


def _live_reads(graph: FuncGraph, used: Mask = None) -> tuple[list[Node], list[FuncGraph]]:
    """`graph.reads_of()`, leaving out reads K of `graph` (made for the
    items `used` of its result) sends no sensitivity to (`liveness`): dead
    code (the part of an inlined rule for an input with no gradient), the
    tuple `getitem_grad` reads for its structure. Their owner need not look
    for one in the env (where a missing entry reads as zeros: `0 * inf` at
    `x ** 0.5`'s x of 0). What the closures of `graph` read counts (a bprop
    it returns reads a call of a closure over the owner's nodes)."""
    cache = TRANSFORM.weak_keys("dfunctor.live_reads").setdefault(graph, {})
    if used not in cache:
        cache[used] = graph.reads_of()  # (in a recursion of closures: all of them)
        out = [(n, m) for n, _, m in masked(graph.output, mask_of(graph.output, used))]
        cache[used] = reads_among(_closures_live(graph, out)[1])
    return cache[used]


def holds_no_gradient(fn: Node) -> bool:
    """Whether the function of a call holds nothing with a gradient, only
    its inputs do: a primitive, or a function with its own rule (which gives
    none to what it reads)."""
    value = fn.value if isinstance(fn, Constant) else None
    return isinstance(value, Primitive) or has_rule(value)


def may_read(node: Apply) -> bool:
    """Whether `node` may read a Parameter whatever its inputs: anything but
    a plain primitive (a call of a graph or value, a branch or loop of
    graphs, a Parameter read an inner gradient made)."""
    fn = node.fn.value if isinstance(node.fn, Constant) else None
    plain = isinstance(fn, Primitive) and not isinstance(fn, ControlPrimitive)
    # (a function with its own rule gives its Parameters no gradient: its rule none)
    return not (plain or has_rule(fn)) or isinstance(fn, structural.ReadParam)


def is_bprop_node(node: Node) -> bool:
    """Whether `node` is a bprop a K-graph made: the second item of a call of
    an fprop graph (generated code at every order, called as it is)."""
    if getattr(node, "k_function", False):
        return True
    if not (isinstance(node, Apply) and isinstance(node.fn, Constant)):
        return False
    if not isinstance(node.fn.value, prims.GetItem) or len(node.args) != 2:
        return False
    pair, index = node.args
    if not (isinstance(index, Constant) and index.value == 1 and isinstance(pair, Apply)):
        return False
    callee = pair.fn.value if isinstance(pair.fn, Constant) else None
    return isinstance(callee, FuncGraph) and callee.kind == "fprop"
