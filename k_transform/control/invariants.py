"""A `lax.scan` whose loop-invariant outputs are computed once, before it.

K of a loop at first order gives each iteration's bprop residuals as the
scan's stacked outputs (`runtime.stack.Memos`). Some depend on neither the
carry nor the row: a mask `k == 0` of an `iota`, a constant broadcast. JAX's
partial evaluation of a scan keeps such residuals out of the loop (it
computes them once); stored per iteration they cost a write in the forward
loop and a read in the reverse one (an RK4 step through `jax.vmap` with
four masks ran 1.7x JAX's time on a CPU).

`scan(body, init, xs, ...)` traces `body` once (`jax.make_jaxpr`), finds by
dependence which outputs are invariant (no input of theirs is a carry or a
row, and no equation on the way has an effect), and runs the scan on the
traced jaxpr. The invariant outputs that `hoistable(path)` accepts are left
out of the loop: in their place in `ys` stands `Hoisted(value)`, the value
computed once outside (XLA drops the rest of that computation).
"""

from __future__ import annotations

import jax
from jax import lax
from jax.extend import core as jex

from k_transform.runtime.stack import Hoisted


def scan(body, init, xs, length: int, reverse: bool, hoistable):
    """`lax.scan(body, init, xs, length=length, reverse=reverse)`, with the
    invariant outputs at the paths `hoistable` accepts as `Hoisted`."""
    x0 = jax.tree_util.tree_map(lambda a: a[0], xs)
    closed, shapes = jax.make_jaxpr(body, return_shape=True)(init, x0)
    run = jex.jaxpr_as_fun(closed)
    carry_def = jax.tree_util.tree_structure(shapes[0])
    n_carry = carry_def.num_leaves
    paths, ys_def = jax.tree_util.tree_flatten_with_path(shapes[1])
    invariant = _invariant(closed.jaxpr)[n_carry:]
    hoist = [inv and hoistable(path) for inv, (path, _) in zip(invariant, paths, strict=True)]

    def step(carry, x):
        outs = run(*jax.tree_util.tree_leaves((carry, x)))
        ys = [y for y, h in zip(outs[n_carry:], hoist, strict=True) if not h]
        return jax.tree_util.tree_unflatten(carry_def, outs[:n_carry]), ys

    final, kept = lax.scan(step, init, xs, length=length, reverse=reverse)
    if any(hoist):
        once = run(*jax.tree_util.tree_leaves((init, x0)))[n_carry:]
        kept = iter(kept)
        ys = [Hoisted(y) if h else next(kept) for y, h in zip(once, hoist, strict=True)]
    else:
        ys = kept
    return final, jax.tree_util.tree_unflatten(ys_def, ys)


def _invariant(jaxpr) -> list[bool]:
    """Per output of `jaxpr`: whether it depends on none of its inputs
    (through equations without effects; consts and literals are invariant)."""
    variant = {id(v) for v in jaxpr.invars}
    for eqn in jaxpr.eqns:
        reads = any(not isinstance(v, jex.Literal) and id(v) in variant for v in eqn.invars)
        if reads or eqn.effects:
            variant.update(id(v) for v in eqn.outvars)
    return [isinstance(v, jex.Literal) or id(v) not in variant for v in jaxpr.outvars]
