"""Aliasing (`k_transform.frontend.mutation`): a change through one reference
is seen through every other, as in Python. Each program is modelled (value and
gradient equal Python's, checked against JAX's or float64 finite differences)
or refused naming the line (`kt.set_strict(True)`); refused, a plain function
runs as Python, so its numbers are Python's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import line_of, strict_refusal

X = jnp.array(0.7)
V = jnp.array([0.5, -1.0, 2.0])


# -- shared objects: refused (strict), Python's numbers otherwise ----------------------
def chain_list(x):
    a = b = []
    a.append(x)
    b.append(x * 2)
    return sum(a) * len(b)


def chain_dict(x):
    d = e = {}
    d["a"] = x
    e["b"] = x * 3
    return sum(d.values()) + len(e)


def chain_np(x):
    a = b = np.zeros(2)
    a[0] = 1.0
    b[1] = 2.0
    return x * (a[0] + a[1] * 10)


def repeated_rows(x):
    m = [[0.0] * 3] * 3
    m[0][0] = x
    return m[1][0] + m[2][0] * 2


def _dup(lst):
    lst *= 2


def list_imul_in_helper(x):
    lst = [x, x**2]
    _dup(lst)
    return sum(lst) * len(lst)


def _scale(arr):
    arr *= 4.0


def np_imul_in_helper(x):
    a = np.ones(3)
    _scale(a)
    return jnp.sum(x * a)


def np_iadd_alias(x):
    a = np.ones(3, np.float32)
    b = a
    a += 2.0
    return jnp.sum(x * b)


def np_iadd_view(x):
    a = np.ones(3, np.float32)
    v = a[1:]
    v += 3.0
    return jnp.sum(x * a)


def np_imul_in_list(x):
    a = np.ones(3)
    held = [a]
    a *= 3
    return jnp.sum(x * held[0])


def np_iadd_row(x):
    m = np.zeros((2, 3))
    row = m[0]
    row += 1.0
    return jnp.sum(x * m[0])


def _acc(v, acc=None):
    if acc is None:
        acc = []
    acc.append(v)
    return acc


def none_default_given(x):
    mine = [x]
    _acc(x * 2, mine)
    return sum(mine)


REFUSED = [
    (chain_list, X, "a.append"),
    (chain_dict, X, 'd["a"] = '),
    (chain_np, X, "a[0] = "),
    (repeated_rows, X, "m[0][0] = "),
    (list_imul_in_helper, X, "_dup(lst)"),
    (np_imul_in_helper, V, "_scale(a)"),
    (np_iadd_alias, V, "a += 2.0"),
    (np_iadd_view, V, "v += 3.0"),
    (np_imul_in_list, V, "a *= 3"),
    (np_iadd_row, V, "row += 1.0"),
    (none_default_given, X, "_acc(x * 2, mine)"),
]


# -- fresh objects: modelled ---------------------------------------------------------------
def none_default(x):
    return sum(_acc(x)) + sum(_acc(x * 2)) * 3


def slice_copy(x):
    a = [x, x * 2]
    b = a[:]
    b.append(x * 100)
    return sum(a) + len(b)


def list_copy(x):
    a = [x, x * 2]
    b = list(a)
    c = a.copy()
    b.append(x * 100)
    c.append(x * 10)
    return sum(a) + sum(c)


def rows_comprehension(x):
    m = [[0.0] * 2 for _ in range(2)]
    m[0][0] = x
    m[1][1] = x * x
    return m[1][0] + m[0][0] * 3 + m[1][1]


def rows_display(x):
    m = [[0.0, 1.0], [2.0, 3.0]]
    m[1][0] = x
    return m[1][0] * m[1][1] + m[0][0]


def jnp_iadd_alias(x):
    a = x * 1.0
    b = a
    a += 2.0
    return jnp.sum(a * b)


def float_iadd_param(x):
    prev = x
    x += 1.0
    return x * prev


def _shift(h):
    h += 1.0
    return h


def helper_iadd_array(x):
    y = _shift(x * 2.0)
    return jnp.sum(y * x)


MODELLED = [
    (none_default, X),
    (slice_copy, X),
    (list_copy, X),
    (rows_comprehension, X),
    (rows_display, X),
    (jnp_iadd_alias, V),
    (float_iadd_param, X),
    (helper_iadd_array, V),
]


def _python_value_and_grad(fn, x):
    """Python's value, and the gradient by float64 central differences."""
    value = np.sum(np.asarray(fn(x)))
    x64, eps = np.asarray(x, np.float64), 1e-4
    grad = np.zeros_like(x64)
    for k in np.ndindex(x64.shape):
        step = np.zeros_like(x64)
        step[k] = eps
        up = np.sum(np.asarray(fn(jnp.asarray(x64 + step, jnp.float32)), np.float64))
        down = np.sum(np.asarray(fn(jnp.asarray(x64 - step, jnp.float32)), np.float64))
        grad[k] = (up - down) / (2 * eps)
    return value, grad


def _scalar(fn):
    return lambda x: jnp.sum(fn(x))


@pytest.mark.parametrize("fn, x", MODELLED, ids=[c[0].__name__ for c in MODELLED])
def test_fresh_objects_are_modelled(fn, x):
    kt.set_strict(True)
    try:
        value, grad = kt.value_and_grad(fn)(x)
    finally:
        kt.set_strict(False)
    ref_value, ref_grad = jax.value_and_grad(fn)(x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)
    py_value, fd_grad = _python_value_and_grad(fn, x)
    np.testing.assert_allclose(value, py_value, rtol=1e-6)
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("fn, x, call", REFUSED, ids=[c[0].__name__ for c in REFUSED])
@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_shared_objects_give_pythons_numbers(fn, x, call, mode):
    kt.set_mode(mode)
    try:
        value, grad = kt.value_and_grad(fn)(x)
    finally:
        kt.set_mode("graph")
    py_value, fd_grad = _python_value_and_grad(fn, x)
    np.testing.assert_allclose(value, py_value, rtol=1e-5)
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("fn, x, call", REFUSED, ids=[c[0].__name__ for c in REFUSED])
def test_shared_objects_are_refused_naming_the_line(fn, x, call):
    message = strict_refusal(fn, x)
    assert "test_aliasing.py" in message
    assert f"line {line_of(fn, call)}" in message, message


def test_items_put_by_name_stay_errors():
    """`[row, row]` may hold the caller's objects: refused outright."""

    def grid(x):
        row = [x, x]
        m = [row, row]
        m[0][0] = x * 3
        return m[1][0]

    with pytest.raises(kt.KTransformError, match="item of the container"):
        kt.value_and_grad(grid)(X)
