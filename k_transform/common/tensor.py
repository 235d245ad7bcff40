"""`Tensor(data, dtype)` and MindSpore's dtype names, for scripts that build
inputs as MindSpore users do (`ms.Tensor(images, ms.float32)`).

`Tensor` makes a JAX array (it is a function, not a class: `isinstance(x,
kt.Tensor)` is not available); the dtype names are numpy/JAX dtypes.
"""

from __future__ import annotations

import jax.numpy as jnp

float16 = jnp.float16
float32 = jnp.float32
float64 = jnp.float64
int8 = jnp.int8
int16 = jnp.int16
int32 = jnp.int32
int64 = jnp.int64
uint8 = jnp.uint8
bool_ = jnp.bool_


def Tensor(input_data=None, dtype=None):  # noqa: N802 - MindSpore's class name
    """`input_data` as a JAX array of `dtype` (default: its own)."""
    return jnp.asarray(input_data, dtype=dtype)
