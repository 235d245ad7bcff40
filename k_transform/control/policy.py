"""When a loop unrolls: the one place that decides.

A `for` whose trip count is static (a range of Python ints, a tuple, the rows
of an array) unrolls when it has at most `UNROLL_LIMIT` iterations: while
parsing when the trip count is known then (so the loop differentiates to any
order as straight code), else at run time. Longer ones become `lax.scan`
under `jax.jit` (Python loops eagerly), except that a loop whose carry changes
structure (a list the body appends to) cannot be a lax loop and unrolls at
any length. Loops with a traced trip count (`while`) never unroll.
"""

from __future__ import annotations

import jax

from k_transform.runtime.values import shape_of

UNROLL_LIMIT = 8


def unrolls_when_parsed(trips: int) -> bool:
    """Whether a loop whose trip count the parser knows is unrolled there."""
    return trips <= UNROLL_LIMIT


def unrolls(step, xs, carry) -> bool:
    """Whether a run-time `for` of `step` over `xs` (static length) unrolls."""
    return len(xs) <= UNROLL_LIMIT or changes_structure(step, xs, carry)


def changes_structure(step, xs, carry) -> bool:
    """Whether `step(xs[0], carry)` gives a carry of another structure: a list
    the body appends to. Such a loop cannot be a lax loop; its callers, whose
    trip count is static, unroll it instead. A body that needs a concrete
    value of its carry (a Python int it indexes with, kept on a stack) cannot
    run on abstract values either, and unrolls too."""
    lists = jax.tree_util.tree_leaves(carry, is_leaf=lambda v: isinstance(v, list))
    if not any(isinstance(v, list) for v in lists) or len(xs) == 0:
        return False
    first = xs[0] if not isinstance(xs, range) else xs.start
    try:
        out = jax.eval_shape(lambda cr: step(first, cr), shape_of(carry))
    except jax.errors.JAXTypeError:  # concrete values needed: only unrolling runs it
        return True
    return jax.tree_util.tree_structure(out) != jax.tree_util.tree_structure(shape_of(carry))
