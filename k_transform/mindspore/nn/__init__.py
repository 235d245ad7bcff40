"""`mindspore.nn`: the table `names.NN` (layers, losses, optimizers, wrappers)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import NN

globals().update(NN)
__all__ = sorted(NN)
__getattr__ = missing("mindspore.nn")
