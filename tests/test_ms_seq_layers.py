"""MindSpore 2.10's RNN, GRU, LSTM, Conv2dTranspose, MultiheadAttention and
TransformerEncoderLayer (issue 30).

For each: (a) its constructor's and `construct`'s parameters are MindSpore
2.10's (the lists below are what `inspect.signature` of MindSpore 2.10's
classes printed) and so are its Parameters' names, shapes and order; (b) with
the weights `_det(shape, i)` given to its i-th trainable Parameter and the
input `_seq(shape)`, its values equal numbers MindSpore 2.10 (PYNATIVE, CPU)
printed for the same weights and inputs (six entries spread over each result,
`_spread`), and a closed form written here in plain jax.numpy; (c) its
gradient (`kt.grad` / `kt.GradOperation(get_by_list=True)`) equals
`jax.grad` of that closed form (jitted, where that is faster).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform import nn
from tests.ms_helpers import CONV1D_SIGNATURE, close, layer_norm, listed, sigmoid


def _det(shape, k):
    """Fixed weights: the same values were set into MindSpore's Parameters."""
    n = int(np.prod(shape))
    return (0.5 * np.sin(np.arange(n) * 0.7 + k)).reshape(shape).astype(np.float32)


def _seq(shape):
    n = int(np.prod(shape))
    return (np.cos(np.arange(n) * 0.37) * 1.3).reshape(shape).astype(np.float32)


def _spread(a):
    """Six entries spread over `a` (first and last included)."""
    a = np.ravel(np.asarray(a))
    return a[np.linspace(0, a.size - 1, 6).astype(int)]


def _set_weights(net) -> dict:
    """The i-th trainable Parameter := _det(its shape, i); {name: value}."""
    for i, p in enumerate(net.trainable_params()):
        p.set_data(_det(p.shape, i))
    return {p.name: jnp.asarray(p.data) for p in net.trainable_params()}


# -- (a) signatures and Parameters --------------------------------------------------------
# MindSpore 2.10's RNN, GRU and LSTM take (*args, **kwargs) and pass them to
# `_RNNBase.__init__(self, mode, ...)`, whose parameters after `mode` these are;
# RNN reads `nonlinearity` from the keywords only (default "tanh").
RNN_BASE = [
    ("input_size", "-"),
    ("hidden_size", "-"),
    ("num_layers", 1),
    ("has_bias", True),
    ("batch_first", False),
    ("dropout", 0.0),
    ("bidirectional", False),
    ("dtype", "float32"),
]
MINDSPORE = {
    "RNN": RNN_BASE + [("nonlinearity", "tanh")],
    "GRU": RNN_BASE,
    "LSTM": RNN_BASE,
    "Conv2dTranspose": CONV1D_SIGNATURE[:6] + [("output_padding", 0)] + CONV1D_SIGNATURE[6:],
    "MultiheadAttention": [
        ("embed_dim", "-"),
        ("num_heads", "-"),
        ("dropout", 0.0),
        ("has_bias", True),
        ("add_bias_kv", False),
        ("add_zero_attn", False),
        ("kdim", None),
        ("vdim", None),
        ("batch_first", False),
        ("dtype", "float32"),
    ],
    "TransformerEncoderLayer": [
        ("d_model", "-"),
        ("nhead", "-"),
        ("dim_feedforward", 2048),
        ("dropout", 0.1),
        ("activation", "relu"),
        ("layer_norm_eps", 1e-05),
        ("batch_first", False),
        ("norm_first", False),
        ("dtype", "float32"),
    ],
}
# `inspect.signature(mindspore.nn.<name>.construct)` in MindSpore 2.10
CONSTRUCT = {
    "RNN": [("x", "-"), ("hx", None), ("seq_length", None)],
    "GRU": [("x", "-"), ("hx", None), ("seq_length", None)],
    "LSTM": [("x", "-"), ("hx", None), ("seq_length", None)],
    "Conv2dTranspose": [("x", "-")],
    "MultiheadAttention": [
        ("query", "-"),
        ("key", "-"),
        ("value", "-"),
        ("key_padding_mask", None),
        ("need_weights", True),
        ("attn_mask", None),
        ("average_attn_weights", True),
    ],
    "TransformerEncoderLayer": [("src", "-"), ("src_mask", None), ("src_key_padding_mask", None)],
}
EXTRA = [("seed", None)]  # k_transform's keyword after MindSpore's, in every one


@pytest.mark.parametrize("name", sorted(MINDSPORE))
def test_signatures_are_mindspores(name):
    cls = getattr(nn, name)
    assert listed(cls.__init__) == MINDSPORE[name] + EXTRA
    assert listed(cls.construct) == CONSTRUCT[name]
    assert getattr(ms.nn, name) is cls
    if name == "RNN":
        kind = inspect.signature(cls.__init__).parameters["nonlinearity"].kind
        assert kind is inspect.Parameter.KEYWORD_ONLY


def _lstm_names():
    kinds = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    ends = ["l0", "l0_reverse", "l1", "l1_reverse"]
    shapes = {"weight_ih": [(16, 3), (16, 3), (16, 8), (16, 8)], "weight_hh": [(16, 4)] * 4}
    return [
        (f"{kind}_{end}", shapes.get(kind, [(16,)] * 4)[k])
        for kind in kinds
        for k, end in enumerate(ends)
    ]


# MindSpore 2.10: [(p.name, p.shape) for p in net.trainable_params()]
PARAMETERS = [
    (lambda: nn.LSTM(3, 4, 2, bidirectional=True), _lstm_names()),
    (lambda: nn.GRU(3, 4, has_bias=False), [("weight_ih_l0", (12, 3)), ("weight_hh_l0", (12, 4))]),
    (
        lambda: nn.RNN(3, 4, nonlinearity="relu"),
        [
            ("weight_ih_l0", (4, 3)),
            ("weight_hh_l0", (4, 4)),
            ("bias_ih_l0", (4,)),
            ("bias_hh_l0", (4,)),
        ],
    ),
    (
        lambda: nn.Conv2dTranspose(3, 4, 3, has_bias=True),
        [("weight", (3, 4, 3, 3)), ("bias", (4,))],
    ),
    (
        lambda: nn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True),
        [
            ("q_proj_weight", (8, 8)),
            ("k_proj_weight", (8, 4)),
            ("v_proj_weight", (8, 6)),
            ("in_proj_bias", (24,)),
            ("bias_k", (1, 1, 8)),
            ("bias_v", (1, 1, 8)),
            ("out_proj.weight", (8, 8)),
            ("out_proj.bias", (8,)),
        ],
    ),
    (
        lambda: nn.TransformerEncoderLayer(8, 2, 16),
        [
            ("self_attn.in_proj_weight", (24, 8)),
            ("self_attn.in_proj_bias", (24,)),
            ("self_attn.out_proj.weight", (8, 8)),
            ("self_attn.out_proj.bias", (8,)),
            ("dense1.weight", (16, 8)),
            ("dense1.bias", (16,)),
            ("dense2.weight", (8, 16)),
            ("dense2.bias", (8,)),
            ("norm1.gamma", (8,)),
            ("norm1.beta", (8,)),
            ("norm2.gamma", (8,)),
            ("norm2.beta", (8,)),
        ],
    ),
]


@pytest.mark.parametrize("make, mindspore", PARAMETERS)
def test_parameters_are_mindspores(make, mindspore):
    assert [(p.name, tuple(p.shape)) for p in make().trainable_params()] == mindspore


def test_default_initial_values():
    lstm = nn.LSTM(3, 4, 2, seed=0)  # MindSpore: all uniform on +-1/sqrt(hidden)
    assert all(np.max(np.abs(np.asarray(p.data))) <= 0.5 for p in lstm.get_parameters())
    attention = nn.MultiheadAttention(8, 2, seed=0)
    close(attention.in_proj_bias.data, np.zeros(24))  # MindSpore: zeros
    transposed = nn.Conv2dTranspose(3, 4, 3, has_bias=True, seed=0)  # fan_in 4 * 3 * 3
    assert np.max(np.abs(np.asarray(transposed.weight.data))) <= 1 / 6
    assert np.max(np.abs(np.asarray(transposed.bias.data))) <= 1 / 6
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")


# -- recurrent layers ---------------------------------------------------------------------
def _cell(mode, x, state, w_ih, w_hh, b_ih, b_hh):
    """One step of one sequence (x and the state are vectors), MindSpore's
    formulas with the gates as row blocks of the weights."""
    h = state[0] if mode == "LSTM" else state
    size = w_hh.shape[1]
    gi = w_ih @ x + (0.0 if b_ih is None else b_ih)
    gh = w_hh @ h + (0.0 if b_hh is None else b_hh)

    def block(g, k):
        return g[k * size : (k + 1) * size]

    if mode == "tanh":
        return jnp.tanh(gi + gh)
    if mode == "relu":
        return jnp.maximum(gi + gh, 0.0)
    if mode == "GRU":  # r, z, n
        r = sigmoid(block(gi, 0) + block(gh, 0))
        z = sigmoid(block(gi, 1) + block(gh, 1))
        n = jnp.tanh(block(gi, 2) + r * block(gh, 2))
        return (1 - z) * n + z * h
    i, f, g, o = (block(gi, k) + block(gh, k) for k in range(4))  # LSTM: i, f, g, o
    c = sigmoid(f) * state[1] + sigmoid(i) * jnp.tanh(g)
    return sigmoid(o) * jnp.tanh(c), c


def _recurrent(mode, x, h0, c0, weights, num_layers, bidirectional, lengths):
    """(y, h_n, c_n) of x (seq, batch, in), one batch entry at a time: entry b
    runs over its first lengths[b] steps (backwards in the reverse direction),
    its outputs past them are zero."""
    steps, batch = x.shape[:2]
    directions = ["", "_reverse"] if bidirectional else [""]
    ys, finals = [], {}
    for b in range(batch):
        n = steps if lengths is None else lengths[b]
        inputs = [x[t, b] for t in range(n)]
        for layer in range(num_layers):
            outputs = []
            for d, suffix in enumerate(directions):
                k = layer * len(directions) + d
                w = [weights.get(f"{kind}_l{layer}{suffix}") for kind in KINDS]
                state = (h0[k, b], c0[k, b]) if mode == "LSTM" else h0[k, b]
                out = [None] * n
                for t in reversed(range(n)) if suffix else range(n):
                    state = _cell(mode, inputs[t], state, *w)
                    out[t] = state[0] if mode == "LSTM" else state
                outputs.append(out)
                finals[k, b] = state
            inputs = [jnp.concatenate([out[t] for out in outputs]) for t in range(n)]
        width = inputs[0].shape[0]
        ys.append(jnp.stack(inputs + [jnp.zeros(width)] * (steps - n)))
    layers = range(num_layers * len(directions))

    def stacked(part):
        return jnp.stack([jnp.stack([part(finals[k, b]) for b in range(batch)]) for k in layers])

    if mode == "LSTM":
        return jnp.stack(ys, axis=1), stacked(lambda s: s[0]), stacked(lambda s: s[1])
    return jnp.stack(ys, axis=1), stacked(lambda s: s), None


KINDS = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]

ALL = dict(num_layers=2, batch_first=True, bidirectional=True)


def _rnn(name, cls, shape, hx=False, lengths=None, **kw):
    """A case: name, class, keywords (sizes 3 -> 4), input shape, hx given, seq_length."""
    return (name, cls, dict(input_size=3, hidden_size=4, **kw), shape, hx, lengths)


# the feature each adds: RNN's defaults, relu and both directions with hx,
# no bias and lengths, LSTM's defaults, two layers with lengths, and every
# feature at once (two layers, batch_first, both directions, hx, lengths)
RNN_CASES = [
    _rnn("rnn_tanh", "RNN", (3, 2, 3)),
    _rnn("rnn_relu_bi", "RNN", (3, 2, 3), True, nonlinearity="relu", bidirectional=True),
    _rnn("gru_nobias_len", "GRU", (4, 2, 3), lengths=[4, 2], has_bias=False, bidirectional=True),
    _rnn("lstm", "LSTM", (3, 2, 3)),
    _rnn("lstm_len_2l", "LSTM", (5, 2, 3), True, [2, 5], num_layers=2),
    _rnn("gru_all", "GRU", (2, 3, 3), True, [3, 2], **ALL),
    _rnn("lstm_all", "LSTM", (2, 3, 3), True, [2, 3], **ALL),
]

# MindSpore 2.10: _spread of output, h_n (and c_n) of the same layer with the
# same weights, x = _seq(shape), hx = _det(hx shape, 10) (and 11 for c)
RNN_MINDSPORE = {
    "rnn_tanh": (
        [0.8828698, 0.3684682, -0.4124939, -0.4306918, -0.7405761, 0.4583524],
        [0.6240075, -0.08368666, -0.7405761, 0.8781427, 0.5411428, 0.4583524],
    ),
    "rnn_relu_bi": (
        [0.2701502, 0, 1.490841, 0, 0, 2.286252],
        [0, 0.2050977, 0, 0, 0, 0.3308753],
    ),
    "gru_nobias_len": (
        [-0.3235469, -0.01294245, -0.1934276, 0.3376788, 0.002695978, 0],
        [-0.2139208, -0.1961239, -0.2647564, 0.5198555, -0.01294245, -0.1232512],
    ),
    "lstm": (
        [-0.2112939, 0.08828654, 0.06160136, 0.02172927, -0.08764759, -0.4070235],
        [0.17916, 0.09922548, -0.08764759, -0.1271143, 0.188365, -0.4070235],
        [0.5076688, 0.4052713, -0.1988929, -0.2199502, 0.5709943, -0.5596489],
    ),
    "lstm_len_2l": (
        [-0.3071211, 0.05079784, 0.07221857, 0.07654268, 0.07539052, 0.05501369],
        [-0.1276227, 0.01994967, -0.3796479, -0.1476245, -0.122071, 0.05501369],
        [-0.331764, 0.07961407, -0.4962955, -0.3066151, -0.1745569, 0.142567],
    ),
    "gru_all": (
        [0.195843, -0.3239435, -0.08049572, -0.3220413, -0.5202543, 0],
        [0.4816302, 0.3268241, 0.4530341, -0.08049572, -0.1253211, -0.2606531],
    ),
    "lstm_all": (
        [0.07541324, -0.1312891, 0, 0.02654327, -0.1580591, -0.010209],
        [-0.3501458, 0.05693069, 0.0546352, -0.04841751, 0.007105231, -0.1868391],
        [-0.7838827, 0.3816325, 0.2983058, -0.0950386, 0.01387791, -0.32547],
    ),
}


def _rnn_case(name, cls, kw, shape, use_hx, lengths):
    """The layer with fixed weights, its inputs and the closed form's."""
    net = getattr(nn, cls)(**kw)
    weights = _set_weights(net)
    directions = 2 if kw.get("bidirectional") else 1
    batch_first = kw.get("batch_first", False)
    batch = shape[0] if batch_first else shape[1]
    h_shape = (directions * kw.get("num_layers", 1), batch, kw["hidden_size"])
    x = jnp.asarray(_seq(shape))
    h0, c0 = jnp.asarray(_det(h_shape, 10)), jnp.asarray(_det(h_shape, 11))
    if not use_hx:
        h0, c0 = jnp.zeros(h_shape), jnp.zeros(h_shape)
    mode = kw.get("nonlinearity", "tanh") if cls == "RNN" else cls
    seq_length = None if lengths is None else jnp.asarray(lengths, jnp.int32)

    def form(x, h0, c0, weights):
        xs = jnp.swapaxes(x, 0, 1) if batch_first else x
        layers, bi = kw.get("num_layers", 1), kw.get("bidirectional", False)
        y, h, c = _recurrent(mode, xs, h0, c0, weights, layers, bi, lengths)
        return (jnp.swapaxes(y, 0, 1) if batch_first else y), h, c

    def call(x, h0, c0):
        hx = ((h0, c0) if cls == "LSTM" else h0) if use_hx else None
        y, h = net(x, hx, seq_length)
        return (y, *h) if cls == "LSTM" else (y, h, None)

    return net, weights, (x, h0, c0), form, call


@pytest.mark.parametrize("case", RNN_CASES, ids=[c[0] for c in RNN_CASES])
def test_recurrent_values(case):
    net, weights, (x, h0, c0), form, call = _rnn_case(*case)
    mindspores = RNN_MINDSPORE[case[0]]  # output, h_n (and c_n)
    got, want = call(x, h0, c0)[: len(mindspores)], form(x, h0, c0, weights)[: len(mindspores)]
    for ours, theirs, mindspore in zip(got, want, mindspores, strict=True):
        close(ours, theirs)
        close(_spread(ours), mindspore)


def _loss(y, h, c):
    """A scalar that weighs every output differently."""
    total = jnp.sum(jnp.sin(y * jnp.cos(jnp.arange(y.size).reshape(y.shape))))
    total = total + jnp.sum(jnp.cos(h) * 0.5)
    return total if c is None else total + jnp.sum(c * c)


# every feature at once (two layers, batch_first, both directions, hx,
# seq_length) on two steps (CI time); GRU's loop is LSTM's with other gates
# (its values: above); RNN's gradient: by GradOperation below
GRAD_CASES = [_rnn("lstm_all_short", "LSTM", (2, 2, 3), True, [2, 1], **ALL)]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_recurrent_gradient(case):
    net, weights, (x, h0, c0), form, call = _rnn_case(*case)
    params = net.trainable_params()
    if case[4]:  # hx given: its gradient too

        def ours(x, h0, c0):
            return _loss(*call(x, h0, c0))

        (d_x, d_h, d_c), d_w = kt.grad(ours, (0, 1, 2), params)(x, h0, c0)
        want = jax.grad(lambda *a: _loss(*form(*a)), (0, 1, 2, 3))(x, h0, c0, weights)
        close(d_h, want[1], 1e-4)
        if case[1] == "LSTM":
            close(d_c, want[2], 1e-4)
    else:
        d_x, d_w = kt.grad(lambda x: _loss(*call(x, h0, c0)), 0, params)(x)
        want = jax.grad(lambda x, w: _loss(*form(x, h0, c0, w)), (0, 1))(x, weights)
        want = (want[0], None, None, want[1])
    close(d_x, want[0], 1e-4)
    for p, d in zip(params, d_w, strict=True):
        close(d, want[3][p.name], 1e-4)


def test_recurrent_grad_operation_by_list():
    net, weights, (x, h0, c0), form, call = _rnn_case(*RNN_CASES[0])  # RNN, tanh
    params = kt.ParameterTuple(net.trainable_params())
    ours = kt.GradOperation(get_by_list=True)(lambda x: _loss(*call(x, h0, c0)), params)(x)
    want = jax.grad(lambda w: _loss(*form(x, h0, c0, w)))(weights)
    for p, d in zip(params, ours, strict=True):
        close(d, want[p.name], 1e-4)


def test_recurrent_dropout_between_layers():
    gru = nn.GRU(3, 4, 2, dropout=0.5, seed=0)
    x = jnp.asarray(_seq((3, 2, 3)))
    evaluated = gru(x)[0]
    plain = nn.GRU(3, 4, 2, seed=0)
    close(evaluated, plain(x)[0])  # eval: no dropout
    gru.set_train(True)
    assert not np.allclose(np.asarray(gru(x)[0]), np.asarray(evaluated))


# -- Conv2dTranspose ----------------------------------------------------------------------
# the pad_dil_group case's options, and the gradient case's (below)
PAD_DIL_GROUP = dict(
    stride=(1, 2), pad_mode="pad", padding=1, dilation=2, group=2, output_padding=(1, 0)
)
CONVT_CASES = [
    # name, keywords, input shape
    ("same_s1", dict(in_channels=2, out_channels=3, kernel_size=3, has_bias=True), (1, 2, 4, 5)),
    ("same_s2", dict(in_channels=2, out_channels=3, kernel_size=3, stride=2), (2, 2, 3, 4)),
    (
        "valid_s2",
        dict(
            in_channels=2,
            out_channels=3,
            kernel_size=(3, 2),
            stride=2,
            pad_mode="valid",
            has_bias=True,
        ),
        (1, 2, 3, 4),
    ),
    (
        "valid_s3_k2",
        dict(in_channels=2, out_channels=2, kernel_size=2, stride=3, pad_mode="valid"),
        (1, 2, 3, 3),
    ),
    (
        "pad_out",
        dict(
            in_channels=2,
            out_channels=3,
            kernel_size=3,
            stride=2,
            pad_mode="pad",
            padding=(1, 0, 2, 1),
            output_padding=1,
        ),
        (1, 2, 3, 4),
    ),
    (
        "pad_dil_group",
        dict(in_channels=4, out_channels=2, kernel_size=3, **PAD_DIL_GROUP),
        (1, 4, 4, 3),
    ),
    (
        "same_s2_dil",
        dict(in_channels=2, out_channels=2, kernel_size=2, stride=2, dilation=2),
        (1, 2, 3, 3),
    ),
]
# MindSpore 2.10: _spread of the same Conv2dTranspose of _seq(shape)
CONVT_MINDSPORE = {
    "same_s1": [0.7049611, 5.071971, -1.832174, 2.273428, -0.7983376, -1.111619],
    "same_s2": [-0.008817492, 0.1600402, -0.1777716, -0.1959319, 0.8653542, 0.2010827],
    "valid_s2": [0.4148558, -0.0530768, 0.07496276, 0.9547464, -0.08413815, 0.8129079],
    "valid_s3_k2": [0.4030622, 0, 0.1380598, -0.2756455, 0, 0],
    "pad_out": [0.4176271, -0.1982379, -0.5943903, 0.7172498, -0.1867786, 0],
    "pad_dil_group": [0, -1.33176, 0.2577191, 0, 0, 0],
    "same_s2_dil": [0.4030622, 0.3084339, -0.6273007, 0, 0, 0],
}


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_transpose(x, w, b, kw):
    """Each input pixel adds x * kernel into the output at (i * stride + a *
    dilation - pad); the window kept and its size are MindSpore's."""
    stride, dilation = _pair(kw.get("stride", 1)), _pair(kw.get("dilation", 1))
    pad_mode, group = kw.get("pad_mode", "same"), kw.get("group", 1)
    padding = kw.get("padding", 0)
    top, bottom, left, right = (padding,) * 4 if isinstance(padding, int) else padding
    sizes, starts = [], []
    for n, k, s, d, lo, hi in zip(
        x.shape[2:], w.shape[2:], stride, dilation, (top, left), (bottom, right), strict=True
    ):
        span = (k - 1) * d + 1
        if pad_mode == "same":
            sizes.append(n * s)
            starts.append(max(span - s, 0) // 2)
        elif pad_mode == "valid":
            sizes.append(n * s + max(span - s, 0))
            starts.append(0)
        else:
            sizes.append((n - 1) * s + span - lo - hi)
            starts.append(lo)
    n_in, per_group = x.shape[1] // group, w.shape[1]
    canvas = jnp.zeros(
        (x.shape[0], per_group * group, starts[0] + sizes[0] + 9, starts[1] + sizes[1] + 9)
    )
    h, wd = x.shape[2:]
    for g in range(group):
        xs = x[:, g * n_in : (g + 1) * n_in]
        for a in range(w.shape[2]):
            for c in range(w.shape[3]):
                part = jnp.einsum("nihw,io->nohw", xs, w[g * n_in : (g + 1) * n_in, :, a, c])
                r0, c0 = a * dilation[0], c * dilation[1]
                rows = slice(r0, r0 + (h - 1) * stride[0] + 1, stride[0])
                cols = slice(c0, c0 + (wd - 1) * stride[1] + 1, stride[1])
                canvas = canvas.at[:, g * per_group : (g + 1) * per_group, rows, cols].add(part)
    out = canvas[:, :, starts[0] : starts[0] + sizes[0], starts[1] : starts[1] + sizes[1]]
    if b is not None:
        out = out + b[None, :, None, None]
    extra = _pair(kw.get("output_padding", 0))
    return jnp.pad(out, ((0, 0), (0, 0), (0, extra[0]), (0, extra[1])))


@pytest.mark.parametrize("name, kw, shape", CONVT_CASES, ids=[c[0] for c in CONVT_CASES])
def test_conv2d_transpose(name, kw, shape):
    conv = nn.Conv2dTranspose(**kw)
    weights = _set_weights(conv)
    x = jnp.asarray(_seq(shape))
    out = conv(x)
    want = _conv_transpose(x, weights["weight"], weights.get("bias"), kw)
    assert out.shape == want.shape
    close(out, want)
    close(_spread(out), CONVT_MINDSPORE[name])


# the gradient once: pad_dil_group's padding, dilation, groups, stride and
# output_padding, and a bias, with a 2x2 kernel (CI time)
CONVT_GRAD_CASE = dict(in_channels=2, out_channels=2, kernel_size=2, has_bias=True, **PAD_DIL_GROUP)


def test_conv2d_transpose_gradient():
    kw = CONVT_GRAD_CASE
    conv = nn.Conv2dTranspose(**kw)
    weights = _set_weights(conv)
    x = jnp.asarray(_seq((1, 2, 3, 3)))

    def form(x, w):
        return jnp.sum(jnp.sin(_conv_transpose(x, w["weight"], w.get("bias"), kw)))

    d_x, d_w = kt.grad(lambda x: jnp.sum(jnp.sin(conv(x))), 0, conv.trainable_params())(x)
    want_x, want_w = jax.jit(jax.grad(form, (0, 1)))(x, weights)
    close(d_x, want_x, 1e-4)
    for p, d in zip(conv.trainable_params(), d_w, strict=True):
        close(d, want_w[p.name], 1e-4)


def test_conv2d_transpose_output_padding_needs_pad():
    with pytest.raises(ValueError, match="output_padding"):
        nn.Conv2dTranspose(2, 3, 3, stride=2, output_padding=1)
    with pytest.raises(ValueError, match="output_padding"):
        nn.Conv2dTranspose(2, 3, 3, stride=2, pad_mode="pad", output_padding=2)


# -- MultiheadAttention -------------------------------------------------------------------
def _masks(name, tgt, src, batch, heads):
    """(attn_mask, key_padding_mask) as numpy arrays or None."""
    if name == "none":
        return None, None
    if name == "bool_both":
        padding = np.zeros((batch, src), bool)
        padding[0, -1] = True
        return np.triu(np.ones((tgt, src), bool), 1), padding
    if name == "float3d":
        return _det((batch * heads, tgt, src), 20), None
    if name == "float_kpm":
        return None, _det((batch, src), 21)
    attn = np.zeros((batch * heads, tgt, src), bool)  # "bool3d_kpm"
    attn[1, 0, 0] = attn[-1, -1, 1] = True
    padding = np.zeros((batch, src), bool)
    padding[1, 0] = True
    return attn, padding


DIMS = (3, 4, 2)  # (L, S, N): one shape for most cases, to share compiled operations (CI time)
MHA_CASES = [
    # name, keywords, (L, S, N), masks, call keywords, unbatched
    ("plain", dict(embed_dim=8, num_heads=2), (3, 4, 2), "none", {}, False),
    (
        "bf_perhead",
        dict(embed_dim=8, num_heads=2, batch_first=True),
        (3, 4, 2),
        "bool_both",
        dict(average_attn_weights=False),
        False,
    ),
    ("kv_dims", dict(embed_dim=8, num_heads=2, kdim=5, vdim=6), (3, 4, 2), "float3d", {}, False),
    (
        "bias_kv_zero",
        dict(embed_dim=8, num_heads=2, add_bias_kv=True, add_zero_attn=True),
        (3, 4, 2),
        "bool_both",
        {},
        False,
    ),
    ("nobias", dict(embed_dim=8, num_heads=2, has_bias=False), DIMS, "float_kpm", {}, False),
    ("bool3d", dict(embed_dim=8, num_heads=2), (3, 4, 2), "bool3d_kpm", {}, False),
    ("unbatched", dict(embed_dim=8, num_heads=2), (3, 4, 1), "none", {}, True),
]
# MindSpore 2.10: _spread of (attn_output, attn_output_weights) of the same
# MultiheadAttention of query _seq, key 0.7 _seq, value _seq reversed on axis 0
MHA_MINDSPORE = {
    "plain": (
        [-2.287743, 0.328992, 1.965987, -1.768015, 1.389544, 1.823949],
        [0.6476737, 0.6104747, 0.3121111, 0.2611689, 0.1249931, 0.08682138],
    ),
    "bf_perhead": (
        [-1.970183, -0.3077305, 2.342418, 2.503361, -1.198833, 2.004321],
        [1, 0.0006545854, 0, 0.9806731, 0, 0],
    ),
    "kv_dims": (
        [-1.28025, -0.5106782, 0.8289914, 1.427187, 0.9205652, -0.8197001],
        [0.409306, 0.289854, 0.1789505, 0.1377045, 0.2959248, 0.2588469],
    ),
    "bias_kv_zero": (
        [-1.127661, -0.1625988, -3.35695, 1.289086, 3.021841, -1.585155],
        [0.8940403, 0.303995, 0.1197573, 0, 0.04589112, 0.0932171],
    ),
    "nobias": (
        [0.7117934, -1.749054, 2.743355, -0.5743989, -1.679791, 2.499666],
        [0.7027238, 0.6688732, 0.2833198, 0.2667996, 0.1414206, 0.09898219],
    ),
    "bool3d": (
        [-1.98509, -1.058226, 1.965987, -1.910039, 1.389544, 3.605254],
        [0.3176007, 0.6104747, 0.3121111, 0.6421474, 0.2720124, 0.2455983],
    ),
    "unbatched": (
        [0.2741662, -1.816181, 2.195432, -0.3840176, -3.936573, 4.075007],
        [0.710568, 0.285272, 0.01954952, 0.04035705, 0.6830509, 0.001172195],
    ),
}


def _additive(mask):
    """-inf where a bool mask is True; a float mask as it is."""
    mask = jnp.asarray(mask)
    return jnp.where(mask, -jnp.inf, 0.0) if mask.dtype == jnp.bool_ else mask


def _attention(q, k, v, p, heads, attn_mask=None, padding=None, kw=None, average=True):
    """softmax(Q K^T / sqrt(head_dim) + masks) V per head, then out_proj; q
    (L, N, E), k and v (S, N, .); returns (out, weights)."""
    kw = kw or {}
    width, batch = q.shape[-1], q.shape[1]
    if "in_proj_weight" in p:
        w_q, w_k, w_v = (p["in_proj_weight"][j * width : (j + 1) * width] for j in range(3))
    else:
        w_q, w_k, w_v = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bias = p.get("in_proj_bias", jnp.zeros(3 * width))
    big_q = q @ w_q.T + bias[:width]
    big_k = k @ w_k.T + bias[width : 2 * width]
    big_v = v @ w_v.T + bias[2 * width :]
    if kw.get("add_bias_kv"):
        big_k = jnp.concatenate([big_k, jnp.broadcast_to(p["bias_k"], (1, batch, width))])
        big_v = jnp.concatenate([big_v, jnp.broadcast_to(p["bias_v"], (1, batch, width))])
    if kw.get("add_zero_attn"):
        big_k = jnp.concatenate([big_k, jnp.zeros((1, batch, width))])
        big_v = jnp.concatenate([big_v, jnp.zeros((1, batch, width))])
    d = width // heads
    qh, kh, vh = (a.reshape(a.shape[0], batch, heads, d) for a in (big_q, big_k, big_v))
    scores = jnp.einsum("lnhd,snhd->nhls", qh, kh) / np.sqrt(d)
    tgt, src = q.shape[0], k.shape[0]
    mask = jnp.zeros((batch, heads, tgt, src))
    if attn_mask is not None:  # (L, S) or (N * heads, L, S)
        attn = _additive(attn_mask)
        mask = mask + (attn if attn.ndim == 2 else attn.reshape(-1, heads, tgt, src))
    if padding is not None:  # (N, S)
        mask = mask + _additive(padding)[:, None, None, :]
    extra = scores.shape[-1] - src  # bias_k and the zero key: never masked
    scores = scores + jnp.pad(mask, ((0, 0), (0, 0), (0, 0), (0, extra)))
    e = jnp.exp(scores - jnp.max(scores, -1, keepdims=True))
    weights = e / jnp.sum(e, -1, keepdims=True)
    out = jnp.einsum("nhls,snhd->lnhd", weights, vh).reshape(tgt, batch, width)
    out = out @ p["out_proj.weight"].T + p.get("out_proj.bias", 0.0)
    return out, (jnp.mean(weights, 1) if average else weights)


def _mha_case(name, kw, dims, masks, call_kw, unbatched):
    net = nn.MultiheadAttention(**kw)
    weights = _set_weights(net)
    tgt, src, batch = dims
    width = kw["embed_dim"]
    batch_first = kw.get("batch_first", False)

    def shape(length, d):
        return (
            (length, d) if unbatched else (batch, length, d) if batch_first else (length, batch, d)
        )

    q = jnp.asarray(_seq(shape(tgt, width)))
    k = jnp.asarray(_seq(shape(src, kw.get("kdim", width))) * 0.7)
    v = jnp.asarray(_seq(shape(src, kw.get("vdim", width)))[::-1].copy())
    attn_mask, padding = _masks(masks, tgt, src, batch, kw["num_heads"])
    as_array = lambda a: None if a is None else jnp.asarray(a)  # noqa: E731
    attn_mask, padding = as_array(attn_mask), as_array(padding)

    def call(q, k, v, **more):
        return net(q, k, v, key_padding_mask=padding, attn_mask=attn_mask, **call_kw, **more)

    def form(q, k, v, p):
        def to_lnd(a):
            return a[:, None] if unbatched else jnp.swapaxes(a, 0, 1) if batch_first else a

        average = call_kw.get("average_attn_weights", True)
        mask_padding = None if padding is None else padding.reshape(batch, src)
        heads = kw["num_heads"]
        out, w = _attention(
            to_lnd(q), to_lnd(k), to_lnd(v), p, heads, attn_mask, mask_padding, kw, average
        )
        if unbatched:
            return out[:, 0], w[0]
        return (jnp.swapaxes(out, 0, 1) if batch_first else out), w

    return net, weights, (q, k, v), call, form


@pytest.mark.parametrize("case", MHA_CASES, ids=[c[0] for c in MHA_CASES])
def test_multihead_attention_values(case):
    net, weights, (q, k, v), call, form = _mha_case(*case)
    got, want = call(q, k, v), form(q, k, v, weights)
    for ours, theirs, mindspore in zip(got, want, MHA_MINDSPORE[case[0]], strict=True):
        assert ours.shape == theirs.shape
        close(ours, theirs)
        close(_spread(ours), mindspore)
    (alone,) = call(q, k, v, need_weights=False)  # a 1-tuple, as MindSpore's
    close(alone, got[0])


def _attention_loss(out, weights):
    return jnp.sum(jnp.sin(out)) + jnp.sum(
        weights * jnp.cos(jnp.arange(weights.size).reshape(weights.shape))
    )


# the gradient once, of separate q, k, v projections (kdim, vdim), bias_k
# and bias_v, the zero key and both masks at once (CI time)
MHA_GRAD_CASE = (
    "kv_dims_bias_kv_zero",
    dict(embed_dim=8, num_heads=2, kdim=5, vdim=6, add_bias_kv=True, add_zero_attn=True),
    (3, 4, 2),
    "bool_both",
    {},
    False,
)


def test_multihead_attention_gradient():
    net, weights, inputs, call, form = _mha_case(*MHA_GRAD_CASE)
    params = net.trainable_params()
    (d_q, d_k, d_v), d_w = kt.grad(lambda *a: _attention_loss(*call(*a)), (0, 1, 2), params)(
        *inputs
    )
    want = jax.jit(jax.grad(lambda q, k, v, p: _attention_loss(*form(q, k, v, p)), (0, 1, 2, 3)))(
        *inputs, weights
    )
    for ours, theirs in zip((d_q, d_k, d_v), want[:3], strict=True):
        close(ours, theirs, 1e-4)
    for p, d in zip(params, d_w, strict=True):
        close(d, want[3][p.name], 1e-4)


# -- TransformerEncoderLayer --------------------------------------------------------------
TEL_CASES = [
    # name, keywords, (S, N), masks
    ("post_relu", dict(d_model=8, nhead=2, dim_feedforward=16), (3, 2), False),
    (
        "pre_gelu_bf",
        dict(
            d_model=8,
            nhead=2,
            dim_feedforward=16,
            activation="gelu",
            norm_first=True,
            batch_first=True,
            layer_norm_eps=1e-3,
        ),
        (3, 2),
        True,
    ),
]
# MindSpore 2.10: _spread of the same layer (eval) of _seq(shape); the second
# with a causal bool src_mask and src_key_padding_mask True at [1, -1]
TEL_MINDSPORE = {
    "post_relu": [-0.9305031, -0.5275561, 0.4395662, 0.5687798, 0.8623633, -0.4586834],
    "pre_gelu_bf": [1.691521, -1.907086, 1.465621, -1.457495, -1.470183, 1.58333],
}


def _encoder_layer(x, p, kw, attn_mask, padding):
    """x (S, N, E): attention and feed-forward blocks, residuals, LayerNorms."""
    eps = kw.get("layer_norm_eps", 1e-5)
    gelu = kw.get("activation") == "gelu"

    def act(y):  # MindSpore's ops.gelu: the erf form
        return y * 0.5 * (1 + jax.scipy.special.erf(y / np.sqrt(2))) if gelu else jnp.maximum(y, 0)

    attn = {name[len("self_attn.") :]: v for name, v in p.items() if name.startswith("self_attn.")}

    def attention(y):
        return _attention(y, y, y, attn, kw["nhead"], attn_mask, padding)[0]

    def feed_forward(y):
        hidden = act(y @ p["dense1.weight"].T + p["dense1.bias"])
        return hidden @ p["dense2.weight"].T + p["dense2.bias"]

    def norm(y, k):
        return layer_norm(y, -1, p[f"norm{k}.gamma"], p[f"norm{k}.beta"], eps)

    if kw.get("norm_first"):
        x = x + attention(norm(x, 1))
        return x + feed_forward(norm(x, 2))
    x = norm(x + attention(x), 1)
    return norm(x + feed_forward(x), 2)


@pytest.mark.parametrize("name, kw, dims, masked", TEL_CASES, ids=[c[0] for c in TEL_CASES])
def test_transformer_encoder_layer(name, kw, dims, masked):
    layer = nn.TransformerEncoderLayer(**kw)
    weights = _set_weights(layer)
    src, batch = dims
    batch_first = kw.get("batch_first", False)
    x = jnp.asarray(_seq((batch, src, 8) if batch_first else (src, batch, 8)))
    attn_mask, padding = None, None
    if masked:
        attn_mask = jnp.asarray(np.triu(np.ones((src, src), bool), 1))
        padding = jnp.zeros((batch, src), bool).at[1, -1].set(True)

    def form(x, p):
        y = _encoder_layer(jnp.swapaxes(x, 0, 1) if batch_first else x, p, kw, attn_mask, padding)
        return jnp.swapaxes(y, 0, 1) if batch_first else y

    out = layer(x, attn_mask, padding)
    close(out, form(x, weights), 1e-4)
    close(_spread(out), TEL_MINDSPORE[name], 1e-4)
    if name != "post_relu":
        return  # the gradient: of MindSpore's default layout only (time)

    def loss(y):
        return jnp.sum(jnp.sin(y * jnp.cos(jnp.arange(y.size).reshape(y.shape))))

    d_x, d_w = kt.grad(lambda x: loss(layer(x, attn_mask, padding)), 0, layer.trainable_params())(x)
    want_x, want_w = jax.jit(jax.grad(lambda x, p: loss(form(x, p)), (0, 1)))(x, weights)
    close(d_x, want_x, 1e-4)
    for p, d in zip(layer.trainable_params(), d_w, strict=True):
        close(d, want_w[p.name], 1e-4)


def test_transformer_encoder_layer_dropout_and_activations():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5, seed=0)
    x = jnp.asarray(_seq((3, 2, 8)))
    evaluated = layer(x)
    assert not np.allclose(np.asarray(layer.set_train(True)(x)), np.asarray(evaluated))
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    assert nn.TransformerEncoderLayer(8, 2, 16, activation=nn.GELU()).activation is not None
