"""A closure rebinding its function's variables (`nonlocal`) called where
the parser cannot thread the update (a comprehension, a generator
expression, a lambda): the function runs as Python, exactly. A dict
comprehension was not among those places: the update was lost, a wrong
value and gradient with no error ([3, 3, 3] for [6, 6, 6]). Oracle: JAX on
the same code; strict mode names the call."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import strict_refusal

X = jnp.array([0.3, -0.7, 1.1])


def in_dict_comprehension(x):
    n = 0

    def f(v):
        nonlocal n
        n += 1
        return v * n

    d = {k: jnp.sum(f(x)) for k in range(3)}
    return d[0] + d[1] + d[2] + n


def in_generator_expression(x):
    n = 0

    def f(v):
        nonlocal n
        n += 1
        return v * n

    return sum(jnp.sum(f(x)) for _ in range(3)) * n


def in_conditional_expression(x):
    n = 1

    def f(v):
        nonlocal n
        n += 1
        return v * n

    y = f(x) if x[0] > 0 else x
    return jnp.sum(y) * n


@pytest.mark.parametrize(
    "f, where",
    [
        (in_dict_comprehension, "inside a comprehension"),
        (in_generator_expression, "inside a generator expression"),
        (in_conditional_expression, "inside a conditional expression"),
    ],
)
def test_nonlocal_writer_called_where_it_cannot_be_threaded_runs_as_python(mode, f, where):
    value, grad = kt.value_and_grad(f)(X)
    want_value, want_grad = jax.value_and_grad(f)(X)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6)
    message = strict_refusal(f, X)
    assert where in message and "nonlocal" in message
