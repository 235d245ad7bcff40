"""`kt.ops`: MindSpore-style primitive classes.

`ops.Sin()(x)`, `ops.MatMul(transpose_b=True)(a, b)`, `ops.ReduceSum(keep_dims=False)(x, axis)`.
`ops.sin(x)`, `ops.reduce_sum(x, axis)`, ...: MindSpore's functional API
(`k_transform.ops.functional`, also importable as MindSpore's `F`). Each
family module also maps the library functions (`jnp.*`, `np.*`, `math.*`,
`jax.nn.*`) and array methods that mean the same operation onto its
primitives (`k_transform.ops.mapping`).
"""

from k_transform.ir.primitive import Primitive
from k_transform.ops import (
    arithmetic,
    conv,
    functional,
    gather,
    indexing,
    lax_linalg_rules,  # noqa: F401 - registers the rules of imported lax primitives
    lax_rules,  # noqa: F401
    lax_shape_rules,  # noqa: F401
    lax_window_rules,  # noqa: F401
    linalg,
    nn,
    reduce,
    shape,
    special,
    state,
    structural,
    trees,  # noqa: F401 - rows of pytrees (the lax.scan / jax.vmap models)
)
from k_transform.ops import math as _math
from k_transform.ops.arithmetic import BINARY, UNARY

_FAMILIES = (
    arithmetic,
    _math,
    reduce,
    linalg,
    shape,
    nn,
    special,
    conv,
    gather,
    structural,
    indexing,
    state,
)


def _export() -> list[str]:
    names = []
    for module in _FAMILIES:
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) in (module.__name__, __name__)
            if (
                isinstance(value, type)
                and issubclass(value, Primitive)
                and name[0].isupper()
                and defined_here
                and name not in names
            ):
                globals()[name] = value
                names.append(name)
    return names


__all__ = ["BINARY", "UNARY", *_export(), *functional.__all__]
globals().update(functional.FUNCTIONS)  # MindSpore's functional API: `ops.sin(x)`
