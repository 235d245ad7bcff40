"""Which primitive a library call or array method becomes.

The parser asks `adapt_function(fn, call)` for `jnp.sin(x)`, `np.sum(x, axis=0)`,
`math.exp(a)`, and `adapt_method(name, call)` for `x.sum(axis=0)` (the receiver
is `call.args[0]`). An adapter returns `(primitive, inputs)` or None, in which
case the call stays an opaque `LibraryCall` / `MethodCall` (it runs, but has
no gradient rule). Adapters read static arguments (axes, shapes, flags) with
`call.static(...)`, which raises `NotStatic` when the argument is traced:
the adapter then does not apply.
"""

from __future__ import annotations

from collections.abc import Callable

from k_transform.ir.nodes import Constant, Node


class NotStatic(Exception):
    """A static argument (axis, shape, flag) is a traced value."""


class Call:
    """The arguments of one call, as IR nodes."""

    def __init__(self, args: list[Node], kwargs: dict[str, Node]):
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def arg(self, index: int, name: str, default=None) -> Node | None:
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)

    def static(self, index: int, name: str, default=None):
        node = self.arg(index, name)
        if node is None:
            return default
        if not isinstance(node, Constant):
            raise NotStatic(name)
        return node.value

    def names_ok(self, allowed: tuple[str, ...], max_positional: int) -> bool:
        return len(self.args) <= max_positional and set(self.kwargs) <= set(allowed)


Adapter = Callable[[Call], "tuple | None"]
_FUNCTIONS: dict[int, tuple[object, Adapter]] = {}
_METHODS: dict[str, Adapter] = {}
_HELPER_METHODS: dict[str, Adapter] = {}  # `x.at[i].min(v)`: tried before `x.min()`


def register_function(*fns) -> Callable[[Adapter], Adapter]:
    def deco(adapter: Adapter) -> Adapter:
        for fn in fns:
            if id(fn) in _FUNCTIONS:
                raise ValueError(f"{fn} is already mapped to a primitive")
            _FUNCTIONS[id(fn)] = (fn, adapter)
        return adapter

    return deco


def register_method(*names: str, helper: bool = False) -> Callable[[Adapter], Adapter]:
    """Map `x.name(...)` to a primitive. `helper`: a method of a helper object
    (`x.at[i].min(v)`); its adapter returns None for other receivers, which
    then get the plain method's (`x.min()`)."""
    table = _HELPER_METHODS if helper else _METHODS

    def deco(adapter: Adapter) -> Adapter:
        for name in names:
            if name in table:
                raise ValueError(f"method {name} is already mapped to a primitive")
            table[name] = adapter
        return adapter

    return deco


def positional(prim_cls, n: int) -> Adapter:
    """Adapter for `fn(x1, ..., xn)` -> `prim_cls()(x1, ..., xn)`."""

    def adapter(call: Call):
        if call.kwargs or len(call.args) != n:
            return None
        return prim_cls(), call.args

    return adapter


def map_functions(table: dict[type, tuple], n: int = 1) -> None:
    """Map each primitive class to the library functions listed for it."""
    for prim_cls, fns in table.items():
        register_function(*fns)(positional(prim_cls, n))


_ATTRIBUTES: dict[str, Adapter] = {}


def register_attribute(*names: str) -> Callable[[Adapter], Adapter]:
    """Map `x.name` on a runtime value (`x.T`) to a primitive; the adapter
    gets a Call whose only argument is the receiver."""

    def deco(adapter: Adapter) -> Adapter:
        for name in names:
            if name in _ATTRIBUTES:
                raise ValueError(f"attribute {name} is already mapped to a primitive")
            _ATTRIBUTES[name] = adapter
        return adapter

    return deco


def adapt_attribute(name: str, receiver: Node):
    adapter = _ATTRIBUTES.get(name)
    return _run(adapter, Call([receiver], {})) if adapter is not None else None


def adapt_function(fn, call: Call):
    entry = _FUNCTIONS.get(id(fn))
    if entry is None or entry[0] is not fn:
        return None
    return _run(entry[1], call)


def adapt_method(name: str, call: Call):
    helper = _HELPER_METHODS.get(name)
    adapted = _run(helper, call) if helper is not None else None
    if adapted is not None:
        return adapted
    adapter = _METHODS.get(name)
    return _run(adapter, call) if adapter is not None else None


def primitive_for_value(fn):
    """The primitive a library function stands for when passed as a value."""
    entry = _FUNCTIONS.get(id(fn))
    if entry is None or entry[0] is not fn:
        return None
    probe = _run(entry[1], Call([_PROBE], {}))
    return probe[0] if probe is not None else None


_PROBE = Constant(None, hint="probe")
NONE = Constant(None)  # an omitted optional input (axis=None)


def _run(adapter: Adapter, call: Call):
    try:
        return adapter(call)
    except NotStatic:
        return None
