"""Neural-network primitives (MindSpore names) and their `jax.nn` spellings.

`Softmax(axis)` and `LogSoftmax(axis)` normalise along `axis` (default -1,
an int or a tuple); `Gelu(approximate)` is `jax.nn.gelu` (tanh form by
default, like jax). `Sigmoid` and `ReLU` live with the math primitives.
"""

from __future__ import annotations

import jax

from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import map_functions, register_function

Softplus = elementwise("Softplus", jax.nn.softplus, "jax.nn.softplus")


class Softmax(JaxPrimitive):
    """`Softmax(axis)(x)`: `jax.nn.softmax(x, axis)`."""

    jax_fn = staticmethod(jax.nn.softmax)
    jax_name = "jax.nn.softmax"
    jax_kwargs = {"axis": "axis"}
    n_inputs = 1

    def __init__(self, axis=-1):
        super().__init__(axis=axis)


class LogSoftmax(Softmax):
    """`LogSoftmax(axis)(x)`: `jax.nn.log_softmax(x, axis)`."""

    jax_fn = staticmethod(jax.nn.log_softmax)
    jax_name = "jax.nn.log_softmax"


class Gelu(JaxPrimitive):
    """`Gelu(approximate)(x)`: `jax.nn.gelu(x, approximate)`."""

    jax_fn = staticmethod(jax.nn.gelu)
    jax_name = "jax.nn.gelu"
    jax_kwargs = {"approximate": "approximate"}
    n_inputs = 1

    def __init__(self, approximate: bool = True):
        super().__init__(approximate=approximate)


map_functions({Softplus: (jax.nn.softplus,)})


def _with_axis(prim_cls):
    def adapter(call):
        if not call.names_ok(("x", "axis"), 2):
            return None
        return prim_cls(call.static(1, "axis", -1)), [call.arg(0, "x")]

    return adapter


register_function(jax.nn.softmax)(_with_axis(Softmax))
register_function(jax.nn.log_softmax)(_with_axis(LogSoftmax))


@register_function(jax.nn.gelu)
def _gelu(call):
    if not call.names_ok(("x", "approximate"), 2):
        return None
    return Gelu(call.static(1, "approximate", True)), [call.arg(0, "x")]
