"""Training wrappers (`WithLossCell`, `TrainOneStepCell`) and MindSpore's
`nn.Jvp` / `nn.Vjp` Cells. As in MindSpore, the training wrappers are built
with `auto_prefix=False`: wrapping a network does not rename its Parameters
(`fc1.weight` stays `fc1.weight`, so checkpoints of the network and of the
wrapped network agree). Their attributes are MindSpore's (`WithLossCell`'s
`_backbone` and `_loss_fn`), so a Cell that wraps them with its own prefix
names Parameters as MindSpore does: `network._backbone.fc1.weight`.

Data parallelism (MindSpore's DATA_PARALLEL): `data_parallel` is the setting
`mindspore.set_auto_parallel_context` writes; a `TrainOneStepCell` built
while it is on passes its gradients through a `DistributedGradReducer`
before the optimizer. The reducer's `AllReduceSum` is the one place
gradients cross processes: each process (`jax.distributed`, one rank per
process) computes the gradients of its own shard of the batch, the sum over
all processes comes back to each (`jax.experimental.multihost_utils.
process_allgather`, from inside a compiled step through an ordered
`io_callback`), and with `gradients_mean` it is divided by the number of
processes, so every process applies the same update to the same Parameters."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import io_callback, multihost_utils

from k_transform.cell import Cell, ParameterTuple
from k_transform.errors import KTransformError
from k_transform.forward_api import jvp
from k_transform.ir.primitive import Primitive
from k_transform.reverse import GradOperation, value_and_grad, vjp

WORLD_GROUPS = ("hccl_world_group", "nccl_world_group", "mccl_world_group")


class DataParallel:
    """Whether a `TrainOneStepCell` built now all-reduces its gradients
    (`on`), whether it divides the sum by `degree` (`mean`), and `degree`
    (None: the number of processes). A user setting, written by
    `mindspore.set_auto_parallel_context` (MindSpore reads it when the Cell
    is built, so does k_transform)."""

    def __init__(self):
        self.on = False
        self.mean = False
        self.degree: int | None = None


data_parallel = DataParallel()


def _sum_over_processes(grads):
    """Each array of `grads` summed over all processes (run on the host)."""
    gathered = multihost_utils.process_allgather(tuple(np.asarray(g) for g in grads))
    return tuple(
        np.asarray(g).sum(axis=0).astype(np.asarray(d).dtype)
        for g, d in zip(gathered, grads, strict=True)
    )


class AllReduceSum(Primitive):
    """`AllReduceSum()(grads)`: the tuple `grads`, each array summed over all
    processes (MindSpore's `AllReduce(ReduceOp.SUM)` fused over a tuple). One
    process: `grads` itself. In a compiled program it is an ordered
    `io_callback`, so every process's step waits for the others' gradients."""

    effectful = True  # a collective: kept in program order, never merged or dropped

    def impl(self, grads):
        grads = tuple(grads)
        if jax.process_count() == 1 or not grads:
            return grads
        if any(isinstance(g, jax.core.Tracer) for g in grads):
            shapes = tuple(jax.ShapeDtypeStruct(g.shape, g.dtype) for g in grads)
            return io_callback(_sum_over_processes, shapes, grads, ordered=True)
        return tuple(jax.numpy.asarray(g) for g in _sum_over_processes(grads))


class DistributedGradReducer(Cell):
    """MindSpore's `nn.DistributedGradReducer(parameters, mean=None,
    degree=None, fusion_type=1, group=...)`: `reducer(grads)` is each
    gradient summed over the processes, divided by `degree` when `mean`.
    `mean=None` reads `gradients_mean` of the parallel context, `degree=None`
    is the number of processes; only the world group exists."""

    def __init__(self, parameters, mean=None, degree=None, fusion_type=1, group=WORLD_GROUPS[0]):
        super().__init__(auto_prefix=False)
        if group not in WORLD_GROUPS:
            raise ValueError(
                f"DistributedGradReducer: group {group!r} is not the world group; "
                "k_transform reduces over all processes only"
            )
        if degree is None:
            degree = jax.process_count()
        if not isinstance(degree, int) or isinstance(degree, bool) or degree <= 0:
            raise ValueError(
                f"DistributedGradReducer: degree must be a positive int, not {degree!r}"
            )
        self.mean = data_parallel.mean if mean is None else bool(mean)
        self.degree = degree
        self.scale = 1.0 / degree
        self.all_reduce = AllReduceSum()

    def construct(self, grads):
        summed = self.all_reduce(grads)
        if self.mean:
            return tuple(g * self.scale for g in summed)
        return summed


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

    Built under MindSpore's DATA_PARALLEL (`data_parallel.on`), it sums the
    gradients over the processes (`DistributedGradReducer`, the mean with
    `gradients_mean`) before the optimizer; each process feeds its own shard
    of the batch and returns its own shard's loss.

    `sens` (MindSpore's): the sensitivity the backward pass starts from, so
    the gradients are `sens` times the loss's (a loss scale; pair it with the
    optimizer's `loss_scale`); None means 1. `return_grad=True` returns
    `(loss, {Parameter name: gradient})`, as MindSpore does.
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
        # MindSpore's, which subclasses' `construct` use: `self.grad(self.network,
        # weights)(*inputs, sens)` and `self.grad_reducer(grads)`
        object.__setattr__(self, "grad", GradOperation(get_by_list=True, sens_param=True))
        self.weights_name = tuple(p.name for p in optimizer.parameters)
        self.reducer_flag = data_parallel.on
        if self.reducer_flag and data_parallel.degree not in (None, jax.process_count()):
            raise ValueError(
                f"TrainOneStepCell: device_num={data_parallel.degree}, but there are "
                f"{jax.process_count()} processes (k_transform's data parallelism has one "
                "rank per process: call mindspore.communication.init() in each)"
            )
        if self.reducer_flag:
            self.grad_reducer = DistributedGradReducer(
                self.weights, data_parallel.mean, data_parallel.degree
            )
        else:
            object.__setattr__(self, "grad_reducer", _identity)  # MindSpore's F.identity

    def construct(self, *inputs):
        loss, grads = self.grad_fn(*inputs)
        if self.scaled:
            grads = tuple(g * self.sens for g in grads)
        if self.reducer_flag:
            grads = self.grad_reducer(grads)
        self.optimizer(grads)
        if self.return_grad:  # MindSpore's: the gradients by their Parameters' names
            by_name = {}
            for k in range(len(grads)):
                by_name[self.weights_name[k]] = grads[k]
            return loss, by_name
        return loss


def _identity(grads):
    return grads


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
