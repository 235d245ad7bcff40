"""`jax.grad(f)(x)` (value_and_grad, jacrev, jacfwd, hessian; argnums,
has_aux) in a function kt.grad differentiates, `f` a closure over that
function's own traced values (a nested def, a lambda, `functools.partial`):
gradient penalties, meta-learning steps, physics losses. Refused before
("returns a function holding the call's traced values"): `jax.grad(f)` was
one library call, whose result, holding the closure's values, escaped the
trace that imports it. Now the call of its result is one library call with
it (`batching.result_called`), the closure's values its inputs, imported
from its jaxpr and differentiated by our rules. Oracle: JAX on the same
outer function, at a generic point and at 0."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

W = jnp.array([0.5, -1.0, 0.7])
X = jnp.array([1.0, 2.0, -0.3])
ZERO = jnp.zeros(3)


def close(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


def energy(x, w):
    return jnp.sum(jnp.tanh(w * x) ** 3) + jnp.sum(jnp.sin(x * w))


def penalty(w, x):  # a nested def reading `x`
    def inner(p):
        return jnp.sum(jnp.tanh(x * p))

    v, g = jax.value_and_grad(inner)(w)
    return v + 0.1 * jnp.sum(g**2)


def lambda_penalty(w, x):
    return jnp.sum(jax.grad(lambda p: energy(x, p))(w) ** 2)


def partial_penalty(w, x):
    return jnp.sum(jax.grad(functools.partial(energy, w=w))(x) ** 2)


def aux_argnums(w, x):  # both of the closure's arguments, and its aux value
    def inner(p, q):
        y = jnp.tanh(x * p) * q
        return jnp.sum(y), y

    (v, y), (gp, gq) = jax.value_and_grad(inner, argnums=(0, 1), has_aux=True)(w, x[0])
    return v * jnp.sum(gp * y) + gq**2


def called_twice(w, x):  # bound to a name, called twice
    g = jax.grad(lambda p: jnp.sum(jnp.sin(p * x) * w))
    return jnp.sum(g(w) * g(2.0 * w))


def jacobians(w, x):
    f = lambda p: jnp.tanh(p * x) * w  # noqa: E731
    h = jax.hessian(lambda p: jnp.sum(jnp.sin(p * x) * w))(w)
    return jnp.sum(jax.jacrev(f)(w) ** 2) + jnp.sum(jax.jacfwd(f)(x) * 2.0) + jnp.sum(h)


def meta_step(w, x):  # an inner gradient step per row, in a lax.scan
    def body(c, xb):
        g = jax.grad(lambda p: jnp.sum(jnp.tanh(xb * p) ** 2))(c)
        return c - 0.5 * g, jnp.sum(g)

    c, gs = jax.lax.scan(body, w, jnp.stack([x, x * 2.0]))
    return jnp.sum(c**2) + jnp.sum(gs)


def maml(w, x):  # a dict of parameters, an inner step by jax.tree.map
    params = {"a": w, "b": x[0]}

    def inner_loss(p):
        return jnp.sum(jnp.tanh(p["a"] * x + p["b"]) ** 2)

    g = jax.grad(inner_loss)(params)
    return inner_loss(jax.tree.map(lambda p, d: p - 0.1 * d, params, g))


def pinn(w, x):  # u'' of a closure, per point: jax.vmap of jax.grad of jax.grad
    u = lambda z: jnp.tanh(w[0] * z + w[1]) * w[2]  # noqa: E731
    uxx = jax.vmap(jax.grad(jax.grad(u)))(x)
    return jnp.sum((uxx + jnp.sin(x)) ** 2)


FUNCTIONS = [penalty, lambda_penalty, partial_penalty, aux_argnums, called_twice]
FUNCTIONS += [jacobians, meta_step, maml, pinn]


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_jax_derivative_of_a_closure(f):
    grad = kt.grad(f, grad_position=(0, 1))
    for w in (W, ZERO):
        close(grad(w, X), jax.grad(f, argnums=(0, 1))(w, X))


def test_parsed_not_run_as_python():
    """`jax.vmap(jax.grad(jax.grad(closure)))` is one batched library call of
    the parsed function (it ran the whole function as Python before)."""
    assert "runs as Python" not in kt.get_source(kt.grad(pinn))


def test_second_order_and_jit():
    """Forward mode through it, its Hessian (a third derivative of the
    closure), and the gradient under kt.jit."""
    close(kt.jacrev(kt.grad(lambda_penalty))(W, X), jax.hessian(lambda_penalty)(W, X))
    t = jnp.array([0.3, 1.0, -2.0])
    close(kt.jvp(penalty, (W, X), (t, t))[1], jax.jvp(penalty, (W, X), (t, t))[1])
    close(kt.jit(kt.grad(aux_argnums))(W, X), jax.grad(aux_argnums)(W, X))


def nonscalar(w, x):
    return jnp.sum(jax.grad(lambda p: jnp.tanh(x * p))(w))


def test_non_scalar_closure_is_refused_as_jax_refuses_it():
    with pytest.raises(TypeError, match="scalar"):
        jax.grad(nonscalar)(W, X)
    with pytest.raises((TypeError, kt.KTransformError), match="scalar"):
        kt.grad(nonscalar)(W, X)


def mlp(params, z):
    return jnp.sum(jnp.tanh(z * params["w"] + params["b"]))


def apply_to(g, z):
    return jnp.sum(g(z) ** 2)


def passed_on(w, x):  # the function jax.grad returns, given to another function
    params = {"w": w, "b": x}
    return apply_to(jax.grad(lambda z: mlp(params, z)), x)


def test_returned_function_passed_on():
    """Given to another function, it is a closure calling it there
    (`CallBuilder.passable`; refused before with the line, and before that
    JAX's UnexpectedTracerError: the closure's dict of values lay deeper
    than the search for them looked). Oracle: JAX."""
    close(kt.grad(passed_on, grad_position=(0, 1))(W, X), jax.grad(passed_on, argnums=(0, 1))(W, X))


def first_of(fs, z):
    return jnp.sum(fs[0](z) ** 2)


def in_a_tuple(w, x):  # ... inside a tuple: not followed there
    return first_of((jax.grad(lambda z: mlp({"w": w, "b": x}, z)),), x)


def test_returned_function_in_a_container_is_refused_naming_the_line():
    with pytest.raises(kt.KTransformError, match="holding the call's traced values") as info:
        kt.grad(in_a_tuple)(W, X)
    assert "first_of((jax.grad(" in str(info.value)
