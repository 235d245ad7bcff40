"""MindSpore Tensor methods on JAX's arrays, for MindSpore code run as Python.

MindSpore code reads results as Tensors: `out.asnumpy()`, `x.abs()`,
`g.expand_dims(0)`. Inside programs k_transform transforms, and in a
Cell's `net(x)` (`k_transform.eager`), such calls already mean what they
mean in MindSpore (`ops/tensor_methods.METHODS`, the one table). A result
handed back to the user's Python is a JAX array: importing
`k_transform.mindspore` gives JAX's array type the methods of that table
*it lacks* (`asnumpy`, `abs`, `pow`, `expand_dims`, `dim`, ...), each
the table's function. A method JAX's arrays have (`mean`, `sum`, `view`,
`all`) keeps JAX's meaning there, so no JAX code changes meaning.
"""

from __future__ import annotations

from jax._src.array import ArrayImpl

from k_transform.ops import tensor_methods

# JAX's concrete array class, named rather than read off an array: making one
# at import would start the backend before `communication.init()` can call
# `jax.distributed.initialize`.
ARRAY_TYPE = ArrayImpl
ADDED: list[str] = []  # the names given to ARRAY_TYPE


def _bound(name: str):
    function = tensor_methods.method(name)

    def call(self, *args, **kwargs):
        return function(self, *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"MindSpore's `Tensor.{name}` (k_transform.ops.tensor_methods)."
    call.__kt_library__ = True  # in parsed code, differentiated through its jaxpr
    return call


def install() -> None:
    """Give ARRAY_TYPE the table's methods it lacks (once)."""
    if ADDED:
        return
    for name in tensor_methods.METHODS:
        if not hasattr(ARRAY_TYPE, name):
            setattr(ARRAY_TYPE, name, _bound(name))
            ADDED.append(name)
