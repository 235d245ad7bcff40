"""Training wrappers: `WithLossCell` and `TrainOneStepCell`. As in MindSpore,
both are built with `auto_prefix=False`: wrapping a network does not rename
its Parameters (`fc1.weight` stays `fc1.weight`, so checkpoints of the
network and of the wrapped network agree)."""

from __future__ import annotations

from k_transform.cell import Cell, ParameterTuple
from k_transform.grad import value_and_grad


class WithLossCell(Cell):
    """`loss_fn(backbone(data), label)`."""

    def __init__(self, backbone, loss_fn):
        super().__init__(auto_prefix=False)
        self.backbone = backbone
        self.loss_fn = loss_fn

    def construct(self, data, label):
        return self.loss_fn(self.backbone(data), label)


class TrainOneStepCell(Cell):
    """One training step: loss, gradients w.r.t. the optimizer's Parameters,
    optimizer update; returns the loss. `kt.jit(step)` makes it one compiled
    program whose Parameter updates are written back after each call. The
    network runs once per step (loss and gradients from one pass), so state it
    assigns (BatchNorm's moving statistics) is updated once.

    `sens` (MindSpore's): the sensitivity the backward pass starts from, so
    the gradients are `sens` times the loss's (a loss scale; pair it with the
    optimizer's `loss_scale`); None means 1. `return_grad=True` returns
    `(loss, gradients)`.
    """

    def __init__(self, network, optimizer, sens=None, return_grad=False):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.sens = 1.0 if sens is None else float(sens)
        self.scaled = self.sens != 1.0
        self.return_grad = return_grad
        object.__setattr__(self, "weights", ParameterTuple(optimizer.parameters))
        object.__setattr__(self, "grad_fn", value_and_grad(network, None, self.weights))

    def construct(self, data, label):
        loss, grads = self.grad_fn(data, label)
        if self.scaled:
            grads = tuple(g * self.sens for g in grads)
        self.optimizer(grads)
        if self.return_grad:
            return loss, grads
        return loss
