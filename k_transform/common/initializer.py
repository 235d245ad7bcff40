"""Initial values of Parameters, as `mindspore.common.initializer`.

`initializer(init, shape, dtype)` returns a numpy array for `init`:

- a string, MindSpore's names: "normal" (sigma 0.01), "uniform" (scale 0.07),
  "truncatednormal", "xavier_uniform", "xavier_normal", "he_uniform",
  "he_normal", "zeros"/"zero", "ones"/"one";
- an `Initializer` object: `Normal(sigma=0.01, mean=0.0)`, `Uniform(scale=0.07)`,
  `TruncatedNormal(sigma=0.01)`, `XavierUniform(gain=1)`, `XavierNormal(gain=1)`,
  `HeUniform(negative_slope=0, mode="fan_in", nonlinearity="leaky_relu")`,
  `HeNormal(...)`, `Zero()`, `One()`, `Constant(value)`;
- a number (every entry that value) or an array of exactly `shape`.

Fans follow MindSpore (and PyTorch): for a shape (out, in, *kernel), fan_in =
in * prod(kernel), fan_out = out * prod(kernel); a Dense weight is (out, in).
Random values come from one numpy generator (`common/seed.py`), reseeded by
`set_seed(seed)` (MindSpore's `ms.set_seed`), so a script that seeds builds the same network
each run; the values differ from MindSpore's own generator.
"""

from __future__ import annotations

import math

import numpy as np

from k_transform.common.seed import generator as _rng


def fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of `shape`, MindSpore's convention."""
    shape = tuple(shape)
    if len(shape) < 2:
        n = shape[0] if shape else 1
        return n, n
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _gain(nonlinearity: str, slope: float) -> float:
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    return 1.0  # linear, sigmoid, conv


class Initializer:
    """Base class: `__call__(shape, rng=None)` returns float64 values of `shape`
    drawn from `rng` (default: the generator `set_seed` seeds)."""

    def __call__(self, shape, rng=None) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Normal(Initializer):
    def __init__(self, sigma=0.01, mean=0.0):
        self.sigma, self.mean = sigma, mean

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        return rng.normal(self.mean, self.sigma, shape)


class TruncatedNormal(Initializer):
    """Normal(mean, sigma) redrawn outside [a, b] (MindSpore's bounds, absolute)."""

    def __init__(self, sigma=0.01, mean=0.0, a=-2.0, b=2.0):
        self.sigma, self.mean, self.a, self.b = sigma, mean, a, b

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        values = rng.normal(self.mean, self.sigma, shape)
        bad = (values < self.a) | (values > self.b)
        while np.any(bad):
            values[bad] = rng.normal(self.mean, self.sigma, int(bad.sum()))
            bad = (values < self.a) | (values > self.b)
        return values


class Uniform(Initializer):
    """Uniform on [-scale, scale]."""

    def __init__(self, scale=0.07):
        self.scale = scale

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        return rng.uniform(-self.scale, self.scale, shape)


class XavierUniform(Initializer):
    """Uniform on [-b, b], b = gain * sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, gain=1):
        self.gain = gain

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        fan_in, fan_out = fans(shape)
        bound = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-bound, bound, shape)


class XavierNormal(Initializer):
    """Normal(0, gain * sqrt(2 / (fan_in + fan_out)))."""

    def __init__(self, gain=1):
        self.gain = gain

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        fan_in, fan_out = fans(shape)
        return rng.normal(0.0, self.gain * math.sqrt(2.0 / (fan_in + fan_out)), shape)


class HeUniform(Initializer):
    """Uniform on [-b, b], b = gain * sqrt(3 / fan), gain from `nonlinearity`
    (leaky_relu: sqrt(2 / (1 + negative_slope ** 2)))."""

    def __init__(self, negative_slope=0, mode="fan_in", nonlinearity="leaky_relu"):
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity

    def _std(self, shape) -> float:
        fan_in, fan_out = fans(shape)
        fan = fan_in if self.mode == "fan_in" else fan_out
        return _gain(self.nonlinearity, self.negative_slope) / math.sqrt(fan)

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        bound = math.sqrt(3.0) * self._std(shape)
        return rng.uniform(-bound, bound, shape)


class HeNormal(HeUniform):
    """Normal(0, gain / sqrt(fan))."""

    def __call__(self, shape, rng=None):
        rng = rng or _rng()
        return rng.normal(0.0, self._std(shape), shape)


class Constant(Initializer):
    def __init__(self, value):
        self.value = value

    def __call__(self, shape, rng=None):
        return np.full(shape, self.value, np.float64)


class Zero(Constant):
    def __init__(self):
        super().__init__(0.0)


class One(Constant):
    def __init__(self):
        super().__init__(1.0)


ALIASES = {
    "normal": Normal,
    "uniform": Uniform,
    "truncatednormal": TruncatedNormal,
    "xavier_uniform": XavierUniform,
    "xavieruniform": XavierUniform,
    "xavier_normal": XavierNormal,
    "xaviernormal": XavierNormal,
    "he_uniform": HeUniform,
    "heuniform": HeUniform,
    "he_normal": HeNormal,
    "henormal": HeNormal,
    "zeros": Zero,
    "zero": Zero,
    "ones": One,
    "one": One,
}


def initializer(init, shape=None, dtype=np.float32, seed: int | None = None) -> np.ndarray:
    """Values of `shape` and `dtype` for `init` (a name, an Initializer, a
    number or an array of exactly `shape`). `seed` (k_transform's, not
    MindSpore's): draw from a generator of that seed instead of the global one."""
    if isinstance(init, str):
        if init.lower() not in ALIASES:
            raise ValueError(f"unknown initializer {init!r}; known: {sorted(ALIASES)}")
        init = ALIASES[init.lower()]()
    if isinstance(init, Initializer):
        rng = None if seed is None else np.random.RandomState(seed)
        return np.asarray(init(tuple(shape), rng), dtype=dtype)
    if isinstance(init, (bool, int, float)):
        return np.full(shape, init, dtype=dtype)
    values = np.asarray(init, dtype=dtype)
    if shape is not None and values.shape != tuple(shape):
        raise ValueError(f"initial values of shape {values.shape}, expected {tuple(shape)}")
    return values
