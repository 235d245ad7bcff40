"""Derivatives where code not differentiated holds an infinity.

JAX gives numbers here: a stopped value, an input not differentiated and the
branch `where` does not take are never differentiated, so `0 * inf` never
happens. k_transform pushed zeros through them (`0 * inf = NaN`) until each
was made a constant of the gradient (found by helper-28 and helper-29 on
numpyro's Beta, optax's sigmoid focal loss and jax-md's Lennard-Jones).
Every number is checked against JAX's, in float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


@pytest.fixture(autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


def close(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-10, atol=1e-12)


def stopped(c, v):
    return jnp.sum(jax.lax.stop_gradient(jnp.log(v) * c) + c)


def test_stop_gradient_cuts_the_code_it_stops():
    """A zero pushed through `log(v) * c` at v = 0 was NaN (numpyro's
    Beta.log_prob at 0 and 1)."""
    c, v = jnp.array([2.0, 3.0]), jnp.array([0.0, 0.5])
    close(kt.grad(stopped)(c, v), jax.grad(stopped)(c, v))
    close(kt.hessian(stopped)(c, v), jax.hessian(stopped)(c, v))


def focal(x, y):
    return jnp.sum(jax.nn.softplus(x + jnp.log1p(-y)))


def test_an_input_not_differentiated_is_a_constant():
    """`kt.hessian(f, 0)` computed y's gradient too, infinite at y = 1, and
    its second order met `0 * inf` (optax's sigmoid_focal_loss with 0/1
    labels: a Hessian of NaNs)."""
    x, y = jnp.array([0.3, -0.2]), jnp.array([1.0, 0.0])
    close(kt.hessian(focal, 0)(x, y), jax.hessian(focal, 0)(x, y))
    close(kt.grad(lambda x, y: jnp.sum(kt.grad(focal)(x, y) ** 2))(x, y),
          jax.grad(lambda x, y: jnp.sum(jax.grad(focal)(x, y) ** 2))(x, y))  # fmt: skip
    # both inputs differentiated: y's gradient is infinite, as JAX's
    got = kt.grad(focal, grad_position=(0, 1))(x, y)
    close(got, jax.grad(focal, (0, 1))(x, y))


def guarded_log(t):
    return jnp.sum(jnp.where(t == 0, 0.0, jnp.log(t)))


def clipped_reciprocal(x):
    return jnp.sum(jnp.nan_to_num(1.0 / x))


def kl_div(lp, t):
    return jnp.sum(t * (jnp.where(t == 0, 0, jnp.log(t)) - lp))


def maximum_of_log(t):
    return jnp.sum(jnp.maximum(jnp.log(t), -1.0))


def clipped_log(t):
    return jnp.sum(jnp.clip(jnp.log(t), -1.0, None))


@pytest.mark.parametrize(
    "f, x",
    [
        (guarded_log, [0.0, 1.0, 2.0]),
        (clipped_reciprocal, [0.0, 1.0]),
        (lambda t: kl_div(jnp.zeros(3), t), [0.0, 1.0, 2.0]),
    ],
    ids=["where", "nan_to_num", "kl_div"],
)
def test_forward_mode_through_a_branch_not_taken(f, x):
    """jvp is the transpose of the bprop: a rule giving one branch `dout`
    less the other's share transposed to `inf - inf` where the branch not
    taken is infinite (JAX's jvp selects). Each share is now selected."""
    x = jnp.array(x)
    v = jnp.ones_like(x)
    close(kt.jvp(f, (x,), (v,)), jax.jvp(f, (x,), (v,)))


@pytest.mark.parametrize("f", [maximum_of_log, clipped_log], ids=["maximum", "clip"])
def test_forward_mode_through_the_side_of_a_kink_not_taken(f):
    """`maximum(log t, -1)` at t = 0: the log is not taken, so the tangent is
    0 there, 1/t elsewhere (closed form: 1 + 1/2). JAX's jvp multiplies the
    log's infinite tangent by a 0 mask and gives NaN; so did ours."""
    t = jnp.array([0.0, 1.0, 2.0])
    out, tangent = kt.jvp(f, (t,), (jnp.ones(3),))
    close(out, f(t))
    close(tangent, 1.5)
