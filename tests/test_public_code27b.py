"""Patterns of public JAX libraries (session 27), each checked against JAX on
the same code:

1. a function given `**kwargs` passing them on to a function with its own
   `**kwargs` (jax-md's `fn(dr, **kwargs)`): the dict comprehension that
   collects the rest was refused (`_kt_acc = _kt_acc` read as a view);
2. a def with `*args` used as a value (to `jax.vmap`, to a user function,
   returned by a factory): its graph takes `*args` as one tuple, so a call
   where the program runs bound the arguments one by one (a wrong number with
   no error); now the function runs as Python, or the call is refused;
3. a helper run as Python returning an empty NamedTuple (optax `EmptyState`);
4. a library call given a closure over the caller's traced values
   (`jax.tree.map(lambda g: step_size * g, updates)`, optax `scale`): the
   values it reads are passed to the call, so they get their gradients;
5. `functools.partial(f, **kwargs)` / `partial(f, x)` of values of the
   program (every jax-md pair energy): a closure calling `f`;
6. `@custom_vjp` over `@jax.jit` (its rule is used), and a `custom_jvp` in
   forward mode (refused until session 29; now by its rule).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -1.2, 2.0])
R = jnp.arange(6.0).reshape(3, 2) / 5


def close(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


# -- 1. **kwargs passed on to a function with **kwargs -------------------------------------
def disp(ra, rb, s=1.0, **unused):
    return (ra - rb) * s


def energy(r, **kwargs):
    return jnp.sum(disp(r, 2.0 * r, **kwargs) ** 2)


@pytest.mark.parametrize("kwargs", [{}, {"s": 3.0, "box": 1.0}])
def test_kwargs_passed_on_to_kwargs(kwargs):
    close(kt.grad(energy)(X, **kwargs), jax.grad(energy)(X, **kwargs))


def pair_term(a, b, **k):
    return a * b + len(k)


def passes_kwargs_on(x, **kw):
    return pair_term(x, 2.0, **kw)


def test_kwargs_naming_a_parameter_given_by_position():
    # Python's TypeError (the key went into `**k`, a value where Python has none)
    with pytest.raises(TypeError, match="multiple values for argument 'a'") as python:
        passes_kwargs_on(1.0, a=3.0)
    with pytest.raises(TypeError) as ours:
        kt.grad(passes_kwargs_on)(1.0, a=3.0)
    assert str(ours.value) == str(python.value)


# -- 2. a def with *args used as a value -----------------------------------------------------
def vmapped_star(r):
    def g(x, *a):
        return x * 2.0 + a[0] ** 2

    return jnp.sum(jax.vmap(g)(r, r * 3.0) ** 2)


def apply(fn, x, y):
    return fn(x, y)


def passed_star(r):
    def g(x, *a):
        return x * 2.0 + a[0] ** 2

    return jnp.sum(apply(g, r, r * 3.0) ** 2)


def make_star(c):
    def g(x, *a):
        return x * c + a[0] ** 2

    return g


def returned_star(r):
    return jnp.sum(make_star(2.0)(r, r * 3.0) ** 2)


@pytest.mark.parametrize("f", [vmapped_star, passed_star, returned_star])
def test_star_args_function_as_value(f):
    close(kt.grad(f)(R), jax.grad(f)(R))
    t = jnp.ones_like(R)
    close(kt.jvp(f, (R,), (t,))[1], jax.jvp(f, (R,), (t,))[1])


def returned_star_traced(r):
    return jnp.sum(make_star(r[0, 1])(r, r * 3.0) ** 2)


def test_star_args_closure_over_traced_value_is_refused():
    # (was a wrong gradient with no error: `a` bound to the rows of `r * 3.0`)
    with pytest.raises(kt.KTransformError, match="returns a function"):
        kt.grad(returned_star_traced)(R)


# -- 3. an empty NamedTuple from a helper run as Python ------------------------------------
class EmptyState(NamedTuple):
    """An empty state (optax)."""


def init_empty_state(params):
    del params  # (a `del`: the helper runs as Python)
    return EmptyState()


def with_empty_state(p):
    s = init_empty_state(p)
    state = (init_empty_state(p), s)
    return jnp.sum(p**2) + len(s) + len(state[0])


def test_empty_namedtuple_from_python_helper():
    close(kt.grad(with_empty_state)(X), jax.grad(with_empty_state)(X))
    close(kt.jvp(with_empty_state, (X,), (X,))[1], jax.jvp(with_empty_state, (X,), (X,))[1])


# -- 4. a library call given a closure over traced values ----------------------------------
def scale(step_size):
    def update_fn(updates, state, params=None):
        updates = jax.tree.map(lambda g: step_size * g, updates)
        return updates, state

    return update_fn


def meta_loss(lr, p):
    u, _ = scale(-lr)({"w": p, "b": (p[0], p * 2.0)}, None)
    return jnp.sum((p + u["w"]) ** 2) + u["b"][0] * jnp.sum(u["b"][1])


def two_trees(lr, p):
    c = jnp.sum(p)
    t = jax.tree_util.tree_map(lambda a, b: lr * a + c * b, [p, p**2], [p * 3.0, p], is_leaf=None)
    return jnp.sum(t[0] * t[1])


@pytest.mark.parametrize("f", [meta_loss, two_trees])
def test_library_call_given_closure(f):
    close(kt.grad(f, grad_position=(0, 1))(0.1, X), jax.grad(f, argnums=(0, 1))(0.1, X))
    close(kt.jvp(f, (0.1, X), (1.0, X))[1], jax.jvp(f, (0.1, X), (1.0, X))[1])


# -- 5. functools.partial of a user function with values of the program (jax-md) ------------
def periodic_disp(ra, rb, perturbation=None, **unused_kwargs):
    d = ra - rb
    if perturbation is not None:
        d = d * perturbation
    return d


def map_product(metric):
    return jax.vmap(jax.vmap(metric, (0, None), 0), (None, 0), 0)


def pair_energy(r, **kwargs):
    d = map_product(functools.partial(periodic_disp, **kwargs))
    return 0.5 * jnp.sum(d(r, r) ** 2) + jnp.sum(functools.partial(disp, **kwargs)(r, 2.0 * r))


@pytest.mark.parametrize("kwargs", [{}, {"perturbation": 2.0, "box": 3.0}])
def test_partial_of_kwargs_dict(kwargs):
    close(kt.grad(pair_energy)(R, **kwargs), jax.grad(pair_energy)(R, **kwargs))


def partial_traced(r, y):
    d = functools.partial(periodic_disp, perturbation=y)
    e = functools.partial(periodic_disp, r)
    return jnp.sum(d(r, 2.0 * r) ** 2) + jnp.sum(e(2.0 * r, y) ** 2) + jnp.sum(e(3.0 * r) ** 2)


def test_partial_of_traced_values():
    got = kt.grad(partial_traced, grad_position=(0, 1))(R, 2.0)
    close(got, jax.grad(partial_traced, argnums=(0, 1))(R, 2.0))


# -- 6. @custom_vjp over @jit (flash-attention-jax) -----------------------------------------
@jax.custom_vjp
@jax.jit
def sin_rule(x):
    return jnp.sin(x)


@jax.jit
def sin_rule_fwd(x):
    return jnp.sin(x), (x,)


@jax.jit
def sin_rule_bwd(res, g):
    (x,) = res
    return (2.0 * g * jnp.cos(x),)  # twice the true gradient: the rule must be the one used


sin_rule.defvjp(sin_rule_fwd, sin_rule_bwd)


def uses_rule(x):
    return jnp.sum(sin_rule(x) ** 2)


def test_custom_vjp_over_jit():
    close(kt.grad(uses_rule)(X), jax.grad(uses_rule)(X))


@jax.custom_jvp
def log1mexp(x):
    return jnp.log(-jnp.expm1(x))


log1mexp.defjvps(lambda t, ans, x: -t / jnp.expm1(-x))


def uses_jvp_rule(x):
    return jnp.sum(log1mexp(x) * 2.0)


def test_custom_jvp_in_forward_mode_uses_its_rule():
    # (refused until session 29; now its rule is transposed, and forward mode,
    # built from reverse mode, gives the rule's tangent)
    x = -(X**2) - 0.1
    close(kt.jvp(uses_jvp_rule, (x,), (X,)), jax.jvp(uses_jvp_rule, (x,), (X,)))
