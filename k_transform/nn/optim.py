"""Optimizers: Cells whose `construct(gradients)` updates Parameters with
`ops.Assign`, so a training step (`TrainOneStepCell`) is one compiled,
functionalised program: the new values are written back after each call."""

from __future__ import annotations

import numpy as np

from k_transform.cell import Cell, Parameter
from k_transform.ops.state import Assign

ASSIGN = Assign()


class Optimizer(Cell):
    def __init__(self, params, learning_rate):
        super().__init__()
        object.__setattr__(self, "parameters", tuple(params))
        self.learning_rate = learning_rate

    def _slots(self, name):
        """One zero-initialised state Parameter per trained Parameter."""
        return tuple(
            Parameter(np.zeros(p.data.shape, np.float32), f"{name}.{p.name}", requires_grad=False)
            for p in self.parameters
        )


class SGD(Optimizer):
    """`p = p - learning_rate * g`."""

    def construct(self, gradients):
        k = 0
        for p in self.parameters:
            ASSIGN(p, p - self.learning_rate * gradients[k])
            k = k + 1
        return gradients


class Momentum(Optimizer):
    """`v = momentum * v + g; p = p - learning_rate * v`."""

    def __init__(self, params, learning_rate, momentum=0.9):
        super().__init__(params, learning_rate)
        self.momentum = momentum
        object.__setattr__(self, "moments", self._slots("moment"))

    def construct(self, gradients):
        k = 0
        for p in self.parameters:
            v = self.moments[k] * self.momentum + gradients[k]
            ASSIGN(self.moments[k], v)
            ASSIGN(p, p - self.learning_rate * v)
            k = k + 1
        return gradients


class Adam(Optimizer):
    """Adam with bias correction (Kingma & Ba)."""

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__(params, learning_rate)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        object.__setattr__(self, "m", self._slots("adam_m"))
        object.__setattr__(self, "v", self._slots("adam_v"))
        self.step = Parameter(np.zeros((), np.float32), "adam_step", requires_grad=False)

    def construct(self, gradients):
        t = self.step + 1.0
        ASSIGN(self.step, t)
        correction1 = 1.0 - self.beta1**t
        correction2 = 1.0 - self.beta2**t
        k = 0
        for p in self.parameters:
            g = gradients[k]
            m = self.m[k] * self.beta1 + g * (1.0 - self.beta1)
            v = self.v[k] * self.beta2 + g * g * (1.0 - self.beta2)
            ASSIGN(self.m[k], m)
            ASSIGN(self.v[k], v)
            update = (m / correction1) / ((v / correction2) ** 0.5 + self.eps)
            ASSIGN(p, p - self.learning_rate * update)
            k = k + 1
        return gradients
