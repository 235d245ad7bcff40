"""`mindspore.dataset`: the table `names.DATASET` (`NumpySlicesDataset`)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import DATASET

globals().update(DATASET)
__all__ = sorted(DATASET)
__getattr__ = missing("mindspore.dataset")
