"""MindSpore `Tensor` methods that JAX arrays lack (`x.abs()`, `x.view(3, 1)`).

MindSpore model code calls methods on tensors inside `construct`: `x.abs()`,
`x.exp()`, `x.pow(2)`, `x.view(n, -1)`, `x.expand_dims(0)`, `x.norm()`. JAX
arrays have some of these with the same meaning (`sum`, `reshape`, `clip`:
mapped to primitives by `ops.mapping.register_method`), others not at all or
with another meaning (`view` reinterprets the dtype). The parser turns a
method call whose name is in `METHODS` and has no primitive adapter into a
library call of `method(name)`, a function that

- on an array (a JAX array, a tracer, a NumPy array, a Python number) runs
  MindSpore's meaning written with `jnp` (the table below);
- on any other object calls the object's own method of that name, so a
  user class with an `add` or `norm` method keeps its meaning.

Those functions are library code to the DFunctor (`__kt_library__`): it
differentiates them through their jaxpr at trace time, like `jax.nn.elu`,
so each has a gradient (and higher orders) with no rule written here.
`x.dim()`, `x.ndimension()`, `x.numel()` and `x.nelement()` are `x.ndim`
and `x.size` (`ATTRIBUTE_METHODS`): static facts of the array, no gradient.
`x.asnumpy()` is a NumPy copy (run time only: it has no traced value).

A Cell called as Python (`net(x)`, `k_transform.eager`) reads the same
table: there a method of `METHODS` called on a JAX array is the table's
function.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.ops.mapping import register_method
from k_transform.ops.python import GetAttr

_ARRAYS = (jax.Array, np.ndarray, np.generic, int, float, bool)


def _shape_args(args) -> tuple:
    """`view(3, 1)` and `view((3, 1))` alike: the dims as one tuple."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """MindSpore's `Tensor.norm`: the Frobenius norm (2-norm of all entries)
    by default; with a number `p` and no `dim`, the vector p-norm of a vector
    and the matrix p-norm of a matrix (`x.norm(1)`: the largest column sum)."""
    x = x if dtype is None else x.astype(dtype)
    if dim is None and (p == "fro" or x.ndim != 2):
        value = jnp.linalg.norm(jnp.ravel(x), ord=None if p == "fro" else p)
        return jnp.reshape(value, (1,) * x.ndim) if keepdim else value
    ord_ = None if p == "fro" and isinstance(dim, int) else p
    return jnp.linalg.norm(x, ord=ord_, axis=dim, keepdims=keepdim)


def _view(x, *shape):
    """`x.view(3, 1)`, `x.view((3, 1))`: a reshape; `x.view(ms.int32)`: the
    same bits read as another dtype of the same size (MindSpore and JAX)."""
    if len(shape) == 1 and isinstance(shape[0], (type, np.dtype, str)):
        return x.view(shape[0])
    return jnp.reshape(x, _shape_args(shape))


def _reduction(reduce):
    """MindSpore's `x.mean(axis=None, keep_dims=False)` (also `dim=`,
    `keepdim=`, numpy's `keepdims=`): the second argument keeps the reduced
    axes, where numpy's is a dtype; `()` reduces every axis. `dtype` casts
    the input first; numpy's other keywords (`where=`) pass through."""

    def method(x, axis=None, keep_dims=False, dtype=None, *, dim=None, keepdim=False, **kw):
        axis = dim if axis is None else axis
        if isinstance(axis, (tuple, list)) and not axis:
            axis = None
        keep = bool(keep_dims or keepdim or kw.pop("keepdims", False))
        return reduce(x if dtype is None else x.astype(dtype), axis=axis, keepdims=keep, **kw)

    return method


def _clamp(x, min=None, max=None):  # noqa: A002 - MindSpore's keyword names
    return jnp.clip(x, min, max)


# name -> MindSpore's meaning on an array (checked against MindSpore 2.10)
METHODS = {
    "abs": jnp.abs,
    "absolute": jnp.abs,
    "exp": jnp.exp,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "square": jnp.square,
    "reciprocal": jnp.reciprocal,
    "neg": jnp.negative,
    "negative": jnp.negative,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "arcsin": jnp.arcsin,
    "arccos": jnp.arccos,
    "arctan": jnp.arctan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sigmoid": jax.nn.sigmoid,
    "erf": jax.scipy.special.erf,
    "erfc": jax.scipy.special.erfc,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "trunc": jnp.trunc,
    "pow": jnp.power,
    "add": jnp.add,
    "sub": jnp.subtract,
    "subtract": jnp.subtract,
    "mul": jnp.multiply,
    "multiply": jnp.multiply,
    "div": jnp.divide,
    "divide": jnp.divide,
    "true_divide": jnp.divide,
    "matmul": jnp.matmul,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "atan2": jnp.arctan2,
    "clamp": _clamp,
    "view": _view,
    "permute": lambda x, *dims: jnp.transpose(x, _shape_args(dims)),
    "expand_dims": jnp.expand_dims,
    "unsqueeze": jnp.expand_dims,
    "tile": jnp.tile,
    "t": jnp.transpose,
    "norm": _norm,
    "float": lambda x: jnp.asarray(x, jnp.float32),
    "softmax": jax.nn.softmax,
    "logsumexp": jax.scipy.special.logsumexp,
    "mean": _reduction(jnp.mean),
    "prod": _reduction(jnp.prod),
    "all": _reduction(jnp.all),
    "any": _reduction(jnp.any),
    "asnumpy": np.array,
}
# name -> the attribute it reads: a static fact of the array (`x.dim()` is `x.ndim`)
ATTRIBUTE_METHODS = {"dim": "ndim", "ndimension": "ndim", "numel": "size", "nelement": "size"}
METHODS.update({name: operator.attrgetter(attr) for name, attr in ATTRIBUTE_METHODS.items()})


def _method(name: str, meaning):
    def call(x, *args, **kwargs):
        if not isinstance(x, _ARRAYS) and hasattr(x, name):
            return getattr(x, name)(*args, **kwargs)
        return meaning(jnp.asarray(x), *args, **kwargs)

    call.__name__ = call.__qualname__ = f"tensor_{name}"
    call.__kt_library__ = True  # differentiated through its jaxpr, as library code
    return call


_FUNCTIONS = {name: _method(name, meaning) for name, meaning in METHODS.items()}


def method(name: str):
    """The function `x.name(*args)` means on a MindSpore tensor, or None."""
    return _FUNCTIONS.get(name)


def _static_attribute(attr: str):
    def adapter(call):
        return (GetAttr(attr), call.args) if len(call.args) == 1 and not call.kwargs else None

    return adapter


for _name, _attr in ATTRIBUTE_METHODS.items():
    register_method(_name)(_static_attribute(_attr))
