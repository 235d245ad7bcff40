"""When a loop unrolls: the one place that decides.

A `for` whose trip count is static (a range of Python ints, a tuple, the rows
of an array) unrolls when it has at most `UNROLL_LIMIT` iterations: while
parsing when the trip count is known then (so the loop differentiates to any
order as straight code), else at run time. At run time a longer loop still
unrolls when its trip count times its body's size (equations of the body's
jaxpr, traced once on abstract values) is at most `UNROLL_BUDGET`: that is
what JAX's gradient of the same Python does (it unrolls every loop), and XLA then
fuses across iterations, which a `lax.scan` stops (bench/static_loops.py: a
40-step elementwise chain and a 200-step update ran 2-2.7x slower as scans).
Longer loops become `lax.scan` under `jax.jit` (Python loops eagerly: this
decision is only asked for traced loops), except that a loop whose carry
changes structure (a list the body appends to) cannot be a lax loop and
unrolls at any length. Loops with a traced trip count (`while`) never unroll.
(`lax.scan(unroll=k)` was measured too: its reverse indexes the stored
carries dynamically, and unrolled that was 8-400x slower.)
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from jax.extend import core as jex

from k_transform.runtime.stack import PyStack, is_stack
from k_transform.runtime.state import forked
from k_transform.runtime.values import shape_of

UNROLL_LIMIT = 8
UNROLL_BUDGET = 2_000  # trip count x body equations
DERIVATIVE_TRIPS = 16  # the longest loop of a derivative that may unroll
DERIVATIVE_BUDGET = 1_000  # trip count x body equations, for a loop of a derivative
# iterations of a traced `while` a trip (`control.guarded`); None: by backend
WHILE_STEPS = int(os.environ["KT_WHILE_STEPS"]) if os.environ.get("KT_WHILE_STEPS") else None
GUARDED_BYTES = 4 << 20  # the most carry a guarded step selects, where steps are by backend
INDEXING = {"dynamic_slice", "dynamic_update_slice", "gather", "scatter", "scatter-add"}


def set_unroll_budget(budget: int) -> int:
    """Set `UNROLL_BUDGET` (trip count x body equations; 0: every loop longer
    than `UNROLL_LIMIT` becomes a `lax.scan`) for loops traced from now on;
    returns the old value."""
    global UNROLL_BUDGET
    old, UNROLL_BUDGET = UNROLL_BUDGET, int(budget)
    return old


def set_while_steps(steps: int | None) -> int | None:
    """Set `WHILE_STEPS`, the iterations a traced `while` runs per trip of
    its `lax.while_loop` (1: one; None: by backend, `while_steps`), for
    loops traced from now on; returns the old value."""
    global WHILE_STEPS
    old, WHILE_STEPS = WHILE_STEPS, None if steps is None else max(1, int(steps))
    return old


def while_steps(carry_bytes: int) -> int:
    """How many iterations a traced `while` runs a trip (`control.guarded`):
    `WHILE_STEPS` where set; else four on a GPU, where a trip's traced test
    goes to the host (17-21 us a trip of a 1,024-float body on an H200, 4.6-5.4
    us a step at four steps a trip), unless the carry it selects each step is
    over `GUARDED_BYTES`; one on a CPU, where the selects cost more than the
    trip (1.6 us a step against 2.1 at four a trip)."""
    if WHILE_STEPS is not None:
        return WHILE_STEPS
    if jax.default_backend() != "gpu" or carry_bytes > GUARDED_BYTES:
        return 1
    return 4


def unrolls_when_parsed(trips: int) -> bool:
    """Whether a loop whose trip count the parser knows is unrolled there."""
    return trips <= UNROLL_LIMIT


def unrolls(step, xs, carry, breaks: bool = False) -> bool:
    """Whether a run-time `for` of `step` over `xs` (static length) unrolls.
    One whose `break` flag is traced (`breaks`) unrolls only where it must
    (short, or its body needs the counter as an int): unrolled, every
    iteration after the break would still run its test, while its
    `lax.while_loop` stops there.
    A loop whose carry holds a stack is a loop of a derivative (K of a loop
    written as IR, `control.k_loops`): unrolled, each of its iterations would
    carry its K-body and a reverse to every further order, which its forward
    jaxpr does not show (a Hessian-vector product through a 40-step chain
    took 4x longer to its first result), so the budget is used there only
    for a short loop (at most `DERIVATIVE_TRIPS`) of a first derivative (its
    stack holds no stacks: the recording loop of a jvp or a Hessian-vector
    product; unrolled, jvp through a 10-step chain ran 2.3x faster, its first
    call 1.8x), and within `DERIVATIVE_BUDGET`, as its jaxpr grows many
    times when unrolled: a Hessian-vector product through 10 trips of a
    41-equation chain unrolls to 1,537 jaxpr lines (and runs at JAX's speed,
    10x faster than as loops on a GPU), through 10 trips of a 179-equation
    body of helpers with nested traced `if`s to 77,000, its first call
    twice its loop's; never for a loop over an array's rows (see
    `_is_array`)."""
    if len(xs) <= UNROLL_LIMIT or changes_structure(step, xs, carry):
        return True
    jaxpr = _iteration(step, xs, carry)
    if jaxpr is CONCRETE_COUNTER:
        return True  # `t[i]` of a tuple, `range(i)`: only Python's iterations run it
    if breaks or len(xs) > UNROLL_BUDGET or _is_array(xs):
        return False
    if not _holds_stack(carry):
        return len(xs) * _size(jaxpr, len(xs)) <= UNROLL_BUDGET
    if len(xs) > DERIVATIVE_TRIPS or _stack_depth(step, xs, carry) > 1:
        return False
    return len(xs) * _size(jaxpr) <= DERIVATIVE_BUDGET


def _is_array(xs) -> bool:
    """A loop over an array's rows: unrolled, each row's gradient would be a
    full-size array added into the sequence's (quadratic in the trip count; a
    `lax.scan` stacks them), as for a body indexing with its counter."""
    return hasattr(xs, "shape") and not isinstance(xs, (range, tuple, list))


def _holds_stack(carry) -> bool:
    leaves = jax.tree_util.tree_leaves(carry, is_leaf=is_stack)
    return any(is_stack(leaf) for leaf in leaves)


def _stack_depth(step, xs, carry) -> int:
    """How deep stacks nest in the carry after one iteration: 1 for a loop
    of a first derivative (its stack holds plain values), more for a loop of
    a derivative of a derivative (a carry it stores holds a stack itself)."""
    try:
        with forked():
            out = jax.eval_shape(lambda cr: step(_first(xs), cr), shape_of(carry))
    except Exception:  # noqa: BLE001 -- not traceable abstractly: keep the scan
        return 2
    return _depth(out)


def _depth(tree) -> int:
    """An empty `PyStack` nests nothing: it is how the gradient of a stack is
    zero (the recomputed K-body of a second derivative reads its iteration's
    host log from the stack, `k_loops._LoopK.again`, so the stack's zero
    gradient is in every item; counted as a nested stack, the jvp of a
    gradient through a 10-trip loop stopped unrolling: 10x JAX's time on a
    GPU)."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_stack)
    stacks = [s for s in leaves if is_stack(s) and not _empty(s)]
    return max((1 + _depth(_items(s)) for s in stacks), default=0)


def _empty(stack) -> bool:
    return isinstance(stack, PyStack) and stack.size == 0


def _items(stack):
    return stack.top if hasattr(stack, "top") else stack.buf


def body_size(step, xs, carry) -> int:
    """Equations in the jaxpr of one iteration (at least 1), traced with an
    abstract loop counter for a range. A body that indexes with the counter
    (`xs[i]`, `ys.at[i].set(...)`: gathers, scatters, dynamic slices) counts
    as over the budget: unrolled, each iteration's gradient of such an access
    is a full-size array added into the whole one (quadratic in the trip
    count), which a `lax.scan` stacks instead (a user's `lax.scan` RNN over
    200 rows, its Python model indexing and updating by the counter, ran 7x
    slower unrolled; an RNN of 32 steps reading `xs[t]` 1.5x). On a GPU or
    TPU, `unrolls` sizes such a body instead (see `_size`)."""
    return _size(_iteration(step, xs, carry))


CONCRETE_COUNTER = object()  # `_iteration`: the body needs its counter as a Python int


def _iteration(step, xs, carry):
    """The jaxpr of one iteration, traced with an abstract loop counter for
    a range; `CONCRETE_COUNTER` if the body needs the counter as a Python int
    (`x[:i]`, `range(i)`, `lst[i]`, `jnp.zeros(i)`, `f"{i}"` as a key, an `if`
    on it choosing branches of different types: whatever fails with the
    counter traced and runs with it an int); None if it cannot be traced
    abstractly otherwise (the scan it gets reports what went wrong)."""
    first = jax.ShapeDtypeStruct((), jnp.int32) if isinstance(xs, range) else _first(xs)
    jaxpr = _traced(step, first, carry)
    if jaxpr is None and isinstance(xs, range) and len(xs):
        if _traced(step, xs.start, carry) is not None:
            return CONCRETE_COUNTER
    return jaxpr


def needs_int_counter(step, i: int, carry) -> bool:
    """Whether the body `step(counter, carry)` cannot be traced with its
    counter traced and can with the counter the Python int `i`."""
    counter = jax.ShapeDtypeStruct((), jnp.int32)
    return _traced(step, counter, carry) is None and _traced(step, i, carry) is not None


def _traced(step, head, carry):
    """The jaxpr of `step(head, carry)` on abstract carries (and `head`, unless
    it is a Python int), or None where it fails."""
    try:
        with forked():  # an `ops.Assign` in the body stays in the probe
            if isinstance(head, int):
                return jax.make_jaxpr(lambda cr: step(head, cr))(shape_of(carry))
            return jax.make_jaxpr(step)(head, shape_of(carry))
    except Exception:  # noqa: BLE001
        return None


def _size(jaxpr, trips: int = 0) -> int:
    """The equations of one iteration (`body_size`). On an accelerator a body
    indexing with its counter is sized too, each access as `trips` equations
    (the full-size gradient each unrolled iteration adds): there a loop
    launches its body's kernels on every iteration, and the 32-step RNN of
    bench/static_loops ran as a scan 3.7x the time of JAX's unrolled code on
    an H100, while on the CPU the scan ran as fast as JAX's code, or faster
    (32, 64, 128 steps: 0.9, 0.7, 0.6)."""
    if jaxpr is None or jaxpr is CONCRETE_COUNTER:
        return UNROLL_BUDGET + 1
    indexing = sum(eqn.primitive.name in INDEXING for eqn in jaxpr.jaxpr.eqns)
    if indexing and not (trips and on_accelerator()):
        return UNROLL_BUDGET + 1
    return max(1, _count(jaxpr.jaxpr) + indexing * trips)


def on_accelerator() -> bool:
    """Whether programs run on a GPU or TPU (JAX's default backend)."""
    return jax.default_backend() != "cpu"


def _count(jaxpr) -> int:
    """The equations of `jaxpr` and of the jaxprs they hold (a `cond`'s
    branches, a call's body: once each). Counted as one, a few `cond`s made a
    small body: the Hessian-vector product through a 10-trip loop over
    helpers with nested traced `if`s unrolled into 77,000 jaxpr lines and
    took twice as long to its first result as its loop."""
    return sum(1 + sum(map(_count, jex.jaxprs_in_params(e.params))) for e in jaxpr.eqns)


def _first(xs):
    return xs.start if isinstance(xs, range) else xs[0]


def changes_structure(step, xs, carry) -> bool:
    """Whether `step(xs[0], carry)` gives a carry of another structure: a list
    the body appends to. Such a loop cannot be a lax loop; its callers, whose
    trip count is static, unroll it instead. A body that needs a concrete
    value of its carry (a Python int it indexes with, kept on a stack) cannot
    run on abstract values either, and unrolls too."""
    lists = jax.tree_util.tree_leaves(carry, is_leaf=lambda v: isinstance(v, list))
    if not any(isinstance(v, list) for v in lists) or len(xs) == 0:
        return False
    first = _first(xs)
    try:
        out = jax.eval_shape(lambda cr: step(first, cr), shape_of(carry))
    except jax.errors.JAXTypeError:  # concrete values needed: only unrolling runs it
        return True
    return jax.tree_util.tree_structure(out) != jax.tree_util.tree_structure(shape_of(carry))
