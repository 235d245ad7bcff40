"""Reductions and linear algebra (MindSpore names).

Reductions take the axis as an input, like MindSpore: `ReduceSum(keep_dims)(x,
axis)`, axis None or `()` (all axes, MindSpore's default: `ReduceSum()(x)`),
an int or a tuple; it must be static when traced (jax requires it) and gets
no gradient. `jnp.sum(x, axis=())` (no axes, numpy's meaning) stays a library
call. `Var(ddof, keep_dims)` and
`Std` follow `jnp.var` / `jnp.std`. Scans and arg-reductions take a static
`axis` attribute: `Cumsum(axis, reverse)`, `Cumprod(axis)`,
`Argmax(axis, keep_dims)`, `Argmin(axis, keep_dims)` (integer results).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ir.nodes import Constant
from k_transform.ops.arithmetic import NumpyMatMul
from k_transform.ops.base import JaxPrimitive, elementwise
from k_transform.ops.mapping import NONE, map_functions, register_function, register_method
from k_transform.ops.structural import SumTo


class _Reduce(JaxPrimitive):
    """`Reduce<Op>(keep_dims)(x, axis=None)`: `jax_fn(x, axis, keepdims=keep_dims)`."""

    jax_kwargs = {"keep_dims": "keepdims"}
    n_inputs = 2
    input_defaults = (None,)  # MindSpore's axis=(): all axes

    def __init__(self, keep_dims: bool = False):
        super().__init__(keep_dims=keep_dims)

    def specialize(self, args):
        """The left-out axis is None; MindSpore's `()` (all axes) becomes None."""
        prim, args = super().specialize(args)
        if len(args) == 2 and isinstance(args[1], Constant) and _all_axes(args[1].value):
            args = [args[0], Constant(None, args[1].debug, "None")]
        return prim, args

    def impl(self, x, axis=None):
        axis = None if _all_axes(axis) else axis
        return type(self).jax_fn(x, axis=axis, keepdims=self.keep_dims)

    def emit(self, e, args):
        axis = "" if args[1] == "None" else f", axis={args[1]}"
        keep = ", keepdims=True" if self.keep_dims else ""
        return f"{e.ref(type(self).jax_fn, self.jax_name)}({args[0]}{axis}{keep})"


def _all_axes(axis) -> bool:
    """MindSpore's spelling of all axes: an empty tuple or list."""
    return isinstance(axis, (tuple, list)) and len(axis) == 0


class ReduceSum(_Reduce):
    """`jnp.sum(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.sum)
    jax_name = "jnp.sum"


class ReduceMean(_Reduce):
    """`jnp.mean(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.mean)
    jax_name = "jnp.mean"


class ReduceMax(_Reduce):
    """`jnp.max(x, axis, keepdims=keep_dims)`; ties share the gradient evenly."""

    jax_fn = staticmethod(jnp.max)
    jax_name = "jnp.max"


class ReduceMin(_Reduce):
    """`jnp.min(x, axis, keepdims=keep_dims)`; ties share the gradient evenly."""

    jax_fn = staticmethod(jnp.min)
    jax_name = "jnp.min"


class ReduceProd(_Reduce):
    """`jnp.prod(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.prod)
    jax_name = "jnp.prod"


class LogSumExp(_Reduce):
    """`jax.nn.logsumexp(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jax.nn.logsumexp)
    jax_name = "jax.nn.logsumexp"


class Var(_Reduce):
    """`Var(ddof, keep_dims)(x, axis)`: `jnp.var(x, axis, ddof=ddof, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.var)
    jax_name = "jnp.var"

    def __init__(self, ddof: int = 0, keep_dims: bool = False):
        JaxPrimitive.__init__(self, ddof=ddof, keep_dims=keep_dims)

    def impl(self, x, axis=None):
        axis = None if _all_axes(axis) else axis
        return type(self).jax_fn(x, axis=axis, ddof=self.ddof, keepdims=self.keep_dims)

    def emit(self, e, args):
        return super().emit(e, args)[:-1] + f", ddof={self.ddof!r})"


class Std(Var):
    """`Std(ddof, keep_dims)(x, axis)`: `jnp.std(x, axis, ddof=ddof, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.std)
    jax_name = "jnp.std"


def cumsum(x, axis: int | None, reverse: bool = False):
    """`jnp.cumsum` along `axis`; `reverse`: summing from the end; axis None:
    over the flattened array (a 1-d result, as numpy's)."""
    if axis is None:
        x, axis = jnp.ravel(x), 0
    if reverse:
        return jnp.flip(jnp.cumsum(jnp.flip(x, axis), axis), axis)
    return jnp.cumsum(x, axis)


class Cumsum(JaxPrimitive):
    """`Cumsum(axis, reverse)(x)`: running sums along `axis` (None: flattened)."""

    jax_fn = staticmethod(cumsum)
    jax_name = "cumsum"
    jax_kwargs = {"axis": "axis", "reverse": "reverse"}
    n_inputs = 1

    def __init__(self, axis: int = 0, reverse: bool = False):
        super().__init__(axis=axis, reverse=reverse)


class Cumprod(JaxPrimitive):
    """`Cumprod(axis)(x)`: running products along `axis`."""

    jax_fn = staticmethod(jnp.cumprod)
    jax_name = "jnp.cumprod"
    jax_kwargs = {"axis": "axis"}
    n_inputs = 1

    def __init__(self, axis: int = 0):
        super().__init__(axis=axis)


class Argmax(JaxPrimitive):
    """`Argmax(axis, keep_dims)(x)`: `jnp.argmax(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.argmax)
    jax_name = "jnp.argmax"
    jax_kwargs = {"axis": "axis", "keep_dims": "keepdims"}
    n_inputs = 1

    def __init__(self, axis=None, keep_dims: bool = False):
        super().__init__(axis=axis, keep_dims=keep_dims)


class Argmin(Argmax):
    """`Argmin(axis, keep_dims)(x)`: `jnp.argmin(x, axis, keepdims=keep_dims)`."""

    jax_fn = staticmethod(jnp.argmin)
    jax_name = "jnp.argmin"


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


class BatchMatMul(JaxPrimitive):
    """`BatchMatMul(transpose_a, transpose_b)(a, b)`: matmul over the last two
    axes (transposing them when asked), batch axes broadcast."""

    n_inputs = 2

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        super().__init__(transpose_a=transpose_a, transpose_b=transpose_b)

    def impl(self, a, b):
        a = jnp.swapaxes(a, -1, -2) if self.transpose_a else a
        b = jnp.swapaxes(b, -1, -2) if self.transpose_b else b
        return jnp.matmul(a, b)

    def emit(self, e, args):
        swap = e.ref(jnp.swapaxes, "jnp.swapaxes")
        a = f"{swap}({args[0]}, -1, -2)" if self.transpose_a else args[0]
        b = f"{swap}({args[1]}, -1, -2)" if self.transpose_b else args[1]
        return f"{a} @ {b}"


Dot = elementwise("Dot", jnp.dot, "jnp.dot", 2, "`jnp.dot(a, b)` (numpy.dot semantics).")
Outer = elementwise(
    "Outer", jnp.outer, "jnp.outer", 2, "`jnp.outer(a, b)` of the flattened inputs."
)

_REDUCTIONS = {
    ReduceSum: ((jnp.sum, np.sum), "sum"),
    ReduceMean: ((jnp.mean, np.mean), "mean"),
    ReduceMax: ((jnp.max, jnp.amax, np.max, np.amax), "max"),
    ReduceMin: ((jnp.min, jnp.amin, np.min, np.amin), "min"),
    ReduceProd: ((jnp.prod, np.prod), "prod"),
}


def _numpy_axis(prim, args) -> tuple | None:
    """`(prim, args)`, or None (a library call) for numpy's `axis=()`: no
    axes, where the primitive's `()` means all of them."""
    axis = args[1]
    return None if isinstance(axis, Constant) and _all_axes(axis.value) else (prim, args)


def _reduction_adapters(prim_cls) -> tuple:
    """`fn(a, axis=None, keepdims=False)` and `x.method(axis=None, keepdims=False)`."""

    def function(call):
        # Only `a`, `axis`, `keepdims`: `dtype`, `out`, `where`, `initial` stay library calls.
        if len(call.args) > 2 or not set(call.kwargs) <= {"a", "axis", "keepdims"}:
            return None
        keep = call.static(3, "keepdims", False)
        return _numpy_axis(prim_cls(keep_dims=keep), [call.arg(0, "a"), call.arg(1, "axis", NONE)])

    def method(call):
        if len(call.args) > 2 or not set(call.kwargs) <= {"axis", "keepdims"}:
            return None
        keep = call.static(3, "keepdims", False)
        return _numpy_axis(prim_cls(keep_dims=keep), [call.args[0], call.arg(1, "axis", NONE)])

    return function, method


for _cls, (_fns, _method) in _REDUCTIONS.items():
    _function_adapter, _method_adapter = _reduction_adapters(_cls)
    register_function(*_fns)(_function_adapter)
    register_method(_method)(_method_adapter)


@register_function(jax.nn.logsumexp)
def _logsumexp(call):
    if len(call.args) > 2 or not set(call.kwargs) <= {"a", "axis", "keepdims"}:
        return None
    keep = call.static(3, "keepdims", False)
    return _numpy_axis(LogSumExp(keep_dims=keep), [call.arg(0, "a"), call.arg(1, "axis", NONE)])


map_functions(
    {NumpyMatMul: (jnp.matmul, np.matmul), Dot: (jnp.dot, np.dot), Outer: (jnp.outer, np.outer)},
    n=2,
)


@register_method("dot")
def _dot_method(call):
    return (Dot(), call.args) if len(call.args) == 2 and not call.kwargs else None


def _variance_adapters(prim_cls) -> tuple:
    """`fn(a, axis=None, ddof=0, keepdims=False)` and `x.var(axis, ddof=, keepdims=)`."""
    names = {"a", "axis", "ddof", "keepdims"}

    def function(call):
        if len(call.args) > 2 or not set(call.kwargs) <= names:
            return None
        prim = prim_cls(call.static(4, "ddof", 0), call.static(5, "keepdims", False))
        return _numpy_axis(prim, [call.arg(0, "a"), call.arg(1, "axis", NONE)])

    def method(call):
        if len(call.args) > 2 or not set(call.kwargs) <= names - {"a"}:
            return None
        prim = prim_cls(call.static(4, "ddof", 0), call.static(5, "keepdims", False))
        return _numpy_axis(prim, [call.args[0], call.arg(1, "axis", NONE)])

    return function, method


for _cls, _fns, _method in ((Var, (jnp.var, np.var), "var"), (Std, (jnp.std, np.std), "std")):
    _function_adapter, _method_adapter = _variance_adapters(_cls)
    register_function(*_fns)(_function_adapter)
    register_method(_method)(_method_adapter)


def _scan_adapters(prim_cls) -> tuple:
    """`fn(a, axis)` and `x.method(axis)` with a static int axis; axis None
    (the flattened scan) for `Cumsum`, a library call for the others."""

    def ok(axis) -> bool:
        return isinstance(axis, int) or (axis is None and prim_cls is Cumsum)

    def function(call):
        if not call.names_ok(("a", "axis"), 2):
            return None
        axis = call.static(1, "axis")
        return (prim_cls(axis), [call.arg(0, "a")]) if ok(axis) else None

    def method(call):
        if not call.names_ok(("axis",), 2):
            return None
        axis = call.static(1, "axis")
        return (prim_cls(axis), [call.args[0]]) if ok(axis) else None

    return function, method


for _cls, _fns, _method in (
    (Cumsum, (jnp.cumsum, np.cumsum), "cumsum"),
    (Cumprod, (jnp.cumprod, np.cumprod), "cumprod"),
):
    _function_adapter, _method_adapter = _scan_adapters(_cls)
    register_function(*_fns)(_function_adapter)
    register_method(_method)(_method_adapter)


def _arg_adapters(prim_cls) -> tuple:
    """`fn(a, axis=None, keepdims=False)` and `x.method(axis=None, keepdims=False)`."""

    def function(call):
        if not call.names_ok(("a", "axis", "keepdims"), 2):
            return None
        prim = prim_cls(call.static(1, "axis"), bool(call.static(3, "keepdims", False)))
        return prim, [call.arg(0, "a")]

    def method(call):
        if not call.names_ok(("axis", "keepdims"), 2):
            return None
        prim = prim_cls(call.static(1, "axis"), bool(call.static(3, "keepdims", False)))
        return prim, [call.args[0]]

    return function, method


for _cls, _fns, _method in (
    (Argmax, (jnp.argmax, np.argmax), "argmax"),
    (Argmin, (jnp.argmin, np.argmin), "argmin"),
):
    _function_adapter, _method_adapter = _arg_adapters(_cls)
    register_function(*_fns)(_function_adapter)
    register_method(_method)(_method_adapter)


# == gradient rules ==============================================================
# Rules for reductions and matrix products.
#
# A reduction's `dout` has the reduced shape; `_unreduce` puts the reduced axes
# back (length 1) so it broadcasts against `x`. The axis input gets None.

sum_to = SumTo()


def _unreduce(g, axis, keep_dims):
    """`g` (reduced over `axis`) with the reduced axes back as length 1."""
    if axis is None or keep_dims:
        return g
    return jnp.expand_dims(g, axis)


@bprop_getters.register(ReduceSum)
def get_bprop_reduce_sum(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        return jnp.broadcast_to(_unreduce(dout, axis, keep_dims), jnp.shape(x)), None

    return bprop


@bprop_getters.register(ReduceMean)
def get_bprop_reduce_mean(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        dx = jnp.broadcast_to(_unreduce(dout, axis, keep_dims), jnp.shape(x))
        return dx / count, None

    return bprop


def _get_bprop_reduce_extremum(self):
    """max/min: `dout` split evenly among the positions reaching the extremum."""
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        at = x == _unreduce(out, axis, keep_dims)
        zero = jnp.zeros_like(x)
        hits = jnp.where(at, jnp.ones_like(x), zero)
        count = jnp.sum(hits, axis=axis, keepdims=True)
        return jnp.where(at, _unreduce(dout, axis, keep_dims) / count, zero), None

    return bprop


bprop_getters.register(ReduceMax)(_get_bprop_reduce_extremum)
bprop_getters.register(ReduceMin)(_get_bprop_reduce_extremum)


@bprop_getters.register(ReduceProd)
def get_bprop_reduce_prod(self):
    """d prod / d x_i is the product of the others, zeros included: the
    reduced axes flattened last, the running products before and after each
    entry (exclusive cumprods from both ends; no division by x), so the rule
    differentiates again exactly (`Cumprod`'s rule) where entries are zero."""
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        rows = _reduced_last(x, axis)
        ones = jnp.ones_like(rows[..., :1])
        before = jnp.concatenate([ones, jnp.cumprod(rows[..., :-1], axis=-1)], axis=-1)
        after = jnp.flip(jnp.cumprod(jnp.flip(rows[..., 1:], -1), axis=-1), -1)
        others = before * jnp.concatenate([after, ones], axis=-1)
        return _unreduce(dout, axis, keep_dims) * _unreduced_last(others, x, axis), None

    return bprop


def _reduced_last(x, axis):
    """x with the axes `axis` reduces moved last and flattened into one."""
    if axis is None:
        return jnp.reshape(x, (-1,))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    moved = jnp.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    return jnp.reshape(moved, jnp.shape(moved)[: jnp.ndim(x) - len(axes)] + (-1,))


def _unreduced_last(rows, x, axis):
    """`_reduced_last(x, axis)`'s inverse: `rows` laid out as x."""
    if axis is None:
        return jnp.reshape(rows, jnp.shape(x))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    last = tuple(range(-len(axes), 0))
    return jnp.moveaxis(jnp.reshape(rows, jnp.shape(jnp.moveaxis(x, axes, last))), last, axes)


@bprop_getters.register(LogSumExp)
def get_bprop_logsumexp(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        weights = jnp.exp(x - _unreduce(out, axis, keep_dims))
        return _unreduce(dout, axis, keep_dims) * weights, None

    return bprop


@bprop_getters.register(Var)
def get_bprop_var(self):
    ddof, keep_dims = self.ddof, self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        centred = x - jnp.mean(x, axis=axis, keepdims=True)
        return _unreduce(dout, axis, keep_dims) * centred * (2.0 / (count - ddof)), None

    return bprop


@bprop_getters.register(Std)
def get_bprop_std(self):
    ddof, keep_dims = self.ddof, self.keep_dims

    def bprop(x, axis, out, dout):
        count = jnp.size(x) // jnp.size(out)
        centred = x - jnp.mean(x, axis=axis, keepdims=True)
        scale = _unreduce(dout, axis, keep_dims) / _unreduce(out, axis, keep_dims)
        return scale * centred / (count - ddof), None

    return bprop


@bprop_getters.register(Cumsum)
def get_bprop_cumsum(self):
    cumsum_back = Cumsum(self.axis, not self.reverse)
    if self.axis is None:  # the flattened scan: back on the flat gradient, then reshaped
        return lambda x, out, dout: (jnp.reshape(cumsum_back(dout), jnp.shape(x)),)
    return lambda x, out, dout: (cumsum_back(dout),)


@bprop_getters.register(Cumprod)
def get_bprop_cumprod(self):
    """dx_i = sum_{j >= i} dout_j prod_{k <= j, k != i} x_k, exact with zeros:
    row i of an (n, n) matrix holds x with x_i replaced by 1, scanned."""
    axis = self.axis
    cumprod_rows = Cumprod(-1)

    def bprop(x, out, dout):
        xm = jnp.moveaxis(x, axis, -1)
        n = jnp.shape(xm)[-1]
        rows = jnp.where(jnp.eye(n, dtype=bool), 1.0, jnp.expand_dims(xm, -2))
        partial = jnp.triu(cumprod_rows(rows))  # [i, j]: prod_{k <= j, k != i}, j >= i
        g = jnp.sum(partial * jnp.expand_dims(jnp.moveaxis(dout, axis, -1), -2), axis=-1)
        return (jnp.moveaxis(g, -1, axis),)

    return bprop


zero_gradient(Argmax, Argmin)


@bprop_getters.register(MatMul)
def get_bprop_matmul(self):
    ta, tb = self.transpose_a, self.transpose_b

    def bprop(a, b, out, dout):
        if ta:
            da = (b @ dout.T) if not tb else (b.T @ dout.T)
        else:
            da = (dout @ b.T) if not tb else (dout @ b)
        if tb:
            db = (dout.T @ a) if not ta else (dout.T @ a.T)
        else:
            db = (a.T @ dout) if not ta else (a @ dout)
        return da, db

    return bprop


@bprop_getters.register(BatchMatMul)
def get_bprop_batch_matmul(self):
    ta, tb = self.transpose_a, self.transpose_b

    def bprop(a, b, out, dout):
        a_ = jnp.swapaxes(a, -1, -2) if ta else a
        b_ = jnp.swapaxes(b, -1, -2) if tb else b
        da = dout @ jnp.swapaxes(b_, -1, -2)
        db = jnp.swapaxes(a_, -1, -2) @ dout
        if ta:
            da = jnp.swapaxes(da, -1, -2)
        if tb:
            db = jnp.swapaxes(db, -1, -2)
        return sum_to(da, a), sum_to(db, b)

    return bprop


@rule(Dot)
def bprop_dot(a, b, out, dout):
    """`dot(a, b)` contracts a's last axis with b's second-to-last (b's only
    one when 1-D): as a matrix product of `a` flattened to (-1, n) and `b`
    with that axis moved first and flattened to (n, -1)."""
    if jnp.ndim(a) == 0 or jnp.ndim(b) == 0:
        return sum_to(dout * b, a), sum_to(dout * a, b)
    a2 = jnp.reshape(a, (-1, jnp.shape(a)[-1]))
    if jnp.ndim(b) == 1:
        db = a2.T @ jnp.ravel(dout)
        # sum_to of equal shapes: a real operand's real part (JAX's convention)
        return sum_to(jnp.expand_dims(dout, -1) * b, a), sum_to(db, b)
    b_moved = jnp.moveaxis(b, -2, 0)
    b2 = jnp.reshape(b_moved, (jnp.shape(b_moved)[0], -1))
    g2 = jnp.reshape(dout, (jnp.shape(a2)[0], jnp.shape(b2)[1]))
    da = jnp.reshape(g2 @ b2.T, jnp.shape(a))
    db = jnp.moveaxis(jnp.reshape(a2.T @ g2, jnp.shape(b_moved)), 0, -2)
    return sum_to(da, a), sum_to(db, b)


@rule(Outer)
def bprop_outer(a, b, out, dout):
    da = jnp.reshape(dout @ jnp.ravel(b), jnp.shape(a))
    db = jnp.reshape(jnp.ravel(a) @ dout, jnp.shape(b))
    return sum_to(da, a), sum_to(db, b)
