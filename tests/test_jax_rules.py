"""JAX functions with a gradient rule of their own (a `custom_jvp`) get JAX's
derivatives, to second order, at their special points and elsewhere, called
directly or passed as a value (read through their jaxpr): `ops.special`.
Their bodies' steps gave other numbers, silently: `xlogy(0, y)`' 0 (JAX
`log y`), `logaddexp`'' at a tie 0 (JAX 1/4), `sinc''(0)` 0, `relu'(0)`
1/2 through a jaxpr, `relu6` 1/2 at 0 and 6. Also `lax.abs` read from a
jaxpr (`jnp.linalg.norm(x, 1)`, `jnp.hypot`) gives JAX's 1 at 0, and
`jnp.prod`'s rule differentiates again exactly where entries are zero.
Oracle: jax.grad / jax.hessian / jax.jvp, float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import erfcx, xlog1py, xlogy

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

# group -> (a function of one vector, its points: special, then generic)
CASES = {
    "xlogy": (
        lambda v: xlogy(v[0], 2.0) + xlogy(v[1], v[2]) + xlog1py(v[1], v[3]),
        [[0.0, 0.0, 0.5, 1.0], [0.3, 0.4, 0.6, 0.2]],
    ),
    "logaddexp": (  # ties; log_cosh = logaddexp(e, -e) at e = 0
        lambda v: (
            jnp.logaddexp(v[0], v[1]) + jnp.logaddexp2(v[2], v[3]) + jnp.logaddexp(v[0], -v[0])
        ),
        [[0.0, 0.0, 0.5, 0.5], [1.0, -2.0, 0.3, -1.0]],
    ),
    "activations": (  # relu6 at 6, then at 0
        lambda v: (
            jax.nn.softplus(v[0])
            + jax.nn.log_sigmoid(v[1])
            + jnp.sum(jax.nn.relu6(v[2:]) * v[2:])
            + jax.nn.relu(v[2]) * v[3]
        ),
        [[0.0, 0.0, 0.0, 6.0], [1.3, -0.2, 3.0, 7.0]],
    ),
    "sinc hypot erfcx norm1": (
        lambda v: jnp.sinc(v[0]) + jnp.hypot(v[1], 0.5) + erfcx(v[2]) + jnp.linalg.norm(v, 1),
        [[0.0, 0.0, 0.0, 0.0], [0.4, 0.3, 0.7, -1.2]],
    ),
}


def _close(ours, oracle):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(oracle), rtol=1e-9, atol=1e-12)


def _check_grad_and_hessian(f, points):
    """kt.grad and kt.hessian against JAX's (jitted: one compile, not one per op)."""
    grad, hessian = kt.grad(f), kt.hessian(f)
    jax_grad, jax_hessian = jax.jit(jax.grad(f)), jax.jit(jax.hessian(f))
    for point in points:
        x = jnp.asarray(point)
        _close(grad(x), jax_grad(x))
        _close(hessian(x), jax_hessian(x))


@pytest.mark.parametrize("name", list(CASES))
def test_first_second_order_and_jvp_are_jaxs(name):
    f, points = CASES[name]
    _check_grad_and_hessian(f, points)
    x, t = jnp.asarray(points[0]), jnp.asarray([0.7, -1.1, 0.4, 1.3])
    _close(kt.jvp(f, x, t)[1], jax.jvp(f, (x,), (t,))[1])


def test_functions_passed_as_values_get_the_same_rules():
    """Read through their jaxprs (`activation=jax.nn.relu`, haiku/flax style)."""

    def mlp(x, relu=jax.nn.relu, relu6=jax.nn.relu6, softplus=jax.nn.softplus, sinc=jnp.sinc):
        return jnp.sum((relu(x) + relu6(x)) * x + softplus(x) + sinc(x) + erfcx(x))

    _check_grad_and_hessian(mlp, [[0.0, 6.0, -1.0, 0.5]])


def test_beta_log_prob_at_concentration_one():
    """numpyro's Beta and Kumaraswamy log_prob: `xlogy(c1 - 1, value)` at c1 = 1."""

    def log_prob(c1, c0, value):
        return jnp.sum(xlogy(c1 - 1.0, value) + xlog1py(c0 - 1.0, -value))

    value = jnp.asarray([0.3, 0.6])
    ours = kt.grad(log_prob, (0, 1))(1.0, 1.0, value)
    _close(ours, jax.grad(log_prob, (0, 1))(1.0, 1.0, value))


PROD_POINTS = [  # no zero; one; two in a row; a zero in every row of axis 1
    [[[3.0, 0.5], [2.0, -1.0]], [[4.0, 1.5], [0.5, 2.0]]],
    [[[3.0, 0.0], [2.0, -1.0]], [[4.0, 1.5], [0.5, 2.0]]],
    [[[3.0, 0.0], [2.0, 0.0]], [[4.0, 1.5], [0.5, 2.0]]],
    [[[0.0, 0.5], [0.0, -1.0]], [[4.0, 0.0], [0.5, 0.0]]],
]


def test_prod_hessian_with_zero_entries():
    """The rule's products of the other entries are exclusive cumprods from
    both ends, so differentiating it again keeps every term (it was
    piecewise constant in the number of zeros: Hessian entries lost)."""

    def f(x):
        over_one = jnp.sum(jnp.prod(x, axis=1) * jnp.asarray([[1.5, -0.5], [0.7, 2.0]]))
        return jnp.prod(x) + over_one + jnp.sum(jnp.prod(x, axis=(0, 2), keepdims=True) ** 2)

    _check_grad_and_hessian(f, PROD_POINTS)


def _sinc_d1(x):
    return jax.grad(jnp.sinc)(x)


def _sinc_d3(x):
    return jax.grad(jax.grad(jax.grad(jnp.sinc)))(x)


def _sinc_by_vjp(x):
    return jax.vjp(jnp.sinc, x)[1](jnp.ones_like(x))[0]


def _sinc_by_jacfwd(x):
    return jax.jacfwd(jnp.sinc)(x)


@pytest.mark.parametrize("f", [_sinc_d1, _sinc_d3, _sinc_by_vjp, _sinc_by_jacfwd])
def test_jax_derivatives_of_sinc_differentiated_at_zero(f):
    """User code taking JAX's derivative of `jnp.sinc` holds its rule's
    `_sinc_maclaurin(k, x)` for k = 1, 2, ...; each is `SincMaclaurin(k)`
    (an odd k's read from its rule's trace), whose derivative is the next
    term: `sinc''(0) = -pi**2 / 3` and `sinc''''(0) = pi**4 / 5`, where the
    bodies (`x * 0`) gave 0. Oracle: JAX's own nesting, and the closed form."""
    closed = np.pi**4 / 5 if f is _sinc_d3 else -(np.pi**2) / 3
    _close(kt.grad(f)(0.0), closed)
    # (_sinc_d3 takes seconds: JAX tracing its own third derivative, where
    # `_sinc_maclaurin(3, x)` meets ours; the only way to an odd k above 1)
    if f is not _sinc_d3:
        _close(kt.grad(f)(0.4), jax.jit(jax.grad(f))(0.4))


def test_our_third_derivative_of_a_jax_derivative_of_sinc():
    f = kt.grad(kt.grad(kt.grad(_sinc_d1)))
    _close(f(0.0), np.pi**4 / 5)
