"""Rules for the arithmetic operators (`a + b`, `a * b`, `a @ b`, ...).

Binary operators broadcast, so each gradient is summed back to its input's
shape with `sum_to`.
"""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.helpers import zero_gradient
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()
sum_to_tail = ops.SumTo(tail=True)


@bprop_getters.register(ops.Add)
def get_bprop_add(self):
    def bprop(x, y, out, dout):
        return sum_to(dout, x), sum_to_tail(dout, y)  # tail: `t1 + t2` of tuples

    return bprop


@bprop_getters.register(ops.Sub)
def get_bprop_sub(self):
    def bprop(x, y, out, dout):
        return sum_to(dout, x), sum_to(-dout, y)

    return bprop


@bprop_getters.register(ops.Mul)
def get_bprop_mul(self):
    def bprop(x, y, out, dout):
        return sum_to(dout * y, x), sum_to(dout * x, y)

    return bprop


@bprop_getters.register(ops.Div)
def get_bprop_div(self):
    def bprop(x, y, out, dout):
        dx = dout / y
        return sum_to(dx, x), sum_to(-dx * out, y)

    return bprop


@bprop_getters.register(ops.Pow)
def get_bprop_pow(self):
    def bprop(x, y, out, dout):
        dx = dout * y * x ** (y - 1)
        safe_x = jnp.where(x > 0, x, 1.0)
        dy = dout * out * jnp.where(x > 0, jnp.log(safe_x), 0.0)
        return sum_to(dx, x), sum_to(dy, y)

    return bprop


@bprop_getters.register(ops.Neg)
def get_bprop_neg(self):
    def bprop(x, out, dout):
        return (-dout,)

    return bprop


@bprop_getters.register(ops.Pos)
def get_bprop_pos(self):
    def bprop(x, out, dout):
        return (dout,)

    return bprop


@bprop_getters.register(ops.NumpyMatMul)
def get_bprop_numpy_matmul(self):
    def bprop(x, y, out, dout):
        if x.ndim == 1 and y.ndim == 1:
            return dout * y, dout * x
        if x.ndim == 1:  # x is a row: dout (..., k) -> (..., 1, k)
            g = jnp.expand_dims(dout, -2)
            dx = jnp.squeeze(g @ jnp.swapaxes(y, -1, -2), -2)
            return sum_to(dx, x), sum_to(jnp.expand_dims(x, -1) * g, y)
        if y.ndim == 1:  # y is a column: dout (..., m) -> (..., m, 1)
            g = jnp.expand_dims(dout, -1)
            dy = jnp.squeeze(jnp.swapaxes(x, -1, -2) @ g, -1)
            return sum_to(g * y, x), sum_to(dy, y)
        if x.ndim > 2 and y.ndim == 2:  # batch @ matrix: one contraction for dy
            dy = jnp.reshape(x, (-1, jnp.shape(y)[0])).T @ jnp.reshape(dout, (-1, jnp.shape(y)[1]))
            return dout @ y.T, dy
        if x.ndim == 2 and y.ndim > 2:  # matrix @ batch: one contraction for dx
            g = jnp.reshape(jnp.moveaxis(dout, -2, 0), (jnp.shape(x)[0], -1))
            y2 = jnp.reshape(jnp.moveaxis(y, -2, 0), (jnp.shape(x)[1], -1))
            return g @ y2.T, x.T @ dout
        dx = dout @ jnp.swapaxes(y, -1, -2)
        dy = jnp.swapaxes(x, -1, -2) @ dout
        return sum_to(dx, x), sum_to(dy, y)

    return bprop


@bprop_getters.register(ops.Mod)
def get_bprop_mod(self):
    def bprop(x, y, out, dout):
        return sum_to(dout, x), sum_to(-dout * jnp.floor_divide(x, y), y)

    return bprop


zero_gradient(
    ops.FloorDiv,
    ops.Equal,
    ops.NotEqual,
    ops.Less,
    ops.LessEqual,
    ops.Greater,
    ops.GreaterEqual,
    ops.Is,
    ops.IsNot,
    ops.LeftShift,
    ops.RightShift,
    ops.BitwiseAnd,
    ops.BitwiseOr,
    ops.BitwiseXor,
    ops.Invert,
)
