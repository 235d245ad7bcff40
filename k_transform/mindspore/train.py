"""`mindspore.train`: the table `names.TRAIN` (`Model`, callbacks, checkpoints)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import TRAIN

globals().update(TRAIN)
__all__ = sorted(TRAIN)
__getattr__ = missing("mindspore.train")
