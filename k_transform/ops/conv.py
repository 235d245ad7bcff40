"""Convolution and pooling primitives, NCHW like MindSpore.

`Conv2D(stride, padding, dilation, group)(x, w)`: x (N, C, H, W), w (O, C/group,
kh, kw). `padding` is "SAME", "VALID", an int, a pair (ph, pw) or
((top, bottom), (left, right)); `stride` and `dilation` an int or a pair.
Its gradients are primitives with rules of their own, as in MindSpore, so
second order works:

- `Conv2DBackpropInput(...)(dout, w, x_shape)`: the transposed convolution
  (`Conv2DTranspose` is the same primitive under its user-facing name);
- `Conv2DBackpropFilter(...)(dout, x, w_shape)`: the correlation of x and dout.

Arrays of different float dtypes are promoted as jnp functions promote them
(`jnp.result_type`: float64 images through float32 weights give float64),
and each gradient takes the dtype of its input.

`MaxPool(kernel_size, strides, padding)(x)` and `AvgPool(...)(x)` pool over H
and W. `MaxPoolGrad(...)(x, dout)` routes each window's gradient to its first
maximum; `MaxPoolGradGrad(...)(x, ddx)` gathers from those positions (the two
are each other's adjoints). `AvgPool` divides by the window size (padding
counts as zeros); `AvgPoolGrad(...)(x, dout)` spreads `dout` evenly (x gives
the shape only). The padding arithmetic is XLA's (jax's transpose rules of
`conv_general_dilated` and `reduce_window`), written out here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import AttrPrimitive
from k_transform.ops.mapping import register_function

NCHW = ("NCHW", "OIHW", "NCHW")


def pair(v) -> tuple:
    """`v` as a pair of ints: 2 -> (2, 2), [1, 2] -> (1, 2)."""
    if isinstance(v, (int, np.integer)):
        return (int(v), int(v))
    return tuple(int(a) for a in v)


def normalize_padding(padding):
    """ "SAME" / "VALID", or ((top, bottom), (left, right)) from an int or pairs."""
    if isinstance(padding, str):
        return padding.upper()
    if isinstance(padding, (int, np.integer)):
        return ((int(padding),) * 2,) * 2
    padding = tuple(padding)
    if all(isinstance(p, (int, np.integer)) for p in padding):
        return tuple((int(p), int(p)) for p in padding)
    return tuple(pair(p) for p in padding)


def spatial_pads(in_hw, kernel, strides, dilation, padding) -> tuple:
    """Explicit ((top, bottom), (left, right)) for a window over `in_hw`."""
    if not isinstance(padding, str):
        return padding
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True)]
    return tuple(tuple(p) for p in jax.lax.padtype_to_pads(in_hw, dilated, strides, padding))


def promoted(*arrays) -> list:
    """`arrays` in their common dtype, as jnp functions promote (lax does not)."""
    dtype = jnp.result_type(*arrays)
    return [jnp.asarray(a, dtype) for a in arrays]


def _dilated(sizes, factors) -> np.ndarray:
    return np.array([0 if s == 0 else 1 + f * (s - 1) for s, f in zip(sizes, factors, strict=True)])


class _ConvBase(AttrPrimitive):
    n_inputs = 3

    def __init__(self, stride=1, padding="VALID", dilation=1, group=1):
        super().__init__(
            stride=pair(stride),
            padding=normalize_padding(padding),
            dilation=pair(dilation),
            group=int(group),
        )

    def pads(self, in_hw, kernel) -> tuple:
        return spatial_pads(in_hw, kernel, self.stride, self.dilation, self.padding)


class Conv2D(_ConvBase):
    """`Conv2D(stride, padding, dilation, group)(x, w)`: 2-D cross-correlation."""

    n_inputs = 2

    def impl(self, x, w):
        x, w = promoted(x, w)
        return jax.lax.conv_general_dilated(
            x,
            w,
            self.stride,
            self.pads(jnp.shape(x)[2:], jnp.shape(w)[2:]),
            rhs_dilation=self.dilation,
            dimension_numbers=NCHW,
            feature_group_count=self.group,
        )


class Conv2DBackpropInput(_ConvBase):
    """`(dout, w, x_shape)`: the gradient of `Conv2D(x, w)` with respect to x,
    a transposed convolution (dout dilated by the stride, kernel flipped)."""

    def impl(self, dout, w, x_shape):
        dout, w = promoted(dout, w)
        x_hw, kernel, out_hw = tuple(x_shape)[2:], jnp.shape(w)[2:], jnp.shape(dout)[2:]
        lo = np.array([p[0] for p in self.pads(x_hw, kernel)])
        before = _dilated(kernel, self.dilation) - lo - 1
        after = np.array(x_hw) + _dilated(kernel, self.dilation) - 1
        after = after - _dilated(out_hw, self.stride) - before
        if self.group > 1:  # (O, I/g, ...) -> (O/g, I, ...): groups move to the out axis
            o, i = jnp.shape(w)[:2]
            w = jnp.reshape(w, (self.group, o // self.group, i, *kernel))
            w = jnp.reshape(jnp.swapaxes(w, 0, 1), (o // self.group, self.group * i, *kernel))
        return jax.lax.conv_general_dilated(
            dout,
            jnp.flip(w, (2, 3)),
            (1, 1),
            [(int(b), int(a)) for b, a in zip(before, after, strict=True)],
            lhs_dilation=self.stride,
            rhs_dilation=self.dilation,
            dimension_numbers=("NCHW", "IOHW", "NCHW"),
            feature_group_count=self.group,
        )


class Conv2DTranspose(Conv2DBackpropInput):
    """`(dout, w, x_shape)`: MindSpore's name for `Conv2DBackpropInput`."""


class Conv2DBackpropFilter(_ConvBase):
    """`(dout, x, w_shape)`: the gradient of `Conv2D(x, w)` with respect to w."""

    def impl(self, dout, x, w_shape):
        dout, x = promoted(dout, x)
        x_hw, kernel, out_hw = jnp.shape(x)[2:], tuple(w_shape)[2:], jnp.shape(dout)[2:]
        lo = np.array([p[0] for p in self.pads(x_hw, kernel)])
        hi = _dilated(out_hw, self.stride) - np.array(x_hw)
        hi = hi + _dilated(kernel, self.dilation) - lo - 1
        return jax.lax.conv_general_dilated(
            x,
            dout,
            self.dilation,
            [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)],
            rhs_dilation=self.stride,
            dimension_numbers=("CNHW", "IOHW", "CNHW"),
            batch_group_count=self.group,
        )


# -- pooling ----------------------------------------------------------------------------
class _Pool(AttrPrimitive):
    n_inputs = 1

    def __init__(self, kernel_size=2, strides=None, padding="VALID"):
        kernel = pair(kernel_size)
        super().__init__(
            kernel_size=kernel,
            strides=kernel if strides is None else pair(strides),
            padding=normalize_padding(padding),
        )

    def full_pads(self, x) -> list:
        """lax.pad config for (N, C, H, W): no padding of N and C."""
        pads = spatial_pads(jnp.shape(x)[2:], self.kernel_size, self.strides, (1, 1), self.padding)
        return [(0, 0, 0), (0, 0, 0), *[(lo, hi, 0) for lo, hi in pads]]

    def padded_hw(self, x) -> tuple:
        config = self.full_pads(x)
        return tuple(jnp.shape(x)[k] + config[k][0] + config[k][1] for k in (2, 3))

    def out_hw(self, x) -> tuple:
        return tuple(
            (p - k) // s + 1
            for p, k, s in zip(self.padded_hw(x), self.kernel_size, self.strides, strict=True)
        )

    def windows(self, xp, out_hw) -> jax.Array:
        """The windows of padded `xp` as a last axis: (N, C, Ho, Wo, kh * kw)."""
        (sh, sw), (kh, kw) = self.strides, self.kernel_size
        (ho, wo) = out_hw
        slices = []
        for di in range(kh):
            for dj in range(kw):
                rows = slice(di, di + (ho - 1) * sh + 1, sh)
                slices.append(xp[:, :, rows, dj : dj + (wo - 1) * sw + 1 : sw])
        return jnp.stack(slices, axis=-1)

    def unwindows(self, parts, padded_hw) -> jax.Array:
        """The adjoint of `windows`: each window's entries added back in place."""
        (sh, sw), (kh, kw) = self.strides, self.kernel_size
        ho, wo = jnp.shape(parts)[2:4]
        total = 0
        for di in range(kh):
            for dj in range(kw):
                config = [
                    (0, 0, 0),
                    (0, 0, 0),
                    (di, padded_hw[0] - di - (ho - 1) * sh - 1, sh - 1),
                    (dj, padded_hw[1] - dj - (wo - 1) * sw - 1, sw - 1),
                ]
                total = total + jax.lax.pad(parts[..., di * kw + dj], _zero(parts), config)
        return total

    def window_reduce(self, x, init, op):
        return jax.lax.reduce_window(
            jax.lax.pad(x, init, self.full_pads(x)),
            init,
            op,
            (1, 1, *self.kernel_size),
            (1, 1, *self.strides),
            "VALID",
        )


def _zero(x):
    return jnp.zeros((), jnp.result_type(x))


def _neg_inf(x):
    return jnp.array(-jnp.inf, jnp.result_type(x))


def _crop(xp, config) -> jax.Array:
    return jax.lax.pad(xp, _zero(xp), [(-lo, -hi, 0) for lo, hi, _ in config])


class MaxPool(_Pool):
    """`MaxPool(kernel_size, strides, padding)(x)`: the maximum of each window."""

    def impl(self, x):
        return self.window_reduce(x, _neg_inf(x), jax.lax.max)


class _MaxPoolRouting(_Pool):
    n_inputs = 2

    def first_max(self, x):
        """One-hot (N, C, Ho, Wo, kh * kw): each window's first maximum."""
        xp = jax.lax.pad(x, _neg_inf(x), self.full_pads(x))
        windows = self.windows(xp, self.out_hw(x))
        k = jnp.argmax(windows, axis=-1)
        return k[..., None] == jnp.arange(jnp.shape(windows)[-1])


class MaxPoolGrad(_MaxPoolRouting):
    """`(x, dout)`: dout routed to the first maximum of each window of x."""

    def impl(self, x, dout):
        parts = jnp.where(self.first_max(x), dout[..., None], _zero(dout))
        return _crop(self.unwindows(parts, self.padded_hw(x)), self.full_pads(x))


class MaxPoolGradGrad(_MaxPoolRouting):
    """`(x, ddx)`: ddx read at the first maximum of each window of x (the
    adjoint of `MaxPoolGrad` in its second input)."""

    def impl(self, x, ddx):
        windows = self.windows(jax.lax.pad(ddx, _zero(ddx), self.full_pads(x)), self.out_hw(x))
        return jnp.sum(jnp.where(self.first_max(x), windows, _zero(ddx)), axis=-1)


class AvgPool(_Pool):
    """`AvgPool(kernel_size, strides, padding)(x)`: window sums / window size."""

    def impl(self, x):
        size = self.kernel_size[0] * self.kernel_size[1]
        return self.window_reduce(x, _zero(x), jax.lax.add) / size


class AvgPoolGrad(_Pool):
    """`(x, dout)`: each entry of dout spread evenly over its window (x: the shape)."""

    n_inputs = 2

    def impl(self, x, dout):
        size = self.kernel_size[0] * self.kernel_size[1]
        parts = jnp.broadcast_to(dout[..., None], (*jnp.shape(dout), size))
        return _crop(self.unwindows(parts, self.padded_hw(x)), self.full_pads(x)) / size


# -- jax spellings ----------------------------------------------------------------------
@register_function(jax.lax.conv)
def _lax_conv(call):
    if not call.names_ok(("lhs", "rhs", "window_strides", "padding"), 4):
        return None
    prim = Conv2D(call.static(2, "window_strides"), call.static(3, "padding"))
    return prim, [call.arg(0, "lhs"), call.arg(1, "rhs")]


_CONV_GENERAL = (
    "lhs",
    "rhs",
    "window_strides",
    "padding",
    "lhs_dilation",
    "rhs_dilation",
    "dimension_numbers",
    "feature_group_count",
)


@register_function(jax.lax.conv_general_dilated)
def _lax_conv_general_dilated(call):
    """NCHW / OIHW only (the default dimension numbers), no lhs dilation."""
    if not call.names_ok(_CONV_GENERAL, 8) or call.static(4, "lhs_dilation") is not None:
        return None
    if call.static(2, "window_strides") is None:  # (a probe without arguments)
        return None
    dims = call.static(6, "dimension_numbers")
    if dims is not None and tuple(dims) != NCHW:
        return None
    prim = Conv2D(
        call.static(2, "window_strides"),
        call.static(3, "padding"),
        call.static(5, "rhs_dilation") or 1,
        call.static(7, "feature_group_count", 1),
    )
    return prim, [call.arg(0, "lhs"), call.arg(1, "rhs")]


# == gradient rules ==============================================================
# Rules for convolution and pooling (NCHW).
#
# Each gradient is a primitive with a rule of its own, as in MindSpore, so the
# rules differentiate again: `Conv2D`'s input gradient is the transposed
# convolution `Conv2DBackpropInput` and its weight gradient
# `Conv2DBackpropFilter`; the three are bilinear and each one's rule is built
# from the other two. `MaxPoolGrad` / `MaxPoolGradGrad` and `AvgPool` /
# `AvgPoolGrad` are adjoint pairs (the window positions are constant almost
# everywhere, so x gets no second-order gradient). A convolution's gradients
# are cast to their inputs' dtypes (its inputs may differ: `promoted`).


@bprop_getters.register(Conv2D)
def get_bprop_conv2d(self):
    backprop_input = Conv2DBackpropInput(**self.attrs)
    backprop_filter = Conv2DBackpropFilter(**self.attrs)

    def bprop(x, w, out, dout):
        dx = backprop_input(dout, w, jnp.shape(x))
        dw = backprop_filter(dout, x, jnp.shape(w))
        return dx.astype(x.dtype), dw.astype(w.dtype)

    return bprop


@bprop_getters.register(Conv2DBackpropInput)
def get_bprop_conv2d_backprop_input(self):
    conv = Conv2D(**self.attrs)
    backprop_filter = Conv2DBackpropFilter(**self.attrs)

    def bprop(g, w, x_shape, out, dout):
        dg, dw = conv(dout, w), backprop_filter(g, dout, jnp.shape(w))
        return dg.astype(g.dtype), dw.astype(w.dtype), None

    return bprop


@bprop_getters.register(Conv2DBackpropFilter)
def get_bprop_conv2d_backprop_filter(self):
    conv = Conv2D(**self.attrs)
    backprop_input = Conv2DBackpropInput(**self.attrs)

    def bprop(g, x, w_shape, out, dout):
        dg, dx = conv(x, dout), backprop_input(g, dout, jnp.shape(x))
        return dg.astype(g.dtype), dx.astype(x.dtype), None

    return bprop


@bprop_getters.register(MaxPool)
def get_bprop_max_pool(self):
    max_pool_grad = MaxPoolGrad(**self.attrs)
    return lambda x, out, dout: (max_pool_grad(x, dout),)


@bprop_getters.register(MaxPoolGrad)
def get_bprop_max_pool_grad(self):
    max_pool_grad_grad = MaxPoolGradGrad(**self.attrs)
    return lambda x, g, out, dout: (None, max_pool_grad_grad(x, dout))


@bprop_getters.register(MaxPoolGradGrad)
def get_bprop_max_pool_grad_grad(self):
    max_pool_grad = MaxPoolGrad(**self.attrs)
    return lambda x, h, out, dout: (None, max_pool_grad(x, dout))


@bprop_getters.register(AvgPool)
def get_bprop_avg_pool(self):
    avg_pool_grad = AvgPoolGrad(**self.attrs)
    return lambda x, out, dout: (avg_pool_grad(x, dout),)


@bprop_getters.register(AvgPoolGrad)
def get_bprop_avg_pool_grad(self):
    avg_pool = AvgPool(**self.attrs)
    return lambda x, g, out, dout: (None, avg_pool(dout))
