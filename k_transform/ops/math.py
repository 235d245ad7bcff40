"""Elementwise math primitives (MindSpore names) and the library functions
that map onto them (`jnp.sin`, `np.sin`, `math.sin`, `jax.nn.sigmoid`, ...)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.ops.base import elementwise
from k_transform.ops.mapping import map_functions

Sin = elementwise("Sin", jnp.sin, "jnp.sin")
Cos = elementwise("Cos", jnp.cos, "jnp.cos")
Tan = elementwise("Tan", jnp.tan, "jnp.tan")
Exp = elementwise("Exp", jnp.exp, "jnp.exp")
Log = elementwise("Log", jnp.log, "jnp.log")
Sqrt = elementwise("Sqrt", jnp.sqrt, "jnp.sqrt")
Tanh = elementwise("Tanh", jnp.tanh, "jnp.tanh")
Sigmoid = elementwise("Sigmoid", jax.nn.sigmoid, "jax.nn.sigmoid")
ReLU = elementwise("ReLU", jax.nn.relu, "jax.nn.relu")
Abs = elementwise("Abs", jnp.abs, "jnp.abs")

map_functions(
    {
        Sin: (jnp.sin, np.sin, math.sin),
        Cos: (jnp.cos, np.cos, math.cos),
        Tan: (jnp.tan, np.tan, math.tan),
        Exp: (jnp.exp, np.exp, math.exp),
        Log: (jnp.log, np.log, math.log),
        Sqrt: (jnp.sqrt, np.sqrt, math.sqrt),
        Tanh: (jnp.tanh, np.tanh, math.tanh),
        Sigmoid: (jax.nn.sigmoid,),
        ReLU: (jax.nn.relu,),
        Abs: (jnp.abs, np.abs, abs),
    }
)
