"""Helpers shared by the tests of MindSpore 2.10's layers and defaults
(tests/test_ms_layers.py, tests/test_ms_seq_layers.py,
tests/test_ms_dropin_defaults.py): comparison, signatures as lists, the
closed forms more than one of them needs, and the optimizers' fixed steps."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import numpy as np

import k_transform as kt


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def f32(a):
    return jnp.asarray(np.asarray(a, np.float32))


def listed(fn) -> list[tuple[str, object]]:
    """`fn`'s parameters but `self` as (name, default), "-" for none and
    "float32" for np.float32: the form of the MindSpore lists in the tests."""

    def plain(default):
        if default is inspect.Parameter.empty:
            return "-"
        return "float32" if default is np.float32 else default

    params = inspect.signature(fn).parameters.values()
    return [(p.name, plain(p.default)) for p in params if p.name != "self"]


# MindSpore 2.10's nn.Conv1d.__init__, as `inspect.signature` printed it
# (Conv2dTranspose's is this with ("output_padding", 0) after "padding")
CONV1D_SIGNATURE = [
    ("in_channels", "-"),
    ("out_channels", "-"),
    ("kernel_size", "-"),
    ("stride", 1),
    ("pad_mode", "same"),
    ("padding", 0),
    ("dilation", 1),
    ("group", 1),
    ("has_bias", False),
    ("weight_init", None),
    ("bias_init", None),
    ("dtype", "float32"),
]


def sigmoid(x):
    return 1 / (1 + jnp.exp(-x))


def layer_norm(x, axes, gamma, beta, eps):
    """(x - mean) / sqrt(var + eps) * gamma + beta over `axes`."""
    mean = jnp.mean(x, axes, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axes, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * gamma + beta


# -- optimizers: three steps on fixed gradients ---------------------------------------------
GRADS = ([0.3, -0.2, 0.1], [-0.5, 0.4, 0.05], [0.01, 0.02, -0.3])
START = [1.0, -2.0, 0.5]


def three_steps(make, name="w", jit=False):
    """The Parameter `name` (START) after `make([it])` stepped on GRADS; and the optimizer."""
    w = kt.Parameter(np.array(START, np.float32), name=name)
    opt = make([w])
    step = kt.jit(opt) if jit else opt
    for g in GRADS:
        step((f32(g),))
    return w.data, opt
