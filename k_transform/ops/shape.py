"""Shape primitives (MindSpore names): transpose, reshape, expand/squeeze,
broadcast, concatenate/stack and their inverses, dtype casts.

Shapes, permutations and dtypes are inputs (`Reshape()(x, shape)`), so a
shape computed from `x.shape` works; they get no gradient. Axes that jax
needs at trace time are attributes (`Squeeze(axis)`, `Concat(axis)`).
`SplitLike` and `Unstack` return tuples: they are the gradients of `Concat`
and `Stack` (and the other way round).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from k_transform.ir.nodes import Constant
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import (
    NONE,
    map_functions,
    register_attribute,
    register_function,
    register_method,
)


def invert_permutation(perm) -> tuple:
    """The permutation undoing `perm` (negative axes allowed)."""
    n = len(perm)
    return tuple(int(k) for k in np.argsort([p % n for p in perm]))


def split_like(g, xs, axis: int) -> tuple:
    """`g` cut along `axis` into pieces as long as each of `xs`."""
    sizes = [jnp.shape(x)[axis] for x in xs]
    return tuple(jnp.split(g, np.cumsum(sizes)[:-1].tolist(), axis=axis))


def unstack(x, axis: int) -> tuple:
    """The slices of `x` along `axis` (the inverse of `jnp.stack`)."""
    return tuple(jnp.moveaxis(x, axis, 0))


def cast(x, dtype):
    return jnp.asarray(x, dtype)


Shape = elementwise("Shape", jnp.shape, "jnp.shape", 1, "`jnp.shape(x)`: a tuple of ints.")
Size = elementwise("Size", jnp.size, "jnp.size", 1, "`jnp.size(x)`: an int.")
Transpose = elementwise(
    "Transpose", jnp.transpose, "jnp.transpose", 2, "`(x, perm)`; None: reversed."
)
InvertPermutation = elementwise(
    "InvertPermutation", invert_permutation, "invert_permutation", 1, "Inverse of a permutation."
)
SwapAxes = elementwise("SwapAxes", jnp.swapaxes, "jnp.swapaxes", 3, "`(x, axis1, axis2)`.")
MoveAxis = elementwise("MoveAxis", jnp.moveaxis, "jnp.moveaxis", 3, "`(x, source, destination)`.")
Reshape = elementwise("Reshape", jnp.reshape, "jnp.reshape", 2, "`(x, shape)`.")
ExpandDims = elementwise("ExpandDims", jnp.expand_dims, "jnp.expand_dims", 2, "`(x, axis)`.")
BroadcastTo = elementwise("BroadcastTo", jnp.broadcast_to, "jnp.broadcast_to", 2, "`(x, shape)`.")
Cast = elementwise("Cast", cast, "cast", 2, "`(x, dtype)`: `x.astype(dtype)`.")


class _AxisPrimitive(JaxPrimitive):
    """A primitive with one static `axis` attribute passed as `axis=`."""

    jax_kwargs = {"axis": "axis"}
    n_inputs = 1

    def __init__(self, axis: int = 0):
        super().__init__(axis=axis)


class Squeeze(JaxPrimitive):
    """`Squeeze(axis)(x)`: `jnp.squeeze(x, axis)`; None: every length-1 axis."""

    jax_fn = staticmethod(jnp.squeeze)
    jax_name = "jnp.squeeze"
    jax_kwargs = {"axis": "axis"}
    n_inputs = 1

    def __init__(self, axis=None):
        super().__init__(axis=axis)


class Concat(_AxisPrimitive):
    """`Concat(axis)(xs)`: `jnp.concatenate(xs, axis)` of a tuple or list."""

    jax_fn = staticmethod(jnp.concatenate)
    jax_name = "jnp.concatenate"


class Stack(_AxisPrimitive):
    """`Stack(axis)(xs)`: `jnp.stack(xs, axis)` of a tuple or list."""

    jax_fn = staticmethod(jnp.stack)
    jax_name = "jnp.stack"


class Unstack(_AxisPrimitive):
    """`Unstack(axis)(x)`: the tuple of slices of `x` along `axis`."""

    jax_fn = staticmethod(unstack)
    jax_name = "unstack"


class SplitLike(_AxisPrimitive):
    """`SplitLike(axis)(g, xs)`: `g` cut along `axis` into pieces shaped like `xs`."""

    jax_fn = staticmethod(split_like)
    jax_name = "split_like"
    n_inputs = 2


map_functions({Shape: (jnp.shape, np.shape), Size: (jnp.size, np.size)})
map_functions({SwapAxes: (jnp.swapaxes, np.swapaxes), MoveAxis: (jnp.moveaxis, np.moveaxis)}, n=3)


# -- library functions ----------------------------------------------------------------
def _two(prim_cls, first: str, second: str, default=None):
    """Adapter for `fn(first, second)` -> `prim_cls()(first, second)`."""

    def adapter(call):
        if not call.names_ok((first, second), 2):
            return None
        x, y = call.arg(0, first), call.arg(1, second, default)
        return (prim_cls(), [x, y]) if x is not None and y is not None else None

    return adapter


register_function(jnp.transpose, np.transpose)(_two(Transpose, "a", "axes", NONE))
register_function(jnp.reshape, np.reshape)(_two(Reshape, "a", "shape"))
register_function(jnp.expand_dims, np.expand_dims)(_two(ExpandDims, "a", "axis"))
register_function(jnp.broadcast_to, np.broadcast_to)(_two(BroadcastTo, "array", "shape"))
register_function(jnp.asarray)(_two(Cast, "a", "dtype"))


@register_function(jnp.ravel, np.ravel)
def _ravel(call):
    if call.kwargs or len(call.args) != 1:
        return None
    return Reshape(), [call.args[0], Constant((-1,))]


@register_function(jnp.squeeze, np.squeeze)
def _squeeze(call):
    if not call.names_ok(("a", "axis"), 2):
        return None
    return Squeeze(call.static(1, "axis")), [call.arg(0, "a")]


def _joining(prim_cls):
    """Adapter for `fn(arrays, axis=0)` -> `prim_cls(axis)(arrays)`."""

    def adapter(call):
        if not call.names_ok(("arrays", "axis"), 2):
            return None
        return prim_cls(call.static(1, "axis", 0)), [call.arg(0, "arrays")]

    return adapter


register_function(jnp.concatenate, np.concatenate)(_joining(Concat))
register_function(jnp.stack, np.stack)(_joining(Stack))


@register_function(jnp.unstack)
def _unstack(call):
    if not call.names_ok(("x", "axis"), 2):
        return None
    return Unstack(call.static(1, "axis", 0)), [call.arg(0, "x")]


# -- array methods and attributes ---------------------------------------------------------
def _dims(call, name: str):
    """`x.m(d0, d1, ...)` or `x.m((d0, d1, ...))`: the tuple as one input (static
    when spelled out as several arguments)."""
    rest = call.args[1:]
    if call.kwargs:
        return None
    if len(rest) == 1:
        return rest[0]
    values = [call.static(k + 1, name) for k in range(len(rest))]
    return Constant(tuple(values)) if values else None


@register_method("reshape")
def _reshape_method(call):
    shape = _dims(call, "shape")
    return (Reshape(), [call.args[0], shape]) if shape is not None else None


@register_method("transpose")
def _transpose_method(call):
    perm = _dims(call, "axes") if len(call.args) > 1 else NONE
    return (Transpose(), [call.args[0], perm]) if perm is not None else None


@register_method("ravel", "flatten")
def _flatten_method(call):
    if call.kwargs or len(call.args) != 1:
        return None
    return Reshape(), [call.args[0], Constant((-1,))]


@register_method("squeeze")
def _squeeze_method(call):
    if not call.names_ok(("axis",), 2):
        return None
    return Squeeze(call.static(1, "axis")), [call.args[0]]


@register_method("astype")
def _astype_method(call):
    if not call.names_ok(("dtype",), 2) or call.arg(1, "dtype") is None:
        return None
    return Cast(), [call.args[0], call.arg(1, "dtype")]


@register_method("swapaxes")
def _swapaxes_method(call):
    if call.kwargs or len(call.args) != 3:
        return None
    return SwapAxes(), call.args


@register_attribute("T")
def _transpose_attribute(call):
    return Transpose(), [call.args[0], NONE]
