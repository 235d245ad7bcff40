"""A Cell's method reading its Parameters through `trainable_params()` (an
L2 penalty, a MindSpore idiom): the list is read while parsing and the graph
is guarded by what it read, so freezing a Parameter (`requires_grad =
False`) is seen by the next call. Oracle: JAX on the same loss written with
arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.mindspore import Tensor, nn

W = np.array([[0.7, -0.6, 0.2]], np.float32)
B = np.array([0.5], np.float32)
X = jnp.array([[0.3, -0.7, 1.1]])
Y = jnp.array([[1.0]])


class L2Loss(nn.Cell):
    def __init__(self, net, listing):
        super().__init__()
        self.net = net
        self.listing = listing

    def construct(self, x, y):
        fit = ((self.net(x) - y) ** 2).mean()
        params = getattr(self.net, self.listing)()
        return fit + 0.1 * sum((p**2).sum() for p in params)


def reference(w, b, with_bias=True):
    penalty = jnp.sum(w**2) + (jnp.sum(b**2) if with_bias else 0.0)
    return jnp.mean((X @ w.T + b - Y) ** 2) + 0.1 * penalty


@pytest.mark.parametrize("listing", ["trainable_params", "get_parameters"])
def test_l2_penalty_over_the_cells_parameters(mode, listing):
    dense = nn.Dense(3, 1, weight_init=Tensor(W), bias_init=Tensor(B))
    loss = L2Loss(dense, listing)
    grads = kt.GradOperation(get_by_list=True)(loss, kt.ParameterTuple(loss.trainable_params()))
    want = jax.grad(reference, argnums=(0, 1))(jnp.array(W), jnp.array(B))
    for got, w in zip(grads(X, Y), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5)


def test_freezing_a_parameter_is_seen_by_the_next_call(mode):
    dense = nn.Dense(3, 1, weight_init=Tensor(W), bias_init=Tensor(B))
    loss = L2Loss(dense, "trainable_params")
    weights = kt.ParameterTuple([dense.weight])
    grads = kt.GradOperation(get_by_list=True)(loss, weights)
    np.testing.assert_allclose(loss(X, Y), reference(jnp.array(W), jnp.array(B)), rtol=1e-6)
    grads(X, Y)
    dense.bias.requires_grad = False  # out of the penalty from now on
    np.testing.assert_allclose(loss(X, Y), reference(W, B, with_bias=False), rtol=1e-6)
    want = jax.grad(reference)(jnp.array(W), jnp.array(B), False)
    np.testing.assert_allclose(grads(X, Y)[0], want, rtol=1e-5)
