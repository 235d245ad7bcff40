"""MindSpore's `ops.linearize`, `ops.jet`, `ops.derivative` (over our `jvp`)
and `get_grad` (over `grad(..., return_ids=True)`), and the module paths
MindSpore's tests import (`mindspore.nn.grad`, `mindspore.common.tensor`,
`mindspore.common.api`, `mindspore._extends`).
Oracles: values MindSpore 2.10 printed for the same calls (GRAPH_MODE),
closed forms, and `jax.jvp`."""

import jax
import jax.numpy as jnp
import numpy as np

import k_transform.mindspore as ms
from k_transform.mindspore import nn, ops
from k_transform.mindspore.common.tensor import Tensor
from k_transform.mindspore.nn.grad import Jvp, Vjp
from k_transform.mindspore.ops.functional import derivative, jet, linearize

X = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
Y = np.array([[0.5, -1.0], [2.0, 1.5]], np.float32)


class ExpSin(nn.Cell):
    def construct(self, x):
        return ops.exp(ops.sin(x))


class SinTimes(nn.Cell):
    def construct(self, x, y):
        return ops.sin(x) * y


def test_jet_gives_mindspores_derivatives_along_the_path():
    series = Tensor(np.array([[[1, 1], [1, 1]], [[0.5, 0.2], [0, 0.3]]], np.float32))
    out, got = jet(ExpSin(), Tensor(X), series)
    np.testing.assert_allclose(out, np.exp(np.sin(X)), rtol=1e-6)
    # MindSpore 2.10 printed these (the first two rows of its third-order jet)
    want = [
        [[1.2533807754516602, -1.0331169366836548], [-1.1400384902954102, -0.3066661059856415]],
        [[-0.6481300592422485, -2.0340967178344727], [0.9661210179328918, 0.46351510286331177]],
    ]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_derivative_of_two_inputs():
    """Both inputs move along the path with derivative one (second order
    costs nested jvps: checked on one input above, as CI time allows)."""
    _, first = derivative(SinTimes(), (Tensor(X), Tensor(Y)), 1)
    # d/dt sin(x + t) (y + t) at 0: cos(x) y + sin(x)
    np.testing.assert_allclose(first, np.cos(X) * Y + np.sin(X), rtol=1e-5, atol=1e-6)


def test_linearize_is_jax_jvp_at_the_point():
    out, jvp_fn = linearize(SinTimes(), (Tensor(X), Tensor(Y)))
    vx, vy = np.ones_like(X), np.full_like(Y, 0.5)
    want_out, want = jax.jvp(lambda a, b: jnp.sin(a) * b, (X, Y), (vx, vy))
    np.testing.assert_allclose(out, want_out, rtol=1e-6)
    np.testing.assert_allclose(jvp_fn((Tensor(vx), Tensor(vy))), want, rtol=1e-6)
    single_out, single = linearize(ExpSin(), Tensor(X))
    np.testing.assert_allclose(
        single(Tensor(vx)), jax.jvp(lambda a: jnp.exp(jnp.sin(a)), (X,), (vx,))[1], rtol=1e-6
    )


class Scaled(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(Tensor(np.array([2.0, -1.0], np.float32)), name="w")

    def construct(self, x, y):
        return (self.w * x * y).sum()


def test_get_grad_finds_a_position_or_a_parameter():
    net = Scaled()
    x, y = Tensor(np.array([1.0, 3.0], np.float32)), Tensor(np.array([0.5, 2.0], np.float32))
    grads = ms.grad(net, (0, 1), net.trainable_params(), return_ids=True)(x, y)
    w = np.array([2.0, -1.0], np.float32)
    np.testing.assert_allclose(ms.get_grad(grads, 0), w * np.asarray(y))
    np.testing.assert_allclose(ops.get_grad(grads, 1), w * np.asarray(x))
    np.testing.assert_allclose(ms.get_grad(grads, net.w), np.asarray(x) * np.asarray(y))
    try:
        ms.get_grad(grads, 2)
    except RuntimeError as e:
        assert "no gradient for 2" in str(e)
    else:
        raise AssertionError("get_grad of a position not asked for must raise")


def test_mindspores_module_paths():
    from k_transform.mindspore._extends import cell_attr_register
    from k_transform.mindspore._extends.parse import compile_config
    from k_transform.mindspore.common.api import _pynative_executor, jit

    assert Jvp is nn.Jvp and Vjp is nn.Vjp and Tensor is ms.Tensor and jit is ms.jit
    _pynative_executor.sync()
    compile_config.CHECK_BPROP = 1  # MindSpore's tests switch it; a no-op here
    ms.set_context(jit_config={"jit_level": "O0"})  # a compiler setting: speed only

    class Scale(nn.Cell):
        @cell_attr_register
        def __init__(self, k):
            super().__init__()
            self.k = k

        def construct(self, x):
            return x * self.k

    cell = Scale(3.0)
    assert cell.cell_init_args == "Scale[3.0]"
    np.testing.assert_allclose(ms.grad(cell)(Tensor(X)), np.full_like(X, 3.0))
