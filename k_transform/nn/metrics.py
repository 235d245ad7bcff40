"""Metrics, as MindSpore's (`mindspore.train.Accuracy`, also `nn.Accuracy`):
`clear()`, `update(logits, labels)` per batch, `eval()` over all batches since
the last `clear`. They run on host values (numpy), outside any gradient."""

from __future__ import annotations

import numpy as np


class Metric:
    """Base class: `clear`, `update(*inputs)`, `eval`."""

    def clear(self) -> None:
        raise NotImplementedError

    def update(self, *inputs) -> None:
        raise NotImplementedError

    def eval(self):
        raise NotImplementedError


class Accuracy(Metric):
    """Fraction of correct predictions. `eval_type="classification"`: the
    prediction is the argmax of (N, C) scores and labels are (N,) class ids
    or (N, C) one-hot rows; "multilabel": (N, C) scores rounded to 0/1 must
    equal (N, C) 0/1 labels in every column. `eval` before any `update` is a
    RuntimeError, as MindSpore."""

    def __init__(self, eval_type="classification"):
        if eval_type not in ("classification", "multilabel"):
            raise ValueError(
                f"eval_type must be 'classification' or 'multilabel', not {eval_type!r}"
            )
        self.eval_type = eval_type
        self.clear()

    def clear(self) -> None:
        self._correct_num = 0
        self._total_num = 0

    def update(self, *inputs) -> None:
        if len(inputs) != 2:
            raise ValueError(f"Accuracy.update takes (logits, labels), got {len(inputs)} inputs")
        scores, labels = np.asarray(inputs[0]), np.asarray(inputs[1])
        if self.eval_type == "multilabel":
            correct = np.all(np.round(scores) == labels, axis=-1)
        else:
            if labels.ndim == scores.ndim:  # one-hot rows
                labels = np.argmax(labels, axis=-1)
            correct = np.argmax(scores, axis=-1) == labels
        self._correct_num += int(np.sum(correct))
        self._total_num += int(correct.size)

    def eval(self) -> float:
        if self._total_num == 0:
            raise RuntimeError("Accuracy can not be calculated, because the number of samples is 0")
        return self._correct_num / self._total_num
