"""Crashes found running public JAX code (session 27: jax-md energy
functions, blackjax integrators, Lagrangian NNs, nbody-jax's KDE loss,
flax's Gaussian-process kernels), each checked against JAX's derivative of
the same program."""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError

R = jnp.array([0.3, 0.9])
V = jnp.array([1.0, -0.5])


def _close(got, want, rtol=1e-5, atol=1e-6):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


# -- forward over reverse of a function taking **kwargs (jax-md's energy_fn) ------
def cube(x):
    return x**3


def energy(R, k=2.0, fn=cube, **unused_kwargs):
    return jnp.sum(fn(jnp.sin(R))) * k


def test_jacfwd_and_jvp_of_grad_with_kwargs():
    """`kt.jacfwd(kt.grad(f))` and `kt.jvp(kt.grad(f), ...)` with `f(R, k=2.0,
    **kwargs)`: the gradient's graph takes `k` and `kwargs` too (they were
    missing: a TypeError in generated code); kt.hvp the same."""
    want = jax.jacfwd(jax.grad(energy))(R)
    _close(kt.jacfwd(kt.grad(energy))(R), want)
    _close(kt.jvp(kt.grad(energy), (R,), (V,)), jax.jvp(jax.grad(energy), (R,), (V,)))
    _close(kt.hvp(energy, (R,), V), want @ V)


# -- JAX's derivative API given a function known only at run time (blackjax) -----
def potential(p):
    return jnp.sum(jnp.sin(p) ** 2 * p)


def integrator(potential_fn):
    potential_and_grad_fn = jax.value_and_grad(potential_fn)

    def one_step(q, eps):
        e, g = potential_and_grad_fn(q)
        return q - eps * g, e

    return one_step


def leapfrog(q, eps):
    q, e = integrator(potential)(q, eps)
    return potential(q) + e


def lagrangian_terms(L, q):
    return jnp.sum(jax.hessian(L)(q) @ jax.grad(L)(q))


def lagrangian_loss(q):
    return lagrangian_terms(potential, q)


def test_jax_derivative_of_a_function_parameter():
    """`jax.value_and_grad(potential_fn)` / `jax.hessian(L)` with the function
    a parameter: run as Python (JAX differentiates the function itself), not
    given our derivative form of it (a pullback is no JAX type), at first and
    second order."""
    _close(kt.grad(leapfrog)(R, 0.1), jax.grad(leapfrog)(R, 0.1))
    _close(kt.hessian(leapfrog)(R, 0.1), jax.hessian(leapfrog)(R, 0.1))
    _close(kt.grad(lagrangian_loss)(R), jax.grad(lagrangian_loss)(R))


def make_L(w):
    def L(q):
        return jnp.sum(w * jnp.cos(q))

    return L


def eom(L, q):
    @jax.jit
    def acc(q):
        return jax.grad(L)(q)

    return acc(q)


def test_closure_given_to_code_run_as_python_is_refused():
    """A closure over the values differentiated, given to code run as Python
    (a Lagrangian NN's `eom(make_L(w), q)`): refused naming the line, not a
    bare TypeError (its captured `w` would have no gradient there)."""

    def loss(w):
        return jnp.sum(eom(make_L(w), jnp.array([0.3, 0.4])) ** 2)

    with pytest.raises(
        KTransformError, match="given L, a function of the code being differentiated"
    ) as info:
        kt.grad(loss)(jnp.array([1.0, 2.0]))
    assert "return jnp.sum(eom(make_L(w)" in str(info.value)


# -- kt.jvp through a list item set to a dict -------------------------------------
def test_jvp_through_list_item_set_to_a_dict():
    def g(x):
        b = [None, 2.0]
        b[0] = x
        return jnp.sum(b[0]["x"] ** 2) * b[1]

    x = {"x": jnp.array([1.0, 2.0])}
    t = {"x": jnp.array([1.0, 0.5])}
    _close(kt.jvp(g, (x,), (t,)), jax.jvp(g, (x,), (t,)))
    _close(kt.grad(g)(x), jax.grad(g)(x))


# -- a dataclass made by an __init__ of its own -----------------------------------
def test_gaussian_kde_of_traced_data():
    """`jax.scipy.stats.gaussian_kde(x)`: a dataclass with `init=False` and
    its own `__init__`, once built as if it took its fields (`neff=...`)."""

    def f(x):
        kde = jax.scipy.stats.gaussian_kde(x)
        return jnp.sum(kde.evaluate(jnp.array([[0.0, 0.5]])))

    x = jnp.array([[0.1, -0.4, 0.8, 1.1]])
    _close(kt.grad(f)(x), jax.grad(f)(x), rtol=1e-4)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["a", "b"], meta_fields=[])
@dataclasses.dataclass
class Own:
    a: jax.Array
    b: jax.Array

    def __init__(self, x):
        self.a = x * 2.0
        self.b = jnp.sin(x)


def test_dataclass_with_its_own_init():
    def f(x):
        p = Own(x)
        return jnp.sum(p.a * p.b)

    _close(kt.grad(f)(R), jax.grad(f)(R))
    _close(kt.jvp(f, (R,), (V,)), jax.jvp(f, (R,), (V,)))


# -- a pytree whose static field is a closure over a traced value (flax kernels) ---
@functools.partial(jax.tree_util.register_dataclass, data_fields=["z"], meta_fields=["kernel_fn"])
@dataclasses.dataclass
class VK:
    kernel_fn: Callable
    z: jax.Array

    def __call__(self, x):
        return self.kernel_fn(x, self.z)


def test_static_field_closure_over_traced_value_is_refused():
    """Its closure would reach the method (run by JAX's tracer) as our
    derivative form, its captured `ls` with no gradient: refused naming the
    line, not a bare TypeError from JAX."""

    def f(ls, z):
        base = lambda a, b: jnp.sum(a * b) * ls  # noqa: E731
        return jnp.sum(VK(base, z)(R))

    with pytest.raises(
        KTransformError, match="given .*, a function of the code being differentiated"
    ) as info:
        kt.grad(f)(2.0, R)
    assert "VK(base, z)(R)" in str(info.value)
