"""`if`, `while` and `for` at run time (imported in generated code as `_ctl`).

Control flow decides at run time: a concrete condition runs a Python `if` or
`while`; a traced one (under `jax.jit`) runs `lax.cond` / `lax.while_loop` /
`lax.scan`. Loops never recurse in Python, so trip counts are unbounded.
Whether a loop with a static trip count unrolls is `k_transform.control.policy`.
A `lax.scan` reads the stacks its iterations pop as its xs and gives those
they push on as its ys (`_slot_scan`), as does the reverse loop of K of a
loop whose forward loop was such a scan: the loops of a differentiated
`lax.scan` are JAX's.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys

import jax
import jax.numpy as jnp
from jax import lax

from k_transform.control import checkpoint, guarded, invariants, policy
from k_transform.errors import KTransformError, UnboundedRecursion, needs_static
from k_transform.runtime import bounds, host_log, residuals
from k_transform.runtime import python as rt_python
from k_transform.runtime import stack as rs
from k_transform.runtime.rules import getitem_grad
from k_transform.runtime.state import assigned_in, forked, stateful_branch, write_back
from k_transform.runtime.values import (
    UNDEFINED,
    any_traced,
    brief,
    describe,
    fill_undefined,
    fit,
    is_tracer,
    rebuild,
    shape_of,
    zeros_like_value,
)


def shown_where(where: str) -> str:
    """`where` ("file:line") as generated code spells it: the file relative to
    the `sys.path` entry it is under (`pkg/mod.py:12`, found again there by
    `linecache`), else its base name; never a path that depends on the
    machine."""
    path, _, line = where.rpartition(":")
    if not path or not os.path.isabs(path):
        return where
    roots = [os.path.abspath(p or os.curdir) for p in sys.path if isinstance(p, str)]
    roots = [r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)]
    relative = os.path.relpath(path, max(roots, key=len)) if roots else os.path.basename(path)
    return f"{relative.replace(os.sep, '/')}:{line}"


# The bodies of the loops running (innermost last), with how many of their
# parameters come before the carried ones: errors about a carry name the
# user's variable, the body's parameter (`_carry_name`).
_LOOP_BODIES: list[tuple] = []


def _traced_where_static(error) -> bool:
    """Whether `error` is JAX's for a traced value where Python needs a
    number (a slice bound, a shape, `int(...)`, a Python `if`)."""
    concrete = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerIntegerConversionError,
        jax.errors.TracerBoolConversionError,
        jax.errors.NonConcreteBooleanIndexError,
    )
    return isinstance(error, concrete) or (isinstance(error, IndexError) and needs_static(error))


def _naming_carries(body_at: int, skip: int):
    """A loop helper whose argument `body_at` is its body function, taking
    `skip` parameters before its carries (`for_range`'s index, `for_each`'s
    item): while it runs, `_carry_name` reads that body's parameter names."""

    def wrap(loop):
        @functools.wraps(loop)
        def run(*args, **kwargs):
            _LOOP_BODIES.append((args[body_at], skip))
            try:
                return loop(*args, **kwargs)
            finally:
                _LOOP_BODIES.pop()

        return run

    return wrap


def _carry_name(k: int) -> str:
    """Carry `k` of the innermost loop running, as errors name it: its
    variable's name (`'best'`) where the body's parameters show it, else `k`."""
    if _LOOP_BODIES:
        body, skip = _LOOP_BODIES[-1]
        try:
            names = list(inspect.signature(body).parameters)[skip:]
        except (TypeError, ValueError):
            names = []
        if k < len(names) and not names[k].startswith("_"):
            return repr(names[k])
    return str(k)


# -- if ----------------------------------------------------------------------
def condition(cond, statement: str, where: str = ""):
    """A traced condition as a boolean scalar. An array of one element (shape
    `(1,)`, `(1, 1)`) is its element, as Python's `bool` and MindSpore read it;
    more elements are ambiguous: a KTransformError."""
    if jnp.shape(cond) != () and jnp.size(cond) != 1:
        raise KTransformError(
            f"the condition of a `{statement}` must be a scalar or have one element, "
            f"not shape {jnp.shape(cond)}{describe(where)}"
        )
    return jnp.asarray(cond, bool).reshape(())


def switch(cond, true_fn, false_fn, *args, where: str = "", host: bool = False):
    """`true_fn(*args) if cond else false_fn(*args)`, with `lax.cond` when
    traced (`host`: a branch runs host code, which needs a concrete test)."""
    if not is_tracer(cond):
        return true_fn(*args) if cond else false_fn(*args)
    refusal = ("an `if` whose branches", "test", where)
    if host:
        raise _traced_host(*refusal)
    cond = condition(cond, "if", where)
    try:
        return _try_lax(lambda: _traced_switch(cond, true_fn, false_fn, args, where), refusal)
    except RecursionError:
        name = _enclosing_def(where)
        error = UnboundedRecursion(
            f"recursion in {name!r} does not end under jax.jit: its base case is chosen by a "
            "traced condition, both branches of the `if` are traced, each calling it again, "
            "and XLA has no recursion; call it without your jax.jit (k_transform then runs "
            f"it op by op), recurse on a Python int (static), or write a loop{describe(where)}"
        )
        error.function = name
        raise error from None


def _traced_host(construct: str, what: str, where: str) -> KTransformError:
    """The error for host code under Python control flow whose `what` is traced."""
    return KTransformError(
        f"{construct} call host code (print, a random generator, next(...)) and its {what} "
        "is traced (under a jit): host code runs as often as Python would run it, which is "
        "known only when the value is; make it concrete (a Python number, a static "
        f"argument), move the host call out, or call without a jit{describe(where)}"
    )


def _try_lax(attempt, refusal=None):
    """`attempt()`: a loop or branch under `lax` (a loop's None: it unrolls).
    A body reaching host code known only at run time (a method of the user's
    object: `host_log.HostInTrace`, raised before it runs) gives None, for
    Python's iterations, or with a traced test raises `_traced_host(*refusal)`
    (inside a body being traced itself, the enclosing loop decides)."""
    try:
        with host_log.traced_body():
            return attempt()
    except host_log.HostInTrace:
        if host_log.tracing():
            raise
        if refusal is not None:
            raise _traced_host(*refusal) from None
        return None


def _enclosing_def(where: str) -> str:
    """The name of the `def` around line `where` ("file:line"), read from the source."""
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return "<unknown>"
    for k in range(int(line), 0, -1):
        text = linecache.getline(path, k).strip()
        if text.startswith("def "):
            return text[4:].split("(")[0]
    return "<unknown>"


def _traced_switch(cond, true_fn, false_fn, args, where: str):
    ids = assigned_in(lambda: (true_fn(*args), false_fn(*args)))
    if ids:  # Assign in a traced branch: thread the Parameters through lax.cond
        t, f = stateful_branch(true_fn, ids), stateful_branch(false_fn, ids)
        out, values = switch(cond, t, f, *args, where=where)
        write_back(ids, values)
        return out
    t = _Branch(lambda: _taken_when(cond, False, true_fn, args))
    f = _Branch(lambda: _taken_when(cond, True, false_fn, args))
    if t.paths or f.paths:  # K of an `if`: (out, bprop)
        _refuse_none_against_array(t.shape, f.shape, where)
        return _cond_of_functions(cond, t, f, where)
    t_out, f_out = t.shape, f.shape
    single = not isinstance(t_out, tuple)
    if single:
        t_out, f_out = (t_out,), (f_out,)
    joined = _joined_branches(t_out, f_out, where)

    def branch(b, other):
        def run():
            value = b.run()[0]
            value = fill_undefined((value,) if single else tuple(value), other)
            return _cast_to(value, joined)

        return run

    out = lax.cond(jnp.asarray(cond, bool), branch(t, f_out), branch(f, t_out))
    return out[0] if single else out


def _refuse_none_against_array(a, b, where: str) -> None:
    """A value None in one branch of a traced `if` (K of it: the values of
    the user's program, functions stripped) where the other's is an array
    (`best = None`, then `best = x` under a traced test): a `lax.cond` gives
    one type, and taking None for zeros gave wrong numbers with no error.
    Refused as the `if` itself is (`_joined_branches`)."""
    if (a is None) != (b is None):
        other = b if a is None else a
        if hasattr(other, "shape") and not rs.is_stack(other):
            raise KTransformError(
                "the branches of a traced `if` give None in one and an array "
                f"({brief(other)}) in the other (a variable None before it, assigned in one "
                "branch): which it is would depend on traced data, and a `lax.cond` gives "
                f"one type; give it an array before the `if` (e.g. zeros){describe(where)}"
            )
        return
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        for x, y in zip(a, b, strict=True):
            _refuse_none_against_array(x, y, where)
    elif isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() & b.keys():
            _refuse_none_against_array(a[key], b[key], where)


def _taken_when(cond, negated: bool, fn, args):
    """`fn(*args)`, a branch taken where `cond` holds (or not, `negated`): a
    `raise` in it raises only there."""
    with rt_python.taken_when(cond, negated):
        return fn(*args)


class _Branch:
    """A branch of a traced `if`, traced once (`jax.make_jaxpr`; a nested
    `if` in it is traced once too, not once per probe of the enclosing one):
    the shape of its value, and the functions in its value (the bprop of K
    of an `if`) split into the arrays they hold (`runtime.residuals`;
    skeleton None where they hold what it cannot see into). Of those arrays
    the ones the branch computes (`made`) leave the `lax.cond` as outputs;
    the ones it reads from outside are taken as they are."""

    def __init__(self, thunk):
        self.thunk = thunk
        found = {}

        def traced():
            value = thunk()
            found["paths"] = paths = []
            stripped = _strip(value, paths, undefined=UNDEFINED)
            try:
                arrays, found["skeleton"] = residuals.split([_get(value, p) for p in paths])
            except residuals.Opaque:
                arrays, found["skeleton"] = [], None
            return stripped, arrays

        closed, (self.shape, arrays) = jax.make_jaxpr(traced, return_shape=True)()
        self.jaxpr, self.paths, self.skeleton = closed, found["paths"], found["skeleton"]
        n_value = len(jax.tree_util.tree_leaves(self.shape))
        self.value_tree = jax.tree_util.tree_structure(self.shape)
        consts = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        self.read, self.made = [], []  # per array: the outside value, or None (made)
        for k, var in enumerate(closed.jaxpr.outvars[n_value:]):
            outside = var.val if hasattr(var, "val") else consts.get(var)  # a Literal, or a Var
            self.read.append(outside)
            if outside is None:
                self.made.append((k, arrays[k]))

    def run(self):
        """`(value without its functions, the arrays it makes for them)`, in
        the trace this is called in."""
        flat = jax.core.eval_jaxpr(self.jaxpr.jaxpr, self.jaxpr.consts)
        n_value = self.value_tree.num_leaves
        value = jax.tree_util.tree_unflatten(self.value_tree, flat[:n_value])
        return value, [flat[n_value + k] for k, _ in self.made]

    def zeros(self) -> list:
        """Zeros in place of the arrays `run` makes (the branch not taken)."""
        return [lax.full(a.shape, 0, a.dtype) for _, a in self.made]

    def functions(self, made) -> list:
        arrays = list(self.read)
        for (k, _), a in zip(self.made, made, strict=True):
            arrays[k] = a
        return residuals.join(self.skeleton, arrays)


def _strip(value, found: list, path=(), undefined=None):
    """`value` with functions replaced by None (their paths appended to
    `found`) and UNDEFINED by `undefined`."""
    if value is UNDEFINED:
        return undefined
    if callable(value) and not hasattr(value, "shape"):
        found.append(path)
        return None
    if isinstance(value, (tuple, list)):
        items = [_strip(v, found, (*path, k), undefined) for k, v in enumerate(value)]
        return rebuild(value, items)
    if isinstance(value, dict):
        return {k: _strip(v, found, (*path, k), undefined) for k, v in value.items()}
    return value


def _get(value, path):
    for k in path:
        value = value[k]
    return value


def _set(value, path, item):
    if not path:
        return item
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, item)}
    items = list(value)
    items[head] = _set(items[head], rest, item)
    return rebuild(value, items)


def _cond_of_functions(cond, t: _Branch, f: _Branch, where: str):
    """`lax.cond` of two branches whose values hold functions (K of an `if`
    under trace: `(out, bprop)`), or gradients (a bprop's). Structures are unified (None, UNDEFINED
    and missing dict entries become zeros); each function comes back as
    `switch(cond, the true branch's, the false branch's)`, made again from
    the arrays it held (outputs of the cond: the other branch gives zeros
    for them, as JAX's own partial evaluation of `cond` does)."""
    if t.paths != f.paths:
        raise _functions_apart(where)
    if t.skeleton is None or f.skeleton is None:
        return cond_recomputing(cond, t.thunk, f.thunk, where)
    shape = _unify(_strip(t.shape, []), _strip(f.shape, []), where)

    def run(b: _Branch, first: bool):
        def taken():
            value, made = b.run()
            zeros = (f if first else t).zeros()
            return fit(_strip(value, []), shape), *((made, zeros) if first else (zeros, made))

        return taken

    result, t_arrays, f_arrays = lax.cond(jnp.asarray(cond, bool), run(t, True), run(f, False))
    pairs = zip(t.paths, t.functions(t_arrays), f.functions(f_arrays), strict=True)
    for path, a, b in pairs:
        result = _set(result, path, _selected(cond, a, b, where))
    return result


def _selected(cond, a, b, where: str):
    """`a` or `b` by the traced `cond`, as a function (of gradients: their
    structures are unified, as the branches' values are)."""

    def selected(*call_args):
        t, f = _Branch(lambda: a(*call_args)), _Branch(lambda: b(*call_args))
        return _cond_of_functions(cond, t, f, where)

    return selected


def cond_recomputing(cond, true_fn, false_fn, where: str = ""):
    """`lax.cond` of two thunks whose values hold functions that `residuals`
    cannot take apart: each function comes back as a closure that, when
    called, runs `cond_recomputing` again over the same function of both
    branches: the taken branch is recomputed, then its function applied.
    Probing uses `jax.eval_shape`, so it runs no effect."""
    t_paths, f_paths = [], []
    t_shape = jax.eval_shape(lambda: _strip(true_fn(), t_paths))
    f_shape = jax.eval_shape(lambda: _strip(false_fn(), f_paths))
    if t_paths != f_paths:
        raise _functions_apart(where)
    shape = _unify(t_shape, f_shape, where)
    result = lax.cond(
        jnp.asarray(cond, bool),
        lambda: fit(_strip(true_fn(), []), shape),
        lambda: fit(_strip(false_fn(), []), shape),
    )
    for path in t_paths:
        result = _set(result, path, _dispatch(cond, true_fn, false_fn, path, where))
    return result


def _functions_apart(where: str) -> KTransformError:
    return KTransformError(
        f"the branches of a traced `if` return functions in different places{describe(where)}"
    )


def _dispatch(cond, true_fn, false_fn, path, where):
    def closure(*call_args):
        return cond_recomputing(
            cond,
            lambda: _get(true_fn(), path)(*call_args),
            lambda: _get(false_fn(), path)(*call_args),
            where,
        )

    return closure


def _unify(a, b, where: str = ""):
    """A structure both `a` and `b` (eval_shape results) fit, None as zero."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _unify(a.get(k), b.get(k), where) for k in sorted({*a, *b})}
    if isinstance(a, rs.PyStack) and isinstance(b, rs.PyStack) and a.size == b.size:
        if not a.size:
            return a
        return rs.PyStack(_unify(a.top, b.top, where), _unify(a.rest, b.rest, where), a.size)
    if isinstance(a, rs.BufStack) and isinstance(b, rs.BufStack):
        memo = a.memo if a.memo is not None else b.memo  # (the stack a reverse loop pops)
        return rs.BufStack(_unify(a.buf, b.buf, where), _unify(a.n, b.n, where), memo)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return rebuild(a, [_unify(x, y, where) for x, y in zip(a, b, strict=True)])
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        raise KTransformError(
            f"the branches of a traced `if` give a {type(a).__name__} of length {len(a)} vs "
            f"{len(b)} (a list grown in one branch only): under jit both branches must give "
            f"the same structure{describe(where)}"
        )
    if getattr(a, "shape", None) != getattr(b, "shape", None) or type(a) is not type(b):
        raise KTransformError(
            "the branches of a traced `if` give values of different structure or shape: "
            f"{brief(a)} vs {brief(b)}{describe(where)}"
        )
    return a


def _joined_branches(t_out, f_out, where):
    """The dtypes both branches' values take, as lax.cond would join them.

    A weakly typed value (a Python float such as `s = 0.0` left alone by one
    branch) takes the other branch's dtype, as `s + x` would in Python: under
    x64 a bare 0.0 is a weak float64 that must meet a float32 carry. Returns
    per value the leaves' dtypes (None where UNDEFINED); strong dtypes that
    differ are an error naming the line.
    """
    if not isinstance(f_out, tuple) or len(t_out) != len(f_out):
        raise KTransformError(
            f"the branches of a traced `if` give different numbers of values{describe(where)}"
        )
    joined = []
    for a, b in zip(t_out, f_out, strict=True):
        if a is UNDEFINED or b is UNDEFINED:
            joined.append(None)
            continue
        a_leaves, a_tree = jax.tree_util.tree_flatten(a)
        b_leaves, b_tree = jax.tree_util.tree_flatten(b)
        if a_tree != b_tree:
            raise KTransformError(
                "the branches of a traced `if` give values of different structure: "
                f"{a_tree} vs {b_tree}{describe(where)}"
            )
        dtypes = []
        for x, y in zip(a_leaves, b_leaves, strict=True):
            weak = getattr(x, "weak_type", False) or getattr(y, "weak_type", False)
            if x.shape != y.shape or (x.dtype != y.dtype and not weak):
                raise KTransformError(
                    "the branches of a traced `if` give values of different shape or dtype: "
                    f"{x.shape} {x.dtype} vs {y.shape} {y.dtype}{describe(where)}"
                )
            dtypes.append(_join_dtype(x, y))
        joined.append(dtypes)
    return joined


def _join_dtype(x, y):
    x_weak, y_weak = getattr(x, "weak_type", False), getattr(y, "weak_type", False)
    if x_weak != y_weak:
        return y.dtype if x_weak else x.dtype
    return jnp.promote_types(x.dtype, y.dtype)


def _cast_to(values, joined):
    out = []
    for value, dtypes in zip(values, joined, strict=True):
        if dtypes is not None:
            leaves, tree = jax.tree_util.tree_flatten(value)
            leaves = [jnp.asarray(v, d) for v, d in zip(leaves, dtypes, strict=True)]
            value = jax.tree_util.tree_unflatten(tree, leaves)
        out.append(value)
    return tuple(out)


# -- loops --------------------------------------------------------------------
@_naming_carries(body_at=1, skip=0)
def while_loop(
    cond_fn,
    body_fn,
    n_carry,
    *values,
    where: str = "",
    grads: bool = False,
    popping=None,
    records=None,
    host: bool = False,
):
    """`while cond(*carry, *inv): carry = body(*carry, *inv)`; returns the carry.

    `grads`: the carries are gradients (a loop of a derivative): None and
    missing env entries are zeros, and take the structure the body gives.
    `popping`: the carry, a stack, the loop pops until empty: it runs at most
    that stack's capacity times (stacks its body starts get as many slots).
    `records`: the carry, a stack, each iteration pushes its carry on (the
    forward loop of K of a loop, `control.k_loops`): under a jit that cannot
    retrace, the loop keeps checkpoints instead (`_Recording.run`).
    `host`: its body runs host code: iterations stay Python's (the test must
    be concrete).
    """
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    if popping is not None and isinstance(carry[popping], rs.Checkpoints):
        carry = _reverse_checkpoints(body_fn, carry, inv, popping, where, grads)
    refusal = ("a `while` whose body and condition", "condition", where)
    n = 0
    while True:
        c = cond_fn(*carry, *inv)
        if is_tracer(c):
            if host:
                raise _traced_host(*refusal)
            break
        if not c:
            return carry
        n += 1
        bounds.count_iteration(n, where)
        carry = _iteration(body_fn, (*carry, *inv), records)
    try:
        return _try_lax(
            lambda: _lax_while(cond_fn, body_fn, carry, inv, where, grads, popping, records),
            refusal,
        )
    except (TypeError, IndexError, KeyError, ValueError) as e:
        # JAX's error goes on (a probe deciding to unroll an enclosing loop
        # catches it); where it stops the program it is raised as the refusal
        # (`refusal_of`), the innermost `while`'s
        if getattr(e, REFUSAL, None) is None:
            setattr(e, REFUSAL, _needs_python_carry(e, body_fn, carry, inv, where))
        raise


REFUSAL = "kt_refusal"  # the attribute of an error holding the KTransformError it stands for


def refusal_of(error: BaseException) -> KTransformError | None:
    """The KTransformError a loop found `error` (JAX's) to stand for, if any."""
    return getattr(error, REFUSAL, None)


def _needs_python_carry(error, body_fn, carry, inv, where):
    """The KTransformError for `error`, raised tracing a `while` whose test is
    traced, where its body needs a value the loop changes as a Python number
    (`x[:i]`, `range(i)`, `jnp.zeros(i)`), which under `lax` is traced: JAX's
    error for a traced value there, or one the body does not raise run on
    the carry it starts from (Python numbers where they are: `i = 0`); else
    None (the body's own error). JAX refuses the same Python under `jax.jit`."""
    numbers = [
        k for k, c in enumerate(carry) if isinstance(c, (int, float)) and not isinstance(c, bool)
    ]
    if not _traced_where_static(error):
        if not numbers:
            return None
        try:  # abstractly: a print or a host call in the body leaves no trace
            jax.eval_shape(lambda: body_fn(*carry, *inv))
        except Exception:  # noqa: BLE001 -- the body fails alike: its own error
            return None
    names = ", ".join(_carry_name(k) for k in numbers) or "a counter"
    text = str(error).strip().splitlines()
    return KTransformError(
        f"the body of this `while` needs a value the loop changes ({names}) as a "
        "Python number, and the loop runs under `lax`, its test being traced (it depends on "
        "an array, or a `break` does), where what it carries is traced: make the test depend "
        "on Python values only (a counter against a static bound), or loop over a static "
        f"`range` with a `break` ({type(error).__name__}: {text[0] if text else ''})"
        f"{describe(where)}"
    )


def _lax_while(cond_fn, body_fn, carry, inv, where, grads, popping, records):
    step = lambda cr: tuple(body_fn(*cr, *inv))  # noqa: E731
    if records is not None and not bounds.can_retrace():
        plain = _Recording(lambda i, cr: step(cr), carry, records)
        if plain.checkpoints():

            def running(i, cr):
                return condition(cond_fn(*plain.full(cr, rs.PyStack()), *inv), "while", where)

            return plain.run(running, carry, where, grads)
    if popping is not None and records is None:
        out = _popping_scan(step, carry, popping, grads, where)
        if out is not None:
            return out
    trips = rs.capacity(carry[popping]) if popping is not None else None
    spare = guarded.spare(carry, records)
    if spare:
        trips = bounds.buffer_slots(where) + spare
    carry = settle_carry(step, carry, where, trips, grads)
    test = lambda cr: condition(cond_fn(*cr, *inv), "while", where)  # noqa: E731
    body = lambda cr: like_carry(step(cr), cr, grads)  # noqa: E731
    pushed = records if spare else None
    out = lax.while_loop(test, guarded.loop_body(test, body, carry, pushed, popping), carry)
    return rs.check_stacks(out, where, popping, pushed)


def _popping_scan(step, carry, k, grads, where):
    """A loop popping stack `carry[k]` until it is empty (the reverse loop
    of K of a loop) as a reverse `lax.scan` (`_slot_scan`), where the count
    is known while tracing (a forward `lax.scan` left it); else None."""
    known = getattr(carry[k], "known", None)
    if not known:
        return None
    return _slot_scan(lambda head, cr: step(cr), carry, None, known, where, grads, reverse=True)


# -- a lax.scan reading and writing stacks by slots ----------------------------------
def _slot_scan(step, carry, heads, trips, where, grads, reverse=False):
    """`trips` iterations of `step(head, carry)` (heads: the rows of `heads`,
    or None) as one `lax.scan` whose xs are the items of the stacks in the
    carry that each iteration pops (`sources`: buffers of a count known
    while tracing) and whose ys are the items (and memos) of those it pushes
    on (`sinks`: empty at the start), as JAX's scan takes residuals and
    cotangents and gives stacked outputs; the other carries (`plain`) are
    carried. `reverse`: iterations run from the last row of `heads` to the
    first. None where a carry holding stacks is plain (a loop of a
    derivative of a derivative), or an iteration does not pop or push each
    of them exactly once (`rs.NotOneSlot`): then the stacks are carried."""
    kinds = _slot_kinds(step, carry, heads, trips)
    if kinds is None:
        return None
    scan = _SlotScan(step, carry, kinds, trips, grads)
    src = {j: _source_rows(carry[j], trips, reverse) for j in scan.at("in")}
    q_rows = jnp.arange(trips, dtype=jnp.int32)
    first = (_row(heads, 0, reverse, trips), q_rows[0], {j: _first(r) for j, r in src.items()})
    try:
        base = settle_carry(
            lambda p: scan.plain_of(scan.run(p, *first)), scan.plain, where, trips, grads
        )
        xs = (heads, q_rows[::-1] if reverse else q_rows, src)
        final, ys = invariants.scan(scan.body, base, xs, trips, reverse, _is_memo_array)
    except rs.NotOneSlot:
        return None
    return scan.result(final, ys, reverse)


def _is_made(path) -> bool:
    """Whether the output at `path` of `(item, memo arrays)` (the ys of
    `_Recording.scan`) is an array of an iteration's bprop."""
    return len(path) >= 2 and getattr(path[0], "idx", None) == 1


def _is_memo_array(path) -> bool:
    """`_is_made` in `_SlotScan.body`'s ys: sink -> (item, memo arrays)."""
    return _is_made(path[1:])


class _SlotScan:
    """The iteration of `_slot_scan`: `carry[j]` is plain where `kinds[j]`
    is None, else a source ("in") or a sink ("out") that the iteration sees
    as a `SlotIn` or `SlotOut` (`runtime.stack`)."""

    def __init__(self, step, carry, kinds, trips, grads):
        self.step, self.carry, self.kinds, self.trips, self.grads = step, carry, kinds, trips, grads
        self.plain = tuple(carry[j] for j in self.at(None))
        self.forms, self.zeroed, self.added = {}, {}, {}  # what tracing the body found

    def at(self, kind) -> list[int]:
        return [j for j, k in enumerate(self.kinds) if k == kind]

    def plain_of(self, out) -> tuple:
        return tuple(out[j] for j in self.at(None))

    def run(self, plain, head, q, rows):
        """The iteration `q` (counted from the first run) on `plain` carries."""
        full = list(self.carry)
        for j, value in zip(self.at(None), plain, strict=True):
            full[j] = value
        for j in self.at("in"):
            item, memo = rows[j]
            s = self.carry[j]
            full[j] = rs.SlotIn(
                item, s.known - q, None if memo is None else s.memo.form.bprop(memo)
            )
        for j in self.at("out"):
            full[j] = rs.SlotOut(None, q)  # (a sink starts empty)
        return tuple(self.step(head, tuple(full)))

    def body(self, plain, xs):
        head, q, rows = xs
        out = self.run(plain, head, q, rows)
        for j in self.at("in"):
            if not (isinstance(out[j], rs.SlotIn) and out[j].popped):
                raise rs.NotOneSlot("not popped")
            self.zeroed[j] = out[j].zeroed
        ys = {j: self.pushed(j, out[j], q) for j in self.at("out")}
        return like_carry(self.plain_of(out), plain, self.grads), ys

    def pushed(self, j, o, q):
        """What sink `j`'s slot `o` gives as the scan's ys: item, memo arrays."""
        if not (isinstance(o, rs.SlotOut) and o.pushed):
            raise rs.NotOneSlot("not pushed")
        self.forms[j], self.added[j] = [], o.added
        item = o.item
        if isinstance(self.carry[j], rs.BufStack):  # its slots' layout
            if o.memo is not None:
                raise rs.NotOneSlot("a memo pushed on a buffer")
            item = fit(item, rs.slot_shapes(self.carry[j].buf))
        return item, (rs.memo_arrays(o.memo, q, self.forms[j]) if o.memo else None)

    def result(self, final, ys, reverse) -> tuple:
        out = list(self.carry)
        for j, value in zip(self.at(None), final, strict=True):
            out[j] = value
        for j in self.at("in"):
            out[j] = _source_left(self.carry[j], self.trips, self.zeroed[j])
        for j in self.at("out"):
            items, made = ys[j]
            forms = self.forms[j]
            if forms and made is not None:  # arrays every iteration makes alike: read once
                form, made = forms[0].hoisted(made)
                forms = [form]
            if reverse:  # slot k holds what the k-th iteration run pushed
                items, made = jax.tree_util.tree_map(lambda y: y[::-1], (items, made))
            s = self.carry[j]
            out[j] = _sink_filled(s, items, made, forms, self.trips, self.added[j])
        return tuple(out)


def _sink_filled(s, items, made, forms, trips, added):
    """A sink after the scan: `items` pushed in slot order (on a buffer:
    written into its slots from its count, or `added` into them)."""
    if not isinstance(s, rs.BufStack):
        memo = rs.Memos(made, forms[0]) if forms else None
        return rs.BufStack(items, jnp.asarray(trips, jnp.int32), memo, known=trips)
    if s.buf is None:
        return rs.BufStack(None, jnp.asarray(trips, jnp.int32), known=trips)

    def write(b, rows):
        rows = jnp.asarray(rows, b.dtype)
        if added and jnp.issubdtype(b.dtype, jnp.inexact):
            rows = rows + b[:trips]
        return lax.dynamic_update_slice_in_dim(b, rows, 0, 0)

    buf = jax.tree_util.tree_map(write, s.buf, fit(items, rs.slot_shapes(s.buf)))
    return rs.BufStack(buf, jnp.asarray(trips, jnp.int32), known=trips)


def _slot_kinds(step, carry, heads, trips) -> list | None:
    """Per carry: "in" (a source), "out" (a sink), None (plain); None where
    a plain carry holds a stack, or a source has fewer than `trips` items.
    A None carry (a zero gradient) whose iteration gives a stack is a sink."""
    kinds = []
    for c in carry:
        if isinstance(c, rs.BufStack) and c.known is not None and not _holds_stack(c.buf):
            room = rs.capacity(c)
            if c.known >= trips:
                kinds.append("in")
            elif not c.known and c.memo is None and (room is None or room >= trips):
                kinds.append("out")  # an empty buffer (a zero gradient of a stack)
            else:
                kinds.append("bad")
        elif isinstance(c, rs.PyStack) and not c.size:
            kinds.append("out")
        else:
            kinds.append(None)
    if any(c is None for c in carry) and "bad" not in kinds:
        try:
            with forked():
                out = jax.eval_shape(lambda cr: step(_row(heads, 0, False, trips), cr), carry)
        except Exception:  # noqa: BLE001 -- the carried loop reports what went wrong
            return None
        kinds = [
            "out" if c is None and rs.is_stack(o) else k
            for c, o, k in zip(carry, out, kinds, strict=True)
        ]
    if "bad" in kinds or "in" not in kinds and "out" not in kinds:
        return None
    if any(k is None and rs.has_stacks(c) for c, k in zip(carry, kinds, strict=True)):
        return None
    return kinds


def _holds_stack(tree) -> bool:
    return rs.has_stacks(tree) or any(
        rs.is_stack(x) for x in jax.tree_util.tree_leaves(tree, is_leaf=rs.is_stack)
    )


def _row(heads, k, reverse, trips):
    if heads is None:
        return None
    k = trips - 1 - k if reverse else k
    return jax.tree_util.tree_map(lambda x: x[k], heads)


def _first(rows):
    return jax.tree_util.tree_map(lambda x: x[0], rows)


def _source_rows(s, trips, reverse):
    """The items (and memo arrays) a source gives, in the order of the scan's
    rows: iteration q pops slot `known - 1 - q`."""
    lo, hi = s.known - trips, s.known
    rows = jax.tree_util.tree_map(lambda b: b[lo:hi], s.buf)
    made = None if s.memo is None else [m[lo:hi] for m in s.memo.made]
    if not reverse:  # the first row, iteration 0, pops the top
        rows, made = jax.tree_util.tree_map(lambda x: x[::-1], (rows, made))
    return rows, made


def _source_left(s, trips, zeroed):
    """The source after the scan: `trips` fewer items; a gradient stack
    (`zeroed`: popped by `stack_pop_grad`) has their slots zeroed."""
    lo = s.known - trips
    buf = s.buf
    if zeroed:
        buf = jax.tree_util.tree_map(
            lambda b: b.at[lo : s.known].set(jnp.zeros_like(b[lo : s.known])), buf
        )
    return rs.BufStack(buf, jnp.asarray(lo, jnp.int32), s.memo, known=lo)


@_naming_carries(body_at=3, skip=1)
def for_range(
    start,
    stop,
    step,
    body_fn,
    n_carry,
    *values,
    where: str = "",
    grads=False,
    records=None,
    host=False,
    until=None,
):
    """`for i in range(start, stop, step): carry = body(i, *carry, *inv)`
    (`records`: see `while_loop`; a long one keeps `kt.set_for_checkpoints`;
    `host`: the body runs host code, so the iterations stay Python's;
    `until`: the carry that is the loop's break flag, see `_stopped`).

    Over a static range the index is a Python int in every iteration that
    runs in Python: all of them where the carry is concrete, and under a
    trace while the break flag is known and wherever the loop unrolls
    (`control.policy`: also where the body needs the int, `x[:i]`,
    `range(i)`). Only a loop run under `lax` has a traced index."""
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    if not (is_tracer(start) or is_tracer(stop) or is_tracer(step)):
        indices = range(int(start), int(stop), int(step))
        if until is not None:  # Python's iterations while the break flag is known
            for k, i in enumerate(indices):
                if is_tracer(carry[until]) or carry[until]:
                    indices = indices[k:]
                    break
                carry = _iteration(body_fn, (i, *carry, *inv), records)
            else:
                return carry
        run = lambda i, cr: tuple(body_fn(i, *cr, *inv))  # noqa: E731
        plain = _Recording(run, carry, records)
        lax_for = lambda: _lax_for(plain, indices, carry, inv, where, grads, until)  # noqa: E731
        out = None if host or _stopped(carry, until) else _try_lax(lax_for)
        if out is not None:
            return out
        for i in indices:
            if _stopped(carry, until):
                break
            carry = _iteration(body_fn, (i, *carry, *inv), records)
        return carry
    refusal = ("a `for` whose body", "range", where)
    if host:
        raise _traced_host(*refusal)
    args = (start, stop, step, body_fn, carry, inv, where, grads, records, until)
    return _try_lax(lambda: _for_traced_range(*args), refusal)


def _stopped(carry, until) -> bool:
    """Whether a loop with a break flag (carry `until`) is known to have
    broken: the flag is concrete and set. (A traced flag: the iterations
    after the break run and do nothing, the body being guarded by it.)"""
    return _broke(carry, until, False, "")


def _lax_for(plain, indices, carry, inv, where, grads, until=None):
    """A `for` over static `indices` under `lax`, or None where it unrolls.
    One with a break flag (`until`) is a `lax.while_loop` that stops at the
    break, as Python does (a `lax.scan` would run every iteration)."""
    if (
        not any_traced((carry, inv))
        or _walks_pystack(grads, carry)
        or policy.unrolls(plain.step, indices, plain.carry, breaks=until is not None)
    ):
        return None
    if until is not None:
        body_fn = lambda i, *cr: plain.run_full(i, cr)  # noqa: E731
        start, stop, step = indices.start, indices.stop, indices.step
        args = (body_fn, carry, (), where, grads, plain.k, until, len(indices))
        return _for_traced_range(start, stop, step, *args)
    xs = jnp.asarray(indices)
    slots = bounds.for_checkpoints()
    if plain.checkpoints() and slots is not None and len(indices) > slots:
        running = lambda i, cr: i < len(indices)  # noqa: E731
        return plain.run(running, carry, where, grads, lambda i: xs[i], slots)
    out = _slot_scan(plain.run_full, carry, xs, len(indices), where, grads)
    if out is not None:
        return out
    if plain.emits():
        return plain.scan(xs, where, grads)
    return _scan(lambda i, cr: plain.run_full(i, cr), xs, carry, where, grads)


def _for_traced_range(
    start, stop, step, body_fn, carry, inv, where, grads, records, until=None, trips=None
):
    """A `for` over a range as a `lax.while_loop` over its index (traced), which
    stops at the break flag `until` where there is one; `trips`: the trip
    count where it is static (the slots a recording loop stores). A body that
    needs its index as a Python int is refused here (`_needs_int_index`)."""
    args = (start, stop, step, body_fn, carry, inv, where, grads, records, until, trips)
    try:
        return _index_loop(*args)
    except (TypeError, IndexError, KeyError, ValueError) as e:
        refusal = _needs_int_index(e, start, body_fn, carry, inv, records, where)
        if refusal is None:
            raise
        raise refusal from e


def _needs_int_index(error, start, body_fn, carry, inv, records, where):
    """The KTransformError for `error`, raised tracing a `for` whose index is
    traced, where the body runs with the index a Python int instead (it needs
    one: `x[:i]`, `range(i)`, `jnp.zeros(i)`, `lst[i]`); else None. JAX
    refuses the same Python under `jax.jit`, with a traced range."""
    plain = _Recording(lambda i, cr: tuple(body_fn(i, *cr, *inv)), carry, records)
    i = 0 if is_tracer(start) else int(start)
    if not policy.needs_int_counter(plain.step, i, plain.carry):
        return None
    text = str(error).strip().splitlines()
    return KTransformError(
        "the body of this `for` needs its index as a Python int, and the loop runs under "
        "`lax`, where the index is traced: its range's bounds are traced (under a jit); make "
        "them static (Python ints, a static argument, an array's shape) or call without a jit "
        f"({type(error).__name__}: {text[0] if text else ''}){describe(where)}"
    )


def _index_loop(start, stop, step, body_fn, carry, inv, where, grads, records, until, trips):
    step_ = jnp.asarray(step)
    at = lambda k: start + k * step_  # noqa: E731 - the loop variable of iteration k
    plain = _Recording(lambda i, cr: tuple(body_fn(i, *cr, *inv)), carry, records)

    def inside(i, cr):
        more = jnp.where(step_ > 0, i < stop, i > stop)
        return more if until is None else more & ~condition(cr[until], "break", where)

    if records is not None and not bounds.can_retrace() and plain.checkpoints():
        running = lambda k, cr: inside(at(k), cr)  # noqa: E731
        return plain.run(running, carry, where, grads, at)

    def cond(state):
        return inside(state[0], state[1:])

    def body(state):
        i, cr = state[0], state[1:]
        return (i + step_, *like_carry(tuple(body_fn(i, *cr, *inv)), cr, grads))

    first = lambda cr: tuple(body_fn(jnp.asarray(start), *cr, *inv))  # noqa: E731
    spare = guarded.spare(carry, records)
    room = (trips if trips is not None else bounds.buffer_slots(where)) + spare
    carry = settle_carry(first, carry, where, room if spare else trips, grads)
    state = (jnp.asarray(start), *carry)
    pushed = records + 1 if spare else None
    out = lax.while_loop(cond, guarded.loop_body(cond, body, state, pushed), state)
    return rs.check_stacks(out[1:], where, spared=records if spare else None)


def _iteration(body_fn, args, records) -> tuple:
    """One Python iteration; one of a recording loop records its host calls
    (`runtime.host_log`: a derivative that runs it again replays them)."""
    if records is None:
        return tuple(body_fn(*args))
    with host_log.recording():
        return tuple(body_fn(*args))


class _Recording:
    """A recording loop (`records=k`: its carry k is the stack each iteration
    pushes on) seen as the loop it records: `step(head, carry)` and `carry`
    without that stack (the loop itself when `k` is None). Unrolling is
    decided on it, as for the loop it records; and when it holds no stacks
    itself (a first derivative), `run` records it with online checkpointing."""

    def __init__(self, run, carry, k):
        self.run_full, self.k = run, k
        self.carry = carry if k is None else (*carry[:k], *carry[k + 1 :])
        self.stack = None if k is None else carry[k]

    def full(self, cr, stack):
        return (*cr[: self.k], stack, *cr[self.k :])

    def step(self, head, cr):
        if self.k is None:
            return self.run_full(head, cr)
        out = self.run_full(head, self.full(cr, rs.PyStack()))
        return (*out[: self.k], *out[self.k + 1 :])

    def item(self, head, cr):
        """What the iteration from `cr` pushes."""
        return self.run_full(head, self.full(cr, rs.PyStack()))[self.k].top

    def checkpoints(self) -> bool:
        return self.k is not None and not rs.has_stacks(self.carry)

    def emits(self) -> bool:
        """Whether a scan can give what it records as its outputs (it starts
        the stack: nothing pushed before)."""
        return self.k is not None and isinstance(self.stack, rs.PyStack) and not self.stack.size

    def scan(self, xs, where, grads):
        """The loop as a `lax.scan` whose outputs are the items it pushes (XLA
        writes them in place; carried, the buffer ran the RNN of
        bench/static_loops 1.9x slower), made a stack after it; and, where
        an iteration pushes its bprop beside its item (K of a loop at first
        order), the arrays that bprop holds (`stack.Memos`), so the reverse
        loop applies it rather than running the body again."""
        first = jax.tree_util.tree_map(lambda x: x[0], xs)
        n = jax.tree_util.tree_leaves(xs)[0].shape[0]
        base = settle_carry(lambda cr: self.step(first, cr), self.carry, where, n, grads)

        forms = []

        def body(cr, x):
            out = self.run_full(x, self.full(cr, rs.PyStack()))
            new = (*out[: self.k], *out[self.k + 1 :])
            pushed = out[self.k]
            return like_carry(new, cr, grads), (pushed.top, rs.memo_arrays(pushed.memo, x, forms))

        final, (items, made) = invariants.scan(body, base, xs, n, False, _is_made)
        final = rs.check_stacks(final, where)
        memo = None
        if forms:  # arrays every iteration makes alike: read once
            form, made = forms[0].hoisted(made)
            memo = rs.Memos(made, form)
        return self.full(final, rs.BufStack(items, jnp.asarray(n, jnp.int32), memo, known=n))

    def run(self, running, carry, where, grads, head=lambda i: None, slots=None):
        base = settle_carry(lambda cr: self.step(head(0), cr), self.carry, where, None, grads)
        step = lambda i, cr: like_carry(self.step(head(i), cr), cr, grads)  # noqa: E731
        slots = slots or bounds.checkpoint_slots(where, _nbytes(base))
        n, final, saved = checkpoint.record(step, running, base, slots)
        item = lambda i, cr: self.item(head(i), cr)  # noqa: E731
        stack = rs.Checkpoints(saved, n, step, item, final, carry[self.k])
        return self.full(final, stack)


def _nbytes(tree) -> int:
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(jnp.size(x) * jnp.result_type(x).itemsize for x in leaves)


def _reverse_checkpoints(body_fn, carry, inv, k, where, grads):
    """The reverse loop of a recording loop that kept checkpoints: for
    i = n-1 .. 0, its body runs on a stack holding what iteration i pushed
    (`checkpoint.reverse` recomputes the carries between checkpoints).
    Returns the carry with the stack left below (Python iterations')."""
    ck = carry[k]
    state = (*carry[:k], *carry[k + 1 :])

    def run(i, cr_i, st):
        one = rs.stack_push(rs.PyStack(), ck.item(i, cr_i))
        out = tuple(body_fn(*st[:k], one, *st[k:], *inv))
        return (*out[:k], *out[k + 1 :])

    state = settle_carry(lambda st: run(0, ck.final, st), state, where, None, grads)

    def grad_step(i, cr_i, st):
        return like_carry(run(i, cr_i, st), st, grads), ()

    state, _, recomputed = checkpoint.reverse(
        ck.step, grad_step, ck.n, ck.saved, state, (), lambda a, b: a
    )
    bounds.report_recompute(where, ck.n, recomputed)
    return (*state[:k], ck.below, *state[k:])


@_naming_carries(body_at=1, skip=1)
def for_each(
    seq,
    body_fn,
    n_carry,
    *values,
    where: str = "",
    grads=False,
    records=None,
    host=False,
    until=None,
):
    """`for item in seq: carry = body(item, *carry, *inv)` over tuples, lists,
    arrays, iterators (`records`: see `while_loop`; unrolled as the loop it
    records; `host`: the body runs host code, so the iterations stay Python's;
    `until`: the carry holding the loop's break flag (see `for_range`): once
    set no item is taken, so an iterator is advanced as far as Python
    advances it)."""
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    if rt_python.is_iterator(seq):
        while not _broke(carry, until, True, where):
            more, item = rt_python.next_item(seq)  # a host call: replayed when run again
            if not more:
                break
            carry = _iteration(body_fn, (item, *carry, *inv), records)
        return carry
    if isinstance(seq, (tuple, list, range, dict)) or not hasattr(seq, "shape"):
        for item in seq:
            if _broke(carry, until, False, where):
                break
            carry = _iteration(body_fn, (item, *carry, *inv), records)
        return carry
    if jnp.ndim(seq) == 0:
        raise KTransformError(f"cannot iterate over a 0-d array{describe(where)}")
    run = lambda item, cr: tuple(body_fn(item, *cr, *inv))  # noqa: E731
    plain = _Recording(run, carry, records)

    def under_lax():
        if not any_traced((seq, carry, inv)) or policy.unrolls(plain.step, seq, plain.carry):
            return None
        out = _slot_scan(run, carry, seq, seq.shape[0], where, grads)
        if out is not None:
            return out
        if plain.emits():
            return plain.scan(seq, where, grads)
        return _scan(run, seq, carry, where, grads)

    out = None if host or _stopped(carry, until) else _try_lax(under_lax)
    if out is not None:
        return out
    for k in range(seq.shape[0]):
        if _stopped(carry, until):
            break
        carry = _iteration(body_fn, (seq[k], *carry, *inv), records)
    return carry


def _broke(carry, brk, iterator: bool, where: str) -> bool:
    """Whether a `for` loop's break flag (carry `brk`) is set: the loop then
    takes no more items. A traced flag (a `break` under a traced test, a jit)
    lets a sequence's remaining iterations run guarded; an iterator's next
    item is not taken without knowing it, as under `jax.jit`."""
    flag = None if brk is None else carry[brk]
    if flag is None or flag is UNDEFINED:
        return False
    if is_tracer(flag):
        if iterator:
            raise KTransformError(
                "a `break` whose test is traced (under a jit), in a `for` over an iterator: "
                "Python takes the next item only if the loop did not break, which is not "
                f"known while tracing (iterate a list, or test a Python value){describe(where)}"
            )
        return False
    return bool(flag)


def each_item(x, seq, k):
    """Item `k` of `x`, a tangent or gradient shaped like `seq`, as `for item
    in seq` meets it: None when `seq` is a dict (its items are its keys, which
    have none) or an iterator (a host object: its items have none, as
    `each_item_grad` gives it none), as when `x` is None (zero)."""
    if x is None or isinstance(seq, dict) or rt_python.is_iterator(seq):
        return None
    return x[k]


def each_item_grad(like, seq, k, dout):
    """The transpose of `each_item(., seq, k)` at `dout`: zeros like `like`
    with `dout` at item `k`; only zeros when `seq` is a dict (a key has no
    gradient, and an integer `k` is no key of it); none for an iterator (a
    host object)."""
    if rt_python.is_iterator(seq):
        return None
    if isinstance(seq, dict) or like is None:
        return zeros_like_value(like)
    return getitem_grad(like, k, dout)


def _scan(step, xs, carry, where, grads=False):
    first = jax.tree_util.tree_map(lambda x: x[0], xs)
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    carry = settle_carry(lambda cr: tuple(step(first, cr)), carry, where, n, grads)

    def body(cr, x):
        return like_carry(tuple(step(x, cr)), cr, grads), None

    out, _ = lax.scan(body, carry, xs)
    return out


def settle_carry(body, carry, where, trips=None, grads=False):
    """The carry a lax loop starts from: UNDEFINED slots get a shape, stacks
    become buffers with room for `trips` iterations (a `while`: its bound),
    gradient carries (`grads`) take the structure the body gives; then check
    the body keeps the carry's type."""
    if assigned_in(body, shape_of(carry)):
        raise KTransformError(
            "ops.Assign inside a traced loop is not supported (the state would have to be "
            f"carried by the loop); assign after the loop{describe(where)}"
        )
    carry = tuple(jnp.asarray(c) if isinstance(c, (int, float, bool)) else c for c in carry)
    body_shape = _shape_probe(body)
    if any(c is UNDEFINED for c in carry):
        carry = fill_undefined(carry, body_shape(shape_of(carry)))
    if any(c is None for c in carry):  # a zero tangent or gradient of a stack: an empty one
        out = body_shape(carry)
        if not grads:
            _refuse_none_becoming_values(carry, out, where)
        carry = tuple(
            rs.PyStack() if c is None and rs.is_stack(o) else c
            for c, o in zip(carry, out, strict=True)
        )
    room = trips if trips is not None else bounds.buffer_slots(where)
    while any(isinstance(c, rs.PyStack) for c in carry):
        # A stack whose items hold stacks (a loop of a loop's derivative) waits
        # until those are buffers: its buffer's layout depends on theirs.
        out = body_shape(carry)
        ready = [
            isinstance(c, rs.PyStack) and not _holds_pystack(o.top)
            for c, o in zip(carry, out, strict=True)
        ]
        if not any(ready):
            raise KTransformError(f"internal: cannot lay out the stacks of a loop{describe(where)}")
        for c, o, r in zip(carry, out, ready, strict=True):
            for item in c.items() if r and not grads else ():  # the carries pushed in Python
                _refuse_none_becoming_values(item, o.top, where)
        carry = tuple(
            rs.promote(c, o.top, room) if r else c
            for c, o, r in zip(carry, out, ready, strict=True)
        )
    for _ in range(4 if grads else 0):  # entries appear as gradients reach them
        shape = _unify(shape_of(carry), body_shape(carry), where)
        if jax.tree_util.tree_structure(shape) == jax.tree_util.tree_structure(carry):
            break
        carry = fit(carry, shape)
    out = body_shape(carry)
    if grads:  # an entry the body's gradient lacks is a zero: `like_carry` fills it
        out = tuple(_with_entries_of(o, a) for o, a in zip(out, shape_of(carry), strict=True))
    for k, (a, b) in enumerate(zip(shape_of(carry), out, strict=True)):
        a_leaves = jax.tree_util.tree_leaves(a)
        b_leaves = jax.tree_util.tree_leaves(b)
        same = len(a_leaves) == len(b_leaves) and all(
            x.shape == y.shape for x, y in zip(a_leaves, b_leaves, strict=True)
        )
        if not same and isinstance(a, list):
            raise KTransformError(
                f"loop variable {_carry_name(k)} is a list whose length changes inside a traced "
                f"loop ({len(a)} items become {len(b) if isinstance(b, list) else b}): a lax loop "
                "cannot carry it. Give the loop a static trip count (`for i in range(n)` with "
                f"a Python int `n`) or preallocate an array and assign items{describe(where)}"
            )
        if not same:
            raise KTransformError(
                f"loop variable {_carry_name(k)} changes shape inside a traced loop: {a} "
                f"becomes {b}{describe(where)}"
            )
    return carry


def _refuse_none_becoming_values(carry, out, where: str) -> None:
    """A variable None when a traced loop starts that an iteration gives an
    array (`best = None` then `best = x` in a loop whose `break` is traced):
    a lax loop carries values of one type, so it is refused, naming it."""
    if not (isinstance(carry, tuple) and isinstance(out, tuple) and len(carry) == len(out)):
        return
    for k, (c, o) in enumerate(zip(carry, out, strict=True)):
        if c is None and hasattr(o, "shape") and not rs.is_stack(o):
            raise KTransformError(
                f"loop variable {_carry_name(k)} is None when the loop starts and an array "
                f"({brief(o)}) after an iteration, inside a traced loop (its test or a "
                "`break` depends on traced values): a lax loop carries values of one type. "
                f"Give it a value of that type before the loop (e.g. zeros){describe(where)}"
            )


def _with_entries_of(out, like):
    """The shape `out` (of a gradient) has once `fit` to `like`: dict entries
    and None it lacks take `like`'s."""
    if out is None:
        return like
    if isinstance(out, dict) and isinstance(like, dict):
        kept = {k: _with_entries_of(out[k], v) if k in out else v for k, v in like.items()}
        return {**kept, **{k: v for k, v in out.items() if k not in like}}
    if type(out) in (tuple, list) and type(out) is type(like) and len(out) == len(like):
        return type(out)(_with_entries_of(o, v) for o, v in zip(out, like, strict=True))
    return out


def _shape_probe(body):
    """`jax.eval_shape(body, carry)`, traced again only for a carry of
    another structure or shape than the last one's (a body is traced once
    for all its probes where the carry settles at once)."""
    last = []

    def probe(carry):
        key = jax.tree_util.tree_flatten(shape_of(carry))
        if not last or last[0] != key:
            last[:] = [key, jax.eval_shape(body, carry)]
        return last[1]

    return probe


def _walks_pystack(grads: bool, carry) -> bool:
    """A reverse loop (`grads`) popping a Python stack: its forward ran in
    Python, and so does it (its items may be Python ints it indexes with)."""
    return grads and any(isinstance(c, rs.PyStack) and c.size for c in carry)


def _holds_pystack(tree) -> bool:
    return any(
        isinstance(x, rs.PyStack)
        for x in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, rs.PyStack))
    )


def like_carry(new, old, grads):
    """The body's result in the carry's dtypes (and structure, for gradients)."""
    return fit(new, shape_of(old)) if grads else _cast_like(new, old)


def _cast_like(new, old):
    return jax.tree_util.tree_map(
        lambda n, o: jnp.asarray(n, jnp.result_type(o)) if hasattr(o, "dtype") else n, new, old
    )
