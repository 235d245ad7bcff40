"""Layers: Dense, Conv2d, pooling, BatchNorm2d, Embedding, activations,
Flatten, Dropout, LayerNorm, containers (Conv1d, BatchNorm1d and
AdaptiveAvgPool2d are in `layers_extra`). Images are NCHW, as in MindSpore.

`self.training` (set by `cell.set_train(True/False)`) is a static flag: the
parser folds `if self.training:` when it builds a gradient function, so a
gradient function (or `kt.jit(TrainOneStepCell(...))`) built in training mode
stays in training mode. Build a fresh one after `set_train(False)` (calling
the Cell directly, `net(x)`, always reads the current flag).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import ops
from k_transform.cell import Cell, Parameter
from k_transform.common import initializer as init
from k_transform.common.seed import generator
from k_transform.ops.state import Assign

ASSIGN = Assign()

# MindSpore's default weight initializer for Dense and Conv2d: HeUniform with
# negative_slope sqrt(5), i.e. uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)].
DEFAULT_WEIGHT = init.HeUniform(negative_slope=math.sqrt(5))


def _values(how, shape, seed, dtype=np.float32):
    """Initial values: `how` is a name, an Initializer, a number or an array."""
    return init.initializer(how, shape, dtype, seed)


def _default_bias(fan_in: int):
    """MindSpore's default bias: uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)]."""
    return init.Uniform(1.0 / math.sqrt(max(fan_in, 1)))


def _plus(seed, k):
    return None if seed is None else seed + k


def _weight_and_bias(cell, shape, fan_in, has_bias, weight_init, bias_init, seed, dtype):
    """`cell.weight` of `shape` and, with `has_bias`, `cell.bias` of shape
    (cell.out_channels,); MindSpore's defaults: both uniform on
    +-1/sqrt(fan_in). The bias is drawn from `seed + 1`."""
    weight_init = DEFAULT_WEIGHT if weight_init is None else weight_init
    cell.weight = Parameter(_values(weight_init, shape, seed, dtype))
    cell.has_bias = has_bias
    if has_bias:
        bias_init = _default_bias(fan_in) if bias_init is None else bias_init
        cell.bias = Parameter(_values(bias_init, (cell.out_channels,), _plus(seed, 1), dtype))


def get_activation(activation):
    """A Cell for `activation`: None, a Cell, or one of MindSpore's names."""
    if activation is None or isinstance(activation, Cell):
        return activation
    if isinstance(activation, str) and activation.lower() in ACTIVATIONS:
        return ACTIVATIONS[activation.lower()]()
    known = sorted(ACTIVATIONS)
    raise ValueError(f"activation must be a Cell or one of {known}, not {activation!r}")


class Dense(Cell):
    """`activation(x @ weight.T + bias)`, MindSpore's layout: weight (out, in).

    `weight_init` / `bias_init`: a name ("normal", "he_uniform", "zeros", ...),
    an initializer (`kt.common.initializer.Normal(0.02)`), a number or an
    array; by default MindSpore's (both uniform on +-1/sqrt(in_channels)).
    `activation`: a Cell or a name ("relu", "tanh", "gelu", "sigmoid").
    `seed` (k_transform's): draw this layer's values from that seed.
    """

    def __init__(
        self,
        in_channels,
        out_channels,
        weight_init=None,
        bias_init=None,
        has_bias=True,
        activation=None,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        shape = (out_channels, in_channels)
        _weight_and_bias(self, shape, in_channels, has_bias, weight_init, bias_init, seed, dtype)
        self.activation = get_activation(activation)
        self.activation_flag = self.activation is not None

    def construct(self, x):
        y = jnp.matmul(x, jnp.transpose(self.weight))
        if self.has_bias:
            y = y + self.bias
        if self.activation_flag:
            y = self.activation(y)
        return y


def _conv_padding(pad_mode, padding):
    """The `ops.Conv2D` padding for MindSpore's `pad_mode` and `padding` (an
    int, or (top, bottom, left, right); k_transform also takes (ph, pw) and
    ((top, bottom), (left, right)))."""
    if pad_mode not in ("same", "valid", "pad"):
        raise ValueError(f"pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")
    if pad_mode != "pad":
        if padding not in (0, (0, 0, 0, 0)):
            raise ValueError(f"padding must be 0 when pad_mode is {pad_mode!r}, got {padding!r}")
        return pad_mode.upper()
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        top, bottom, left, right = padding
        return ((top, bottom), (left, right))
    return padding


class Conv2d(Cell):
    """2-D convolution of NCHW images; weight (out, in / group, kh, kw).

    MindSpore's signature and defaults: `pad_mode="same"` (output size
    ceil(H / stride)), "valid" (no padding) or "pad" (`padding`: an int or
    (top, bottom, left, right)); `has_bias=False`; `weight_init` / `bias_init`
    as `Dense` (default uniform on +-1/sqrt(fan_in)); `seed` as `Dense`.
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
        weight_init=None,
        bias_init=None,
        data_format="NCHW",
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        if data_format != "NCHW":
            raise ValueError(f"Conv2d supports data_format='NCHW' only, got {data_format!r}")
        kh, kw = ops.conv.pair(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (kh, kw)
        self.pad_mode, self.padding = pad_mode, padding
        shape = (out_channels, in_channels // group, kh, kw)
        fan_in = in_channels // group * kh * kw
        _weight_and_bias(self, shape, fan_in, has_bias, weight_init, bias_init, seed, dtype)
        self.conv = ops.Conv2D(stride, _conv_padding(pad_mode, padding), dilation, group)

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

    With batch statistics, normalises with the batch's mean and variance and
    updates `moving_mean` / `moving_variance` (Parameters with
    requires_grad=False) as `moving = momentum * moving + (1 - momentum) *
    batch`, the variance unbiased (n / (n - 1)); otherwise uses the moving
    statistics. `use_batch_statistics`, as MindSpore: None (the default)
    means batch statistics in training (`set_train(True)`) and moving ones in
    eval; True or False fixes it. `affine=False` keeps gamma 1 and beta 0
    untrained. The mode is fixed when a gradient function is built (see the
    module docstring).
    """

    def __init__(
        self,
        num_features,
        eps=1e-5,
        momentum=0.9,
        affine=True,
        gamma_init="ones",
        beta_init="zeros",
        moving_mean_init="zeros",
        moving_var_init="ones",
        use_batch_statistics=None,
        data_format="NCHW",
        dtype=np.float32,
    ):
        super().__init__()
        if data_format != "NCHW":
            raise ValueError(f"BatchNorm2d supports data_format='NCHW' only, got {data_format!r}")
        shape = (num_features,)
        self.gamma = Parameter(_values(gamma_init, shape, None, dtype), requires_grad=affine)
        self.beta = Parameter(_values(beta_init, shape, None, dtype), requires_grad=affine)
        self.moving_mean = Parameter(
            _values(moving_mean_init, shape, None, dtype), requires_grad=False
        )
        self.moving_variance = Parameter(
            _values(moving_var_init, shape, None, dtype), requires_grad=False
        )
        self.eps = eps
        self.momentum = momentum
        self.use_batch_statistics = use_batch_statistics
        self.batch_norm = ops.BatchNorm(eps)

    def construct(self, x):
        if self.use_batch_statistics is None:
            if self.training:
                return self.normalise_with_batch(x)
            return self.normalise_with_moving(x)
        if self.use_batch_statistics:
            return self.normalise_with_batch(x)
        return self.normalise_with_moving(x)

    def normalise_with_batch(self, x):
        y, mean, var = self.batch_norm(x, self.gamma, self.beta)
        n = jnp.size(x) // jnp.shape(x)[1]
        m = self.momentum
        new_mean = self.moving_mean * m + mean * (1.0 - m)
        new_var = self.moving_variance * m + var * (n / (n - 1) * (1.0 - m))
        ASSIGN(self.moving_mean, new_mean)
        ASSIGN(self.moving_variance, new_var)
        return y

    def normalise_with_moving(self, x):
        scale = self.gamma * jax.lax.rsqrt(self.moving_variance + self.eps)
        shift = self.beta - self.moving_mean * scale
        return x * jnp.reshape(scale, (1, -1, 1, 1)) + jnp.reshape(shift, (1, -1, 1, 1))


class Embedding(Cell):
    """`table[ids]`: rows of a (vocab_size, embedding_size) table, gradient
    scatter-added into the rows looked up. `embedding_table` initialises the
    table as `Dense`'s `weight_init` ("normal" by default: sigma 0.01, as
    MindSpore); the row `padding_idx` starts at zero. `use_one_hot` (a
    one-hot matmul in MindSpore) computes the same lookup."""

    def __init__(
        self,
        vocab_size,
        embedding_size,
        use_one_hot=False,
        embedding_table="normal",
        dtype=np.float32,
        padding_idx=None,
        seed=None,
    ):
        super().__init__()
        shape = (vocab_size, embedding_size)
        table = np.array(_values(embedding_table, shape, seed, dtype))
        if padding_idx is not None:
            table[padding_idx] = 0
        self.use_one_hot, self.padding_idx = use_one_hot, padding_idx
        self.embedding_table = Parameter(table)

    def construct(self, ids):
        return jnp.take(self.embedding_table, ids, axis=0)


class ReLU(Cell):
    def construct(self, x):
        return jax.nn.relu(x)


class GELU(Cell):
    """MindSpore's GELU: the tanh approximation unless `approximate=False`."""

    def __init__(self, approximate=True):
        super().__init__()
        self.approximate = approximate

    def construct(self, x):
        return jax.nn.gelu(x, approximate=self.approximate)


class Tanh(Cell):
    def construct(self, x):
        return jnp.tanh(x)


class Sigmoid(Cell):
    def construct(self, x):
        return jax.nn.sigmoid(x)


class Softmax(Cell):
    """softmax over `axis` (default -1, as MindSpore's `nn.Softmax`)."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return jax.nn.softmax(x, axis=self.axis)


class LogSoftmax(Cell):
    """log(softmax) over `axis` (default -1), computed stably."""

    def __init__(self, axis=-1):
        super().__init__()
        self.axis = axis

    def construct(self, x):
        return jax.nn.log_softmax(x, axis=self.axis)


class LeakyReLU(Cell):
    """`x` where x > 0, else `alpha * x` (MindSpore's: so alpha > 1 scales the
    negatives, not a max)."""

    def __init__(self, alpha=0.2):
        super().__init__()
        self.alpha = alpha

    def construct(self, x):
        return jnp.where(x > 0, x, x * self.alpha)


class ELU(Cell):
    """`x` where x > 0, else `alpha * (exp(x) - 1)`. (MindSpore 2.10's Elu
    kernel refuses an alpha other than 1.0; this takes any.)"""

    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def construct(self, x):
        negative = jnp.expm1(jnp.minimum(x, 0.0)) * self.alpha  # no exp of large x
        return jnp.where(x > 0, x, negative)


class SiLU(Cell):
    """`x * sigmoid(x)`."""

    def __init__(self):
        super().__init__()

    def construct(self, x):
        return x * jax.nn.sigmoid(x)


class Softplus(Cell):
    """`log(1 + exp(beta * x)) / beta`, and `x` where `beta * x > threshold`:
    `mindspore.ops.softplus(x, beta=1, threshold=20)` as a Cell (MindSpore 2.10
    has no `nn.Softplus`)."""

    def __init__(self, beta=1, threshold=20):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def construct(self, x):
        scaled = x * self.beta
        smooth = jnp.log1p(jnp.exp(jnp.minimum(scaled, self.threshold))) / self.beta
        return jnp.where(scaled > self.threshold, x, smooth)


class PReLU(Cell):
    """`x` where x > 0, else `w * x`, with a trainable slope per channel (axis
    1 of x; `channel=1`: one slope for all). `w`: a float, a list of
    `channel` floats or an array. As MindSpore, the Parameter is the
    attribute `w` named "a"."""

    def __init__(self, channel=1, w=0.25):
        super().__init__()
        slopes = np.broadcast_to(np.asarray(w, np.float32), (channel,))
        self.w = Parameter(np.array(slopes), "a")

    def construct(self, x):
        w = self.w
        if jnp.ndim(x) >= 2:
            w = jnp.reshape(w, (-1,) + (1,) * (jnp.ndim(x) - 2))  # along axis 1
        return jnp.where(x > 0, x, x * w)


class Flatten(Cell):
    """The axes from `start_dim` to `end_dim` flattened into one (MindSpore's
    defaults: (N, ...) -> (N, prod(...)))."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def construct(self, x):
        shape = jnp.shape(x)
        start = self.start_dim + len(shape) if self.start_dim < 0 else self.start_dim
        end = self.end_dim + len(shape) if self.end_dim < 0 else self.end_dim
        return jnp.reshape(x, (*shape[:start], -1, *shape[end + 1 :]))


class Dropout(Cell):
    """Zeroes inputs with probability `p` in training and scales the rest by
    1 / (1 - p); identity in eval. `Dropout(p=0.2)` as MindSpore 2.x;
    `keep_prob` (= 1 - p, the first positional argument, default 0.5) is
    MindSpore's deprecated spelling and is used only when `p` is None.

    `dropout(x)` draws its mask from the Cell's own key, a non-trainable
    Parameter (`self.key`, seeded from `kt.set_seed`'s generator or `seed=`)
    that each training call splits and advances with `ops.Assign`, so calls
    draw different masks eagerly, under `kt.jit` and inside training steps
    (the new key is state written back after the call). `dropout(x, key)`
    uses the `jax.random` key given instead and leaves the state alone.
    As MindSpore's Dropout has no Parameter, the key is not one of the
    Cell's (`get_parameters()`, checkpoints): it is held outside them.
    """

    def __init__(self, keep_prob=0.5, p=None, dtype=np.float32, seed=None):
        super().__init__()
        if p is not None:
            if not 0.0 <= p < 1.0:
                raise ValueError(f"Dropout p must be in [0, 1), got {p}")
            keep_prob = 1.0 - p
        elif not 0.0 < keep_prob <= 1.0:
            raise ValueError(f"Dropout keep_prob must be in (0, 1], got {keep_prob}")
        self.p = p
        self.keep_prob = keep_prob
        seed = int(generator().randint(2**31)) if seed is None else int(seed)
        key = Parameter(np.asarray(jax.random.PRNGKey(seed)), "dropout_key", requires_grad=False)
        object.__setattr__(self, "key", key)  # state, not one of the Cell's Parameters

    def construct(self, x, key=None):
        if not self.training or self.keep_prob >= 1.0:
            return x
        if key is None:
            keys = jax.random.split(jnp.asarray(self.key))
            ASSIGN(self.key, keys[0])
            key = keys[1]
        keep = jax.random.bernoulli(key, self.keep_prob, jnp.shape(x))
        return jnp.where(keep, x / self.keep_prob, 0.0)


class LayerNorm(Cell):
    """MindSpore's LayerNorm: normalise over the axes from `begin_norm_axis`
    to the last (mean and biased variance), then scale by gamma and shift by
    beta, of shape `normalized_shape`, laid over the axes from
    `begin_params_axis` (MindSpore's defaults: both -1, `epsilon` 1e-7)."""

    def __init__(
        self,
        normalized_shape,
        begin_norm_axis=-1,
        begin_params_axis=-1,
        gamma_init="ones",
        beta_init="zeros",
        epsilon=1e-7,
        dtype=np.float32,
    ):
        super().__init__()
        shape = (
            tuple(normalized_shape)
            if isinstance(normalized_shape, (tuple, list))
            else (normalized_shape,)
        )
        self.gamma = Parameter(_values(gamma_init, shape, None, dtype))
        self.beta = Parameter(_values(beta_init, shape, None, dtype))
        self.begin_norm_axis = begin_norm_axis
        self.begin_params_axis = begin_params_axis
        self.epsilon = epsilon

    def construct(self, x):
        axes = _axes_from(self.begin_norm_axis, jnp.ndim(x))
        mean = jnp.mean(x, axis=axes, keepdims=True)
        centred = x - mean
        var = jnp.mean(centred * centred, axis=axes, keepdims=True)
        params_rank = jnp.ndim(x) - _axes_from(self.begin_params_axis, jnp.ndim(x))[0]
        gamma = jnp.reshape(self.gamma, jnp.shape(x)[jnp.ndim(x) - params_rank :])
        beta = jnp.reshape(self.beta, jnp.shape(x)[jnp.ndim(x) - params_rank :])
        return centred / jnp.sqrt(var + self.epsilon) * gamma + beta


def _axes_from(begin: int, ndim: int) -> tuple:
    """The axes from `begin` (negative: from the end) to the last."""
    first = begin + ndim if begin < 0 else begin
    return tuple(range(first, ndim))


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


ACTIVATIONS = {
    "relu": ReLU,
    "gelu": GELU,
    "tanh": Tanh,
    "sigmoid": Sigmoid,
    "softmax": Softmax,
    "logsoftmax": LogSoftmax,
    "leakyrelu": LeakyReLU,
    "elu": ELU,
    "silu": SiLU,
    "prelu": PReLU,
}
