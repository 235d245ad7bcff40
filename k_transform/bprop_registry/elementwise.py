"""Rules for elementwise math: one line each, `dout * f'(x)`."""

from __future__ import annotations

import jax.numpy as jnp

from k_transform import ops
from k_transform.bprop_registry.helpers import unary

unary(ops.Sin, lambda x, out: jnp.cos(x))
unary(ops.Cos, lambda x, out: -jnp.sin(x))
unary(ops.Tan, lambda x, out: 1.0 + out * out)
unary(ops.Exp, lambda x, out: out)
unary(ops.Log, lambda x, out: 1.0 / x)
unary(ops.Sqrt, lambda x, out: 0.5 / out)
unary(ops.Tanh, lambda x, out: 1.0 - out * out)
unary(ops.Sigmoid, lambda x, out: out * (1.0 - out))
unary(ops.ReLU, lambda x, out: jnp.where(x > 0, 1.0, 0.0).astype(out.dtype))
unary(ops.Abs, lambda x, out: jnp.sign(x))
