"""Gradient rules, one module per family; `bprop_getters` is the registry."""

from k_transform.bprop_registry import (  # noqa: F401
    arithmetic,
    conv,
    elementwise,
    gather,
    linalg,
    nn,
    reduction,
    shape,
    structural,
)
from k_transform.bprop_registry.registry import BpropRegistry, bprop_getters

__all__ = ["BpropRegistry", "bprop_getters"]
