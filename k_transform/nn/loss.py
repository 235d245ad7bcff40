"""Losses, with MindSpore 2.x's signatures and defaults: `MSELoss(reduction="mean")`,
`L1Loss(reduction="mean")`,
`SoftmaxCrossEntropyWithLogits(sparse=False, reduction="none")` (a loss per
example: pass `reduction="mean"` for a scalar), `CrossEntropyLoss(weight=None,
ignore_index=-100, reduction="mean", label_smoothing=0.0)`. A `reduction` other than
"none", "mean" or "sum" is a ValueError, as in MindSpore.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.cell import Cell
from k_transform.ops.nn import SoftmaxCrossEntropyWithLogits as _Fused

SOFTMAX_CROSS_ENTROPY = _Fused()


REDUCTIONS = ("none", "mean", "sum")


def _checked(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', not {reduction!r}")
    return reduction


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
