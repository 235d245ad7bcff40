"""Index and stack pytrees of arrays along their leading axis.

The run time of the Python models of `lax.scan`, `lax.map` and `jax.vmap`
(`k_transform.frontend.lax_models`): a step reads item `i` of every leaf of
`xs` and writes its result into row `i` of every leaf of `ys`. Gradients
(`k_transform.ops.trees`) are these functions again, so they differentiate
to any order. None is a zero gradient wherever a tree may be one.

Jacobians of pytrees inside transformed code (`k_transform.lowering`) use
rows of trees as rows of a matrix: `ravel_rows`/`unravel_rows` and
`jacobian_matrix`/`jacobian_blocks` are pairs of inverse (and transposed)
reshapes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from k_transform.errors import KTransformError
from k_transform.runtime.values import dict_like, rebuild


def _leaves_of(tree):
    return jax.tree_util.tree_leaves(tree)


def scan_length(xs, length=None) -> int:
    """The trip count of `lax.scan(f, init, xs, length)`, as JAX checks it."""
    sizes = {jnp.shape(leaf)[0] if jnp.ndim(leaf) else None for leaf in _leaves_of(xs)}
    if None in sizes:
        raise KTransformError("lax.scan got a scalar in `xs`: every leaf needs a leading axis")
    if length is not None:
        sizes.add(int(length))
    if len(sizes) > 1:
        raise KTransformError(f"lax.scan got leading axes of different sizes: {sorted(sizes)}")
    if not sizes:
        raise KTransformError("lax.scan with no `xs` needs `length`")
    n = sizes.pop()
    if n == 0:
        raise KTransformError("lax.scan of length 0 is not supported by k_transform")
    return n


def carry_init(init):
    """`init` as the carry JAX gives the first step of `lax.scan`,
    `lax.fori_loop` and `lax.while_loop`: each Python float or complex a
    JAX array (weak-typed), so every step sees the same types (ints and
    bools stay Python's: a step may index or count with them). A constant
    still (made at trace time under a jit), as the number was."""
    with jax.ensure_compile_time_eval():
        return jax.tree_util.tree_map(
            lambda leaf: jnp.asarray(leaf) if type(leaf) in (float, complex) else leaf, init
        )


def _mapped_leaves(axis, arg) -> list:
    """The leaves of `arg` that `axis` (0, None, or a prefix tree of them) maps."""
    if axis is None:
        return []
    if isinstance(axis, (tuple, list, dict)):
        keys = list(axis.keys() if isinstance(axis, dict) else range(len(axis)))
        if not isinstance(arg, type(axis)) and not (
            isinstance(axis, (tuple, list)) and isinstance(arg, (tuple, list))
        ):
            raise KTransformError(
                f"jax.vmap in_axes {axis!r} is not a tree prefix of its argument, a "
                f"{type(arg).__name__}"
            )
        arg_keys = list(arg.keys() if isinstance(arg, dict) else range(len(arg)))
        if sorted(map(repr, keys)) != sorted(map(repr, arg_keys)):
            raise KTransformError(
                f"jax.vmap in_axes {axis!r} is not a tree prefix of its argument (keys or "
                f"length differ: {arg_keys!r})"
            )
        return [leaf for k in keys for leaf in _mapped_leaves(axis[k], arg[k])]
    return _leaves_of(arg)


def batch_size(axes, args) -> int:
    """The size of the mapped axis of `jax.vmap`'s arguments (`axes`: 0 or
    None each, or a prefix tree of them: `{"w": None, "b": 0}`)."""
    sizes = {
        jnp.shape(leaf)[0]
        for arg, axis in zip(args, axes, strict=True)
        for leaf in _mapped_leaves(axis, arg)
    }
    if len(sizes) != 1:
        raise KTransformError(
            f"jax.vmap got mapped axes of sizes {sorted(sizes)}: they must have one size"
        )
    n = sizes.pop()
    if n == 0:
        raise KTransformError("jax.vmap over an axis of size 0 is not supported by k_transform")
    return n


def _map2(f, a, b):
    """`f` over the leaves of `a` and the matching parts of `b`; None in `a`
    stays None, None in `b` reaches `f` as None (a zero gradient)."""
    if a is None:
        return None
    if b is not None and isinstance(a, (tuple, list)):
        items = [_map2(f, x, y) for x, y in zip(a, b, strict=True)]
        return type(a)(*items) if hasattr(a, "_fields") else type(a)(items)
    if b is not None and isinstance(a, dict):
        return {k: _map2(f, v, b.get(k)) for k, v in a.items()}
    if b is None and isinstance(a, (tuple, list, dict)):
        return jax.tree_util.tree_map(lambda x: f(x, None), a)
    return f(a, b)


def tree_index(xs, i):
    """Item `i` of every leaf of `xs`."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a)[i], xs)


def tree_put(like, i, y):
    """Zeros like `like` with `y` at item `i` of each leaf (the gradient of `tree_index`)."""
    if y is None:
        return None

    def put(a, v):
        zeros = jnp.zeros(jnp.shape(a), jnp.result_type(a))
        if v is None or not jnp.issubdtype(zeros.dtype, jnp.inexact):
            return zeros  # an integer leaf (indices) has no gradient to hold
        return zeros.at[i].set(v)

    return _map2(put, like, y)


def _at_axes(f, axes, x, y):
    """`f(axis, part of x, part of y)` over the parts of `x` (and of `y`, a
    gradient shaped like it, or None) that the leaves of `axes` reach
    (`axes`: a prefix tree of `x`, as a `jax.vmap` `in_axes` entry)."""
    if x is None:
        return None
    if not isinstance(axes, (tuple, list, dict)):
        return f(axes, x, y)
    keys = list(axes.keys() if isinstance(axes, dict) else range(len(axes)))
    read = lambda t, k: t.get(k) if isinstance(t, dict) else t[k]  # noqa: E731 (a zero: absent)
    parts = [_at_axes(f, axes[k], read(x, k), None if y is None else read(y, k)) for k in keys]
    if isinstance(x, dict):
        return dict_like(x, dict(zip(keys, parts, strict=True)))
    return rebuild(x, parts)


def tree_index_at(xs, axes, i):
    """Item `i` of the leaves of `xs` that `axes` maps (0), the others as they are (None)."""
    return _at_axes(lambda ax, x, _: x if ax is None else tree_index(x, i), axes, xs, None)


def tree_put_at(like, axes, i, y):
    """The gradient of `tree_index_at(like, axes, i)` from that of its result `y`."""
    if y is None:
        return None
    return _at_axes(lambda ax, x, d: d if ax is None else tree_put(x, i, d), axes, like, y)


def tree_stack_at(y, n, i):
    """Leaves of `n` rows of zeros shaped like `y`'s leaves, with `y` in row `i`."""
    return jax.tree_util.tree_map(
        lambda v: jnp.zeros((n, *jnp.shape(v)), jnp.result_type(v)).at[i].set(v), y
    )


def tree_set(ys, i, y):
    """`ys` with row `i` of every leaf replaced by `y`'s leaves (None: zeros)."""
    return _map2(lambda a, v: jnp.asarray(a).at[i].set(0 if v is None else v), ys, y)


# -- a Jacobian of pytrees as a matrix ------------------------------------------------
def _size(leaf) -> int:
    return math.prod(jnp.shape(leaf))


def tree_size(tree) -> int:
    """How many numbers the leaves of `tree` hold."""
    return sum(_size(leaf) for leaf in _leaves_of(tree))


def ravel_rows(rows):
    """Leaves of `n` rows each (a tree like some `like` with a leading axis)
    as one `(n, tree_size(like))` matrix: row `k` is row `k` of every leaf, raveled."""
    leaves = _leaves_of(rows)
    n = jnp.shape(leaves[0])[0]
    # Each row's size spelled out: `-1` is ambiguous when `n` is 0 (an empty input).
    rows = [jnp.reshape(leaf, (n, math.prod(jnp.shape(leaf)[1:]))) for leaf in leaves]
    return jnp.concatenate(rows, axis=1)


def unravel_rows(m, like, lead: bool = False):
    """The `n` rows of matrix `m` as a tree like `like` whose leaves gain a
    leading axis of `n` (each leaf `like`'s dtype): the inverse of `ravel_rows`.
    With `lead`, `like`'s leaves have that axis already (`like` is rows too)."""
    leaves, tree = jax.tree_util.tree_flatten(like)
    n, start, out = jnp.shape(m)[0], 0, []
    for leaf in leaves:
        shape = jnp.shape(leaf)[1:] if lead else jnp.shape(leaf)
        size = math.prod(shape)
        block = jnp.reshape(m[:, start : start + size], (n, *shape))
        out.append(block.astype(jnp.result_type(leaf)))
        start += size
    return jax.tree_util.tree_unflatten(tree, out)


def jacobian_blocks(m, out, x):
    """The Jacobian matrix `m` (`tree_size(out)` by `tree_size(x)`) nested as
    JAX nests it: `out`'s structure of `x`'s structure of blocks shaped
    `out_leaf.shape + x_leaf.shape`."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    x_leaves, x_tree = jax.tree_util.tree_flatten(x)
    rows, r = [], 0
    for o in out_leaves:
        blocks, c = [], 0
        for leaf in x_leaves:
            block = m[r : r + _size(o), c : c + _size(leaf)]
            blocks.append(jnp.reshape(block, (*jnp.shape(o), *jnp.shape(leaf))))
            c += _size(leaf)
        rows.append(jax.tree_util.tree_unflatten(x_tree, blocks))
        r += _size(o)
    return jax.tree_util.tree_unflatten(out_tree, rows)


def jacobian_matrix(blocks, out, x):
    """The inverse of `jacobian_blocks`: the nested blocks as one matrix."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    x_leaves, x_tree = jax.tree_util.tree_flatten(x)
    rows = []
    for o, per_x in zip(out_leaves, out_tree.flatten_up_to(blocks), strict=True):
        parts = zip(x_tree.flatten_up_to(per_x), x_leaves, strict=True)
        rows.append(
            jnp.concatenate([jnp.reshape(b, (_size(o), _size(leaf))) for b, leaf in parts], 1)
        )
    return jnp.concatenate(rows, axis=0)
