"""`kt.common`: what MindSpore keeps in `mindspore.common` (initializers)."""

from k_transform.common import initializer

__all__ = ["initializer"]
