"""bprop_registry."""
