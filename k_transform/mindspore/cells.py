"""MindSpore 2.10's `nn.GroupNorm` and `nn.LSTMCell`, as `kt.nn` layers are
written: a Cell whose `construct` is Python over `jax.numpy`, differentiated
like user code. Parameters and their names are MindSpore's.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter
from k_transform.common import initializer as init
from k_transform.nn.recurrent import lstm_step


class GroupNorm(Cell):
    """Normalise each of `num_groups` groups of channels (axis 1) over its
    channels and the spatial axes (mean, biased variance, `eps`), then scale
    by `gamma` and shift by `beta`, one per channel."""

    def __init__(
        self,
        num_groups,
        num_channels,
        eps=1e-05,
        affine=True,
        gamma_init="ones",
        beta_init="zeros",
        dtype=np.float32,
    ):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(
                f"num_channels {num_channels} is not divisible by num_groups {num_groups}"
            )
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups,
            num_channels,
            eps,
            affine,
        )
        self.gamma = Parameter(
            init.initializer(gamma_init, (num_channels,), dtype), requires_grad=affine
        )
        self.beta = Parameter(
            init.initializer(beta_init, (num_channels,), dtype), requires_grad=affine
        )

    def construct(self, x):
        shape = jnp.shape(x)
        grouped = jnp.reshape(x, (shape[0], self.num_groups, -1))
        mean = jnp.mean(grouped, axis=2, keepdims=True)
        var = jnp.mean(jnp.square(grouped - mean), axis=2, keepdims=True)
        normed = jnp.reshape((grouped - mean) / jnp.sqrt(var + self.eps), shape)
        channel = (1, self.num_channels) + (1,) * (len(shape) - 2)
        return normed * jnp.reshape(self.gamma, channel) + jnp.reshape(self.beta, channel)


class LSTMCell(Cell):
    """One LSTM step: `(h, c) = cell(x, (h, c))`, gates i, f, g, o (MindSpore's
    order) from `x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh`;
    every Parameter uniform on +-1/sqrt(hidden_size)."""

    def __init__(self, input_size: int, hidden_size: int, has_bias: bool = True, dtype=np.float32):
        super().__init__()
        self.input_size, self.hidden_size, self.has_bias = input_size, hidden_size, has_bias
        uniform = init.Uniform(1 / math.sqrt(hidden_size))
        gates = 4 * hidden_size
        self.weight_ih = Parameter(
            init.initializer(uniform, (gates, input_size), dtype), "weight_ih"
        )
        self.weight_hh = Parameter(
            init.initializer(uniform, (gates, hidden_size), dtype), "weight_hh"
        )
        if has_bias:
            self.bias_ih = Parameter(init.initializer(uniform, (gates,), dtype), "bias_ih")
            self.bias_hh = Parameter(init.initializer(uniform, (gates,), dtype), "bias_hh")

    def construct(self, x, hx):
        if self.has_bias:
            return lstm_step(x, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return lstm_step(x, hx, self.weight_ih, self.weight_hh, None, None)
