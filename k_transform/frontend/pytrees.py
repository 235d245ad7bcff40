"""Pytree nodes built and updated in parsed code.

A call of a NamedTuple class or of a dataclass (`Params(w, b)`,
`Params(w=w, b=b)`) becomes `prims.MakeNode(cls, field names)` over the
field values, its positional arguments named by the class's fields;
`p._replace(w=...)` and `dataclasses.replace(p, w=...)` become
`prims.ReplaceFields(names)(p, (values...))`. Their rules give the gradient
as the same pytree type, field by field. Reading a field (`p.w`) is
`prims.GetAttr`. Other classes (a `register_pytree_node_class` with its own
`__init__`) stay library calls: their constructor maps arguments to
children in a way only their code knows.
"""

from __future__ import annotations

import dataclasses

import jax

from k_transform.errors import KTransformError
from k_transform.ops import python as prims


def field_names(cls) -> tuple[str, ...] | None:
    """The fields a NamedTuple or dataclass `cls` takes, in order; None for other classes."""
    if not isinstance(cls, type):
        return None
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return tuple(cls._fields)
    if dataclasses.is_dataclass(cls) and _registered(cls):
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)
    return None


def _registered(cls) -> bool:
    """Whether dataclass `cls` is a pytree JAX knows (`register_dataclass`,
    `register_pytree_node_class`, flax's `struct`). An instance of one that
    is not is an opaque Python object to JAX, as to us: a user class (its
    gradient is not field by field), so code making one from values runs as
    Python (`frontend.python_code`)."""
    probe = object.__new__(cls)  # no __init__: nothing of the user's runs
    try:
        structure = jax.tree_util.tree_structure(probe)
    except Exception:  # noqa: BLE001 - its flatten read a field the probe lacks
        return True
    return not jax.tree_util.treedef_is_leaf(structure)


def constructor(cls, args: list, kwargs: dict):
    """`(MakeNode, inputs)` for a call `cls(*args, **kwargs)`, or None when `cls`
    is not a NamedTuple or dataclass."""
    names = field_names(cls)
    if names is None or _own_init(cls):
        return None
    if len(args) > len(names):
        raise KTransformError(f"{cls.__name__}() takes {len(names)} fields, got {len(args)}")
    chosen = names[: len(args)] + tuple(kwargs)
    if len(set(chosen)) != len(chosen) or not set(kwargs) <= set(names):
        raise KTransformError(f"{cls.__name__}(): a field given twice or unknown: {chosen}")
    return prims.MakeNode(cls, chosen), [*args, *kwargs.values()]


def _own_init(cls) -> bool:
    """Whether dataclass `cls` is made by an `__init__` of its own (written
    in the class, `init=False`: `jax.scipy.stats.gaussian_kde(dataset)`),
    not the one `dataclasses` generates from the fields: its arguments are
    no fields, so the call is its code's (a library call, or parsed)."""
    if not dataclasses.is_dataclass(cls):
        return False
    init = getattr(getattr(cls, "__init__", None), "__code__", None)
    # (generated code has no file: `<string>`)
    return init is not None and not init.co_filename.startswith("<")


def is_replace(value) -> bool:
    """`dataclasses.replace`."""
    return value is dataclasses.replace


def opaque_dataclass(value) -> bool:
    """An instance of a dataclass JAX does not know as a pytree."""
    kind = type(value)
    return dataclasses.is_dataclass(kind) and field_names(kind) is None
