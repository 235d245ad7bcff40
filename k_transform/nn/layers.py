"""Layers: Dense, Conv2d, pooling, BatchNorm2d, Embedding, activations,
Flatten, Dropout, LayerNorm, containers. Images are NCHW, as in MindSpore.

`self.training` (set by `cell.set_train(True/False)`) is a static flag: the
parser folds `if self.training:` when it builds a gradient function, so a
gradient function (or `kt.jit(TrainOneStepCell(...))`) built in training mode
stays in training mode. Build a fresh one after `set_train(False)` (calling
the Cell directly, `net(x)`, always reads the current flag).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import ops
from k_transform.cell import Cell, Parameter
from k_transform.ops.state import Assign

ASSIGN = Assign()


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


class Conv2d(Cell):
    """2-D convolution of NCHW images; weight (out, in / group, kh, kw), He-uniform.

    `pad_mode`: "same" (output size ceil(H / stride)), "valid" (no padding),
    or "pad" (`padding`: an int, (ph, pw) or ((top, bottom), (left, right))).
    """

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        pad_mode="same",
        padding=0,
        dilation=1,
        group=1,
        has_bias=False,
        seed=0,
    ):
        super().__init__()
        kh, kw = ops.conv.pair(kernel_size)
        fan_in = in_channels // group * kh * kw
        shape = (out_channels, in_channels // group, kh, kw)
        self.weight = Parameter(_init(shape, fan_in, seed))
        self.has_bias = has_bias
        if has_bias:
            self.bias = Parameter(np.zeros(out_channels, np.float32))
        if pad_mode not in ("same", "valid", "pad"):
            raise ValueError(f"pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")
        pads = padding if pad_mode == "pad" else pad_mode.upper()
        self.conv = ops.Conv2D(stride, pads, dilation, group)

    def construct(self, x):
        y = self.conv(x, self.weight)
        if self.has_bias:
            y = y + jnp.reshape(self.bias, (1, -1, 1, 1))
        return y


class MaxPool2d(Cell):
    """Max over kernel_size windows of NCHW images (`pad_mode` "valid" or "same")."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid"):
        super().__init__()
        self.pool = ops.MaxPool(kernel_size, stride, pad_mode.upper())

    def construct(self, x):
        return self.pool(x)


class AvgPool2d(Cell):
    """Mean over kernel_size windows of NCHW images (`pad_mode` "valid" or "same";
    padded entries count as zeros)."""

    def __init__(self, kernel_size=1, stride=1, pad_mode="valid"):
        super().__init__()
        self.pool = ops.AvgPool(kernel_size, stride, pad_mode.upper())

    def construct(self, x):
        return self.pool(x)


class BatchNorm2d(Cell):
    """Batch normalisation over (N, H, W) per channel of NCHW images.

    Training (`set_train(True)`): normalises with the batch statistics and
    updates `moving_mean` / `moving_variance` (Parameters with
    requires_grad=False) as `moving = momentum * moving + (1 - momentum) *
    batch`, the variance unbiased (n / (n - 1)). Eval: uses the moving
    statistics. The mode is fixed when a gradient function is built (see the
    module docstring).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.9):
        super().__init__()
        self.gamma = Parameter(np.ones(num_features, np.float32))
        self.beta = Parameter(np.zeros(num_features, np.float32))
        self.moving_mean = Parameter(np.zeros(num_features, np.float32), requires_grad=False)
        self.moving_variance = Parameter(np.ones(num_features, np.float32), requires_grad=False)
        self.eps = eps
        self.momentum = momentum
        self.batch_norm = ops.BatchNorm(eps)

    def construct(self, x):
        if self.training:
            y, mean, var = self.batch_norm(x, self.gamma, self.beta)
            n = jnp.size(x) // jnp.shape(x)[1]
            m = self.momentum
            new_mean = self.moving_mean * m + mean * (1.0 - m)
            new_var = self.moving_variance * m + var * (n / (n - 1) * (1.0 - m))
            ASSIGN(self.moving_mean, new_mean)
            ASSIGN(self.moving_variance, new_var)
            return y
        scale = self.gamma * jax.lax.rsqrt(self.moving_variance + self.eps)
        shift = self.beta - self.moving_mean * scale
        return x * jnp.reshape(scale, (1, -1, 1, 1)) + jnp.reshape(shift, (1, -1, 1, 1))


class Embedding(Cell):
    """`table[ids]`: rows of a (vocab_size, embedding_size) table (normal(0, 1)
    initial values), gradient scatter-added into the rows looked up."""

    def __init__(self, vocab_size, embedding_size, seed=0):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.embedding_table = Parameter(
            rng.normal(0.0, 1.0, (vocab_size, embedding_size)).astype(np.float32)
        )

    def construct(self, ids):
        return jnp.take(self.embedding_table, ids, axis=0)


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
