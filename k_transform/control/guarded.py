"""Several iterations of a traced `while` per trip of its `lax.while_loop`.

XLA's GPU while loop copies its traced predicate to the host on every trip:
on an H200 (JAX 0.11), a 1,024-float body cost 17-21 us a trip with a traced
trip count against 7-8 us with a static one, and 4.6-5.4 us a step when each
trip ran four steps, every one after the first guarded by the loop's test:
`y = where(test(y), body(y), y)`. On a CPU the trip is cheap and the guards
are not (1.6 us a step unguarded, 2.1 with four a trip), so how many steps a
trip runs is `policy.while_steps`.

A guarded step runs the body on whatever the carry is; where the test is
false, its results are dropped by `where` (never differentiated: K of a loop
is built before this runs, so a `where` here meets no 0 * inf). It must not
be seen otherwise, so a loop is stepped only where:

- the body's jaxpr has no effects (a `jax.debug.print` or a callback would
  run in steps the loop does not take);
- its carry holds no stack but the one the loop pushes each iteration on
  (`records`: the forward loop of K of a loop) or pops each iteration from
  (`popping`: its reverse), and that stack's items hold none. A step the
  test drops leaves that stack's count as it was (`where`); a push in it
  wrote the slot at that count, above the stack's items, which the next
  push overwrites. So that slot is never a stored item's, a pushed stack
  has one slot more than its bound (`spare`), which a loop filling it
  overflows (`rs.check_stacks`): no buffer is copied or selected whole.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.control import policy
from k_transform.runtime import stack as rs


def spare(carry, pushed) -> int:
    """The slots past its bound a loop pushing on its carry `pushed` (if
    not None) gives its stack: one where its iterations may be stepped and
    the loop lays the stack out (a Python stack as it starts); a loop given
    a stack laid out already pushes on it one iteration a trip."""
    fresh = pushed is not None and isinstance(carry[pushed], rs.PyStack)
    return int(fresh and policy.while_steps(0) > 1)


def loop_body(test, body, carry, pushed=None, popped=None):
    """The body of a `lax.while_loop(test, ., carry)` running `body` once
    and then up to `policy.while_steps` - 1 guarded steps a trip, or `body`
    itself where the loop cannot be stepped (see the module's docstring).
    `pushed`, `popped`: the index in the carry of the stack each iteration
    pushes on (given `spare` slots) or pops from, if any; a carry holding
    another stack is not stepped."""
    own = pushed if pushed is not None else popped
    k = policy.while_steps(_plain_bytes(carry, own))
    if k <= 1 or not _only_own_stack(carry, own):
        return body

    def guarded(cr):
        go = test(cr)
        return _kept(go, body(cr), cr, own)

    step = jax.jit(guarded)

    def trip(cr):
        cr = body(cr)
        if step.trace(cr).jaxpr.effects:
            return cr
        for _ in range(k - 1):
            cr = step(cr)
        return cr

    return trip


def _kept(go, new, old, own):
    """`new` where `go`, else `old`; the stack at `own` keeps `new`'s buffer
    and takes the count `go` picks."""
    out = list(new)
    for j, (n, o) in enumerate(zip(new, old, strict=True)):
        if j == own:
            out[j] = rs.BufStack(n.buf, jnp.where(go, n.n, o.n), n.memo)
        else:
            out[j] = jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), n, o)
    return type(new)(out) if isinstance(new, tuple) else out


def _only_own_stack(carry, own) -> bool:
    """Whether the only stack in `carry` is the buffer at `own`, holding no
    stacks and no memos (a recording loop's or its reverse's, at first order)."""
    for j, c in enumerate(carry):
        stacks = [x for x in jax.tree_util.tree_leaves(c, is_leaf=rs.is_stack) if rs.is_stack(x)]
        if j != own and stacks:
            return False
        if j == own and not (
            isinstance(c, rs.BufStack)
            and c.memo is None
            and rs.capacity(c)
            and not rs.has_stacks(c.buf)
        ):
            return False
    return True


def _plain_bytes(carry, own) -> int:
    """The bytes a guarded step selects: the carry but the stack at `own`."""
    rest = [c for j, c in enumerate(carry) if j != own]
    return sum(
        int(jnp.size(x)) * jnp.result_type(x).itemsize
        for x in jax.tree_util.tree_leaves(rest)
        if hasattr(x, "dtype")
    )
