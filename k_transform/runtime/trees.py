"""Index and stack pytrees of arrays along their leading axis.

The run time of the Python models of `lax.scan`, `lax.map` and `jax.vmap`
(`k_transform.frontend.lax_models`): a step reads item `i` of every leaf of
`xs` and writes its result into row `i` of every leaf of `ys`. Gradients
(`k_transform.ops.trees`) are these functions again, so they differentiate
to any order. None is a zero gradient wherever a tree may be one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.errors import KTransformError


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


def batch_size(axes, args) -> int:
    """The size of the mapped axis of `jax.vmap`'s arguments (`axes`: 0 or None each)."""
    sizes = {
        jnp.shape(leaf)[0]
        for arg, axis in zip(args, axes, strict=True)
        if axis is not None
        for leaf in _leaves_of(arg)
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


def tree_stack_at(y, n, i):
    """Leaves of `n` rows of zeros shaped like `y`'s leaves, with `y` in row `i`."""
    return jax.tree_util.tree_map(
        lambda v: jnp.zeros((n, *jnp.shape(v)), jnp.result_type(v)).at[i].set(v), y
    )


def tree_set(ys, i, y):
    """`ys` with row `i` of every leaf replaced by `y`'s leaves (None: zeros)."""
    return _map2(lambda a, v: jnp.asarray(a).at[i].set(0 if v is None else v), ys, y)
