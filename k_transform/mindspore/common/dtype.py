"""`mindspore.common.dtype` (`import mindspore.common.dtype as mstype`): the
table `names.DTYPES`, MindSpore's dtype names as JAX dtypes."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import DTYPES

globals().update(DTYPES)
__all__ = sorted(DTYPES)
__getattr__ = missing("mindspore.common.dtype")
