"""`expn` and `expi` get JAX's own rules (`ops/special.py`, oracle: JAX and
closed forms). Differentiating `expn`'s steps met `0 / 0` in a select's arm
not taken: NaN at x = 0.3 where JAX's rule gives -0.906."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

X = np.array([0.3, 1.2, 2.5])

CASES = {
    "expn(2, x)": (lambda x: jnp.sum(jsp.expn(2, x)), lambda x: np.exp(-x) / x),
    "expn(3, x) * x": (lambda x: jnp.sum(jsp.expn(3, x) * x), None),
    "exp1 in a vmap": (
        lambda x: jnp.sum(jax.vmap(jsp.exp1)(x)),
        lambda x: np.exp(-x) / x + np.exp(-x) / x**2,
    ),
    "expn(2, t) in a vmap": (
        lambda x: jnp.sum(jax.vmap(lambda t: jsp.expn(2, t))(x)),
        lambda x: np.exp(-x) / x,
    ),
    "expi": (
        lambda x: jnp.sum(jsp.expi(x - 1.0)),
        lambda x: np.exp(x - 1) / (x - 1) - np.exp(x - 1) / (x - 1) ** 2,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exponential_integrals_match_jax(name):
    f, second = CASES[name]
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.jvp(f, (X,), (X,))[1], jax.jvp(f, (X,), (X,))[1], rtol=1e-12)
    if second is not None:  # (JAX's own Hessian of expn fails: its n is a tracer there)
        np.testing.assert_allclose(np.diag(kt.hessian(f)(X)), second(X), rtol=1e-10)


def test_expn_of_order_zero_has_the_slope_of_exp_over_x():
    """JAX's rule asks E_-1 (NaN) there; d/dx exp(-x)/x is closed form."""

    def f(x, n):
        return jnp.sum(jsp.expn(n, x))

    want = -np.exp(-X) / X - np.exp(-X) / X**2
    np.testing.assert_allclose(kt.grad(f)(X, 0), want, rtol=1e-12)
    np.testing.assert_allclose(kt.grad(lambda x: f(x, np.int64(0)))(X), want, rtol=1e-12)
