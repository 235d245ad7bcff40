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
