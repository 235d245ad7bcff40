"""Programs JAX differentiates that k_transform refused (session 32), each
from public JAX code; oracle: `jax.grad` of the same program, at a generic
point.

- the function `jax.grad(closure)` returns (`value_and_grad`, `hessian`,
  ...) passed to a helper or returned, not called where it is made: a
  closure calling it there (`CallBuilder.passable`), each call one library
  call with the call that made it; refused before ("holding the call's
  traced values");
- `functools.partial(jax.grad, argnums=1)(closure)`: the partial of a
  library function made while parsing, so that its call is the library's
  (was JAX given our derivative form of the closure: refused);
- a nested function whose defaults the caller computes (`lambda r,
  s=scale: ...`, the loop-capture idiom) given to `jax.vmap` (refused: no
  gradient rule), to `lax.scan`/`lax.map`/`fori_loop`/`cond` or to a helper
  (a TypeError from the generated code: the default was missing);
- `a = x[0]; a += v` on a NumPy vector `x` (its item a copy, `+=` rebinds
  it): refused as a change of `x`; a row of a matrix still is;
- `vm = jax.vmap(g)` or `g = jax.grad(closure)`, then a variable the
  closure reads rebound, then the call: the gradient was silently wrong
  (the closure read the old binding); now it reads the new one (vmap), or
  the function runs as Python, exactly (`closures.note_closures_given`).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

W = jnp.array([0.5, -1.0, 0.7])
X = jnp.array([1.0, 2.0, -0.3])


def close(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


def check(f, *args):
    close(kt.grad(f, grad_position=(0, 1))(*args), jax.grad(f, argnums=(0, 1))(*args))


# -- jax.grad(closure) passed on ---------------------------------------------


def squared(g, z):
    return jnp.sum(g(z) ** 2)


def with_scale(g, z):
    v, d = g(z, 2.0)
    return v + jnp.sum(d * z)


def grad_passed(w, x):
    g = jax.grad(lambda z: jnp.sum(jnp.tanh(z * w)))
    return squared(g, x) + squared(g, 2.0 * x)


def second_derivative_passed(w, x):
    g = jax.grad(jax.grad(lambda z: jnp.sin(z * w[0]) * w[1]))
    return squared(g, x[0]) + jnp.sum(jax.vmap(lambda t: squared(g, t))(x))


def value_and_grad_passed(w, x):
    def inner(p, scale):
        return jnp.sum(jnp.tanh(p * w)) * scale

    return with_scale(jax.value_and_grad(inner), x)


def make(w):
    return jax.grad(lambda z: jnp.sum(jnp.sin(z * w)))


def grad_returned(w, x):
    return jnp.sum(make(w)(x) * x)


def grad_mapped(w, x):  # given to lax.map
    g = jax.grad(lambda z: jnp.sin(z * w[0]) * w[1])
    return jnp.sum(jax.lax.map(g, x) ** 2)


PASSED = [grad_passed, second_derivative_passed, value_and_grad_passed]
PASSED += [grad_returned, grad_mapped]


@pytest.mark.parametrize("f", PASSED, ids=lambda f: f.__name__)
def test_jax_derivative_of_a_closure_passed_on(f):
    check(f, W, X)


# -- functools.partial(jax.grad, ...) -------------------------------------------


def partial_of_grad(w, x):
    g = functools.partial(jax.grad, argnums=1)(lambda a, b: jnp.sum(jnp.sin(a * b * w)))
    return jnp.sum(g(x, w) ** 2)


def test_partial_of_jax_grad_given_a_closure():
    check(partial_of_grad, W, X)


# -- computed defaults ----------------------------------------------------------


def vmap_default(w, x):
    scale = jnp.sum(w)
    return jnp.sum(jax.vmap(lambda r, s=scale: jnp.sin(r * s))(x))


def vmap_loop(w, x):  # the loop-capture idiom
    out = 0.0
    for k in range(2):
        out = out + jnp.sum(jax.vmap(lambda r, s=w[k]: jnp.sin(r * s))(x))
    return out


def scan_default(w, x):
    s = w[2]
    c, ys = jax.lax.scan(lambda c, r, s=s: (c * s + r, c), 0.0, x)
    return c + jnp.sum(ys) + jnp.sum(jax.lax.map(lambda r, s=s: jnp.sin(r * s), x))


def loops_default(w, x):
    s = w[0]
    y = jax.lax.fori_loop(0, 3, lambda i, c, s=s: c * s + x[i], 0.0)
    return y + jax.lax.cond(x[0] > 0, lambda a, s=s: a * s, lambda a, s=s: a + s, w[1])


def twice(f, z):
    return jnp.sum(f(z)) + jnp.sum(f(z, 3.0))  # the default, then another value


def helper_default(w, x):
    s = w[0] * w[1]
    keyword_only = jnp.sum(jax.lax.map(lambda r, *, s=s: jnp.cos(r * s), x))
    return twice(lambda r, s=s: jnp.sin(r * s), x) + keyword_only


DEFAULTS = [vmap_default, vmap_loop, scan_default, loops_default, helper_default]


@pytest.mark.parametrize("f", DEFAULTS, ids=lambda f: f.__name__)
def test_computed_default_of_a_function_passed_on(f):
    check(f, W, X)


def test_computed_default_vmap_is_batched():
    assert "runs as Python" not in kt.get_source(kt.grad(vmap_default))


# -- an item of a NumPy argument, augmented --------------------------------------

XN = np.array([1.0, 2.0, -0.3])


def item_augmented(w, x):
    a = x[0]
    a += w[0]
    return a * w[1]


def scale_item(x, w):
    a = x[1]
    a *= w[2]
    return a


def item_augmented_in_helper(w, x):
    return jnp.sum(scale_item(x, w)) * w[0]


@pytest.mark.parametrize("f", [item_augmented, item_augmented_in_helper], ids=lambda f: f.__name__)
def test_item_of_a_numpy_vector_augmented(f):
    """Of a vector, the item is a copy; of a matrix, a row is a view, which
    Python would change in the caller's matrix: still refused."""
    close(kt.grad(f)(W, XN), jax.grad(f)(W, XN))
    assert XN.tolist() == [1.0, 2.0, -0.3]
    with pytest.raises(kt.KTransformError, match="changes its argument 'x' in place"):
        kt.grad(f)(W, np.array([[1.0, 2.0], [3.0, 4.0]]))


# -- a variable the function reads, rebound before it is called -----------------


def vmap_rebound(w, x):
    s = 1.0

    def g(r):
        return jnp.sin(r * s)

    vm = jax.vmap(g)
    s = w[0]  # Python's `g` reads this one when `vm` calls it
    return jnp.sum(vm(x))


def grad_rebound(w, x):
    s, t = w[1], 1.0
    g = jax.grad(lambda r: jnp.sin(r * s) * t)
    s, t = w[0], w[2]
    return g(x[0]) + squared(g, x[1])


@pytest.mark.parametrize("f", [vmap_rebound, grad_rebound], ids=lambda f: f.__name__)
def test_function_of_a_closure_called_after_a_rebinding(f):
    """Was a silently wrong gradient (zero for `w[0]`): the closure was read
    with the bindings of the call that made the function."""
    check(f, W, X)


# -- jax.vmap(f) passed on; JAX's transforms as decorators of nested defs ---------


def vmapped_passed(w, x):  # was refused: no bprop for Vmapped
    def g(r):
        return jnp.sin(r * w[0])

    vm = jax.vmap(g)
    return squared(vm, x)


def decorated(w, x):
    scale = w[1]

    @functools.partial(jax.vmap, in_axes=(0, None))
    def f(r, t, s=scale):
        return jnp.sin(r * s * t)

    @jax.vmap
    @jax.grad
    def g(r):
        return jnp.sin(r * w[0]) * w[1]

    @functools.partial(jax.jit, static_argnames=("n",))
    def h(r, n):
        return jnp.sin(r * w[2]) ** n

    return jnp.sum(f(x, w[0])) + squared(g, x) + jnp.sum(h(x, n=2))


def test_vmapped_function_passed_on():
    check(vmapped_passed, W, X)


def test_jax_transforms_as_decorators_of_nested_defs():
    """`f = dec(<def>)`: parsed (it ran as Python: `a decorator on a nested
    function`)."""
    check(decorated, W, X)
    assert "runs as Python" not in kt.get_source(kt.grad(decorated))
