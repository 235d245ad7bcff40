"""Session 29's edges: a NamedTuple's gradient built as its items by a rule
(`jnp.stack(s)`, `jnp.concatenate(s)`, `ops.AddN()(s)`, a user's rule) met
the gradient of one of its fields; JAX's rules at the points where a library
body returns a constant branch (`expn(n, 0)`, `hyp1f1(a, b, 0)`); the
message refusing a function that changes its own mutable default."""

from __future__ import annotations

import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import ops

X = np.array([0.3, 1.2, 2.5])
V = np.array([0.7, -0.2, 0.4])


def close(got, want, tol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


# -- a NamedTuple's gradient: one structure however it was made -----------------------
class Stats(typing.NamedTuple):
    total: object
    spread: object


def stats(x):
    return Stats(jnp.sum(x), jnp.sum(jnp.sin(x) * x))


def field_and_stack(x):  # the field's gradient is a Stats, the stack's was a tuple
    s = stats(x)
    return s.total + jnp.sum(jnp.stack(s))


def stack_and_field(x):  # the other order
    s = stats(x)
    return jnp.sum(jnp.stack(s)) * s.spread


def stack_only(x):  # the stack's gradient alone reaches `Stats(...)`'s rule
    return jnp.sum(jnp.stack(stats(x)) * jnp.array([1.0, 3.0]))


def stack_keywords(x):  # fields given out of order
    s = Stats(spread=jnp.sum(x), total=jnp.sum(x * x))
    return jnp.sum(jnp.stack(s) * jnp.array([1.0, 3.0]))


def concat_and_field(x):
    s = Stats(x, x * 2.0)
    return jnp.sum(jnp.concatenate(s) ** 2) + jnp.sum(s.total)


def plus_tuple(x):  # `s + (v,)`: the concatenation's gradient, cut back to a Stats
    t = stats(x) + (x[0],)
    return t[0] * t[2] + t[1]


def mapped_then_stacked(x):
    t = jax.tree_util.tree_map(lambda v: v * 2.0, stats(x))
    return t.total * jnp.sum(jnp.stack(t))


ADD_N = ops.AddN()


def add_n_only(x):
    return jnp.sum(ADD_N(Stats(jnp.sin(x), x * x)))


def add_n_reference(x):
    return jnp.sum(jnp.sin(x) + x * x)


NAMED = [field_and_stack, stack_and_field, stack_only, stack_keywords, concat_and_field]
NAMED += [plus_tuple, mapped_then_stacked]


@pytest.mark.parametrize("fn", NAMED, ids=lambda f: f.__name__)
def test_namedtuple_gradient_one_structure(fn):
    close(kt.grad(fn)(X), jax.grad(fn)(X))
    close(kt.jvp(fn, (X,), (V,))[1], jax.jvp(fn, (X,), (V,))[1])


def test_namedtuple_gradient_second_order():
    got = kt.grad(lambda x: jnp.sum(kt.grad(field_and_stack)(x) * V))(X)
    close(got, jax.grad(lambda x: jnp.sum(jax.grad(field_and_stack)(x) * V))(X))


def test_add_n_of_a_namedtuple():
    close(kt.grad(add_n_only)(X), jax.grad(add_n_reference)(X))


def test_stacked_namedtuple_input_gets_its_type():
    s = Stats(X, V)
    fn = lambda s: jnp.sum(jnp.sin(jnp.stack(s)))  # noqa: E731
    got, want = kt.grad(fn)(s), jax.grad(fn)(s)
    assert type(got) is Stats
    close(got.total, want.total)
    close(got.spread, want.spread)


def test_stack_of_an_array_has_an_array_gradient():
    x = np.arange(6.0).reshape(2, 3) / 7.0
    w = jnp.arange(6.0).reshape(3, 2)
    fn = lambda x: jnp.sum(jnp.sin(jnp.stack(x, axis=1)) * w)  # noqa: E731
    close(kt.grad(fn)(x), jax.grad(fn)(x))
    close(kt.jvp(fn, (x,), (x,))[1], jax.jvp(fn, (x,), (x,))[1])


class PairSum(kt.Primitive):
    """A user's primitive over a pair whose rule gives the pair's gradient as a tuple."""

    n_inputs = 1

    def impl(self, pair):
        return pair[0] + pair[1]


@kt.bprop_getters.register(PairSum)
def _get_bprop_pair_sum(self):
    return lambda pair, out, dout: ((dout, dout),)


PAIR_SUM = PairSum()


def test_a_users_rule_giving_a_namedtuple_a_tuple():
    def fn(x):
        s = Stats(jnp.sin(x), x * x)
        return jnp.sum(PAIR_SUM(s) * s.total) + jnp.sum(PAIR_SUM(Stats(x, x * 3.0)))

    want = jax.grad(lambda x: jnp.sum((jnp.sin(x) + x * x) * jnp.sin(x) + x + x * 3.0))(X)
    close(kt.grad(fn)(X), want)


# -- JAX's rules where a library body takes a constant branch -----------------------
# `hyp1f1(a, b, 0)` is 1 (its series loop runs no step) and `hyp1f1(a, a, x)`
# is `exp(x)`: differentiating those branches gave 0 where JAX's rule (the
# true slope) does not. `expn(n, 0)`'s slope is -E_(n-1)(0) = -1 / (n - 2);
# JAX's rule reads its own E_(n-1)(0), 1 / (n - 1) (scipy: 1 / (n - 2)).
def test_hyp1f1_slope_at_zero_is_a_over_b(x64):
    x = jnp.array([0.0, 0.5])
    fn = lambda x: jnp.sum(jax.scipy.special.hyp1f1(1.0, 2.0, x))  # noqa: E731  (e^x - 1) / x
    e = np.exp(0.5)
    close(kt.grad(fn)(x), [1.0 / 2.0, (e * (0.5 - 1.0) + 1.0) / 0.25], 1e-10)  # a / b at 0
    second = kt.grad(lambda x: jnp.sum(kt.grad(fn)(x)))(x)
    close(second[0], 1.0 * 2.0 / (2.0 * 3.0), 1e-10)  # the series' next term
    close(kt.jvp(fn, (x,), (jnp.array([1.0, 0.0]),))[1], 0.5, 1e-10)
    inside = lambda x: jnp.sum(jax.vmap(lambda t: jax.scipy.special.hyp1f1(1.0, 2.0, t))(x))  # noqa: E731
    close(kt.grad(inside)(x)[0], 0.5, 1e-10)  # (imported from a jaxpr)


def test_hyp1f1_slopes_in_a_and_b_where_a_equals_b(x64):
    """1F1(a; a; x) = e^x for every a, but its slope in a alone is
    sum_k x^k / k! (psi(a + k) - psi(a)): at a = b = 1, sum_k x^k / k! H_k."""
    x = 0.5
    k = np.arange(1, 40)
    harmonic = np.cumsum(1.0 / k)
    factorial = np.cumprod(k.astype(float))
    want = np.sum(x**k / factorial * harmonic)
    fn = lambda a, b: jax.scipy.special.hyp1f1(a, b, x)  # noqa: E731
    close(kt.grad(fn, (0, 1))(1.0, 1.0), (want, -want), 1e-10)


def test_expn_slope_at_zero_is_the_true_one(x64_eager):
    x = jnp.array([0.0, 0.5])
    for n in (3, 4):
        fn = lambda x, n=n: jnp.sum(jax.scipy.special.expn(n, x))  # noqa: E731
        close(kt.grad(fn)(x)[0], -1.0 / (n - 2), 1e-12)
    close(kt.grad(lambda x: jnp.sum(kt.grad(fn)(x)))(x)[0], 1.0, 1e-12)  # E_4'' = E_2: 1 at 0
    close(kt.jvp(fn, (x,), (jnp.array([1.0, 0.0]),))[1], -0.5, 1e-12)
    baked = lambda x: jnp.sum(jax.vmap(lambda t: jax.scipy.special.expn(3, t))(x))  # noqa: E731
    close(kt.grad(baked)(x)[0], -1.0, 1e-12)


def test_other_constant_branches_take_jax_rules(x64):
    """`poch(z, m)` is 1 at m = 0 (slope digamma(z) there), `hyp2f1` 1 at
    x = 0 (slope ab/c), `owens_t` an exact formula at a = 1 (slope
    exp(-h^2) / 4 pi), `dawsn`'s body divides by x, `i0`'s has `abs`'s kink."""
    sp = jax.scipy.special
    close(kt.grad(lambda m: sp.poch(1.0, m))(0.0), -np.euler_gamma, 1e-10)
    close(kt.grad(lambda x: sp.hyp2f1(1.5, 2.0, 3.0, x))(0.0), 1.0, 1e-10)
    close(kt.grad(lambda a: sp.owens_t(0.3, a))(1.0), np.exp(-0.09) / (4 * np.pi), 1e-10)
    close(kt.grad(sp.dawsn)(0.0), 1.0, 1e-12)
    i0 = lambda x: jnp.sum(jax.vmap(jnp.i0)(x))  # noqa: E731  (imported from a jaxpr)
    x = jnp.array([0.0, 0.5])
    close(kt.grad(i0)(x), [0.0, 0.2578943053908963], 1e-10)  # i1
    close(kt.grad(lambda x: jnp.sum(kt.grad(i0)(x)))(x)[0], 0.5, 1e-10)  # i1'(0)


# -- a function that changes its own mutable default --------------------------------
def appends_to_its_default(x, acc=[]):  # noqa: B006 - the construct under test
    acc.append(1.0)
    return jnp.sum(x**2) * len(acc)


def sets_in_its_default(x, *, seen={}):  # noqa: B006
    seen["calls"] = 1
    return jnp.sum(x**2) * len(seen)


@pytest.mark.parametrize(
    "fn, name, fresh",
    [(appends_to_its_default, "acc", "[]"), (sets_in_its_default, "seen", "{}")],
)
def test_changing_its_own_default_is_refused_naming_the_default(fn, name, fresh):
    with pytest.raises(kt.KTransformError) as info:
        kt.grad(fn)(jnp.ones(3))
    message = str(info.value)
    assert f"changes `{name}`, its own default value" in message
    assert f"every call leaving `{name}` out shares" in message
    assert f"`if {name} is None: {name} = {fresh}`" in message
    assert "the caller would not see" not in message
    assert __file__ in message and ("acc.append(1.0)" in message or 'seen["calls"] = 1' in message)
    defaults = [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
    assert not any(defaults)  # the trace changed a copy: the default is as `def` made it


# -- slogdet's result is JAX's NamedTuple (helper-82's hunt) --------------------------
def _slogdet_fields(x):
    m = jnp.eye(3) * 2.0 + jnp.outer(x, x) * 0.1
    r = jnp.linalg.slogdet(m)
    return r.logabsdet * r.sign + r[1]


def test_slogdet_fields_are_read_by_name():
    # was: AttributeError "'tuple' object has no attribute 'logabsdet'"
    x = jnp.array([0.3, 1.2, 2.5])
    np.testing.assert_allclose(kt.grad(_slogdet_fields)(x), jax.grad(_slogdet_fields)(x), rtol=1e-5)
    np.testing.assert_allclose(
        kt.hessian(_slogdet_fields)(x), jax.hessian(_slogdet_fields)(x), rtol=1e-4, atol=1e-6
    )
