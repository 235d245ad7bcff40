"""codegen."""
