"""Losses, with MindSpore 2.x's signatures and defaults: `MSELoss(reduction="mean")`,
`L1Loss(reduction="mean")`,
`SoftmaxCrossEntropyWithLogits(sparse=False, reduction="none")` (a loss per
example: pass `reduction="mean"` for a scalar), `CrossEntropyLoss(weight=None,
ignore_index=-100, reduction="mean", label_smoothing=0.0)`, `BCELoss(weight=None,
reduction="mean")`, `BCEWithLogitsLoss(reduction="mean", weight=None,
pos_weight=None)`, `NLLLoss(weight=None, ignore_index=-100, reduction="mean")`,
`SmoothL1Loss(beta=1.0, reduction="none")`, `KLDivLoss(reduction="mean")`. A
`reduction` other than "none", "mean" or "sum" ("batchmean" too for KLDivLoss)
is a ValueError, as in MindSpore.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.cell import Cell
from k_transform.ops.nn import SoftmaxCrossEntropyWithLogits as _Fused

SOFTMAX_CROSS_ENTROPY = _Fused()


REDUCTIONS = ("none", "mean", "sum")


def _checked(reduction: str, allowed: tuple = REDUCTIONS) -> str:
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {allowed}, not {reduction!r}")
    return reduction


def _reduced(loss, reduction: str):
    """The elementwise `loss` averaged ("mean"), summed ("sum") or kept ("none")."""
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    return loss


class MSELoss(Cell):
    """Mean squared error (`reduction`: "mean", the default, "sum" or "none")."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        diff = logits - labels
        loss = diff * diff
        if self.reduction == "mean":
            return jnp.mean(loss)
        if self.reduction == "sum":
            return jnp.sum(loss)
        return loss


class SoftmaxCrossEntropyWithLogits(Cell):
    """Cross entropy of softmax(logits); `sparse=True` takes integer class labels.

    The loss is the fused primitive `ops.SoftmaxCrossEntropyWithLogits`:
    `-<labels, log_softmax(logits)>` computed stably, whose gradient
    `softmax(logits) - labels` stays finite for any logits. `reduction` is
    "none" by default (one loss per example), as in MindSpore.
    """

    def __init__(self, sparse=False, reduction="none"):
        super().__init__()
        self.sparse = sparse
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        if self.sparse:
            labels = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
        loss = SOFTMAX_CROSS_ENTROPY(logits, labels)
        if self.reduction == "mean":
            return jnp.mean(loss)
        if self.reduction == "sum":
            return jnp.sum(loss)
        return loss


class L1Loss(Cell):
    """Mean absolute error (`reduction`: "mean", the default, "sum" or "none")."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        loss = jnp.abs(logits - labels)
        if self.reduction == "mean":
            return jnp.mean(loss)
        if self.reduction == "sum":
            return jnp.sum(loss)
        return loss


class CrossEntropyLoss(Cell):
    """MindSpore's `nn.CrossEntropyLoss`: logits (N, C) or (N, C, d1, ...) or
    (C,), the class axis second (first for one example); labels either class
    indices (one dimension fewer than the logits) or class probabilities
    (the logits' shape).

    With index labels, example n's loss is `-w[y_n] log p[n, y_n]`, with label
    smoothing `(1 - e)` times that plus `e / C` times `-sum_c w_c log p[n, c]`;
    labels equal to `ignore_index` contribute 0, and "mean" divides by the sum
    of `w[y_n]` over the others. With probability labels (smoothed as
    `y (1 - e) + e / C`) it is `-sum_c w_c y[n, c] log p[n, c]`, and "mean"
    divides by the number of examples. (Checked against MindSpore 2.10.)
    """

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.weight = weight
        self.ignore_index = ignore_index
        self.reduction = _checked(reduction)
        self.label_smoothing = float(label_smoothing)

    def construct(self, logits, labels):
        one = logits.ndim == 1  # a single example: (C,)
        if one:
            logits = logits[None]
            labels = labels[None]
        x = jnp.moveaxis(logits, 1, -1)  # classes last: (N, d..., C)
        n_classes = x.shape[-1]
        logp = jax.nn.log_softmax(x, axis=-1)
        w = jnp.ones(n_classes, x.dtype) if self.weight is None else self.weight
        e = self.label_smoothing
        if labels.ndim == logits.ndim:  # probabilities
            y = jnp.moveaxis(labels, 1, -1) * (1.0 - e) + e / n_classes
            loss = -jnp.sum(w * y * logp, axis=-1)
            count = loss.size
        else:
            valid = labels != self.ignore_index
            onehot = jax.nn.one_hot(jnp.where(valid, labels, 0), n_classes, dtype=x.dtype)
            w_y = jnp.sum(onehot * w, axis=-1) * valid
            loss = -jnp.sum(onehot * logp, axis=-1) * w_y * (1.0 - e)
            loss = loss - jnp.sum(w * logp, axis=-1) * valid * (e / n_classes)
            count = jnp.sum(w_y)
        if self.reduction == "mean":
            return jnp.sum(loss) / count
        if self.reduction == "sum":
            return jnp.sum(loss)
        return loss[0] if one else loss


# MindSpore's BinaryCrossEntropy kernel takes logs of x + 1e-12 and 1 - x + 1e-12
BCE_EPSILON = 1e-12


class BCELoss(Cell):
    """Binary cross entropy of probabilities: `-weight * (y log(x + e) + (1 -
    y) log(1 - x + e))`, e = 1e-12 as MindSpore's kernel (a probability of 0
    or 1 costs 27.63, not inf). `weight` (broadcast to x) defaults to ones.
    The gradient is this formula's; MindSpore's backward kernel writes it as
    `weight (x - y) / max(x (1 - x), e)`, the same except within ~e of 0 or 1."""

    def __init__(self, weight=None, reduction="mean"):
        super().__init__()
        self.weight = weight
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        log_p = jnp.log(logits + BCE_EPSILON)
        log_not_p = jnp.log(1.0 - logits + BCE_EPSILON)
        loss = -(labels * log_p + (1.0 - labels) * log_not_p)
        if self.weight is not None:
            loss = loss * self.weight
        return _reduced(loss, self.reduction)


class BCEWithLogitsLoss(Cell):
    """Binary cross entropy of sigmoid(logits): `-weight * (pos_weight * y log
    sigmoid(x) + (1 - y) log(1 - sigmoid(x)))`, with the logs computed stably
    as `-softplus(-x)` and `-softplus(x)`. `weight` and `pos_weight` (broadcast
    to x) default to ones."""

    def __init__(self, reduction="mean", weight=None, pos_weight=None):
        super().__init__()
        self.reduction = _checked(reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def construct(self, logits, labels):
        positive = labels * jax.nn.softplus(-logits)
        if self.pos_weight is not None:
            positive = positive * self.pos_weight
        loss = positive + (1.0 - labels) * jax.nn.softplus(logits)
        if self.weight is not None:
            loss = loss * self.weight
        return _reduced(loss, self.reduction)


class NLLLoss(Cell):
    """Negative log likelihood of log-probabilities (N, C) or (N, C, d...)
    with class-index labels: `-weight[y] * x[n, y]`, 0 where the label is
    `ignore_index`; "mean" divides by the sum of `weight[y]` over the labels
    not ignored (MindSpore's, PyTorch's)."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.weight = weight
        self.ignore_index = ignore_index
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        x = jnp.moveaxis(logits, 1, -1)  # classes last: (N, d..., C)
        n_classes = x.shape[-1]
        valid = labels != self.ignore_index
        onehot = jax.nn.one_hot(jnp.where(valid, labels, 0), n_classes, dtype=x.dtype)
        w = jnp.ones(n_classes, x.dtype) if self.weight is None else self.weight
        w_y = jnp.sum(onehot * w, axis=-1) * valid
        loss = -jnp.sum(onehot * x, axis=-1) * w_y
        if self.reduction == "mean":
            return jnp.sum(loss) / jnp.sum(w_y)
        return _reduced(loss, self.reduction)


class SmoothL1Loss(Cell):
    """`0.5 d^2 / beta` where |d| < beta, else `|d| - 0.5 beta`, d = x - y;
    MindSpore's default keeps one loss per element (`reduction="none"`)."""

    def __init__(self, beta=1.0, reduction="none"):
        super().__init__()
        self.beta = beta
        self.reduction = _checked(reduction)

    def construct(self, logits, labels):
        d = jnp.abs(logits - labels)
        loss = jnp.where(d < self.beta, 0.5 * d * d / self.beta, d - 0.5 * self.beta)
        return _reduced(loss, self.reduction)


class KLDivLoss(Cell):
    """`y (log y - x)` for log-probabilities x and probabilities y, 0 where y
    is 0; "mean" averages over all elements, "batchmean" divides the sum by
    the batch size x.shape[0] (MindSpore's)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = _checked(reduction, (*REDUCTIONS, "batchmean"))

    def construct(self, logits, labels):
        positive = labels > 0
        y_log_y = jnp.where(positive, labels * jnp.log(jnp.where(positive, labels, 1.0)), 0.0)
        loss = y_log_y - labels * logits
        if self.reduction == "batchmean":
            return jnp.sum(loss) / logits.shape[0]
        return _reduced(loss, self.reduction)
