"""Layers: Dense, activations, Flatten, Dropout, LayerNorm, containers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter


def _init(shape, fan_in: int, seed: int):
    """He-uniform initial values (deterministic per seed)."""
    bound = np.sqrt(6.0 / max(fan_in, 1))
    return np.random.RandomState(seed).uniform(-bound, bound, size=shape).astype(np.float32)


class Dense(Cell):
    """`x @ weight + bias` (weight stored as (in, out)), optional activation Cell."""

    def __init__(self, in_channels, out_channels, has_bias=True, activation=None, seed=0):
        super().__init__()
        self.weight = Parameter(_init((in_channels, out_channels), in_channels, seed))
        self.has_bias = has_bias
        if has_bias:
            self.bias = Parameter(np.zeros(out_channels, np.float32))
        self.activation = activation

    def construct(self, x):
        y = x @ self.weight
        if self.has_bias:
            y = y + self.bias
        if self.activation is not None:
            y = self.activation(y)
        return y


class ReLU(Cell):
    def construct(self, x):
        return jax.nn.relu(x)


class GELU(Cell):
    def construct(self, x):
        return jax.nn.gelu(x)


class Tanh(Cell):
    def construct(self, x):
        return jnp.tanh(x)


class Sigmoid(Cell):
    def construct(self, x):
        return jax.nn.sigmoid(x)


class Flatten(Cell):
    """(N, ...) -> (N, prod(...))."""

    def construct(self, x):
        return jnp.reshape(x, (x.shape[0], -1))


class Dropout(Cell):
    """Zeroes inputs with probability `1 - keep_prob` in training; identity in eval.

    Randomness is explicit: pass a `jax.random` key as the second argument.
    """

    def __init__(self, keep_prob=0.5):
        super().__init__()
        self.keep_prob = keep_prob

    def construct(self, x, key):
        if not self.training or self.keep_prob >= 1.0:
            return x
        keep = jax.random.bernoulli(key, self.keep_prob, jnp.shape(x))
        return jnp.where(keep, x / self.keep_prob, 0.0)


class LayerNorm(Cell):
    """Normalise over the last axis, then scale by gamma and shift by beta."""

    def __init__(self, normalized_shape, epsilon=1e-5):
        super().__init__()
        shape = (
            tuple(normalized_shape)
            if isinstance(normalized_shape, (tuple, list))
            else (normalized_shape,)
        )
        self.gamma = Parameter(np.ones(shape, np.float32))
        self.beta = Parameter(np.zeros(shape, np.float32))
        self.epsilon = epsilon

    def construct(self, x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        centred = x - mean
        var = jnp.mean(centred * centred, axis=-1, keepdims=True)
        return centred / jnp.sqrt(var + self.epsilon) * self.gamma + self.beta


class SequentialCell(Cell):
    """Cells applied in order (the loop is unrolled at transform time)."""

    def __init__(self, *cells):
        super().__init__()
        if len(cells) == 1 and isinstance(cells[0], (list, tuple)):
            cells = tuple(cells[0])
        for k, cell in enumerate(cells):
            setattr(self, str(k), cell)
        self.cell_list = tuple(cells)

    def construct(self, x):
        for cell in self.cell_list:
            x = cell(x)
        return x

    def __getitem__(self, index):
        return self.cell_list[index]

    def __len__(self):
        return len(self.cell_list)


class CellList(Cell):
    """A list of Cells to iterate over in `construct` (unrolled at transform time)."""

    def __init__(self, cells=()):
        super().__init__()
        self.cell_list = ()
        for cell in cells:
            self.append(cell)

    def append(self, cell) -> None:
        setattr(self, str(len(self.cell_list)), cell)
        object.__setattr__(self, "cell_list", (*self.cell_list, cell))

    def __getitem__(self, index):
        return self.cell_list[index]

    def __iter__(self):
        return iter(self.cell_list)

    def __len__(self):
        return len(self.cell_list)
