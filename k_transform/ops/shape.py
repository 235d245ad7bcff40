"""Shape primitives (MindSpore names): transpose, reshape, expand/squeeze,
broadcast, concatenate/stack and their inverses, dtype casts.

Shapes, permutations and dtypes are inputs (`Reshape()(x, shape)`), so a
shape computed from `x.shape` works; they get no gradient. Axes that jax
needs at trace time are attributes (`Squeeze(axis)`, `Concat(axis)`).
`SplitLike` and `UnstackLike` cut the gradient of `Concat` and `Stack` into
the items of their input, in its container (a tuple, a list, a NamedTuple:
gradients mirror values); `Unstack` returns a tuple. Each is the gradient of
the other (`jnp.concatenate`, `jnp.stack`).

Rearrangements with static attributes: `Tile(reps)` (its gradient
`TileGrad(reps)(dout, x)` sums the copies), `Pad(paddings)` (constant zeros;
negative widths crop, so `Pad(-paddings)` is its gradient), `Flip(axis)`,
`Roll(shift, axis)` and `Split(sections, axis)` (a tuple, like `jnp.split`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ir.nodes import Constant
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import (
    NONE,
    map_functions,
    register_attribute,
    register_function,
    register_method,
)
from k_transform.ops.structural import SumTo
from k_transform.runtime.values import rebuild


def invert_permutation(perm) -> tuple:
    """The permutation undoing `perm` (negative axes allowed)."""
    n = len(perm)
    return tuple(int(k) for k in np.argsort([p % n for p in perm]))


def split_like(g, xs, axis: int):
    """`g` cut along `axis` into pieces as long as each of `xs`, in `xs`'s container."""
    sizes = [jnp.shape(x)[axis] for x in xs]
    parts = jnp.split(g, np.cumsum(sizes)[:-1].tolist(), axis=axis)
    return _items_like([_real_like(part, x) for part, x in zip(parts, xs, strict=True)], xs)


def unstack_like(g, xs, axis: int):
    """The slices of `g` along `axis`, one per item of `xs`, in `xs`'s
    container (the gradient of `jnp.stack(xs, axis)`)."""
    slices = unstack(g, axis)
    return _items_like([_real_like(d, x) for d, x in zip(slices, xs, strict=True)], xs)


def _items_like(parts: list, xs):
    """`parts`, the gradients of the items of `xs`, in `xs`'s container: a
    tuple, a list or a NamedTuple of the same type (gradients mirror values:
    a NamedTuple's, as a plain tuple, could not be added to the gradient of
    one of its fields), or the array of them where `xs` is an array
    (`jnp.stack(x)` of the rows of `x`)."""
    if isinstance(xs, (tuple, list)):
        return rebuild(xs, parts)
    return jnp.stack(parts)


def _real_like(g, x):
    """`g`, or its real part where `x` is real and `g` complex (JAX's
    convention: a real input's gradient is real)."""
    return jnp.real(g) if jnp.iscomplexobj(g) and not jnp.iscomplexobj(x) else g


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
Cast = elementwise(
    "Cast", cast, "cast", 2, "`(x, dtype)`: `x.astype(dtype)`, differentiated as JAX does."
)


class MsCast(Cast):
    """`(x, dtype)`: MindSpore's `ops.Cast()(x, dtype)` / `ops.cast`: the same
    value as `Cast`, differentiated as MindSpore does (the gradient passes
    through a cast to an integer or bool dtype)."""


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
    """`SplitLike(axis)(g, xs)`: `g` cut along `axis` into pieces shaped like
    the items of `xs`, in `xs`'s container (the gradient of `Concat`)."""

    jax_fn = staticmethod(split_like)
    jax_name = "split_like"
    n_inputs = 2


class UnstackLike(_AxisPrimitive):
    """`UnstackLike(axis)(g, xs)`: the slices of `g` along `axis`, one per
    item of `xs`, in `xs`'s container (the gradient of `Stack`)."""

    jax_fn = staticmethod(unstack_like)
    jax_name = "unstack_like"
    n_inputs = 2


def _full_reps(reps, ndim: int) -> tuple:
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    return (1,) * (ndim - len(reps)) + reps


def tile_grad(dout, x, reps):
    """Sum of the `reps` copies of x in `dout` (the adjoint of `jnp.tile`)."""
    n = max(jnp.ndim(x), len(reps) if not isinstance(reps, int) else 1)
    reps = _full_reps(reps, n)
    shape = (1,) * (n - jnp.ndim(x)) + tuple(jnp.shape(x))
    split = [d for r, k in zip(reps, shape, strict=True) for d in (r, k)]
    summed = jnp.sum(jnp.reshape(dout, split), axis=tuple(range(0, 2 * n, 2)))
    return jnp.reshape(summed, jnp.shape(x))


def pad(x, paddings):
    """Zeros around x: `paddings` as `jnp.pad`'s pad_width; negative crops."""
    widths = np.broadcast_to(np.asarray(paddings, int), (jnp.ndim(x), 2))
    config = [(int(lo), int(hi), 0) for lo, hi in widths]
    return jax.lax.pad(x, jnp.zeros((), jnp.result_type(x)), config)


def roll(x, shift, axis):
    return jnp.roll(x, shift, axis)


def split(x, sections, axis: int = 0) -> tuple:
    return tuple(jnp.split(x, sections, axis))


class _AttrJax(JaxPrimitive):
    n_inputs = 1


class Tile(_AttrJax):
    """`Tile(reps)(x)`: `jnp.tile(x, reps)`."""

    jax_fn = staticmethod(jnp.tile)
    jax_name = "jnp.tile"
    jax_kwargs = {"reps": "reps"}

    def __init__(self, reps=1):
        super().__init__(reps=reps if isinstance(reps, int) else tuple(reps))


class TileGrad(Tile):
    """`TileGrad(reps)(dout, x)`: the copies of x in dout summed (x: the shape)."""

    jax_fn = staticmethod(tile_grad)
    jax_name = "tile_grad"
    n_inputs = 2


class Pad(_AttrJax):
    """`Pad(paddings)(x)`: zeros around x (`jnp.pad` constant mode)."""

    jax_fn = staticmethod(pad)
    jax_name = "pad"
    jax_kwargs = {"paddings": "paddings"}

    def __init__(self, paddings=0):
        super().__init__(paddings=_nested_tuple(paddings))


def _nested_tuple(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_nested_tuple(a) for a in v)
    return int(v)


class Flip(_AttrJax):
    """`Flip(axis)(x)`: `jnp.flip(x, axis)`; None: every axis."""

    jax_fn = staticmethod(jnp.flip)
    jax_name = "jnp.flip"
    jax_kwargs = {"axis": "axis"}

    def __init__(self, axis=None):
        super().__init__(axis=_nested_tuple(axis) if axis is not None else None)


class Roll(_AttrJax):
    """`Roll(shift, axis)(x)`: `jnp.roll(x, shift, axis)`; axis None: flattened."""

    jax_fn = staticmethod(roll)
    jax_name = "roll"
    jax_kwargs = {"shift": "shift", "axis": "axis"}

    def __init__(self, shift=0, axis=None):
        super().__init__(
            shift=_nested_tuple(shift), axis=_nested_tuple(axis) if axis is not None else None
        )


class Split(_AttrJax):
    """`Split(sections, axis)(x)`: `jnp.split(x, sections, axis)` as a tuple."""

    jax_fn = staticmethod(split)
    jax_name = "split"
    jax_kwargs = {"sections": "sections", "axis": "axis"}

    def __init__(self, sections=1, axis: int = 0):
        super().__init__(sections=_nested_tuple(sections), axis=axis)


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


@register_attribute("mT")
def _matrix_transpose_attribute(call):  # the last two axes swapped
    return SwapAxes(), [call.args[0], Constant(-2), Constant(-1)]


@register_function(jnp.tile, np.tile)
def _tile(call):
    if not call.names_ok(("A", "reps"), 2):
        return None
    return Tile(call.static(1, "reps")), [call.arg(0, "A")]


@register_function(jnp.pad, np.pad)
def _pad(call):
    """Constant mode with zeros only; other modes stay library calls."""
    if not call.names_ok(("array", "pad_width", "mode", "constant_values"), 3):
        return None
    if call.static(2, "mode", "constant") != "constant" or call.static(3, "constant_values", 0):
        return None
    return Pad(call.static(1, "pad_width")), [call.arg(0, "array")]


@register_function(jnp.flip, np.flip)
def _flip(call):
    if not call.names_ok(("m", "axis"), 2):
        return None
    return Flip(call.static(1, "axis")), [call.arg(0, "m")]


@register_function(jnp.roll, np.roll)
def _roll(call):
    if not call.names_ok(("a", "shift", "axis"), 3):
        return None
    return Roll(call.static(1, "shift"), call.static(2, "axis")), [call.arg(0, "a")]


@register_function(jnp.split, np.split)
def _split(call):
    if not call.names_ok(("ary", "indices_or_sections", "axis"), 3):
        return None
    prim = Split(call.static(1, "indices_or_sections"), call.static(2, "axis", 0))
    return prim, [call.arg(0, "ary")]


# == gradient rules ==============================================================
# Rules for shape primitives: each gradient undoes the shape change.
#
# Shapes, permutations, axes and dtypes get None. `Concat`/`SplitLike` and
# `Stack`/`UnstackLike` are each other's gradients, so both differentiate again.

sum_to = SumTo()
invert_permutation = InvertPermutation()

zero_gradient(Shape, Size, InvertPermutation)


@rule(Transpose)
def bprop_transpose(x, perm, out, dout):
    if perm is None:
        return jnp.transpose(dout), None
    return jnp.transpose(dout, invert_permutation(perm)), None


@rule(SwapAxes)
def bprop_swapaxes(x, axis1, axis2, out, dout):
    return jnp.swapaxes(dout, axis1, axis2), None, None


@rule(MoveAxis)
def bprop_moveaxis(x, source, destination, out, dout):
    return jnp.moveaxis(dout, destination, source), None, None


@rule(Reshape)
def bprop_reshape(x, shape, out, dout):
    return jnp.reshape(dout, jnp.shape(x)), None


@rule(ExpandDims)
def bprop_expand_dims(x, axis, out, dout):
    return jnp.reshape(dout, jnp.shape(x)), None


@rule(Squeeze)
def bprop_squeeze(x, out, dout):
    return (jnp.reshape(dout, jnp.shape(x)),)


@rule(BroadcastTo)
def bprop_broadcast_to(x, shape, out, dout):
    return sum_to(dout, x), None


@rule(Cast)
def bprop_cast(x, dtype, out, dout):
    # JAX's `convert_element_type`: a cast to an integer or bool dtype is
    # piecewise constant (zero derivative), and an integer input has none.
    # Zeros, not None: the test is on dtypes, so it runs with the rule, and a
    # None returned there would reach the rules before it as their `dout`.
    # A list `x` (`Tensor([2, 0], ms.int32)`, `jnp.asarray([a, b])`) has its
    # items' dtype; its gradient is an array, read item by item by the list's rule.
    dtype_x = jnp.result_type(jnp.asarray(x))
    if jnp.issubdtype(dtype_x, jnp.inexact) and jnp.issubdtype(jnp.result_type(out), jnp.inexact):
        return _to_dtype_of(jnp.asarray(x), dout), None
    return jnp.zeros_like(x), None


def _to_dtype_of(x, d):
    """The gradient `d` of a cast of `x`, in `x`'s dtype: its real part for a
    real `x` (JAX's convention: a real input's gradient is real)."""
    return (d if jnp.iscomplexobj(x) else jnp.real(d)).astype(jnp.result_type(x))


@rule(MsCast)
def bprop_ms_cast(x, dtype, out, dout):
    # MindSpore's Cast bprop, `cast(dout, dtype(x))`, where the sensitivity
    # reaching an integer output is already of that integer dtype (MindSpore's
    # binary rules cast each gradient to its input's dtype): the gradient
    # through a cast to an integer is truncated toward zero and passed on.
    return _to_dtype_of(x, _to_dtype_of(out, dout)), None


@bprop_getters.register(Concat)
def get_bprop_concat(self):
    split_like = SplitLike(self.axis)

    def bprop(xs, out, dout):
        return (split_like(dout, xs),)

    return bprop


@bprop_getters.register(SplitLike)
def get_bprop_split_like(self):
    axis = self.axis

    def bprop(g, xs, out, dout):
        return jnp.concatenate(dout, axis=axis), None

    return bprop


@bprop_getters.register(Stack)
def get_bprop_stack(self):
    unstack_like = UnstackLike(self.axis)

    def bprop(xs, out, dout):
        return (unstack_like(dout, xs),)

    return bprop


@bprop_getters.register(UnstackLike)
def get_bprop_unstack_like(self):
    axis = self.axis

    def bprop(g, xs, out, dout):
        return jnp.stack(dout, axis=axis), None

    return bprop


@bprop_getters.register(Unstack)
def get_bprop_unstack(self):
    axis = self.axis

    def bprop(x, out, dout):
        return (jnp.stack(dout, axis=axis),)

    return bprop


def _negate(widths):
    if isinstance(widths, tuple):
        return tuple(_negate(w) for w in widths)
    return -widths


@bprop_getters.register(Tile)
def get_bprop_tile(self):
    tile_grad = TileGrad(self.reps)
    return lambda x, out, dout: (tile_grad(dout, x),)


@bprop_getters.register(TileGrad)
def get_bprop_tile_grad(self):
    tile = Tile(self.reps)
    return lambda g, x, out, dout: (tile(dout), None)


@bprop_getters.register(Pad)
def get_bprop_pad(self):
    crop = Pad(_negate(self.paddings))
    return lambda x, out, dout: (crop(dout),)


@bprop_getters.register(Flip)
def get_bprop_flip(self):
    flip = Flip(self.axis)
    return lambda x, out, dout: (flip(dout),)


@bprop_getters.register(Roll)
def get_bprop_roll(self):
    roll_back = Roll(_negate(self.shift), self.axis)
    return lambda x, out, dout: (roll_back(dout),)


@bprop_getters.register(Split)
def get_bprop_split(self):
    axis = self.axis
    return lambda x, out, dout: (jnp.concatenate(dout, axis=axis),)
