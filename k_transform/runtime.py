"""Helpers that generated code calls (imported there as `_rt`).

Control flow decides at run time: a concrete condition runs a Python `if` or
`while`; a traced one (under `jax.jit`) runs `lax.cond` / `lax.while_loop` /
`lax.scan`. Loops never recurse in Python, so trip counts are unbounded.

`UNDEFINED` stands for a variable not yet assigned on some path (first
assigned inside a loop or one branch). Eagerly it raises when used; under a
traced cond or loop its slot takes zeros shaped like the value the other path
gives, which Python semantics guarantee is never read.
"""

from __future__ import annotations

import builtins
import linecache

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from k_transform import runtime_stack as rs
from k_transform.errors import KTransformError
from k_transform.runtime_stack import (  # noqa: F401 (generated code calls _rt.stack_*)
    stack_new,
    stack_nonempty,
    stack_pop,
    stack_push,
)

# A traced `for` over a static range (or array rows) with at most this many
# iterations is unrolled; longer ones become `lax.scan`.
UNROLL_LIMIT = 8


class _Undefined:
    """The value of a variable that has not been assigned yet."""

    def __repr__(self):
        return "UNDEFINED"

    def __bool__(self):
        raise KTransformError("a variable was used before it was assigned")

    def _fail(self, *args, **kwargs):
        raise KTransformError("a variable was used before it was assigned")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __getitem__ = __call__ = __neg__ = _fail
    __array__ = __jax_array__ = __lt__ = __gt__ = __le__ = __ge__ = _fail


UNDEFINED = _Undefined()
jax.tree_util.register_pytree_node(_Undefined, lambda u: ((), None), lambda aux, kids: UNDEFINED)


def is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def any_traced(tree) -> bool:
    return any(is_tracer(leaf) for leaf in jax.tree_util.tree_leaves(tree))


def not_(x):
    if is_tracer(x):
        return jnp.logical_not(x)
    return not x


def range_cond(i, stop, step):
    """`i` is still inside `range(..., stop, step)`."""
    if is_tracer(i) or is_tracer(stop) or is_tracer(step):
        return jnp.where(step > 0, i < stop, i > stop)
    return i < stop if step > 0 else i > stop


class Formatted:
    """An f-string with traced values, printed later by `jax.debug.print`."""

    def __init__(self, template, values):
        self.template, self.values = template, values


def fstring(template: str, *values):
    if any_traced(values):
        return Formatted(template, values)
    return template.format(*values)


def setitem(x, index, value):
    """`x[index] = value` without mutation: arrays via `.at[].set`, else a copy."""
    if isinstance(x, tuple):
        raise TypeError("'tuple' object does not support item assignment")
    if isinstance(x, list) and is_tracer(index):
        raise KTransformError(
            "a list item assignment `lst[i] = v` with a traced index `i` (a list cannot be "
            "indexed by a traced value: use an array, or a static index)"
        )
    if isinstance(x, (list, dict)):
        new = x.copy()
        new[index] = value
        return new
    if isinstance(x, np.ndarray) and not is_tracer(value):
        new = x.copy()
        new[index] = value
        return new
    return jnp.asarray(x).at[index].set(value)


def _need_list(x, method: str):
    if not isinstance(x, list):
        raise KTransformError(
            f"`.{method}(...)` on a {type(x).__name__} is not supported by k_transform "
            "(only on lists)"
        )


def list_append(lst, value):
    """`lst.append(value)` without mutation: the new list."""
    _need_list(lst, "append")
    return [*lst, value]


def list_extend(lst, seq):
    """`lst.extend(seq)` without mutation (a list or tuple `seq`)."""
    _need_list(lst, "extend")
    if not isinstance(seq, (list, tuple)):
        raise KTransformError(
            f"list.extend of a {type(seq).__name__} is not supported (extend with a list or tuple)"
        )
    return [*lst, *seq]


def list_insert(lst, index, value):
    """`lst.insert(index, value)` without mutation."""
    _need_list(lst, "insert")
    new = list(lst)
    new.insert(index, value)
    return new


def list_delete(lst, index):
    """The list `lst.pop(index)` leaves, without mutation."""
    _need_list(lst, "pop")
    new = list(lst)
    new.pop(index)
    return new


def insert_position(n: int, index: int) -> int:
    """Where `insert(index, v)` puts `v` in a list of length `n`."""
    return min(max(index + n, 0), n) if index < 0 else min(index, n)


def pop_position(n: int, index: int) -> int:
    """The position `pop(index)` removes from a list of length `n`."""
    return index + n if index < 0 else index


def copy_value(x):
    """`x.copy()`: a list, dict or numpy array copied; jax arrays are immutable."""
    if isinstance(x, (list, dict, np.ndarray)):
        return x.copy()
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    raise TypeError(f"{type(x).__name__!r} object has no attribute 'copy'")


def to_list(x):
    """`list(x)`: a new list of the items (array rows) of `x`."""
    return list(x)


def to_tuple(x):
    """`tuple(x)`: a tuple of the items (array rows) of `x`."""
    return tuple(x)


def print_(*args, **kwargs):
    if not any_traced(args) and not any(isinstance(a, Formatted) for a in args):
        builtins.print(*args, **kwargs)
        return None
    parts, values = [], []
    for a in args:
        if isinstance(a, Formatted):
            parts.append(a.template)
            values.extend(a.values)
        elif isinstance(a, str):
            parts.append(a.replace("{", "{{").replace("}", "}}"))
        else:
            parts.append("{}")
            values.append(a)
    jax.debug.print(kwargs.get("sep", " ").join(parts), *values)
    return None


def assert_(cond, msg):
    if is_tracer(cond):
        return None  # not checkable while tracing; harmless under jax.jit
    if not bool(np.all(cond)):
        raise AssertionError(msg) if msg is not None else AssertionError()
    return None


# -- filling UNDEFINED slots ---------------------------------------------
def _zeros_like_shape(s):
    return jnp.zeros(s.shape, s.dtype)


def _fill_undefined(values, shapes):
    """Replace UNDEFINED entries of `values` by zeros of the matching shape."""
    out = []
    for v, s in zip(values, shapes, strict=True):
        if v is UNDEFINED and s is not UNDEFINED:
            v = jax.tree_util.tree_map(_zeros_like_shape, s)
        out.append(v)
    return tuple(out)


def _is_undef(x):
    return x is UNDEFINED


def _shape_of(tree):
    return jax.tree_util.tree_map(
        lambda v: v if v is UNDEFINED else jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)),
        tree,
        is_leaf=_is_undef,
    )


def _describe(where: str) -> str:
    """`where` ("file:line") as the tail of an error message, with the line shown."""
    if not where:
        return ""
    path, _, line = where.rpartition(":")
    text = linecache.getline(path, int(line)).strip() if line.isdigit() else ""
    return f'\n  File "{path}", line {line}' + (f"\n    {text}" if text else "")


# -- if ----------------------------------------------------------------------
def switch(cond, true_fn, false_fn, *args, where: str = ""):
    """`true_fn(*args) if cond else false_fn(*args)`, with `lax.cond` when traced."""
    if not is_tracer(cond):
        return true_fn(*args) if cond else false_fn(*args)
    if jnp.shape(cond) != ():
        raise KTransformError(f"the condition of an `if` must be a scalar{_describe(where)}")
    try:
        return _traced_switch(cond, true_fn, false_fn, args, where)
    except RecursionError:
        raise KTransformError(
            f"recursion in {_enclosing_def(where)!r} does not end under jax.jit: both branches "
            "of an `if` on a traced value are traced, so a base case chosen by a traced "
            "condition never stops the recursion; recurse on a Python int (static), write a "
            f"loop, or run in eager mode{_describe(where)}"
        ) from None


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
    ids = _assigned_in(lambda: (true_fn(*args), false_fn(*args)))
    if ids:  # Assign in a traced branch: thread the Parameters through lax.cond
        t, f = _stateful_branch(true_fn, ids), _stateful_branch(false_fn, ids)
        out, values = switch(cond, t, f, *args, where=where)
        _write_back(ids, values)
        return out
    if _has_functions(lambda: true_fn(*args)):  # K of an `if`: (out, bprop)
        return cond_unified(cond, lambda: true_fn(*args), lambda: false_fn(*args), where)
    t_out = jax.eval_shape(lambda: true_fn(*args))
    f_out = jax.eval_shape(lambda: false_fn(*args))
    single = not isinstance(t_out, tuple)
    if single:
        t_out, f_out = (t_out,), (f_out,)
    _check_branch_match(t_out, f_out, where)

    def branch(fn, other):
        def run():
            value = fn(*args)
            return _fill_undefined((value,) if single else tuple(value), other)

        return run

    out = lax.cond(jnp.asarray(cond, bool), branch(true_fn, f_out), branch(false_fn, t_out))
    return out[0] if single else out


def _has_functions(thunk) -> bool:
    found = []
    jax.eval_shape(lambda: _strip(thunk(), found))
    return bool(found)


def _strip(value, found: list, path=()):
    """`value` with functions replaced by None; their paths appended to `found`."""
    if value is UNDEFINED:
        return None
    if callable(value) and not hasattr(value, "shape"):
        found.append(path)
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(_strip(v, found, (*path, k)) for k, v in enumerate(value))
    if isinstance(value, dict):
        return {k: _strip(v, found, (*path, k)) for k, v in value.items()}
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
    return type(value)(items)


def cond_unified(cond, true_fn, false_fn, where: str = ""):
    """`lax.cond` of two thunks, for the K of an `if` under trace.

    Structures are unified (None, UNDEFINED and missing dict entries become
    zeros), and functions in the results (the bprop of `(out, bprop)`) come
    back as closures that, when called, run `cond_unified` again over the
    same function of both branches: the taken branch is recomputed, then its
    bprop applied. Probing uses `jax.eval_shape`, so it runs no effect.
    """
    t_paths, f_paths = [], []
    t_shape = jax.eval_shape(lambda: _strip(true_fn(), t_paths))
    f_shape = jax.eval_shape(lambda: _strip(false_fn(), f_paths))
    if t_paths != f_paths:
        raise KTransformError(
            f"the branches of a traced `if` return functions in different places{_describe(where)}"
        )
    shape = _unify(t_shape, f_shape, where)
    result = lax.cond(
        jnp.asarray(cond, bool),
        lambda: fit(_strip(true_fn(), []), shape),
        lambda: fit(_strip(false_fn(), []), shape),
    )
    for path in t_paths:
        result = _set(result, path, _dispatch(cond, true_fn, false_fn, path, where))
    return result


def _dispatch(cond, true_fn, false_fn, path, where):
    def closure(*call_args):
        return cond_unified(
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
        return rs.BufStack(_unify(a.buf, b.buf, where), _unify(a.n, b.n, where))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return type(a)(_unify(x, y, where) for x, y in zip(a, b, strict=True))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        raise KTransformError(
            f"the branches of a traced `if` give a {type(a).__name__} of length {len(a)} vs "
            f"{len(b)} (a list grown in one branch only): under jit both branches must give "
            f"the same structure{_describe(where)}"
        )
    if getattr(a, "shape", None) != getattr(b, "shape", None) or type(a) is not type(b):
        raise KTransformError(
            "the branches of a traced `if` give values of different structure or shape: "
            f"{_brief(a)} vs {_brief(b)}{_describe(where)}"
        )
    return a


def _brief(shape) -> str:
    if hasattr(shape, "shape"):
        return f"{tuple(shape.shape)} {shape.dtype}"
    return type(shape).__name__


def fit(value, shape):
    """`value` padded with zeros to the structure `shape`."""
    if shape is None:
        return None
    if shape is UNDEFINED:  # a variable no path assigns (a `return` never taken)
        return UNDEFINED
    if isinstance(shape, rs.BufStack):
        if not isinstance(value, rs.BufStack):
            value = rs.BufStack(None, None)
        return rs.BufStack(fit(value.buf, shape.buf), fit(value.n, shape.n))
    if isinstance(shape, rs.PyStack):
        if not shape.size:
            return shape
        value = value if isinstance(value, rs.PyStack) and value.size else rs.PyStack()
        return rs.PyStack(fit(value.top, shape.top), fit(value.rest, shape.rest), shape.size)
    if isinstance(shape, dict):
        value = value if isinstance(value, dict) else {}
        return {k: fit(value.get(k), s) for k, s in shape.items()}
    if isinstance(shape, (tuple, list)):
        value = value if value is not None else (None,) * len(shape)
        return type(shape)(fit(v, s) for v, s in zip(value, shape, strict=True))
    if value is None:
        return jnp.zeros(shape.shape, shape.dtype)
    return jnp.asarray(value, shape.dtype)


def _check_branch_match(t_out, f_out, where):
    if not isinstance(f_out, tuple) or len(t_out) != len(f_out):
        raise KTransformError(
            f"the branches of a traced `if` give different numbers of values{_describe(where)}"
        )
    for a, b in zip(t_out, f_out, strict=True):
        if a is UNDEFINED or b is UNDEFINED:
            continue
        a_leaves, a_tree = jax.tree_util.tree_flatten(a)
        b_leaves, b_tree = jax.tree_util.tree_flatten(b)
        if a_tree != b_tree:
            raise KTransformError(
                "the branches of a traced `if` give values of different structure: "
                f"{a_tree} vs {b_tree}{_describe(where)}"
            )
        for x, y in zip(a_leaves, b_leaves, strict=True):
            if x.shape != y.shape or x.dtype != y.dtype:
                raise KTransformError(
                    "the branches of a traced `if` give values of different shape or dtype: "
                    f"{x.shape} {x.dtype} vs {y.shape} {y.dtype}{_describe(where)}"
                )


# -- loops --------------------------------------------------------------------
def while_loop(cond_fn, body_fn, n_carry, *values, where: str = "", grads: bool = False):
    """`while cond(*carry, *inv): carry = body(*carry, *inv)`; returns the carry.

    `grads`: the carries are gradients (a loop of a derivative): None and
    missing env entries are zeros, and take the structure the body gives.
    """
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    n = 0
    while True:
        c = cond_fn(*carry, *inv)
        if is_tracer(c):
            break
        if not c:
            return carry
        n += 1
        rs.count_iteration(n, where)
        carry = tuple(body_fn(*carry, *inv))
    step = lambda cr: tuple(body_fn(*cr, *inv))  # noqa: E731
    carry = _settle_carry(step, carry, where, None, grads)
    out = lax.while_loop(
        lambda cr: jnp.asarray(cond_fn(*cr, *inv), bool),
        lambda cr: _like_carry(step(cr), cr, grads),
        carry,
    )
    rs.check_stacks(out, where)
    return out


def for_range(start, stop, step, body_fn, n_carry, *values, where: str = "", grads: bool = False):
    """`for i in range(start, stop, step): carry = body(i, *carry, *inv)`."""
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    if not (is_tracer(start) or is_tracer(stop) or is_tracer(step)):
        indices = range(int(start), int(stop), int(step))
        run = lambda i, cr: tuple(body_fn(i, *cr, *inv))  # noqa: E731
        small = len(indices) <= UNROLL_LIMIT or changes_structure(run, indices, carry)
        if not any_traced((carry, inv)) or small:
            for i in indices:
                carry = tuple(body_fn(i, *carry, *inv))
            return carry
        run = lambda i, cr: body_fn(i, *cr, *inv)  # noqa: E731
        return _scan(run, jnp.asarray(indices), carry, where, grads)
    step_ = jnp.asarray(step)

    def cond(state):
        i = state[0]
        return jnp.where(step_ > 0, i < stop, i > stop)

    def body(state):
        i, cr = state[0], state[1:]
        return (i + step_, *_like_carry(tuple(body_fn(i, *cr, *inv)), cr, grads))

    first = lambda cr: tuple(body_fn(jnp.asarray(start), *cr, *inv))  # noqa: E731
    carry = _settle_carry(first, carry, where, None, grads)
    out = lax.while_loop(cond, body, (jnp.asarray(start), *carry))
    rs.check_stacks(out[1:], where)
    return out[1:]


def for_each(seq, body_fn, n_carry, *values, where: str = "", grads: bool = False):
    """`for item in seq: carry = body(item, *carry, *inv)` over tuples, lists, arrays."""
    carry, inv = tuple(values[:n_carry]), values[n_carry:]
    if isinstance(seq, (tuple, list, range, dict)) or not hasattr(seq, "shape"):
        for item in seq:
            carry = tuple(body_fn(item, *carry, *inv))
        return carry
    if jnp.ndim(seq) == 0:
        raise KTransformError(f"cannot iterate over a 0-d array{_describe(where)}")
    run = lambda item, cr: tuple(body_fn(item, *cr, *inv))  # noqa: E731
    small = seq.shape[0] <= UNROLL_LIMIT or changes_structure(run, seq, carry)
    if not any_traced((seq, carry, inv)) or small:
        for k in range(seq.shape[0]):
            carry = tuple(body_fn(seq[k], *carry, *inv))
        return carry
    return _scan(lambda item, cr: body_fn(item, *cr, *inv), seq, carry, where, grads)


def changes_structure(step, xs, carry) -> bool:
    """Whether `step(xs[0], carry)` gives a carry of another structure: a list
    the body appends to. Such a loop cannot be a lax loop; its callers, whose
    trip count is static, unroll it instead."""
    lists = jax.tree_util.tree_leaves(carry, is_leaf=lambda v: isinstance(v, list))
    if not any(isinstance(v, list) for v in lists) or len(xs) == 0:
        return False
    first = xs[0] if not isinstance(xs, range) else xs.start
    out = jax.eval_shape(lambda cr: step(first, cr), _shape_of(carry))
    return jax.tree_util.tree_structure(out) != jax.tree_util.tree_structure(_shape_of(carry))


def _scan(step, xs, carry, where, grads=False):
    first = jax.tree_util.tree_map(lambda x: x[0], xs)
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    carry = _settle_carry(lambda cr: tuple(step(first, cr)), carry, where, n, grads)

    def body(cr, x):
        return _like_carry(tuple(step(x, cr)), cr, grads), None

    out, _ = lax.scan(body, carry, xs)
    return out


def _settle_carry(body, carry, where, trips=None, grads=False):
    """The carry a lax loop starts from: UNDEFINED slots get a shape, stacks
    become buffers with room for `trips` iterations (a `while`: its bound),
    gradient carries (`grads`) take the structure the body gives; then check
    the body keeps the carry's type."""
    if _assigned_in(body, _shape_of(carry)):
        raise KTransformError(
            "ops.Assign inside a traced loop is not supported (the state would have to be "
            f"carried by the loop); assign after the loop{_describe(where)}"
        )
    carry = tuple(jnp.asarray(c) if isinstance(c, (int, float, bool)) else c for c in carry)
    if any(c is UNDEFINED for c in carry):
        carry = _fill_undefined(carry, jax.eval_shape(body, _shape_of(carry)))
    room = trips if trips is not None else rs.loop_bound(where)
    while any(isinstance(c, rs.PyStack) for c in carry):
        # A stack whose items hold stacks (a loop of a loop's derivative) waits
        # until those are buffers: its buffer's layout depends on theirs.
        out = jax.eval_shape(body, carry)
        ready = [
            isinstance(c, rs.PyStack) and not _holds_pystack(o.top)
            for c, o in zip(carry, out, strict=True)
        ]
        if not any(ready):
            raise KTransformError(
                f"internal: cannot lay out the stacks of a loop{_describe(where)}"
            )
        carry = tuple(
            rs.promote(c, o.top, room) if r else c
            for c, o, r in zip(carry, out, ready, strict=True)
        )
    for _ in range(4 if grads else 0):  # entries appear as gradients reach them
        shape = _unify(_shape_of(carry), jax.eval_shape(body, carry), where)
        if jax.tree_util.tree_structure(shape) == jax.tree_util.tree_structure(carry):
            break
        carry = fit(carry, shape)
    out = jax.eval_shape(body, carry)
    for k, (a, b) in enumerate(zip(_shape_of(carry), out, strict=True)):
        a_leaves = jax.tree_util.tree_leaves(a)
        b_leaves = jax.tree_util.tree_leaves(b)
        same = len(a_leaves) == len(b_leaves) and all(
            x.shape == y.shape for x, y in zip(a_leaves, b_leaves, strict=True)
        )
        if not same and isinstance(a, list):
            raise KTransformError(
                f"loop variable {k} is a list whose length changes inside a traced loop "
                f"({len(a)} items become {len(b) if isinstance(b, list) else b}): a lax loop "
                "cannot carry it. Give the loop a static trip count (`for i in range(n)` with "
                f"a Python int `n`) or preallocate an array and assign items{_describe(where)}"
            )
        if not same:
            raise KTransformError(
                f"loop variable {k} changes shape inside a traced loop: {a} becomes {b}"
                f"{_describe(where)}"
            )
    return carry


def _holds_pystack(tree) -> bool:
    return any(
        isinstance(x, rs.PyStack)
        for x in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, rs.PyStack))
    )


def _like_carry(new, old, grads):
    """The body's result in the carry's dtypes (and structure, for gradients)."""
    return fit(new, _shape_of(old)) if grads else _cast_like(new, old)


def _cast_like(new, old):
    return jax.tree_util.tree_map(
        lambda n, o: jnp.asarray(n, jnp.result_type(o)) if hasattr(o, "dtype") else n, new, old
    )


# -- gradients ----------------------------------------------------------------
# Gradient values mirror primal values: arrays for arrays, tuples for tuples,
# dicts ("envs", keyed by free-variable keys) for functions, None for values
# with no gradient (None, strings, objects). `add_grad` adds them.
def add_grad(a, b):
    if a is None or a is UNDEFINED:  # UNDEFINED: a slot no path fills (no gradient)
        return b
    if b is None or b is UNDEFINED:
        return a
    if rs.is_stack(a):
        return rs.add_stacks(a, b, add_grad)
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, value in b.items():
            out[key] = add_grad(out[key], value) if key in out else value
        return out
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a)(add_grad(x, y) for x, y in zip(a, b, strict=True))
    return a + b


def zeros_like_value(x):
    """The zero gradient of `x` (None where `x` has no gradient)."""
    if x is UNDEFINED:
        return None
    if rs.is_stack(x):
        return rs.zeros_like_stack(x)
    if isinstance(x, (tuple, list)):
        return type(x)(zeros_like_value(v) for v in x)
    if isinstance(x, dict):
        return {k: zeros_like_value(v) for k, v in x.items()}
    if isinstance(x, bool) or x is None or isinstance(x, (str, slice, type(Ellipsis))):
        return None
    if isinstance(x, (int, float)):
        return type(x)(0)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jnp.zeros(jnp.shape(x), jnp.result_type(x))
    if callable(x):
        return {}
    return None


def ones_like_value(x):
    """The default output sensitivity: ones shaped like `x`."""
    if isinstance(x, (tuple, list)):
        return type(x)(ones_like_value(v) for v in x)
    if isinstance(x, dict):
        return {k: ones_like_value(v) for k, v in x.items()}
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return type(x)(1)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jnp.ones(jnp.shape(x), jnp.result_type(x))
    return None


def env_get(env, key, like):
    """The gradient stored under `key` in `env`, or zeros like `like`."""
    if isinstance(env, dict) and key in env:
        return env[key]
    return zeros_like_value(like)


def env_del(env, key):
    if isinstance(env, dict) and key in env:
        env = dict(env)
        del env[key]
    return env


def check_grad(grad, x, rule: str):
    """`grad` if it fits the input `x`, else an error naming the rule."""
    if grad is None or not hasattr(grad, "shape") or not hasattr(x, "shape"):
        return grad
    if jnp.shape(grad) != jnp.shape(x):
        raise KTransformError(
            f"{rule} returned a gradient of shape {jnp.shape(grad)} for an input of shape "
            f"{jnp.shape(x)}"
        )
    return grad


# -- parameters and state --------------------------------------------------
# A gradient function binds each Parameter to the (possibly traced) value it
# was called with; generated code reads parameters through `read_param` and
# writes them with `assign` (`ops.Assign`). Writes update the binding, so
# later reads in program order see them, and are collected in `updates`,
# which the caller writes back to the Parameters after the (jitted) call.
_param_scopes: list[param_scope] = []


class param_scope:
    def __init__(self, params=(), values=(), parent: param_scope | None = None, assigns=True):
        self.params = {id(p): p for p in params}
        self.bindings = {id(p): v for p, v in zip(params, values, strict=True)}
        self.assigns = assigns  # False: the program has no Assign (nothing to thread)
        if parent is not None:
            self.params, self.bindings = dict(parent.params), dict(parent.bindings)
            self.assigns = parent.assigns
        self.updates: dict[int, object] = {}

    def __enter__(self):
        _param_scopes.append(self)
        return self

    def __exit__(self, *exc):
        _param_scopes.pop()
        return False

    def new_values(self) -> dict[int, object]:
        return dict(self.updates)


def read_param(param):
    for scope in reversed(_param_scopes):
        if id(param) in scope.bindings:
            return scope.bindings[id(param)]
    return param.data


def assign(param, value):
    """`param = value`, in program order: bound in the current scope, or set."""
    if not _param_scopes:
        param.set_data(value)
        return value
    scope = _param_scopes[-1]
    old = scope.bindings.get(id(param), param.data)
    value = jnp.asarray(value, jnp.result_type(old))
    scope.params[id(param)] = param
    scope.bindings[id(param)] = value
    scope.updates[id(param)] = value
    return value


def _assigned_in(fn, *args) -> list[int]:
    """Parameters `fn(*args)` assigns (probed with eval_shape: nothing runs)."""
    if not _param_scopes or not _param_scopes[-1].assigns:
        return []
    found: list[int] = []

    def probe(*a):
        with param_scope(parent=_param_scopes[-1]) as fork:
            fn(*a)
            found.extend(k for k in fork.updates if k not in found)

    jax.eval_shape(probe, *args)
    return found


def _stateful_branch(fn, ids):
    """`fn` returning `(out, new values of the parameters ids)` as well."""

    def run(*args):
        with param_scope(parent=_param_scopes[-1]) as fork:
            out = fn(*args)
            return out, tuple(fork.bindings.get(k, fork.params[k].data) for k in ids)

    return run


def _write_back(ids, values):
    scope = _param_scopes[-1]
    for k, v in zip(ids, values, strict=True):
        scope.bindings[k] = v
        scope.updates[k] = v


# -- helpers of gradient rules ---------------------------------------------------
def sum_to(g, like, tail: bool = False):
    """Sum `g` over the axes broadcasting added to `like`'s shape.

    For the gradient of a concatenation `a + b` of tuples or lists, `g` is
    longer than `like`: its first items (or its last, with `tail`) are taken.
    """
    if isinstance(g, (tuple, list)) and isinstance(like, (tuple, list)):
        return type(like)(g[len(g) - len(like) :] if tail else g[: len(like)])
    if g is None or not hasattr(g, "shape") and not isinstance(g, (int, float)):
        return g  # a dict gradient, or already shaped
    shape = tuple(jnp.shape(like))
    g_shape = tuple(jnp.shape(g))
    if g_shape == shape:
        return g
    lead = len(g_shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + k for k, n in enumerate(shape) if n == 1 and g_shape[lead + k] != 1
    )
    out = jnp.sum(g, axis=axes, keepdims=True) if axes else g
    return jnp.reshape(out, shape)


def getitem_grad(x, index, dout):
    """The gradient of `x[index]` w.r.t. `x`: zeros like `x` with `dout` at `index`."""
    if isinstance(x, (tuple, list)):
        grads = [zeros_like_value(v) for v in x]
        grads[index] = dout
        return type(x)(grads)
    if isinstance(x, dict):
        grads = {k: zeros_like_value(v) for k, v in x.items()}
        grads[index] = dout
        return grads
    padded = _pad_into(x, index, dout)
    if padded is not None:
        return padded
    zeros = jnp.zeros(jnp.shape(x), jnp.result_type(x))
    return zeros.at[index].add(dout)


def _pad_into(x, index, dout):
    """`dout` placed at a basic index (ints, slices of any step, None) by
    `lax.pad`, which XLA fuses (a scatter into zeros is not, and a scatter of
    a reversed slice next to a cumsum once crashed XLA's simplifier); None for
    other indices."""
    value, items = _drop_new_axes(jnp.asarray(dout, jnp.result_type(x)), index)
    shape = jnp.shape(x)
    if items is None or len(items) > len(shape):
        return None
    config, expand, flip = [], [], []
    for axis, (item, n) in enumerate(zip(items, shape, strict=False)):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer, slice)):
            return None
        if isinstance(item, slice):
            pad, reverse = _slice_pad(item, n)
            config.append(pad)
            flip += [axis] * reverse
        else:
            i = int(item) % n if -n <= int(item) < n else None
            if i is None:
                return None
            config.append((i, n - i - 1, 0))
            expand.append(axis)
    config += [(0, 0, 0)] * (len(shape) - len(config))
    for axis in expand:
        value = jnp.expand_dims(value, axis)
    inner = tuple(
        (n - lo - hi + inner) // (inner + 1)
        for n, (lo, hi, inner) in zip(shape, config, strict=True)
    )
    value = jnp.broadcast_to(value, inner)
    if flip:
        value = jnp.flip(value, flip)
    return lax.pad(value, jnp.zeros((), value.dtype), config)


def _slice_pad(item: slice, n: int) -> tuple[tuple[int, int, int], bool]:
    """The `lax.pad` config `(low, high, interior)` that puts the items of
    `x[item]` back along an axis of length `n`, and whether they come reversed."""
    picked = range(*item.indices(n))
    if not picked:
        return (0, n, 0), False
    lo, hi = min(picked), max(picked)
    return (lo, n - hi - 1, abs(picked.step) - 1), picked.step < 0


def _drop_new_axes(value, index):
    """`(value, items)` with the axes a `None` in `index` added squeezed out of
    `value` and the Nones dropped; items None when `index` is not basic."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(item is None for item in items):
        return value, items
    drop, out = [], 0
    for item in items:
        if item is None or isinstance(item, slice):
            drop += [out] * (item is None)
            out += 1
        elif isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            return value, None
    if jnp.ndim(value) < out or any(jnp.shape(value)[a] != 1 for a in drop):
        return value, None
    return jnp.squeeze(value, tuple(drop)), tuple(i for i in items if i is not None)


def as_jax_inputs(args) -> tuple:
    """`args` with NumPy arrays and scalars made JAX arrays, as `jax.jit` makes
    them: eager runs then see the same types (`x.at[...]`) as jitted ones."""

    def convert(v):
        return jnp.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v

    return tuple(jax.tree_util.tree_map(convert, a) for a in args)


def input_grad(d, arg, integers: bool = False):
    """The gradient reported for an input. Integer arrays get a zero (JAX's
    float0 cotangent) or, with `integers` (MindSpore's GradOperation), their
    gradient cast to their own dtype; boolean arrays, static inputs (Python
    ints, bools, None, strings) and inputs nothing flowed to get a zero."""
    if hasattr(arg, "dtype") and not jnp.issubdtype(arg.dtype, jnp.inexact):
        if not integers or d is None or d is UNDEFINED or jnp.issubdtype(arg.dtype, jnp.bool_):
            return jnp.zeros_like(arg)
        return jnp.broadcast_to(jnp.asarray(d, arg.dtype), jnp.shape(arg))
    if d is None or arg is None or isinstance(arg, (bool, int, str)):
        return zeros_like_value(arg)
    return d


def tree_vdot(a, b):
    """The sum of elementwise products over matching leaves (None is zero)."""
    total = 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        for x, y in zip(a, b, strict=True):
            total = total + tree_vdot(x, y)
        return total
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() & b.keys():
            total = total + tree_vdot(a[key], b[key])
        return total
    if a is None or b is None:
        return total
    return jnp.sum(a * b)


def tree_scale(tree, s):
    """Every leaf of `tree` times the scalar `s`."""
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_scale(t, s) for t in tree)
    if isinstance(tree, dict):
        return {k: tree_scale(v, s) for k, v in tree.items()}
    return None if tree is None else tree * s


# -- iteration helpers (comprehensions, zip/enumerate/reversed, `for` over `.items()`) --
def indices(n) -> tuple:
    """`(0, 1, ..., n - 1)`: the positions a comprehension or `zip` visits."""
    if is_tracer(n):
        raise KTransformError("cannot iterate a traced number of times into a Python list")
    return tuple(range(int(n)))


def seq_len(seq) -> int:
    """`len(seq)`; the rows of an array (its static leading dimension)."""
    if isinstance(seq, dict):
        raise KTransformError(
            "iterating a dict here is not supported: iterate `d.keys()`, `d.values()` "
            "or `d.items()`"
        )
    if hasattr(seq, "shape") and jnp.ndim(seq) == 0:
        raise KTransformError("cannot iterate over a 0-d array")
    return len(seq)


def zip_length(*lengths) -> int:
    """How many items `zip` yields, given its iterables' lengths: the shortest."""
    return min(lengths)


def zip_strict_length(*lengths) -> int:
    """`zip(..., strict=True)`: the common length; unequal lengths raise, as Python's."""
    if len(set(lengths)) > 1:
        raise KTransformError(f"zip(strict=True) of iterables of lengths {list(lengths)}")
    return min(lengths)


def keys_within(d, names: tuple) -> bool:
    """Whether every key of `d` is one of `names` (`f(**d)` without `**kwargs`)."""
    return all(k in names for k in d)


def as_sequence(x, kind: str):
    """`list(x)` or `tuple(x)` (`kind`) of a tuple or list; None stays None."""
    if x is None:
        return None
    return list(x) if kind == "list" else tuple(x)


def dict_keys(d) -> tuple:
    """The keys of a dict, in order (`for k, v in d.items()`)."""
    if not isinstance(d, dict):
        raise KTransformError(f"`.keys()`/`.values()`/`.items()` of a {type(d).__name__}")
    return tuple(d.keys())


def to_int(x):
    """`int(x)`: Python's for a concrete value, truncation to int32 for a traced one."""
    if is_tracer(x):
        return jnp.trunc(x).astype(jnp.int32)
    return int(x)


def static_filter(cond, where: str = ""):
    """A comprehension's `if` filter: concrete, or the list's length would
    depend on data (which a traced program cannot give a Python list)."""
    if is_tracer(cond) or any_traced(cond):
        raise KTransformError(
            "a comprehension filter (`if` in a comprehension) on a traced value: the "
            f"result's length would depend on data{_describe(where)}; use jnp.where"
        )
    return cond
