"""Rules for convolution and pooling (NCHW).

Each gradient is a primitive with a rule of its own, as in MindSpore, so the
rules differentiate again: `Conv2D`'s input gradient is the transposed
convolution `Conv2DBackpropInput` and its weight gradient
`Conv2DBackpropFilter`; the three are bilinear and each one's rule is built
from the other two. `MaxPoolGrad` / `MaxPoolGradGrad` and `AvgPool` /
`AvgPoolGrad` are adjoint pairs (the window positions are constant almost
everywhere, so x gets no second-order gradient).
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.registry import bprop_getters


@bprop_getters.register(ops.Conv2D)
def get_bprop_conv2d(self):
    backprop_input = ops.Conv2DBackpropInput(**self.attrs)
    backprop_filter = ops.Conv2DBackpropFilter(**self.attrs)

    def bprop(x, w, out, dout):
        return backprop_input(dout, w, jnp.shape(x)), backprop_filter(dout, x, jnp.shape(w))

    return bprop


@bprop_getters.register(ops.Conv2DBackpropInput)
def get_bprop_conv2d_backprop_input(self):
    conv = ops.Conv2D(**self.attrs)
    backprop_filter = ops.Conv2DBackpropFilter(**self.attrs)

    def bprop(g, w, x_shape, out, dout):
        return conv(dout, w), backprop_filter(g, dout, jnp.shape(w)), None

    return bprop


@bprop_getters.register(ops.Conv2DBackpropFilter)
def get_bprop_conv2d_backprop_filter(self):
    conv = ops.Conv2D(**self.attrs)
    backprop_input = ops.Conv2DBackpropInput(**self.attrs)

    def bprop(g, x, w_shape, out, dout):
        return conv(x, dout), backprop_input(g, dout, jnp.shape(x)), None

    return bprop


@bprop_getters.register(ops.MaxPool)
def get_bprop_max_pool(self):
    max_pool_grad = ops.MaxPoolGrad(**self.attrs)
    return lambda x, out, dout: (max_pool_grad(x, dout),)


@bprop_getters.register(ops.MaxPoolGrad)
def get_bprop_max_pool_grad(self):
    max_pool_grad_grad = ops.MaxPoolGradGrad(**self.attrs)
    return lambda x, g, out, dout: (None, max_pool_grad_grad(x, dout))


@bprop_getters.register(ops.MaxPoolGradGrad)
def get_bprop_max_pool_grad_grad(self):
    max_pool_grad = ops.MaxPoolGrad(**self.attrs)
    return lambda x, h, out, dout: (None, max_pool_grad(x, dout))


@bprop_getters.register(ops.AvgPool)
def get_bprop_avg_pool(self):
    avg_pool_grad = ops.AvgPoolGrad(**self.attrs)
    return lambda x, out, dout: (avg_pool_grad(x, dout),)


@bprop_getters.register(ops.AvgPoolGrad)
def get_bprop_avg_pool_grad(self):
    avg_pool = ops.AvgPool(**self.attrs)
    return lambda x, g, out, dout: (None, avg_pool(dout))
