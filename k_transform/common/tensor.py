"""`Tensor(data, dtype)` and MindSpore's dtype names, for scripts that build
inputs as MindSpore users do (`ms.Tensor(images, ms.float32)`).

`Tensor(...)` makes a JAX array; `isinstance(x, Tensor)` holds for JAX
arrays (traced ones too) and Parameters; the dtype names are numpy/JAX dtypes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.protocol import kt_attribute
from k_transform.runtime.values import strongly_typed

float16 = jnp.float16
float32 = jnp.float32
float64 = jnp.float64
int8 = jnp.int8
int16 = jnp.int16
int32 = jnp.int32
int64 = jnp.int64
uint8 = jnp.uint8
bool_ = jnp.bool_


def tensor(input_data=None, dtype=None):
    """`input_data` as a JAX array of `dtype` (default: its own). Python
    numbers (and lists of them) give MindSpore's dtypes, not JAX's weak
    types (`runtime.values.strongly_typed`)."""
    return jnp.asarray(strongly_typed(input_data) if dtype is None else input_data, dtype=dtype)


class _TensorType(type):
    """`isinstance(x, Tensor)`: whether `x` is a JAX array (a traced one too)
    or a Parameter (MindSpore's Parameter is a Tensor)."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, jax.Array) or kt_attribute(obj, "__kt_parameter__", False) is True


class Tensor(metaclass=_TensorType):
    """MindSpore's `Tensor(input_data, dtype)`: makes a JAX array of `dtype`
    (`tensor`); the class only answers `isinstance(x, Tensor)` (JAX arrays
    and Parameters are Tensors). In parsed code its call is `tensor`'s."""

    def __new__(cls, input_data=None, dtype=None):
        return tensor(input_data, dtype)

    @staticmethod
    def __kt_lower__(builder, args, kwargs, node):
        return builder.call(builder.fp.value_node(tensor, "Tensor", node), args, kwargs, node)
