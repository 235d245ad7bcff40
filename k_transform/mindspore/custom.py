"""MindSpore's own-gradient functions: `custom_vjp` and `ops.Custom`.

`custom_vjp(fn)` (`mindspore.ops.function.grad.grad_func.custom_vjp`) makes
`fn` a function whose gradient is the one given with `fn.defbwd(bwd)`,
`bwd(*inputs, out, dout) -> (d_input, ...)`, as a Cell's `bprop` is. It is
the same mechanism: in parsed code a call of it is a `CustomBpropCall` of
`fn`'s graph (`__kt_lower__`), whose rule is `bwd`, parsed like any rule
(so it is differentiated again for second order and jvp). Called as Python,
it is `fn`.

`ops.Custom(func, out_shape, out_dtype, func_type="pyfunc", bprop=None)`:
with `func_type="pyfunc"` (MindSpore 2.10's default) `func` is Python run
on the host with numpy arrays, as MindSpore runs it on CPU: here through
`jax.pure_callback`, so it works under `jit` too. `out_shape` / `out_dtype`
are the output's shape and dtype, or functions of the inputs' shapes and
dtypes; tuples of them for several outputs. The host function is opaque to
k_transform: its gradient is the `bprop` given (`bprop(*inputs, out, dout)`,
parsed as a rule); without one, differentiating it is a KTransformError
(MindSpore: "Custom's bprop not defined"), never a zero. The other
func_types compile a kernel language (AKG's hybrid DSL, TBE, AiCPU, a
shared library for "aot"): a KTransformError naming the type.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.bprop_registry.registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ir.primitive import Primitive
from k_transform.mindspore.multitype import on_instances
from k_transform.ops import python as prims


# -- custom_vjp ------------------------------------------------------------------
class CustomVjp:
    """What `custom_vjp(fn)` returns: `fn` with the gradient `defbwd` gives."""

    def __init__(self, fwd):
        if not callable(fwd):
            raise TypeError(f"custom_vjp: expected a function, got {fwd!r}")
        self.fwd = fwd
        self.bwd = None
        self.name = getattr(fwd, "__name__", type(fwd).__name__)
        functools.update_wrapper(self, fwd, updated=())
        del self.__wrapped__  # not a wrapper to read through: its gradient is its own
        self.__signature__ = inspect.signature(fwd)
        self._call = WithBackward(self.name, fwd, None)

    def defbwd(self, bwd) -> None:
        """Set the gradient: `bwd(*inputs, out, dout)` returns one gradient per input."""
        if not callable(bwd):
            raise TypeError(f"custom_vjp: defbwd expects a function, got {bwd!r}")
        self.bwd = bwd
        # a new object: a rule cached for the old `bwd` is not this one's
        self._call = WithBackward(self.name, self.fwd, bwd)

    def __call__(self, *args, **kwargs):
        return self.fwd(*args, **kwargs)

    @on_instances
    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        """In parsed code: `fwd`'s graph called through `CustomBpropCall`."""
        graph = builder.parse(self.fwd)
        prim = prims.CustomBpropCall(self._call, graph)
        return builder.apply(prim, *builder.bind_call(graph, args, kwargs, e), node=e)


class WithBackward:
    """The Cell-like object a `CustomBpropCall` of a custom_vjp function runs:
    `construct` its forward, `bprop` its backward (`ops.python`)."""

    def __init__(self, name: str, fwd, bwd):
        self.name, self.construct, self.bwd = name, fwd, bwd

    @property
    def bprop(self):
        if self.bwd is None:
            raise KTransformError(
                f"custom_vjp function {self.name!r} has no backward function: "
                f"call {self.name}.defbwd(bprop_fn) before differentiating it"
            )
        return self.bwd


def custom_vjp(fn=None):
    """MindSpore's `custom_vjp`: `@custom_vjp def f(...)`, then `f.defbwd(bwd)`."""
    if fn is None:
        return CustomVjp
    return CustomVjp(fn)


# -- ops.Custom ------------------------------------------------------------------
FUNC_TYPES = ("hybrid", "akg", "tbe", "aicpu", "aot", "pyfunc")  # MindSpore 2.10's


class Custom(Primitive):
    """MindSpore's `ops.Custom` with `func_type="pyfunc"` (module docstring)."""

    def __init__(
        self, func, out_shape=None, out_dtype=None, func_type="pyfunc", bprop=None, reg_info=None
    ):
        where = f"For 'Custom', 'func_type': {func_type}, 'func': {func!r}"
        if func_type not in FUNC_TYPES:
            raise ValueError(f"{where}, 'func_type' must be one of {list(FUNC_TYPES)}")
        if func_type != "pyfunc":
            raise KTransformError(
                f"ops.Custom(func_type={func_type!r}) is not supported by k_transform: it "
                "compiles a kernel language k_transform does not have; use func_type='pyfunc' "
                "(host Python, with a bprop for its gradient) or write the function with ops"
            )
        if not callable(func):
            raise TypeError(f"{where}, 'func' must be a function")
        for name, value in (("out_shape", out_shape), ("out_dtype", out_dtype)):
            if value is None:
                raise TypeError(f"{where}, '{name}' must be given (a value or a function)")
        if bprop is not None and not callable(bprop):
            raise TypeError(f"{where}, 'bprop' must be a function")
        name = f"Custom_{getattr(func, '__name__', 'func')}"
        super().__init__(name, func=func, out_shape=out_shape, out_dtype=out_dtype, bprop=bprop)
        self.func_type, self.reg_info = func_type, reg_info
        self.n_inputs = _n_positional(func)

    def impl(self, *args):
        args = [jnp.asarray(a) for a in args]
        shape = _evaluate(self.out_shape, [list(a.shape) for a in args])
        dtype = _evaluate(self.out_dtype, [a.dtype for a in args])
        sequence = isinstance(shape, tuple | list)
        several = sequence and any(isinstance(s, tuple | list) for s in shape)
        if several:
            result = tuple(
                jax.ShapeDtypeStruct(tuple(s), d) for s, d in zip(shape, dtype, strict=True)
            )
        else:
            result = jax.ShapeDtypeStruct(tuple(shape), dtype)

        def host(*arrays):
            out = self.func(*[np.asarray(a) for a in arrays])
            if several:
                return tuple(self._checked(o, r) for o, r in zip(out, result, strict=True))
            return self._checked(out, result)

        # vmapped: the host function once per batch element, as it was written
        return jax.pure_callback(host, result, *args, vmap_method="sequential")

    def _checked(self, value, want: jax.ShapeDtypeStruct) -> np.ndarray:
        """The host function's result `value` as `want` says, or ValueError."""
        value = np.asarray(value)
        if value.shape != want.shape:
            raise ValueError(
                f"ops.Custom({self.func.__name__}): its function returned shape {value.shape}, "
                f"but out_shape says {want.shape}"
            )
        return value.astype(want.dtype, copy=False)


def _evaluate(spec, inputs: list):
    """`out_shape` / `out_dtype`: a function of the inputs' shapes or dtypes, or the value."""
    return spec(*inputs) if callable(spec) and not isinstance(spec, type) else spec


def _n_positional(func) -> int | None:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


@bprop_getters.register(Custom)
def get_bprop_custom(self):
    if self.bprop is None:
        raise KTransformError(
            f"cannot differentiate ops.Custom({self.func.__name__}, func_type='pyfunc'): its "
            "function runs on the host, outside what k_transform differentiates, and it has "
            "no bprop (give ops.Custom a bprop=fn(*inputs, out, dout))"
        )
    return self.bprop
