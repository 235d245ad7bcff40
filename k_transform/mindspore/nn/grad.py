"""`mindspore.nn.grad`: `Jvp` and `Vjp` (the cells of `names.NN`)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import NN

Jvp, Vjp = NN["Jvp"], NN["Vjp"]
__all__ = ["Jvp", "Vjp"]
__getattr__ = missing("mindspore.nn.grad")
