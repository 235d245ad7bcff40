"""Wrapped gradient targets and callees (`k_transform.frontend.callables`):
`jax.jit` and `partial(jax.jit, static_argnums=...)` functions,
`functools.wraps` decorators, wrapper objects, `functools.partial` and
callable objects, at the top (`kt.grad`, `GradOperation`, `value_and_grad`,
`jvp`) and called inside differentiated code. Oracle: `jax.grad` / `jax.jvp`
of the same program, in float64, with k_transform's gradient run eagerly,
jitted (the default) and under the user's own `jax.jit`."""

import functools
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = np.array([0.3, -0.7, 1.1])


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield
    kt.set_mode("graph")


def close(got, want):
    for u, v in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        assert np.asarray(u).dtype == np.float64
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-12, atol=1e-12)


def check(fn, *args, static=()):
    """kt.grad(fn) against jax.grad(fn): eager, jitted, and jitted by the user."""
    want = jax.grad(fn)(*args)
    kt.set_mode("eager")
    close(kt.grad(fn)(*args), want)
    kt.set_mode("graph")
    close(kt.grad(fn)(*args), want)
    close(kt.GradOperation()(fn)(*args), want)
    close(jax.jit(kt.grad(fn), static_argnums=static)(*args), want)


# -- jax.jit targets ----------------------------------------------------------------
@jax.jit
def jitted(x):
    s = jnp.sum(jnp.sin(x) * x)
    if s > 0:  # under jax.jit this would not trace; k_transform reads the source
        s = s * s
    return s


@partial(jax.jit, static_argnums=1)
def powered(x, n):
    y = x
    for _ in range(n):
        y = y * jnp.cos(x)
    return jnp.sum(y)


@functools.partial(jax.jit, static_argnames="n")
def powered_kw(x, n=2):
    return jnp.sum(x ** (n + 1))


def test_jit_target():
    assert jitted.__wrapped__ is not None
    for x in (X, -X):
        want = jax.grad(jitted.__wrapped__)(x)  # the oracle needs concrete control flow
        kt.set_mode("eager")
        close(kt.grad(jitted)(x), want)
        kt.set_mode("graph")
        close(kt.grad(jitted)(x), want)
        close(jax.jit(kt.grad(jitted))(x), want)


def test_jit_static_argnums_target():
    for n in (1, 3):
        check(powered, X, n, static=(1,))


def test_jit_static_argnames_target():
    for n in (1, 2):
        want = jax.grad(powered_kw)(X, n=n)
        close(kt.grad(powered_kw)(X, n=n), want)
    close(kt.grad(powered_kw)(X), jax.grad(powered_kw)(X))


def test_jit_target_value_and_grad_and_jvp():
    value, grad = kt.value_and_grad(powered)(X, 2)
    want_value, want_grad = jax.value_and_grad(powered)(X, 2)
    close((value, grad), (want_value, want_grad))
    v = np.array([1.0, 0.5, -2.0])
    got = kt.jvp(jitted, X, v)  # the function differentiated: its source is read
    close(got, jax.jvp(jitted.__wrapped__, (X,), (v,)))
    # called inside, a jitted function is traced as JAX traces it (once per
    # signature): its `if` on a traced value fails as under JAX, naming the line
    with pytest.raises(kt.KTransformError, match=r"TracerBoolConversionError[\s\S]*jitted\(x\)"):
        kt.jvp(lambda x: jnp.sin(jitted(x)), X, v)


# -- jitted helpers called inside --------------------------------------------------
@jax.jit
def helper(x):
    return x * jnp.exp(-x)


@partial(jax.jit, static_argnums=(1,))
def repeat(x, n):
    for _ in range(n):
        x = jnp.tanh(x)
    return x


def calls_jitted(x, n):
    return jnp.sum(helper(x) + repeat(x, n))


def test_jitted_helpers_inside():
    for n in (0, 2):
        check(calls_jitted, X, n, static=(1,))


# -- functools.wraps decorators ------------------------------------------------------
def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def make_scaled(scale):
    @traced
    def scaled(x, y=2.0):
        return jnp.sum(scale * x**3 / y)  # `scale`: a cell of scaled's closure, not wrapper's

    return scaled


def test_wraps_decorator():
    f = make_scaled(1.5)
    check(f, X)
    close(kt.grad(f)(X, y=4.0), jax.grad(f)(X, y=4.0))
    check(lambda x: f(x) * f(2.0 * x, 3.0), X)


def doubled(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return 2.0 * fn(*args, **kwargs)  # a wrapper that does more than forward

    return wrapper


@doubled
def with_defaults(x, y=2.0, *, z=1.0):
    return jnp.sum(x**3 / y + z * x)


def test_python_wrapper_is_parsed_as_written():
    """A wrapper written in Python is differentiated with what it does (the
    factor 2), and forwards `*args`/`**kwargs` into defaults and keywords."""
    check(with_defaults, X)
    check(lambda x: with_defaults(x) + with_defaults(x, 3.0) + with_defaults(x, y=5.0, z=2.0), X)
    close(kt.grad(with_defaults)(X, z=4.0), jax.grad(with_defaults)(X, z=4.0))


class Counted:
    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.__wrapped__(*args, **kwargs)


def test_wrapper_with_an_effect_is_refused():
    """The counter's update is an effect k_transform cannot keep: refused, not dropped."""
    with pytest.raises(kt.KTransformError, match=r"self\.calls[\s\S]*self\.calls \+= 1"):
        kt.grad(Counted(objective))(X, np.ones(3))


# -- a wrapper object: __call__ and __wrapped__, unhashable --------------------------
class Timed:
    def __init__(self, fn):
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __eq__(self, other):  # makes instances unhashable
        return self is other


def objective(x, w):
    return jnp.sum(jnp.cos(x * w) + w * x * x)


timed = Timed(objective)


def test_wrapper_object_is_unhashable_and_differentiates():
    with pytest.raises(TypeError):
        hash(timed)
    w = np.array([0.5, 2.0, -1.0])
    check(timed, X, w)
    close(kt.grad(timed, grad_position=(0, 1))(X, w), jax.grad(timed, argnums=(0, 1))(X, w))
    close(kt.value_and_grad(timed)(X, w), jax.value_and_grad(timed)(X, w))
    check(lambda x: timed(x, 2.0 * x) + timed(x, w=x), X)


# -- functools.partial ------------------------------------------------------------------
def affine_loss(a, x, b=1.0, *, c):
    return jnp.sum(a * x**2 + b * jnp.sin(x) + c)


def test_partial_target_positional_and_keyword():
    a = np.array([1.0, 2.0, 3.0])
    p = partial(affine_loss, a, c=0.5)
    check(p, X)
    check(p, X, 2.0)
    close(kt.grad(p)(X, b=-1.0, c=4.0), jax.grad(p)(X, b=-1.0, c=4.0))
    q = partial(affine_loss, a, b=3.0, c=1.0)
    check(q, X)
    close(kt.grad(q)(X, b=0.5), jax.grad(q)(X, b=0.5))
    assert "def affine_loss_partial(x, b=" in kt.get_source(p)


bound_loss = partial(affine_loss, 2.0, c=1.0)
bound_jitted = partial(repeat, n=2)


def calls_partials(x):
    return bound_loss(x, b=0.5) + jnp.sum(bound_jitted(x)) + bound_loss(x)


def test_partials_called_inside():
    check(calls_partials, X)


# -- callable objects ---------------------------------------------------------------------
class Model:
    def __init__(self, w, depth):
        self.w = w
        self.depth = depth

    def layer(self, h):
        return jnp.tanh(self.w * h)

    def __call__(self, x):
        h = x
        for _ in range(self.depth):
            h = self.layer(h)
        return jnp.sum(h * h)


def test_callable_object_target_and_callee():
    model = Model(np.array([0.9, -1.3, 0.4]), 3)
    check(model, X)
    check(lambda x: model(x) + model(2.0 * x), X)
    v = np.array([1.0, -1.0, 0.5])
    close(kt.jvp(model, X, v), jax.jvp(model, (X,), (v,)))


# -- no source ----------------------------------------------------------------------------
def test_builtin_target_is_an_error():
    with pytest.raises(kt.KTransformError, match="no Python source"):
        kt.grad(math.gamma)(2.5)


def test_builtin_in_differentiated_position_is_an_error():
    def f(x):
        return math.gamma(x) * x

    with pytest.raises(kt.KTransformError, match="gamma"):
        kt.grad(f)(2.5)


def test_wrapper_of_a_builtin_is_an_error():
    """Nothing below the wrapper is user code, so its own `__call__` is read:
    a clear error about what it does (it counts calls in an attribute)."""
    with pytest.raises(kt.KTransformError, match="test_unwrap.py"):
        kt.grad(Timed(math.gamma))(2.5)
