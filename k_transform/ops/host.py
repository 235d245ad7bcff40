"""Host Python: which calls the transform may run, and which must run per call.

A call k_transform has no primitive for is one of three kinds:

- **known pure** (`is_pure`): Python's value builtins (`len`, `abs`, `max`,
  `isinstance`, ...), `math`, `operator`, numpy outside `numpy.random`, numpy
  ufuncs and scalar types, JAX outside `jax.debug`. Only these are evaluated
  on constants while a graph is built (constant folding).
- **host effects** (`has_host_effect`): calls that read or change state
  outside their arguments: `random`, `numpy.random` and their generators'
  methods (`rs.randn(3)`), `time`, `next`, `input`, `open`, `os`, ... They
  run when Python would run them: once per call of a gradient function
  without a jit, at trace under one, in program order, never at transform
  time.
- **anything else** (a library's function, a method of a library object):
  an array function when it is given traced values (traced with
  `jax.make_jaxpr` and differentiated with our rules, cached by shapes as
  `jax.jit` caches), a host call when every argument is a constant of the
  program (`mylib.sample(3)`: nothing to trace, so it runs per call too).

`ops.python.LibraryCall` is effectful (kept in program order, never dropped,
and its gradient function not compiled ahead: see `k_transform.compiled`) when
`host_call` says so.
"""

from __future__ import annotations

import builtins
import math
import operator
import types

import numpy as np

# Builtins that compute a value from their arguments alone.
PURE_BUILTINS = frozenset(
    getattr(builtins, name)
    for name in (
        "abs all any bin bool callable chr complex divmod enumerate float format hex int "
        "isinstance issubclass len list max min oct ord pow range repr reversed round slice "
        "sorted str sum tuple type zip dict"
    ).split()
)
_PURE_MODULES = ("math", "cmath", "operator", "numpy", "jax", "jaxlib", "k_transform")
IMPURE_MODULES = (
    "numpy.random",
    "jax.debug",
    "jax._src.debugging",  # where jax.debug's functions live
    "random",
    "time",
    "datetime",
    "os",
    "sys",
    "io",
    "secrets",
    "uuid",
    "itertools",
    "threading",
    "socket",
)
# Builtins with an effect or reading host state.
_IMPURE_BUILTINS = frozenset(
    getattr(builtins, name) for name in "next input open iter id globals vars exec eval".split()
)
_VALUE_TYPES = (str, bytes, int, float, complex, tuple, frozenset, range, type, np.dtype)
# numpy array methods that write into the array.
_IN_PLACE = frozenset("fill sort put resize setfield itemset partition setflags byteswap".split())


def _module(obj) -> str:
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else ""


def _within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _hashable_in(fn, table) -> bool:
    try:
        return fn in table
    except TypeError:
        return False


def _receiver(fn):
    """The object a bound method is bound to (None for functions and methods of modules)."""
    owner = getattr(fn, "__self__", None)
    return None if owner is None or isinstance(owner, types.ModuleType) else owner


def is_pure(fn) -> bool:
    """Whether `fn` is known to compute its result from its arguments alone,
    so calling it on constants at transform time is what Python would see."""
    if _hashable_in(fn, PURE_BUILTINS) or isinstance(fn, np.ufunc):
        return True
    if isinstance(fn, type) and issubclass(fn, np.generic):
        return True  # np.float32(0.5): a numpy scalar constant
    if isinstance(fn, type) and issubclass(fn, BaseException):
        return plain_exception(fn)  # ValueError("..."): the exception a `raise` raises
    if getattr(math, getattr(fn, "__name__", "") or "", None) is fn:
        return True
    if getattr(operator, getattr(fn, "__name__", "") or "", None) is fn:
        return True
    owner = _receiver(fn)
    if owner is not None:  # "{}".format, (1, 2).index, c.sum() of a constant array
        if isinstance(owner, np.ndarray):
            return getattr(fn, "__name__", "") not in _IN_PLACE
        return isinstance(owner, _VALUE_TYPES) or _within(_module(type(owner)), ("jax", "jaxlib"))
    module = _module(fn)
    return _within(module, _PURE_MODULES) and not _within(module, IMPURE_MODULES)


def plain_exception(cls) -> bool:
    """An exception class whose construction only stores its arguments: a
    builtin one, or a subclass defining no `__init__` or `__new__` of its own."""
    return all(
        c.__module__ == "builtins" or not ({"__init__", "__new__"} & set(vars(c)))
        for c in cls.__mro__
    )


def has_host_effect(fn) -> bool:
    """Whether calling `fn` is known to read or change host state (a random
    generator, a counter, the clock, a file)."""
    if _hashable_in(fn, _IMPURE_BUILTINS):
        return True
    owner = _receiver(fn)
    if owner is not None and not isinstance(owner, _VALUE_TYPES):
        if _within(_module(type(owner)), IMPURE_MODULES):
            return True  # np.random.RandomState(0).randn, random.Random().random
        if _within(_module(type(owner)), ("numpy",)) and "random" in type(owner).__name__.lower():
            return True
    return _within(_module(fn), IMPURE_MODULES)


def host_call(fn, all_constant: bool) -> bool:
    """Whether a call of `fn` runs as host code: per call, in program order.
    `all_constant`: every argument is a constant of the program."""
    if is_pure(fn):
        return False
    return has_host_effect(fn) or all_constant
