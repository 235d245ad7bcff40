"""`mindspore.ops.functional` (`F`): the table `names.FUNCTIONAL`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import FUNCTIONAL

globals().update(FUNCTIONAL)
__all__ = sorted(FUNCTIONAL)
__getattr__ = missing("mindspore.ops.functional")
