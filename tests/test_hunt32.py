"""Hunt 32: programs written the way public JAX code is, each against JAX's
gradient of the same function.

Unpacking a dict view (`w, b = params.values()`, `(k, v), ... = d.items()`,
`a, b = d.keys()`) was refused (the view was a library call whose jaxpr
cannot return a `dict_values`); unpacking reads a view whole, at once, so
the targets get the view's items, as `tuple(view)` gives them.

`kt.jit` of a library function (`kt.jit(jax.vmap(kt.grad(loss)))`, the
per-example gradients of JAX's examples) parsed JAX's own wrapper and was
refused at a `try` in JAX's source; it is now called from a user-level
function of its arguments, as `kt.grad` of a library function is.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.7, 1.1])


def dense(p, x):
    w, b = p.values()
    return jnp.sum(jnp.tanh(w * x + b))


def items_unpacked(x):
    d = {"a": jnp.sin(x), "b": x * 2.0}
    (ka, va), (kb, vb) = d.items()
    return jnp.sum(va * vb) * len(ka + kb)


def keys_unpacked(x):
    d = {"a": jnp.sin(x), "b": x**2}
    first, *rest = d.keys()
    return jnp.sum(d[first] * d[rest[0]])


def views_in_a_loop(x, n):
    d = {"a": x, "b": x * 2.0}
    for _ in range(n):
        a, b = d.values()
        d = {"a": jnp.sin(b), "b": a * b}
    return jnp.sum(d["a"] + d["b"])


@pytest.mark.parametrize("f", [items_unpacked, keys_unpacked], ids=lambda f: f.__name__)
def test_unpacking_a_dict_view_differentiates(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-6)


def test_unpacking_params_values_and_a_view_in_a_traced_loop():
    p = {"w": jnp.array([0.5, 1.5, -1.0]), "b": jnp.array([0.1, -0.2, 0.3])}
    got = kt.grad(dense)(p, X)
    want = jax.grad(dense)(p, X)
    for k in p:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    got = kt.jit(kt.grad(views_in_a_loop))(X, jnp.array(3))
    np.testing.assert_allclose(got, jax.grad(views_in_a_loop)(X, 3), rtol=1e-6)


def per_example(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def test_jit_of_a_library_function_per_example_gradients():
    w = jnp.array([[0.5, -0.3], [0.1, 0.4], [0.3, 0.2]])
    xs = jnp.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.4]])
    want = jax.vmap(jax.grad(per_example), in_axes=(None, 0))(w, xs)
    got = kt.jit(jax.vmap(kt.grad(per_example), in_axes=(None, 0)))(w, xs)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(kt.jit(jax.vmap(jnp.sin))(xs), jnp.sin(xs), rtol=1e-6)


def pops_a_stack(x):
    stack = []
    for v in x:
        stack.append(v * 2.0)
    total = 0.0
    while stack:
        total = total * 0.5 + stack.pop()
    return total


def test_a_while_popping_a_list_until_empty_terminates():
    """The carries a loop reads grew without end (item -1 of the list, then
    -2 of the list before, ...): `kt.grad` never returned. A carry still
    growing after `reads.WIDEN_AFTER` rounds is read whole."""
    x = jnp.array([0.3, -0.7, 1.1, 0.5])
    np.testing.assert_allclose(kt.grad(pops_a_stack)(x), jax.grad(pops_a_stack)(x), rtol=1e-6)
    got = kt.jit(kt.grad(pops_a_stack))(x)
    np.testing.assert_allclose(got, jax.grad(pops_a_stack)(x), rtol=1e-6)
