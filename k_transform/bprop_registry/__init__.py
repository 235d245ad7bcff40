"""The bprop registry: `bprop_getters` maps primitive classes to gradient rules.

The rules themselves live beside their primitives (`k_transform.ops.<family>`,
`k_transform.control.prims`), so a primitive and its rule are read and changed
together; `helpers` has the one-line forms for common rule shapes.
"""

from k_transform.bprop_registry.registry import BpropRegistry, bprop_getters

__all__ = ["BpropRegistry", "bprop_getters"]
