"""MindSpore 2.10 functional ops added to the drop-in as compositions over
jax.numpy (`k_transform/mindspore/functions.py`), `ops.CumSum`,
`nn.GroupNorm` and `nn.LSTMCell`.

Each op's value is checked against an independent numpy / jax.numpy
equivalent, and a differentiable op's gradient through `ms.grad` against
`jax.grad` of the equivalent jnp program. Where MindSpore's derivative at a
kink or tie differs from the obvious jnp program's, the expected numbers are
MindSpore 2.10's (PYNATIVE_MODE, `ms.grad`), marked so. MindSpore itself is
not imported.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import nn, ops

X = jnp.array([[0.5, -1.2, 0.3], [0.8, 0.4, -1.5]])
M = jnp.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
KINKS = jnp.array([-1.0, 0.0, 3.0, 6.0, 7.0])
LOGITS = jnp.array([[1.0, 2.0, 0.5], [0.1, -1.0, 2.0]])
LABELS = jnp.array([2, 0])
W3 = jnp.array([1.0, 2.0, 3.0])


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# -- signatures: MindSpore 2.10's (`inspect.signature` there)
SIGNATURES = {
    "ones": "(shape, dtype=None)",
    "zeros": "(size, dtype=None)",
    "arange": "(start=0, end=None, step=1, *, dtype=None)",
    "full": "(size, fill_value, *, dtype=None)",
    "eye": "(n, m=None, dtype=None)",
    "cat": "(tensors, axis=0)",
    "flatten": "(input, order='C', *, start_dim=1, end_dim=-1)",
    "split": "(tensor, split_size_or_sections, axis=0)",
    "one_hot": "(indices, depth, on_value=1, off_value=0, axis=-1)",
    "relu6": "(x)",
    "leaky_relu": "(input, alpha=0.2)",
    "softplus": "(input, beta=1, threshold=20)",
    "max": "(input, axis=None, keepdims=False, *, initial=None, where=None)",
    "std": "(input, axis=None, ddof=0, keepdims=False)",
    "norm": "(A, ord=None, dim=None, keepdim=False, *, dtype=None)",
    "topk": "(input, k, dim=None, largest=True, sorted=True)",
    "sort": "(input_x, axis=-1, descending=False)",
    "clip_by_value": "(x, clip_value_min=None, clip_value_max=None)",
    "clip_by_global_norm": "(x, clip_norm=1.0, use_norm=None)",
    "binary_cross_entropy_with_logits": (
        "(input, target, weight=None, pos_weight=None, reduction='mean')"
    ),
    "cross_entropy": (
        "(input, target, weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0)"
    ),
    "smooth_l1_loss": "(input, target, beta=1.0, reduction='none')",
    "kl_div": "(logits, labels, reduction='mean')",
    "depend": "(value, expr)",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature(name):
    assert str(inspect.signature(getattr(ops, name))) == SIGNATURES[name]


def test_names_resolve():
    names = "ones zeros arange cat flatten one_hot split clip_by_global_norm CumSum depend topk"
    for name in names.split():
        assert callable(getattr(ops, name))
    assert ms.ops.functional.relu6 is ops.relu6
    assert nn.GroupNorm and nn.LSTMCell


# -- creation: values and MindSpore's dtypes (its int64 is JAX's default int)
INT = jnp.asarray(1).dtype


@pytest.mark.parametrize(
    "made, expected, dtype",
    [
        (lambda: ops.ones((2,)), [1.0, 1.0], jnp.float32),
        (lambda: ops.ones(2, jnp.int32), [1, 1], jnp.int32),
        (lambda: ops.zeros((1, 2)), [[0.0, 0.0]], jnp.float32),
        (lambda: ops.arange(3), [0, 1, 2], INT),
        (lambda: ops.arange(0.0, 3), [0.0, 1.0, 2.0], jnp.float32),
        (lambda: ops.arange(0, 2, 0.5), [0.0, 0.5, 1.0, 1.5], jnp.float32),
        (lambda: ops.full((2,), 2.5), [2, 2], INT),  # MindSpore 2.10: int64 [2, 2]
        (lambda: ops.full((2,), 2.5, dtype=jnp.float32), [2.5, 2.5], jnp.float32),
        (lambda: ops.full_like(jnp.array([1, 2]), 2.5), [2, 2], jnp.int32),
        (lambda: ops.fill(jnp.float32, (2,), 3), [3.0, 3.0], jnp.float32),
        (lambda: ops.eye(3, 2), np.eye(3, 2), jnp.float32),
        (lambda: ops.linspace(0, 1, 5), np.linspace(0, 1, 5), jnp.float32),
        (lambda: ops.one_hot(jnp.array([0, 2, -1]), 3), [[1, 0, 0], [0, 0, 1], [0, 0, 0]], INT),
        (lambda: ops.one_hot(jnp.array([0, 2]), 3, 1, 0, 0), [[1, 0], [0, 0], [0, 1]], INT),
        (
            lambda: ops.one_hot(jnp.array([1]), 2, jnp.array(2.0), jnp.array(-1.0)),
            [[-1.0, 2.0]],
            jnp.float32,
        ),
    ],
)
def test_creation(made, expected, dtype):
    out = made()
    assert out.dtype == dtype
    close(out, np.asarray(expected))


# -- values against numpy / jax.numpy
A5 = jnp.arange(5.0)
VALUES = {
    "cat": (lambda: ops.cat((M, X), 1), lambda: np.concatenate([M, X], 1)),
    "flatten": (lambda: ops.flatten(jnp.ones((2, 3, 4))), lambda: np.ones((2, 12))),
    "flatten_all": (
        lambda: ops.flatten(jnp.ones((2, 3, 4)), start_dim=0, end_dim=1),
        lambda: np.ones((6, 4)),
    ),
    "split_int": (lambda: ops.split(A5, 2), lambda: np.split(np.arange(5.0), [2, 4])),
    "split_sizes": (lambda: ops.split(A5, [1, 4]), lambda: np.split(np.arange(5.0), [1])),
    "chunk": (lambda: ops.chunk(A5, 3), lambda: np.split(np.arange(5.0), [2, 4])),
    "unbind": (lambda: ops.unbind(M, 1), lambda: tuple(np.asarray(M).T)),
    "narrow": (lambda: ops.narrow(M, 1, 1, 2), lambda: np.asarray(M)[:, 1:3]),
    "flip": (lambda: ops.flip(M, (0, 1)), lambda: np.asarray(M)[::-1, ::-1]),
    "swapaxes": (lambda: ops.swapaxes(M, 0, 1), lambda: np.asarray(M).T),
    "permute": (lambda: ops.permute(M, (1, 0)), lambda: np.asarray(M).T),
    "unsqueeze": (lambda: ops.unsqueeze(W3, 0), lambda: np.asarray(W3)[None]),
    "ravel": (lambda: ops.ravel(M), lambda: np.ravel(M)),
    "repeat_interleave": (lambda: ops.repeat_interleave(M, 2, 0), lambda: np.repeat(M, 2, 0)),
    "index_select": (
        lambda: ops.index_select(M, 1, jnp.array([2, 0, 2])),
        lambda: np.asarray(M)[:, [2, 0, 2]],
    ),
    "gather_elements": (
        lambda: ops.gather_elements(M, 1, jnp.array([[2, 0], [1, 1]])),
        lambda: np.array([[3.0, 1.0], [2.0, 2.0]]),
    ),
    "masked_fill": (
        lambda: ops.masked_fill(W3, jnp.array([True, False, True]), 0.5),
        lambda: np.array([0.5, 2.0, 0.5]),
    ),
    "pad": (  # MindSpore 2.10's numbers
        lambda: ops.pad(M, (1, 0, 0, 1), value=9.0),
        lambda: np.array([[9.0, 1, 3, 3], [9, 2, 2, 0], [9, 9, 9, 9]]),
    ),
    "pad_replicate": (
        lambda: ops.pad(M, (1, 1), mode="replicate"),
        lambda: np.pad(M, ((0, 0), (1, 1)), mode="edge"),
    ),
    "subtract": (lambda: ops.subtract(W3, M, alpha=2), lambda: W3 - 2 * np.asarray(M)),
    "divide_floor": (
        lambda: ops.divide(jnp.array([-3.0, 3.0]), 2.0, rounding_mode="floor"),
        lambda: np.array([-2.0, 1.0]),
    ),
    "remainder": (lambda: ops.remainder(jnp.array([-3.0, 3.0]), 2.0), lambda: np.array([1.0, 1.0])),
    "round": (lambda: ops.round(jnp.array([1.25, 2.5, -0.5])), lambda: np.array([1.0, 2.0, -0.0])),
    "compare": (
        lambda: (ops.lt(W3, 2), ops.ge(W3, 2), ops.eq(W3, 2), ops.ne(W3, 2)),
        lambda: (W3 < 2, W3 >= 2, W3 == 2, W3 != 2),
    ),
    "logical": (
        lambda: ops.logical_and(ops.isfinite(W3), ops.logical_not(ops.isnan(W3))),
        lambda: np.array([True, True, True]),
    ),
    "depend": (lambda: ops.depend(W3, X), lambda: W3),
    "max_axis": (lambda: ops.max(M, 1, True), lambda: (np.array([[3.0], [2.0]]), [[1], [0]])),
    "min_axis": (lambda: ops.min(M, 1), lambda: (np.array([1.0, 0.0]), [0, 2])),
    "std": (lambda: ops.std(M, 1, ddof=1), lambda: np.std(M, 1, ddof=1)),
    "var": (lambda: ops.var(M), lambda: np.var(M)),
    "norm": (lambda: ops.norm(M), lambda: np.linalg.norm(np.ravel(M))),
    "norm_l1_rows": (lambda: ops.norm(M, 1, dim=1), lambda: np.array([7.0, 4.0])),
    "all_any": (
        lambda: (
            ops.all(jnp.array([1, 0])),
            ops.any(jnp.array([[True, False], [False, False]]), 1),
        ),
        lambda: (False, [True, False]),
    ),
    # MindSpore 2.10's order at ties: the lower index first, both directions stable
    "topk": (lambda: ops.topk(jnp.array([1.0, 3.0, 3.0, 2.0]), 2), lambda: ([3.0, 3.0], [1, 2])),
    "topk_smallest_dim0": (
        lambda: ops.topk(jnp.array([[1.0, 3.0, 2.0], [4.0, 0.0, 2.0]]), 1, dim=0, largest=False),
        lambda: ([[1.0, 0.0, 2.0]], [[0, 1, 0]]),
    ),
    "sort": (
        lambda: ops.sort(jnp.array([3.0, 1.0, 3.0, 2.0])),
        lambda: ([1, 2, 3, 3.0], [1, 3, 0, 2]),
    ),
    "sort_descending": (
        lambda: ops.sort(jnp.array([3.0, 1.0, 3.0, 2.0]), descending=True),
        lambda: ([3.0, 3, 2, 1], [0, 2, 3, 1]),
    ),
    "CumSum": (lambda: ops.CumSum()(W3, 0), lambda: np.cumsum(W3)),
    "CumSum_exclusive_reverse": (  # MindSpore 2.10's numbers
        lambda: ops.CumSum(True, True)(W3, 0),
        lambda: np.array([5.0, 3.0, 0.0]),
    ),
    "clip_by_value_list": (
        lambda: ops.clip_by_value([W3, -W3], 0.0, 2.0),
        lambda: [np.clip(W3, 0, 2), np.clip(-W3, 0, 2)],
    ),
    "clip_by_global_norm": (  # global norm 13
        lambda: ops.clip_by_global_norm((jnp.array([3.0, 4.0]), jnp.array([[0.0, 12.0]])), 1.0),
        lambda: (np.array([3.0, 4.0]) / 13, np.array([[0.0, 12.0]]) / 13),
    ),
    "clip_by_global_norm_below": (
        lambda: ops.clip_by_global_norm([jnp.array([3.0, 4.0])], 100.0),
        lambda: [np.array([3.0, 4.0])],
    ),
    "clip_by_norm": (lambda: ops.clip_by_norm(jnp.array([3.0, 4.0]), 1.0), lambda: [0.6, 0.8]),
    "cosine_similarity": (
        lambda: ops.cosine_similarity(M, 2 * M + 1),
        lambda: (
            np.sum(M * (2 * M + 1), 1)
            / np.linalg.norm(M, axis=1)
            / np.linalg.norm(2 * M + 1, axis=1)
        ),
    ),
    "dense": (
        lambda: ops.dense(X, M, W3[:2]),
        lambda: np.asarray(X) @ np.asarray(M).T + np.asarray(W3[:2]),
    ),
    "gelu_tanh": (
        lambda: ops.gelu(X, approximate="tanh"),
        lambda: jax.nn.gelu(X, approximate=True),
    ),
}


@functools.cache
def our_values() -> dict:
    """Every case of VALUES run once under one jax.jit (eagerly, each op
    dispatched alone took most of this file's time); `test_creation` and
    `test_index_dtypes` run eagerly."""
    return jax.jit(lambda: {name: ours() for name, (ours, _) in VALUES.items()})()


@pytest.mark.parametrize("name", sorted(VALUES))
def test_value(name):
    got, want = our_values()[name], VALUES[name][1]()
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            close(g, np.asarray(w))
    else:
        close(got, want)


def test_index_dtypes():
    assert ops.topk(W3, 2)[1].dtype == jnp.int32  # MindSpore's int32
    assert ops.argsort(W3).dtype == jnp.int32
    assert ops.max(M, 1)[1].dtype == INT  # MindSpore's int64


# -- losses: values against numpy and MindSpore 2.10's numbers
LG = jnp.array([[0.3, -1.2], [2.0, 0.1]])
TG = jnp.array([[1.0, 0.0], [0.5, 1.0]])


def _np_bce_logits(x, t, w=1.0, pw=1.0):
    p = 1 / (1 + np.exp(-np.asarray(x)))
    return -(pw * t * np.log(p) + (1 - t) * np.log(1 - p)) * w


LOSSES = {
    "bce_logits_mean": (
        lambda: ops.binary_cross_entropy_with_logits(LG, TG),
        np.mean(_np_bce_logits(LG, TG)),
    ),
    "bce_logits_weights": (  # MindSpore 2.10: 1.1830699
        lambda: ops.binary_cross_entropy_with_logits(
            LG, TG, jnp.array([1.0, 2.0]), jnp.array([3.0, 1.0])
        ),
        1.1830699,
    ),
    "bce_logits_none": (
        lambda: ops.binary_cross_entropy_with_logits(LG, TG, reduction="none"),
        _np_bce_logits(LG, TG),
    ),
    "bce": (  # MindSpore 2.10: 1.7269388
        lambda: ops.binary_cross_entropy(jnp.array([[0.2, 0.9], [0.5, 0.1]]), TG),
        1.7269388,
    ),
    "cross_entropy": (  # MindSpore 2.10: 2.0230765
        lambda: ops.cross_entropy(LOGITS, LABELS),
        -np.mean(np.asarray(jax.nn.log_softmax(LOGITS))[[0, 1], [2, 0]]),
    ),
    # MindSpore 2.10's numbers for weights, smoothing, ignore_index, probabilities
    "cross_entropy_weight_smoothing": (
        lambda: ops.cross_entropy(LOGITS, LABELS, W3, label_smoothing=0.2),
        1.8829266,
    ),
    "cross_entropy_smoothing": (
        lambda: ops.cross_entropy(LOGITS, LABELS, label_smoothing=0.1),
        1.9764098,
    ),
    "cross_entropy_ignore": (lambda: ops.cross_entropy(LOGITS, jnp.array([2, -100])), 1.9643683),
    "cross_entropy_probabilities": (
        lambda: ops.cross_entropy(LOGITS, jnp.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])),
        1.7480764,
    ),
    "nll_weight_smoothing": (
        lambda: ops.nll_loss(LOGITS, LABELS, W3, label_smoothing=0.2),
        -0.4966667,
    ),
    "nll_ignore": (lambda: ops.nll_loss(LOGITS, jnp.array([2, 1]), ignore_index=1), -0.5),
    "mse": (lambda: ops.mse_loss(W3, M[0]), np.mean((W3 - M[0]) ** 2)),
    "l1_sum": (lambda: ops.l1_loss(W3, M[0], "sum"), np.sum(np.abs(W3 - M[0]))),
    "smooth_l1": (  # default reduction "none"
        lambda: ops.smooth_l1_loss(W3, jnp.array([1.0, 0.0, 5.0])),
        np.array([0.0, 1.5, 1.5]),
    ),
    # MindSpore 2.10: "mean" over all elements, "batchmean" over the batch
    "kl_div_mean": (
        lambda: ops.kl_div(jnp.array([[-1.2, -0.4]]), jnp.array([[0.3, 0.7]])),
        0.014567847,
    ),
    "kl_div_batchmean": (
        lambda: ops.kl_div(jnp.array([[-1.2, -0.4]]), jnp.array([[0.3, 0.7]]), "batchmean"),
        0.029135695,
    ),
}


@functools.cache
def our_losses() -> dict:
    return jax.jit(lambda: {name: ours() for name, (ours, _) in LOSSES.items()})()


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_value(name):
    close(our_losses()[name], LOSSES[name][1])


# -- gradients: ms.grad of ours against jax.grad of the jnp equivalent
def _jnp_ce(x, w, s):
    logp = jax.nn.log_softmax(x, axis=1)
    wt = w[LABELS]
    nll = -jnp.sum(logp[jnp.arange(2), LABELS] * wt) / jnp.sum(wt)
    smooth = -jnp.sum(logp * w) / 3 / jnp.sum(wt)
    return (1 - s) * nll + s * smooth


def _jnp_global(a, b):
    n = jnp.sqrt(jnp.sum(a * a) + jnp.sum(b * b))
    return jnp.sum(a / jnp.maximum(n, 1.0)) + jnp.sum(b * b / jnp.maximum(n, 1.0))


GRADS = {
    "silu": (lambda x: ops.silu(x), lambda x: x * jax.nn.sigmoid(x), X),
    "gelu": (lambda x: ops.gelu(x), lambda x: jax.nn.gelu(x, approximate=False), X),
    "mish": (lambda x: ops.mish(x), lambda x: x * jnp.tanh(jax.nn.softplus(x)), X),
    "logsigmoid": (lambda x: ops.logsigmoid(x), jax.nn.log_sigmoid, X),
    "softsign": (lambda x: ops.softsign(x), jax.nn.soft_sign, X),
    "softplus": (
        lambda x: ops.softplus(x, 2, 1),
        lambda x: jnp.where(2 * x > 1, x, jax.nn.softplus(2 * x) / 2),
        X,
    ),
    "selu": (lambda x: ops.selu(x), jax.nn.selu, X),
    "cat": (
        lambda x: ops.cat((x, 2 * x), 1) ** 2,
        lambda x: jnp.concatenate((x, 2 * x), 1) ** 2,
        X,
    ),
    "flatten": (lambda x: ops.flatten(x[None]) * W3[0], lambda x: x.reshape(1, 6) * W3[0], X),
    "split": (lambda x: ops.split(x, [1, 2], 1)[1] ** 2, lambda x: x[:, 1:] ** 2, X),
    "gather_elements": (
        lambda x: ops.gather_elements(x, 1, jnp.array([[2, 2], [0, 1]])),
        lambda x: jnp.take_along_axis(x, jnp.array([[2, 2], [0, 1]]), 1),
        X,
    ),
    "masked_fill": (
        lambda x: ops.masked_fill(x, x > 0.4, 0.0) * x,
        lambda x: jnp.where(x > 0.4, 0.0, x) * x,
        X,
    ),
    "std": (lambda x: ops.std(x, 1, ddof=1), lambda x: jnp.std(x, 1, ddof=1), X),
    "norm": (lambda x: ops.norm(x), jnp.linalg.norm, X),
    "cumprod": (lambda x: ops.cumprod(x, 1), lambda x: jnp.cumprod(x, 1), X),
    "sort": (lambda x: ops.sort(x)[0] * W3, lambda x: jnp.sort(x) * W3, X),
    "topk": (lambda x: ops.topk(x, 2)[0] * W3[:2], lambda x: -jnp.sort(-x)[:, :2] * W3[:2], X),
    "clip_by_global_norm": (
        lambda x: ops.clip_by_global_norm((x, x * x), 1.0)[0],
        lambda x: x / jnp.maximum(jnp.sqrt(jnp.sum(x * x) + jnp.sum(x**4)), 1.0),
        X,
    ),
    "clip_by_norm": (
        lambda x: ops.clip_by_norm(x, 1.0) * W3,
        lambda x: x * jnp.minimum(1.0 / (jnp.linalg.norm(x) + 1e-6), 1.0) * W3,
        X,
    ),
    "bce_logits": (
        lambda x: ops.binary_cross_entropy_with_logits(x, jnp.abs(X), W3, 2.0),
        lambda x: jnp.mean(
            -(2.0 * jnp.abs(X) * jax.nn.log_sigmoid(x) + (1 - jnp.abs(X)) * jax.nn.log_sigmoid(-x))
            * W3
        ),
        X,
    ),
    "cross_entropy": (
        lambda x: ops.cross_entropy(x, LABELS, W3, label_smoothing=0.2),
        lambda x: _jnp_ce(x, W3, 0.2),
        LOGITS,
    ),
    "dense": (lambda x: ops.dense(x, M, W3[:2]), lambda x: x @ M.T + W3[:2], X),
    "cosine_similarity": (
        lambda x: ops.cosine_similarity(x, M),
        lambda x: jnp.sum(x * M, 1) / jnp.linalg.norm(x, axis=1) / jnp.linalg.norm(M, axis=1),
        X,
    ),
    "CumSum": (
        lambda x: ops.CumSum(True, True)(x, 1) * W3,
        lambda x: (jnp.cumsum(x[:, ::-1], 1)[:, ::-1] - x) * W3,
        X,
    ),
}


def _weighted(f):
    """sum(f(v) * sin(v[0] + 1)): a cotangent that is not all ones."""
    return lambda v: jnp.sum(f(v) * jnp.sin(v.ravel()[0] + 1.0))


@functools.cache
def oracle_gradients() -> dict:
    """jax.grad of every oracle, compiled once (eagerly, each took ~0.5 s)."""
    return jax.jit(
        lambda: {name: jax.grad(_weighted(oracle))(x) for name, (_, oracle, x) in GRADS.items()}
    )()


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient(name):
    ours, _, x = GRADS[name]
    close(ms.grad(_weighted(ours))(x), oracle_gradients()[name], 1e-4)


def _two_clipped(a, b):
    clipped = ops.clip_by_global_norm((a, b), 1.0)
    return jnp.sum(clipped[0]) + jnp.sum(clipped[1] * b)


def test_gradient_two_inputs():
    a, b = jnp.array([3.0, 4.0]), jnp.array([[0.0, 12.0]])
    got = ms.grad(_two_clipped, grad_position=(0, 1))(a, b)
    want = jax.jit(jax.grad(_jnp_global, (0, 1)))(a, b)
    close(got[0], want[0])
    close(got[1], want[1])


# -- MindSpore 2.10's derivatives at kinks and ties (ms.grad there, PYNATIVE_MODE)
KINK_GRADS = {
    # at 0 and 6: 0 and 1
    "relu6": (lambda x: ops.relu6(x), KINKS, [0.0, 0.0, 1.0, 1.0, 0.0]),
    # at 0: (1 + alpha) / 2, max(alpha x, x) sharing the tie
    "leaky_relu": (lambda x: ops.leaky_relu(x), KINKS, [0.2, 0.6, 1.0, 1.0, 1.0]),
    "leaky_relu_alpha2": (lambda x: ops.leaky_relu(x, 2.0), jnp.array([0.0, -1, 1]), [1.5, 2, 1]),
    "elu": (lambda x: ops.elu(x), KINKS, [0.36787945, 1.0, 1.0, 1.0, 1.0]),
    # at -3 and 3 the inner piece's: -0.5 and 1.5
    "hardswish": (
        lambda x: ops.hardswish(x),
        jnp.array([-3.0, 3.0, 0.0, -4, 4]),
        [-0.5, 1.5, 0.5, 0, 1],
    ),
    # at -3 and 3: 0
    "hardsigmoid": (
        lambda x: ops.hardsigmoid(x),
        jnp.array([-3.0, 3.0, 0.0]),
        [0.0, 0.0, 0.16666667],
    ),
    "selu_at_0": (lambda x: ops.selu(x), jnp.array([0.0, 1.0]), [1.050701, 1.050701]),
    "softplus_threshold": (
        lambda x: ops.softplus(x, 2, 10),
        jnp.array([1.0, 5.0, 25.0]),
        [0.8807971, 0.9999546, 1.0],
    ),
    # at a bound 1/2 (as jnp.clip; MindSpore's ops.clamp gives 1)
    "clip_by_value": (
        lambda x: ops.clip_by_value(x, 0.0, 1.0),
        jnp.array([0.0, 0.5, 1.0, 2.0, -1.0]),
        [0.5, 1.0, 0.5, 0.0, 0.0],
    ),
    "clip_by_value_min_only": (
        lambda x: ops.clip_by_value(x, 0.5, None),
        jnp.array([0.0, 0.5, 1.0]),
        [0.0, 0.5, 1.0],
    ),
    # the ties' values both taken, each its own gradient
    "topk_tie": (lambda x: ops.topk(x, 2)[0], jnp.array([1.0, 3.0, 3.0, 2.0]), [0, 1, 1, 0.0]),
    "sort_tie": (
        lambda x: ops.sort(x)[0] * jnp.array([1.0, 2.0, 3.0, 4.0]),
        jnp.array([3.0, 1.0, 3.0, 2.0]),
        [3.0, 1.0, 4.0, 2.0],
    ),
    # without axis, a tie shares the gradient; with one, the first index gets it all
    "max_all_tie": (lambda x: ops.max(x), M, [[0, 0.5, 0.5], [0, 0, 0]]),
    "max_axis_tie": (lambda x: ops.max(x, 1)[0], M, [[0, 1.0, 0], [1.0, 0, 0]]),
    "min_axis_tie": (
        lambda x: ops.min(x, 1)[0],
        jnp.array([[2.0, 2.0, 0.0], [1.0, 1.0, 5.0]]),
        [[0, 0, 1.0], [1.0, 0, 0]],
    ),
    # l1 at a zero difference: 0; smooth l1 at |d| == beta: the linear piece
    "l1_tie": (lambda x: ops.l1_loss(x, jnp.array([1.0, 0, 5])), W3, [0.0, 1 / 3, -1 / 3]),
    "smooth_l1_at_beta": (
        lambda x: ops.smooth_l1_loss(x, jnp.zeros(3), 2.0, "sum"),
        jnp.array([2.0, 1.0, -2.0]),
        [1.0, 0.5, -1.0],
    ),
    # kl_div: no gradient to the labels
    "kl_div_labels": (
        lambda y: ops.kl_div(jnp.array([[-1.2, -0.4]]), y, "sum"),
        jnp.array([[0.0, 1.0]]),
        [[0.0, 0.0]],
    ),
}


@pytest.mark.parametrize("name", sorted(KINK_GRADS))
def test_mindspore_kink_gradient(name):
    ours, x, want = KINK_GRADS[name]
    close(ms.grad(lambda v: jnp.sum(ours(v)))(x), np.asarray(want))


def test_loss_gradients_mindspore_numbers():
    # MindSpore 2.10's gradients of the weighted, pos-weighted loss and the
    # weighted, smoothed cross entropy
    got = ms.grad(
        lambda x, y: ops.binary_cross_entropy_with_logits(
            x, y, jnp.array([1.0, 2.0]), jnp.array([3.0, 1.0])
        ),
        grad_position=(0, 1),
    )(LG, TG)
    close(got[0], [[-0.3191679, 0.11573758], [0.06539857, -0.23751041]])
    close(got[1], [[0.20217735, 0.6], [-0.43653607, -0.04999995]])
    got = ms.grad(lambda x: ops.cross_entropy(x, LABELS, W3, label_smoothing=0.2))(LOGITS)
    close(got, [[0.14518987, 0.40663907, -0.5518289], [-0.17925444, -0.02087989, 0.20013434]])


def test_gradient_in_jit_and_kt_grad():
    f = kt.jit(lambda x: ops.relu6(x) + ops.topk(x, 5)[0])
    close(f(KINKS), np.asarray(jax.nn.relu6(KINKS) + jnp.sort(KINKS)[::-1]))
    close(kt.grad(lambda x: jnp.sum(ops.hardswish(x)))(jnp.array([3.0])), [1.5])


# -- nn.GroupNorm, nn.LSTMCell: MindSpore 2.10's values with the same Parameters
def test_group_norm():
    x = jnp.arange(24, dtype=jnp.float32).reshape(2, 4, 3) ** 1.5
    net = nn.GroupNorm(2, 4)
    assert [n for n, _ in net.parameters_and_names()] == ["gamma", "beta"]
    net.gamma.set_data(jnp.array([1.0, 2.0, 0.5, -1.0]))
    net.beta.set_data(jnp.array([0.0, 1.0, 2.0, 3.0]))
    out = net(x)
    close(out[0, :, 0], [-1.19779, 1.25243, 1.29823, 2.75292])  # MindSpore 2.10
    close(out[1, 3], [2.7262, 2.12636, 1.51272])

    def oracle(x):
        g = x.reshape(2, 2, 6)
        n = (g - g.mean(2, keepdims=True)) / jnp.sqrt(g.var(2, keepdims=True) + 1e-5)
        return n.reshape(2, 4, 3) * net.gamma.reshape(1, 4, 1) + net.beta.reshape(1, 4, 1)

    close(out, oracle(x), 1e-4)
    got = ms.grad(lambda x: jnp.sum(net(x) ** 2 * x))(x)
    close(got, jax.jit(jax.grad(lambda x: jnp.sum(oracle(x) ** 2 * x)))(x), 1e-3)
    close(got[0, 0], [8.85932, 3.5469, -5.15919], 1e-3)  # MindSpore 2.10 (on (2, 4, 3, 1))


def test_lstm_cell():
    cell = nn.LSTMCell(3, 2)
    names = [n for n, _ in cell.parameters_and_names()]
    assert names == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    for k, (_, p) in enumerate(cell.parameters_and_names()):
        p.set_data(jnp.arange(p.size, dtype=jnp.float32).reshape(p.shape) * 0.1 - 0.3 + k * 0.05)
    h = (jnp.array([[0.1, -0.2]]), jnp.array([[0.3, 0.4]]))
    x = jnp.array([[0.5, -1.0, 2.0]])
    out = cell(x, h)
    close(out[0], [[0.49709836, 0.67704898]])  # MindSpore 2.10
    close(out[1], [[0.5704776, 0.8490057]])
    got = ms.grad(lambda x: jnp.sum(jnp.concatenate(cell(x, h))))(x)
    close(got, [[0.08357804, 0.18944526, 0.29531246]])  # MindSpore 2.10
