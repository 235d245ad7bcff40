"""Run-time helpers of gradient rules: `sum_to` and the gradient of indexing."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from k_transform.errors import KTransformError
from k_transform.protocol import kt_attribute
from k_transform.runtime.values import (
    add_grad,
    dict_like,
    pytree_node,
    rebuild,
    zeros_like_value,
)


# -- helpers of gradient rules ---------------------------------------------------
class Repeated(list):
    """The gradient of `seq * n` (a sequence repeated `n` times), on its way
    to `seq` (`mul_grad`): `sum_to` folds its items onto `seq`'s, one copy
    after the other; `spread_like` repeats a gradient of `seq` back."""


def mul_grad(d, factor):
    """`d * factor` in the gradient of a product. For the gradient `d` of a
    repeated sequence (`[x] * 3`: a list or tuple) and the count `factor`,
    `Repeated(d)`; for the count itself (its factor the sequence), None: an
    int has no gradient. (`d * 3` repeated the gradient list instead: only
    the first copy's gradient reached `x`.) A None (a zero gradient, as of
    a bool from `any(...)` in a second derivative) stays None."""
    if d is None or factor is None:
        return None
    if isinstance(d, (tuple, list)) and not isinstance(d, Repeated):
        if isinstance(factor, (tuple, list)):
            return None
        return Repeated(d)
    return d * factor


def sum_to(g, like, tail: bool = False):
    """Sum `g` over the axes broadcasting added to `like`'s shape.

    For the gradient of a concatenation `a + b` of tuples or lists, `g` is
    longer than `like`: its first items (or its last, with `tail`) are taken.
    A `Repeated` gradient of `like * n` adds its copies.
    """
    if isinstance(g, Repeated) and isinstance(like, (tuple, list)):
        folded = [None] * len(like)
        for k, item in enumerate(g):
            folded[k % len(like)] = add_grad(folded[k % len(like)], item)
        return rebuild(like, folded)
    if isinstance(g, (tuple, list)) and isinstance(like, (tuple, list)):
        return rebuild(like, g[len(g) - len(like) :] if tail else g[: len(like)])
    if g is None or not hasattr(g, "shape") and not isinstance(g, (int, float)):
        return g  # a dict gradient, or already shaped
    if jnp.iscomplexobj(g) and not jnp.iscomplexobj(like):
        # JAX's convention: a real input's gradient is real (the transpose
        # of promoting it to complex, `x + 1j * y`, takes the real part).
        g = jnp.real(g)
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


def spread_like(d, g, tail: bool = False):
    """The transpose of `sum_to(g, like)` at `d` (shaped like `like`): `d`
    broadcast to `g`'s shape; for the items of a concatenation, `d` with
    zeros for the items of `g` that `like` did not take (at its start, with `tail`)."""
    if d is None:
        return None
    if isinstance(g, Repeated) and isinstance(d, (tuple, list)):
        return Repeated(list(d) * (len(g) // max(len(d), 1)))
    if isinstance(g, (tuple, list)):
        rest = zeros_like_value(g[: len(g) - len(d)] if tail else g[len(d) :])
        items = [*rest, *d] if tail else [*d, *rest]  # `d` may be a tuple, `g` a list
        return rebuild(g, items)
    if not hasattr(d, "shape") and not isinstance(d, (int, float, complex)):
        return d  # a dict (or other pytree) gradient: `sum_to` passed it as it is
    return jnp.broadcast_to(d, jnp.shape(g))


def getitem_grad(x, index, dout):
    """The gradient of `x[index]` w.r.t. `x`: zeros like `x` with `dout` at `index`."""
    if x is None or isinstance(x, range):  # no gradient (`x`: a zero gradient), integers
        return None
    if _host_container(x):
        return _host_item_grad(x, dout)
    if dout is None:
        return zeros_like_value(x)
    if isinstance(x, (tuple, list)):
        grads = [zeros_like_value(v) for v in x]
        grads[index] = dout
        return rebuild(x, grads)  # a NamedTuple stays one
    if isinstance(x, dict):
        grads = {k: zeros_like_value(v) for k, v in x.items()}
        grads[index] = dout
        return dict_like(x, grads)
    padded = _pad_into(x, index, dout)
    if padded is not None:
        return padded
    zeros = jnp.zeros(jnp.shape(x), jnp.result_type(x))
    return zeros.at[index].add(jnp.asarray(dout, zeros.dtype))


def _host_container(x) -> bool:
    """An object indexed through its own `__getitem__` (a user's container, a
    CellList, an Enum class iterated): no tuple, list, dict, str, array or
    pytree node, whose gradients have their structure."""
    if isinstance(x, (tuple, list, dict, str, bytes)) or hasattr(x, "shape"):
        return False
    return not hasattr(x, "__jax_array__") and pytree_node(x) is None


def _host_item_grad(x, dout):
    """The gradient of the host object `x` from that of an item its
    `__getitem__` gave: where the item holds Parameters (a Cell of a
    CellList), its gradient is their env, and so is `x`'s; else none (the
    object is a constant of the program, made by host code or read as a
    global, as its items are). An item whose gradient is an array while `x`
    holds Parameters may be one of them (or computed from them): refused,
    not dropped."""
    if dout is None or isinstance(dout, dict):
        return dout
    if _holds_parameter(x):
        raise KTransformError(
            f"indexing a {type(x).__name__} (`obj[i]`, its own __getitem__) that holds "
            "Parameters in differentiated code: the gradient of a Parameter read that way "
            "is not taken; keep the Parameters in a list, tuple or dict, or read them as "
            "attributes"
        )
    return None


def _holds_parameter(x, budget: int = 200) -> bool:
    """Whether the host object `x` holds a Parameter in its attributes (or
    their lists, tuples and dicts), looked for over at most `budget` values."""
    stack, seen = [x], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        budget -= 1
        if budget < 0:
            return True  # (not looked through: as holding one)
        if isinstance(v, dict):
            children = list(v.values())
        elif isinstance(v, (list, tuple)):
            children = list(v)
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            children = list(vars(v).values())
        else:
            continue
        for c in children:
            if kt_attribute(c, "__kt_parameter__", False) is True:
                return True
            if isinstance(c, (dict, list, tuple)) or (
                hasattr(c, "__dict__") and not isinstance(c, type) and not hasattr(c, "shape")
            ):
                stack.append(c)
    return False


def grad_item(d, index):
    """Item `index` of the gradient `d` of a sequence or dict: None where `d`
    is None (the zero gradient, whose items are all zero)."""
    return None if d is None else d[index]


def grad_items(d, indices: tuple) -> tuple:
    """The items `indices` of the gradient `d` (`grad_item` of each)."""
    return tuple(grad_item(d, i) for i in indices)


def items_grad_of(x, indices: tuple, douts):
    """`items_grad` with the item gradients as one tuple (None: all zero),
    the transpose of `grad_items`."""
    return items_grad(x, indices, *(douts if douts is not None else (None,) * len(indices)))


def items_grad(x, indices: tuple, *douts):
    """The gradient of `x` from those of its items `x[i]`, one per constant
    index in `indices`: for a tuple, list or dict built at once, with zeros
    only for the items no index reads; otherwise the sum of `getitem_grad`s."""
    if isinstance(x, (tuple, list, dict)):
        is_dict = isinstance(x, dict)
        got: dict = {}
        for i, d in zip(indices, douts, strict=True):
            k = i if is_dict else i % len(x)  # `x[i]` ran: i is in range
            got[k] = add_grad(got[k], d) if k in got else d
        pairs = x.items() if is_dict else enumerate(x)
        grads = {k: got[k] if k in got else zeros_like_value(v) for k, v in pairs}
        return dict_like(x, grads) if is_dict else rebuild(x, list(grads.values()))
    grads = [getitem_grad(x, i, d) for i, d in zip(indices, douts, strict=True)]
    return functools.reduce(add_grad, grads)


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
