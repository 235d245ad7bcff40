"""Reductions and linear algebra (MindSpore names)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from k_transform.ops.base import JaxPrimitive
from k_transform.ops.mapping import NONE, register_function, register_method


class ReduceSum(JaxPrimitive):
    """`ReduceSum(keep_dims)(x, axis=None)`: `jnp.sum(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.sum)
    jax_name = "jnp.sum"
    jax_kwargs = {"keep_dims": "keepdims"}
    n_inputs = 2

    def __init__(self, keep_dims: bool = False):
        super().__init__(keep_dims=keep_dims)

    def impl(self, x, axis=None):
        return jnp.sum(x, axis=axis, keepdims=self.keep_dims)

    def emit(self, e, args):
        axis = "" if args[1] == "None" else f", axis={args[1]}"
        keep = ", keepdims=True" if self.keep_dims else ""
        return f"{e.ref(jnp.sum, 'jnp.sum')}({args[0]}{axis}{keep})"


class MatMul(JaxPrimitive):
    """`MatMul(transpose_a, transpose_b)(a, b)` for 2-D arrays."""

    n_inputs = 2

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        super().__init__(transpose_a=transpose_a, transpose_b=transpose_b)

    def impl(self, a, b):
        a = a.T if self.transpose_a else a
        b = b.T if self.transpose_b else b
        return jnp.matmul(a, b)

    def emit(self, e, args):
        a = f"{args[0]}.T" if self.transpose_a else args[0]
        b = f"{args[1]}.T" if self.transpose_b else args[1]
        return f"{a} @ {b}"


@register_function(jnp.sum, np.sum)
def _sum(call):
    if not call.names_ok(("a", "axis", "keepdims"), 3):
        return None
    keep = call.static(2, "keepdims", False)
    axis = call.arg(1, "axis", NONE)
    return ReduceSum(keep_dims=keep), [call.arg(0, "a"), axis]


@register_method("sum")
def _sum_method(call):
    if not call.names_ok(("axis", "keepdims"), 3):
        return None
    keep = call.static(2, "keepdims", False)
    axis = call.arg(1, "axis", NONE)
    return ReduceSum(keep_dims=keep), [call.args[0], axis]
