"""More of MindSpore 2.10's `nn` (issue 30): activations, losses, optimizers,
Conv1d, BatchNorm1d and AdaptiveAvgPool2d.

For each name: (a) its constructor's parameters are MindSpore 2.10's (the
lists below are what `inspect.signature` of MindSpore 2.10's classes
printed); (b) its values equal a closed form written here in jax.numpy /
numpy, and numbers printed by MindSpore 2.10 (PYNATIVE, CPU) for the same
inputs, marked "MindSpore 2.10:"; (c) for layers and losses, k_transform's
gradient equals `jax.grad` of the closed form. Optimizers: the parameters
after three steps on fixed gradients equal MindSpore 2.10's and a numpy
transcription of MindSpore's update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform import nn
from k_transform.nn.layers import get_activation
from tests.ms_helpers import (
    CONV1D_SIGNATURE,
    GRADS,
    START,
    close,
    f32,
    layer_norm,
    listed,
    sigmoid,
    three_steps,
)

# -- (a) signatures ---------------------------------------------------------------------
# name: MindSpore 2.10's parameters in order, with defaults ("-": none), as
# `inspect.signature(mindspore.nn.<name>.__init__)` printed them (RMSProp and
# Adagrad: of the `__init__` under MindSpore's `opt_init_args_register`)
MINDSPORE = {
    "LeakyReLU": [("alpha", 0.2)],
    "ELU": [("alpha", 1.0)],
    "SiLU": [],
    # MindSpore 2.10 has no nn.Softplus: these are ops.softplus(input, beta=1, threshold=20)'s
    "Softplus": [("beta", 1), ("threshold", 20)],
    "PReLU": [("channel", 1), ("w", 0.25)],
    "BCELoss": [("weight", None), ("reduction", "mean")],
    "BCEWithLogitsLoss": [("reduction", "mean"), ("weight", None), ("pos_weight", None)],
    "NLLLoss": [("weight", None), ("ignore_index", -100), ("reduction", "mean")],
    "SmoothL1Loss": [("beta", 1.0), ("reduction", "none")],
    "KLDivLoss": [("reduction", "mean")],
    "AdamWeightDecay": [
        ("params", "-"),
        ("learning_rate", 0.001),
        ("beta1", 0.9),
        ("beta2", 0.999),
        ("eps", 1e-06),
        ("weight_decay", 0.0),
    ],
    "RMSProp": [
        ("params", "-"),
        ("learning_rate", 0.1),
        ("decay", 0.9),
        ("momentum", 0.0),
        ("epsilon", 1e-10),
        ("use_locking", False),
        ("centered", False),
        ("loss_scale", 1.0),
        ("weight_decay", 0.0),
    ],
    "Adagrad": [
        ("params", "-"),
        ("accum", 0.1),
        ("learning_rate", 0.001),
        ("update_slots", True),
        ("loss_scale", 1.0),
        ("weight_decay", 0.0),
    ],
    "Conv1d": CONV1D_SIGNATURE,
    "BatchNorm1d": [
        ("num_features", "-"),
        ("eps", 1e-05),
        ("momentum", 0.9),
        ("affine", True),
        ("gamma_init", "ones"),
        ("beta_init", "zeros"),
        ("moving_mean_init", "zeros"),
        ("moving_var_init", "ones"),
        ("use_batch_statistics", None),
        ("data_format", "NCHW"),
        ("dtype", "float32"),
    ],
    "AdaptiveAvgPool2d": [("output_size", "-")],
}
EXTRA = {"Conv1d": [("seed", None)]}  # k_transform's keywords after MindSpore's


@pytest.mark.parametrize("name", sorted(MINDSPORE))
def test_constructor_is_mindspores(name):
    assert listed(getattr(nn, name).__init__) == MINDSPORE[name] + EXTRA.get(name, [])


def test_names_in_the_mindspore_namespace():
    for name in sorted(MINDSPORE):
        if name == "Softplus":  # not in MindSpore 2.10's nn: absent from the drop-in
            with pytest.raises(AttributeError, match="Softplus"):
                getattr(ms.nn, name)
        else:
            assert getattr(ms.nn, name) is getattr(nn, name)
    # MindSpore's get_activation knows these names
    for name, cls in [
        ("leakyrelu", "LeakyReLU"),
        ("elu", "ELU"),
        ("silu", "SiLU"),
        ("prelu", "PReLU"),
    ]:
        assert type(get_activation(name)) is getattr(nn, cls)


# -- activations --------------------------------------------------------------------------
X = f32([-3.0, -1.0, -0.25, 0.0, 0.5, 2.0])
X_SMOOTH = f32([-3.0, -1.0, -0.25, 0.5, 2.0])  # no kink at 0: for gradients


ACTIVATION_CASES = [
    # layer, closed form, MindSpore 2.10's values at X
    (nn.LeakyReLU(), lambda x: jnp.where(x > 0, x, 0.2 * x), [-0.6, -0.2, -0.05, 0.0, 0.5, 2.0]),
    (nn.LeakyReLU(2.0), lambda x: jnp.where(x > 0, x, 2 * x), [-6.0, -2.0, -0.5, 0.0, 0.5, 2.0]),
    (
        nn.ELU(),
        lambda x: jnp.where(x > 0, x, jnp.exp(x) - 1),
        [-0.95021296, -0.6321212, -0.22119951, 0.0, 0.5, 2.0],
    ),
    (
        nn.SiLU(),
        lambda x: x * sigmoid(x),
        [-0.14227754, -0.26894155, -0.10945588, 0.0, 0.3112297, 1.7615943],
    ),
    (nn.PReLU(), lambda x: jnp.where(x > 0, x, 0.25 * x), [-0.75, -0.25, -0.0625, 0.0, 0.5, 2.0]),
]


@pytest.mark.parametrize("layer, form, mindspore", ACTIVATION_CASES)
def test_activation_values_and_gradient(layer, form, mindspore):
    close(layer(X), form(X))
    close(layer(X), mindspore)
    ours = kt.grad(lambda x: jnp.sum(jnp.sin(layer(x))))(X_SMOOTH)
    close(ours, jax.grad(lambda x: jnp.sum(jnp.sin(form(x))))(X_SMOOTH))


def test_elu_alpha():
    # MindSpore 2.10's CPU Elu kernel refuses alpha != 1.0; this is the formula
    x, elu = X_SMOOTH, nn.ELU(0.5)
    form = lambda x: jnp.where(x > 0, x, 0.5 * (jnp.exp(x) - 1))  # noqa: E731
    close(elu(x), form(x))
    close(kt.grad(lambda x: jnp.sum(elu(x)))(x), jax.grad(lambda x: jnp.sum(form(x)))(x))
    big = f32([100.0])  # the unused exp branch must not make a NaN gradient
    close(kt.grad(lambda x: jnp.sum(elu(x)))(big), [1.0])


def test_softplus_beta_and_threshold():
    x = f32([-3.0, 0.0, 2.0, 15.0, 25.0])
    softplus = nn.Softplus(beta=2, threshold=20)

    def form(x):
        return jnp.where(2 * x > 20, x, jnp.log(1 + jnp.exp(2 * jnp.minimum(x, 10.0))) / 2)

    # MindSpore 2.10: ops.softplus(x, beta=2, threshold=20)
    close(softplus(x), [1.237826e-03, 3.465735e-01, 2.009075e00, 15.0, 25.0])
    close(softplus(x), form(x))
    ours = kt.grad(lambda x: jnp.sum(softplus(x) ** 2))(x)
    close(ours, jax.grad(lambda x: jnp.sum(form(x) ** 2))(x), 1e-4)


def test_prelu_per_channel_weight_and_its_gradient():
    prelu = nn.PReLU(3, [0.1, 0.2, 0.3])
    # MindSpore's names: the attribute `w`, the Parameter "a" (nested: "act.w")
    assert [p.name for p in prelu.get_parameters()] == ["a"]
    assert [n for n, _ in prelu.parameters_and_names()] == ["w"]
    x = f32(np.arange(12).reshape(2, 3, 2) - 6)
    # MindSpore 2.10: nn.PReLU(3, [0.1, 0.2, 0.3])(x)
    mindspore = [-0.6, -0.5, -0.8, -0.6, -0.6, -0.3, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    close(jnp.ravel(prelu(x)), mindspore)

    def form(w, x):
        return jnp.sum(jnp.sin(jnp.where(x > 0, x, w[None, :, None] * x)))

    x = x + 0.5  # off the kink
    d_x, d_w = kt.grad(lambda x: jnp.sum(jnp.sin(prelu(x))), 0, prelu.trainable_params())(x)
    want_w, want_x = jax.grad(form, (0, 1))(f32([0.1, 0.2, 0.3]), x)
    close(d_x, want_x)
    close(d_w[0], want_w)


# -- losses ---------------------------------------------------------------------------------
P = f32([[0.1, 0.7, 0.4], [0.9, 0.2, 0.5]])
Y = f32([[0.0, 1.0, 1.0], [1.0, 0.0, 0.3]])
W = f32([1.0, 2.0, 0.5])
LOGITS = f32([[-1.5, 0.3, 2.0], [0.7, -0.2, 30.0]])


def _bce(p, y, w=1.0):
    return -w * (y * jnp.log(p + 1e-12) + (1 - y) * jnp.log(1 - p + 1e-12))


def _loss_grad_matches(loss, form, x, *rest, tol=1e-5):
    ours = kt.grad(lambda x: loss(x, *rest))(x)
    close(ours, jax.grad(lambda x: jnp.sum(form(x, *rest)))(x), tol)


def test_bce_loss():
    # MindSpore 2.10: BCELoss(reduction=...)(P, Y)
    close(nn.BCELoss()(P, Y), 0.39999628)
    close(nn.BCELoss(reduction="sum")(P, Y), 2.3999777)
    none = [0.10536055, 0.35667497, 0.9162907, 0.10536055, 0.22314353, 0.6931472]
    close(jnp.ravel(nn.BCELoss(reduction="none")(P, Y)), none)
    # MindSpore 2.10 with the weight at P's shape, [W, W]: its CPU kernel does
    # not broadcast a (3,) weight (it printed values read past its end)
    close(nn.BCELoss(jnp.stack([W, W]))(P, Y), 0.36251283)
    close(nn.BCELoss(W)(P, Y), 0.36251283)
    close(nn.BCELoss(W)(P, Y), jnp.mean(_bce(P, Y, W)))
    # MindSpore 2.10 near 0 and 1: logs of x + 1e-12, not -inf
    edge = nn.BCELoss(reduction="none")
    close(edge(f32([0.0, 1.0, 1e-30]), f32([1.0, 0.0, 1.0])), [27.631021] * 3)
    close(edge(f32([1e-12, 5e-13, 2e-12]), f32([1.0] * 3)), [26.937874, 27.225555, 26.53241])
    _loss_grad_matches(nn.BCELoss(W, "sum"), lambda p, y: _bce(p, y, W), P, Y)


def _bce_logits(x, y, w=1.0, pos=1.0):
    return -w * (pos * y * jnp.log(sigmoid(x)) + (1 - y) * jnp.log(1 - sigmoid(x)))


def test_bce_with_logits_loss():
    loss = nn.BCEWithLogitsLoss("none", W, f32([2.0, 0.5, 1.0]))
    # MindSpore 2.10: BCEWithLogitsLoss('none', W, [2.0, 0.5, 1.0])(LOGITS, Y); 30 is stable
    mindspore = [0.2014134, 0.55435526, 0.06346402, 0.80637217, 1.1962779, 10.5]
    close(jnp.ravel(loss(LOGITS, Y)), mindspore)
    close(nn.BCEWithLogitsLoss()(LOGITS, Y), 3.8140037)
    moderate = LOGITS.at[1, 2].set(3.0)  # where the naive closed form is exact
    close(loss(moderate, Y), _bce_logits(moderate, Y, W, f32([2.0, 0.5, 1.0])))
    form = lambda x, y: _bce_logits(x, y, W, f32([2.0, 0.5, 1.0]))  # noqa: E731
    _loss_grad_matches(nn.BCEWithLogitsLoss("sum", W, f32([2.0, 0.5, 1.0])), form, moderate, Y)
    # the gradient at logit 30: sigmoid(30) - 0.3 times the weight, finite
    summed = nn.BCEWithLogitsLoss("sum")
    d = kt.grad(lambda x: summed(x, Y))(LOGITS)
    close(d[1, 2], 1.0 - 0.3)


LOG_P = jnp.log(f32([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1], [0.25, 0.25, 0.5]]))
LABELS = jnp.asarray([1, 2, -100, 0], jnp.int32)


def _nll(x, y, w, ignore=-100):
    """Per row -w[y] x[n, y] (0 where y is `ignore`), and the sum of the w[y] used."""
    y = np.asarray(y)
    kept = y != ignore
    picked = np.where(kept, y, 0)  # any class where ignored: weighed 0
    weights = jnp.where(kept, w[picked], 0.0)
    return -weights * x[np.arange(len(y)), picked], jnp.sum(weights)


def test_nll_loss():
    # MindSpore 2.10: NLLLoss(...)(LOG_P, LABELS)
    close(nn.NLLLoss()(LOG_P, LABELS), 0.76752836)
    close(nn.NLLLoss(W)(LOG_P, LABELS), 0.82404584)
    close(nn.NLLLoss(W, reduction="sum")(LOG_P, LABELS), 2.8841605)
    other = jnp.asarray([1, 2, 0, 0], jnp.int32)
    none = nn.NLLLoss(ignore_index=1, reduction="none")(LOG_P, other)
    close(none, [0.0, 0.22314353, 0.5108256, 1.3862944])
    losses, total_weight = _nll(LOG_P, LABELS, W)
    close(nn.NLLLoss(W)(LOG_P, LABELS), jnp.sum(losses) / total_weight)
    weighted = nn.NLLLoss(W)
    ours = kt.grad(lambda x: weighted(x, LABELS))(LOG_P)
    close(ours, jax.grad(lambda x: jnp.sum(_nll(x, LABELS, W)[0]) / total_weight)(LOG_P))
    # (N, C, d): the class axis second
    x3 = jnp.stack([LOG_P, LOG_P[::-1]], -1)
    y3 = jnp.stack([LABELS, jnp.asarray([0, -100, 2, 1])], -1)
    want = (jnp.sum(_nll(LOG_P, LABELS, W)[0]) + jnp.sum(_nll(LOG_P[::-1], y3[:, 1], W)[0])) / (
        total_weight + _nll(LOG_P[::-1], y3[:, 1], W)[1]
    )
    close(nn.NLLLoss(W)(x3, y3), want)


def _smooth_l1(x, y, beta):
    d = jnp.abs(x - y)
    return jnp.where(d < beta, 0.5 * d**2 / beta, d - 0.5 * beta)


def test_smooth_l1_loss():
    a, b = f32([0.1, 0.5, 2.0, -3.0]), f32([0.0, 1.4, 0.0, -2.2])
    # MindSpore 2.10: SmoothL1Loss()(a, b) and SmoothL1Loss(0.5, 'mean')(a, b)
    close(nn.SmoothL1Loss()(a, b), [0.005, 0.40499997, 1.5, 0.31999996])
    close(nn.SmoothL1Loss(0.5, "mean")(a, b), 0.74)
    close(nn.SmoothL1Loss(0.5)(a, b), _smooth_l1(a, b, 0.5))
    _loss_grad_matches(nn.SmoothL1Loss(0.5, "sum"), lambda x, y: _smooth_l1(x, y, 0.5), a, b)


TARGET = f32([[0.2, 0.0, 0.8], [0.5, 0.25, 0.25]])


def _kl(x, y):
    return jnp.where(y > 0, y * (jnp.log(jnp.where(y > 0, y, 1.0)) - x), 0.0)


@pytest.mark.parametrize(
    "reduction, mindspore",
    [
        ("mean", 0.25461122),
        ("sum", 1.5276674),
        ("batchmean", 0.7638337),
        ("none", [[0.0, 0.0, 0.78466344], [0.804719, 0.22907269, -0.2907877]]),
    ],
)
def test_kl_div_loss(reduction, mindspore):
    # MindSpore 2.10: KLDivLoss(reduction)(LOG_P[:2], TARGET)
    x = LOG_P[:2]
    close(nn.KLDivLoss(reduction)(x, TARGET), mindspore)
    reduce = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda v: v}.get(
        reduction, lambda v: jnp.sum(v) / 2
    )
    close(nn.KLDivLoss(reduction)(x, TARGET), reduce(_kl(x, TARGET)))
    if reduction != "batchmean":
        return  # the gradient: of MindSpore's own reduction only (the others scale it; time)
    loss = nn.KLDivLoss(reduction)
    ours = kt.grad(lambda x: jnp.sum(loss(x, TARGET)))(x)
    close(ours, jax.grad(lambda x: jnp.sum(reduce(_kl(x, TARGET))))(x))


def test_loss_reduction_is_checked():
    with pytest.raises(ValueError, match="reduction"):
        nn.NLLLoss(reduction="batchmean")
    with pytest.raises(ValueError, match="reduction"):
        nn.KLDivLoss("average")


# -- Conv1d ---------------------------------------------------------------------------------
SEQ = f32((np.arange(28).reshape(2, 2, 7) % 5) - 1.5)
KERNEL = f32(np.arange(18).reshape(3, 2, 3) / 10 - 0.8)
BIAS = f32([0.1, -0.2, 0.3])


def _conv1d(x, w, b, stride, pads, dilation):
    """out[n, o, t] = b[o] + sum_{c, j} w[o, c, j] x_padded[n, c, t stride + j dilation]."""
    xp = jnp.pad(x, ((0, 0), (0, 0), pads))
    k = w.shape[-1]
    length = (xp.shape[-1] - dilation * (k - 1) - 1) // stride + 1
    taps = [
        jnp.einsum("oc,nct->not", w[:, :, j], xp[:, :, j * dilation :: stride][:, :, :length])
        for j in range(k)
    ]
    return sum(taps) + b[None, :, None]


CONV_CASES = [
    # pad_mode, padding, stride, dilation, the pads "same" means here, MindSpore
    # 2.10's first values; the gradient is checked on the "pad" one only (time)
    ("same", 0, 1, 1, (1, 1), [0.79999983, -0.25000003, -2.05, -3.35, -1.1499999, -0.95000005]),
    ("valid", 0, 2, 1, (0, 0), [-0.25000003, -3.35, -0.95000005, 1.2499999, -0.6500001]),
    ("same", 0, 2, 1, (1, 1), [0.79999983, -2.05, -1.1499999, 0.8000001, 0.50000006, 0.04999991]),
    ("pad", 2, 3, 1, (2, 2), [0.85, -2.05, -0.95000005, -0.05, 0.04999991, -0.04999991]),
    ("same", 0, 1, 2, (2, 2), [-0.10000005, -0.6, -1.65, 0.05000008, -3.2500002, 0.4999999]),
]


@pytest.mark.parametrize("pad_mode, padding, stride, dilation, pads, mindspore", CONV_CASES)
def test_conv1d(pad_mode, padding, stride, dilation, pads, mindspore):
    conv = nn.Conv1d(
        2,
        3,
        3,
        stride,
        pad_mode,
        padding,
        dilation,
        has_bias=True,
        weight_init=KERNEL,
        bias_init=BIAS,
    )
    assert conv.weight.shape == (3, 2, 1, 3)  # MindSpore's: (out, in / group, 1, kernel_size)
    out = conv(SEQ)
    # jitted: its slices compile as one program, not one by one (CI time)
    want = jax.jit(_conv1d, static_argnums=(3, 4, 5))(SEQ, KERNEL, BIAS, stride, pads, dilation)
    close(out, want)
    close(jnp.ravel(out)[: len(mindspore)], mindspore)  # MindSpore 2.10, the same Conv1d
    if pad_mode != "pad":
        return

    def form(x, w, b):
        return jnp.sum(jnp.tanh(_conv1d(x, w, b, stride, pads, dilation)))

    ours = kt.grad(lambda x: jnp.sum(jnp.tanh(conv(x))), 0, conv.trainable_params())(SEQ)
    d_x, d_w, d_b = jax.jit(jax.grad(form, (0, 1, 2)))(SEQ, KERNEL, BIAS)
    close(ours[0], d_x, 1e-4)
    close(ours[1][0], d_w[:, :, None, :], 1e-4)
    close(ours[1][1], d_b, 1e-4)


def test_conv1d_defaults_and_groups():
    conv = nn.Conv1d(4, 2, 2, group=2, pad_mode="valid", weight_init="ones")
    assert conv.weight.shape == (2, 2, 1, 2) and not conv.has_bias
    x = f32(np.arange(24).reshape(1, 4, 6))
    # MindSpore 2.10: the same Conv1d of x
    close(jnp.ravel(conv(x)), [14.0, 18.0, 22.0, 26.0, 30.0, 62.0, 66.0, 70.0, 74.0, 78.0])
    default = nn.Conv1d(2, 3, 3)  # "same", no bias, weight uniform on +-1/sqrt(2 * 3)
    assert default(SEQ).shape == (2, 3, 7) and default.trainable_params() == [default.weight]
    assert np.max(np.abs(np.asarray(default.weight.data))) <= 1 / np.sqrt(6)


# -- BatchNorm1d ----------------------------------------------------------------------------
def _batch_norm(x, gamma, beta, axes, eps=1e-5):
    shape = [1] * x.ndim
    shape[1] = -1
    return layer_norm(x, axes, gamma.reshape(shape), beta.reshape(shape), eps)


@pytest.mark.parametrize(
    "x, momentum, axes, mindspore",
    [
        (
            f32(np.arange(15).reshape(5, 3) ** 1.3 / 7),
            0.8,
            (0,),
            {
                "train": [-1.2581291, -1.2972084, -1.3176979, -0.7988347, -0.77287084, -0.76022226],
                "mean": [0.32645518, 0.3864429, 0.4513095],
                "var": [1.2207985, 1.2756772, 1.3223978],
                "eval": [-0.29546073, -0.21566506, -0.08657169, 0.24384594, 0.42469805, 0.61419725],
            },
        ),
        (
            f32(np.arange(24).reshape(2, 3, 4) ** 1.2 / 5),
            0.9,
            (0, 2),
            {
                "train": [-1.1493518, -1.0555155, -0.9337727, -0.79866755, -1.1943865, -1.0573627],
                "mean": [0.24496965, 0.38808712, 0.5465296],
                "var": [1.4191699, 1.5394692, 1.6269166],
                "eval": [-0.20563334, -0.03774859, 0.18006453, 0.42178437, 0.5379934, 0.7992235],
            },
        ),
    ],
)
def test_batch_norm_1d(x, momentum, axes, mindspore):
    # MindSpore 2.10: BatchNorm1d(3, momentum) on x in training, its moving
    # statistics after that call, then the same layer in eval
    bn = nn.BatchNorm1d(3, momentum=momentum).set_train(True)
    ones, zeros = jnp.ones(3), jnp.zeros(3)
    out = bn(x)
    close(out, _batch_norm(x, ones, zeros, axes), 1e-4)
    close(jnp.ravel(out)[:6], mindspore["train"], 1e-4)
    n = x.size // 3
    batch_var = jnp.var(x, axes) * n / (n - 1)
    close(bn.moving_mean.data, (1 - momentum) * jnp.mean(x, axes))
    close(bn.moving_variance.data, momentum + (1 - momentum) * batch_var)
    close(bn.moving_mean.data, mindspore["mean"])
    close(bn.moving_variance.data, mindspore["var"])
    bn.set_train(False)
    close(jnp.ravel(bn(x))[:6], mindspore["eval"], 1e-4)
    if x.ndim == 2:
        return  # the gradient: of (N, C, L) only (time)
    train = nn.BatchNorm1d(3).set_train(True)
    gamma, beta = f32([0.5, 1.0, 2.0]), f32([0.1, -0.2, 0.3])
    train.gamma.set_data(gamma)
    train.beta.set_data(beta)
    project = jnp.cos(jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape))

    def form(x, gamma, beta):
        return jnp.sum(jnp.tanh(_batch_norm(x, gamma, beta, axes)) * project)

    ours = kt.grad(lambda x: jnp.sum(jnp.tanh(train(x)) * project), 0, train.trainable_params())(x)
    d_x, d_gamma, d_beta = jax.grad(form, (0, 1, 2))(x, gamma, beta)
    close(ours[0], d_x, 1e-4)
    close(ours[1][0], d_gamma, 1e-4)
    close(ours[1][1], d_beta, 1e-4)


# -- AdaptiveAvgPool2d ----------------------------------------------------------------------
GRID = f32(np.arange(70).reshape(1, 2, 7, 5) ** 1.1)


def _adaptive_avg(x, out_h, out_w):
    """Bin i of n -> out covers [floor(i n / out), ceil((i + 1) n / out))."""
    h, w = x.shape[-2:]
    rows = []
    for i in range(out_h):
        r0, r1 = i * h // out_h, -(-(i + 1) * h // out_h)
        cols = []
        for j in range(out_w):
            c0, c1 = j * w // out_w, -(-(j + 1) * w // out_w)
            cols.append(jnp.mean(x[..., r0:r1, c0:c1], axis=(-2, -1)))
        rows.append(jnp.stack(cols, -1))
    return jnp.stack(rows, -2)


@pytest.mark.parametrize(
    "output_size, bins, mindspore",
    [
        # MindSpore 2.10: AdaptiveAvgPool2d(output_size)(GRID), its first values
        ((3, 2), (3, 2), [7.405872, 10.007265, 21.19203, 24.10416, 36.06504, 39.120495]),
        (3, (3, 3), [6.770089, 8.68768, 10.672179, 20.467777, 22.643555, 24.835972]),
        ((None, 2), (7, 2), [1.0478489, 3.3622365, 7.184727, 9.854811, 13.98504, 16.804749]),
        (1, (1, 1), [23.070719, 77.359344]),
    ],
)
def test_adaptive_avg_pool_2d(output_size, bins, mindspore):
    pool = nn.AdaptiveAvgPool2d(output_size)
    out = pool(GRID)
    assert out.shape == (1, 2, *bins)
    # jitted: its slices compile as one program, not one by one (CI time)
    close(out, jax.jit(_adaptive_avg, static_argnums=(1, 2))(GRID, *bins), 1e-4)
    close(jnp.ravel(out)[: len(mindspore)], mindspore, 1e-4)
    assert pool(GRID[0]).shape == (2, *bins)  # (C, H, W) as MindSpore
    if bins == (3, 2):  # the gradient: uneven and overlapping bins
        ours = kt.grad(lambda x: jnp.sum(jnp.sin(pool(x))))(GRID)
        want = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(_adaptive_avg(x, *bins)))))(GRID)
        close(ours, want, 1e-4)


# -- optimizers -----------------------------------------------------------------------------
def _adam_weight_decay(lr, wd, b1=0.9, b2=0.999, eps=1e-6):
    """MindSpore's update in float64, with its float32 betas (1 - beta in float32)."""
    b1, b2, eps = np.float32(b1), np.float32(b2), np.float32(eps)
    c1, c2 = float(np.float32(1) - b1), float(np.float32(1) - b2)
    w, m, v = np.array(START), 0.0, 0.0
    for g in map(np.array, GRADS):
        m, v = float(b1) * m + c1 * g, float(b2) * v + c2 * g * g
        w = w - lr * (m / (np.sqrt(v) + float(eps)) + wd * w)
    return w


@pytest.mark.parametrize(
    "weight_decay, name, mindspore",
    [
        # MindSpore 2.10: AdamWeightDecay([w], learning_rate=0.1, weight_decay=...)
        (0.0, "w", [0.91543406, -1.993467, -0.04029078]),
        (0.3, "w", [0.8430519, -1.8328321, -0.05339014]),
        (0.3, "beta", [0.91543406, -1.993467, -0.04029078]),  # not decayed: named "beta"
    ],
)
def test_adam_weight_decay(weight_decay, name, mindspore):
    make = lambda p: nn.AdamWeightDecay(p, learning_rate=0.1, weight_decay=weight_decay)  # noqa: E731
    w, opt = three_steps(make, name, jit=weight_decay > 0)
    close(w, mindspore, 2e-6)
    close(w, _adam_weight_decay(0.1, weight_decay if name == "w" else 0.0), 2e-6)
    assert [p.name for p in opt.moments1 + opt.moments2] == [f"adam_m.{name}", f"adam_v.{name}"]


def _rmsprop(lr, momentum, centered, weight_decay=0.0, loss_scale=1.0, decay=0.9, eps=1e-10):
    """MindSpore's ApplyRMSProp / ApplyCenteredRMSProp, float64; mean square from ones."""
    w, s, mg, mom = np.array(START), 1.0, 0.0, 0.0
    for g in map(np.array, GRADS):
        g = g / loss_scale + weight_decay * w
        s = decay * s + (1 - decay) * g * g
        mg = decay * mg + (1 - decay) * g
        denominator = s - mg * mg if centered else s
        mom = momentum * mom + lr * g / np.sqrt(denominator + eps)
        w = w - mom
    return w


@pytest.mark.parametrize(
    "options, mindspore",
    [
        # MindSpore 2.10: RMSProp([w], learning_rate=0.1, **options)
        ({}, [1.0218403, -2.0251956, 0.5188104]),
        ({"momentum": 0.5}, [1.0254679, -2.0313773, 0.50813323]),
        ({"momentum": 0.5, "centered": True}, [1.025466, -2.0313892, 0.50813836]),
        (
            {"centered": True, "weight_decay": 0.2, "loss_scale": 2.0},
            [0.9465547, -1.8840221, 0.47722065],
        ),
    ],
)
def test_rmsprop(options, mindspore):
    jit = options.get("centered", False)  # compiled: the centered ones (the others: CI time)
    w, opt = three_steps(lambda p: nn.RMSProp(p, learning_rate=0.1, **options), jit=jit)
    close(w, mindspore)
    want = _rmsprop(
        0.1,
        options.get("momentum", 0.0),
        options.get("centered", False),
        options.get("weight_decay", 0.0),
        options.get("loss_scale", 1.0),
    )
    close(w, want)
    slots = [p.name for p in (*getattr(opt, "mg", ()), *opt.ms, *opt.moment)]
    centered = ["mean_grad.w"] if options.get("centered") else []
    assert slots == [*centered, "mean_square.w", "moment.w"]


def _adagrad(lr, accum, update_slots=True, weight_decay=0.0):
    """MindSpore's ApplyAdagrad, float64: no epsilon."""
    w, a = np.array(START), accum
    for g in map(np.array, GRADS):
        g = g + weight_decay * w
        a = a + g * g if update_slots else a
        w = w - lr * g / np.sqrt(a)
    return w


@pytest.mark.parametrize(
    "options, mindspore",
    [
        # MindSpore 2.10: Adagrad([w], **options)
        ({}, [1.0000505, -2.0002322, 0.50021607]),
        ({"accum": 0.5, "learning_rate": 0.1}, [1.0144068, -2.0229824, 0.5176623]),
        ({"learning_rate": 0.1, "weight_decay": 0.1}, [0.96763813, -1.9288652, 0.4885518]),
        # MindSpore 2.10's CPU kernel ignores update_slots=False (it printed the
        # update_slots=True values, 1.0050458, ...); this is the documented
        # update: accum stays 0.1
        ({"learning_rate": 0.1, "update_slots": False}, None),
    ],
)
def test_adagrad(options, mindspore):
    jit = "weight_decay" in options  # compiled: this one (the others: CI time)
    w, opt = three_steps(lambda p: nn.Adagrad(p, **options), jit=jit)
    want = _adagrad(
        options.get("learning_rate", 0.001),
        options.get("accum", 0.1),
        options.get("update_slots", True),
        options.get("weight_decay", 0.0),
    )
    close(w, want)
    if mindspore is not None:
        close(w, mindspore)
    assert [p.name for p in opt.accum] == ["accum.w"]


def test_optimizer_slots_start_as_mindspores():
    w = kt.Parameter(np.ones(3, np.float32), name="w")
    close(nn.RMSProp([w]).ms[0].data, np.ones(3))  # MindSpore: mean_square from ones
    close(nn.Adagrad([w]).accum[0].data, np.full(3, 0.1))
    close(nn.Adagrad([w], accum=0.7).accum[0].data, np.full(3, 0.7))
