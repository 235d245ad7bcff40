"""The one exception users see: `KTransformError`.

Every error about the user's program names the construct (or primitive), the
user's file and line, and shows the offending source line.
"""

from __future__ import annotations


class KTransformError(Exception):
    """An error in a program k_transform was asked to transform or run."""

    def __init__(self, message: str, debug=None):
        self.bare_message = message
        self.debug = debug
        super().__init__(message + (debug.describe() if debug is not None else ""))


# JAX's messages for a traced value where it needs a Python number, by version:
# 0.10's "Slice entries must be static" and "...indices must be static", 0.11's
# "Array slice indices must have static start/stop/step"; a shape of tracers.
_STATIC_NEEDED = (
    "must be static",
    "must have static start/stop/step",
    "Shapes must be 1D sequences of concrete",
)


def needs_static(exc: BaseException) -> bool:
    """Whether `exc` is JAX's bare IndexError or TypeError for a traced value
    where it needs a Python number (a slice bound, a shape)."""
    return isinstance(exc, (IndexError, TypeError)) and any(m in str(exc) for m in _STATIC_NEEDED)


class KTransformValueError(KTransformError, ValueError):
    """A bad argument value (`grad(grad_position=None, weights=None)`): a
    ValueError too, as MindSpore raises."""


class KTransformIndexError(KTransformError, IndexError):
    """A position past the inputs (`grad_position=2` of a two-input function):
    an IndexError too, as MindSpore raises."""


class KTransformRuntimeError(KTransformError, RuntimeError):
    """An empty selection of inputs (`grad_position=()`): a RuntimeError
    too, as MindSpore raises."""


class UnboundedRecursion(KTransformError, RuntimeError):
    """A recursion whose base case a traced condition chooses, met while
    tracing: both branches of the `if` are traced, so tracing never ends (a
    RuntimeError too, as MindSpore raises for a recursion it cannot end).
    k_transform's own compiled calls catch it and run op by op."""
