"""Results a program never reads send no cotangent back (oracle: JAX).

A zero cotangent is a number: times an infinite slope it is NaN, where JAX,
whose zeros are symbolic, never multiplies. K of a call is made for the
items of its result the caller reads (`DFunctor.used_items`), and an owner
looks in a closure's env only for what the closure's K can send back
(`reads._live_reads`). Each case gave NaN before.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

X = np.array([0.3, 1.2, 2.5])


def stats(x):  # the second result is sqrt(0): an infinite slope, never read
    return jnp.sum(x), jnp.sqrt(jnp.sum(x * x) - jnp.sum(x * x))


def first_only(x):
    s, _ = stats(x)
    return s * s


def nested(x):
    def parts(x):
        return x[0], (jnp.sum(x), stats(x)[1])

    a, (b, _) = parts(x)
    return a * b


def whole_and_item(x):  # the whole tuple read too: every item's cotangent counts
    t = stats(x)
    return t[0] + jnp.sum(jnp.stack([t[0], t[0]])) + 0.0 * len(t)


def by_negative_index(x):
    t = stats(x)
    return t[-2] * 2.0


def pair(x):
    return jnp.sum(x * x), jnp.prod(x)


def passed_on(x):  # the helper returns a call's whole tuple: every item of it counts
    def helper(x):
        t = pair(x)
        return (t, jnp.max(x)), jnp.sum(x)

    (t, _), _ = helper(x)
    return t[0] + t[1]


def encoder_stats(x):  # a VAE's encoder: ((mu, logvar), h), read as (mu, logvar)
    w = jnp.array([[0.5, -0.2, 0.1], [0.3, 0.8, -0.5]])

    def encoder(x):
        h = jnp.tanh(w @ x)
        return (h[0], h[1]), h

    def model(x):
        stats, h = encoder(x)
        return stats, jnp.sum(h)

    (mu, logvar), _ = model(x)
    return mu**2 + jnp.exp(logvar)


def value_of_value_and_grad(x):  # kt.value_and_grad's result read by item
    def g(x):
        return jnp.sum(jnp.sin(x) * x), jnp.prod(x)

    (v, aux), _ = kt.value_and_grad(g, has_aux=True)(x)
    return v * aux


class Stats(NamedTuple):
    total: object
    spread: object  # sqrt(0): never read


def named_stats(x):
    return Stats(jnp.sum(x), jnp.sqrt(jnp.sum(x * x) - jnp.sum(x * x)))


def by_field(x):
    return named_stats(x).total ** 2


def by_unpacking(x):
    total, _ = named_stats(x)
    return total**2


def every_field(x):  # every field read: each cotangent counts
    s = named_stats(x)
    return s.total + s[0] + s.spread * 0.0


CASES = [first_only, nested, whole_and_item, by_negative_index, passed_on, encoder_stats]
CASES += [by_field, by_unpacking]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_unused_results_of_a_helper_at_first_and_second_order_match_jax(f, x64):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-14)
    got = kt.grad(lambda x: jnp.sum(kt.grad(f)(x)))(X)
    np.testing.assert_allclose(got, jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))(X), rtol=1e-12)
    out, tangent = kt.jvp(f, (X,), (X,))
    want_out, want_tangent = jax.jvp(f, (X,), (X,))
    np.testing.assert_allclose([out, tangent], [want_out, want_tangent], rtol=1e-12)


def test_lstsq_of_a_rank_deficient_matrix_in_float32_matches_jax():
    def fit(a, y):
        coef, _, _, _ = jnp.linalg.lstsq(a, y)  # the residuals are sqrt(0)
        return jnp.sum(coef**2)

    a = jnp.array([[1.0, 2.0], [2.0, 4.0]])
    y = jnp.array([1.0, 2.0])
    want = jax.grad(fit)(a, y)
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(kt.grad(fit)(a, y), want, rtol=1e-4)


@pytest.mark.parametrize(
    "f, at",
    [(lambda x: jnp.log(x), 0.0), (lambda x: jnp.arcsin(x), 1.0), (lambda x: x**0.5, 0.0)],
    ids=["log at 0", "arcsin at 1", "sqrt as a power at 0"],
)
def test_second_derivative_at_an_infinite_slope_matches_jax(f, at):
    want = jax.grad(jax.grad(f))(at)
    assert np.isinf(want)
    assert kt.grad(kt.grad(f))(at) == want
    assert kt.hessian(f)(at) == jax.hessian(f)(at)


def test_xlogy_hessian_with_a_zero_y_matches_jax(x64):
    def f(x, y):
        return jnp.sum(jsp.xlogy(x, y))

    y = np.zeros(3)
    want = jax.hessian(f)(X, y)
    np.testing.assert_array_equal(kt.hessian(f)(X, y), want)


def test_a_library_while_loop_past_its_first_buffer_grows_it(x64):
    """expn's series loop runs ~600 trips in float64: the loop has no line of
    the user's, and its overflow was raised, not retried with a larger buffer."""

    def f(x):
        return jnp.sum(jsp.expn(2, x))

    x = np.array([1.2, 2.5])
    np.testing.assert_allclose(kt.grad(f)(x), jax.grad(f)(x), rtol=1e-10)


def test_the_value_of_a_value_and_grad_read_by_item_matches_jax():
    def j(x):
        def g(x):
            return jnp.sum(jnp.sin(x) * x), jnp.prod(x)

        (v, aux), _ = jax.value_and_grad(g, has_aux=True)(x)
        return v * aux

    x = X.astype(np.float32)
    np.testing.assert_allclose(kt.grad(value_of_value_and_grad)(x), jax.grad(j)(x), rtol=1e-5)


def test_jacobian_rows_through_a_returned_tuple_match_jax():
    def v(x):
        def helper(x):
            t = pair(x)
            return t, jnp.sum(x)

        t, _ = helper(x)
        return jnp.stack([t[0], t[1] * 2.0])

    x = X.astype(np.float32)
    np.testing.assert_allclose(kt.jacrev(v)(x), jax.jacrev(v)(x), rtol=1e-5)
    np.testing.assert_allclose(kt.jacfwd(v)(x), jax.jacfwd(v)(x), rtol=1e-5)


def test_unused_result_of_a_closure_over_the_callers_values_matches_jax(x64):
    def f(x):
        w = x * 2.0

        def h(z):  # reads `w`: its K is made inside f's, for the items f reads
            return jnp.sum(z * w), jnp.sqrt(jnp.sum(w * w) - jnp.sum(w * w))

        a, _ = h(x)
        return a

    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12)


def test_the_output_and_aux_of_a_jvp_with_aux_both_count():
    v = np.array([1.0, -0.5, 0.2], np.float32)

    def ga(x):
        return jnp.sum(jnp.sin(x) * x), jnp.prod(x)

    def k(x):
        out, _, aux = kt.jvp(ga, (x,), (v,), has_aux=True)
        return out + aux

    def j(x):
        out, _, aux = jax.jvp(ga, (x,), (v,), has_aux=True)
        return out + aux

    x = X.astype(np.float32)
    np.testing.assert_allclose(kt.grad(k)(x), jax.grad(j)(x), rtol=1e-5)


def test_a_namedtuple_read_field_by_field_keeps_every_fields_cotangent(x64):
    """`s.spread * 0.0` reads the spread: JAX's NaN there (0 * inf) is ours."""
    want = jax.grad(every_field)(X)
    assert np.all(np.isnan(want))
    assert np.all(np.isnan(kt.grad(every_field)(X)))
