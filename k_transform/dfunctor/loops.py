"""K of a loop written as IR, for loops differentiated more than once.

First-order K of a loop is a runtime helper (`k_transform.runtime_grad`):
fast, but Python, so the DFunctor cannot transform it again. When a K-graph
that contains one (`ControlFprop`) is differentiated (grad of grad, jvp),
the DFunctor calls `lowered(node)` instead: the same `(out, bprop)` built
from ordinary loop primitives, so it differentiates again, to any order.

For `while_loop[n](cond, body, *carry, *inv)` with K-body `body_k`:

    def loop_k(cond, body, *carry, *inv):
        *carry, stack = while_loop[n+1](cond2, body2, *carry, stack_new(), *inv)
            # cond2(*cr, stack, *inv) = cond(*cr, *inv)
            # body2(*cr, stack, *inv) = (*body_k(*cr, *inv)[0], stack_push(stack, cr))
        def bprop(dout):
            env, *d_carry, *d_inv, _ = while_loop[grads](nonempty, back, {}, *dout,
                                                          *zeros(inv), stack, *inv)
                # back: cr, stack = stack_pop(stack); g = body_k(*cr, *inv)[1](d_carry)
                #       env += g[0]; d_carry = g[carry]; d_inv += g[inv]
            return (env, None, None, *d_carry, *d_inv)
        return carry, bprop

`for_range` pushes `(i, *carry)`; `for_each` pushes `(item, k, *carry)` and
adds each item's gradient into the sequence's at `k`. The reverse loop
recomputes each iteration's K-body from its stored carry (as the runtime's
traced loops do), so nested loops store only their own carries. Stacks are
Python cons lists for concrete loops and buffers under `lax`
(`k_transform.runtime_stack`).
"""

from __future__ import annotations

from k_transform.dfunctor import prims as dp
from k_transform.ir import control, prims
from k_transform.ir.nodes import Apply, Constant, FuncGraph, Node
from k_transform.ops.arithmetic import Add
from k_transform.ops.structural import GetItemGrad

_cache: dict[tuple, FuncGraph] = {}


def lowered(node: Apply) -> FuncGraph:
    """A graph taking `node`'s inputs that computes what `node`, a
    `ControlFprop` of a loop, computes: `(out, bprop)`."""
    ctl = node.fn.value.control
    graphs = [node.args[k].value for k in ctl.graph_slots]
    key = (type(ctl), ctl.n_carry, ctl.where, len(node.args), *(g.uid for g in graphs))
    if key not in _cache:
        _cache[key] = _LoopK(ctl, graphs, len(node.args), node.debug).graph
    return _cache[key]


class _LoopK:
    """Builds the graph of `lowered` for one loop (see the module docstring)."""

    def __init__(self, ctl, graphs, n_args: int, debug):
        self.ctl, self.debug = ctl, debug
        self.n = ctl.n_carry
        self.kind = type(ctl)
        self.body_k = graphs[-1]
        self.cond = graphs[0] if self.kind is control.WhileLoop else None
        self.n_fixed = max(ctl.graph_slots) + 1  # inputs before the carries
        self.n_heads = 0 if self.kind is control.WhileLoop else 1  # i or item
        self.n_inv = n_args - self.n_fixed - self.n
        name = f"{self.body_k.name}_loop_k"
        self.graph = g = FuncGraph(name, debug=debug, kind="fprop")
        args = [g.add_parameter(f"a{k}") for k in range(n_args)]
        g.param_names = [a.name for a in args]
        g.defaults = {}
        self.build(g, args)

    # -- small builders ------------------------------------------------------
    def prim(self, g: FuncGraph, prim, *args: Node) -> Node:
        return g.apply(Constant(prim, hint=prim.name), *args, debug=self.debug)

    def item(self, g: FuncGraph, tup: Node, k: int) -> Node:
        return self.prim(g, prims.GetItem(), tup, Constant(k))

    def tuple(self, g: FuncGraph, *items: Node) -> Node:
        return self.prim(g, prims.MakeTuple(), *items)

    def sub(self, name: str, names: list[str]) -> tuple[FuncGraph, list[Node]]:
        """A closed graph (loop condition or body) with parameters `names`."""
        g = FuncGraph(f"{self.graph.name}_{name}", debug=self.debug, kind=name)
        params = [g.add_parameter(n) for n in names]
        g.param_names = list(names)
        return g, params

    # -- the forward loop, recording carries ---------------------------------------------
    def build(self, g: FuncGraph, args: list[Node]) -> None:
        n, nf, h = self.n, self.n_fixed, self.n_heads
        fixed, carry, inv = args[:nf], args[nf : nf + n], args[nf + n :]
        each = self.kind is control.ForEach
        extra = [Constant(0)] if each else []  # for_each counts its items
        names = [f"c{k}" for k in range(n)] + ["k"] * each + ["stack"]
        names += [f"i{k}" for k in range(self.n_inv)]
        body, ps = self.sub("loop_body", [f"h{k}" for k in range(h)] + names)
        heads, cr = ps[:h], ps[h : h + n]
        count, stack, b_inv = ps[h + n : h + n + each], ps[h + n + each], ps[h + n + each + 1 :]
        pair = body.apply(Constant(self.body_k), *heads, *cr, *b_inv, debug=self.debug)
        out = self.item(body, pair, 0)
        new = [self.item(body, out, j) for j in range(n)]
        pushed = self.prim(body, dp.StackPush(), stack, self.tuple(body, *heads, *count, *cr))
        more = [self.prim(body, Add(), count[0], Constant(1))] if each else []
        body.output = self.tuple(body, *new, *more, pushed)

        loop_fixed = list(fixed)
        if self.kind is control.WhileLoop:
            cond, cps = self.sub("loop_cond", names)
            cond.output = cond.apply(Constant(self.cond), *cps[:n], *cps[n + 1 :], debug=self.debug)
            loop_fixed = [Constant(cond), Constant(body)]
        else:
            loop_fixed[-1] = Constant(body)
        loop = self.kind(n + each + 1, self.ctl.where)
        stack0 = self.prim(g, dp.StackNew())
        res = self.prim(g, loop, *loop_fixed, *carry, *extra, stack0, *inv)
        res.tuple_arity = -1  # codegen unpacks the carries by name
        final = self.tuple(g, *(self.item(g, res, j) for j in range(n)))
        bprop = self.backward(g, self.item(g, res, n + each), fixed, inv)
        g.output = self.tuple(g, final, Constant(bprop, hint=bprop.name))

    # -- the reverse loop, popping them ------------------------------------------------
    def backward(self, g: FuncGraph, stack: Node, fixed: list[Node], inv: list[Node]) -> FuncGraph:
        n, h, n_inv = self.n, self.n_heads, self.n_inv
        each = self.kind is control.ForEach
        bp = FuncGraph(f"{self.graph.name}_bprop", g, self.debug, "bprop")
        dout = bp.add_parameter("dout")
        seq = fixed[:each]
        env0 = Constant(dp.EMPTY_ENV, hint="EMPTY_ENV")
        d_carry = [self.item(bp, dout, j) for j in range(n)]
        d_inv = [self.prim(bp, dp.ZerosLike(), x) for x in inv]
        d_seq = [self.prim(bp, dp.ZerosLike(), s) for s in seq]

        names = ["env", *(f"d_c{j}" for j in range(n)), *(f"d_i{j}" for j in range(n_inv))]
        names += ["d_seq"] * each + ["stack", *(f"i{j}" for j in range(n_inv))] + ["seq"] * each
        n_acc = 1 + n + n_inv + each  # carried: env, gradients, then the stack
        cond, cps = self.sub("loop_cond", names)
        cond.output = self.prim(cond, dp.StackNonEmpty(), cps[n_acc])

        body, ps = self.sub("loop_body", names)
        env, dc, di = ps[0], ps[1 : 1 + n], ps[1 + n : 1 + n + n_inv]
        st, b_inv, b_seq = ps[n_acc], ps[n_acc + 1 : n_acc + 1 + n_inv], ps[n_acc + 1 + n_inv :]
        popped = self.prim(body, dp.StackPop(), st, Constant(None))
        popped.tuple_arity = 2
        item, rest = self.item(body, popped, 0), self.item(body, popped, 1)
        heads = [self.item(body, item, k) for k in range(h)]
        cr = [self.item(body, item, h + each + j) for j in range(n)]
        pair = body.apply(Constant(self.body_k), *heads, *cr, *b_inv, debug=self.debug)
        pair.tuple_arity = 2
        grads = body.apply(self.item(body, pair, 1), self.tuple(body, *dc), debug=self.debug)
        grads.tuple_arity = -1
        new_env = self.prim(body, dp.AddGrad(), env, self.item(body, grads, 0))
        new_dc = [self.item(body, grads, 1 + h + j) for j in range(n)]
        new_di = [
            self.prim(body, dp.AddGrad(), di[j], self.item(body, grads, 1 + h + n + j))
            for j in range(n_inv)
        ]
        new_ds = []
        if each:
            k = self.item(body, item, h)
            placed = self.prim(body, GetItemGrad(), b_seq[0], k, self.item(body, grads, 1))
            new_ds = [self.prim(body, dp.AddGrad(), ps[n_acc - 1], placed)]
        body.output = self.tuple(body, new_env, *new_dc, *new_di, *new_ds, rest)

        loop = control.WhileLoop(n_acc + 1, self.ctl.where, grads=True)
        res = self.prim(
            bp,
            loop,
            Constant(cond),
            Constant(body),
            env0,
            *d_carry,
            *d_inv,
            *d_seq,
            stack,
            *inv,
            *seq,
        )
        res.tuple_arity = -1
        d_fixed = [Constant(None)] * self.n_fixed
        if each:
            d_fixed[0] = self.item(bp, res, n_acc - 1)
        outs = [self.item(bp, res, k) for k in range(1 + n + n_inv)]
        bp.output = self.tuple(bp, outs[0], *d_fixed, *outs[1:])
        return bp
