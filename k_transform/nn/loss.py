"""Losses, with MindSpore 2.x's signatures and defaults: `MSELoss(reduction="mean")`,
`L1Loss(reduction="mean")`,
`SoftmaxCrossEntropyWithLogits(sparse=False, reduction="none")` (a loss per
example: pass `reduction="mean"` for a scalar). A `reduction` other than
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
