"""State updates: `ops.Assign()(param, value)`, as in the seeds' `assign`.

`Assign` runs in program order, exactly once per call, also under `jax.jit`:
generated code binds the new value (later reads see it) and the gradient
function returns the new values, written back to the Parameters after the
call (functionalised state). It never receives a gradient.
"""

from __future__ import annotations

from k_transform import runtime as rt
from k_transform.bprop_registry.helpers import no_gradient
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ir.nodes import Constant
from k_transform.ir.primitive import Primitive


class Assign(Primitive):
    """`Assign()(param, value)`: set a Parameter; returns the value."""

    effectful = True
    takes_parameters = True

    def __init__(self, param=None):
        super().__init__("Assign")
        self.param = param
        self.n_inputs = 2 if param is None else 1

    def specialize(self, args):
        """At parse time the Parameter (a constant) becomes an attribute."""
        if self.param is None and len(args) == 2 and isinstance(args[0], Constant):
            if getattr(args[0].value, "__kt_parameter__", False):
                return Assign(args[0].value), [args[1]]
        return self, args

    def parameters(self):
        return [self.param] if self.param is not None else []

    def impl(self, *args):
        if self.param is None:
            return rt.assign(*args)
        return rt.assign(self.param, args[0])

    def emit(self, e, args):
        if self.param is None:
            return f"{e.ref(rt, '_rt')}.assign({', '.join(args)})"
        return f"{e.ref(rt, '_rt')}.assign({e.ref(self.param, self.param.name)}, {args[0]})"


# == gradient rules ==============================================================
# A state update never receives a gradient.


@bprop_getters.register(Assign)
def get_bprop_assign(self):
    # A state update never receives a gradient.
    if self.param is None:
        return no_gradient(lambda param, value, out, dout: (None, None))
    return no_gradient(lambda value, out, dout: (None,))
