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
  loops of equinox/diffrax, with a simpler schedule). Between two stores the
  iterations run in a plain inner loop (a store per iteration, even one
  dropped, cost the forward 3x), several a trip on a GPU (`control.guarded`).
- `reverse`: segment by segment from the end, it runs forward from the
  latest stored carry towards iteration e-1 once, storing carries in the
  free slots (`_spacing`): all of them when they fit, so each iteration is
  recomputed once; else evenly spaced ones, and again over the last gap.
  Then it pops stored carries and applies their gradient steps while the
  latest is the one wanted. A gap is `stride` (< 2 n / slots) iterations;
  the free room is STACK_ROOM, the slots `record` left free and one more per
  finished segment: 100,000 trips in 1,024 slots recompute 0.99 iterations
  per trip, 131,000 (the slots full) 1.08 (3.5 at both with the bisection
  this replaced, which stored one carry half-way per run). With no room
  beyond STACK_ROOM a push stores one carry half-way (a bisection: at most
  log2(gap) < STACK_ROOM pushes), so the recompute factor is O(log(n /
  slots)) at worst.

Both are lax loops without `lax.cond` on the buffers (XLA updates them in
place; a conditional would copy them). The loop's carry must hold no stacks
(`runtime.stack`): those are sized to the loop bound and stay on the
store-everything path.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from k_transform.control import guarded

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

    def run_on(i, cr, go, end):  # iterations i, i+1, ... < end while the loop runs
        def one(s):
            i, cr, _ = s
            cr = step(i, cr)
            return i + 1, cr, running(i + 1, cr)

        test = lambda s: s[2] & (s[0] < end)  # noqa: E731
        return lax.while_loop(test, guarded.loop_body(test, one, (i, cr, go)), (i, cr, go))

    def fill(state):  # store the carry entering iteration i = top * stride, run to the next
        i, cr, buf, top, stride, go = state
        buf = _put(buf, top, cr)
        i, cr, go = run_on(i, cr, go, i + stride)
        return i, cr, buf, top + 1, stride, go

    def keep_even(j, buf):  # slot j takes slot 2j's carry, in place
        return _tree(lambda b: b.at[j].set(b[2 * j]), buf)

    def epoch(state):  # fill the slots, or end
        i, cr, buf, top, stride, go = lax.while_loop(lambda s: s[5] & (s[3] < slots), fill, state)
        # Full (the loop goes on): keep every other carry. A loop of row
        # moves, none when the loop ended (a lax.cond, or a gather, would
        # copy the buffer on every call).
        buf = lax.fori_loop(1, jnp.where(go, slots // 2, 1), keep_even, buf)
        top = jnp.where(go, slots // 2, top)
        return i, cr, buf, top, jnp.where(go, 2 * stride, stride), go

    start = (zero, carry, buf, zero, jnp.asarray(1, jnp.int32), running(zero, carry))
    n, final, buf, top, stride, _ = lax.while_loop(lambda s: s[-1], epoch, start)
    pos = jnp.where(jnp.arange(size) < top, jnp.arange(size, dtype=jnp.int32) * stride, 0)
    return n, final, (buf, top, pos)


def _put(buf, j, carry):
    """`buf` with slot j holding `carry` (in place under XLA)."""
    return _tree(lambda b, v: lax.dynamic_update_index_in_dim(b, v, j, 0), buf, carry)


def _row(buf, j):
    """Slot j of `buf` (j >= 0: no wrapping of negative indices)."""
    return _tree(lambda b: lax.dynamic_index_in_dim(b, j, 0, keepdims=False), buf)


def _spacing(gap, room):
    """Every how many iterations a reverse push stores a carry, over the
    `gap` iterations from the latest stored carry to the one wanted, with
    `room` free slots: as evenly as the room beyond STACK_ROOM allows (every
    carry when they fit: one run over the gap), one carry half-way when no
    more is left (a bisection, which STACK_ROOM always has room for)."""
    k = jnp.maximum(room - STACK_ROOM, 1)  # carries this push may store
    return (gap + k) // (k + 1)  # ceil(gap / (k + 1)): at most k stored


def reverse(step, grad_step, n, saved, d_carry, acc, add):
    """The reverse sweep over `record`'s checkpoints.

    `grad_step(i, carry_i, d_carry) -> (d_carry, contribution)` is iteration
    i's gradient step; contributions are summed into `acc` with `add`.
    Returns `(d_carry, acc, recomputed)`: the gradient of the loop's first
    carry, the sums, and how many iterations were run again."""
    buf, top, pos = saved
    size = pos.shape[0]

    def behind(state):  # the latest stored carry is older than iteration e-1
        e, top, _, pos, _ = state
        return _row(pos, top - 1) < e - 1

    def push(state):  # run on from it towards e-1, storing carries in the room left
        e, top, buf, pos, rec = state
        p = _row(pos, top - 1)
        every = _spacing(e - p, size - top)
        last = p + every * ((e - 1 - p) // every)  # the last carry stored

        def run(i, st):  # carry i+1 to its slot (or to the next one's, overwritten there)
            c, buf = st
            c = step(i, c)
            return c, _put(buf, top + lax.div(i - p, every), c)

        _, buf = lax.fori_loop(p, last, run, (_row(buf, top - 1), buf))
        stored = (last - p) // every
        j = jnp.arange(size, dtype=jnp.int32)
        pos = jnp.where((j >= top) & (j < top + stored), p + (j - top + 1) * every, pos)
        return e, top + stored, buf, pos, rec + (last - p)

    def has_carry(state):  # iteration e-1's carry is the latest stored
        e, top, _, pos, *_ = state
        return (e > 0) & (_row(pos, jnp.maximum(top - 1, 0)) == e - 1)

    def step_back(state):  # iteration e-1's gradient step; its carry popped
        e, top, buf, pos, d_cr, acc, rec = state
        d_cr, contribution = grad_step(e - 1, _row(buf, top - 1), d_cr)
        return e - 1, top - 1, buf, pos, d_cr, add(acc, contribution), rec

    def segment(state):  # from the latest stored carry to e: push, then step back over it
        e, top, buf, pos, d_cr, acc, rec = state
        e, top, buf, pos, rec = lax.while_loop(behind, push, (e, top, buf, pos, rec))
        return lax.while_loop(has_carry, step_back, (e, top, buf, pos, d_cr, acc, rec))

    # When every carry was stored (the loop fitted), nothing is pushed and
    # one run of step_back does the whole sweep.
    rec0 = jnp.asarray(0, jnp.int32)
    state = (jnp.asarray(n, jnp.int32), top, buf, pos, d_carry, acc, rec0)
    state = lax.while_loop(lambda s: s[0] > 0, segment, state)
    _, _, _, _, d_carry, acc, rec = state
    return d_carry, acc, rec
