"""`mindspore.common.tensor`: `Tensor` (the one of `names.COMMON`)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import COMMON

Tensor = COMMON["Tensor"]
__all__ = ["Tensor"]
__getattr__ = missing("mindspore.common.tensor")
