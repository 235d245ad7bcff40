"""`W.data` in code run as Python (session 30's leftover): MindSpore's
`.data` is the Parameter itself, but ours returned the stored array, so a
gradient through it was a silent zero ([0 0] for [1 2]). `.data` is now the
Parameter's value where the program runs: traced in a gradient, refused by
name in code run as Python under JAX's tracer, as `W` itself is."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform import nn, ops
from k_transform.cell import Parameter

W = Parameter(np.array([1.0, 2.0]), name="w_data")


def host_reads_data(x):
    try:  # (run as Python: k_transform does not parse try)
        y = x * W.data
    except ValueError:
        y = x
    return ops.reduce_sum(y * y)


def test_data_in_code_run_as_python_is_refused_not_zero():
    x = jnp.asarray([1.0, 2.0])
    with pytest.raises(kt.KTransformError, match="reads the Parameter 'w_data'"):
        ms.grad(host_reads_data, None, [W])(x)


class DataNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(np.array([0.5, -1.5, 2.0]), name="w")

    def construct(self, x):
        return ops.reduce_sum(jnp.sin(x * self.w.data) * self.w.data.T)


def test_data_is_the_parameter_in_a_gradient():
    net, x = DataNet(), jnp.asarray([1.0, 2.0, 3.0])
    want = jax.grad(lambda w: jnp.sum(jnp.sin(x * w) * w))(net.w.stored)
    got = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))(x)
    np.testing.assert_allclose(got[0], want, rtol=1e-6)


def test_data_outside_a_program_is_the_stored_array():
    p = Parameter(np.array([3.0, 4.0]), name="p")
    assert isinstance(p.data, jax.Array)
    np.testing.assert_array_equal(p.data, [3.0, 4.0])
    p.set_data(p.data * 2)
    np.testing.assert_array_equal(p.stored, [6.0, 8.0])
