"""The incomplete gamma and beta functions and the Hurwitz zeta function
(`ops/lax_rules.py`), and call-site activity for library calls.

Oracle: JAX on the same code, float64. Where JAX has no derivative (betainc
w.r.t. a or b, the incomplete gamma function twice w.r.t. a), ours refuses,
naming the function and the user's line; zeta w.r.t. s (JAX: through a
series expansion) is refused the same way. A library call's arguments that
are constants at the call (`betainc(2.0, 3.0, x)`) are not differentiated
(`DFunctor.call_flags`, `traced._compiled_k`), per order: an argument that
is a constant at the first order and differentiated at the second (a
closure variable of an inner gradient) gets its gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")

X = np.array([0.3, 0.7, 1.5])
A = np.array([0.8, 2.0, 3.5])

CASES = {
    "gammainc_x": (lambda x: jnp.sum(jnp.sin(jsp.gammainc(A, x))), X),
    "gammainc_a": (lambda a: jnp.sum(jnp.sin(jsp.gammainc(a, X))), A),
    "gammaincc_x": (lambda x: jnp.sum(jsp.gammaincc(2.0, x) ** 2), X),
    "gammaincc_a": (lambda a: jnp.sum(jsp.gammaincc(a, 1.2)), A),
    "betainc_x": (lambda x: jnp.sum(jnp.cos(jsp.betainc(2.0, 3.0, x / 2))), X),
    "betainc_x_array_a": (lambda x: jnp.sum(jsp.betainc(A, 3.0, x / 2)), X),
    "zeta_q": (lambda q: jnp.sum(jsp.zeta(3.0, q + 1.0)), X),
}
SECOND_IN_X = ("gammainc_x", "gammaincc_x", "betainc_x", "betainc_x_array_a", "zeta_q")


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_and_jvp_match_jax(name):
    f, at = CASES[name]
    v = np.cos(at)
    np.testing.assert_allclose(kt.grad(f)(at), jax.grad(f)(at), rtol=1e-10)
    np.testing.assert_allclose(kt.jvp(f, at, v)[1], jax.jvp(f, (at,), (v,))[1], rtol=1e-10)


@pytest.mark.parametrize("name", SECOND_IN_X)
def test_second_order_in_x_matches_jax(name):
    f, at = CASES[name]

    def second(grad):
        return grad(lambda u: jnp.sum(grad(f)(u) * jnp.cos(u)))(at)

    np.testing.assert_allclose(second(kt.grad), second(jax.grad), rtol=1e-9)


def test_a_constant_of_the_first_order_differentiated_at_the_second():
    """d/da of d/dx P(a, x): `a` is a constant of the inner gradient (its
    library call differentiates x only) and the outer gradient's input."""

    def outer(grad):
        return grad(lambda a: jnp.sum(grad(lambda x: jnp.sum(jsp.gammainc(a, x)))(X)))(A)

    np.testing.assert_allclose(outer(kt.grad), outer(jax.grad), rtol=1e-9)

    def norm_outer(grad):  # `norm(y)`: a constant of the inner gradient's call
        inner = grad(lambda x, y: jnp.linalg.norm(x) * jnp.linalg.norm(y), argnums=0)
        return grad(lambda y: jnp.sum(inner(X, y) * X))(A)

    np.testing.assert_allclose(norm_outer(kt.grad), norm_outer(jax.grad), rtol=1e-9)


@pytest.mark.parametrize(
    "name, f, at, words",
    [
        ("betainc_a", lambda a: jnp.sum(jsp.betainc(a, 3.0, 0.4)), A, "w.r.t. a or b"),
        ("betainc_b", lambda b: jnp.sum(jsp.betainc(2.0, b, 0.4)), A, "w.r.t. a or b"),
        ("zeta_s", lambda s: jnp.sum(jsp.zeta(s + 2.0, 1.5)), X, "w.r.t. s"),
        (
            "gammainc_twice_in_a",
            lambda a: jnp.sum(kt.grad(lambda a: jnp.sum(jsp.gammainc(a, 1.5)))(a)),
            A,
            "twice w.r.t. its parameter a",
        ),
    ],
)
def test_no_derivative_is_refused_at_the_users_line(name, f, at, words):
    """Never a zero: JAX raises for betainc's a and b and igamma twice in a."""
    with pytest.raises(kt.KTransformError, match=words) as caught:
        kt.grad(f)(at)
    assert "test_incomplete_special30.py" in str(caught.value)
