"""dfunctor."""
