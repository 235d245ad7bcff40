"""K of a loop, written once, as IR: the DFunctor's K of every loop, at every order.

K of a loop is a graph of ordinary loop primitives and stacks
(`k_transform.runtime.stack`), so the DFunctor differentiates it again like
any code (grad of grad, Hessians, third order), and J maps it for jvp. How
the carries are stored is the run time's choice (`control.runtime`):

- Python iterations (concrete loops, unrolled ones) push on a cons list and
  keep each iteration's bprop beside its carry (a memo): the reverse loop
  applies it, so the body is not run again (and an effect in it, an
  `ops.Assign`, happens once). `k_of` returns this graph; transforms
  differentiate its twin `differentiated_as`, which recomputes instead,
  its host calls (a random draw, `print`) replaying the results they gave
  in the forward loop (`runtime.host_log`), so they run once.
- Under `lax` the stack is a buffer, one slot per iteration; the reverse
  loop recomputes the iteration's K-body from its carry (so nested loops
  store only their own carries). A traced `while` gets a buffer of its
  loop bound, and the gradient function retraces with a larger one when it
  overflows; under a user's jit, which cannot retrace, and for a `for`
  longer than `kt.set_for_checkpoints(k)`, the recording loop keeps online
  checkpoints instead (`control/checkpoint.py`), and its reverse loop
  recomputes from them.
- A stack in a carry (a loop of a derivative) is pushed as its count
  (`light`) and rebuilt from the final carry's buffer (`heavy`): every
  version of a stack in one loop shares that buffer, so third and higher
  orders store each carry once, not a stack per iteration (memory linear in
  the trip count, not quadratic).

For `while_loop[n](cond, body, *carry, *inv)` with K-body `body_k`:

    def loop_k(cond, body, *carry, *inv):
        *carry, stack = while_loop[n+1, records=n](cond2, body2, *carry, stack_new(), *inv)
            # cond2(*cr, stack, *inv) = cond(*cr, *inv)
            # body2(*cr, stack, *inv) = (*out, stack_push(stack, light(cr), bp))
            #                            where out, bp = body_k(*cr, *inv)
        def bprop(dout):
            env, *d_carry, *d_inv, _ = while_loop[grads, popping](
                nonempty, back, {}, *dout, *zeros(inv), stack, *inv, carry)
                # back: item, stack' = stack_pop(stack); cr = heavy(item, final carry)
                #       bp = the memo if stack has one, else body_k(*cr, *inv)[1]
                #       g = bp(d_carry); env += g[0]; d_carry = g[carry]; d_inv += g[inv]
            return (env, None, None, *d_carry, *d_inv)
        return carry, bprop

`for_range` pushes `(i, *carry)`; `for_each` pushes `(item, k, *carry)` and
adds each item's gradient into the sequence's at `k` (`EachItemGrad`: a dict
seq iterates its keys, which have none). Every reverse loop is a
`while` that pops until the stack is empty (`WhileLoop(popping=...)`): the
stack's capacity bounds its trips, so K of it stores that many carries (a
`for` reversed over its trip count was tried: see `backward`); where the
stack's count is known while tracing (a forward `lax.scan` pushed it), the
run time runs that `while` as a reverse `lax.scan` whose xs are the stored
items (`control.runtime._slot_scan`). The forward loop is marked
`records=` (the carry it pushes on), which is what lets the run time
checkpoint it.
"""

from __future__ import annotations

from k_transform.context import TRANSFORM
from k_transform.control import prims as control
from k_transform.ir.nodes import Constant, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops import structural
from k_transform.ops.arithmetic import Add


def k_of(ctl, graphs: list[FuncGraph], n_args: int, debug, replays: bool = True) -> FuncGraph:
    """K of the loop `ctl` applied to `n_args` inputs whose graph slots hold
    `graphs` (K-graphs in `ctl.k_slots`): a graph computing `(out, bprop)`.
    `replays`: whether the body may call host code (`FuncGraph.may_call_host`
    of the primal body), whose results a recomputed iteration replays."""
    key = (ctl, n_args, replays, *(g.uid for g in graphs))  # `ctl` with its options
    cache = TRANSFORM.cache("k_loops.k_of")
    if key not in cache:
        kept = _LoopK(ctl, graphs, n_args, debug, memo=True, replays=replays).graph
        twin = _LoopK(ctl, graphs, n_args, debug, memo=False, replays=replays)
        kept.differentiated_as = twin.graph
        cache[key] = kept
    return cache[key]


class _LoopK:
    """Builds the graph of `lowered` for one loop (see the module docstring)."""

    def __init__(self, ctl, graphs, n_args: int, debug, memo: bool, replays: bool):
        self.ctl, self.debug, self.memo, self.replays = ctl, debug, memo, replays
        self.n = ctl.n_carry
        self.kind = type(ctl)
        self.body_k = graphs[-1]
        self.cond = graphs[0] if self.kind is control.WhileLoop else None
        self.n_fixed = max(ctl.graph_slots) + 1  # inputs before the carries
        self.n_heads = 0 if self.kind is control.WhileLoop else 1  # i or item
        self.n_inv = n_args - self.n_fixed - self.n
        body_params = [p.name for p in self.body_k.parameters]
        h = self.n_heads
        self.carry_names = body_params[h : h + self.n]
        self.inv_names = body_params[h + self.n :]
        fixed = {control.WhileLoop: ["cond", "body"], control.ForRange: ["start", "stop", "step"]}
        fixed_names = fixed.get(self.kind, ["seq"])[: self.n_fixed - 1] + ["body"]
        name = f"{self.body_k.name.removesuffix('_body_fprop')}_k"
        self.graph = g = FuncGraph(name, debug=debug, kind="fprop")
        names = [*fixed_names, *self.carry_names, *self.inv_names]
        args = [g.add_parameter(a) for a in names]
        g.param_names = names
        g.defaults = {}
        self.build(g, args)

    # -- small builders ------------------------------------------------------
    def prim(self, g: FuncGraph, prim, *args: Node) -> Node:
        return g.apply(Constant(prim, hint=prim.name), *args, debug=self.debug)

    def item(self, g: FuncGraph, tup: Node, k: int) -> Node:
        return self.prim(g, prims.GetItem(), tup, Constant(k))

    def tuple(self, g: FuncGraph, *items: Node) -> Node:
        return self.prim(g, prims.MakeTuple(), *items)

    def sub(self, name: str, kind: str, names: list[str]) -> tuple[FuncGraph, list[Node]]:
        """A closed graph (loop condition or body) with parameters `names`."""
        g = FuncGraph(f"{self.graph.name}_{name}", debug=self.debug, kind=kind)
        params = [g.add_parameter(n) for n in names]
        g.param_names = list(names)
        return g, params

    # -- the forward loop, recording carries ---------------------------------------------
    def build(self, g: FuncGraph, args: list[Node]) -> None:
        n, nf, h = self.n, self.n_fixed, self.n_heads
        fixed, carry, inv = args[:nf], args[nf : nf + n], args[nf + n :]
        each = self.kind is control.ForEach
        extra = [Constant(0)] if each else []  # for_each counts its items
        names = [*self.carry_names, *["k"] * each, "stack", *self.inv_names]
        heads = [self.body_k.parameters[0].name] if h else []
        body, ps = self.sub("forward_body", "loop_body", heads + names)
        heads, cr = ps[:h], ps[h : h + n]
        count, stack, b_inv = ps[h + n : h + n + each], ps[h + n + each], ps[h + n + each + 1 :]
        pair = body.apply(Constant(self.body_k), *heads, *cr, *b_inv, debug=self.debug)
        out = self.item(body, pair, 0)
        new = [self.item(body, out, j) for j in range(n)]
        item = self.prim(body, control.StackLight(), self.tuple(body, *heads, *count, *cr))
        if self.memo:  # a Python iteration keeps its bprop beside its carry
            bprop = self.item(body, pair, 1)
            pushed = self.prim(body, control.StackPushMemo(), stack, item, bprop)
        else:
            pushed = self.prim(body, control.StackPush(), stack, item)
        more = [self.prim(body, Add(), count[0], Constant(1))] if each else []
        body.output = self.tuple(body, *new, *more, pushed)

        loop_fixed = list(fixed)
        if self.kind is control.WhileLoop:
            cond, cps = self.sub("forward_cond", "loop_cond", names)
            cond.output = cond.apply(Constant(self.cond), *cps[:n], *cps[n + 1 :], debug=self.debug)
            loop_fixed = [Constant(cond), Constant(body)]
        else:
            loop_fixed[-1] = Constant(body)
        loop = self.ctl.with_carries(n + each + 1, records=n + each)
        stack0 = self.prim(g, control.StackNew())
        res = self.prim(g, loop, *loop_fixed, *carry, *extra, stack0, *inv)
        res.tuple_arity = -1  # codegen unpacks the carries by name
        final = self.tuple(g, *(self.item(g, res, j) for j in range(n)))
        bprop = self.backward(g, self.item(g, res, n + each), fixed, inv, final)
        g.output = self.tuple(g, final, Constant(bprop, hint=bprop.name))

    # -- the reverse loop, popping them ------------------------------------------------
    def backward(self, g: FuncGraph, stack: Node, fixed, inv, final: Node) -> FuncGraph:
        n, h, n_inv = self.n, self.n_heads, self.n_inv
        each = self.kind is control.ForEach
        bp = FuncGraph(f"{self.graph.name}_bprop", g, self.debug, "bprop")
        dout = bp.add_parameter("dout")
        seq = fixed[:each]
        env0 = Constant(structural.EMPTY_ENV, hint="EMPTY_ENV")
        d_carry = [self.item(bp, dout, j) for j in range(n)]
        d_inv = [self.prim(bp, structural.ZerosLike(), x) for x in inv]
        d_seq = [self.prim(bp, structural.ZerosLike(), s) for s in seq]

        names = ["env", *(f"d_{c}" for c in self.carry_names), *(f"d_{v}" for v in self.inv_names)]
        names += ["d_seq"] * each + ["stack", *self.inv_names] + ["seq"] * each + ["final"]
        n_acc = 1 + n + n_inv + each  # carried: env, gradients, then the stack
        # Reversing a `for` over its trip count (a `lax.scan` when static) was tried with
        # loop-gradient-once; second order through `for` with `continue` then mixed float32
        # into float64 switch branches. Until that is found, every reverse is a `while`.
        body, ps = self.sub("reverse_body", "loop_body", names)
        env, dc, di = ps[0], ps[1 : 1 + n], ps[1 + n : 1 + n + n_inv]
        st, b_inv = ps[n_acc], ps[n_acc + 1 : n_acc + 1 + n_inv]
        b_seq, b_final = ps[n_acc + 1 + n_inv : -1], ps[-1]
        popped = self.prim(body, control.StackPop(), st, Constant(None))
        popped.tuple_arity = 2
        rest = self.item(body, popped, 1)
        # stacks in the popped carry were stored as counts: their buffers are the final carry's
        final_cr = [self.item(body, b_final, j) for j in range(n)]
        like = self.tuple(body, *[Constant(None)] * (h + each), *final_cr)
        item = self.prim(body, control.StackHeavy(), self.item(body, popped, 0), like)
        heads = [self.item(body, item, k) for k in range(h)]
        cr = [self.item(body, item, h + each + j) for j in range(n)]
        bprop = self.recall(body, [*heads, *cr, *b_inv], st)
        grads = body.apply(bprop, self.tuple(body, *dc), debug=self.debug)
        grads.tuple_arity = -1
        new_env = self.prim(body, structural.AddGrad(), env, self.item(body, grads, 0))
        new_dc = [self.item(body, grads, 1 + h + j) for j in range(n)]
        new_di = [
            self.prim(body, structural.AddGrad(), di[j], self.item(body, grads, 1 + h + n + j))
            for j in range(n_inv)
        ]
        new_ds = []
        if each:
            k = self.item(body, item, h)
            d_item = self.item(body, grads, 1)
            placed = self.prim(body, control.EachItemGrad(), b_seq[0], b_seq[0], k, d_item)
            new_ds = [self.prim(body, structural.AddGrad(), ps[n_acc - 1], placed)]
        body.output = self.tuple(body, new_env, *new_dc, *new_di, *new_ds, rest)

        # a `while` until the stack is empty: the stack bounds its trips (no
        # loop bound, no overflow check)
        cond, cps = self.sub("reverse_cond", "loop_cond", names)
        cond.output = self.prim(cond, control.StackNonEmpty(), cps[n_acc])
        loop = control.WhileLoop(n_acc + 1, self.ctl.where, grads=True, popping=n_acc)
        inputs = [env0, *d_carry, *d_inv, *d_seq, stack, *inv, *seq, final]
        res = self.prim(bp, loop, Constant(cond), Constant(body), *inputs)
        res.tuple_arity = -1
        d_fixed = [Constant(None)] * self.n_fixed
        if each:
            d_fixed[0] = self.item(bp, res, n_acc - 1)
        outs = [self.item(bp, res, k) for k in range(1 + n + n_inv)]
        bp.output = self.tuple(bp, outs[0], *d_fixed, *outs[1:])
        return bp

    def recall(self, body: FuncGraph, args: list[Node], stack: Node) -> Node:
        """The bprop of the iteration on top of `stack`: K(body) run again on
        its carry `args`, its host calls replaying what they gave when it ran
        (`HostReplay`), or (`memo`) the one a Python iteration kept, when it
        did (no recomputation, and an effect in the body is not repeated)."""
        if not self.memo:
            return self.item(body, self.again(body, args, stack), 1)
        names = [p.name for p in self.body_k.parameters] + ["stack"]
        again, ps = self.sub("recompute", "branch", names)
        again.output = self.item(again, self.again(again, ps[:-1], ps[-1]), 1)
        kept, ps = self.sub("recall", "branch", names)
        kept.output = self.prim(kept, control.StackMemo(), ps[-1])
        has = self.prim(body, control.StackHasMemo(), stack)
        fixed = [Constant(kept, hint=kept.name), Constant(again, hint=again.name)]
        return self.prim(body, control.Switch(self.ctl.where), has, *fixed, *args, stack)

    def again(self, g: FuncGraph, args: list[Node], stack: Node) -> Node:
        """K(body)(*args) run again for the iteration on top of `stack`; a body
        that may call host code replays its iteration's log (`HostReplay`),
        one that cannot is called as it is (a replay reads the stack, so a
        derivative of it carries the stack's zero gradient in every item, and
        its body is not inlined: the jvp of a gradient through a 10-trip loop
        traced 2.4x the equations)."""
        if not self.replays:
            pair = g.apply(Constant(self.body_k), *args, debug=self.debug)
            pair.tuple_arity = 2
            return pair
        log = self.prim(g, control.StackLog(), stack)
        pair = self.prim(g, control.HostReplay(self.ctl.where), log, Constant(self.body_k), *args)
        pair.tuple_arity = 2
        return pair
