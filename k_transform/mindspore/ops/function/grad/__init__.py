"""`mindspore.ops.function.grad`: its module `grad_func`."""
