"""A gradient object made by code run as Python and called in a differentiated
program (a user's thin wrapper over `kt.grad`, as autograd's shims are).

It reaches the program as a value at run time: its graph is differentiated,
as where the parser meets one. k_transform's own `__call__` was parsed as a
user's Cell method where the object's attributes held a Parameter (the error
named `self._arities` in k_transform/reverse.py: which tests ran before in
the same process decided it); one whose graph reads Parameters is refused
with the user's line (their gradients would not leave a library call).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn
from k_transform.frontend import callables

NET = nn.Dense(3, 3)
X = jnp.array([[0.1, 0.2, -0.3], [0.5, -0.4, 0.25]])


def users_grad(f, argnum=0):
    """A user's JAX-style wrapper over our API (runs as Python)."""
    return kt.grad(f, grad_position=argnum)


def free(a, b):
    return jnp.sum(jnp.sin(a) * b + a * b**2)


def with_free(x):
    g = users_grad(free, 1)(x, jnp.cos(x))
    return jnp.sum(g * x)


def jax_with_free(x):
    g = jax.grad(free, argnums=1)(x, jnp.cos(x))
    return jnp.sum(g * x)


def test_a_gradient_objects_call_is_never_parsed_as_a_users_method():
    grad_fn = kt.grad(free)
    grad_fn.holder = NET  # its attributes reach a Parameter
    assert callables.user_call_method(grad_fn) is None
    assert callables.user_call_method(kt.jit(free)) is None


def test_a_gradient_object_made_at_run_time_differentiates_again():
    want = jax.grad(jax_with_free)(X)
    np.testing.assert_allclose(kt.grad(with_free)(X), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kt.jit(kt.grad(with_free))(X), want, rtol=1e-5, atol=1e-6)
    v = jnp.array([[1.0, -0.5, 0.25], [0.0, 2.0, 1.0]])
    want = jax.grad(lambda x: jnp.sum(jax.grad(jax_with_free)(x) * v))(X)
    got = kt.grad(lambda x: jnp.sum(kt.grad(with_free)(x) * v))(X)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def reads_the_net(a, b):
    return jnp.sum(NET(a) * b)


def with_the_net(x):
    g = users_grad(reads_the_net, 1)(x, x * 2.0)
    return jnp.sum(g * x)


class Loss(nn.Cell):
    def construct(self, x):
        return with_the_net(x)


def test_a_gradient_object_reading_parameters_is_refused_with_the_users_line():
    """Its weights' gradients would not leave the call (a silent zero): refused."""
    with pytest.raises(kt.KTransformError, match="reads the Parameter 'weight'") as info:
        kt.GradOperation(get_by_list=True)(Loss(), kt.ParameterTuple(NET.trainable_params()))(X)
    assert "users_grad(reads_the_net, 1)(x, x * 2.0)" in str(info.value)
    assert "_arities" not in str(info.value)
