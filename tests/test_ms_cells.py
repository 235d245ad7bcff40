"""MindSpore parity of Cells (issue 14): silent-wrong cases and calling a Cell.

- Fresh Cells never get another Cell's gradients: Cells built, differentiated
  and dropped one after another (ids are reused) each get the gradient of
  their own weights, eagerly and jitted (oracle: `jax.grad` of the same
  program written over the weights' values).
- A `bprop` defined on the Cell being differentiated is its gradient, as on
  a sub-Cell (MindSpore's `bprop(self, *inputs, out, dout)`; closed forms).
- Loss defaults are MindSpore 2.x's: `SoftmaxCrossEntropyWithLogits` does
  not reduce, `MSELoss` takes the mean; an unknown reduction is a ValueError.
- `net(x)` and `kt.jit(net)(x)` work for every Cell `kt.nn` exports, with
  values checked against pure-JAX programs.
"""

from __future__ import annotations

import gc
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn

RNG = np.random.RandomState(0)
VEC = jnp.asarray(RNG.randn(2, 4).astype(np.float32))
IMG = jnp.asarray(RNG.randn(2, 3, 6, 6).astype(np.float32))
IDS = jnp.asarray([[0, 2], [4, 1]], jnp.int32)
LABELS = jnp.asarray([1, 3], jnp.int32)
KEY = jax.random.PRNGKey(3)
NCHW = ("NCHW", "OIHW", "NCHW")


def close(got, want, tol=1e-5):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


def dense_ref(w, b, x):
    """`nn.Dense` on the values of its weight (MindSpore's layout, (out, in)) and bias."""
    return x @ w.T + b


# -- 1. fresh Cells never get another Cell's gradients ---------------------------------------
class Fresh(kt.Cell):
    """A sub-Cell (Dense with tanh) and an own Parameter, values from `seed`."""

    def __init__(self, seed):
        super().__init__()
        self.dense = nn.Dense(4, 3, activation=nn.Tanh(), seed=seed)
        self.dense.bias.set_data(np.random.RandomState(seed).randn(3).astype(np.float32))
        self.scale = kt.Parameter(np.random.RandomState(seed + 1).randn(3).astype(np.float32))

    def construct(self, x):
        return jnp.sum(self.dense(x) * self.scale)


def fresh_ref(values, x):
    w, b, scale = values
    return jnp.sum(jnp.tanh(dense_ref(w, b, x)) * scale)


def test_fresh_cells_get_their_own_gradients(mode):
    wrong = []
    for seed in range(3):  # each Cell is parsed and compiled afresh (~1.3 s): CI time
        net = Fresh(seed)
        weights = kt.ParameterTuple([net.dense.weight, net.dense.bias, net.scale])
        got = kt.GradOperation(get_by_list=True)(net, weights)(VEC)
        want = jax.grad(fresh_ref)([p.data for p in weights], VEC)
        if not all(np.allclose(g, w, atol=1e-5) for g, w in zip(got, want, strict=True)):
            wrong.append(seed)
        del net, weights, got
        gc.collect()  # ids of the dropped Cell and Parameters are free for the next
    assert wrong == [], f"{mode}: stale gradients for seeds {wrong}"


# -- 2. bprop on the Cell being differentiated ---------------------------------------------------
class OwnBprop(kt.Cell):
    """Forward sin(x) * y; its bprop says (2 dout, 3 dout), on purpose not the derivative."""

    def construct(self, x, y):
        return jnp.sin(x) * y

    def bprop(self, x, y, out, dout):
        return (2.0 * dout, 3.0 * dout)


class Outer(kt.Cell):
    def __init__(self):
        super().__init__()
        self.inner = OwnBprop()

    def construct(self, x, y):
        return self.inner(x, y)


X2 = jnp.asarray([0.3, 1.7], jnp.float32)
Y2 = jnp.asarray([1.5, -2.0], jnp.float32)


def test_top_level_cell_bprop_is_its_gradient(mode):
    ones = jnp.ones_like(X2)
    close(kt.GradOperation(get_all=True)(OwnBprop())(X2, Y2), (2.0 * ones, 3.0 * ones))
    close(kt.GradOperation()(OwnBprop())(X2, Y2), 2.0 * ones)
    sens = jnp.asarray([5.0, 7.0], jnp.float32)
    got = kt.GradOperation(get_all=True, sens_param=True)(OwnBprop())(X2, Y2, sens)
    close(got, (2.0 * sens, 3.0 * sens))
    value, grads = kt.value_and_grad(OwnBprop(), grad_position=(0, 1))(X2, Y2)
    close(value, jnp.sin(X2) * Y2)
    close(grads, (2.0 * ones, 3.0 * ones))


def test_top_level_bprop_agrees_with_the_sub_cell_bprop(mode):
    top = kt.GradOperation(get_all=True)(OwnBprop())(X2, Y2)
    nested = kt.GradOperation(get_all=True)(Outer())(X2, Y2)
    close(top, nested)


def test_cell_with_bprop_runs_its_construct_forward(mode):
    close(kt.jit(OwnBprop())(X2, Y2), jnp.sin(X2) * Y2)
    close(OwnBprop()(X2, Y2), jnp.sin(X2) * Y2)


# -- 3. loss defaults as MindSpore 2.x ------------------------------------------------------
def cross_entropy_ref(logits, labels):
    return -jnp.sum(jax.nn.one_hot(labels, logits.shape[-1]) * jax.nn.log_softmax(logits), -1)


def test_softmax_cross_entropy_does_not_reduce_by_default(mode):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    assert loss.reduction == "none"
    close(kt.jit(loss)(VEC, LABELS), cross_entropy_ref(VEC, LABELS))
    dense = nn.SoftmaxCrossEntropyWithLogits()
    close(dense(VEC, jax.nn.one_hot(LABELS, 4)), cross_entropy_ref(VEC, LABELS))
    mean = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    close(mean(VEC, LABELS), jnp.mean(cross_entropy_ref(VEC, LABELS)))
    # unreduced: the sensitivity is ones per example, as MindSpore's GradOperation
    got = kt.GradOperation()(loss)(VEC, LABELS)
    close(got, jax.grad(lambda lg: jnp.sum(cross_entropy_ref(lg, LABELS)))(VEC))


def test_mse_loss_takes_the_mean_by_default():
    assert nn.MSELoss().reduction == "mean"
    close(nn.MSELoss()(VEC, 0.5 * VEC), jnp.mean((0.5 * VEC) ** 2))
    close(nn.MSELoss("sum")(VEC, 0.5 * VEC), jnp.sum((0.5 * VEC) ** 2))


@pytest.mark.parametrize("make", [nn.MSELoss, nn.SoftmaxCrossEntropyWithLogits])
def test_unknown_reduction_is_a_value_error(make):
    with pytest.raises(ValueError, match="reduction"):
        make(reduction="average")


# -- 4. calling every kt.nn Cell, eagerly and under kt.jit ------------------------------------
def _conv(p, x):
    w, b = p
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NCHW)
    return y + b.reshape(1, -1, 1, 1)


def _pool(op, init, x):
    return jax.lax.reduce_window(x, init, op, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _batch_norm_train(p, x):
    gamma, beta = p[0], p[1]
    mean, var = jnp.mean(x, (0, 2, 3)), jnp.var(x, (0, 2, 3))
    norm = (x - mean.reshape(1, -1, 1, 1)) / jnp.sqrt(var.reshape(1, -1, 1, 1) + 1e-5)
    return norm * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)


def _layer_norm(p, x):
    mean, var = jnp.mean(x, -1, keepdims=True), jnp.var(x, -1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p[0] + p[1]


def _dropout(p, x, key):
    return jnp.where(jax.random.bernoulli(key, 0.5, x.shape), x / 0.5, 0.0)


# name -> (make the Cell, its inputs, reference(values of its trainable Parameters, *inputs))
LAYERS = {
    "Dense": (lambda: nn.Dense(4, 3), (VEC,), lambda p, x: dense_ref(p[0], p[1], x)),
    "Conv2d": (lambda: nn.Conv2d(3, 2, 3, has_bias=True), (IMG,), _conv),
    "MaxPool2d": (
        lambda: nn.MaxPool2d(2, 2),
        (IMG,),
        lambda p, x: _pool(jax.lax.max, -jnp.inf, x),
    ),
    "AvgPool2d": (
        lambda: nn.AvgPool2d(2, 2),
        (IMG,),
        lambda p, x: _pool(jax.lax.add, 0.0, x) / 4.0,
    ),
    "BatchNorm2d": (
        lambda: nn.BatchNorm2d(3),
        (IMG,),
        lambda p, x: x / jnp.sqrt(1.0 + 1e-5),
    ),
    "BatchNorm2d (training)": (
        lambda: nn.BatchNorm2d(3).set_train(True),
        (IMG,),
        _batch_norm_train,
    ),
    "Embedding": (lambda: nn.Embedding(5, 3), (IDS,), lambda p, ids: p[0][ids]),
    "ReLU": (nn.ReLU, (VEC,), lambda p, x: jnp.maximum(x, 0.0)),
    "GELU": (nn.GELU, (VEC,), lambda p, x: jax.nn.gelu(x)),
    "Tanh": (nn.Tanh, (VEC,), lambda p, x: jnp.tanh(x)),
    "Sigmoid": (nn.Sigmoid, (VEC,), lambda p, x: 1.0 / (1.0 + jnp.exp(-x))),
    "Flatten": (nn.Flatten, (IMG,), lambda p, x: x.reshape(2, -1)),
    "Softmax": (nn.Softmax, (VEC,), lambda p, x: jax.nn.softmax(x, axis=-1)),
    "LogSoftmax": (nn.LogSoftmax, (VEC,), lambda p, x: jax.nn.log_softmax(x, axis=-1)),
    "CrossEntropyLoss": (
        nn.CrossEntropyLoss,
        (VEC, LABELS),
        lambda p, lg, lb: jnp.mean(cross_entropy_ref(lg, lb)),
    ),
    "Dropout": (lambda: nn.Dropout(0.5), (VEC, KEY), lambda p, x, key: x),
    "Dropout (training)": (lambda: nn.Dropout(0.5).set_train(True), (VEC, KEY), _dropout),
    "LayerNorm": (lambda: nn.LayerNorm(4), (VEC,), _layer_norm),
    "SequentialCell": (
        lambda: nn.SequentialCell(nn.Dense(4, 3), nn.ReLU()),
        (VEC,),
        lambda p, x: jnp.maximum(dense_ref(p[0], p[1], x), 0.0),
    ),
    "MSELoss": (nn.MSELoss, (VEC, 0.5 * VEC), lambda p, a, b: jnp.mean((a - b) ** 2)),
    "L1Loss": (nn.L1Loss, (VEC, 0.5 * VEC), lambda p, a, b: jnp.mean(jnp.abs(a - b))),
    "SoftmaxCrossEntropyWithLogits": (
        lambda: nn.SoftmaxCrossEntropyWithLogits(sparse=True),
        (VEC, LABELS),
        lambda p, lg, lb: cross_entropy_ref(lg, lb),
    ),
    "WithLossCell": (
        lambda: nn.WithLossCell(nn.Dense(4, 3), nn.MSELoss()),
        (VEC, jnp.ones((2, 3))),
        lambda p, x, y: jnp.mean((dense_ref(p[0], p[1], x) - y) ** 2),
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "kt.jit"])
def test_calling_a_cell(name, jitted):
    make, inputs, reference = LAYERS[name]
    net = make()
    values = [p.data for p in net.trainable_params()]
    out = (kt.jit(net) if jitted else net)(*inputs)
    want = reference(values, *inputs)
    assert jnp.shape(out) == jnp.shape(want)
    close(out, want, 1e-4)


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "kt.jit"])
def test_calling_batch_norm_in_training_updates_its_statistics(jitted):
    net = nn.BatchNorm2d(3, momentum=0.9).set_train(True)
    (kt.jit(net) if jitted else net)(IMG)
    n = IMG.size // 3
    close(net.moving_mean.data, 0.1 * jnp.mean(IMG, (0, 2, 3)))
    close(net.moving_variance.data, 0.9 + 0.1 * jnp.var(IMG, (0, 2, 3)) * n / (n - 1))


OPTIMIZERS = {
    "SGD": (lambda ps: nn.SGD(ps, 0.1), lambda w, g: w - 0.1 * g),
    "Momentum": (lambda ps: nn.Momentum(ps, 0.1, 0.9), lambda w, g: w - 0.1 * g),
    "Adam": (
        lambda ps: nn.Adam(ps, 0.1),
        lambda w, g: w - 0.1 * (0.1 * g / 0.1) / (jnp.sqrt(0.001 * g * g / 0.001) + 1e-8),
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "kt.jit"])
def test_calling_a_train_step_with_each_optimizer(name, jitted):
    make_optimizer, first_update = OPTIMIZERS[name]
    dense = nn.Dense(4, 3)
    params = dense.trainable_params()
    values = [p.data for p in params]
    step = nn.TrainOneStepCell(nn.WithLossCell(dense, nn.MSELoss()), make_optimizer(params))
    target = jnp.ones((2, 3))

    def loss_ref(values):
        return jnp.mean((dense_ref(values[0], values[1], VEC) - target) ** 2)

    loss = (kt.jit(step) if jitted else step)(VEC, target)
    close(loss, loss_ref(values))
    grads = jax.grad(loss_ref)(values)
    for p, w, g in zip(params, values, grads, strict=True):
        close(p.data, first_update(w, g), 1e-4)


def test_every_exported_cell_is_called():
    others = {
        "CellList",
        "SGD",
        "Momentum",
        "Adam",
        "TrainOneStepCell",
        "Cell",
        "Optimizer",
        "LearningRateSchedule",
        "ExponentialDecayLR",
        "CosineDecayLR",
        "PolynomialDecayLR",
        "Jvp",  # nn.Jvp / nn.Vjp: tests/test_ms_api.py
        "Vjp",
        # against MindSpore 2.10's values: tests/test_ms_layers.py
        *("LeakyReLU", "ELU", "SiLU", "Softplus", "PReLU", "Conv1d", "BatchNorm1d"),
        *("AdaptiveAvgPool2d", "BCELoss", "BCEWithLogitsLoss", "NLLLoss", "SmoothL1Loss"),
        *("KLDivLoss", "AdamWeightDecay", "RMSProp", "Adagrad"),
        # and tests/test_ms_seq_layers.py
        *("RNN", "GRU", "LSTM", "Conv2dTranspose", "MultiheadAttention"),
        "TransformerEncoderLayer",
    }  # tested above or in test_ms_train.py / test_ms_api.py / base classes
    cells = {
        name
        for name in nn.__all__
        if inspect.isclass(getattr(nn, name)) and issubclass(getattr(nn, name), kt.Cell)
    }
    covered = {name.split(" ")[0] for name in LAYERS} | others
    assert cells - covered == set()


def test_cell_list_cells_are_called_in_a_loop():
    cells = nn.CellList([nn.Dense(4, 4), nn.Tanh()])

    class Loop(kt.Cell):
        def __init__(self):
            super().__init__()
            self.cells = cells

        def construct(self, x):
            for cell in self.cells:
                x = cell(x)
            return x

    w, b = (p.data for p in cells[0].trainable_params())
    want = jnp.tanh(dense_ref(w, b, VEC))
    close(Loop()(VEC), want)
    close(kt.jit(Loop())(VEC), want)
