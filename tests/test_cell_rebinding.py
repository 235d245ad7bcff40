"""A Cell's attributes are read when the program runs, as Python reads them:
`set_train` after a gradient or a training Cell was built, and a sub-Cell
replaced, are seen by the next call (`frontend/guards.py`; they were read
once, when the program was first transformed: a training step built before
`set_train()`, MindSpore's usual order, ran BatchNorm in inference mode and
returned a wrong loss with no error). Oracles: a closed form of the loss in
NumPy, MindSpore 2.10's printed loss, and a gradient object made afresh."""

import jax
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.frontend import parser
from k_transform.mindspore import Tensor, nn

W = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]], np.float32)
X = np.arange(12, dtype=np.float32).reshape(4, 3)
Y = np.array([0, 1, 0, 1], np.int32)


class Net(nn.Cell):
    def __init__(self, w=W):
        super().__init__()
        self.fc = nn.Dense(3, 2, weight_init=Tensor(w), bias_init="zeros")
        self.bn = nn.BatchNorm1d(2)

    def construct(self, x):
        return self.bn(self.fc(x))


def closed_form_loss(w=W, training=True, eps=1e-5):
    """Softmax cross entropy of BatchNorm (batch statistics when training,
    else the initial moving ones: mean 0, variance 1) of `x @ w.T`."""
    h = X @ w.T
    if training:
        h = (h - h.mean(0)) / np.sqrt(h.var(0) + eps)
    else:
        h = h / np.sqrt(1.0 + eps)
    logp = h - np.log(np.exp(h).sum(1, keepdims=True))
    return -logp[np.arange(4), Y].mean()


def with_loss(net):
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))


@pytest.mark.parametrize("order", ["set_train after wrapping", "set_train before"])
def test_a_training_step_sees_set_train_whenever_it_is_called(order):
    net = Net()
    loss = with_loss(net)
    if order == "set_train before":
        loss.set_train()
    train = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    if order == "set_train after wrapping":
        train.set_train()  # MindSpore's examples' order
    first = float(train(Tensor(X), Tensor(Y)))
    assert first == pytest.approx(1.5460765, rel=1e-5)  # MindSpore 2.10 printed 1.5460765
    assert first == pytest.approx(closed_form_loss(), rel=1e-5)


def test_one_gradient_follows_set_train_back_and_forth():
    loss = with_loss(Net())
    grad = ms.value_and_grad(loss, None, loss.trainable_params())
    assert float(grad(X, Y)[0]) == pytest.approx(closed_form_loss(training=False), rel=1e-5)
    loss.set_train(True)
    assert float(grad(X, Y)[0]) == pytest.approx(closed_form_loss(training=True), rel=1e-5)
    loss.set_train(False)  # the moving statistics moved: compare with a fresh gradient
    value, grads = grad(X, Y)
    fresh_value, fresh_grads = ms.value_and_grad(loss, None, loss.trainable_params())(X, Y)
    assert float(value) == pytest.approx(float(fresh_value), rel=1e-6)
    for g, f in zip(jax.tree.leaves(grads), jax.tree.leaves(fresh_grads), strict=True):
        np.testing.assert_allclose(g, f, rtol=1e-6)


def test_a_replaced_sub_cell_is_read_anew_and_nothing_is_parsed_per_call(monkeypatch):
    net = Net()
    loss = with_loss(net)
    loss.set_train()
    grad = kt.GradOperation(get_all=True)(loss)
    grad(X, Y)
    parses = []
    init = parser.FunctionParser.__init__

    def counted(self, *args, **kwargs):
        parses.append(args)
        init(self, *args, **kwargs)

    monkeypatch.setattr(parser.FunctionParser, "__init__", counted)
    grad(X, Y)
    grad(X, Y)
    assert not parses  # attributes unchanged: the program is reused
    w2 = 0.5 * W[::-1].copy()
    net.fc = nn.Dense(3, 2, weight_init=Tensor(w2), bias_init="zeros")
    dx, _ = grad(X, Y)
    want = jax.grad(lambda x: _jax_loss(x, w2))(X)
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-6)


def _jax_loss(x, w, eps=1e-5):
    import jax.numpy as jnp

    h = x @ w.T
    h = (h - h.mean(0)) / jnp.sqrt(h.var(0) + eps)
    logp = h - jnp.log(jnp.exp(h).sum(1, keepdims=True))
    return -logp[jnp.arange(4), Y].mean()
