"""Library functions (and objects lowered at their call) as the function differentiated.

`kt.vjp(jnp.sin, x)`, `kt.grad(jax.nn.relu)`, `kt.jacrev(np.tanh)`: a library
function has no source of ours to parse as the *target* of a transform, but a
call of it inside user code is understood (the parser maps it to a primitive
or imports its jaxpr, `frontend/jaxpr.py`). So the target becomes a tiny
user-level function of as many positional parameters as the call has,
`def library_call(x0, ...): return fn(x0, ...)`, parsed like any other.
An object that the parser lowers where it is called (`kt.jacrev(f)`, whose
class has `__kt_lower__`) is a target the same way, so `kt.jacfwd(kt.jacrev(f))`
differentiates the lowered Jacobian.
"""

from __future__ import annotations

import inspect
import types

import numpy as np

from k_transform.cell import Cell
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.callables import caches_results, custom_rule_kind
from k_transform.frontend.source import is_user_function
from k_transform.ir.nodes import FuncGraph
from k_transform.protocol import kt_attribute

LIBRARY_ROOTS = ("jax", "jaxlib", "numpy", "scipy", "optax")  # array libraries


def is_library(fn) -> bool:
    """A library function (`jnp.sin`, `np.tanh`, `jax.nn.relu`): no source of
    ours to parse as the function differentiated; it is called from a small
    user-level graph (`target_of`), where the parser maps it to a primitive or
    imports its jaxpr."""
    if isinstance(fn, (FuncGraph, Cell)) or kt_attribute(fn, "__kt_graph__") is not None:
        return False
    if hasattr(type(fn), "__kt_lower__"):  # an object lowered where it is called
        return True  # (`kt.jacrev(f)`): so a Jacobian of a Jacobian composes
    if isinstance(fn, np.ufunc):
        return True
    if custom_rule_kind(fn) is not None:  # lowered with its rule
        return True
    if caches_results(fn):  # `functools.cache`: called as it is, through its cache
        return True
    if isinstance(fn, types.BuiltinFunctionType):  # `math.gamma`: no array library's
        return False
    if isinstance(fn, types.FunctionType) and not is_user_function(fn):
        return True  # a library's wrapper of a user function (`jax.vmap(f)`): not parsed
    return (getattr(fn, "__module__", None) or "").split(".")[0] in LIBRARY_ROOTS


def _call_1(fn):
    def library_call(x0):
        return fn(x0)

    return library_call


def _call_2(fn):
    def library_call(x0, x1):
        return fn(x0, x1)

    return library_call


def _call_3(fn):
    def library_call(x0, x1, x2):
        return fn(x0, x1, x2)

    return library_call


def _call_4(fn):
    def library_call(x0, x1, x2, x3):
        return fn(x0, x1, x2, x3)

    return library_call


_LIBRARY_CALLS = {1: _call_1, 2: _call_2, 3: _call_3, 4: _call_4}
_CALL_CODES = frozenset(make(None).__code__ for make in _LIBRARY_CALLS.values())


def is_target_call(fn) -> bool:
    """Whether `fn` is a `library_call` made by `target_of`: a line of
    k_transform's, where an error has no line of the user's to show."""
    return getattr(fn, "__code__", None) in _CALL_CODES


def target_of(fn, n: int | None):
    """`fn`, or for a library function a user-level function of `n` arguments
    calling it (cached; the entry holds `fn` alive, so its id is not reused)."""
    if not is_library(fn):
        return fn
    name = getattr(fn, "__name__", repr(fn))
    if n not in _LIBRARY_CALLS:
        raise KTransformError(
            f"the library function {name} as the function differentiated: k_transform wraps "
            f"library functions of 1 to 4 positional arguments (got {n}); wrap it in a Python "
            "function"
        )
    _library_targets = TRANSFORM.cache("targets.library_targets")
    entry = _library_targets.get((id(fn), n))
    if entry is None or entry[0] is not fn:
        entry = (fn, _LIBRARY_CALLS[n](fn))
        _library_targets[(id(fn), n)] = entry
    return entry[1]


def arity(fn) -> int | None:
    """The number of positional parameters without a default in `fn`'s
    signature (None for `*args` or no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in positional and p.default is p.empty)
