"""Losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.cell import Cell


class MSELoss(Cell):
    """Mean squared error (`reduction`: "mean", "sum" or "none")."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction

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

    The loss is computed stably as `logsumexp(logits) - <labels, logits>`, whose
    gradient is `softmax(logits) - labels` (no `log(softmax)` round trip).
    """

    def __init__(self, sparse=False, reduction="mean"):
        super().__init__()
        self.sparse = sparse
        self.reduction = reduction

    def construct(self, logits, labels):
        if self.sparse:
            labels = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
        loss = jax.nn.logsumexp(logits, axis=-1) - jnp.sum(labels * logits, axis=-1)
        if self.reduction == "mean":
            return jnp.mean(loss)
        if self.reduction == "sum":
            return jnp.sum(loss)
        return loss
