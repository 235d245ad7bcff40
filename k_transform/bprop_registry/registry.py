"""The bprop registry: gradient rules keyed by primitive class.

Contract (MindSpore's spelling):

    @bprop_getters.register(ops.Sin)
    def get_bprop_sin(self):              # self: the primitive instance
        def bprop(x, out, dout):          # inputs, forward output, sensitivity
            return (dout * jnp.cos(x),)   # exactly one gradient per input
        return bprop

- A getter is called once per distinct primitive instance (attributes
  included); the bprop it returns is Python in the parser's subset. The
  DFunctor parses it into a FuncGraph (`bprop_graph(prim, n, parse)`: the
  registry caches the graph but does not depend on the parser), so rules are
  differentiable again.
- `None` as a gradient means "not differentiable" (axes, shapes, keys);
  integer and boolean values get zeros.
- A variadic primitive (`n_inputs` None: tuple and dict literals) gets its
  inputs packed: `bprop(xs, out, dout)` returns one gradient per item of xs,
  as a tuple.
- The arity of `bprop` (inputs + 2) is checked at registration when the
  primitive's `n_inputs` is fixed and it can be built without arguments, and
  always when the rule is first used; a duplicate registration is an error
  unless `override=True`.
"""

from __future__ import annotations

import inspect

from k_transform.errors import KTransformError
from k_transform.ir.nodes import DebugInfo, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.protocol import kt_attribute


class BpropRegistry:
    """Maps primitive classes to bprop getters."""

    def __init__(self):
        self._getters: dict[type, object] = {}
        self._graphs: dict[Primitive, FuncGraph] = {}

    def register(self, prim_cls: type, override: bool = False):
        if not (isinstance(prim_cls, type) and issubclass(prim_cls, Primitive)):
            raise TypeError(f"bprop_getters.register expects a Primitive class, got {prim_cls!r}")

        def deco(getter):
            if prim_cls in self._getters and not override:
                raise KTransformError(
                    f"a bprop for {prim_cls.__name__} is already registered; "
                    "pass override=True to replace it"
                )
            self._getters[prim_cls] = getter
            self._graphs = {p: g for p, g in self._graphs.items() if type(p) is not prim_cls}
            _check_at_registration(prim_cls, getter)
            return getter

        return deco

    def has_rule(self, prim: Primitive) -> bool:
        return self._getter_for(prim) is not None

    def _getter_for(self, prim: Primitive):
        for cls in type(prim).__mro__:
            if cls in self._getters:
                return self._getters[cls]
        return None

    def rule_function(self, prim: Primitive):
        """The Python bprop registered for `prim` (for a rule made of another's)."""
        getter = self._getter_for(prim)
        if getter is None:
            raise KTransformError(f"no bprop is registered for {type(prim).__name__}")
        return getter(prim)

    def bprop_graph(self, prim: Primitive, n_inputs: int, parse, debug: DebugInfo | None = None):
        """The rule for `prim` applied to `n_inputs` inputs, as the FuncGraph
        `parse(bprop)` makes of it (cached until the class's rule changes)."""
        key = (prim, n_inputs)
        if key in self._graphs:
            return self._graphs[key]
        getter = self._getter_for(prim)
        if getter is None:
            raise KTransformError(
                f"cannot differentiate the primitive {prim!r}: no bprop is registered for "
                f"{type(prim).__name__} (register one with kt.bprop_getters.register)",
                debug,
            )
        try:
            bprop = getter(prim)
        except KTransformError as exc:
            raise KTransformError(exc.bare_message, debug) from None
        _check_arity(prim, bprop, n_inputs if prim.n_inputs is not None else 1, getter)
        graph = parse(bprop)
        graph.no_gradient = kt_attribute(bprop, "__kt_no_gradient__", False)  # helpers.no_gradient
        graph.rule_name = f"bprop of {type(prim).__name__} ({getter.__qualname__})"
        # Rules shipped with k_transform are verified by the registry sweep;
        # users' rules get their gradients' shapes checked at trace time.
        graph.trusted = getattr(bprop, "__module__", "").startswith("k_transform.")
        code = getattr(bprop, "__code__", None)
        if not graph.trusted and code is not None:  # the user's own bprop: where it is
            name = getattr(bprop, "__qualname__", getter.__qualname__)
            where = f"{code.co_filename}:{code.co_firstlineno}"
            graph.rule_name = f"bprop of {prim.name or type(prim).__name__} ({name}, {where})"
        self._graphs[key] = graph
        return graph

    def registered(self) -> list[type]:
        return list(self._getters)


def _check_arity(prim, bprop, n_inputs: int, getter) -> None:
    params = inspect.signature(bprop).parameters.values()
    fixed = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    if len(fixed) != n_inputs + 2 or len(fixed) != len(params):
        raise KTransformError(
            f"the bprop of {type(prim).__name__} from {getter.__qualname__} takes "
            f"{len(fixed)} parameters; it must take the {n_inputs} inputs, then out, dout"
        )


def _check_at_registration(prim_cls, getter) -> None:
    n = getattr(prim_cls, "n_inputs", None)
    if n is None:
        return
    try:
        prim = prim_cls()
    except TypeError:
        return  # needs attributes: checked when first used
    _check_arity(prim, getter(prim), n, getter)


bprop_getters = BpropRegistry()
