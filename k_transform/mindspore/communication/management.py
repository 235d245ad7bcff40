"""`mindspore.communication.management`: the table `names.COMMUNICATION`."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import COMMUNICATION

globals().update(COMMUNICATION)
__all__ = sorted(COMMUNICATION)
__getattr__ = missing("mindspore.communication.management")
