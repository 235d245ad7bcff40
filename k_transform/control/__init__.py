"""Control flow, in one place: `if`, `while` and `for`.

- `prims`: how control flow appears in the IR (`switch`, `while_loop`,
  `for_range`, `for_each`, with closed FuncGraphs as inputs), and the stack
  primitives K of a loop uses, with their rules.
- `runtime`: what those primitives do when generated code runs (`_ctl`):
  Python control flow on concrete values, `lax.cond`/`lax.while_loop`/
  `lax.scan` on traced ones.
- `k_loops`: K of a loop, written once, as IR (a forward loop recording
  each iteration's carry on a stack, a reverse loop popping them), so it
  differentiates again to any order.
- `policy`: when a loop unrolls; `checkpoint`: online checkpointing, the
  run-time storage of a recording loop under a jit that cannot retrace.

K of a `switch` is a `switch` of K-graphs (in the DFunctor itself).
"""
