"""`mindspore.ops.function`: the package of MindSpore's functional ops; here
only its `grad` package (`grad.grad_func`), where MindSpore's tests import
`custom_vjp` from."""
