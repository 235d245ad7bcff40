"""MindSpore 2.10's functional nn ops: `ops.conv2d`, `ops.conv1d`,
`ops.max_pool2d`, `ops.avg_pool2d`, `ops.adaptive_avg_pool2d`,
`ops.interpolate`, `ops.dropout`, `ops.dropout2d` (NCHW, as MindSpore).

As in `functions.py`: plain Python over jax.numpy and jax.lax with
MindSpore's signatures and values (checked on MindSpore 2.10, PYNATIVE_MODE),
read by the parser like user code, so each gradient is the composition's:

- convolutions are `lax.conv_general_dilated` (its lax rule);
- pooling stacks the strided views of the padded input, one per window
  offset, and takes the first maximum (`argmax`: a window's gradient goes
  to its first maximum, as MindSpore's) or the sum over a divisor;
- interpolation gathers along each spatial axis (`jnp.take` with index
  tables from `_resize_table`): nearest is one gather, linear two and a
  lerp (`a + (b - a) * t`, as MindSpore's kernels), area the mean of a
  bin (MindSpore's adaptive average pooling);
- dropout draws from `_STREAM`'s key (see `dropout`), made at its first read.

An argument MindSpore accepts and these do not support raises ValueError
naming it (`return_indices`, bicubic and trilinear modes, 5-D inputs).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter, _uids
from k_transform.common import seed as seeds
from k_transform.ops.state import Assign

NCHW = ("NCHW", "OIHW", "NCHW")


def _ints(value, n: int, op: str, name: str) -> tuple:
    """`value` (an int, or n ints) as a tuple of n ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"ops.{op}: `{name}` must be an int or {n} ints, got {value!r}")
        return tuple(value)
    return (value,) * n


# -- convolution


def _conv_pads(pad_mode, padding, op: str):
    """lax padding for MindSpore's `pad_mode`: "SAME" / "VALID" (`padding` 0),
    or ((top, bottom), (left, right)) from `padding` (one pad per axis, both sides)."""
    if pad_mode not in ("same", "valid", "pad"):
        raise ValueError(f"ops.{op}: pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")
    if pad_mode != "pad":
        if any(p != 0 for p in padding):
            raise ValueError(f"ops.{op}: padding must be 0 when pad_mode is {pad_mode!r}")
        return pad_mode.upper()
    return tuple((p, p) for p in padding)


def _conv(x, weight, bias, stride, pads, dilation, groups):
    out = jax.lax.conv_general_dilated(
        x,
        weight,
        stride,
        pads,
        rhs_dilation=dilation,
        dimension_numbers=NCHW,
        feature_group_count=groups,
    )
    return out if bias is None else out + jnp.reshape(bias, (1, -1, 1, 1))


def conv2d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):  # noqa: A002
    """`padding`: an int, or (height, width), each padding both sides."""
    pads = _conv_pads(pad_mode, _ints(padding, 2, "conv2d", "padding"), "conv2d")
    stride, dilation = (
        _ints(stride, 2, "conv2d", "stride"),
        _ints(dilation, 2, "conv2d", "dilation"),
    )
    return _conv(input, weight, bias, stride, pads, dilation, groups)


def conv1d(input, weight, bias=None, stride=1, pad_mode="valid", padding=0, dilation=1, groups=1):  # noqa: A002
    """(N, C, L) by (O, C / groups, K): conv2d over (N, C, 1, L), as MindSpore."""
    pads = _conv_pads(pad_mode, _ints(padding, 1, "conv1d", "padding"), "conv1d")
    pads = pads if isinstance(pads, str) else ((0, 0), *pads)
    stride = (1, *_ints(stride, 1, "conv1d", "stride"))
    dilation = (1, *_ints(dilation, 1, "conv1d", "dilation"))
    x, w = jnp.expand_dims(input, 2), jnp.expand_dims(weight, 2)
    return jnp.squeeze(_conv(x, w, bias, stride, pads, dilation, groups), 2)


# -- pooling over the last two axes of (N, C, H, W); `pads`: ((top, bottom), (left, right))


def _pool_length(size, kernel, stride, dilation, pad, ceil_mode):
    """MindSpore's (and PyTorch's) output length of a window along one axis
    padded by `pad` (before, after): with `ceil_mode` a last, partial window
    counts if it starts inside the input or its leading padding."""
    span = size + pad[0] + pad[1] - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad[0] else out


def _pool_geometry(x, kernel_size, stride, pads, dilation, ceil_mode, op):
    if jnp.ndim(x) != 4:
        raise ValueError(f"ops.{op}: the input must be (N, C, H, W), got shape {jnp.shape(x)}")
    kernel = _ints(kernel_size, 2, op, "kernel_size")
    stride = kernel if stride is None else _ints(stride, 2, op, "stride")
    dilation = _ints(dilation, 2, op, "dilation")
    out = tuple(
        _pool_length(size, k, s, d, p, ceil_mode)
        for size, k, s, d, p in zip(jnp.shape(x)[2:], kernel, stride, dilation, pads, strict=True)
    )
    return kernel, stride, dilation, out


def _pool_views(x, fill, kernel, stride, dilation, pads, out):
    """The window views of x padded with `fill`: one (N, C, Ho, Wo) view per
    window offset, the offsets in row-major order. A ceil_mode window that
    overhangs the padding reads `fill` there too."""
    needed = [
        (o - 1) * s + d * (k - 1) + 1
        for o, s, d, k in zip(out, stride, dilation, kernel, strict=True)
    ]
    after = [
        max(hi, n - size - lo)
        for n, size, (lo, hi) in zip(needed, jnp.shape(x)[2:], pads, strict=True)
    ]
    widths = ((0, 0), (0, 0), (pads[0][0], after[0]), (pads[1][0], after[1]))
    xp = jnp.pad(x, widths, constant_values=fill)
    views = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            top, left = i * dilation[0], j * dilation[1]
            rows = slice(top, top + (out[0] - 1) * stride[0] + 1, stride[0])
            cols = slice(left, left + (out[1] - 1) * stride[1] + 1, stride[1])
            views.append(xp[:, :, rows, cols])
    return views


def max_pool2d(
    x, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False
):
    """The maximum of each window (padding never wins: it is -inf); the
    gradient goes to a window's first maximum. `padding`: an int or
    (height, width), both sides; `stride` defaults to the kernel size."""
    if return_indices:
        raise ValueError("ops.max_pool2d: return_indices=True is not supported by k_transform")
    pads = tuple((p, p) for p in _ints(padding, 2, "max_pool2d", "padding"))
    kernel, stride, dilation, out = _pool_geometry(
        x, kernel_size, stride, pads, dilation, ceil_mode, "max_pool2d"
    )
    views = _pool_views(x, -jnp.inf, kernel, stride, dilation, pads, out)
    stacked = jnp.stack(views, axis=-1)
    first = jnp.argmax(stacked, axis=-1, keepdims=True)
    return jnp.squeeze(jnp.take_along_axis(stacked, first, axis=-1), -1)


def _window_counts(size, kernel, stride, pad, out, count_pad) -> np.ndarray:
    """How many entries of each window along one axis are the input (or its
    padding, with `count_pad`); a ceil_mode window's overhang never counts."""
    lo, hi = (0, size + pad[0] + pad[1]) if count_pad else (pad[0], pad[0] + size)
    starts = np.arange(out) * stride
    return np.clip(np.minimum(starts + kernel, hi) - np.maximum(starts, lo), 0, None)


def avg_pool2d(
    input_x,
    kernel_size=1,
    stride=1,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=0,
):
    """Window sums over the number of entries a window covers (its zero
    padding too, with `count_include_pad`), or over `divisor_override` when
    it is not 0. `padding`: an int, or (top, bottom, left, right)."""
    top, bottom, left, right = _ints(padding, 4, "avg_pool2d", "padding")
    pads = ((top, bottom), (left, right))
    kernel, stride, dilation, out = _pool_geometry(
        input_x, kernel_size, stride, pads, 1, ceil_mode, "avg_pool2d"
    )
    total = sum(_pool_views(input_x, 0.0, kernel, stride, dilation, pads, out))
    if divisor_override:
        return total / divisor_override
    height, width = jnp.shape(input_x)[2:]
    rows = _window_counts(height, kernel[0], stride[0], pads[0], out[0], count_include_pad)
    cols = _window_counts(width, kernel[1], stride[1], pads[1], out[1], count_include_pad)
    counts = jnp.asarray(np.outer(rows, cols), jnp.result_type(input_x))
    return total / jax.lax.stop_gradient(counts)  # a table of the shape: no gradient


# -- resizing: one spatial axis at a time, the last first (MindSpore's kernels
# interpolate along the width, then the height)


def _resize_scale(n_in, n_out, align_corners):
    """Input positions per output position, in float32 as MindSpore's kernels."""
    if align_corners and n_out > 1:
        return np.float32(n_in - 1) / np.float32(n_out - 1)
    return np.float32(n_in) / np.float32(n_out)


def _nearest_index(n_in, n_out, exact):
    """floor(i * scale), or floor((i + 0.5) * scale) for "nearest-exact"."""
    position = np.arange(n_out, dtype=np.float32)
    if exact:
        position = position + np.float32(0.5)
    return np.minimum(np.floor(position * _resize_scale(n_in, n_out, False)), n_in - 1).astype(int)


def _linear_table(n_in, n_out, align_corners):
    """(lower, upper, fraction) of each output position between two inputs:
    position i * scale (align_corners) or (i + 0.5) * scale - 0.5, clamped
    to the input."""
    position = np.arange(n_out, dtype=np.float32) * _resize_scale(n_in, n_out, align_corners)
    if not align_corners:
        scale = _resize_scale(n_in, n_out, False)
        position = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    below = np.floor(position)
    lower = np.clip(below, 0, n_in - 1).astype(int)
    upper = np.clip(np.ceil(position), 0, n_in - 1).astype(int)
    return lower, upper, position - below


def _on_axis(values, axis, ndim, dtype):
    """A table over one axis, shaped to broadcast along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = -1
    return jnp.reshape(jnp.asarray(values, dtype), shape)


def _bin_means(x, axis, n_out):
    """Means of `n_out` bins along `axis`: bin i covers [floor(i n / out),
    ceil((i + 1) n / out)) (adaptive average pooling)."""
    n_in, ndim, dtype = jnp.shape(x)[axis], jnp.ndim(x), jnp.result_type(x)
    starts = (np.arange(n_out) * n_in) // n_out
    lengths = -((-(np.arange(n_out) + 1) * n_in) // n_out) - starts
    longest = max(-(-(i + 1) * n_in // n_out) - i * n_in // n_out for i in range(n_out))
    total = 0.0
    for offset in range(longest):  # (Python ints: the trip count is static)
        inside = _on_axis(offset < lengths, axis, ndim, jnp.bool_)
        taken = jnp.take(x, np.minimum(starts + offset, n_in - 1), axis=axis)
        total = total + jnp.where(inside, taken, 0.0)
    return total / jax.lax.stop_gradient(_on_axis(lengths, axis, ndim, dtype))


def _resize_axis(x, axis, n_out, mode, align_corners):
    n_in = jnp.shape(x)[axis]
    if mode == "area":
        return _bin_means(x, axis, n_out)
    if mode != "linear":
        return jnp.take(x, _nearest_index(n_in, n_out, mode == "nearest-exact"), axis=axis)
    lower, upper, fraction = _linear_table(n_in, n_out, align_corners)
    below, above = jnp.take(x, lower, axis=axis), jnp.take(x, upper, axis=axis)
    fraction = jax.lax.stop_gradient(_on_axis(fraction, axis, jnp.ndim(x), jnp.result_type(x)))
    return below + (above - below) * fraction  # (tables of the shape: no gradient)


# mode -> (the input ranks it takes, said in words, and the per-axis method)
_INTERPOLATE = {
    "nearest": ((3, 4), "3-D or 4-D", "nearest"),
    "nearest-exact": ((3, 4), "3-D or 4-D", "nearest-exact"),
    "linear": ((3,), "3-D", "linear"),
    "bilinear": ((4,), "4-D", "linear"),
    "area": ((3, 4), "3-D or 4-D", "area"),
}


def _output_size(shape, size, scale_factor, mode, recompute_scale_factor):
    """The spatial output size: `size`, or floor(input size * scale_factor)
    where MindSpore computes it so (area, or `recompute_scale_factor=True`)."""
    spatial = shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError("ops.interpolate: give exactly one of `size` and `scale_factor`")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("ops.interpolate: recompute_scale_factor=True needs `scale_factor`")
        return tuple(size) if isinstance(size, (tuple, list)) else (size,) * len(spatial)
    if mode != "area" and not recompute_scale_factor:
        raise ValueError(
            f"ops.interpolate: `scale_factor` with mode {mode!r} needs "
            "recompute_scale_factor=True (MindSpore 2.10 refuses it too)"
        )
    scales = (
        scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * len(spatial)
    )
    return tuple(math.floor(n * s) for n, s in zip(spatial, scales, strict=True))


def interpolate(
    input,  # noqa: A002
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
):
    """Resize the spatial axes of (N, C, L) or (N, C, H, W). Modes "nearest"
    (input floor(i * in / out), OpenCV's), "nearest-exact" (floor((i + 0.5)
    * in / out)), "linear" (3-D) and "bilinear" (4-D) (`align_corners`:
    corners to corners, else half-pixel centres), "area" (adaptive average
    pooling). Not supported: "bicubic", "trilinear", 5-D inputs."""
    if mode not in _INTERPOLATE:
        raise ValueError(
            f"ops.interpolate: mode {mode!r} is not supported by k_transform "
            "(it has nearest, nearest-exact, linear, bilinear, area)"
        )
    ranks, said, method = _INTERPOLATE[mode]
    if jnp.ndim(input) not in ranks:
        raise ValueError(
            f"ops.interpolate: mode {mode!r} takes a {said} input, got shape {jnp.shape(input)}"
        )
    if align_corners is not None and method != "linear":
        raise ValueError(f"ops.interpolate: `align_corners` does not apply to mode {mode!r}")
    out = _output_size(jnp.shape(input), size, scale_factor, mode, recompute_scale_factor)
    for k in range(len(out) - 1, -1, -1):
        input = _resize_axis(input, 2 + k, out[k], method, bool(align_corners))
    return input


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """Means of `output_size` (an int, or (H, W) where None keeps that size)
    bins of the last two axes of (N, C, H, W) or (C, H, W)."""
    sizes = _ints(output_size, 2, "adaptive_avg_pool2d", "output_size")
    height, width = jnp.shape(input)[-2:]
    out_h, out_w = (
        (height if sizes[0] is None else sizes[0]),
        (width if sizes[1] is None else sizes[1]),
    )
    rank = jnp.ndim(input)
    return _bin_means(_bin_means(input, rank - 1, out_w), rank - 2, out_h)


# -- dropout

ASSIGN = Assign()


class _SeedKey(Parameter):
    """A non-trainable key Parameter whose value is made at its first read,
    from the seed `set_seed` was last given: a JAX array made at import would
    start JAX's backend, before a data-parallel script's `init()`."""

    def __init__(self, name: str):  # (no value yet: Parameter's would be put on the device)
        self.uid, self.name, self.requires_grad = next(_uids), name, False
        self._key = None

    @property
    def _data(self):
        if self._key is None:
            self._key = jax.device_put(np.asarray(jax.random.PRNGKey(seeds.last_seed())))
        return self._key

    @_data.setter
    def _data(self, value):
        self._key = value

    def restart(self) -> None:
        self._key = None


class _MaskStream(Cell):
    """Where `ops.dropout` and `ops.dropout2d` draw their masks: a key (a
    non-trainable Parameter held outside the Cell's parameters) that each
    call splits and advances with `Assign`, so calls draw fresh masks
    eagerly, under `kt.jit` and in training steps (the new key is state
    written back after the call). `set_seed(s)` restarts it from s."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "key", _SeedKey("ops_dropout_key"))

    def reseed(self, seed: int) -> None:
        self.key.restart()

    def construct(self, seed):
        """A fresh key; a call's `seed` is folded into it."""
        keys = jax.random.split(jnp.asarray(self.key))
        ASSIGN(self.key, keys[0])
        return keys[1] if seed is None else jax.random.fold_in(keys[1], seed)


_STREAM = _MaskStream()
seeds.on_set_seed(_STREAM.reseed)


def _drop(input, p, mask_shape, seed, op):  # noqa: A002
    if not 0 <= p < 1:
        raise ValueError(f"ops.{op}: p must be in [0, 1), got {p}")
    keep = 1.0 - p
    kept = jax.random.bernoulli(_STREAM(seed), keep, mask_shape)
    return jnp.where(kept, input / keep, 0.0)


def dropout(input, p=0.5, training=True, seed=None):  # noqa: A002
    """In training, each entry zeroed with probability p and the others
    scaled by 1 / (1 - p); else the input. The mask is k_transform's draw
    (`_MaskStream`; `seed`, when given, is folded into its key), not
    MindSpore's: the same distribution, other values."""
    if not training:
        return input
    return _drop(input, p, jnp.shape(input), seed, "dropout")


def dropout2d(input, p=0.5, training=True):  # noqa: A002
    """`dropout` of whole channels of (N, C, H, W)."""
    if not training:
        return input
    if jnp.ndim(input) != 4:
        raise ValueError(
            f"ops.dropout2d: the input must be (N, C, H, W), got shape {jnp.shape(input)}"
        )
    return _drop(input, p, (*jnp.shape(input)[:2], 1, 1), None, "dropout2d")
