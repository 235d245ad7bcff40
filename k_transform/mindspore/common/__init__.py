"""`mindspore.common`: the table `names.COMMON`, and `dtype`, `initializer`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.common import dtype, initializer
from k_transform.mindspore.names import COMMON

globals().update(COMMON)
__all__ = sorted([*COMMON, "dtype", "initializer"])
__getattr__ = missing("mindspore.common")
