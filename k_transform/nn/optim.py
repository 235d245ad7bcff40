"""Optimizers and learning-rate schedules, as MindSpore 2.x's.

An optimizer is a Cell whose `construct(gradients)` updates Parameters with
`ops.Assign`, so a training step (`TrainOneStepCell`) is one compiled,
functionalised program: the new values are written back after each call.

What every optimizer shares (MindSpore's `nn.Optimizer`):

- `learning_rate`: a float; a list/array, one rate per step (steps past its
  end keep the last rate); or a `LearningRateSchedule` Cell called with the
  step number. The step number is `global_step` (an int32 Parameter,
  requires_grad=False), read before and incremented after each update.
- `loss_scale`: gradients are divided by it (the loss was multiplied by it).
- `weight_decay`: L2, `g + weight_decay * p`, applied to every Parameter whose
  name contains neither "beta" nor "gamma" (MindSpore's default filter).
  MindSpore scales weight_decay by loss_scale before the division, which is
  the same update.

Schedules (`construct(global_step) -> rate`, MindSpore's formulas):
`ExponentialDecayLR`: lr * decay_rate ** p, p = step / decay_steps (floored
if `is_stair`); `CosineDecayLR`: min_lr + (max_lr - min_lr) * (1 + cos(pi *
min(step, decay_steps) / decay_steps)) / 2; `PolynomialDecayLR`: (lr - end) *
(1 - min(step, decay_steps) / decay_steps) ** power + end.

Optimizers: `SGD`, `Momentum`, `Adam`, `AdamWeightDecay` (decoupled decay, no
bias correction), `RMSProp` (optionally centered), `Adagrad`; each docstring
gives its update, transcribed from MindSpore 2.10's kernels and checked
against its parameter values after a few steps.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter, ParameterTuple
from k_transform.ops.state import Assign

ASSIGN = Assign()


# -- learning-rate schedules ----------------------------------------------------------------
class LearningRateSchedule(Cell):
    """Base class: `construct(global_step)` returns the rate of that step."""


class ExponentialDecayLR(LearningRateSchedule):
    def __init__(self, learning_rate, decay_rate, decay_steps, is_stair=False):
        super().__init__()
        self.learning_rate, self.decay_rate = learning_rate, decay_rate
        self.decay_steps, self.is_stair = decay_steps, is_stair

    def construct(self, global_step):
        p = jnp.asarray(global_step, jnp.float32) / self.decay_steps
        if self.is_stair:
            p = jnp.floor(p)
        return self.learning_rate * jnp.power(self.decay_rate, p)


class CosineDecayLR(LearningRateSchedule):
    def __init__(self, min_lr, max_lr, decay_steps):
        super().__init__()
        self.min_lr, self.max_lr, self.decay_steps = min_lr, max_lr, decay_steps

    def construct(self, global_step):
        p = jnp.minimum(jnp.asarray(global_step, jnp.float32), self.decay_steps)
        cosine = jnp.cos(math.pi * p / self.decay_steps)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1.0 + cosine)


class PolynomialDecayLR(LearningRateSchedule):
    """`update_decay_steps`: past `decay_steps`, the decay restarts over the
    next multiple of it (MindSpore's)."""

    def __init__(
        self, learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False
    ):
        super().__init__()
        self.learning_rate, self.end_learning_rate = learning_rate, end_learning_rate
        self.decay_steps, self.power = decay_steps, power
        self.update_decay_steps = update_decay_steps

    def construct(self, global_step):
        step = jnp.asarray(global_step, jnp.float32)
        if self.update_decay_steps:
            decay_steps = self.decay_steps * jnp.maximum(jnp.ceil(step / self.decay_steps), 1.0)
            p = step
        else:
            decay_steps = self.decay_steps
            p = jnp.minimum(step, decay_steps)
        fraction = 1.0 - p / decay_steps
        span = self.learning_rate - self.end_learning_rate
        return span * jnp.power(fraction, self.power) + self.end_learning_rate


def _lr_kind(learning_rate) -> str:
    if isinstance(learning_rate, LearningRateSchedule):
        return "schedule"
    if isinstance(learning_rate, (int, float)):
        return "fixed"
    return "list"


# -- optimizers -----------------------------------------------------------------------------
def _decays(param: Parameter) -> bool:
    """MindSpore's default weight-decay filter."""
    return "beta" not in param.name and "gamma" not in param.name


class Optimizer(Cell):
    """Base class: holds the Parameters, the rate, `global_step` and the
    gradient preprocessing (`loss_scale`, `weight_decay`); subclasses write
    `construct(gradients)` with `self.get_lr()` and `self.preprocess(p, g, k)`.
    MindSpore's order: `super().__init__(learning_rate, parameters, ...)`."""

    def __init__(self, learning_rate, parameters, weight_decay=0.0, loss_scale=1.0):
        super().__init__()
        params = parameters
        if loss_scale <= 0:
            raise ValueError(f"loss_scale must be greater than 0, got {loss_scale}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be at least 0, got {weight_decay}")
        object.__setattr__(self, "parameters", ParameterTuple(params))
        self.lr_kind = _lr_kind(learning_rate)
        if self.lr_kind == "list":
            learning_rate = jnp.asarray(np.asarray(learning_rate, np.float32))
            self.last_step = int(learning_rate.shape[0]) - 1
        elif self.lr_kind == "fixed":
            learning_rate = float(learning_rate)
        self.learning_rate = learning_rate
        self.weight_decay, self.loss_scale = float(weight_decay), float(loss_scale)
        self.reciprocal_scale = 1.0 / self.loss_scale
        self.decay_coefficients = tuple(
            self.weight_decay if _decays(p) else 0.0 for p in self.parameters
        )
        self.global_step = Parameter(np.zeros((), np.int32), "global_step", requires_grad=False)

    def get_lr(self):
        """The rate of this step; advances `global_step`."""
        step = self.global_step * 1
        ASSIGN(self.global_step, step + 1)
        if self.lr_kind == "schedule":
            return self.learning_rate(step)
        if self.lr_kind == "list":
            return self.learning_rate[jnp.minimum(step, self.last_step)]
        return self.learning_rate

    def preprocess(self, p, g, k):
        """`g / loss_scale + weight_decay * p` for the k-th Parameter."""
        return g * self.reciprocal_scale + p * self.decay_coefficients[k]

    def _slots(self, name, fill=0.0):
        """One state Parameter per trained Parameter, `fill` everywhere,
        named as MindSpore's `clone(prefix=name)`: "<name>.<parameter>"."""
        return tuple(
            Parameter(
                np.full(p.stored.shape, fill, np.float32), f"{name}.{p.name}", requires_grad=False
            )
            for p in self.parameters
        )


class SGD(Optimizer):
    """`v = momentum * v + (1 - dampening) * g; p -= lr * v` (Nesterov:
    `p -= lr * (g + momentum * v)`); with momentum 0, `p -= lr * g`."""

    def __init__(
        self,
        params,
        learning_rate=0.1,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        loss_scale=1.0,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.momentum, self.dampening, self.nesterov = momentum, dampening, nesterov
        object.__setattr__(self, "accum", self._slots("accum"))

    def construct(self, gradients):
        lr = self.get_lr()
        k = 0
        for p in self.parameters:
            g = self.preprocess(p, gradients[k], k)
            if self.momentum > 0.0:
                v = self.accum[k] * self.momentum + g * (1.0 - self.dampening)
                ASSIGN(self.accum[k], v)
                if self.nesterov:
                    g = g + v * self.momentum
                else:
                    g = v
            ASSIGN(p, p - lr * g)
            k = k + 1
        return gradients


class Momentum(Optimizer):
    """`v = momentum * v + g; p -= lr * v` (`use_nesterov`: `p -= lr * (g +
    momentum * v)`). MindSpore's order of arguments; `momentum` has a default
    (0.9) where MindSpore requires it, `use_locking` (Adam's) is accepted."""

    def __init__(
        self,
        params,
        learning_rate,
        momentum=0.9,
        weight_decay=0.0,
        loss_scale=1.0,
        use_nesterov=False,
        use_locking=False,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.momentum, self.use_nesterov = momentum, use_nesterov
        object.__setattr__(self, "moments", self._slots("moments"))

    def construct(self, gradients):
        lr = self.get_lr()
        k = 0
        for p in self.parameters:
            g = self.preprocess(p, gradients[k], k)
            v = self.moments[k] * self.momentum + g
            ASSIGN(self.moments[k], v)
            if self.use_nesterov:
                ASSIGN(p, p - lr * (g + v * self.momentum))
            else:
                ASSIGN(p, p - lr * v)
            k = k + 1
        return gradients


class Adam(Optimizer):
    """Adam as MindSpore computes it: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 -
    b2) g^2`, `p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`;
    `use_nesterov`: `b1 m + (1 - b1) g` for `m` in the update; `use_amsgrad`:
    the running maximum of `v` for `v` in the update."""

    def __init__(
        self,
        params,
        learning_rate=1e-3,
        beta1=0.9,
        beta2=0.999,
        eps=1e-8,
        use_locking=False,
        use_nesterov=False,
        weight_decay=0.0,
        loss_scale=1.0,
        use_amsgrad=False,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.use_nesterov, self.use_amsgrad = use_nesterov, use_amsgrad
        object.__setattr__(self, "moment1", self._slots("moment1"))
        object.__setattr__(self, "moment2", self._slots("moment2"))
        if use_amsgrad:
            object.__setattr__(self, "vhat", self._slots("vhat"))
        self.beta1_power = Parameter(np.ones((), np.float32), "beta1_power", requires_grad=False)
        self.beta2_power = Parameter(np.ones((), np.float32), "beta2_power", requires_grad=False)

    def construct(self, gradients):
        lr = self.get_lr()
        beta1_power = self.beta1_power * self.beta1
        beta2_power = self.beta2_power * self.beta2
        ASSIGN(self.beta1_power, beta1_power)
        ASSIGN(self.beta2_power, beta2_power)
        lr_t = lr * jnp.sqrt(1.0 - beta2_power) / (1.0 - beta1_power)
        k = 0
        for p in self.parameters:
            g = self.preprocess(p, gradients[k], k)
            m = self.moment1[k] * self.beta1 + g * (1.0 - self.beta1)
            v = self.moment2[k] * self.beta2 + g * g * (1.0 - self.beta2)
            ASSIGN(self.moment1[k], m)
            ASSIGN(self.moment2[k], v)
            if self.use_amsgrad:
                v = jnp.maximum(self.vhat[k], v)
                ASSIGN(self.vhat[k], v)
            if self.use_nesterov:
                m = m * self.beta1 + g * (1.0 - self.beta1)
            ASSIGN(p, p - lr_t * m / (jnp.sqrt(v) + self.eps))
            k = k + 1
        return gradients


class AdamWeightDecay(Optimizer):
    """MindSpore's AdamWeightDecay: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 -
    b2) g^2`, `p -= lr * (m / (sqrt(v) + eps) + weight_decay * p)`, with no
    bias correction; the decay is decoupled (not added to g) and skips the
    Parameters the default filter skips ("beta", "gamma"). No `loss_scale`,
    as MindSpore's. Slots "adam_m.<name>" and "adam_v.<name>"."""

    def __init__(
        self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0
    ):
        super().__init__(learning_rate, params, weight_decay)
        # MindSpore holds the betas as float32 tensors and forms 1 - beta in
        # float32 (1 - 0.999 is 0.0010000467): the same rounding here
        b1, b2 = np.float32(beta1), np.float32(beta2)
        self.beta1, self.beta2, self.eps = float(b1), float(b2), float(np.float32(eps))
        self.one_minus_beta1, self.one_minus_beta2 = float(1 - b1), float(1 - b2)
        object.__setattr__(self, "moments1", self._slots("adam_m"))
        object.__setattr__(self, "moments2", self._slots("adam_v"))

    def construct(self, gradients):
        lr = self.get_lr()
        k = 0
        for p in self.parameters:
            g = gradients[k]
            m = self.moments1[k] * self.beta1 + g * self.one_minus_beta1
            v = self.moments2[k] * self.beta2 + g * g * self.one_minus_beta2
            ASSIGN(self.moments1[k], m)
            ASSIGN(self.moments2[k], v)
            update = m / (jnp.sqrt(v) + self.eps) + p * self.decay_coefficients[k]
            ASSIGN(p, p - lr * update)
            k = k + 1
        return gradients


class RMSProp(Optimizer):
    """MindSpore's RMSProp: `s = decay s + (1 - decay) g^2`, `mom = momentum
    mom + lr g / sqrt(s + epsilon)`, `p -= mom`; `centered`: also `mg = decay
    mg + (1 - decay) g` and `sqrt(s - mg^2 + epsilon)`. The mean square `s`
    starts at ones (MindSpore's "mean_square" slots), `mom` and `mg` at zeros
    ("moment", "mean_grad"). `use_locking` is accepted."""

    def __init__(
        self,
        params,
        learning_rate=0.1,
        decay=0.9,
        momentum=0.0,
        epsilon=1e-10,
        use_locking=False,
        centered=False,
        loss_scale=1.0,
        weight_decay=0.0,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.decay, self.momentum, self.epsilon = decay, momentum, epsilon
        self.centered = centered
        if centered:
            object.__setattr__(self, "mg", self._slots("mean_grad"))
        object.__setattr__(self, "ms", self._slots("mean_square", 1.0))
        object.__setattr__(self, "moment", self._slots("moment"))

    def construct(self, gradients):
        lr = self.get_lr()
        k = 0
        for p in self.parameters:
            g = self.preprocess(p, gradients[k], k)
            s = self.ms[k] * self.decay + g * g * (1.0 - self.decay)
            ASSIGN(self.ms[k], s)
            if self.centered:
                mg = self.mg[k] * self.decay + g * (1.0 - self.decay)
                ASSIGN(self.mg[k], mg)
                s = s - mg * mg
            mom = self.moment[k] * self.momentum + lr * g / jnp.sqrt(s + self.epsilon)
            ASSIGN(self.moment[k], mom)
            ASSIGN(p, p - mom)
            k = k + 1
        return gradients


class Adagrad(Optimizer):
    """MindSpore's Adagrad (its ApplyAdagrad kernel): `accum += g^2` (only
    with `update_slots`), `p -= lr g / sqrt(accum)`, no epsilon; `accum`
    starts at the value `accum` (0.1), in slots "accum.<name>"."""

    def __init__(
        self,
        params,
        accum=0.1,
        learning_rate=0.001,
        update_slots=True,
        loss_scale=1.0,
        weight_decay=0.0,
    ):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.update_slots = update_slots
        object.__setattr__(self, "accum", self._slots("accum", accum))

    def construct(self, gradients):
        lr = self.get_lr()
        k = 0
        for p in self.parameters:
            g = self.preprocess(p, gradients[k], k)
            accum = self.accum[k]
            if self.update_slots:
                accum = accum + g * g
                ASSIGN(self.accum[k], accum)
            ASSIGN(p, p - lr * g / jnp.sqrt(accum))
            k = k + 1
        return gradients
