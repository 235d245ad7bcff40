"""Layers' constructor defaults and arguments as MindSpore 2.10's (issue 30).

Signatures compared with `inspect.signature` of MindSpore 2.10's classes
(the expected strings below are what it printed); values against closed
forms in JAX, and the few numbers quoted from a MindSpore 2.10 probe say so.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn
from tests.ms_helpers import GRADS, START, close, layer_norm, listed, three_steps

X = jnp.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4) ** 1.5 / 10)


# name: MindSpore 2.10's parameters in order, with defaults ("-": none)
MINDSPORE = {
    "LayerNorm": [
        ("normalized_shape", "-"),
        ("begin_norm_axis", -1),
        ("begin_params_axis", -1),
        ("gamma_init", "ones"),
        ("beta_init", "zeros"),
        ("epsilon", 1e-7),
        ("dtype", "float32"),
    ],
    "Dropout": [("keep_prob", 0.5), ("p", None), ("dtype", "float32")],
    "Embedding": [
        ("vocab_size", "-"),
        ("embedding_size", "-"),
        ("use_one_hot", False),
        ("embedding_table", "normal"),
        ("dtype", "float32"),
        ("padding_idx", None),
    ],
    "Flatten": [("start_dim", 1), ("end_dim", -1)],
    "GELU": [("approximate", True)],
    "Dense": [
        ("in_channels", "-"),
        ("out_channels", "-"),
        ("weight_init", None),
        ("bias_init", None),
        ("has_bias", True),
        ("activation", None),
        ("dtype", "float32"),
    ],
    "Momentum": [
        ("params", "-"),
        ("learning_rate", "-"),
        ("momentum", 0.9),  # MindSpore: required
        ("weight_decay", 0.0),
        ("loss_scale", 1.0),
        ("use_nesterov", False),
    ],
    "Optimizer": [
        ("learning_rate", "-"),
        ("parameters", "-"),
        ("weight_decay", 0.0),
        ("loss_scale", 1.0),
    ],
    "PolynomialDecayLR": [
        ("learning_rate", "-"),
        ("end_learning_rate", "-"),
        ("decay_steps", "-"),
        ("power", "-"),
        ("update_decay_steps", False),
    ],
}


@pytest.mark.parametrize("name", sorted(MINDSPORE))
def test_constructor_leads_with_mindspores_parameters(name):
    ours = listed(getattr(nn, name).__init__)
    want = MINDSPORE[name]
    assert ours[: len(want)] == want  # ours may add keywords after (seed=, use_locking=)


def test_layer_norm_default_epsilon_is_mindspores():
    assert nn.LayerNorm(4).epsilon == 1e-7
    x = jnp.array([[1.0, 1.0 + 1e-3, 1.0 - 1e-3, 1.0]])  # small variance: epsilon shows
    close(nn.LayerNorm(4)(x), layer_norm(x, (-1,), 1.0, 0.0, 1e-7), tol=1e-4)


@pytest.mark.parametrize(
    "shape, norm_axis, params_axis",
    [((3, 4), 1, 1), ((4,), 1, -1), ((4,), -1, -1), ((3, 4), -2, -2)],
)
def test_layer_norm_begin_axes(shape, norm_axis, params_axis):
    layer = nn.LayerNorm(shape, begin_norm_axis=norm_axis, begin_params_axis=params_axis)
    gamma = jnp.asarray(np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape), jnp.float32)
    layer.gamma.set_data(gamma)
    layer.beta.set_data(gamma * 0.1)
    axes = tuple(range(norm_axis % 3, 3))

    def want(x):
        return jnp.sum(jnp.sin(layer_norm(x, axes, gamma, gamma * 0.1, 1e-7)))

    def ours(x):
        return jnp.sum(jnp.sin(layer(x)))

    close(layer(X), layer_norm(X, axes, gamma, gamma * 0.1, 1e-7))
    close(kt.grad(ours)(X), jax.grad(want)(X), tol=1e-4)


def test_layer_norm_matches_a_mindspore_probe():
    # MindSpore 2.10: LayerNorm((3, 4), begin_norm_axis=1, begin_params_axis=1)(X)
    out = nn.LayerNorm((3, 4), begin_norm_axis=1, begin_params_axis=1)(X)
    close(np.ravel(out)[:3], [-1.2612991, -1.176816, -1.0223447])


def test_dropout_has_no_parameters_and_still_draws_fresh_masks():
    drop = nn.Dropout(p=0.5, seed=0)
    assert drop.get_parameters() == [] and drop.trainable_params() == []

    class Net(kt.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(8, 8)
            self.drop = nn.Dropout(p=0.5, seed=1)

        def construct(self, x):
            return self.drop(self.dense(x))

    net = Net().set_train(True)
    assert [p.name for p in net.get_parameters()] == ["dense.weight", "dense.bias"]
    x = jnp.ones((4, 8))
    first, second = net(x), net(x)  # the key advances as state
    assert not np.array_equal(np.asarray(first) == 0, np.asarray(second) == 0)
    jitted = kt.jit(net)
    assert not np.array_equal(np.asarray(jitted(x)) == 0, np.asarray(jitted(x)) == 0)


def test_flatten_dims():
    assert nn.Flatten()(X).shape == (2, 12)
    assert nn.Flatten(0)(X).shape == (24,)
    assert nn.Flatten(0, 1)(X).shape == (6, 4)
    flatten = nn.Flatten(0, 1)
    close(kt.grad(lambda x: jnp.sum(flatten(x) ** 2))(X), 2 * X)


def test_gelu_approximate_flag():
    x = jnp.array([1.0])
    close(nn.GELU()(x), [0.841192])  # MindSpore 2.10's default: the tanh form
    close(nn.GELU(approximate=False)(x), [0.8413447])


def test_embedding_padding_row_starts_at_zero():
    table = nn.Embedding(4, 3, padding_idx=1).embedding_table.data
    close(table[1], jnp.zeros(3))
    assert not np.allclose(np.asarray(table[0]), 0.0)


def test_polynomial_decay_update_decay_steps():
    lr = nn.PolynomialDecayLR(0.1, 0.01, 4, 0.5, update_decay_steps=True)
    # MindSpore 2.10 at steps 0, 3, 4, 5, 9
    want = [0.1, 0.055, 0.01, 0.0651135, 0.055]
    close([lr(jnp.asarray(s)) for s in (0, 3, 4, 5, 9)], want)


def test_momentum_positional_order_is_mindspores():
    w = kt.Parameter(jnp.array([1.0, -2.0]), name="w")
    opt = nn.Momentum([w], 0.1, 0.9, 0.5)  # the fourth is weight_decay, as MindSpore
    assert opt.weight_decay == 0.5 and opt.loss_scale == 1.0 and not opt.use_nesterov
    g = jnp.array([0.3, 0.4])
    opt((g,))
    close(w.data, jnp.array([1.0, -2.0]) - 0.1 * (g + 0.5 * jnp.array([1.0, -2.0])))


def _adam_reference(w, grads, lr, nesterov, amsgrad, b1=0.9, b2=0.999, eps=1e-8):
    """Adam in float64 numpy, MindSpore's formulas (see nn.Adam's docstring)."""
    w, m, v, vhat = np.array(w, np.float64), 0.0, 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        vhat = np.maximum(vhat, v)
        lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        m_used = b1 * m + (1 - b1) * g if nesterov else m
        w = w - lr_t * m_used / (np.sqrt(vhat if amsgrad else v) + eps)
    return w


@pytest.mark.parametrize(
    "options, mindspore",
    [
        ({}, [0.9509489, -1.9677374, 0.3415050]),
        ({"use_nesterov": True}, [0.9185754, -1.9403836, 0.2839285]),
        ({"use_amsgrad": True}, [0.9509413, -1.9677374, 0.3415050]),
    ],
)
def test_adam_nesterov_and_amsgrad(options, mindspore):
    w, _ = three_steps(lambda p: nn.Adam(p, learning_rate=0.1, **options))
    want = _adam_reference(
        START,
        GRADS,
        0.1,
        options.get("use_nesterov", False),
        options.get("use_amsgrad", False),
    )
    close(w, want)
    close(w, mindspore)  # MindSpore 2.10's parameters after the same three steps
