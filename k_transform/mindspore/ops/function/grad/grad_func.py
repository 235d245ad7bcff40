"""`mindspore.ops.function.grad.grad_func`: the table `names.GRAD_FUNC`
(`grad`, `vjp`, `jvp`, ..., and `custom_vjp`)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import GRAD_FUNC

globals().update(GRAD_FUNC)
__all__ = sorted(GRAD_FUNC)
__getattr__ = missing("mindspore.ops.function.grad.grad_func")
