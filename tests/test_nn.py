"""`kt.nn` layers, Cell by Cell, against equivalent pure-jax programs.

Each layer is trained a few SGD steps inside a tiny model; at every step its
gradients (parameters and input) must match `jax.grad` of the same model
written with `jax.lax` directly. Then: BatchNorm2d's moving statistics after
jitted `TrainOneStepCell` steps, eval mode, dtypes (float32, bfloat16), and
the fused cross entropy's gradient at huge logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn

RNG = np.random.RandomState(0)
IMAGES = jnp.asarray(RNG.randn(4, 2, 7, 6).astype(np.float32))


class Probe(kt.Cell):
    """A scalar loss of a layer's output: <tanh(layer(x)), projection>."""

    def __init__(self, layer, out_shape):
        super().__init__()
        self.layer = layer
        self.projection = jnp.asarray(np.random.RandomState(1).randn(*out_shape), jnp.float32)

    def construct(self, x):
        return jnp.sum(jnp.tanh(self.layer(x)) * self.projection)


def _train_and_compare(layer, reference, x, steps=3, lr=0.05, input_grad=True):
    """SGD on `layer`'s Parameters; each step's gradients equal jax.grad of
    `reference(values, x)` (values: the trainable Parameters' values in order)."""
    params = layer.trainable_params()
    out_shape = jnp.shape(reference([p.data for p in params], x))
    probe = Probe(layer, out_shape)
    grad_fn = kt.GradOperation(get_all=input_grad, get_by_list=True)(
        probe, kt.ParameterTuple(params)
    )

    def ref_loss(values, x):
        return jnp.sum(jnp.tanh(reference(values, x)) * probe.projection)

    for _ in range(steps):
        values = [p.data for p in params]
        ours = grad_fn(x)
        ref_params, ref_x = jax.grad(ref_loss, argnums=(0, 1), allow_int=True)(values, x)
        our_params = ours[1] if input_grad else ours
        for p, g, r in zip(params, our_params, ref_params, strict=True):
            assert g.dtype == p.data.dtype, p.name
            np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5, err_msg=p.name)
        if input_grad:
            np.testing.assert_allclose(ours[0][0], ref_x, rtol=2e-4, atol=2e-5, err_msg="input")
        for p, r in zip(params, ref_params, strict=True):
            p.set_data(p.data - lr * r)


def _conv_reference(stride, padding, dilation=1, group=1):
    def reference(values, x):
        w, b = values
        pads = padding.upper() if isinstance(padding, str) else [(padding, padding)] * 2
        y = jax.lax.conv_general_dilated(
            x,
            w,
            (stride, stride),
            pads,
            rhs_dilation=(dilation, dilation),
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
            feature_group_count=group,
        )
        return y + b[None, :, None, None]

    return reference


@pytest.mark.parametrize(
    "kw",
    [
        {"pad_mode": "same"},
        {"pad_mode": "valid", "stride": 2},
        {"pad_mode": "pad", "padding": 1, "dilation": 2, "group": 2},
    ],
    ids=["same", "valid-stride", "pad-dilation-groups"],
)
def test_conv2d(kw):
    layer = nn.Conv2d(2, 4, 3, has_bias=True, **kw)
    layer.bias.set_data(jnp.full(4, 0.1, jnp.float32))
    padding = kw.get("padding", 0) if kw["pad_mode"] == "pad" else kw["pad_mode"]
    reference = _conv_reference(
        kw.get("stride", 1), padding, kw.get("dilation", 1), kw.get("group", 1)
    )
    _train_and_compare(layer, reference, IMAGES)


class ConvThen(kt.Cell):
    """A Conv2d (so there is a Parameter to train) followed by `layer`."""

    def __init__(self, layer):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 2, pad_mode="valid")
        self.then = layer

    def construct(self, x):
        return self.then(self.conv(x))


def _conv_then(window_reference):
    def reference(values, x):
        y = jax.lax.conv_general_dilated(
            x, values[0], (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
        )
        return window_reference(y)

    return reference


def _max_pool(y, k, s, padding):
    return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, k, k), (1, 1, s, s), padding)


def _avg_pool(y, k, s):
    return jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 1, k, k), (1, 1, s, s), "VALID") / (k * k)


def test_max_pool2d():
    layer = ConvThen(nn.MaxPool2d(2, 2))
    _train_and_compare(layer, _conv_then(lambda y: _max_pool(y, 2, 2, "VALID")), IMAGES)


def test_max_pool2d_same():
    layer = ConvThen(nn.MaxPool2d(3, 2, pad_mode="same"))
    _train_and_compare(layer, _conv_then(lambda y: _max_pool(y, 3, 2, "SAME")), IMAGES)


def test_avg_pool2d():
    layer = ConvThen(nn.AvgPool2d(2, 2))
    _train_and_compare(layer, _conv_then(lambda y: _avg_pool(y, 2, 2)), IMAGES)


def _batch_norm_train(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=(0, 2, 3))
    var = jnp.var(x, axis=(0, 2, 3))
    xhat = (x - mean[None, :, None, None]) / jnp.sqrt(var[None, :, None, None] + eps)
    return xhat * gamma[None, :, None, None] + beta[None, :, None, None], mean, var


def test_batch_norm2d_train():
    layer = nn.BatchNorm2d(2)
    layer.set_train(True)
    layer.gamma.set_data(jnp.asarray([1.5, 0.5], jnp.float32))
    _train_and_compare(layer, lambda v, x: _batch_norm_train(x, v[0], v[1])[0], IMAGES)


def test_batch_norm2d_eval_uses_moving_statistics():
    layer = nn.BatchNorm2d(2)
    layer.moving_mean.set_data(jnp.asarray([0.5, -1.0], jnp.float32))
    layer.moving_variance.set_data(jnp.asarray([2.0, 0.25], jnp.float32))
    layer.set_train(False)

    def reference(values, x):
        gamma, beta = values
        mean, var = layer.moving_mean.data, layer.moving_variance.data
        xhat = (x - mean[None, :, None, None]) / jnp.sqrt(var[None, :, None, None] + 1e-5)
        return xhat * gamma[None, :, None, None] + beta[None, :, None, None]

    _train_and_compare(layer, reference, IMAGES)


def test_embedding():
    layer = nn.Embedding(6, 3)
    ids = jnp.asarray([[0, 5, 2], [2, 2, 1]], jnp.int32)  # repeated ids accumulate
    _train_and_compare(layer, lambda v, ids: v[0][ids], ids, input_grad=False)


def test_dense_and_layer_norm():
    layer = nn.SequentialCell([nn.Dense(6, 4), nn.LayerNorm(4)])
    x = jnp.asarray(RNG.randn(3, 6).astype(np.float32))

    def reference(values, x):
        w, b, gamma, beta = values
        y = x @ w.T + b  # MindSpore's Dense layout: weight (out, in)
        mean = jnp.mean(y, -1, keepdims=True)
        var = jnp.var(y, -1, keepdims=True)
        return (y - mean) / jnp.sqrt(var + 1e-7) * gamma + beta  # MindSpore's default epsilon

    _train_and_compare(layer, reference, x)


# -- BatchNorm2d moving statistics under kt.jit(TrainOneStepCell) ---------------------------
class SmallNet(kt.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, pad_mode="valid", seed=3)
        self.bn = nn.BatchNorm2d(3, momentum=0.8)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(3 * 5 * 4, 4, seed=4)

    def construct(self, x):
        return self.fc(self.flatten(jax.nn.relu(self.bn(self.conv(x)))))


def _small_net_reference(values, x):
    w, gamma, beta, fc_w, fc_b = values
    y = jax.lax.conv_general_dilated(
        x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    z, mean, var = _batch_norm_train(y, gamma, beta)
    logits = jnp.reshape(jax.nn.relu(z), (x.shape[0], -1)) @ fc_w.T + fc_b
    return logits, mean, var


def test_batch_norm_moving_statistics_after_jitted_training_steps():
    net = SmallNet()
    net.set_train(True)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    params = net.trainable_params()
    optimizer = nn.Momentum(params, learning_rate=0.1, momentum=0.9)
    step = kt.jit(nn.TrainOneStepCell(nn.WithLossCell(net, loss), optimizer))

    values = [p.data for p in params]
    velocity = [jnp.zeros_like(v) for v in values]
    moving_mean, moving_var = jnp.zeros(3), jnp.ones(3)
    rng = np.random.RandomState(5)
    for _ in range(4):
        x = jnp.asarray(rng.randn(6, 2, 7, 6).astype(np.float32))
        labels = jnp.asarray(rng.randint(0, 4, 6).astype(np.int32))
        ours = step(x, labels)

        def ref_loss(values, x=x, labels=labels):
            logits, mean, var = _small_net_reference(values, x)
            one_hot = jax.nn.one_hot(labels, 4)
            return jnp.mean(-jnp.sum(one_hot * jax.nn.log_softmax(logits), -1)), (mean, var)

        (ref, (mean, var)), grads = jax.value_and_grad(ref_loss, has_aux=True)(values)
        np.testing.assert_allclose(ours, ref, rtol=1e-5)
        n = 6 * 5 * 4
        moving_mean = 0.8 * moving_mean + 0.2 * mean
        moving_var = 0.8 * moving_var + 0.2 * var * n / (n - 1)
        velocity = [0.9 * v + g for v, g in zip(velocity, grads, strict=True)]
        values = [w - 0.1 * v for w, v in zip(values, velocity, strict=True)]

    for p, v in zip(params, values, strict=True):
        np.testing.assert_allclose(p.data, v, rtol=1e-4, atol=1e-5, err_msg=p.name)
    np.testing.assert_allclose(net.bn.moving_mean.data, moving_mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(net.bn.moving_variance.data, moving_var, rtol=1e-4, atol=1e-6)


# -- dtypes and stability -------------------------------------------------------------------
def test_bfloat16_conv_gradients_are_bfloat16():
    layer = nn.Conv2d(2, 3, 3, has_bias=True)
    for p in layer.trainable_params():
        p.set_data(p.data.astype(jnp.bfloat16))
    probe = kt.GradOperation(get_all=True, get_by_list=True)(
        ProbeSum(layer), kt.ParameterTuple(layer.trainable_params())
    )
    (dx,), (dw, db) = probe(IMAGES.astype(jnp.bfloat16))
    assert dx.dtype == dw.dtype == db.dtype == jnp.bfloat16
    ref = _conv_reference(1, "same")(
        [p.data.astype(jnp.float32) for p in layer.trainable_params()], IMAGES
    )
    np.testing.assert_allclose(db.astype(jnp.float32), jnp.ones_like(ref).sum((0, 2, 3)), rtol=1e-2)


class ProbeSum(kt.Cell):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, x):
        return jnp.sum(self.layer(x))


def test_fused_cross_entropy_is_finite_for_huge_logits():
    logits = jnp.asarray([[1e4, -1e4, 0.0], [-1e4, 1e4, 3e4]], jnp.float32)
    labels = jnp.asarray([1, 0], jnp.int32)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    value, grad = kt.value_and_grad(lambda lg: loss(lg, labels))(logits)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    expected = (jax.nn.softmax(logits) - jax.nn.one_hot(labels, 3)) / 2
    np.testing.assert_allclose(grad, expected, atol=1e-6)
    np.testing.assert_allclose(value, (2e4 + 4e4) / 2, rtol=1e-6)


class _SmallLeNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="same")
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(4 * 4 * 4, 16, weight_init="he_uniform")
        self.fc2 = nn.Dense(16, 3)
        self.relu = nn.ReLU()

    def construct(self, x):
        x = self.flatten(self.pool(self.relu(self.conv(x))))
        return self.fc2(self.relu(self.fc1(x)))


def test_a_training_steps_first_call_compiles_only_the_step():
    """Building the network and making its training step run nothing on the
    device but the step: Parameters from numpy arrays are put there as they
    are (`jnp.asarray` compiled a copy per shape), and the transform folds
    no JAX operation on a weight (`jnp.transpose(self.weight)`, `w * 0.5`:
    arrays, never constants). Both cost 0.5 s of LeNet-5's 1.4 s first step
    (bench/lenet.py). Counted: XLA compilations, by JAX's monitoring events."""
    compiles = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    x = np.random.default_rng(0).normal(size=(2, 1, 8, 8)).astype(np.float32)
    y = np.array([0, 2], np.int32)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        net = _SmallLeNet()
        loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        step = kt.jit(nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.1, 0.9)))
        first = step(x, y)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert len(compiles) == 1, compiles
    assert np.isfinite(float(first))
