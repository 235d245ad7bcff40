"""`lax.scan`, `lax.while_loop`, `lax.fori_loop`, `lax.map`, `lax.cond`,
`lax.switch`, `jax.vmap` and the `jnp` functions that take functions
(`apply_along_axis`, `apply_over_axes`) called in differentiated code, read
as Python.

Their bodies are the user's Python functions, often closures over the
values being differentiated, so they cannot go through the jaxpr import (a
closure's free variables would be baked into the trace as constants). The
parser reads a call of one of them as a call of its *model* below: Python
with the same meaning, written with our own control flow (`for`, `while`,
`if`), so the body stays user code read by our parser, its gradient comes
from our loop and branch rules, and a traced `lax.while_loop` gets a
reverse-mode gradient (JAX refuses one).

- `scan(f, init, xs, length, reverse)`: a `for` over the trip count that pops
  each step's `x` from a stack of xs's rows and pushes its `y` on a stack
  of ys (`control.prims`: `rows_stack`, `stack_push_once`, `stack_rows`).
  Under `lax` the run time reads such stacks' items as a `lax.scan`'s xs
  and gives them as its ys (`control.runtime._slot_scan`), in the forward
  loop and in the reverse one (the cotangents of ys arrive as a stack it
  pops, those of xs leave as one it pushes): JAX's own scan, no buffer
  carried, at every order (a derivative of a derivative carries them).
  `lax.map(f, xs)`: the same loop without a carry.
- `while_loop`, `fori_loop`: the loop they name. A traced `fori_loop` index
  is an int32 array in JAX and a Python int here where the bounds are static.
- `cond(pred, t, f, *operands)`, `switch(index, branches, *operands)`:
  written per number of operands (and branches) at the call (`model`); the
  index of `switch` is clamped into range, as JAX does.
- `jax.checkpoint(f)`, `jax.remat(f)`, `jax.named_call(f)`: `f` itself (same values).
- `jnp.apply_along_axis(func1d, axis, arr)`: batched where it can be
  (`frontend.batching`, as `jax.vmap`); else a loop over the 1-d slices,
  results stacked as JAX places them; `jnp.apply_over_axes(func, a, axes)`:
  the loop over `axes` (a result that lost the axis gets it back).
- `jax.vmap(fun, in_axes, out_axes)(*args)`: batched where it can be
  (`frontend.batching`); else (a `fun` reading a Parameter, running host
  code, or known only at run time) a loop over the mapped axis (`in_axes` 0
  or None per argument, `out_axes` 0), the same values as the batched call.

JAX traces each of these bodies once (every branch of a `cond` or `switch`),
so their host code (a print, a random draw, a global counter, a function run
as Python) runs once per call of the construct, where the model runs the
body per step, row or taken branch. Each model runs as `traced_once(name,
model, ...)` (`control.TracedOnce`), and `control.body_run(key, after)`
begins each run of a body: the first run of each body records its host
calls, the later ones replay them (`runtime.host_log.traced_once`), or are
refused where a step would run them otherwise. A `cond` or `switch` whose
branches may run host code (`traced_branches_model`) runs every branch once
for its host code, in JAX's order, then the taken one, replayed; the others'
values are unused (they get no gradient). Loops give their first step the
carry JAX gives it (`trees.carry_init`: a Python float a JAX array), so a
body run as Python, traced once, holds for every step.

Not read here (a KTransformError names the option): `scan(unroll=...)` and
`_split_transpose` are accepted and ignored (they change speed, not values);
`vmap` with other axes, `axis_name` or keyword arguments to the mapped function.
"""

from __future__ import annotations

import linecache

import jax
import jax.numpy as jnp
from jax import lax

from k_transform.context import TRANSFORM
from k_transform.control import prims as control
from k_transform.errors import KTransformError
from k_transform.ops import trees


class _TracedOnce:
    """`traced_once(construct, model, *args)`, written in a model: the parser
    reads it as `control.TracedOnce` of `model`'s graph, where each
    `control.body_run(key, after)` begins a run of the body JAX traces once (its host
    code runs in the first run only: `runtime.host_log.traced_once`)."""

    def __call__(self, construct, model, *args):
        return model(*args)


traced_once = _TracedOnce()


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    return traced_once("lax.scan", _scan, f, init, xs, length, reverse)


def _scan(f, init, xs, length, reverse):
    n = trees.scan_length(xs, length)
    rows = control.rows_stack(xs, n, not reverse)
    ys = control.stack_new()
    carry = trees.carry_init(init)
    for _ in range(n):
        x, rows = control.stack_pop(rows, None)
        control.body_run(0, None)
        carry, y = f(carry, x)
        ys = control.stack_push_once(ys, y)
    return carry, control.stack_rows(ys, reverse)


def lax_map(f, xs, batch_size=None):
    return traced_once("lax.map", _lax_map, f, xs)


def _lax_map(f, xs):
    n = trees.scan_length(xs, None)
    rows = control.rows_stack(xs, n, True)
    ys = control.stack_new()
    for _ in range(n):
        x, rows = control.stack_pop(rows, None)
        control.body_run(0, None)
        ys = control.stack_push_once(ys, f(x))
    return control.stack_rows(ys, False)


def while_loop(cond_fun, body_fun, init_val):
    return traced_once("lax.while_loop", _while_loop, cond_fun, body_fun, init_val)


def _while_loop(cond_fun, body_fun, init_val):
    # JAX traces `cond_fun` and `body_fun` once each: one run of the body
    # is a test and the step after it (the last test starts a run too)
    val = trees.carry_init(init_val)
    control.body_run(0, None)
    while cond_fun(val):
        control.body_run(1, None)
        val = body_fun(val)
        control.body_run(0, None)
    return val


def fori_loop(lower, upper, body_fun, init_val, unroll=None):
    return traced_once("lax.fori_loop", _fori_loop, lower, upper, body_fun, init_val)


def _fori_loop(lower, upper, body_fun, init_val):
    val = trees.carry_init(init_val)
    for i in range(lower, upper):
        control.body_run(0, None)
        val = body_fun(i, val)
    return val


def apply_along_axis(func1d, axis, arr):
    return traced_once("jnp.apply_along_axis", _apply_along_axis, func1d, axis, arr)


def _apply_along_axis(func1d, axis, arr):
    axis = axis % jnp.ndim(arr)
    moved = jnp.moveaxis(arr, axis, -1)
    rows = jnp.reshape(moved, (-1, jnp.shape(moved)[-1]))
    n = jnp.shape(rows)[0]
    control.body_run(0, None)
    first = func1d(rows[0])
    ys = trees.tree_stack_at(first, n, 0)
    for i in range(1, n):
        control.body_run(0, None)
        ys = trees.tree_set(ys, i, func1d(rows[i]))
    ys = jnp.reshape(ys, jnp.shape(moved)[:-1] + jnp.shape(first))
    outer, k = jnp.ndim(arr) - 1, jnp.ndim(first)
    return jnp.moveaxis(ys, tuple(range(outer, outer + k)), tuple(range(axis, axis + k)))


def apply_over_axes(func, a, axes):
    for axis in axes:
        b = func(a, axis)
        if jnp.ndim(b) == jnp.ndim(a) - 1:
            b = jnp.expand_dims(b, axis)
        a = b
    return a


FIXED = {
    lax.scan: scan,
    lax.map: lax_map,
    lax.while_loop: while_loop,
    lax.fori_loop: fori_loop,
    jnp.apply_over_axes: apply_over_axes,
}


@TRANSFORM.memoize("lax_models.cond_model")
def cond_model(n_ops: int):
    ops = ", ".join(f"op{k}" for k in range(n_ops))
    return _define(
        f"cond_{n_ops}",
        f"def cond_{n_ops}(pred, true_fun, false_fun{', ' if ops else ''}{ops}):\n"
        f"    if pred:\n"
        f"        return true_fun({ops})\n"
        f"    return false_fun({ops})\n",
    )


@TRANSFORM.memoize("lax_models.switch_model")
def switch_model(n_branches: int, n_ops: int):
    ops = ", ".join(f"op{k}" for k in range(n_ops))
    branches = ", ".join(f"branch{k}" for k in range(n_branches))
    lines = [f"def switch_{n_branches}_{n_ops}(index, {branches}{', ' if ops else ''}{ops}):"]
    for k in range(n_branches - 1):
        test = "index <= 0" if k == 0 else f"index == {k}"
        lines += [f"    if {test}:", f"        return branch{k}({ops})"]
    lines.append(f"    return branch{n_branches - 1}({ops})")
    return _define(f"switch_{n_branches}_{n_ops}", "\n".join(lines) + "\n")


@TRANSFORM.memoize("lax_models.traced_branches_model")
def traced_branches_model(construct: str, n_branches: int, n_ops: int):
    """The model of `lax.cond` (`construct`, its branches true then false)
    or `lax.switch` whose branches run host code: JAX traces every branch
    (their Python runs once each, in order) and runs the one taken. Each
    branch is run once for its host code (its values unused: no gradient
    flows there), then the taken one again, replaying it (`traced_once`)."""
    ops = ", ".join(f"op{k}" for k in range(n_ops))
    names = ("true_fun", "false_fun") if construct == "lax.cond" else None
    branches = names or tuple(f"branch{k}" for k in range(n_branches))
    first = "pred" if names else "index"
    name = f"{construct.replace('lax.', '')}_traced_{n_branches}_{n_ops}"
    params = ", ".join([first, *branches, *([ops] if ops else [])])
    lines = [
        f"def {name}({params}):",
        f"    return traced_once({construct!r}, {name}_branches, {params})",
        "",
        "",
        f"def {name}_branches({params}):",
    ]
    ran = "None"  # the value of the run before: computed (its host code runs), unused
    for k, b in enumerate(branches):
        lines += [f"    control.body_run({k}, {ran})", f"    ran = {b}({ops})"]
        ran = "ran"
    tests = (
        ["pred"] if names else ["index <= 0", *(f"index == {k}" for k in range(1, n_branches - 1))]
    )
    for k, test in enumerate(tests):
        lines += [f"    if {test}:", f"        control.body_run({k}, ran)"]
        lines.append(f"        return {branches[k]}({ops})")
    k = n_branches - 1
    lines += [f"    control.body_run({k}, ran)", f"    return {branches[k]}({ops})"]
    return _define(name, "\n".join(lines) + "\n")


def vmap_model(axes: tuple):
    """The loop `jax.vmap(fun, in_axes=axes)(*args)` means, for len(axes) args
    (cached by the axes' text: an entry may be a dict)."""
    table = TRANSFORM.cache("lax_models.vmap_model")
    key = repr(axes)
    if key not in table:
        table[key] = _vmap_model(axes)
    return table[key]


def _vmap_model(axes: tuple):
    args = [f"a{k}" for k in range(len(axes))]

    def read(a, ax, i):
        if ax is None:
            return a
        if isinstance(ax, (tuple, list, dict)):  # in_axes per leaf: `{"w": None, "b": 0}`
            return f"trees.tree_index_at({a}, {ax!r}, {i})"
        return f"trees.tree_index({a}, {i})"

    def row(i):
        return ", ".join(read(a, ax, i) for a, ax in zip(args, axes, strict=True))

    name = f"vmap_{len(axes)}"
    source = (
        f"def {name}(fun, {', '.join(args)}):\n"
        f"    return traced_once('jax.vmap', {name}_rows, fun, {', '.join(args)})\n"
        f"\n\n"
        f"def {name}_rows(fun, {', '.join(args)}):\n"
        f"    n = trees.batch_size({axes!r}, ({', '.join(args)},))\n"
        f"    control.body_run(0, None)\n"
        f"    ys = trees.tree_stack_at(fun({row(0)}), n, 0)\n"
        f"    for i in range(1, n):\n"
        f"        control.body_run(0, None)\n"
        f"        ys = trees.tree_set(ys, i, fun({row('i')}))\n"
        f"    return ys\n"
    )
    return _define(name, source)


def _define(name: str, source: str):
    filename = f"<k_transform: model of {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"__name__": __name__, "trees": trees, "control": control, "traced_once": traced_once}
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - our own text
    return scope[name]


def vmap_axes(in_axes, out_axes, n_args: int, kwargs: dict) -> tuple:
    """`in_axes` as one entry (0 or None) per argument; refuses what the model cannot read."""
    if kwargs:
        raise KTransformError(
            f"jax.vmap options {sorted(kwargs)} are not supported by k_transform in "
            "differentiated code (in_axes and out_axes=0 are)"
        )
    if out_axes != 0:
        raise KTransformError(
            f"jax.vmap with out_axes={out_axes!r} is not supported by k_transform in "
            "differentiated code (out_axes=0 is)"
        )
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n_args
    leaves = jax.tree_util.tree_leaves(axes, is_leaf=lambda a: a is None)
    if len(axes) != n_args or any(a not in (0, None) for a in leaves):
        raise KTransformError(
            f"jax.vmap with in_axes={in_axes!r} over {n_args} arguments is not supported by "
            "k_transform in differentiated code (0 or None per argument or per leaf is)"
        )
    keys = [k for a in axes for k in _dict_keys(a)]
    if any(type(k) not in (str, int) for k in keys):
        raise KTransformError(
            f"jax.vmap with in_axes={in_axes!r}: k_transform reads dict in_axes keyed by "
            "strings or ints"
        )
    if all(a is None for a in leaves):
        raise KTransformError("jax.vmap with every in_axes None has no axis to map")
    return axes


def _dict_keys(axes) -> list:
    """The keys of the dicts in an `in_axes` entry."""
    if isinstance(axes, dict):
        return [*axes, *(k for a in axes.values() for k in _dict_keys(a))]
    if isinstance(axes, (tuple, list)):
        return [k for a in axes for k in _dict_keys(a)]
    return []


def fixed_model(value):
    """The model of `value` when it has one of its own (read as a graph
    wherever the name is read, so it can be passed and called later)."""
    try:
        return FIXED.get(value)
    except TypeError:  # unhashable
        return None


# The function arguments of the models above, by position: how many
# positional arguments the model calls each with.
FUNCTION_ARITIES = {scan: {0: 2}, lax_map: {0: 1}, while_loop: {0: 1, 1: 1}, fori_loop: {2: 2}}
PER_CALL = (lax.cond, lax.switch, jax.vmap, jnp.apply_along_axis)
# `jax.checkpoint(f)` and `jax.named_call(f)` compute what `f` computes (they
# change memory use or names): the call is `f` itself.
SAME_VALUES = (jax.checkpoint, jax.remat, jax.named_call)


def is_modelled(value) -> bool:
    """Whether a call of `value` is read as a model written for that call."""
    return any(value is f for f in (*PER_CALL, *SAME_VALUES))
