"""`mindspore.common.initializer`: the table `names.INITIALIZER` (`Normal`,
`initializer`, ...; values from k_transform's generator, not MindSpore's)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import INITIALIZER

globals().update(INITIALIZER)
__all__ = sorted(INITIALIZER)
__getattr__ = missing("mindspore.common.initializer")
