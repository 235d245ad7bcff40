"""`mindspore.ops.operations` (`P`): the table `names.OPERATIONS`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import OPERATIONS, OPS_DIFFERS

globals().update(OPERATIONS)
__all__ = sorted(OPERATIONS)
__getattr__ = missing("mindspore.ops.operations", OPS_DIFFERS)
