"""One process of a two-process data-parallel training, written as MindSpore code.

tests/test_data_parallel.py starts two of these (the job in MindSpore's
dynamic-cluster variables: MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM,
MS_NODE_ID) and imports this module for the single-process oracle: the
same `train` on the whole batch, without `init()`. Each process

1. joins the job (`init()`) and sets DATA_PARALLEL;
2. trains on its own half of the batch with `gradients_mean=True`,
   `TrainOneStepCell` under `ms.jit` (one compiled step per call);
3. in PYNATIVE mode (run op by op), reduces rank-dependent gradients with
   `nn.DistributedGradReducer`, as a mean and as a sum;
4. prints one line `RESULT <json>`: its rank, the group size, the losses of
   its shard, the final Parameters and the reduced gradients.
"""

from __future__ import annotations

import json

import numpy as np

import k_transform.mindspore as ms
from k_transform.mindspore import nn
from k_transform.mindspore.communication import get_group_size, get_rank, init

BATCH, N_IN, N_HIDDEN, N_OUT = 8, 4, 6, 2
STEPS = 3
LR, MOMENTUM = 0.1, 0.9


def initial_weights() -> dict[str, np.ndarray]:
    """The same starting point in every process (MindSpore layouts: (out, in))."""
    rng = np.random.RandomState(0)
    return {
        "fc1.weight": (rng.randn(N_HIDDEN, N_IN) * 0.5).astype(np.float32),
        "fc1.bias": (rng.randn(N_HIDDEN) * 0.1).astype(np.float32),
        "fc2.weight": (rng.randn(N_OUT, N_HIDDEN) * 0.5).astype(np.float32),
        "fc2.bias": (rng.randn(N_OUT) * 0.1).astype(np.float32),
    }


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(1)
    x = rng.randn(BATCH, N_IN).astype(np.float32)
    y = rng.randn(BATCH, N_OUT).astype(np.float32)
    return x, y


class Net(nn.Cell):
    def __init__(self, w):
        super().__init__()
        self.fc1 = nn.Dense(N_IN, N_HIDDEN, weight_init=w["fc1.weight"], bias_init=w["fc1.bias"])
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(N_HIDDEN, N_OUT, weight_init=w["fc2.weight"], bias_init=w["fc2.bias"])

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def train(x, y, jitted: bool, lr: float = LR):
    """`STEPS` Momentum steps of `TrainOneStepCell(WithLossCell(net, MSELoss))`:
    (losses, {name: final value})."""
    net = Net(initial_weights())
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=MOMENTUM)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    step.set_train()
    if jitted:
        step = ms.jit(step)
    losses = [float(step(ms.Tensor(x), ms.Tensor(y))) for _ in range(STEPS)]
    params = {p.name: np.asarray(p.data).tolist() for p in net.trainable_params()}
    return losses, params


def main() -> None:
    init()
    rank, size = get_rank(), get_group_size()
    shard = slice(rank * BATCH // size, (rank + 1) * BATCH // size)
    x, y = batch()
    x, y = x[shard], y[shard]
    result = {"rank": rank, "size": size}

    ms.set_auto_parallel_context(
        parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True, device_num=size
    )
    result["losses"], result["params"] = train(x, y, jitted=True)

    ms.set_context(mode=ms.PYNATIVE_MODE)
    grads = (ms.Tensor(np.full((2, 3), rank + 1.0, np.float32)), ms.Tensor(np.float32(rank)))
    params = nn.Dense(3, 2).trainable_params()
    for mean in (True, False):
        reduced = nn.DistributedGradReducer(params, mean=mean)(grads)
        result[f"reduced_mean_{mean}"] = [np.asarray(g).tolist() for g in reduced]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
