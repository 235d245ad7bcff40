"""Structural primitives: shapes of gradients, zeros, stop_gradient.

`SumTo(g, like)` reduces a broadcast gradient back to `like`'s shape;
`GetItemGrad(x, index, dout)` is the gradient of indexing. They are used by
gradient rules and have rules themselves (for second order).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform import runtime as rt
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import map_functions


class SumTo(JaxPrimitive):
    """`g` summed to the shape of `like` (`tail`: the end of a concatenation)."""

    jax_fn = staticmethod(rt.sum_to)
    jax_name = "_rt.sum_to"
    jax_kwargs = {"tail": "tail"}
    n_inputs = 2

    def __init__(self, tail: bool = False):
        super().__init__(tail=tail)

    def emit(self, e, args):
        tail = ", tail=True" if self.tail else ""
        return f"{e.ref(rt.sum_to, self.jax_name)}({args[0]}, {args[1]}{tail})"


GetItemGrad = elementwise(
    "GetItemGrad", rt.getitem_grad, "_rt.getitem_grad", 3, "Zeros like `x` with `dout` at `index`."
)
ZerosLike = elementwise(
    "ZerosLike", rt.zeros_like_value, "_rt.zeros_like_value", 1, "Zeros like x."
)
OnesLike = elementwise("OnesLike", rt.ones_like_value, "_rt.ones_like_value", 1, "Ones like x.")


class StopGradient(JaxPrimitive):
    """`x` forward; no gradient flows back."""

    jax_fn = staticmethod(jax.lax.stop_gradient)
    jax_name = "jax.lax.stop_gradient"
    n_inputs = 1


map_functions(
    {
        ZerosLike: (jnp.zeros_like,),
        OnesLike: (jnp.ones_like,),
        StopGradient: (jax.lax.stop_gradient,),
    }
)
