"""Control flow, in one place: `if`, `while` and `for`.

- `prims`: how control flow appears in the IR (`switch`, `while_loop`,
  `for_range`, `for_each`, with closed FuncGraphs as inputs), and the stack
  primitives K of a loop uses, with their rules.
- `runtime`: what those primitives do when generated code runs (`_ctl`):
  Python control flow on concrete values, `lax.cond`/`lax.while_loop`/
  `lax.scan` on traced ones.
- `loop_grad`: first-order K of a loop at run time (`_rtg`); `k_loops`: K
  of a loop written as IR, used when a loop's K is differentiated again.
- `policy`: when a loop unrolls.

K of a `switch` is a `switch` of K-graphs (in the DFunctor itself).
"""
