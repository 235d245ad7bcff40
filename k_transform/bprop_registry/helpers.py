"""Family helpers for the common shapes of rule.

- `@rule(Prim)` on `def bprop(x, ..., out, dout)`: a rule that reads no
  attribute of the primitive (the getter would ignore `self`).
- `unary(Prim, derivative)`: elementwise f(x); `derivative(x, out)` is f'(x).
- `zero_gradient(*Prims)`: outputs that do not depend smoothly on inputs
  (comparisons, sign, floor): every input gets None (no gradient).
- `NotDifferentiable(what)`: a rule's result for a float input it has no
  gradient for (the incomplete beta function w.r.t. its shape parameters):
  the DFunctor refuses, naming `what`, when that input is differentiated,
  and sends it nothing otherwise (None would be a silent zero).
"""

from __future__ import annotations

from k_transform.bprop_registry.registry import bprop_getters


def rule(prim_cls):
    """Register the decorated `bprop` as the rule of every instance of `prim_cls`."""

    def register(bprop):
        def get_bprop(self):
            return bprop

        get_bprop.__qualname__ = f"rule({prim_cls.__name__})"
        bprop_getters.register(prim_cls)(get_bprop)
        return bprop

    return register


def unary(prim_cls, derivative) -> None:
    """Register `dout * derivative(x, out)` as the rule of `prim_cls`."""

    def get_bprop(self):
        def bprop(x, out, dout):
            return (dout * derivative(x, out),)

        return bprop

    get_bprop.__qualname__ = f"unary({prim_cls.__name__})"
    bprop_getters.register(prim_cls)(get_bprop)


class NotDifferentiable:
    """A rule's result for an input the rule has no gradient for (see the module
    docstring); `what` completes "cannot differentiate ...". The rule reads it
    as a global, so it reaches the DFunctor as a constant."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"NotDifferentiable({self.what!r})"


def no_gradient(bprop):
    """Mark `bprop` as giving no gradient to any input: the DFunctor then skips
    the node in the backward pass instead of inlining the rule."""
    bprop.__kt_no_gradient__ = True
    return bprop


def zero_gradient(*prim_classes) -> None:
    """Register "no gradient" for every input of each primitive class."""
    for prim_cls in prim_classes:
        n = prim_cls.n_inputs

        def get_bprop(self, n=n):
            if n == 1:
                return no_gradient(lambda x, out, dout: (None,))
            if n == 2:
                return no_gradient(lambda x, y, out, dout: (None, None))
            if n == 3:
                return no_gradient(lambda x, y, z, out, dout: (None, None, None))
            return no_gradient(lambda xs, out, dout: (None,) * len(xs))

        get_bprop.__qualname__ = f"zero_gradient({prim_cls.__name__})"
        bprop_getters.register(prim_cls)(get_bprop)
