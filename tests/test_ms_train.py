"""MindSpore 2.x parity of `kt.nn` training: layer defaults and layouts,
initializers, optimizers (weight_decay, loss_scale, learning-rate schedules),
`TrainOneStepCell(sens=)`, checkpoints, `Model.train` / `Model.eval`.

Expected values are closed forms (worked by hand from MindSpore's documented
formulas; the optimizer numbers were also printed by MindSpore 2.10 on CPU
for the same inputs) or the JAX oracle (`jax.grad` of the same loss).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn
from k_transform.common import initializer as init
from k_transform.train import ckpt_format

RNG = np.random.RandomState(0)
X = jnp.asarray(RNG.randn(3, 4).astype(np.float32))
IMG = jnp.asarray(RNG.randn(2, 3, 6, 6).astype(np.float32))
JIT = pytest.mark.parametrize("jitted", [False, True], ids=["eager", "kt.jit"])


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def maybe_jit(fn, jitted):
    return kt.jit(fn) if jitted else fn


# -- layers: MindSpore's defaults and layouts ------------------------------------------------
def test_dense_layout_names_and_default_init():
    dense = nn.Dense(400, 30)
    assert dense.weight.shape == (30, 400) and dense.bias.shape == (30,)
    assert [name for name, _ in dense.parameters_and_names()] == ["weight", "bias"]
    bound = 1 / math.sqrt(400)  # HeUniform(sqrt(5)) and the bias: +-1/sqrt(in)
    assert np.abs(dense.weight.data).max() <= bound and np.abs(dense.bias.data).max() <= bound
    assert np.abs(dense.weight.data).max() > 0.9 * bound
    close(
        dense(X @ jnp.ones((4, 400))),
        (X @ jnp.ones((4, 400))) @ dense.weight.data.T + dense.bias.data,
    )


@JIT
def test_dense_init_strings_arrays_has_bias_and_activation(jitted):
    w = RNG.randn(2, 4).astype(np.float32)
    dense = nn.Dense(4, 2, weight_init=w, bias_init="ones", activation="relu")
    close(maybe_jit(dense, jitted)(X), jax.nn.relu(X @ w.T + 1.0))
    plain = nn.Dense(4, 2, weight_init="zeros", has_bias=False, activation=nn.Tanh())
    assert [p.name for p in plain.get_parameters()] == ["weight"]
    close(maybe_jit(plain, jitted)(X), jnp.zeros((3, 2)))
    grads = kt.grad(lambda x: jnp.sum(dense(x)))(X)
    close(grads, jax.grad(lambda x: jnp.sum(jax.nn.relu(x @ w.T + 1.0)))(X))


def test_bad_layer_arguments_are_value_errors():
    with pytest.raises(ValueError, match="activation"):
        nn.Dense(2, 2, activation="swishy")
    with pytest.raises(ValueError, match="shape"):
        nn.Dense(2, 3, weight_init=np.zeros((2, 3)))  # (in, out): the wrong layout
    with pytest.raises(ValueError, match="padding must be 0"):
        nn.Conv2d(1, 1, 3, pad_mode="same", padding=1)
    with pytest.raises(ValueError, match="pad_mode"):
        nn.Conv2d(1, 1, 3, pad_mode="full")
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(p=1.0)


@JIT
def test_conv2d_defaults_and_pad_mode_pad(jitted):
    conv = nn.Conv2d(3, 4, 3)
    assert (conv.pad_mode, conv.has_bias, conv.weight.shape) == ("same", False, (4, 3, 3, 3))
    assert maybe_jit(conv, jitted)(IMG).shape == (2, 4, 6, 6)
    padded = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=(1, 0, 2, 0), has_bias=True)
    assert [p.name for p in padded.get_parameters()] == ["weight", "bias"]
    want = jax.lax.conv_general_dilated(
        IMG,
        padded.weight.data,
        (1, 1),
        ((1, 0), (2, 0)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    ) + padded.bias.data.reshape(1, -1, 1, 1)
    close(maybe_jit(padded, jitted)(IMG), want, 1e-4)
    fixed = nn.Conv2d(3, 1, 1, pad_mode="valid", weight_init="ones")
    close(fixed(IMG), jnp.sum(IMG, axis=1, keepdims=True), 1e-5)


def test_dropout_p_and_keep_prob():
    assert nn.Dropout().keep_prob == 0.5 and nn.Dropout(p=0.2).keep_prob == pytest.approx(0.8)
    assert nn.Dropout(0.9).keep_prob == 0.9  # the first positional argument is keep_prob
    key = jax.random.PRNGKey(0)
    close(nn.Dropout(p=0.2)(X, key), X)  # eval: identity
    out = nn.Dropout(p=0.25).set_train(True)(X, key)
    kept = np.asarray(out) != 0
    close(np.asarray(out)[kept], np.asarray(X / 0.75)[kept])


def _batch_stats(x):
    return jnp.mean(x, (0, 2, 3)), jnp.var(x, (0, 2, 3))


@JIT
def test_batch_norm_use_batch_statistics(jitted):
    mean, var = _batch_stats(IMG)

    def normalised(m, v):
        return (IMG - m.reshape(1, -1, 1, 1)) / jnp.sqrt(v.reshape(1, -1, 1, 1) + 1e-5)

    always = nn.BatchNorm2d(3, use_batch_statistics=True)  # batch statistics even in eval
    close(maybe_jit(always, jitted)(IMG), normalised(mean, var), 1e-4)
    n = 2 * 6 * 6
    close(always.moving_mean.data, 0.1 * mean, 1e-5)
    close(always.moving_variance.data, 0.9 + 0.1 * var * n / (n - 1), 1e-5)
    never = nn.BatchNorm2d(3, use_batch_statistics=False, moving_var_init=4.0).set_train(True)
    close(maybe_jit(never, jitted)(IMG), IMG / jnp.sqrt(4.0 + 1e-5), 1e-5)
    close(never.moving_mean.data, jnp.zeros(3))  # not tracked
    default = nn.BatchNorm2d(3)
    assert [(p.name, p.requires_grad) for p in default.get_parameters()] == [
        ("gamma", True),
        ("beta", True),
        ("moving_mean", False),
        ("moving_variance", False),
    ]
    assert nn.BatchNorm2d(3, affine=False).trainable_params() == []


def test_loss_default_reductions():
    assert nn.MSELoss().reduction == "mean" and nn.L1Loss().reduction == "mean"
    assert nn.SoftmaxCrossEntropyWithLogits().reduction == "none"
    close(nn.L1Loss()(X, 0.5 * X), jnp.mean(jnp.abs(0.5 * X)))
    close(nn.L1Loss("none")(X, 0.5 * X), jnp.abs(0.5 * X))


def test_embedding_default_table_is_normal_001():
    table = nn.Embedding(300, 100).embedding_table.data
    assert table.shape == (300, 100) and abs(float(jnp.std(table)) - 0.01) < 1e-3


# -- initializers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "how, low, high, std",
    [
        ("normal", None, None, 0.01),
        (init.Normal(sigma=0.02, mean=1.0), None, None, 0.02),
        ("uniform", -0.07, 0.07, 0.07 / math.sqrt(3)),
        ("xavier_uniform", -math.sqrt(6 / 500), math.sqrt(6 / 500), math.sqrt(2 / 500)),
        ("he_uniform", -math.sqrt(6 / 200), math.sqrt(6 / 200), math.sqrt(2 / 200)),
        (init.HeNormal(), None, None, math.sqrt(2 / 200)),
        (init.XavierNormal(gain=2), None, None, 2 * math.sqrt(2 / 500)),
        (init.TruncatedNormal(sigma=1.0, a=-1.0, b=1.0), -1.0, 1.0, None),
    ],
)
def test_initializer_statistics(how, low, high, std):
    values = init.initializer(how, (300, 200), np.float32)  # fan_in 200, fan_out 300
    assert values.shape == (300, 200) and values.dtype == np.float32
    if low is not None:
        assert values.min() >= low and values.max() <= high
        assert values.min() < low * 0.99 and values.max() > high * 0.99
    if std is not None:
        assert abs(values.std() - std) < 0.03 * std


def test_initializer_constants_fans_and_seeds():
    close(init.initializer(init.Constant(3), (2, 2)), np.full((2, 2), 3.0))
    close(init.initializer("zeros", (2,)), np.zeros(2))
    close(init.initializer(init.One(), (2,)), np.ones(2))
    close(init.initializer(2.5, (3,)), np.full(3, 2.5))
    assert init.fans((8, 4, 3, 3)) == (36, 72)
    with pytest.raises(ValueError, match="unknown initializer"):
        init.initializer("glorot", (2, 2))
    kt.set_seed(5)
    first = nn.Dense(3, 2).weight.data
    kt.set_seed(5)
    close(nn.Dense(3, 2).weight.data, first)
    close(nn.Dense(3, 2, seed=1).weight.data, nn.Dense(3, 2, seed=1).weight.data)


# -- optimizers: MindSpore's update rules ----------------------------------------------------
class Weights(kt.Cell):
    def __init__(self, name="w"):
        super().__init__()
        self.w = kt.Parameter(np.array([1.0, 2.0], np.float32), name=name)

    def construct(self, x):
        return jnp.sum(self.w * x)


G = (jnp.asarray([4.0, 4.0]),)


@JIT
def test_momentum_weight_decay_and_loss_scale(jitted):
    net = Weights()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, weight_decay=0.5, loss_scale=2.0)
    step = maybe_jit(opt, jitted)
    step(G)  # g' = g / 2 + 0.5 w = [2.5, 3]; v = g'; w -= 0.1 v
    close(net.w.data, [0.75, 1.7])
    close(opt.moments[0].data, [2.5, 3.0])
    step(G)  # g' = [2.375, 2.85]; v = 0.9 [2.5, 3] + g'
    close(net.w.data, [0.2875, 1.145])
    assert int(opt.global_step.data) == 2


@JIT
def test_weight_decay_skips_gamma_and_beta(jitted):
    net = Weights(name="bn.gamma")
    step = maybe_jit(nn.SGD(net.trainable_params(), 0.1, weight_decay=0.5), jitted)
    step(G)
    close(net.w.data, [0.6, 1.6])


@JIT
def test_sgd_momentum_nesterov_and_adam(jitted):
    net = Weights()
    step = maybe_jit(nn.SGD(net.trainable_params(), 0.1, momentum=0.9), jitted)
    step(G)
    step(G)  # v = 4 then 7.6
    close(net.w.data, [-0.16, 0.84])
    net = Weights()
    step = maybe_jit(nn.Momentum(net.trainable_params(), 0.1, 0.9, use_nesterov=True), jitted)
    step(G)  # v = 4; w -= 0.1 (g + 0.9 v)
    close(net.w.data, [1 - 0.76, 2 - 0.76])
    net = Weights()
    step = maybe_jit(nn.Adam(net.trainable_params(), 0.1, weight_decay=0.5, loss_scale=2.0), jitted)
    step(G)
    g = 2.0 + 0.5 * np.array([1.0, 2.0])
    m, v = 0.1 * g, 0.001 * g * g
    lr_t = 0.1 * math.sqrt(1 - 0.999) / (1 - 0.9)
    close(net.w.data, np.array([1.0, 2.0]) - lr_t * m / (np.sqrt(v) + 1e-8), 1e-5)


@JIT
def test_learning_rate_per_step_and_schedules(jitted):
    net = Weights()
    step = maybe_jit(nn.SGD(net.trainable_params(), [0.1, 0.05]), jitted)
    for _ in range(3):  # rates 0.1, 0.05, then the last one again
        step(G)
    close(net.w.data, np.array([1.0, 2.0]) - 4 * (0.1 + 0.05 + 0.05))
    net = Weights()
    schedule = nn.ExponentialDecayLR(0.1, 0.5, 1)
    step = maybe_jit(nn.SGD(net.trainable_params(), schedule), jitted)
    step(G)
    step(G)
    close(net.w.data, np.array([1.0, 2.0]) - 4 * (0.1 + 0.05))


def test_schedule_formulas():
    steps = jnp.arange(7)
    close(
        jax.vmap(nn.ExponentialDecayLR(0.1, 0.9, 4))(steps), 0.1 * 0.9 ** (np.arange(7) / 4), 1e-6
    )
    stair = jax.vmap(nn.ExponentialDecayLR(0.1, 0.9, 4, is_stair=True))(steps)
    close(stair, 0.1 * 0.9 ** np.floor(np.arange(7) / 4), 1e-6)
    cosine = jax.vmap(nn.CosineDecayLR(0.01, 0.1, 4))(steps)
    p = np.minimum(np.arange(7), 4) / 4
    close(cosine, 0.01 + 0.5 * 0.09 * (1 + np.cos(np.pi * p)), 1e-6)
    close(cosine[:3], [0.1, 0.0868198, 0.055], 1e-6)  # MindSpore 2.10's values
    poly = jax.vmap(nn.PolynomialDecayLR(0.1, 0.01, 4, 2.0))(steps)
    close(poly, 0.09 * (1 - p) ** 2 + 0.01, 1e-6)


def test_optimizer_argument_checks():
    with pytest.raises(ValueError, match="loss_scale"):
        nn.SGD(Weights().trainable_params(), 0.1, loss_scale=0.0)
    with pytest.raises(ValueError, match="weight_decay"):
        nn.Momentum(Weights().trainable_params(), 0.1, weight_decay=-1.0)


TARGET = jnp.ones((3, 2))


def dense_step(**options):
    """A Dense(4, 2) and its SGD training step; the step's loss gradients by JAX."""
    dense = nn.Dense(4, 2, seed=3)
    w, b = dense.weight.data, dense.bias.data
    loss = nn.WithLossCell(dense, nn.MSELoss())
    step = nn.TrainOneStepCell(loss, nn.SGD([dense.weight, dense.bias], 0.1), **options)

    def oracle(w, b):
        return jnp.mean((X @ w.T + b - TARGET) ** 2)

    return dense, step, (w, b), oracle


@JIT
def test_train_one_step_cell_sens_scales_the_gradients(jitted):
    dense, step, (w, b), loss = dense_step(sens=4.0)
    out = maybe_jit(step, jitted)(X, TARGET)
    close(out, loss(w, b))  # the loss itself, not scaled
    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    close(dense.weight.data, w - 0.1 * 4.0 * gw, 1e-5)
    close(dense.bias.data, b - 0.1 * 4.0 * gb, 1e-5)
    assert [p.name for p in dense.get_parameters()] == ["weight", "bias"]  # no prefixes added


@JIT
def test_train_one_step_cell_returns_the_gradients_by_name(jitted):
    """`return_grad=True`: `(loss, {Parameter name: gradient})`, as MindSpore 2.10's."""
    _, step, (w, b), loss = dense_step(return_grad=True)
    out, grads = maybe_jit(step, jitted)(X, TARGET)
    close(out, loss(w, b))
    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    assert sorted(grads) == ["bias", "weight"]
    close(grads["weight"], gw, 1e-5)
    close(grads["bias"], gb, 1e-5)


# -- checkpoints -----------------------------------------------------------------------------
class Small(kt.Cell):
    def __init__(self, seed):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, has_bias=True, seed=seed)
        self.bn = nn.BatchNorm2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(2 * 6 * 6, 3, seed=seed + 10)

    def construct(self, x):
        return self.fc(self.flatten(jax.nn.relu(self.bn(self.conv(x)))))


def test_checkpoint_round_trip(tmp_path):
    net = Small(1)
    net.bn.moving_mean.set_data(np.array([0.5, -0.5], np.float32))
    path = tmp_path / "small.ckpt"
    kt.save_checkpoint(net, str(path))
    names = ["conv.weight", "conv.bias", "bn.gamma", "bn.beta", "bn.moving_mean"]
    names += ["bn.moving_variance", "fc.weight", "fc.bias"]
    # MindSpore's protobuf .ckpt, every Parameter saved
    assert sorted(ckpt_format.read(path.read_bytes())) == sorted(names)
    params = kt.load_checkpoint(str(path))
    assert sorted(params) == sorted(names) and params["fc.weight"].name == "fc.weight"
    fresh = Small(2)
    assert not np.allclose(fresh(IMG), net(IMG))
    assert kt.load_param_into_net(fresh, params) == ([], [])
    close(fresh(IMG), net(IMG))
    close(kt.jit(fresh)(IMG), net(IMG), 1e-5)
    only_fc = kt.load_checkpoint(str(path), specify_prefix="fc.")
    assert sorted(only_fc) == ["fc.bias", "fc.weight"]
    assert sorted(kt.load_checkpoint(str(path), filter_prefix=["bn.", "conv."])) == sorted(only_fc)


def test_load_param_into_net_reports_and_checks(tmp_path):
    params = {"fc.weight": np.zeros((3, 72), np.float32), "extra": 1.0}
    net = Small(1)
    not_loaded, unused = kt.load_param_into_net(net, params)
    assert "fc.bias" in not_loaded and "fc.weight" not in not_loaded and unused == ["extra"]
    close(net.fc.weight.data, np.zeros((3, 72)))
    with pytest.raises(RuntimeError, match="shape"):
        kt.load_param_into_net(net, {"fc.bias": np.zeros(4, np.float32)})
    path = str(tmp_path / "list.ckpt")
    kt.save_checkpoint([{"name": "a", "data": jnp.ones(2)}, net.fc.bias], path)
    assert sorted(kt.load_checkpoint(path)) == ["a", "fc.bias"]
    fresh = Small(3)
    kt.load_checkpoint(path, net=fresh)  # with net: loaded into it too
    close(fresh.fc.bias.data, net.fc.bias.data)


# -- Model, callbacks, metrics, datasets -----------------------------------------------------
def test_accuracy_metric():
    metric = nn.Accuracy()
    with pytest.raises(RuntimeError):
        metric.eval()
    metric.update(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), np.array([1, 1, 1]))
    assert metric.eval() == pytest.approx(2 / 3)  # MindSpore 2.10 gives 0.6666...
    metric.update(np.array([[0.0, 1.0]]), np.array([[0.0, 1.0]]))  # one-hot labels
    assert metric.eval() == pytest.approx(3 / 4)
    metric.clear()
    metric.update(np.array([[1.0, 0.0]]), np.array([0]))
    assert metric.eval() == 1.0


def test_numpy_slices_dataset():
    data = (np.arange(10, dtype=np.float32).reshape(5, 2), np.arange(5))
    dataset = kt.dataset.NumpySlicesDataset(data, ["x", "y"], shuffle=False).batch(2)
    assert dataset.get_dataset_size() == len(dataset) == 3
    batches = list(dataset.create_tuple_iterator())
    close(batches[2][0], data[0][4:])
    assert kt.dataset.NumpySlicesDataset(data).batch(2, drop_remainder=True).get_dataset_size() == 2
    rows = np.concatenate([y for _, y in kt.dataset.NumpySlicesDataset(data).batch(2)])
    assert sorted(rows) == list(range(5))


class Recorder(kt.Callback):
    def __init__(self):
        self.events = []

    def on_train_epoch_begin(self, run_context):
        self.events.append(("epoch", run_context.original_args().cur_epoch_num))

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        self.events.append(("step", args.cur_step_num))
        if args.cur_step_num == 5:
            run_context.request_stop()


def test_model_train_lowers_the_loss_and_eval_returns_accuracy():
    rng = np.random.RandomState(3)
    x = rng.randn(64, 4).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    batches = [(x[k : k + 16], y[k : k + 16]) for k in range(0, 64, 16)]
    net = nn.SequentialCell(nn.Dense(4, 8, seed=0, activation="tanh"), nn.Dense(8, 2, seed=1))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = kt.Model(
        net, loss, nn.Momentum(net.trainable_params(), 0.1), metrics={"acc": nn.Accuracy()}
    )
    before = model.eval(batches)["acc"]
    monitor = kt.LossMonitor()
    model.train(8, batches, callbacks=[monitor])
    assert len(monitor.losses) == 32
    assert np.mean(monitor.losses[-4:]) < 0.5 * np.mean(monitor.losses[:4])
    after = model.eval(batches)
    assert set(after) == {"acc"} and after["acc"] >= 0.9 > before
    logits = net(jnp.asarray(x))  # eager evaluation agrees with the compiled one
    close(np.mean(np.argmax(np.asarray(logits), 1) == y), after["acc"])
    recorder = Recorder()
    model.train(3, batches, callbacks=recorder)
    assert recorder.events == [
        ("epoch", 1),
        *(("step", k) for k in range(1, 5)),
        ("epoch", 2),
        ("step", 5),
    ]


def test_model_needs_an_optimizer_and_a_finite_loss():
    net = nn.Dense(4, 2, seed=0)
    with pytest.raises(ValueError, match="optimizer"):
        kt.Model(net, nn.MSELoss()).train(1, [(X, jnp.zeros((3, 2)))])
    model = kt.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
    with pytest.raises(ValueError, match="loss is nan"):
        model.train(1, [(X, jnp.full((3, 2), jnp.nan))], callbacks=[kt.LossMonitor()])


# -- CrossEntropyLoss, Softmax, LogSoftmax --------------------------------------------
CE_X = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 0.1, -0.4, 0.7], [-0.5, 0.9, 0.2, -1.1]], np.float32)
CE_Y = np.array([2, 0, 3], np.int32)
CE_W = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
CE_P = np.array([[0.1, 0.2, 0.6, 0.1], [0.5, 0.5, 0, 0], [0, 0.25, 0.25, 0.5]], np.float32)

# (arguments, labels, MindSpore 2.10's nn.CrossEntropyLoss on CE_X: a probe's output)
CE_CASES = [
    ({}, CE_Y, 1.2908802032470703),
    ({"reduction": "none"}, CE_Y, [0.3691990375518799, 0.872958779335022, 2.6304826736450195]),
    ({"weight": CE_W, "reduction": "sum"}, CE_Y, 5.120601654052734),
    ({"weight": CE_W}, CE_Y, 1.2801504135131836),
    ({"weight": CE_W, "label_smoothing": 0.2}, CE_Y, 1.3355354070663452),
    (
        {"weight": CE_W, "label_smoothing": 0.2, "reduction": "none"},
        CE_Y,
        [0.9980182647705078, 0.7749232649803162, 3.569200038909912],
    ),
    ({"weight": CE_W}, np.array([2, -100, 3], np.int32), 1.3383206129074097),
    ({"reduction": "none"}, np.array([2, -100, 3], np.int32), [0.36919904, 0.0, 2.63048267]),
    ({}, CE_P, 1.4858802556991577),
    ({"weight": CE_W}, CE_P, 1.8137205839157104),
    ({"weight": CE_W, "label_smoothing": 0.2}, CE_P, 1.866196632385254),
]


@JIT
@pytest.mark.parametrize("case", range(len(CE_CASES)))
def test_cross_entropy_loss_values_as_mindspore(case, jitted):
    kwargs, labels, want = CE_CASES[case]
    loss = nn.CrossEntropyLoss(**kwargs)
    got = maybe_jit(loss, jitted)(jnp.asarray(CE_X), jnp.asarray(labels))
    close(got, np.asarray(want, np.float32))


def _ce_reference(x, labels, w, e):
    """Index labels, "mean": the formula of the class docstring in jnp."""
    logp = jax.nn.log_softmax(x, axis=-1)
    valid = labels != -100
    onehot = jax.nn.one_hot(jnp.where(valid, labels, 0), x.shape[-1])
    w_y = (onehot @ w) * valid
    per = -(onehot * logp).sum(-1) * w_y * (1 - e) - (logp @ w) * valid * e / x.shape[-1]
    return per.sum() / w_y.sum()


def test_cross_entropy_loss_gradient_matches_jax(mode):
    x, labels = jnp.asarray(CE_X), jnp.asarray([2, -100, 3], jnp.int32)
    loss = nn.CrossEntropyLoss(weight=jnp.asarray(CE_W), label_smoothing=0.1)
    got = kt.grad(loss)(x, labels)
    want = jax.grad(_ce_reference)(x, labels, jnp.asarray(CE_W), 0.1)
    close(got, want)


def test_cross_entropy_loss_spatial_and_single_example():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32))
    labels = jnp.asarray([[0, 3, 1], [2, 2, 0]], jnp.int32)
    got = nn.CrossEntropyLoss(reduction="none")(x, labels)
    want = -jnp.take_along_axis(jax.nn.log_softmax(x, axis=1), labels[:, None], axis=1)[:, 0]
    close(got, want)
    one = nn.CrossEntropyLoss()(jnp.asarray(CE_X[0]), jnp.asarray(2))
    close(one, -jax.nn.log_softmax(jnp.asarray(CE_X[0]))[2])


def test_softmax_and_log_softmax_cells(mode):
    x = jnp.asarray(CE_X)
    # MindSpore 2.10 probe, first row: softmax and log_softmax over the last axis
    close(nn.Softmax()(x)[0], [0.12628664, 0.02817838, 0.69128788, 0.15424712])
    close(nn.LogSoftmax()(x)[0], [-2.06919932, -3.56919932, -0.36919925, -1.86919928])
    v = jnp.asarray(CE_P)

    def f(x):
        return jnp.sum(jax.nn.softmax(x, axis=0) * v) + jnp.sum(jax.nn.log_softmax(x) * v)

    softmax, log_softmax = nn.Softmax(axis=0), nn.LogSoftmax()

    def net_loss(x):
        return jnp.sum(softmax(x) * v) + jnp.sum(log_softmax(x) * v)

    close(kt.grad(net_loss)(x), jax.grad(f)(x))


class _DropNet(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.linspace(0.5, 1.5, 16).astype(np.float32))
        self.drop = nn.Dropout(p=0.5, seed=3)

    def construct(self, x):
        return jnp.sum(self.drop(x * self.w) ** 2)


def test_dropout_draws_from_its_own_key_state():
    """`dropout(x)` as MindSpore users call it: a new mask per training call
    (eagerly, under kt.jit, inside gradient steps); the identity in eval."""
    x = jnp.ones(16)
    for jitted in (False, True):
        drop = nn.Dropout(p=0.5, seed=1)
        drop.set_train(True)
        fn = maybe_jit(drop, jitted)
        a, b = np.asarray(fn(x)), np.asarray(fn(x))
        assert not np.array_equal(a, b)
        assert set(np.unique(np.concatenate([a, b]))) <= {0.0, 2.0}
        key = np.asarray(drop.key.data)
        c = fn(x, jax.random.PRNGKey(7))  # an explicit key leaves the state alone
        np.testing.assert_array_equal(np.asarray(drop.key.data), key)
        keep = jax.random.bernoulli(jax.random.PRNGKey(7), 0.5, (16,))
        close(c, jnp.where(keep, 2.0, 0.0))
    net = _DropNet()
    net.set_train(True)
    grad_fn = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))
    key = jnp.asarray(net.drop.key.data)
    first, second = grad_fn(x)[0], grad_fn(x)[0]
    assert not np.array_equal(np.asarray(first), np.asarray(second))
    # the first step's mask is the one the Cell's key gives: oracle by jax.grad
    mask = jax.random.bernoulli(jax.random.split(key)[1], 0.5, (16,))

    def ref(w):
        return jnp.sum(jnp.where(mask, x * w / 0.5, 0.0) ** 2)

    close(first, jax.grad(ref)(net.w.data))
    assert [p.name for p in net.trainable_params()] == ["w"]
    net.set_train(False)
    close(net(x), jnp.sum((x * net.w.data) ** 2))


def test_a_callback_overriding_the_older_hook_names():
    """MindSpore's tutorials override `step_end` and `epoch_end`; its
    `on_train_step_end` calls them. Ours did nothing: the callback never
    ran, silently (helper-27). MindSpore 2.10 counted 4 steps and 2 epochs."""
    from k_transform import dataset as ds

    class Counts(kt.Callback):
        def __init__(self):
            self.steps = self.epochs = self.begun = self.ended = 0

        def begin(self, run_context):
            self.begun += 1

        def step_end(self, run_context):
            self.steps += 1

        def epoch_end(self, run_context):
            self.epochs += 1

        def end(self, run_context):
            self.ended += 1

    net = nn.Dense(4, 3)
    model = kt.Model(net, loss_fn=nn.MSELoss(), optimizer=nn.SGD(net.trainable_params(), 0.1))
    data = ds.NumpySlicesDataset(
        (np.ones((8, 4), np.float32), np.zeros((8, 3), np.float32)),
        column_names=["d", "l"],
        shuffle=False,
    ).batch(4)
    counts = Counts()
    model.train(2, data, callbacks=[counts], dataset_sink_mode=False)
    assert (counts.steps, counts.epochs, counts.begun, counts.ended) == (4, 2, 1, 1)


def test_an_optimizer_made_with_parameter_tuple_clone():
    """MindSpore's Linear Fitting tutorial writes its optimizer with
    `self.parameters.clone(prefix="momentum", init="zeros")`: our
    `parameters` was a plain tuple (AttributeError; helper-27)."""

    class MyMomentum(nn.Optimizer):
        def __init__(self, params, learning_rate, momentum=0.9):
            super().__init__(learning_rate, params)
            self.moments = self.parameters.clone(prefix="momentum", init="zeros")
            self.mu = momentum

        def construct(self, gradients):
            for k in range(len(self.parameters)):
                v = self.moments[k] * self.mu + gradients[k]
                kt.ops.assign(self.moments[k], v)
                kt.ops.assign(self.parameters[k], self.parameters[k] - 0.1 * v)
            return gradients

    net = nn.Dense(2, 1, weight_init=kt.Tensor(np.array([[0.5, -1.0]], np.float32)))
    opt = MyMomentum(net.trainable_params(), 0.1)
    assert [p.name for p in opt.moments] == ["momentum.weight", "momentum.bias"]
    assert all(float(jnp.abs(m.data).sum()) == 0.0 for m in opt.moments)
    assert opt.parameters.clone("copy")[0].name == "copy.weight"
    x, y = jnp.array([[1.0, 2.0]]), jnp.array([[0.5]])
    loss = nn.WithLossCell(net, nn.MSELoss())
    step = nn.TrainOneStepCell(loss, opt)
    w0, b0 = net.weight.data, net.bias.data
    step(x, y)

    def mse(w, b):
        return jnp.mean((x @ w.T + b - y) ** 2)

    gw, gb = jax.grad(mse, argnums=(0, 1))(w0, b0)
    np.testing.assert_allclose(net.weight.data, w0 - 0.1 * gw, rtol=1e-6)
    np.testing.assert_allclose(net.bias.data, b0 - 0.1 * gb, rtol=1e-6)
    np.testing.assert_allclose(opt.moments[0].data, gw, rtol=1e-6)


def test_dataset_iterators_give_tensors_and_set_seed_seeds_numpy():
    """MindSpore's `create_tuple_iterator()` and `create_dict_iterator()`
    give Tensors (its tutorials call `.asnumpy()` on them), and its
    `set_seed` seeds numpy's global generator: MindSpore 2.10 printed
    [1.624, -0.612, -0.528] for `np.random.randn(3)` after `set_seed(1)`
    (helper-27)."""
    from k_transform import dataset as ds

    data = ds.NumpySlicesDataset(
        (np.arange(6.0).reshape(3, 2), np.arange(3)), column_names=["x", "y"], shuffle=False
    )
    x, y = next(data.create_tuple_iterator())
    assert isinstance(x, jax.Array) and np.asarray(x).tolist() == [0.0, 1.0]
    row = next(data.create_dict_iterator())
    assert list(row) == ["x", "y"] and int(row["y"]) == 0
    assert isinstance(next(data.create_tuple_iterator(output_numpy=True))[0], np.ndarray)
    kt.set_seed(1)
    np.testing.assert_allclose(np.random.randn(3), [1.624345, -0.611756, -0.528172], rtol=1e-5)


def test_dataset_repeat_before_and_after_batch():
    """MindSpore 2.10 printed, for 5 rows and batches of 2: after `batch`,
    6 batches [0,1] [2,3] [4] [0,1] [2,3] [4]; before it, 5 batches, one
    spanning the passes: [0,1] [2,3] [4,0] [1,2] [3,4]."""
    from k_transform import dataset as ds

    def rows(d):
        return [np.asarray(b[0]).tolist() for b in d.create_tuple_iterator()]

    data = (np.arange(5.0),)
    after = ds.NumpySlicesDataset(data, column_names=["x"], shuffle=False).batch(2).repeat(2)
    assert after.get_dataset_size() == 6
    assert rows(after) == [[0.0, 1.0], [2.0, 3.0], [4.0]] * 2
    before = ds.NumpySlicesDataset(data, column_names=["x"], shuffle=False).repeat(2).batch(2)
    assert before.get_dataset_size() == 5
    assert rows(before) == [[0.0, 1.0], [2.0, 3.0], [4.0, 0.0], [1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(ValueError, match="positive int"):
        before.repeat(-1)
