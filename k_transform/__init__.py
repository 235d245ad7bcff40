"""k_transform: source-to-source automatic differentiation for Python.

The public API (see DESIGN.md). Reads a function's source, builds FuncGraph
IR, transforms it, and generates Python that JAX compiles.
"""

from k_transform.api import compile, get_ir, get_source
from k_transform.errors import KTransformError
from k_transform.ir.primitive import Primitive

__all__ = ["KTransformError", "Primitive", "compile", "get_ir", "get_source"]
