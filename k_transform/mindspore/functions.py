"""MindSpore 2.10's functional ops that are compositions: `ops.ones`,
`ops.cat`, `ops.topk`, `ops.relu6`, `ops.cross_entropy`, ...

Each is a plain Python function over `jax.numpy`, with MindSpore's signature
(`inspect.signature` there) and MindSpore's values and dtypes (checked on
MindSpore 2.10, PYNATIVE_MODE). Not library code: in a transformed function
the parser reads each like user code, so its gradient is the composition's,
from the rules of the `jnp` calls it makes; no gradient is written here.
Where MindSpore's derivative at a kink differs from the obvious `jnp`
program's, the composition is chosen to give MindSpore's (`relu6` at 6,
`hardswish` at +-3, `l1_loss` at 0; each says so).

Integer results are JAX's default int (`int`): int64 where JAX has 64-bit
types enabled, int32 otherwise (MindSpore's `arange`, `one_hot` and `full`
of integers give int64; its `topk`, `sort` and `argsort` indices are int32).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from k_transform.cell import Cell

# -- tensor creation (MindSpore's float default is float32)


def _shape(shape) -> tuple:
    return tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)


def ones(shape, dtype=None):
    return jnp.ones(_shape(shape), jnp.float32 if dtype is None else dtype)


def zeros(size, dtype=None):
    return jnp.zeros(_shape(size), jnp.float32 if dtype is None else dtype)


def full(size, fill_value, *, dtype=None):
    """MindSpore 2.10 gives int64 for a Python number (`full((2,), 3.0)` is
    `[3, 3]`, int64): kept, as its programs see it."""
    return jnp.full(_shape(size), fill_value, int if dtype is None else dtype)


def full_like(input, fill_value, *, dtype=None):  # noqa: A002 - MindSpore's names
    return jnp.full(
        jnp.shape(input), fill_value, jnp.result_type(input) if dtype is None else dtype
    )


def fill(type, shape, value):  # noqa: A002
    return jnp.full(_shape(shape), value, type)


def eye(n, m=None, dtype=None):
    return jnp.eye(n, m, dtype=jnp.float32 if dtype is None else dtype)


def arange(start=0, end=None, step=1, *, dtype=None):
    """Integers (JAX's default int) when every bound is an int, else float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = jnp.issubdtype(jnp.result_type(start, end, step), jnp.integer)
        dtype = int if ints else jnp.float32
    return jnp.arange(start, end, step, dtype=dtype)


def linspace(start, end, steps):
    return jnp.linspace(start, end, steps, dtype=jnp.float32)


# -- shapes


def cat(tensors, axis=0):
    return jnp.concatenate(tensors, axis)


def flatten(input, order="C", *, start_dim=1, end_dim=-1):  # noqa: A002
    """MindSpore's default keeps the first axis (`start_dim=1`); a 0-d or 1-d
    input keeps its shape."""
    shape = jnp.shape(input)
    if len(shape) <= 1:
        return input
    if order == "F":
        input = jnp.transpose(input)
    start, end = start_dim % len(shape), end_dim % len(shape)
    merged = 1
    for size in shape[start : end + 1]:
        merged *= size
    return jnp.reshape(input, (*shape[:start], merged, *shape[end + 1 :]))


def split(tensor, split_size_or_sections, axis=0):
    """An int is each part's size (the last one shorter), a list the sizes."""
    length = jnp.shape(tensor)[axis]
    if isinstance(split_size_or_sections, (tuple, list)):
        sizes = list(split_size_or_sections)
    else:
        sizes = [split_size_or_sections] * (length // split_size_or_sections)
        if length % split_size_or_sections:
            sizes.append(length % split_size_or_sections)
    ends, at = [], 0
    for size in sizes[:-1]:
        at += size
        ends.append(at)
    return tuple(jnp.split(tensor, ends, axis))


def chunk(input, chunks, axis=0):  # noqa: A002
    """Parts of `ceil(length / chunks)` (so possibly fewer than `chunks`)."""
    length = jnp.shape(input)[axis]
    return split(input, -(-length // chunks), axis)


def unbind(input, dim=0):  # noqa: A002
    return tuple(jnp.moveaxis(input, dim, 0))


def unsqueeze(input, dim):  # noqa: A002
    return jnp.expand_dims(input, dim)


def permute(input, axis):  # noqa: A002
    return jnp.transpose(input, axis)


def swapaxes(input, axis0, axis1):  # noqa: A002
    return jnp.swapaxes(input, axis0, axis1)


def flip(input, dims):  # noqa: A002
    return jnp.flip(input, dims)


def narrow(input, axis, start, length):  # noqa: A002
    return jax.lax.slice_in_dim(input, start, start + length, axis=axis)


def roll(input, shifts, dims=None):  # noqa: A002
    """`shifts` along `dims` (an int each, or sequences of one length);
    `dims` None rolls the flattened input by one shift, shape restored."""
    if dims is None:
        if isinstance(shifts, (tuple, list)):
            if len(shifts) != 1:
                raise ValueError(f"ops.roll: without `dims`, `shifts` must be one shift: {shifts}")
            shifts = shifts[0]
        return jnp.roll(input, shifts)
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise ValueError(f"ops.roll: `shifts` {shifts} and `dims` {dims} differ in length")
    return jnp.roll(input, shifts, dims)


def ravel(input):  # noqa: A002
    return jnp.ravel(input)


def repeat_interleave(input, repeats, axis=None):  # noqa: A002
    return jnp.repeat(input, repeats, axis)


def index_select(input, axis, index):  # noqa: A002
    return jnp.take(input, index, axis=axis)


def gather_elements(input, dim, index):  # noqa: A002
    return jnp.take_along_axis(input, index, axis=dim)


def masked_fill(input_x, mask, value):
    return jnp.where(mask, value, input_x)


def one_hot(indices, depth, on_value=1, off_value=0, axis=-1):
    """`on_value` where the index is, `off_value` elsewhere (an index out of
    range gives a row of `off_value`); the dtype is the values' (Python ints:
    JAX's default int, as MindSpore's int64)."""
    dtype = jnp.result_type(on_value, off_value)
    if not hasattr(on_value, "dtype") and not hasattr(off_value, "dtype"):
        dtype = int if jnp.issubdtype(dtype, jnp.integer) else jnp.float32
    hot = jax.nn.one_hot(indices, depth, axis=axis, dtype=jnp.bool_)
    return jnp.where(hot, jnp.asarray(on_value, dtype), jnp.asarray(off_value, dtype))


def pad(input_x, padding, mode="constant", value=None):
    """`padding` pairs (before, after) from the last axis backwards
    (MindSpore's and PyTorch's order); modes constant, reflect, replicate,
    circular."""
    pairs = [(0, 0)] * jnp.ndim(input_x)
    for k in range(len(padding) // 2):
        pairs[-1 - k] = (padding[2 * k], padding[2 * k + 1])
    if mode == "constant":
        return jnp.pad(input_x, pairs, constant_values=0 if value is None else value)
    return jnp.pad(
        input_x, pairs, mode={"reflect": "reflect", "replicate": "edge"}.get(mode, "wrap")
    )


# -- elementwise and comparisons


def subtract(input, other, *, alpha=1):  # noqa: A002
    return input - alpha * other


def multiply(input, other):  # noqa: A002
    return input * other


def divide(input, other, *, rounding_mode=None):  # noqa: A002
    if rounding_mode == "floor":
        return jnp.floor_divide(input, other)
    if rounding_mode == "trunc":
        return jnp.trunc(input / other)
    return jnp.true_divide(input, other)


def true_divide(dividend, divisor):
    return jnp.true_divide(dividend, divisor)


def negative(input):  # noqa: A002
    return jnp.negative(input)


def floor_divide(input, other):  # noqa: A002
    return jnp.floor_divide(input, other)


def remainder(input, other):  # noqa: A002
    return jnp.remainder(input, other)


def floor_mod(input, other):  # noqa: A002 - the remainder with the divisor's sign
    return jnp.remainder(input, other)


def fmod(input, other):  # noqa: A002 - the remainder with the dividend's sign (C's)
    return jnp.fmod(input, other)


def round(input, *, decimals=0):  # noqa: A001, A002 - MindSpore's name: half to even
    return jnp.round(input, decimals)


def lt(input, other):  # noqa: A002
    return jnp.less(input, other)


def gt(input, other):  # noqa: A002
    return jnp.greater(input, other)


def le(input, other):  # noqa: A002
    return jnp.less_equal(input, other)


def ge(input, other):  # noqa: A002
    return jnp.greater_equal(input, other)


def eq(input, other):  # noqa: A002
    return jnp.equal(input, other)


def ne(input, other):  # noqa: A002
    return jnp.not_equal(input, other)


def isnan(input):  # noqa: A002
    return jnp.isnan(input)


def isinf(input):  # noqa: A002
    return jnp.isinf(input)


def isfinite(input):  # noqa: A002
    return jnp.isfinite(input)


def logical_and(input, other):  # noqa: A002
    return jnp.logical_and(input, other)


def logical_or(input, other):  # noqa: A002
    return jnp.logical_or(input, other)


def logical_not(input):  # noqa: A002
    return jnp.logical_not(input)


def depend(value, expr):
    """`value`: the order `expr` should run in is the program's here."""
    return value


# -- activations (MindSpore's derivatives at the kinks, from MindSpore 2.10)


def relu6(x):
    """Derivative 0 at 0 and 1 at 6 (MindSpore's)."""
    return jnp.where(x <= 6, jnp.where(x > 0, x, 0.0), 6.0)


def _clip_inclusive(x, low, high):
    """clip(x, low, high) whose derivative is 1 at both bounds."""
    return jnp.where(x < low, low, jnp.where(x > high, high, x))


def hardswish(input):  # noqa: A002
    """Derivative (2x + 3) / 6 on [-3, 3], bounds included (MindSpore's)."""
    return input * _clip_inclusive(input + 3.0, 0.0, 6.0) / 6.0


def hardsigmoid(input):  # noqa: A002
    """Derivative 1/6 on (-3, 3), 0 at the bounds (MindSpore's)."""
    return jnp.where(input <= -3.0, 0.0, jnp.where(input >= 3.0, 1.0, input / 6.0 + 0.5))


def leaky_relu(input, alpha=0.2):  # noqa: A002
    """max(alpha x, x) (min for alpha > 1): at 0 the derivative is (1 + alpha) / 2."""
    pick = jnp.maximum if alpha <= 1 else jnp.minimum
    return pick(alpha * input, input)


def elu(input_x, alpha=1.0):
    return jnp.where(input_x > 0, input_x, alpha * jnp.expm1(input_x))


def selu(input_x):
    """The positive branch at 0 (derivative `scale`, MindSpore's)."""
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return scale * jnp.where(input_x < 0, alpha * jnp.expm1(input_x), input_x)


def silu(input):  # noqa: A002
    return input * jax.nn.sigmoid(input)


def gelu(input, approximate="none"):  # noqa: A002
    return jax.nn.gelu(input, approximate=approximate == "tanh")


def softplus(input, beta=1, threshold=20):  # noqa: A002
    """log(1 + exp(beta x)) / beta, and x where beta x > threshold."""
    scaled = input * beta
    return jnp.where(scaled > threshold, input, jnp.logaddexp(scaled, 0.0) / beta)


def mish(x):
    return x * jnp.tanh(jnp.logaddexp(x, 0.0))


def logsigmoid(x):
    return jax.nn.log_sigmoid(x)


def softsign(x):
    return x / (1.0 + jnp.abs(x))


# -- reductions


def max(input, axis=None, keepdims=False, *, initial=None, where=None):  # noqa: A001, A002
    """With `axis`: (values, indices), the first index of a tie, which gets
    the whole gradient; without: the maximum, its gradient shared by ties
    (MindSpore's both)."""
    if axis is None:
        return jnp.max(input, initial=initial, where=where)
    index = jnp.argmax(input, axis, keepdims=True)
    values = jnp.take_along_axis(input, index, axis)
    if not keepdims:
        values, index = jnp.squeeze(values, axis), jnp.squeeze(index, axis)
    return values, index


def min(input, axis=None, keepdims=False, *, initial=None, where=None):  # noqa: A001, A002
    """As `max`."""
    if axis is None:
        return jnp.min(input, initial=initial, where=where)
    index = jnp.argmin(input, axis, keepdims=True)
    values = jnp.take_along_axis(input, index, axis)
    if not keepdims:
        values, index = jnp.squeeze(values, axis), jnp.squeeze(index, axis)
    return values, index


def std(input, axis=None, ddof=0, keepdims=False):  # noqa: A002
    return jnp.std(input, axis, ddof=ddof, keepdims=keepdims)


def var(input, axis=None, ddof=0, keepdims=False):  # noqa: A002
    return jnp.var(input, axis, ddof=ddof, keepdims=keepdims)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):  # noqa: A002, N803
    """`torch.linalg.norm`'s meaning: no `ord` and no `dim` is the 2-norm of
    all entries; a number `ord` without `dim`, a vector or matrix norm."""
    A = A if dtype is None else A.astype(dtype)
    if ord is None and dim is None:
        value = jnp.sqrt(jnp.sum(A * A))
        return jnp.reshape(value, (1,) * jnp.ndim(A)) if keepdim else value
    return jnp.linalg.norm(A, ord, dim, keepdim)


def cumprod(input, dim, dtype=None):  # noqa: A002
    """JAX's gradient, finite where an entry is 0 (MindSpore 2.10 gives NaN there)."""
    return jnp.cumprod(input if dtype is None else input.astype(dtype), dim)


def all(input, axis=None, keep_dims=False):  # noqa: A001, A002
    return jnp.all(input, axis, keepdims=keep_dims)


def any(input, axis=None, keep_dims=False):  # noqa: A001, A002
    return jnp.any(input, axis, keepdims=keep_dims)


# -- sorting


def topk(input, k, dim=None, largest=True, sorted=True):  # noqa: A002
    """(values, int32 indices) along `dim` (default the last); ties take the
    lower index first and the gradient goes to the indices taken."""
    axis = -1 if dim is None else dim
    moved = jnp.moveaxis(input, axis, -1)
    values, index = jax.lax.top_k(moved if largest else -moved, k)
    values = values if largest else -values
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(index, -1, axis)


def sort(input_x, axis=-1, descending=False):
    """(values, int32 indices), stable in both directions."""
    index = argsort(input_x, axis, descending)
    return jnp.take_along_axis(input_x, index, axis), index


def argsort(input, axis=-1, descending=False):  # noqa: A002
    return jnp.argsort(input, axis, stable=True, descending=descending).astype(jnp.int32)


# -- clipping


def clip_by_value(x, clip_value_min=None, clip_value_max=None):
    """min(max(x, low), high), on a tensor or each of a tuple or list: at a
    bound the derivative is 1/2 (MindSpore's maximum and minimum share ties)."""
    if isinstance(x, (tuple, list)):
        return type(x)([clip_by_value(t, clip_value_min, clip_value_max) for t in x])
    if clip_value_min is not None:
        x = jnp.maximum(x, clip_value_min)
    if clip_value_max is not None:
        x = jnp.minimum(x, clip_value_max)
    return x


def _global_norm(xs):
    return jnp.sqrt(sum([jnp.sum(jnp.square(t)) for t in xs]))


def clip_by_global_norm(x, clip_norm=1.0, use_norm=None):
    """Each of `x` times clip_norm / max(global norm, clip_norm); the gradient
    flows through the norm too (MindSpore's)."""
    if use_norm is not None:
        raise ValueError("ops.clip_by_global_norm: `use_norm` only supports None (MindSpore's)")
    scale = clip_norm / jnp.maximum(_global_norm(x), clip_norm)
    return type(x)([t * scale for t in x])


def clip_by_norm(x, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scaled by min(1, max_norm / (norm + 1e-6)); a tuple or list by its global norm."""
    many = isinstance(x, (tuple, list))
    xs = x if many else (x,)
    if norm_type == 2.0:
        total = _global_norm(xs)
    else:
        total = jnp.sum(jnp.stack([jnp.sum(jnp.abs(t) ** norm_type) for t in xs])) ** (
            1 / norm_type
        )
    scale = jnp.minimum(max_norm / (total + 1e-6), 1.0)
    return type(x)([t * scale for t in xs]) if many else x * scale


# -- losses (`reduction`: "mean", "sum" or "none")


def _reduce(loss, reduction):
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    return loss


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction="mean"):  # noqa: A002
    """-(pos_weight t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), weighted."""
    log_p, log_not_p = jax.nn.log_sigmoid(input), jax.nn.log_sigmoid(-input)
    positive = target * log_p if pos_weight is None else pos_weight * target * log_p
    loss = -(positive + (1 - target) * log_not_p)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy(logits, labels, weight=None, reduction="mean"):
    """On probabilities `logits` (MindSpore's name)."""
    loss = -(labels * jnp.log(logits) + (1 - labels) * jnp.log(1 - logits))
    return _reduce(loss if weight is None else loss * weight, reduction)


def _nll(log_probs, target, weight, ignore_index, reduction, label_smoothing):
    """PyTorch's (and MindSpore's) weighted negative log-likelihood with label
    smoothing over classes on axis 1; "mean" divides by the targets' weights."""
    classes = jnp.shape(log_probs)[1]
    w = jnp.ones((classes,), log_probs.dtype) if weight is None else weight
    keep = target != ignore_index
    safe = jnp.where(keep, target, 0)
    picked = jnp.squeeze(jnp.take_along_axis(log_probs, jnp.expand_dims(safe, 1), 1), 1)
    w_target = jnp.where(keep, w[safe], 0.0)
    loss = -picked * w_target
    shape = [1] * jnp.ndim(log_probs)
    shape[1] = classes
    smooth = -jnp.sum(log_probs * jnp.reshape(w, shape), axis=1) * keep
    if reduction == "mean":
        total = jnp.sum(w_target)
        return (1 - label_smoothing) * jnp.sum(loss) / total + label_smoothing * jnp.sum(
            smooth
        ) / classes / total
    combined = (1 - label_smoothing) * loss + label_smoothing * smooth / classes
    return jnp.sum(combined) if reduction == "sum" else combined


def nll_loss(inputs, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    return _nll(inputs, target, weight, ignore_index, reduction, label_smoothing)


def cross_entropy(
    input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0
):  # noqa: A002
    """Class indices, or class probabilities (`target` shaped as `input`)."""
    log_probs = jax.nn.log_softmax(input, axis=1)
    if jnp.issubdtype(target.dtype, jnp.integer):
        return _nll(log_probs, target, weight, ignore_index, reduction, label_smoothing)
    classes = jnp.shape(input)[1]
    target = target * (1 - label_smoothing) + label_smoothing / classes
    if weight is not None:
        shape = [1] * jnp.ndim(input)
        shape[1] = classes
        log_probs = log_probs * jnp.reshape(weight, shape)
    loss = -jnp.sum(log_probs * target, axis=1)
    if reduction == "mean":
        return jnp.sum(loss) / (jnp.size(loss) if jnp.ndim(loss) else 1)
    return _reduce(loss, reduction)


def mse_loss(input, target, reduction="mean"):  # noqa: A002
    return _reduce(jnp.square(input - target), reduction)


def _abs_zero_at_zero(d):
    """|d| with derivative 0 at 0 (MindSpore's `Abs`)."""
    return d * jnp.sign(d)


def l1_loss(input, target, reduction="mean"):  # noqa: A002
    """Derivative 0 where input == target (MindSpore's)."""
    return _reduce(_abs_zero_at_zero(input - target), reduction)


def smooth_l1_loss(input, target, beta=1.0, reduction="none"):  # noqa: A002
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (the linear piece
    at |d| == beta, as MindSpore)."""
    d = input - target
    size = _abs_zero_at_zero(d)
    return _reduce(jnp.where(size < beta, 0.5 * d * d / beta, size - 0.5 * beta), reduction)


def kl_div(logits, labels, reduction="mean"):
    """labels * (log labels - logits); no gradient to `labels` (MindSpore's)."""
    labels = jax.lax.stop_gradient(labels)
    loss = jax.scipy.special.xlogy(labels, labels) - labels * logits
    if reduction == "batchmean":
        return jnp.sum(loss) / jnp.shape(logits)[0]
    return _reduce(loss, reduction)


def cosine_similarity(x1, x2, dim=1, eps=1e-08):
    dot = jnp.sum(x1 * x2, axis=dim)
    norms = jnp.sqrt(jnp.sum(x1 * x1, axis=dim) * jnp.sum(x2 * x2, axis=dim))
    return dot / jnp.maximum(norms, eps)


def dense(input, weight, bias=None):  # noqa: A002
    out = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


class CumSum(Cell):
    """`ops.CumSum(exclusive=False, reverse=False)(x, axis)`: a Cell, so a
    transformed function may make it where it calls it, as MindSpore's
    primitives are."""

    def __init__(self, exclusive=False, reverse=False):
        super().__init__()
        self.exclusive, self.reverse = exclusive, reverse

    def construct(self, x, axis):
        x = jnp.flip(x, axis) if self.reverse else x
        out = jnp.cumsum(x, axis)
        if self.exclusive:
            out = out - x
        return jnp.flip(out, axis) if self.reverse else out
