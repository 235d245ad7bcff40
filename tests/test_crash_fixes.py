"""Internal crashes on ordinary Python, each now exact (value and gradient
against `jax.value_and_grad`) or refused as Python refuses it: list slice
assignment that changes the list's length, a list used as an array index
(NumPy's meaning), a zero (None) gradient of a sequence indexed at second
order. (jvp of hvp through a `lax.scan` with xs, which the rule of
`ItemsGrad` broke, takes 9 s to transform: too slow for this file.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


def check_value_and_grad(f, x):
    ref_value, ref_grad = jax.value_and_grad(f)(x)
    value, grad = kt.value_and_grad(f)(x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)


# -- list slice assignment ----------------------------------------------------
def shrink(x):
    a = [x, x, x, x]
    a[1:3] = [x**2]
    return sum(a) * len(a)


def grow(x):
    a = [x, 2 * x, x]
    a[1:2] = [x**2, jnp.sin(x), x * 3]
    return sum(a) * len(a)


def delete(x):
    a = [x, x * 2, x * 3, x]
    a[1:3] = []
    return sum(a) * len(a)


def step(x):
    a = [x, x * 2, x * 3, x * 4, x]
    a[::2] = [x**2, jnp.cos(x), x]
    return a[0] * a[1] + a[2] * a[3] + a[4]


def negative_step(x):
    a = [x, x * 2, x * 3, x * 4]
    a[3:0:-2] = (x**3, jnp.exp(x))
    return a[0] * a[1] + a[2] * a[3]


def empty_span(x):  # stop before start: an insertion at start
    a = [x, x * 2, x * 3]
    a[2:1] = [x**2]
    return a[0] * a[1] + a[2] * a[3]


def array_rows(x):
    a = [x, x * 2, x * 3]
    a[:1] = jnp.stack([x**2, x, x])
    return a[0] * a[1] + a[2] * a[3] + a[4]


def in_loop(x):
    a = [x]
    for i in range(3):
        a[i:] = [a[i] * x, a[i] + 1.0]
    return sum(a) * len(a)


SLICE_CASES = [shrink, grow, delete, step, negative_step, empty_span, array_rows, in_loop]


@pytest.mark.parametrize("f", SLICE_CASES, ids=lambda f: f.__name__)
def test_list_slice_assignment(f):
    check_value_and_grad(f, jnp.array(0.7))


@pytest.mark.parametrize("f", [shrink, step, in_loop], ids=lambda f: f.__name__)
def test_list_slice_assignment_second_order(f):
    x = jnp.array(0.7)
    np.testing.assert_allclose(kt.hessian(f)(x), jax.hessian(f)(x), rtol=1e-5)
    _, tangent = kt.jvp(f, (x,), (jnp.array(1.0),))
    np.testing.assert_allclose(tangent, jax.grad(f)(x), rtol=1e-5)


def test_list_slice_assignment_eager():
    kt.set_mode("eager")
    try:
        check_value_and_grad(shrink, jnp.array(0.7))
    finally:
        kt.set_mode("graph")


# -- a list as an array index: NumPy's integer or boolean array index ----------
def numpy_swap(x):
    a = np.array([1.0, 2.0, 3.0])
    a[[0, 2]] = a[[2, 0]]
    return jnp.sum(x * a)


def numpy_write(x):
    a = np.zeros(3)
    a[[0, 2]] = [1.0, 2.0]
    a[[0, 1]] += 5.0
    return jnp.sum(x * a)


def test_list_index_of_numpy_array():
    x = jnp.array([0.5, -1.0, 2.0])
    check_value_and_grad(numpy_swap, x)
    check_value_and_grad(numpy_write, x)


def read_rows(x):
    idx = [2, 0, 2]
    return jnp.sum(x[idx] ** 2) + jnp.sum(x[[True, False, True]] * 3.0)


def test_list_index_of_jax_array_means_numpy_index():
    x = jnp.array([0.5, -1.0, 2.0])
    value, grad = kt.value_and_grad(read_rows)(x)
    xs = np.asarray(x, np.float64)
    np.testing.assert_allclose(value, np.sum(xs[[2, 0, 2]] ** 2) + 3 * (xs[0] + xs[2]), rtol=1e-6)
    np.testing.assert_allclose(grad, [2 * xs[0] + 3, 0.0, 4 * xs[2] + 3], rtol=1e-6)
    np.testing.assert_allclose(kt.hessian(read_rows)(x), np.diag([2.0, 0.0, 4.0]), atol=1e-6)


def test_list_index_of_list_is_pythons_type_error():
    def f(x):
        a = [x, x]
        return a[[0, 1]]

    with pytest.raises(TypeError, match="list indices must be integers or slices"):
        kt.value_and_grad(f)(jnp.array(0.7))


# -- a zero (None) gradient of a sequence, indexed at second order ------------------
def rewrite_entries(x):
    d = {"a": x, "b": x * 2}
    for k in list(d):
        d[k] = d[k] * 3
    return d["a"] * d["b"]


def test_hessian_through_keys_of_a_dict():
    x = jnp.array(0.7)
    np.testing.assert_allclose(kt.hessian(rewrite_entries)(x), jax.hessian(rewrite_entries)(x))
    check_value_and_grad(rewrite_entries, x)
