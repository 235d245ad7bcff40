"""Building blocks for primitive definitions.

`JaxPrimitive` is a primitive computed by one jax function: subclasses set
`jax_fn` (a staticmethod) and `jax_name` (how generated code spells it, e.g.
"jnp.sin"), and list their attributes as keyword arguments of `__init__`;
attributes become keyword arguments of the jax call when `jax_kwargs` names
them (`ReduceSum(keep_dims=True)` -> `jnp.sum(x, axis, keepdims=True)`).

`elementwise(name, fn, jax_name, n_inputs)` makes the common case, a class
with no attributes, in one line. `AttrPrimitive` is for primitives whose
`impl` is more than one jax call (convolutions, pooling, batch norm).
Rules live in `k_transform.bprop_registry`.
"""

from __future__ import annotations

import ast

from k_transform import runtime as rt
from k_transform.ir.primitive import Primitive


class JaxPrimitive(Primitive):
    jax_fn = None
    jax_name = ""
    jax_kwargs: dict[str, str] = {}  # attribute -> keyword of jax_fn

    def __init__(self, **attrs):
        super().__init__(type(self).__name__, **attrs)

    def call_kwargs(self) -> dict:
        return {kw: getattr(self, attr) for attr, kw in self.jax_kwargs.items()}

    def impl(self, *args):
        return type(self).jax_fn(*args, **self.call_kwargs())

    def emit(self, e, args):
        kwargs = [f"{kw}={getattr(self, attr)!r}" for attr, kw in self.jax_kwargs.items()]
        fn = e.ref(type(self).jax_fn, self.jax_name)
        return f"{fn}({', '.join([*args, *kwargs])})"


def elementwise(name: str, fn, jax_name: str, n_inputs: int = 1, doc: str = "") -> type:
    """A JaxPrimitive class `name` computing `fn` on `n_inputs` arrays."""
    return type(
        name,
        (JaxPrimitive,),
        {
            "jax_fn": staticmethod(fn),
            "jax_name": jax_name,
            "n_inputs": n_inputs,
            "__doc__": doc or f"`{jax_name}` elementwise.",
            "__module__": "k_transform.ops",
        },
    )


class OperatorPrimitive(Primitive):
    """A Python operator (`a + b`, `-a`): Python semantics, emitted as the operator."""

    symbol = ""
    op = None
    static_when = "inputs"  # Python values in, a Python value out (codegen.static)

    def __init__(self):
        super().__init__(type(self).__name__)

    def impl(self, *args):
        return type(self).op(*args)

    def emit(self, e, args):
        if len(args) == 1:
            return f"{self.symbol}{args[0]}"
        singletons = ("None", "True", "False")
        if (
            self.symbol in ("is", "is not")
            and any(a in singletons for a in args)
            and all(map(_singleton_or_literal, args))
        ):
            # `0 is None`: a constant reached a rule's branch only as it was
            # emitted; Python warns on `is` with a literal, so write its value
            # (well defined: one side is a singleton)
            return repr(type(self).op(*map(ast.literal_eval, args)))
        return f"{args[0]} {self.symbol} {args[1]}"


def _singleton_or_literal(text: str) -> bool:
    """Whether `text` is a Python literal of a number, string, None, True or False."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return value is None or isinstance(value, (bool, int, float, str))


def operator_primitive(name: str, op, symbol: str, n_inputs: int = 2, doc: str = "") -> type:
    return type(
        name,
        (OperatorPrimitive,),
        {
            "op": staticmethod(op),
            "symbol": symbol,
            "n_inputs": n_inputs,
            "__doc__": doc or f"`{symbol}` with Python semantics (arrays broadcast).",
            "__module__": "k_transform.ops",
        },
    )


class AttrPrimitive(Primitive):
    """A primitive with keyword attributes whose `impl` is a method; generated
    code calls the instance (`Conv2D(x, w)`), which runs `impl`."""

    def __init__(self, **attrs):
        super().__init__(type(self).__name__, **attrs)


class RuntimeCall(Primitive):
    """A primitive computed by one run-time helper `module.<rt_name>`, called
    in generated code as `<alias>.<rt_name>(*args, *extra())`."""

    module = rt
    alias = "_rt"
    rt_name = ""

    def impl(self, *args):
        return getattr(self.module, self.rt_name)(*args, *self.extra())

    def extra(self) -> list:
        return []

    def emit(self, e, args):
        extra = [repr(v) for v in self.extra()]
        return f"{e.ref(self.module, self.alias)}.{self.rt_name}({', '.join([*args, *extra])})"
