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

Loops return the final carry tuple. `break`, `continue` and early `return`
are lowered before this point (`k_transform.ir.desugar`). At run time each
primitive picks Python control flow for concrete conditions and `lax.cond`,
`lax.while_loop` or `lax.scan` for traced ones (`k_transform.runtime`).
`where` ("file:line") names the statement in run-time errors.
"""

from __future__ import annotations

from k_transform import runtime as rt
from k_transform.ir.primitive import Primitive


class ControlPrimitive(Primitive):
    """A primitive whose inputs include FuncGraphs; `graph_slots` says where.

    `k_slots`: graph slots whose K-graph the gradient needs (a `while`
    condition stays primal); `nondiff_slots`: inputs that get no gradient
    (graphs, conditions, range bounds).
    """

    graph_slots: tuple[int, ...] = ()
    k_slots: tuple[int, ...] = ()
    nondiff_slots: tuple[int, ...] = ()

    def grad_index(self, k: int) -> int | None:
        """Where the gradient of input k is in the bprop's result (None: nowhere)."""
        return None if k in self.nondiff_slots else k + 1

    def call_parts(self, args: list[str]) -> list[str]:
        """The arguments of the runtime helper call, as source text."""
        return list(args)

    def emit(self, e, args):
        return self._emit_call(e, self.name, self.call_parts(args))

    def graph_arity(self, slot: int, n_args: int) -> int:
        """How many parameters the graph at `slot` takes, given `n_args` inputs."""
        raise NotImplementedError

    def options(self) -> dict:
        """Keyword arguments of the runtime helper: `where`, and `grads` when set."""
        out = {"where": self.where} if self.where else {}
        if self.attrs.get("grads"):
            out["grads"] = True
        return out

    def _emit_call(self, e, fn: str, parts: list[str], module=rt, alias: str = "_rt") -> str:
        parts = [*parts, *(f"{k}={v!r}" for k, v in self.options().items())]
        return f"{e.ref(module, alias)}.{fn}({', '.join(parts)})"


class LoopPrimitive(ControlPrimitive):
    """A loop; `grads=True` marks a loop whose carries are gradients (a loop of
    a derivative, see `k_transform.dfunctor.loops`): None is zero there."""

    def __init__(self, name: str, n_carry: int, where: str, grads: bool):
        flags = {"grads": True} if grads else {}
        super().__init__(name, n_carry=n_carry, where=where, **flags)


class Switch(ControlPrimitive):
    graph_slots = (1, 2)
    k_slots = (1, 2)
    nondiff_slots = (0, 1, 2)

    def grad_index(self, k):
        # K(switch) is a switch of K-graphs: its bprop is the taken branch's,
        # returning (env, d_args...) for the branch arguments args[3:].
        return None if k < 3 else k - 2

    def __init__(self, where: str = ""):
        super().__init__("switch", where=where)

    def graph_arity(self, slot, n_args):
        return n_args - 3

    def impl(self, cond, true_fn, false_fn, *args):
        return rt.switch(cond, true_fn, false_fn, *args, where=self.where)


class WhileLoop(LoopPrimitive):
    graph_slots = (0, 1)
    k_slots = (1,)
    nondiff_slots = (0, 1)

    def __init__(self, n_carry: int, where: str = "", grads: bool = False):
        super().__init__("while_loop", n_carry, where, grads)

    def graph_arity(self, slot, n_args):
        return n_args - 2

    def impl(self, cond_fn, body_fn, *values):
        return rt.while_loop(cond_fn, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:2], str(self.n_carry), *args[2:]]


class ForRange(LoopPrimitive):
    graph_slots = (3,)
    k_slots = (3,)
    nondiff_slots = (0, 1, 2, 3)

    def __init__(self, n_carry: int, where: str = "", grads: bool = False):
        super().__init__("for_range", n_carry, where, grads)

    def graph_arity(self, slot, n_args):
        return n_args - 4 + 1

    def impl(self, start, stop, step, body_fn, *values):
        return rt.for_range(start, stop, step, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:4], str(self.n_carry), *args[4:]]


class ForEach(LoopPrimitive):
    graph_slots = (1,)
    k_slots = (1,)
    nondiff_slots = (1,)

    def __init__(self, n_carry: int, where: str = "", grads: bool = False):
        super().__init__("for_each", n_carry, where, grads)

    def graph_arity(self, slot, n_args):
        return n_args - 2 + 1

    def impl(self, seq, body_fn, *values):
        return rt.for_each(seq, body_fn, self.n_carry, *values, **self.options())

    def call_parts(self, args):
        return [*args[:2], str(self.n_carry), *args[2:]]
