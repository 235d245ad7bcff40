"""More of MindSpore's layers: Conv1d, BatchNorm1d, AdaptiveAvgPool2d.

Each is written over the 2-D layer or primitive it extends (MindSpore builds
`Conv1d` on `Conv2D` the same way), so its gradient is theirs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import ops
from k_transform.cell import Cell, Parameter
from k_transform.nn.layers import (
    DEFAULT_WEIGHT,
    BatchNorm2d,
    _conv_padding,
    _default_bias,
    _plus,
    _values,
)


class Conv1d(Cell):
    """1-D convolution of NCW sequences, MindSpore's: the input is viewed as
    (N, C, 1, W) and convolved with a (1, kernel_size) kernel, so the weight
    has MindSpore's shape (out, in / group, 1, kernel_size) (a 3-D array given
    as `weight_init` gains the axis). `pad_mode` "same" (the default), "valid"
    or "pad" (`padding`: an int, both ends); `has_bias=False`; `weight_init`
    / `bias_init` and `seed` as `Conv2d`.
    """

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        pad_mode="same",
        padding=0,
        dilation=1,
        group=1,
        has_bias=False,
        weight_init=None,
        bias_init=None,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.kernel_size = (
            in_channels,
            out_channels,
            kernel_size,
        )
        self.pad_mode, self.padding = pad_mode, padding
        shape = (out_channels, in_channels // group, 1, kernel_size)
        weight_init = DEFAULT_WEIGHT if weight_init is None else weight_init
        if not isinstance(weight_init, (str, int, float)) and np.ndim(weight_init) == 3:
            weight_init = np.expand_dims(np.asarray(weight_init), 2)
        self.weight = Parameter(_values(weight_init, shape, seed, dtype))
        self.has_bias = has_bias
        if has_bias:
            fan_in = in_channels // group * kernel_size
            bias_init = _default_bias(fan_in) if bias_init is None else bias_init
            self.bias = Parameter(_values(bias_init, (out_channels,), _plus(seed, 1), dtype))
        pads = _conv_padding(pad_mode, (0, 0, padding, padding) if pad_mode == "pad" else padding)
        self.conv = ops.Conv2D((1, stride), pads, (1, dilation), group)

    def construct(self, x):
        y = self.conv(jnp.expand_dims(x, 2), self.weight)
        if self.has_bias:
            y = y + jnp.reshape(self.bias, (1, -1, 1, 1))
        return jnp.squeeze(y, 2)


class BatchNorm1d(BatchNorm2d):
    """`BatchNorm2d` of (N, C) or (N, C, L) inputs: statistics per channel
    (axis 1) over the other axes; MindSpore's signature and defaults. (As
    k_transform's BatchNorm2d, the Parameters are listed gamma, beta,
    moving_mean, moving_variance; MindSpore lists the moving ones first and
    names them "mean" and "variance".)"""

    def normalise_with_moving(self, x):
        scale = self.gamma * jax.lax.rsqrt(self.moving_variance + self.eps)
        shift = self.beta - self.moving_mean * scale
        shape = (-1,) + (1,) * (jnp.ndim(x) - 2)  # along axis 1
        return x * jnp.reshape(scale, shape) + jnp.reshape(shift, shape)


def _bins(size: int, out: int) -> np.ndarray:
    """(out, size): row i averages [floor(i * size / out), ceil((i + 1) * size / out))."""
    i = np.arange(out)[:, None]
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    inside = (np.arange(size)[None, :] >= start) & (np.arange(size)[None, :] < end)
    return (inside / (end - start)).astype(np.float32)


class AdaptiveAvgPool2d(Cell):
    """Means over `output_size` (an int, or (H_out, W_out) where None keeps
    that size) bins of the last two axes, (N, C, H, W) or (C, H, W): bin i of
    an axis of size n covers [floor(i n / out), ceil((i + 1) n / out)), as
    MindSpore. Computed as `rows @ x @ cols.T` with constant averaging
    matrices, so the gradient spreads each bin's sensitivity evenly."""

    def __init__(self, output_size):
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.output_size = tuple(output_size)

    def construct(self, x):
        height, width = jnp.shape(x)[-2:]
        out_h, out_w = self.output_size
        rows = _bins(height, height if out_h is None else out_h)
        cols = _bins(width, width if out_w is None else out_w)
        return jnp.matmul(jnp.matmul(rows, x), jnp.transpose(cols))
