"""Training wrappers (`WithLossCell`, `TrainOneStepCell`) and MindSpore's
`nn.Jvp` / `nn.Vjp` Cells. As in MindSpore, the training wrappers are built
with `auto_prefix=False`: wrapping a network does not rename its Parameters
(`fc1.weight` stays `fc1.weight`, so checkpoints of the network and of the
wrapped network agree). Their attributes are MindSpore's (`WithLossCell`'s
`_backbone` and `_loss_fn`), so a Cell that wraps them with its own prefix
names Parameters as MindSpore does: `network._backbone.fc1.weight`."""

from __future__ import annotations

from k_transform.cell import Cell, ParameterTuple
from k_transform.errors import KTransformError
from k_transform.forward_api import jvp
from k_transform.reverse import value_and_grad, vjp


class WithLossCell(Cell):
    """`loss_fn(backbone(data), label)`."""

    def __init__(self, backbone, loss_fn):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._loss_fn = loss_fn

    @property
    def backbone_network(self) -> Cell:
        """The network wrapped (MindSpore's property)."""
        return self._backbone

    def construct(self, data, label):
        return self._loss_fn(self._backbone(data), label)


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

    def construct(self, *inputs):
        loss, grads = self.grad_fn(*inputs)
        if self.scaled:
            grads = tuple(g * self.sens for g in grads)
        self.optimizer(grads)
        if self.return_grad:
            return loss, grads
        return loss


def _check_inputs(name: str, args: tuple) -> None:
    if len(args) < 2:
        raise KTransformError(f"{name}(network)(*inputs, v): give the inputs and v")


class Jvp(Cell):
    """MindSpore's `nn.Jvp(network)(*inputs, v) -> (output, J v)`: `v` is the
    tangent of the one input, or a tuple of tangents, one per input."""

    def __init__(self, fn):
        super().__init__()
        object.__setattr__(self, "fn", fn)

    def __call__(self, *args):
        _check_inputs("nn.Jvp", args)
        return super().__call__(*args)

    def construct(self, *args):
        if len(args) == 2:
            return jvp(self.fn, args[0], args[1])
        return jvp(self.fn, args[:-1], args[-1])


class Vjp(Cell):
    """MindSpore's `nn.Vjp(network)(*inputs, v) -> (output, gradients)`: the
    inputs' gradients for the output sensitivity `v`, bare for one input
    (MindSpore 2.10's structure), a tuple for several."""

    def __init__(self, fn):
        super().__init__()
        object.__setattr__(self, "fn", fn)

    def __call__(self, *args):
        _check_inputs("nn.Vjp", args)
        return super().__call__(*args)

    def construct(self, *args):
        out, vjp_fn = vjp(self.fn, *args[:-1])
        grads = vjp_fn(args[-1])
        if len(args) == 2:
            return out, grads[0]
        return out, grads
