"""Parameters held in a tuple, list or dict attribute (`self.ws = (self.a,
self.b)`) are read as Parameters wherever the container is used: an item
chosen by an index known only at run time (`self.ws[k]`, `k` an argument),
the container passed whole (`jnp.stack(self.ws)`). As one constant it reached
run time as the Parameter objects: their values as when compiled, their
gradients silently zero. Oracle: `jax.grad` of the same arithmetic on the
values, and the values after `set_data` for the reads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

A = np.array([2.0, -1.0, 0.5], np.float32)
B = np.array([3.0, 0.25, -2.0], np.float32)
X = jnp.array([0.5, 1.0, 2.0])


class Chosen(kt.Cell):
    """Reads `self.ws[k]` in a method given `k`."""

    def __init__(self, holder):
        super().__init__()
        self.a = kt.Parameter(jnp.asarray(A), name="a")
        self.b = kt.Parameter(jnp.asarray(B), name="b")
        self.ws = holder(self.a, self.b)

    def construct(self, x):
        return self.part(x, 1) + 0.5 * self.part(x, 0)

    def part(self, x, k):
        return jnp.sum(jnp.sin(x * self.ws[k]))


class Stacked(kt.Cell):
    """Passes the list whole to `jnp.stack`."""

    def __init__(self):
        super().__init__()
        self.a = kt.Parameter(jnp.asarray(A), name="a")
        self.b = kt.Parameter(jnp.asarray(B), name="b")
        self.ws = [self.a, self.b]

    def construct(self, x):
        return jnp.sum(jnp.stack(self.ws) ** 2 * x)


HOLDERS = {
    "tuple": lambda a, b: (a, b),
    "list": lambda a, b: [a, b],
    "dict": lambda a, b: {0: a, 1: b},
    "ParameterTuple": lambda a, b: kt.ParameterTuple([a, b]),
}


def chosen_oracle(a, b, x):
    return jnp.sum(jnp.sin(x * b)) + 0.5 * jnp.sum(jnp.sin(x * a))


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "kt.jit"])
@pytest.mark.parametrize("holder", HOLDERS)
def test_a_parameter_chosen_at_run_time_from_a_container_gets_its_gradient(holder, jit):
    net = Chosen(HOLDERS[holder])
    grad = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))
    grad = kt.jit(grad) if jit else grad
    want = jax.grad(chosen_oracle, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(B), X)
    for got, expected in zip(grad(X), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # the values are read when called, not as compiled
    net.b.set_data(jnp.asarray(B * 2.0))
    want = jax.grad(chosen_oracle, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(B * 2.0), X)
    for got, expected in zip(grad(X), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(net(X), chosen_oracle(A, B * 2.0, X), rtol=1e-6)


def test_a_list_of_parameters_passed_whole_gets_their_gradients():
    net = Stacked()
    grads = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))(X)
    want = jax.grad(lambda a, b: jnp.sum(jnp.stack([a, b]) ** 2 * X), argnums=(0, 1))(
        jnp.asarray(A), jnp.asarray(B)
    )
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
