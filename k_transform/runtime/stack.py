"""Stacks of per-iteration values, and the bound of traced `while` loops.

K of a loop (`k_transform.control.k_loops`) pushes each iteration's carry on
a stack in its forward loop and pops them in its reverse loop. A stack is a
value: `stack_push` and `stack_pop` return new stacks. Representations:

- `PyStack`, a cons cell `(top, rest)`, while loops run in Python (concrete
  conditions): O(1) push and pop, items of any kind (Python ints stay ints),
  and beside each item a `memo` (the iteration's bprop, so the reverse loop
  need not run the body again).
- `BufStack`, one buffer of `cap` slots per leaf of the item and a count `n`,
  once a loop runs under `lax` (traced). Runtime loops promote a `PyStack`
  carry when they enter `lax` (`control.runtime.settle_carry`), with room for
  the trip count (`for`) or for `loop_bound(where)` (`while`); `check_stacks`
  reports a push past the end as `LoopBoundExceeded`, and gradient functions
  then raise that loop's bound and retrace.
- `Checkpoints`, what a recording loop that kept online checkpoints leaves
  (under a user's jit): its reverse loop recomputes instead of popping.
- `SlotIn`, `SlotOut`: inside one iteration of a `lax.scan` that reads a
  stack's items as its xs or writes them as its ys (`control.runtime`), the
  stack as that iteration sees it: one item to pop, or one slot to push
  (JAX's scan takes its residuals and cotangents so, where a carried
  buffer costs a dynamic slice or update per item and iteration).

The gradient of a `BufStack` is the gradient of its buffer, with the primal's
count (so positions line up): push's rule pops the output gradient and zeroes
that slot, pop's rule adds into it (`stack_pop_grad`, `stack_push_grad`). A
`PyStack`'s gradient is a cons list; a zero one may end in None (zeros of
unknown length): cons lists line up at their top, so adding them works.

Our generated loops only push or only pop a given stack, so a slot below
`n` is never overwritten while it is below `n`: every version of a stack in
one loop shares the final buffer. `light`/`heavy` use this to store a
loop's stacks per iteration as counts only. A sequence a loop run in Python
grows (a comprehension, `append`, star-unpacking: at third order, of
gradients holding stacks) grows at its end, so an iteration's stored items
pair with the final sequence's first ones (`_grown`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from k_transform.errors import KTransformError
from k_transform.runtime import host_log, residuals
from k_transform.runtime.bounds import report_overflow
from k_transform.runtime.values import (
    UNDEFINED,
    GradValue,
    add_grad,
    fit,
    is_tracer,
    rebuild,
    zeros_like_value,
)


# -- the two representations ----------------------------------------------------
class PyStack(GradValue):
    """A cons cell: `top` on `rest` (a PyStack, or None: zeros below).
    `memo`: what the loop that pushed `top` keeps beside it (the iteration's
    bprop, `control.k_loops`); `log`: the host calls of that iteration
    (`runtime.host_log`); neither is part of the value (pytrees drop them)."""

    __slots__ = ("top", "rest", "size", "memo", "log")

    def __init__(self, top=None, rest=None, size: int = 0, memo=None, log=None):
        self.top, self.rest, self.size, self.memo, self.log = top, rest, size, memo, log

    def items(self) -> list:
        """The items, bottom first."""
        out, s = [], self
        while isinstance(s, PyStack) and s.size > 0:
            out.append(s.top)
            s = s.rest
        return out[::-1]

    def add_grad(self, other):
        return add_stacks(self, other, add_grad)

    def zeros_like(self):
        return None  # zeros of any length

    def fit_value(self, value):
        if not self.size:
            return self
        value = value if isinstance(value, PyStack) and value.size else PyStack()
        return PyStack(fit(value.top, self.top), fit(value.rest, self.rest), self.size)


class BufStack(GradValue):
    """`n` items in `buf`, a tree of arrays with a leading axis of `cap` slots;
    `memo`: the bprops of the iterations that pushed them (`Memos`: a
    `lax.scan` keeps them at first order), or None. A gradient has none.
    `known`: `n` as a Python int where the loop that pushed the items knew
    it while tracing (a `lax.scan`'s trip count), else None; not part of the
    value (pytrees drop it, as every stack made from this one does), so a
    reverse loop reading it can pop by a `lax.scan` (`control.runtime`)."""

    __slots__ = ("buf", "n", "memo", "known")

    def __init__(self, buf, n, memo=None, known=None):
        self.buf, self.n, self.memo, self.known = buf, n, memo, known

    def add_grad(self, other):
        return add_stacks(self, other, add_grad)

    def zeros_like(self):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, self.buf)
        return BufStack(zeros, self.n, known=self.known)

    def fit_value(self, value):
        if not isinstance(value, BufStack):
            value = BufStack(None, None)
        memo = None if self.memo is None else fit(value.memo, self.memo)
        n = fit(value.n, self.n)
        known = value.known if n is value.n else None
        return BufStack(fit(value.buf, self.buf), n, memo, known)


class Memos:
    """The bprops of a `lax.scan`'s iterations (K of a loop at first order),
    as `runtime.residuals` takes them apart: per array an iteration's bprop
    makes, a buffer with one slot per iteration (`made`); the rest is
    `form`, the same for every iteration (the skeleton, and the arrays the
    bprops read from outside the loop). Its reverse loop makes the bprop of
    iteration k again from slot k instead of running the body again: what
    JAX's partial evaluation of a scan stores."""

    __slots__ = ("made", "form")

    def __init__(self, made, form):
        self.made, self.form = list(made), form


class Hoisted:
    """An output of a scan's iterations that is the same for all: its `value`,
    computed once before the loop (`control.invariants`)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _FormStatic:
    """A `MemoForm`'s static part: its skeleton, and per array whether each
    iteration makes it (`made`) or it is read from outside."""

    __slots__ = ("skeleton", "made")

    def __init__(self, skeleton, made: tuple):
        self.skeleton, self.made = skeleton, made


class MemoForm:
    """What the bprops of a scan's iterations share. `read[k]`: array k of the
    skeleton when read from outside the loop, None when each iteration
    makes it. The arrays read are leaves of the `Memos` pytree, so a trace
    the memos leave (a `lax.cond` branch, a loop) carries them out as it
    carries the rest; the other part, `static`, is the pytree's static part
    (compared by identity, shared by the forms `MemoForm.of` rebuilds).
    Held as static data, a hoisted array (`control.invariants`, computed in
    the trace that runs the scan) escaped a branch's trace by reference."""

    def __init__(self, skeleton, read, static=None):
        self.skeleton, self.read = skeleton, read
        self.static = static or _FormStatic(skeleton, tuple(a is None for a in read))

    def outside(self) -> tuple:
        """The arrays read from outside, in order (the pytree's leaves)."""
        return tuple(a for a, made in zip(self.read, self.static.made, strict=True) if not made)

    @staticmethod
    def of(static: _FormStatic, outside) -> MemoForm:
        """The form of `static` reading the arrays `outside`."""
        arrays = iter(outside)
        read = [None if made else next(arrays) for made in static.made]
        return MemoForm(static.skeleton, read, static)

    def hoisted(self, made: list) -> tuple[MemoForm, list]:
        """This form and its `made` arrays, with those computed once before the
        loop (`control.invariants.Hoisted`: the same in every iteration)
        read from outside instead."""
        if not any(isinstance(m, Hoisted) for m in made):
            return self, made
        read, kept, fill = list(self.read), [], iter(made)
        for k, each in enumerate(self.static.made):
            if each:
                m = next(fill)
                if isinstance(m, Hoisted):
                    read[k] = m.value
                else:
                    read[k] = None
                    kept.append(m)
        mask = tuple(each and read[k] is None for k, each in enumerate(self.static.made))
        return MemoForm(self.skeleton, read, _FormStatic(self.skeleton, mask)), kept

    def bprop(self, made):
        arrays = list(self.read)
        fill = iter(made)
        for k, each in enumerate(self.static.made):
            if each:
                arrays[k] = next(fill)
        return residuals.join(self.skeleton, arrays)


jax.tree_util.register_pytree_node(
    PyStack,
    lambda s: ((s.top, s.rest), s.size) if s.size else ((), 0),
    lambda size, kids: PyStack(*kids, size) if size else PyStack(),
)
jax.tree_util.register_pytree_node(
    BufStack, lambda s: ((s.buf, s.n, s.memo), None), lambda _, kids: BufStack(*kids)
)
jax.tree_util.register_pytree_node(
    Memos,
    lambda m: ((tuple(m.made), m.form.outside()), m.form.static),
    lambda static, kids: Memos(kids[0], MemoForm.of(static, kids[1])),
)


def memo_arrays(memo, ref, forms: list) -> list:
    """The arrays of `memo` (the bprop an iteration of a `lax.scan` pushed)
    that the iteration makes, to leave the scan as its outputs; their form
    is appended to `forms` (the scan traces its body once). `ref` is a value
    of the body's trace (the iteration's item): an array of another trace is
    read from outside. No memo, or one `residuals` cannot take apart: []."""
    if memo is None:
        return []
    try:
        arrays, skeleton = residuals.split(memo)
    except residuals.Opaque:
        return []
    trace = getattr(ref, "_trace", None)
    inside = [trace is not None and getattr(a, "_trace", None) is trace for a in arrays]
    if trace is None:  # (a JAX whose tracers do not say their trace: keep every tracer)
        inside = [is_tracer(a) for a in arrays]
    pairs = list(zip(arrays, inside, strict=True))
    forms.append(MemoForm(skeleton, [None if i else a for a, i in pairs]))
    return [a for a, i in pairs if i]


class Checkpoints:
    """The stack a recording loop (`records=`) leaves when it ran with online
    checkpointing (`control/checkpoint.py`): `saved` carries of its `n`
    traced iterations, and `below`, the stack its Python iterations pushed
    first. The reverse loop popping it does not pop: it runs the checkpoint
    sweep (`control.runtime`), asking `item(i, carry)` for what iteration i
    pushed, and `step(i, carry)` to recompute carries between checkpoints."""

    __slots__ = ("saved", "n", "step", "item", "final", "below")
    __kt_parts__ = True  # `runtime.residuals` takes it apart by its `__slots__`

    def __init__(self, saved, n, step, item, final, below):
        self.saved, self.n, self.step, self.item = saved, n, step, item
        self.final, self.below = final, below


class NotOneSlot(Exception):
    """An iteration used a `SlotIn`/`SlotOut` otherwise than by popping or
    pushing one item: the scan reading them gives way to one carrying the stack."""


class SlotIn(GradValue):
    """A stack of `n` items whose top `item` (and its `memo`, a bprop) one
    iteration pops (`popped`: it did, `zeroed`: by `stack_pop_grad`, which
    zeroes the slot of a gradient stack). An iteration's bprop kept as a
    memo may hold one (`residuals` takes it apart by its slots): the
    reverse loop reads it only for its structure, and its zero is None."""

    __slots__ = ("item", "n", "memo", "popped", "zeroed")

    def __init__(self, item, n, memo=None, popped=False, zeroed=False):
        self.item, self.n, self.memo, self.popped, self.zeroed = item, n, memo, popped, zeroed

    def pop(self, zeroed: bool):
        if self.popped:
            raise NotOneSlot("popped twice")
        return self.item, SlotIn(None, self.n - 1, None, True, zeroed)

    def add_grad(self, other):
        raise NotOneSlot("a gradient added")

    def zeros_like(self):
        return None  # zeros of any stack (a bprop kept as a memo holds the slot)

    def fit_value(self, value):
        raise NotOneSlot("a slot fitted")


class SlotOut(GradValue):
    """A stack of `n` items that one iteration pushes `item` on (with `memo`;
    `added`: by `stack_push_grad`, which adds it into a gradient's slot)."""

    __slots__ = ("item", "n", "memo", "pushed", "added")

    def __init__(self, item, n, memo=None, pushed=False, added=False):
        self.item, self.n, self.memo, self.pushed, self.added = item, n, memo, pushed, added

    def push(self, item, memo=None, added=False):
        if self.pushed:
            raise NotOneSlot("pushed twice")
        return SlotOut(item, self.n + 1, memo, True, added)

    add_grad, zeros_like, fit_value = SlotIn.add_grad, SlotIn.zeros_like, SlotIn.fit_value


SLOTS = (SlotIn, SlotOut)
for _slot in SLOTS:
    jax.tree_util.register_pytree_node(
        _slot,
        lambda v: ((v.item, v.n, v.memo), (type(v), *(getattr(v, f) for f in v.__slots__[3:]))),
        lambda aux, kids: aux[0](*kids, *aux[1:]),
    )


def is_stack(x) -> bool:
    return isinstance(x, (PyStack, BufStack, Checkpoints, *SLOTS))


# -- primitives' implementations ----------------------------------------------------
def stack_new():
    return PyStack()


def stack_nonempty(s):
    if isinstance(s, Checkpoints):
        return (s.n > 0) | stack_nonempty(s.below)
    return s.n > 0 if isinstance(s, (BufStack, *SLOTS)) else s.size > 0


def stack_push(s, item, memo=None):
    """`s` with `item` on top; a PyStack keeps `memo` beside it, and the host
    calls of the iteration pushing it (`host_log.current`), a BufStack (a
    loop under lax) cannot hold a Python function and drops it."""
    if isinstance(s, BufStack):
        item = fit(item, jax.tree_util.tree_map(_slot_shape, s.buf))
        buf = jax.tree_util.tree_map(lambda b, v: _set_at(b, s.n, v), s.buf, item)
        return BufStack(buf, s.n + 1)
    if isinstance(s, SlotOut):
        return s.push(item, memo)
    if isinstance(s, SlotIn):
        raise NotOneSlot("pushed on a stack it pops")
    if s is None:  # a zero gradient stack
        return PyStack(item, None, 1)
    return PyStack(item, s, s.size + 1, memo, host_log.current())


def stack_has_memo(s) -> bool:
    """Whether the top of `s` has a memo (a Python bool: a Python loop, or a
    scan at first order, pushed it)."""
    return isinstance(s, (PyStack, BufStack, SlotIn)) and s.memo is not None


def stack_memo(s):
    if isinstance(s, SlotOut):
        raise NotOneSlot("a memo read from a stack it pushes")
    if isinstance(s, BufStack):
        at = jnp.maximum(s.n - 1, 0)
        made = [lax.dynamic_index_in_dim(b, at, 0, False) for b in s.memo.made]
        return s.memo.form.bprop(made)
    return s.memo


def stack_log(s):
    """The host calls of the iteration that pushed the top of `s` (`host_log`)."""
    return s.log if isinstance(s, PyStack) else None


def stack_pop(s, like=None):
    """`(top item, the rest)`; a None (zero) gradient stack pops zeros like `like`."""
    if isinstance(s, BufStack):
        k = s.n - 1
        at = jnp.maximum(k, 0)
        item = jax.tree_util.tree_map(lambda b: lax.dynamic_index_in_dim(b, at, 0, False), s.buf)
        return item, BufStack(s.buf, k, s.memo)
    if isinstance(s, SlotIn):
        return s.pop(zeroed=False)
    if isinstance(s, SlotOut):
        raise NotOneSlot("popped from a stack it pushes")
    if s is None:
        return zeros_like_value(like), None
    if s.size == 0:
        raise KTransformError("internal: pop from an empty stack")
    return s.top, s.rest


# The gradient of a BufStack is the gradient of its whole buffer (`n` mirrors
# the primal's count): push overwrites slot n, so its rule pops the output
# gradient and zeroes that slot (`stack_pop_grad`); pop reads slot n-1, so its
# rule adds the item's gradient there (`stack_push_grad`). Each is the other's
# transpose with push and pop, so the four rules differentiate again. A PyStack
# gradient is a cons list like its primal: the same push and pop.
def stack_push_grad(d_rest, d_item):
    """The gradient of a stack that `stack_pop` split into `(d_item, d_rest)`."""
    if isinstance(d_rest, SlotOut):
        return d_rest.push(d_item, added=True)
    if not isinstance(d_rest, BufStack):
        return stack_push(d_rest, d_item)
    d_item = fit(d_item, jax.tree_util.tree_map(_slot_shape, d_rest.buf))
    buf = jax.tree_util.tree_map(lambda b, v: _add_at(b, d_rest.n, v), d_rest.buf, d_item)
    return BufStack(buf, d_rest.n + 1)


def _set_at(b, k, v):
    """`b` with row `k` set to `v`: a dynamic_update_slice, which XLA compiles
    faster than a scatter (bench/loops' `while` of 10 trips: XLA compiled its
    gradient in 0.31-0.34 s with scatters, 0.22-0.29 s with these). Past the
    buffer's end the index is clamped, so an overflowing loop overwrites its
    last row; such a run's result is never used, since its overflow check
    raises (`runtime.bounds.report_overflow`)."""
    return lax.dynamic_update_index_in_dim(b, jnp.asarray(v, b.dtype), k, 0)


def _add_at(b, k, v):
    v = jnp.asarray(v, b.dtype)
    if jnp.issubdtype(b.dtype, jnp.inexact):
        return b.at[k].add(v, mode="drop")
    return b.at[k].set(v, mode="drop")  # an int or bool slot has no gradient to add


def stack_pop_grad(d_out, like=None):
    """`(d_item, d_stack)` from the gradient of `stack_push(stack, item)`."""
    if isinstance(d_out, SlotIn):
        return d_out.pop(zeroed=True)
    if not isinstance(d_out, BufStack):
        return stack_pop(d_out, like)
    item, rest = stack_pop(d_out)
    at = jnp.maximum(rest.n, 0)
    buf = jax.tree_util.tree_map(
        lambda b: lax.dynamic_update_index_in_dim(b, jnp.zeros_like(b[0]), at, 0), rest.buf
    )
    return item, BufStack(buf, rest.n)


# -- rows of arrays as stacks: how the `lax.scan` model reads xs and gives ys ---------
def rows_stack(xs, n, flip):
    """A stack of the `n` rows of the leaves of `xs` (None: `n` None items),
    the last row on top, or (`flip`) the first: the order `lax.scan` reads
    them in. Its count is `known` (`control.runtime` reads it as xs)."""
    if xs is None:
        n = int(n)
    else:
        n = jax.tree_util.tree_leaves(xs)[0].shape[0]
        xs = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[::-1] if flip else x, xs)
    return BufStack(xs, jnp.asarray(n, jnp.int32), known=n)


def stack_rows(s, flip):
    """The items of stack `s`, each leaf's rows stacked, the first pushed
    first, or (`flip`) last; None for a zero (None) gradient stack.
    `rows_stack` undoes it, and each is the other's transpose."""
    if s is None:
        return None
    if isinstance(s, PyStack):
        items = s.items()
        if not items:
            raise KTransformError("lax.scan of length 0 is not supported by k_transform")
        rows = jax.tree_util.tree_map(lambda *r: jnp.stack(r), *items)
    elif isinstance(s, BufStack):  # (a buffer a loop carried is full)
        n = s.known if s.known is not None else capacity(s)
        rows = jax.tree_util.tree_map(lambda b: b[:n], s.buf)
    else:
        raise KTransformError(f"internal: rows of a {type(s).__name__}")
    return jax.tree_util.tree_map(lambda r: r[::-1], rows) if flip else rows


def rows_grad(dout, s, flip):
    """The gradient of `s` from the gradient `dout` of `stack_rows(s, flip)`."""
    return None if dout is None else rows_stack(dout, None, flip)


def capacity(s) -> int | None:
    """How many items a BufStack holds at most (None: a Python stack, or no buffer)."""
    leaves = jax.tree_util.tree_leaves(s.buf) if isinstance(s, BufStack) else []
    return leaves[0].shape[0] if leaves else None


def _slot_shape(b):
    return jax.ShapeDtypeStruct(b.shape[1:], b.dtype)


def slot_shapes(buf):
    """The shape of one item of a buffer `buf` (a tree of arrays)."""
    return jax.tree_util.tree_map(_slot_shape, buf)


# -- gradients of stacks ------------------------------------------------------
def add_stacks(a, b, add):
    if isinstance(a, SLOTS) or isinstance(b, SLOTS):
        raise NotOneSlot("a gradient added")
    if isinstance(a, BufStack) and isinstance(b, BufStack):
        return BufStack(add(a.buf, b.buf), jnp.maximum(a.n, b.n))
    if not (isinstance(a, PyStack) and isinstance(b, PyStack)):
        raise KTransformError("internal: adding gradients of stacks of different kinds")
    tops = []
    while a is not None and b is not None and a.size and b.size:
        tops.append(add(a.top, b.top))
        a, b = a.rest, b.rest
    out = a if b is None or not b.size else b
    for top in reversed(tops):
        out = stack_push(out, top)
    return out


# -- entering lax ------------------------------------------------------------------
def promote(s: PyStack, item_shape, extra: int) -> BufStack:
    """`s` as a BufStack with room for `extra` more items of `item_shape`."""
    items = s.items()
    cap = len(items) + int(extra)
    buf = jax.tree_util.tree_map(lambda sd: jnp.zeros((cap, *sd.shape), sd.dtype), item_shape)
    for k, item in enumerate(items):  # an UNDEFINED (never read) slot stays zero
        item = _in_layout(item, item_shape)
        if item is UNDEFINED:
            continue
        buf = jax.tree_util.tree_map(
            lambda b, v, k=k: b if v is UNDEFINED else b.at[k].set(jnp.asarray(v, b.dtype)),
            buf,
            item,
        )
    return BufStack(buf, jnp.asarray(len(items), jnp.int32))


def _in_layout(value, shape):
    """`value` with the PyStacks it holds made buffers laid out as in `shape`,
    or counts where `shape` has one (`light`: the stack, pushed in Python
    iterations before its loop entered lax, is a prefix of the loop's final one)."""
    if isinstance(value, PyStack) and isinstance(shape, BufStack):
        slots = jax.tree_util.tree_leaves(shape.buf)[0].shape[0]
        inner = jax.tree_util.tree_map(_slot_shape, shape.buf)
        return promote(value, inner, slots - value.size)
    if isinstance(value, PyStack):
        return jnp.asarray(value.size, shape.dtype)
    if value is UNDEFINED and isinstance(shape, (tuple, list)):  # stays zero, item by item
        return rebuild(shape, [_in_layout(UNDEFINED, s) for s in shape])
    if isinstance(value, (tuple, list)) and isinstance(shape, (tuple, list)):
        return rebuild(value, [_in_layout(v, s) for v, s in zip(value, shape, strict=True)])
    return value


def check_stacks(carry, where: str, popped=None, spared=None):
    """After a lax loop: `carry` with each stack's count checked against its
    capacity (`report_overflow`: the count the stack goes on with is the
    check's result, which keeps the check in the program), less the spare
    slot of carry `spared` (`control.guarded`); not carry `popped`, which
    the loop only pops (a check would put a host callback in every reverse
    loop, 0.06 ms a call on a 32-step RNN)."""
    out = list(carry)
    for k, c in enumerate(carry):
        cap = capacity(c) if k != popped else None
        if cap is not None:  # (a stack of None items has no buffer to overflow)
            n = report_overflow(c.n, cap - (k == spared), where)
            out[k] = BufStack(c.buf, n, c.memo, c.known)
    return type(carry)(out) if isinstance(carry, tuple) else out


# -- storing a loop's carries per iteration -----------------------------------------
def has_stacks(tree) -> bool:
    """Whether `tree` (a loop's carry) holds a stack."""
    if is_stack(tree):
        return True
    if isinstance(tree, (tuple, list)):
        return any(has_stacks(t) for t in tree)
    if isinstance(tree, dict):
        return any(has_stacks(t) for t in tree.values())
    return False


def light(tree):
    """`tree` with each BufStack replaced by its count (see the module docstring)."""
    if isinstance(tree, (BufStack, *SLOTS)):
        return tree.n
    if isinstance(tree, (tuple, list)):
        return rebuild(tree, [light(t) for t in tree])
    if isinstance(tree, dict):
        return {k: light(v) for k, v in tree.items()}
    return tree


def _grown(stored, like) -> list:
    """The items of `like` (a sequence in a loop's final carry) that those of
    `stored` (the same sequence stored by an iteration, or a gradient of it)
    pair with: its first ones, as a loop run in Python grows a sequence at
    its end (`light`/`heavy`). Under lax a carry keeps its structure."""
    if len(stored) > len(like):
        raise KTransformError(
            f"internal: a loop shrank a sequence of {len(stored)} items holding loop "
            f"stacks to {len(like)} (only growing one at its end is supported)"
        )
    return list(like)[: len(stored)]


def heavy(stored, like):
    """Undo `light`, taking buffers from `like` (the loop's final carry)."""
    if not has_stacks(like):  # (a list the loop grows is longer in `like`)
        return stored
    if isinstance(like, BufStack):
        return BufStack(like.buf, stored, like.memo)
    if isinstance(like, (tuple, list)):
        parts = zip(stored, _grown(stored, like), strict=True)
        return rebuild(stored, [heavy(s, x) for s, x in parts])
    if isinstance(like, dict):
        return {k: heavy(stored[k], x) for k, x in like.items()}
    return stored


# `light`/`heavy` are primitives of K of a loop as IR (`control.k_loops`), so
# their gradients are written with these three, and differentiate again: each
# is linear in `dout`; `light_grad` is its own transpose, `heavy_grad` and
# `heavy_grad_back` are each other's.
def light_grad(dout, x):
    """`dout`, a gradient of `light(x)` (or of `heavy(., x)`'s stored part), as
    a gradient of `x`: None where `x` holds a BufStack (a count has none)."""
    if not has_stacks(x):
        return dout
    if dout is None or isinstance(x, (BufStack, *SLOTS)):
        return None
    if isinstance(x, PyStack) and not is_stack(dout):  # stored as a count (see `_in_layout`)
        return None
    if isinstance(x, (tuple, list)) and isinstance(dout, (tuple, list)):
        parts = zip(dout, _grown(dout, x), strict=True)  # (`heavy`'s rule: x is longer)
        return rebuild(dout, [light_grad(d, v) for d, v in parts])
    if isinstance(x, dict) and isinstance(dout, dict):
        return {k: light_grad(dout[k], v) for k, v in x.items() if k in dout}
    return dout


def heavy_grad(dout, stored, like):
    """The gradient of `heavy(stored, like)` for `like`'s stacks: `dout`'s
    stacks below each stored count (slots above it belong to other
    iterations), with `like`'s counts; None elsewhere (the rest of `like` is
    not read). `like` is a tuple (the final carry): the gradient is a tuple
    of as many items."""
    if isinstance(like, tuple) and isinstance(dout, (tuple, list)):
        parts = zip(dout, stored, like, strict=True)
        return tuple(_heavy_part(d, s, x, back=False) for d, s, x in parts)
    return _heavy_part(dout, stored, like, back=False)


def heavy_grad_back(dd, stored, like):
    """`heavy_grad`'s transpose: `dd`, a gradient of `like`, as one of
    `heavy(stored, like)`: its stacks below each stored count, with that
    count (a gradient stack's count is its primal's: `stack_push_grad` and
    `stack_pop_grad` read and write the slot it names); None elsewhere."""
    if isinstance(like, tuple) and isinstance(dd, (tuple, list)):
        parts = zip(dd, stored, like, strict=True)
        return rebuild(stored, [_heavy_part(d, s, x, back=True) for d, s, x in parts])
    return _heavy_part(dd, stored, like, back=True)


def _heavy_part(dout, stored, like, back: bool):
    if dout is None or not has_stacks(like):  # (a list the loop grows is longer in `like`)
        return None
    if isinstance(like, BufStack):
        if isinstance(dout, PyStack):
            raise KTransformError("internal: a Python stack as the gradient of a buffer stack")
        count = stored if back else like.n
        return _below(dout, stored, count) if isinstance(dout, BufStack) else None
    if isinstance(like, (tuple, list)) and isinstance(dout, (tuple, list)):
        # a sequence the loop grew (`_grown`): `stored`'s items pair with `like`'s first ones
        paired = _grown(stored, like)
        parts = zip(dout[: len(stored)], stored, paired, strict=True)
        items = [_heavy_part(d, s, x, back) for d, s, x in parts]
        if back:
            return rebuild(stored, items)
        return rebuild(like, items + [None] * (len(like) - len(stored)))  # (not read)
    if isinstance(like, dict) and isinstance(dout, dict):
        keys = stored if back else like
        return {k: _heavy_part(dout.get(k), stored[k], like[k], back) for k in keys}
    return None


def _below(s: BufStack, n, count) -> BufStack:
    """`s`'s slots below `n`, zeros above, as a gradient of a stack of `count` items."""

    def mask(b):
        keep = jnp.arange(b.shape[0]) < n
        return jnp.where(keep.reshape(-1, *[1] * (b.ndim - 1)), b, jnp.zeros_like(b))

    return BufStack(jax.tree_util.tree_map(mask, s.buf), count)
