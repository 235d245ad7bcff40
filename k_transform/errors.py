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
