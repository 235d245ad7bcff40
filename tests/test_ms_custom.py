"""MindSpore's `custom_vjp` (`mindspore.ops.function.grad.grad_func`) and
`ops.Custom(func_type="pyfunc")` (`k_transform/mindspore/custom.py`).
Oracles: closed forms of the gradients the user's backward functions
define, and the values MindSpore 2.10 printed for the same
programs (GRAPH_MODE, recorded below)."""

import jax.numpy as jnp
import numpy as np
import pytest

import k_transform.mindspore as ms
from k_transform.errors import KTransformError
from k_transform.mindspore import Parameter, Tensor, nn, ops
from k_transform.mindspore.ops import composite as C
from k_transform.mindspore.ops import operations as P
from k_transform.mindspore.ops.function.grad.grad_func import custom_vjp, vjp

X = Tensor(np.array([1.0, 2.0], np.float32))
Y = Tensor(np.array([3.0, 5.0], np.float32))
V = Tensor(np.array([1.0, -2.0], np.float32))


def close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@custom_vjp
def mul_add(x, y):
    return 2 * x + y


def mul_add_bwd(x, y, out, dout):  # not the true derivative: it must be this one
    return 2 * dout, 2 * y


mul_add.defbwd(mul_add_bwd)


def test_vjp_is_the_backward_function_given():
    out, vjp_fn = vjp(mul_add, X, Y)
    close(out, 2 * X + Y)
    dx, dy = vjp_fn(V)
    close(dx, 2 * V)
    close(dy, 2 * Y)


def test_inside_jit_and_beside_other_code():
    @ms.jit
    def inline(x, y):
        return mul_add(x, y) + x + 2 * y

    _, vjp_fn = vjp(inline, X, Y)
    dx, dy = vjp_fn(V)
    close(dx, 3 * V)  # 2 dout (backward) + dout
    close(dy, 2 * Y + 2 * V)


class MatMulNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = P.MatMul()
        self.z = Parameter(Tensor(np.array([1.0], np.float32)), name="z")

    def construct(self, x, y):
        return self.matmul(x * self.z, y)


@custom_vjp
def through_net(x, y):
    return MatMulNet()(x, y)


def through_net_bwd(x, y, out, dout):
    return x + x, y + y


through_net.defbwd(through_net_bwd)


class CallsIt(nn.Cell):
    def construct(self, x, y):
        return through_net(x, y)


def test_grad_operation_of_a_cell_calling_it():
    x = Tensor(np.array([[0.5, 0.6, 0.4], [1.2, 1.3, 1.1]], np.float32))
    y = Tensor(np.array([[0.01, 0.3, 1.1], [0.1, 0.2, 1.3], [2.1, 1.2, 3.3]], np.float32))
    dx, dy = C.GradOperation(get_all=True)(CallsIt())(x, y)
    close(dx, 2 * x)
    close(dy, 2 * y)
    close(CallsIt()(x, y), x @ y)


@custom_vjp
def cube(x):
    return x * x * x


def cube_bwd(x, out, dout):  # 5 x^2 on purpose (not 3 x^2)
    return (dout * 5 * x * x,)


cube.defbwd(cube_bwd)


def test_second_order_differentiates_the_backward_function():
    first = ms.grad(lambda x: cube(x).sum())
    close(first(X), 5 * X * X)
    second = ms.grad(lambda x: first(x).sum())
    close(second(X), 10 * X)


def test_without_a_backward_function_it_says_so():
    @custom_vjp
    def plain(x):
        return x * 2

    close(plain(X), 2 * X)
    with pytest.raises(KTransformError, match="defbwd"):
        ms.grad(lambda x: plain(x).sum())(X)


# -- ops.Custom ---------------------------------------------------------------------
def host_fn(a, b):
    assert isinstance(a, np.ndarray)  # run on the host, with numpy arrays
    return a * b + 1


def host_bprop(a, b, out, dout):
    return dout * b * 10, dout * a


class Twice(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, a, b):
        return self.op(a, b) * 2


def custom(bprop=host_bprop):
    return ops.Custom(host_fn, lambda a, b: a, lambda a, b: a, "pyfunc", bprop=bprop)


def test_pyfunc_forward_and_its_bprop():
    net = Twice(custom())
    close(net(X, Y), [8.0, 22.0])  # MindSpore 2.10 printed [8, 22]
    for grad in (ms.grad(net, (0, 1)), ms.jit(ms.grad(net, (0, 1)))):
        dx, dy = grad(X, Y)
        # MindSpore 2.10 printed [60, 100] and [2, 4]
        close(dx, [60.0, 100.0])
        close(dy, [2.0, 4.0])


def test_pyfunc_without_bprop_refuses_its_gradient():
    net = Twice(custom(bprop=None))
    close(ms.jit(net.construct)(X, Y), [8.0, 22.0])
    with pytest.raises(KTransformError, match="no bprop"):
        ms.grad(net, (0, 1))(X, Y)


def test_pyfunc_outputs_given_as_values_or_several():
    fixed = ops.Custom(host_fn, (2,), ms.float32, "pyfunc")
    close(fixed(X, Y), [4.0, 11.0])
    pair = ops.Custom(lambda a: (a * 2, a + 1), lambda a: (a, a), lambda a: (a, a), "pyfunc")
    first, second = pair(X)  # MindSpore 2.10 printed ([2, 4], [2, 3])
    close(first, [2.0, 4.0])
    close(second, [2.0, 3.0])


def test_pyfunc_bprop_beside_differentiated_code():
    net = Twice(custom())

    def f(a, b):
        return (net(a, b) * jnp.sin(a)).sum()

    da, db = ms.grad(f, (0, 1))(X, Y)
    # closed form: out = 2 c, c = a b + 1 on the host, whose gradient is the
    # bprop's (d_a = 10 dc b, d_b = dc a), with dc = 2 sin(a) from f
    a, b = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    dc = 2 * np.sin(a)
    close(da, dc * b * 10 + 2 * (a * b + 1) * np.cos(a))
    close(db, dc * a)


@pytest.mark.parametrize("func_type", ["hybrid", "akg", "aot", "tbe", "aicpu"])
def test_kernel_func_types_are_refused_by_name(func_type):
    with pytest.raises(KTransformError, match=f"func_type='{func_type}'"):
        ops.Custom(host_fn, lambda a, b: a, lambda a, b: a, func_type)


def test_bad_arguments_are_mindspores_errors():
    with pytest.raises(ValueError, match="'func_type' must be one of"):
        ops.Custom(host_fn, lambda a, b: a, lambda a, b: a, "julia")
    with pytest.raises(TypeError, match="out_shape"):
        ops.Custom(host_fn, func_type="pyfunc")


def test_pyfunc_under_vmap_and_a_wrong_shape():
    op = custom(bprop=None)
    a, b = jnp.ones((3, 2)), jnp.arange(6.0).reshape(3, 2)
    close(ms.vmap(op)(a, b), a * b + 1)  # the host function once per row
    wrong = ops.Custom(lambda u, v: np.concatenate([u, v]), lambda u, v: u, lambda u, v: u)
    with pytest.raises(Exception, match="returned shape \\(4,\\), but out_shape says \\(2,\\)"):
        np.asarray(wrong(X, Y))


def test_a_second_defbwd_replaces_the_first():
    @custom_vjp
    def double(x):
        return 2 * x

    double.defbwd(lambda x, out, dout: (dout * 3,))
    close(ms.grad(lambda x: double(x).sum())(X), [3.0, 3.0])
    double.defbwd(lambda x, out, dout: (dout * 5,))
    close(ms.grad(lambda x: double(x).sum())(X), [5.0, 5.0])
