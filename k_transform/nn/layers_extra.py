"""More of MindSpore's layers: Conv1d, Conv2dTranspose, BatchNorm1d,
AdaptiveAvgPool2d.

Each is written over the 2-D layer or primitive it extends (MindSpore builds
`Conv1d` on `Conv2D` and `Conv2dTranspose` on Conv2D's input gradient the same
way), so its gradient is theirs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import ops
from k_transform.cell import Cell
from k_transform.nn.layers import (
    BatchNorm2d,
    _conv_padding,
    _weight_and_bias,
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
        if not isinstance(weight_init, (str, int, float)) and np.ndim(weight_init) == 3:
            weight_init = np.expand_dims(np.asarray(weight_init), 2)
        fan_in = in_channels // group * kernel_size
        _weight_and_bias(self, shape, fan_in, has_bias, weight_init, bias_init, seed, dtype)
        pads = _conv_padding(pad_mode, (0, 0, padding, padding) if pad_mode == "pad" else padding)
        self.conv = ops.Conv2D((1, stride), pads, (1, dilation), group)

    def construct(self, x):
        y = self.conv(jnp.expand_dims(x, 2), self.weight)
        if self.has_bias:
            y = y + jnp.reshape(self.bias, (1, -1, 1, 1))
        return jnp.squeeze(y, 2)


def _transposed_length(pad_mode, size, kernel, stride, dilation, padding) -> int:
    """MindSpore's output length of a transposed convolution along one axis."""
    kernel = kernel + (kernel - 1) * (dilation - 1)
    if pad_mode == "valid":
        return size * stride + max(kernel - stride, 0)
    if pad_mode == "same":
        return size * stride
    return size * stride - padding + kernel - stride


class Conv2dTranspose(Cell):
    """The transposed 2-D convolution of NCHW images: the gradient of a
    `Conv2d(out_channels, in_channels, ...)` with respect to its input, as
    MindSpore computes it. The weight has MindSpore's shape (in, out / group,
    kh, kw); the output is (N, out, H', W') with MindSpore's sizes: H' = H *
    stride ("same"), H * stride + max(k' - stride, 0) ("valid"), H * stride -
    padding + k' - stride ("pad"; k' the dilated kernel), then
    `output_padding` (an int or (bottom, right); "pad" only) zero rows and
    columns added at the bottom and right. Other arguments as `Conv2d`.
    """

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        pad_mode="same",
        padding=0,
        output_padding=0,
        dilation=1,
        group=1,
        has_bias=False,
        weight_init=None,
        bias_init=None,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        kernel, strides = ops.conv.pair(kernel_size), ops.conv.pair(stride)
        dilations, extra = ops.conv.pair(dilation), ops.conv.pair(output_padding)
        for e, s, d in zip(extra, strides, dilations, strict=True):
            if not 0 <= e < max(s, d):
                raise ValueError(
                    f"output_padding must be in [0, max(stride, dilation)), got {output_padding}"
                )
        if pad_mode != "pad" and any(extra):
            raise ValueError("output_padding must be 0 unless pad_mode is 'pad'")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.pad_mode, self.padding, self.output_padding = pad_mode, padding, output_padding
        self.stride, self.dilation, self.extra = strides, dilations, extra
        pads = padding if isinstance(padding, (tuple, list)) else (padding,) * 4
        self.pad_sums = (pads[0] + pads[1], pads[2] + pads[3])
        shape = (in_channels, out_channels // group, *kernel)
        fan_in = out_channels // group * kernel[0] * kernel[1]  # MindSpore's, of this shape
        _weight_and_bias(self, shape, fan_in, has_bias, weight_init, bias_init, seed, dtype)
        self.conv_input_grad = ops.Conv2DTranspose(
            strides, _conv_padding(pad_mode, padding), dilations, group
        )

    def output_shape(self, x_shape) -> tuple:
        n, _, height, width = x_shape
        sizes = [
            _transposed_length(self.pad_mode, size, k, s, d, p)
            for size, k, s, d, p in zip(
                (height, width),
                self.kernel_size,
                self.stride,
                self.dilation,
                self.pad_sums,
                strict=True,
            )
        ]
        return (n, self.out_channels, *sizes)

    def construct(self, x):
        y = self.conv_input_grad(x, self.weight, self.output_shape(jnp.shape(x)))
        if self.has_bias:
            y = y + jnp.reshape(self.bias, (1, -1, 1, 1))
        if self.extra != (0, 0):
            y = jnp.pad(y, ((0, 0), (0, 0), (0, self.extra[0]), (0, self.extra[1])))
        return y


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
