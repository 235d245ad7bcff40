"""`mindspore.ops.composite` (`C`): the table `names.COMPOSITE`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import COMPOSITE

globals().update(COMPOSITE)
__all__ = sorted(COMPOSITE)
__getattr__ = missing("mindspore.ops.composite")
