"""Online checkpointing: a traced loop's reverse sweep in fixed memory.

A loop's reverse sweep needs the carry that entered each iteration. Storing
all of them needs a buffer as long as the trip count, which a traced `while`
does not know. Here the forward loop keeps at most `slots` carries, however
long it runs, and the reverse sweep recomputes the others:

- `record` (forward): the carry entering every `stride`-th iteration is
  stored, `stride` starting at 1 (every carry: the fast path when the loop
  fits). When the slots are full, every other stored carry is dropped and the
  stride doubles, so the slots always hold carries at `0, stride, 2 stride,
  ...` spread over the whole run (online checkpointing for an unknown number
  of steps, in the spirit of Stumm and Walther 2010 and of the treeverse
  loops of equinox/diffrax, with a simpler schedule).
- `reverse`: for i = n-1 .. 0, while the latest stored carry is older than
  i, it runs forward from it to half-way to i and pushes that carry (a
  bisection); then it pops carry i and applies its gradient step. A gap of
  g iterations costs about g log2(g) / 2 recomputed iterations, so the
  recompute factor is O(log(n / slots)); the pushes need at most
  log2(gap) < STACK_ROOM extra slots.

Both are lax loops without `lax.cond` on the buffers (XLA updates them in
place; a conditional would copy them). The loop's carry must hold no stacks
(`runtime.stack`): those are sized to the loop bound and stay on the
store-everything path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

STACK_ROOM = 64  # bisection pushes: at most log2 of the largest gap (< 2**63)

_tree = jax.tree_util.tree_map


def record(step, running, carry, slots: int):
    """Run `carry = step(i, carry)` for i = 0, 1, ... while `running(i, carry)`.

    Returns `(n, final, saved)`: the trip count, the final carry, and the
    checkpoints `saved = (buf, top, pos)` for `reverse` (`buf[j]` holds the
    carry that entered iteration `pos[j]`, for j < top)."""
    if slots < 2 or slots % 2:
        raise ValueError(f"checkpoint slots must be an even number >= 2, not {slots}")
    size = slots + STACK_ROOM
    buf = _tree(lambda c: jnp.zeros((size, *jnp.shape(c)), jnp.result_type(c)), carry)
    zero = jnp.asarray(0, jnp.int32)

    def fill(state):  # until the loop ends or a store finds the slots full
        i, cr, buf, top, stride, go = state
        store = i % stride == 0
        at = jnp.where(store, top, size)  # out of range: dropped
        buf = _tree(lambda b, v: b.at[at].set(v, mode="drop"), buf, cr)
        cr = step(i, cr)
        return i + 1, cr, buf, top + store, stride, running(i + 1, cr)

    def room_left(state):
        i, _, _, top, stride, go = state
        return go & ~((i % stride == 0) & (top == slots))

    def keep_even(j, buf):  # slot j takes slot 2j's carry, in place
        return _tree(lambda b: b.at[j].set(b[2 * j]), buf)

    def epoch(state):
        i, cr, buf, top, stride, go = lax.while_loop(room_left, fill, state)
        # Full (the loop goes on): keep every other carry. A loop of row
        # moves, none when the loop ended (a lax.cond would copy the buffer).
        buf = lax.fori_loop(1, jnp.where(go, slots // 2, 1), keep_even, buf)
        top = jnp.where(go, slots // 2, top)
        return i, cr, buf, top, jnp.where(go, 2 * stride, stride), go

    start = (zero, carry, buf, zero, jnp.asarray(1, jnp.int32), running(zero, carry))
    n, final, buf, top, stride, _ = lax.while_loop(lambda s: s[-1], epoch, start)
    pos = jnp.where(jnp.arange(size) < top, jnp.arange(size, dtype=jnp.int32) * stride, 0)
    return n, final, (buf, top, pos)


def reverse(step, grad_step, n, saved, d_carry, acc, add):
    """The reverse sweep over `record`'s checkpoints.

    `grad_step(i, carry_i, d_carry) -> (d_carry, contribution)` is iteration
    i's gradient step; contributions are summed into `acc` with `add`.
    Returns `(d_carry, acc, recomputed)`: the gradient of the loop's first
    carry, the sums, and how many iterations were run again."""
    buf, top, pos = saved

    def at(b, j):
        return _tree(lambda x: x[j], b)

    def behind(state):  # the latest stored carry is older than iteration e-1
        e, top, _, pos, _ = state
        return pos[top - 1] < e - 1

    def push(state):  # run half-way from it to e-1 and store that carry
        e, top, buf, pos, rec = state
        p = pos[top - 1]
        q = p + (e - p) // 2
        c = lax.fori_loop(p, q, step, at(buf, top - 1))
        buf = _tree(lambda b, v: b.at[top].set(v), buf, c)
        return e, top + 1, buf, pos.at[top].set(q), rec + (q - p)

    def body(state):
        e, top, buf, pos, d_cr, acc, rec = state
        e, top, buf, pos, rec = lax.while_loop(behind, push, (e, top, buf, pos, rec))
        d_cr, contribution = grad_step(e - 1, at(buf, top - 1), d_cr)
        return e - 1, top - 1, buf, pos, d_cr, add(acc, contribution), rec

    # When every carry was stored (the loop fitted), no iteration pushes.
    rec0 = jnp.asarray(0, jnp.int32)
    state = (jnp.asarray(n, jnp.int32), top, buf, pos, d_carry, acc, rec0)
    state = lax.while_loop(lambda s: s[0] > 0, body, state)
    _, _, _, _, d_carry, acc, rec = state
    return d_carry, acc, rec
