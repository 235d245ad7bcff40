"""Hunt 31: programs written the way public JAX code is, each against JAX's
gradient of the same function (float64).

A hand-written optimizer object called as a function (`opt(params, grads)`,
its `__call__` keeping moments in `self`) whose call crossed the trace of
one call into the next: `__call__` writing its object is now refused for
parsing as `opt.step(...)` is, so the function runs as Python under one
trace (was an UnexpectedTracerError).

`jax.scipy.special.i0` is `jnp.i0` (JAX writes it `exp(|x|) * i0e(x)`, whose
kinks at 0 gave a second derivative of 1.5 there, as JAX's own gradient
does): it is now the same primitive. Oracle: the closed form
`I0''(x) = I0(x) - I1(x) / x`, 1/2 at 0."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np

import k_transform as kt

W = jnp.array([0.5, -1.0, 0.7])
X = jnp.array([1.0, 2.0, -0.3])


class RMSProp:
    def __init__(self, lr):
        self.lr = lr
        self.sq = {}
        self.t = 0

    def __call__(self, params, grads):
        self.t += 1
        out = {}
        for k, p in params.items():
            s = 0.9 * self.sq.get(k, 0.0) + 0.1 * grads[k] ** 2
            self.sq[k] = s
            out[k] = p - self.lr * grads[k] / jnp.sqrt(s + 1e-6)
        return out


class Momentum:
    def __init__(self):
        self.vel = None

    def __call__(self, p, g):
        self.vel = g if self.vel is None else 0.9 * self.vel + g
        return p - 0.1 * self.vel


def rmsprop_loss(w, x):
    opt = RMSProp(0.01)
    params = {"w": w}
    for _ in range(3):
        params = opt(params, {"w": jnp.cos(params["w"]) * x})
    return jnp.sum(params["w"] ** 2) * opt.t


def momentum_loss(w, x):
    opt = Momentum()
    p = w
    for _ in range(3):
        p = opt(p, jnp.sin(p * x))
    return jnp.sum(p**2)


def test_optimizer_object_called_keeps_its_state():
    for loss in (rmsprop_loss, momentum_loss):
        for w in (W, jnp.zeros(3)):
            want = jax.grad(loss)(w, X)
            np.testing.assert_allclose(kt.grad(loss)(w, X), want, rtol=1e-6, atol=1e-9)


def i0_sum(x):
    return jnp.sum(jss.i0(x))


def test_scipy_i0_second_derivative_at_zero():
    x = jnp.array([0.0, 1.3, -0.7])
    safe = jnp.where(x == 0, 1.0, x)
    want = jnp.where(x == 0, 0.5, jss.i0(x) - jss.i1(x) / safe)
    np.testing.assert_allclose(jnp.diag(kt.hessian(i0_sum)(x)), want, rtol=1e-6, atol=1e-9)


# -- a lambda whose default the program computes (the loop-capture idiom) -------------
def grad_of_defaulted_lambda(w, x):
    g = jax.grad(lambda p, x=x: jnp.sum(jnp.cos(p * x) * p))(w)
    return jnp.sum(g * x)


def test_a_lambda_with_a_computed_default_given_to_jax_grad():
    """Was refused ("missing 1 required positional argument: 'x'"): the
    lambda reads no free variable, so its default was not passed."""
    w, x = np.array([0.5, -1.0, 0.7]), np.array([1.0, 2.0, -0.3])
    for k in (0, 1):
        np.testing.assert_allclose(
            kt.grad(grad_of_defaulted_lambda, grad_position=k)(w, x),
            jax.grad(grad_of_defaulted_lambda, argnums=k)(w, x),
            rtol=1e-6,
        )
