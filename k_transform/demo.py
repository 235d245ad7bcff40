"""`make demo`, part 1: train a two-layer MLP Cell with gradients from
k_transform (part 2, run by the Makefile, is examples/lenet_mindspore.py: a
MindSpore LeNet-5 script run with only its imports changed).

Generated data: a noisy smooth function of 4 inputs. `GradOperation(get_by_list=True)`
gives the gradients of the loss w.r.t. the Cell's Parameters; plain SGD
updates them with `set_data`. The loss falls; the generated fprop/bprop of the
loss is printed at the end.
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

import k_transform as kt


class Dense(kt.Cell):
    def __init__(self, n_in: int, n_out: int, rng: np.random.RandomState):
        super().__init__()
        scale = np.sqrt(2.0 / (n_in + n_out))
        self.weight = kt.Parameter((rng.randn(n_in, n_out) * scale).astype(np.float32))
        self.bias = kt.Parameter(np.zeros(n_out, np.float32))

    def construct(self, x):
        return x @ self.weight + self.bias


class MLP(kt.Cell):
    def __init__(self, rng: np.random.RandomState):
        super().__init__()
        self.hidden = Dense(4, 32, rng)
        self.out = Dense(32, 1, rng)

    def construct(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


class MSELossNet(kt.Cell):
    """The network with its loss: mean squared error."""

    def __init__(self, net: kt.Cell):
        super().__init__()
        self.net = net

    def construct(self, x, y):
        diff = self.net(x)[:, 0] - y
        return jnp.sum(diff * diff) / diff.shape[0]


def make_data(rng: np.random.RandomState, n: int = 512):
    x = rng.uniform(-1.0, 1.0, size=(n, 4)).astype(np.float32)
    y = np.sin(2.0 * x[:, 0]) + x[:, 1] * x[:, 2] - 0.5 * x[:, 3] ** 2
    y = (y + 0.05 * rng.randn(n)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


def main(steps: int = 400, lr: float = 0.3) -> None:
    rng = np.random.RandomState(0)
    x, y = make_data(rng)
    loss_net = MSELossNet(MLP(rng))
    params = kt.ParameterTuple(loss_net.trainable_params())
    grad_fn = kt.GradOperation(get_by_list=True)(loss_net, params)
    loss_fn = kt.compile(loss_net)
    print(f"training a 4-32-1 MLP on {x.shape[0]} samples; parameters: {[p.name for p in params]}")
    start = time.perf_counter()
    for step in range(steps + 1):
        grads = grad_fn(x, y)
        if step % 50 == 0:
            print(f"step {step:4d}  loss {float(loss_fn(x, y)):.5f}")
        for p, g in zip(params, grads, strict=True):
            p.set_data(p.data - lr * g)
    print(f"{steps} SGD steps in {time.perf_counter() - start:.2f} s")
    print("\nGenerated fprop/bprop of the loss (kt.get_source(grad_fn)):\n")
    print(kt.get_source(grad_fn))


if __name__ == "__main__":
    main()
