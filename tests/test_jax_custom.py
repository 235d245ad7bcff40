"""A user's `jax.custom_vjp` function is differentiated by its own rule, as
JAX differentiates it (`frontend/jax_custom.py`); before, k_transform read
through to its primal and gave the gradient of its steps, a wrong number
with no error (JAX's notebook's `clip_gradient`: 3.0 for JAX's 0.5). A
user's `jax.custom_jvp` function, refused when differentiated until session
29, has its rule transposed (tests/test_custom_jvp29.py), never
differentiated through its steps. Oracle: `jax.grad` of the same code (JAX
uses the rules)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt
from k_transform.errors import KTransformError

X = jnp.array([0.3, -1.2, 2.0], jnp.float32)


def close(a, b, tol=1e-5):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# JAX's Custom_derivative_rules notebook's clip_gradient: the rule is not the
# derivative of the steps (the identity), so ignoring it shows.
@jax.custom_vjp
def clip_gradient(x):
    return x


def clip_fwd(x):
    return x, None


def clip_bwd(_, g):
    return (jnp.clip(g, -0.5, 0.5),)


clip_gradient.defvjp(clip_fwd, clip_bwd)


# A rule that is deliberately twice the derivative: first and second order
# must follow JAX's reading (the forward from fwd, the backward from bwd).
@jax.custom_vjp
def twice_sin(x):
    return jnp.sin(x)


def twice_sin_fwd(x):
    return jnp.sin(x), jnp.cos(x)


def twice_sin_bwd(c, g):
    return (2.0 * c * g,)


twice_sin.defvjp(twice_sin_fwd, twice_sin_bwd)


def clipped(x):
    return jnp.sum(3.0 * clip_gradient(x))


def through_twice_sin(x):
    return jnp.sum(twice_sin(x) * x)


def test_the_rule_is_used():
    close(kt.grad(clipped)(X), jax.grad(clipped)(X))
    close(kt.grad(clipped)(X), jnp.full(3, 0.5))  # closed form: the clipped cotangent


def test_a_custom_vjp_function_as_the_function_differentiated():
    close(kt.grad(twice_sin)(0.7), jax.grad(twice_sin)(0.7))


def test_first_and_second_order_follow_jax():
    close(kt.grad(through_twice_sin)(X), jax.grad(through_twice_sin)(X))

    def summed(g):
        return lambda x: jnp.sum(g(through_twice_sin)(x))

    close(kt.grad(summed(kt.grad))(X), jax.grad(summed(jax.grad))(X), 1e-4)
    close(kt.hessian(lambda x: twice_sin(x))(0.4), jax.hessian(lambda x: twice_sin(x))(0.4))


def test_jit_compositions():
    want = jax.grad(through_twice_sin)(X)
    close(kt.jit(kt.grad(through_twice_sin))(X), want)
    close(jax.jit(kt.grad(through_twice_sin))(X), want)


def test_jvp_is_the_rules_transpose():
    # twice_sin's rule is 2 cos(x) g, so its jvp is 2 cos(x) v (JAX has no jvp
    # of a custom_vjp function: the closed form is the oracle)
    out, tangent = kt.jvp(twice_sin, (X,), (jnp.ones(3),))
    close(out, jnp.sin(X))
    close(tangent, 2.0 * jnp.cos(X))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def apply_to(fn, x):
    return fn(x)


def apply_to_fwd(fn, x):
    return apply_to(fn, x), x


def apply_to_bwd(fn, x, g):
    return (5.0 * g * x,)


apply_to.defvjp(apply_to_fwd, apply_to_bwd)


def test_nondiff_argnums_get_the_function_as_written():
    def loss(x):
        return jnp.sum(apply_to(jnp.sin, x))

    close(kt.grad(loss)(X), jax.grad(loss)(X))


def test_a_closure_given_to_a_custom_vjp_function_is_refused():
    def loss(x, k):
        return jnp.sum(apply_to(lambda y: jnp.sin(k * y), x))

    with pytest.raises(KTransformError, match="reading variables of its caller"):
        kt.grad(loss)(X, 2.0)


@jax.custom_vjp
def pair(a, b):
    return a * b, a + b


def pair_fwd(a, b):
    return pair(a, b), (a, b)


def pair_bwd(res, g):
    a, b = res
    ga, gs = g
    return (ga * b + gs, None)  # None: no gradient for b, as JAX reads it


pair.defvjp(pair_fwd, pair_bwd)


def test_several_outputs_and_a_none_gradient():
    def loss(a, b):
        p, s = pair(a, b)
        return jnp.sum(p * s)

    close(kt.grad(loss, argnums=(0, 1))(X, 2.0 * X), jax.grad(loss, argnums=(0, 1))(X, 2.0 * X))


def test_inside_a_scan_body():
    def scanned(x):
        def body(c, xi):
            return c + twice_sin(xi * c), None

        c, _ = lax.scan(body, 1.0, x)
        return c

    close(kt.grad(scanned)(X), jax.grad(scanned)(X))


@jax.custom_vjp
def without_rule(x):
    return x


def test_a_custom_vjp_function_without_a_rule_is_refused():
    with pytest.raises(KTransformError, match=r"without_rule has no rule.*defvjp"):
        kt.grad(lambda x: without_rule(x) * 2.0)(1.0)


@jax.custom_jvp
def log1pexp(x):
    return jnp.log(1.0 + jnp.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), (1.0 - 1.0 / (1.0 + jnp.exp(x))) * t


def test_a_custom_jvp_function_is_differentiated_by_its_rule():
    """Its steps' gradient at 100 is NaN (JAX's rule gives 1.0): its rule is
    transposed (session 29; refused before), never its steps differentiated
    (more in tests/test_custom_jvp29.py)."""

    def loss(x):
        return jnp.sum(log1pexp(x))

    big = jnp.array([100.0])
    close(kt.grad(loss)(big), jax.grad(loss)(big))
    close(kt.grad(log1pexp)(100.0), 1.0)
    close(kt.jit(loss)(X), loss(X))


def test_a_custom_vjp_function_reached_through_a_jaxpr_is_refused():
    """`jax.vmap(f)` is differentiated through its batched jaxpr, where the
    rule is not seen: refused rather than the steps' gradient."""
    with pytest.raises(KTransformError, match="custom_vjp function clip_gradient"):
        kt.grad(lambda x: jnp.sum(3.0 * jax.vmap(clip_gradient)(x)))(X)
