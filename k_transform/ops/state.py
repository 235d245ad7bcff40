"""State updates: `ops.Assign()(param, value)`, as in the seeds' `assign`.

`Assign` runs in program order, exactly once per call, also under `jax.jit`:
generated code binds the new value (later reads see it) and the gradient
function returns the new values, written back to the Parameters after the
call (functionalised state). It never receives a gradient.
"""

from __future__ import annotations

import sys

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import no_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ir.nodes import Constant
from k_transform.ir.primitive import Primitive


class Assign(Primitive):
    """`Assign()(param, value)`: set a Parameter; returns the value.

    `where` ("file:line", the call's) is where an assignment that would
    change the Parameter's shape is reported."""

    effectful = True
    takes_parameters = True

    def __init__(self, param=None, where: str = ""):
        super().__init__("Assign")
        self.param = param
        self.where = where
        self.n_inputs = 2 if param is None else 1

    def specialize(self, args):
        """At parse time the Parameter (a constant) becomes an attribute."""
        if self.param is not None or len(args) != 2:
            return self, args
        debug = getattr(args[0], "debug", None)
        where = f"{debug.file}:{debug.line}" if debug is not None and debug.line > 0 else ""
        if isinstance(args[0], Constant) and getattr(args[0].value, "__kt_parameter__", False):
            return Assign(args[0].value, where), [args[1]]
        return (Assign(None, where) if where and not self.where else self), args

    def parameters(self):
        return [self.param] if self.param is not None else []

    def __call__(self, *args):
        """Run as Python (a Cell called eagerly): errors name the caller's line."""
        caller = sys._getframe(1)
        where = self.where or f"{caller.f_code.co_filename}:{caller.f_lineno}"
        return self.impl(*args, where=where)

    def impl(self, *args, where: str = ""):
        params = () if self.param is None else (self.param,)
        return rt.assign(*params, *args, where or self.where)

    def emit(self, e, args):
        params = [] if self.param is None else [e.ref(self.param, self.param.name)]
        where = [f"where={self.where!r}"] if self.where else []
        return f"{e.ref(rt, '_rt')}.assign({', '.join([*params, *args, *where])})"


# == gradient rules ==============================================================
# A state update never receives a gradient.


@bprop_getters.register(Assign)
def get_bprop_assign(self):
    # A state update never receives a gradient.
    if self.param is None:
        return no_gradient(lambda param, value, out, dout: (None, None))
    return no_gradient(lambda value, out, dout: (None,))
