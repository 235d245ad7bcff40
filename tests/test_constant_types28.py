"""Constants reach the user's code as Python passes them (helper-69's finds, session 28).

A constant argument (a NumPy array, a Python float) given to user code that
runs through its jaxpr (a method of an instance made in the function, a
function run as Python, a function taken from a dict) reached it as a JAX
array: `isinstance(y, np.ndarray)`, `type(y) is float`, `y.dtype.itemsize` and
NumPy indexing (`np.eye(k)[y]`) changed their meaning, a silently different
function. JAX's tracer closes over such constants; so do we. The oracle is
jax.value_and_grad on the same functions; each test runs in both modes
(`mode`, tests/conftest.py).
"""

import math

import jax
import jax.numpy as jnp
import numpy as onp
import pytest

import k_transform as kt

W = jnp.array([1.0, 2.0])


def _check(fn, *args):
    want = jax.value_and_grad(fn)(*args)
    got = kt.value_and_grad(fn)(*args)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np_a, np_b = onp.asarray(a), onp.asarray(b)
        assert np_a.shape == np_b.shape
        onp.testing.assert_allclose(np_a, np_b, rtol=1e-6)


class M:
    def by_type(self, W, y):  # a NumPy array: x2, else x3
        return jnp.sum(W) * (2.0 if isinstance(y, onp.ndarray) else 3.0)

    def by_float(self, W, y):  # a Python float: x2, else x5
        return jnp.sum(W) * (2.0 if type(y) is float else 5.0)

    def by_itemsize(self, W, y):  # float64 NumPy: 8
        return jnp.sum(W) * y.dtype.itemsize

    def weighted(self, x, y):  # a traced value and a NumPy constant
        assert isinstance(y, onp.ndarray)
        return jnp.sum(jnp.sin(x) * y)


def test_method_of_instance_made_inside_gets_numpy_array(mode):
    _check(lambda W: M().by_type(W, onp.array([0, 1])), W)


def test_method_of_instance_made_inside_gets_python_float(mode):
    _check(lambda W: M().by_float(W, 2.0), W)


def test_numpy_float_literal_array_stays_float64_numpy(mode):
    # `np.array([1.0, 2.0])` in parsed code is NumPy's float64 array, not jnp's float32
    _check(lambda W: M().by_itemsize(W, onp.array([1.0, 2.0])), W)
    _check(lambda W: M().by_itemsize(W, onp.array([[1.0, 2.0], [3.0, -4.5]])), W)


def test_traced_argument_keeps_its_gradient_beside_a_constant(mode):
    _check(lambda W: M().weighted(W * W, onp.array([0.5, -2.0])), W)


def _helper_run_as_python(W, y):
    try:  # (a construct the parser runs as Python)
        s = 2.0 if isinstance(y, onp.ndarray) else 3.0
    except Exception:
        s = 0.0
    return jnp.sum(W) * s


def test_function_run_as_python_gets_numpy_array(mode):
    _check(lambda W: _helper_run_as_python(W, onp.array([1, 2])), W)


def _h(W, y):
    return jnp.sum(W) * (2.0 if type(y) is float else 5.0)


_HS = {"p": _h}


def _f_dict(W):
    return _HS["p"](W, 2.0)


def _f_default(W, fn=_h):
    return fn(W, 2.0)


_NAME = "by_float"


def _f_getattr(W):
    return getattr(M(), _NAME)(W, 2.0)


@pytest.mark.parametrize("fn", [_f_dict, _f_default, _f_getattr], ids=lambda f: f.__name__)
def test_function_known_at_run_time_gets_python_float(mode, fn):
    _check(fn, W)


class _SoftmaxRegression:
    def __init__(self, n_classes):
        self.n_classes = n_classes

    def loss(self, W, X, y):
        logp = jax.nn.log_softmax(X @ W, axis=1)
        Y = onp.eye(self.n_classes)[y]  # NumPy indexing with the constant labels
        return -jnp.sum(Y * logp) / X.shape[0]


def test_numpy_indexing_with_constant_labels(mode):
    def f(W, X):
        return _SoftmaxRegression(3).loss(W, X, onp.array([0, 1, 2, 1]))

    W2 = jnp.ones((2, 3)) * 0.1
    X = jnp.array([[1.0, 0.5], [0.2, 1.0], [-1.0, 0.3], [0.5, 0.5]])
    want = jax.grad(f)(W2, X)
    onp.testing.assert_allclose(kt.grad(f)(W2, X), want, rtol=1e-5, atol=1e-7)


def test_math_of_a_float_literal_is_a_python_float(mode):
    # `math.sqrt(2.0)` computes what Python computes: a float, not a jnp array
    _check(lambda W: M().by_float(W, math.sqrt(2.0)), W)


_TABLE = onp.array([1.0, 2.0])


def _scaled(W, y):
    try:
        s = float(y[0])  # reads the NumPy array's values as Python does
    except Exception:
        s = 0.0
    return jnp.sum(W) * s


def _first(W, y):
    return jnp.sum(W) * y[0]


_BY_NAME = {"first": _first}


@pytest.mark.parametrize(
    "f",
    [lambda W: _scaled(W, _TABLE), lambda W: _BY_NAME["first"](W, _TABLE)],
    ids=["run_as_python", "through_dict"],
)
def test_numpy_global_changed_in_place_between_calls(mode, f):
    # the constant is read as it is at each call, not a stale trace of it

    try:
        first = kt.value_and_grad(f)(W)
        onp.testing.assert_allclose(first[0], jax.value_and_grad(f)(W)[0])
        _TABLE[0] = 5.0
        second = kt.value_and_grad(f)(W)
        want = jax.value_and_grad(f)(W)
        onp.testing.assert_allclose(second[0], want[0])
        onp.testing.assert_allclose(second[1], want[1])
    finally:
        _TABLE[0] = 1.0


class _Typed:
    def value(self, W, y):  # both tests hold only for the float64 NumPy array Python passes
        ndarray = isinstance(y, onp.ndarray) and type(y[0]) is onp.float64
        return jnp.sum(jnp.sin(W)) * (2.0 if ndarray else 7.0)


def _typed(W):
    return _Typed().value(W, onp.array([1.0, 2.0]))


def test_constant_kept_at_second_order_and_forward_mode():
    V = jnp.array([0.3, -1.0])
    for got, want in [
        (kt.jvp(_typed, (W,), (V,)), jax.jvp(_typed, (W,), (V,))),
        (kt.hessian(_typed)(W), jax.hessian(_typed)(W)),
        (kt.jit(kt.grad(_typed))(W), jax.grad(_typed)(W)),
    ]:
        for a, b in zip(
            jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True
        ):
            onp.testing.assert_allclose(a, b, rtol=1e-6)
