"""`mindspore.common`: the table `names.COMMON`, and `dtype`, `initializer`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.common import dtype, initializer
from k_transform.mindspore.names import COMMON

globals().update(COMMON)
__all__ = ["dtype", "initializer", *sorted(COMMON)]
__getattr__ = missing("mindspore.common")
