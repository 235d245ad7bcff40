"""K of the loop primitives, at run time (imported in generated code as `_rtg`).

Each `*_fprop` helper receives the K-graph (fprop graph) of the loop body
and returns `(out, bprop)`, where `bprop(dout)` returns
`(env, d_input_1, ..., d_input_n)` aligned with the loop primitive's inputs
(graph slots and range bounds get None). (`if` needs no helper: K of a
`switch` is a `switch` of K-graphs, see `runtime.switch`.)

Concrete loops run in Python and keep each iteration's bprop closure: an
iteration stores exactly what its bprop needs.

Traced loops (under `jax.jit`) cannot return closures, so:

- `for` over a static range or array rows: `lax.scan` stores each
  iteration's carry; the backward is a reverse `lax.scan` that recomputes
  the iteration from its stored carry and applies its bprop.
- `while` with a traced condition, traced by one of our gradient functions
  (`runtime.bounds.can_retrace`): `lax.while_loop` writes each iteration's
  carry into a buffer of `bounds.buffer_slots(where)` slots (64 at first);
  the backward loops over the stored carries in reverse. A loop that runs
  longer raises `LoopBoundExceeded` naming its line, and the gradient
  function sizes its buffer to the measured trip count and retraces.
- the same `while` under a user's own `jax.jit` (which cannot retrace), and
  a `for` over a range longer than `kt.set_for_checkpoints(k)`: online
  checkpointing (`control/checkpoint.py`, `_checkpointed`): at most
  `bounds.checkpoint_slots` (as many as 8 MiB hold, 16 to 1,024, unless
  set; or k) + 64 stored carries whatever the trip count, the others
  recomputed in the reverse sweep, O(log) recomputation; every carry is
  stored when the loop fits. Loops whose carry holds stacks (loops of a
  derivative) keep the store-everything buffer.

These helpers are Python, not graphs, so the DFunctor cannot transform them
again: for grad of grad and jvp through a loop it uses K of the loop written
as IR instead (`k_transform.control.k_loops`). Stacks in a loop's carry
(`k_transform.runtime.stack`, from that IR) are stored per iteration as
their counts only (`light`/`heavy`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from k_transform import runtime as rt
from k_transform.control import checkpoint, policy
from k_transform.control import runtime as ctl
from k_transform.errors import KTransformError
from k_transform.runtime import bounds
from k_transform.runtime import stack as rs
from k_transform.runtime.bounds import LoopBoundExceeded, loop_bound, set_loop_bound

__all__ = ["LoopBoundExceeded", "loop_bound", "set_loop_bound"]


def _zeros_of(shape_tree):
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape_tree)


# -- loops -------------------------------------------------------------------------
def _run_python_loop(step_k, items, carry, inv):
    """Concrete iterations; returns the final carry and the bprop closures."""
    bprops = []
    for item in items:
        carry, bp = _split(step_k(item, carry, inv))
        bprops.append(bp)
    return carry, bprops


def _split(pair):
    out, bp = pair
    return tuple(out), bp


def _python_backward(bprops, d_carry, n_carry, with_items: bool):
    """Reverse sweep over stored closures: (env, d_items, d_carry, d_inv)."""
    env, d_inv, d_items = {}, None, []
    for bp in reversed(bprops):
        g = bp(d_carry)
        env = rt.add_grad(env, g[0])
        rest = g[1:]
        if with_items:
            d_items.append(rest[0])
            rest = rest[1:]
        d_carry = tuple(rest[:n_carry])
        d_inv = rt.add_grad(d_inv, tuple(rest[n_carry:]))
    return env, d_items[::-1], d_carry, d_inv


def while_loop_fprop(
    cond_fn, body_k, n_carry, *values, where: str = "", grads: bool = False, popping=None, **_
):
    """K of `while_loop[n_carry](cond_graph, body_graph, *carry, *inv)`
    (`popping`: see `control.runtime.while_loop`)."""
    carry, inv = tuple(values[:n_carry]), tuple(values[n_carry:])
    bprops = []
    while True:
        c = cond_fn(*carry, *inv)
        if rt.is_tracer(c) or not c:
            break
        bounds.count_iteration(len(bprops) + 1, where)
        carry, bp = _split(body_k(*carry, *inv))
        bprops.append(bp)
    traced = rt.is_tracer(c)
    if traced:
        carry, traced_bprop = _traced_while(cond_fn, body_k, carry, inv, where, grads, popping)

    def bprop(d_out):
        d_carry, env, d_inv = tuple(d_out), {}, None
        if traced:
            env, d_carry, d_inv = traced_bprop(d_carry)
        env2, _, d_carry, d_inv2 = _python_backward(bprops, d_carry, n_carry, False)
        d_inv = rt.add_grad(d_inv, d_inv2)
        return (rt.add_grad(env, env2), None, None, *d_carry, *_inv_grads(d_inv, inv))

    return carry, bprop


def _inv_grads(d_inv, inv):
    """Gradients of the loop invariants: zeros when the loop never ran."""
    return d_inv if d_inv is not None else tuple(rt.zeros_like_value(v) for v in inv)


def _nbytes(tree) -> int:
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(jnp.size(x) * jnp.result_type(x).itemsize for x in leaves)


def _traced_while(cond_fn, body_k, carry, inv, where, grads, popping=None):
    """Forward `lax.while_loop` storing carries; returns (carry, bprop). A
    loop `popping` a stack runs at most its capacity times: that many slots."""
    step = lambda cr: tuple(body_k(*cr, *inv)[0])  # noqa: E731
    trips = rs.capacity(carry[popping]) if popping is not None else None
    carry = ctl.settle_carry(step, carry, where, trips, grads)
    if not bounds.can_retrace() and not rs.has_stacks(carry):
        step_i = lambda i, cr: ctl.like_carry(step(cr), cr, grads)  # noqa: E731
        running = lambda i, cr: ctl.condition(cond_fn(*cr, *inv), "while", where)  # noqa: E731
        slots = bounds.checkpoint_slots(where, _nbytes(carry))
        return _checkpointed(body_k, step_i, running, carry, inv, slots, where)
    bound = trips if trips is not None else bounds.buffer_slots(where)
    buffer = jax.tree_util.tree_map(
        lambda c: jnp.zeros((bound, *jnp.shape(c)), jnp.result_type(c)), rs.light(carry)
    )

    def body(state):
        k, cr, buf = state
        buf = jax.tree_util.tree_map(lambda b, v: b.at[k].set(v, mode="drop"), buf, rs.light(cr))
        return k + 1, ctl.like_carry(step(cr), cr, grads), buf

    def cond(state):
        return ctl.condition(cond_fn(*state[1], *inv), "while", where)

    n, final, buffer = lax.while_loop(cond, body, (jnp.asarray(0), carry, buffer))
    if trips is None:  # else it cannot overflow
        bounds.report_overflow(n, bound, where)
    rs.check_stacks(final, where)

    def bprop(d_carry):
        def step_grad(k, d_cr):
            cr = rs.heavy(jax.tree_util.tree_map(lambda b: b[k], buffer), final)
            return body_k(*cr, *inv)[1](d_cr)

        d_carry = _fill_zeros(d_carry, final)
        return _reverse_sweep(step_grad, n, d_carry, carry, inv, dynamic=True)

    return final, bprop


def _fill_zeros(d_carry, final):
    """Gradients of a loop's carries, None replaced by zeros like the carry."""
    return tuple(
        rt.zeros_like_value(c) if d is None else d for d, c in zip(d_carry, final, strict=True)
    )


def _sweep_parts(step_grad, d_carry, n_carry: int, has_item: bool):
    """What a reverse sweep over `step_grad(k, d_carry) -> (env, [d_item],
    d_carry..., d_inv...)` starts from: `(env0, d_inv0, d_carry, unpack)`,
    `unpack(g) -> (env, d_item, d_carry, d_inv)` fitted to fixed structures."""
    shape = jax.eval_shape(lambda: step_grad(jnp.asarray(0), d_carry))
    env0 = _zeros_of(shape[0])
    inv_shape = shape[1 + has_item + n_carry :]
    d_inv0 = tuple(_zeros_of(s) if s is not None else None for s in inv_shape)
    d_carry = rt.fit(d_carry, shape[1 + has_item : 1 + has_item + n_carry])

    def unpack(g):
        g = rt.fit(g, shape)
        d_item = g[1] if has_item else None
        rest = g[1 + has_item :]
        return g[0], d_item, tuple(rest[:n_carry]), tuple(rest[n_carry:])

    return env0, d_inv0, d_carry, unpack


def _reverse_sweep(step_grad, n, d_carry, carry, inv, dynamic: bool, items=None):
    """Run `step_grad(k, d_carry) -> (env, [d_item], d_carry..., d_inv...)` for
    k = n-1 .. 0 under lax; returns (env, d_carry, d_inv) [+ stacked d_items]."""
    has_item = items is not None
    env0, d_inv0, d_carry, unpack = _sweep_parts(step_grad, d_carry, len(carry), has_item)

    if dynamic:

        def body(state):
            k, env, d_cr, d_iv = state
            k = k - 1
            e, _, d_cr, di = unpack(step_grad(k, d_cr))
            return k, rt.add_grad(env, e), d_cr, rt.add_grad(d_iv, di)

        _, env, d_cr, d_iv = lax.while_loop(
            lambda s: s[0] > 0, body, (jnp.asarray(n), env0, d_carry, d_inv0)
        )
        return env, d_cr, d_iv

    def scan_body(state, k):
        env, d_cr, d_iv = state
        e, d_item, d_cr, di = unpack(step_grad(k, d_cr))
        return (rt.add_grad(env, e), d_cr, rt.add_grad(d_iv, di)), d_item

    (env, d_cr, d_iv), d_items = lax.scan(
        scan_body, (env0, d_carry, d_inv0), jnp.arange(n), reverse=True
    )
    return env, d_cr, d_iv, d_items


def _checkpointed(body_k, step, running, carry, inv, slots: int, where: str, head=None):
    """A traced loop whose reverse sweep recomputes carries from at most
    `slots` checkpoints (`control/checkpoint.py`): a `while` under a jit that
    cannot retrace, or a long `for` (`kt.set_for_checkpoints`). `head(i)` is
    iteration i's loop variable (a `for`), None for a `while`. Returns
    `(final, bprop)`, `bprop(d_carry) -> (env, d_carry, d_inv)`."""
    n, final, saved = checkpoint.record(step, running, carry, slots)

    def k_body(i, cr):
        return body_k(*([] if head is None else [head(i)]), *cr, *inv)

    def bprop(d_carry):
        d_carry = _fill_zeros(d_carry, final)
        step_grad = lambda i, d_cr: k_body(i, final)[1](d_cr)  # noqa: E731 - shapes only
        has_item = head is not None
        env0, d_inv0, d_carry, unpack = _sweep_parts(step_grad, d_carry, len(carry), has_item)

        def grad_step(i, cr, d_cr):
            env, _, d_cr, d_inv = unpack(k_body(i, cr)[1](d_cr))
            return d_cr, (env, d_inv)

        def add(acc, new):
            return rt.add_grad(acc[0], new[0]), rt.add_grad(acc[1], new[1])

        d_cr, (env, d_inv), recomputed = checkpoint.reverse(
            step, grad_step, n, saved, d_carry, (env0, d_inv0), add
        )
        bounds.report_recompute(where, n, recomputed)
        return env, d_cr, d_inv

    return final, bprop


def for_range_fprop(
    start, stop, step, body_k, n_carry, *values, where: str = "", grads: bool = False, **_
):
    """K of `for_range[n_carry](start, stop, step, body_graph, *carry, *inv)`."""
    carry, inv = tuple(values[:n_carry]), tuple(values[n_carry:])
    static = not any(rt.is_tracer(v) for v in (start, stop, step))
    if not static:
        raise KTransformError(
            "differentiating a `for` over a range with traced bounds is not supported; "
            f"write it as a `while` loop{rt.describe(where)}"
        )
    indices = range(int(start), int(stop), int(step))
    step_k = lambda i, cr, iv: body_k(i, *cr, *iv)  # noqa: E731
    forward = lambda i, cr: tuple(step_k(i, cr, inv)[0])  # noqa: E731
    small = policy.unrolls(forward, indices, carry)
    if not rt.any_traced((carry, inv)) or small:
        carry, bprops = _run_python_loop(step_k, indices, carry, inv)

        def bprop(d_out):
            env, _, d_carry, d_inv = _python_backward(bprops, tuple(d_out), n_carry, True)
            d_inv = _inv_grads(d_inv, inv)
            return (env, None, None, None, None, *d_carry, *d_inv)

        return carry, bprop
    xs = jnp.asarray(indices)
    final, bprop_scan = _traced_scan(step_k, xs, carry, inv, where, grads)

    def bprop(d_out):
        env, d_carry, d_inv, *_ = bprop_scan(tuple(d_out))
        return (env, None, None, None, None, *d_carry, *d_inv)

    return final, bprop


def for_each_fprop(seq, body_k, n_carry, *values, where: str = "", grads: bool = False, **_):
    """K of `for_each[n_carry](seq, body_graph, *carry, *inv)`."""
    carry, inv = tuple(values[:n_carry]), tuple(values[n_carry:])
    step_k = lambda item, cr, iv: body_k(item, *cr, *iv)  # noqa: E731
    is_array = hasattr(seq, "shape") and not isinstance(seq, (tuple, list))
    forward = lambda item, cr: tuple(step_k(item, cr, inv)[0])  # noqa: E731
    small = not is_array or policy.unrolls(forward, seq, carry)
    if small or not rt.any_traced((seq, carry, inv)):
        items = list(seq) if not is_array else [seq[k] for k in range(seq.shape[0])]
        carry, bprops = _run_python_loop(step_k, items, carry, inv)

        def bprop(d_out):
            env, d_items, d_carry, d_inv = _python_backward(bprops, tuple(d_out), n_carry, True)
            d_seq = _stack_items(d_items, seq, is_array)
            return (env, d_seq, None, *d_carry, *_inv_grads(d_inv, inv))

        return carry, bprop
    final, bprop_scan = _traced_scan(step_k, seq, carry, inv, where, grads, items=True)

    def bprop(d_out):
        env, d_carry, d_inv, d_items = bprop_scan(tuple(d_out))
        return (env, d_items, None, *d_carry, *d_inv)

    return final, bprop


def _stack_items(d_items, seq, is_array):
    if not is_array:
        return type(seq)(d_items) if isinstance(seq, (tuple, list)) else None
    if not d_items:
        return jnp.zeros(jnp.shape(seq), jnp.result_type(seq))
    zeros = [
        jnp.zeros(jnp.shape(seq)[1:], jnp.result_type(seq)) if d is None else d for d in d_items
    ]
    return jnp.stack(zeros)


def _traced_scan(step_k, xs, carry, inv, where, grads, items=False):
    """Forward `lax.scan` storing carries; returns (carry, bprop). A `for`
    over a range (not `items`, rows of an array) longer than
    `kt.set_for_checkpoints(slots)` keeps checkpoints instead."""
    first = xs[0]
    n = xs.shape[0]
    step = lambda x, cr: tuple(step_k(x, cr, inv)[0])  # noqa: E731
    carry = ctl.settle_carry(lambda cr: step(first, cr), carry, where, n, grads)

    def body(cr, x):
        return ctl.like_carry(step(x, cr), cr, grads), rs.light(cr)

    slots = bounds.for_checkpoints()
    if slots is not None and n > slots and not rs.has_stacks(carry) and not items:
        step_i = lambda i, cr: ctl.like_carry(step(xs[i], cr), cr, grads)  # noqa: E731
        running = lambda i, cr: i < n  # noqa: E731
        body_k = lambda x, *rest: step_k(x, rest[: len(carry)], rest[len(carry) :])  # noqa: E731
        return _checkpointed(body_k, step_i, running, carry, inv, slots, where, lambda i: xs[i])
    final, stored = lax.scan(body, carry, xs)
    rs.check_stacks(final, where)

    def bprop(d_carry):
        def step_grad(k, d_cr):
            cr = rs.heavy(jax.tree_util.tree_map(lambda b: b[k], stored), final)
            return step_k(xs[k], cr, inv)[1](d_cr)

        d_carry = _fill_zeros(d_carry, final)
        return _reverse_sweep(step_grad, n, d_carry, carry, inv, dynamic=False, items=True)

    return final, bprop
