"""Matrix products differentiate to contractions, not to broadcast products.

Session 13 wrote the gradient of `W @ h` for h a vector as a broadcast
product `dout[:, None] * W` summed over rows: the same numbers, but a [m, n]
elementwise product and a column reduction in every step of an RNN
(bench/static_loops.py rnn32 ran 0.20 ms against 0.10 ms). The jaxpr of the
gradient now holds dot_generals only; values against jax.grad.
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt


def rnn(w, xs):
    h = jnp.zeros(w.shape[0])
    for t in range(xs.shape[0]):
        h = jnp.tanh(w @ h + xs[t])
    return jnp.sum(h * h)


def _args():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return 0.3 * jax.random.normal(k1, (5, 5)), jax.random.normal(k2, (12, 5))


def _mul_shapes(jaxpr) -> list:
    """Output shapes of every `mul` in `jaxpr` and the jaxprs inside it."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "mul":
            shapes.append(tuple(eqn.outvars[0].aval.shape))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            shapes.extend(_mul_shapes(sub))
    return shapes


def test_matrix_vector_gradient_is_a_contraction():
    w, xs = _args()
    grads = kt.grad(rnn, grad_position=(0, 1))
    for ours, theirs in zip(grads(w, xs), jax.grad(rnn, argnums=(0, 1))(w, xs), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    # The loop indexes xs with its counter: a lax.scan (control.policy). dW
    # is an outer product, one [5, 5] mul in the reverse body; dh must not
    # be a [5, 5] product too (it was: two).
    squares = [s for s in _mul_shapes(jax.make_jaxpr(grads)(w, xs).jaxpr) if s == (5, 5)]
    assert len(squares) == 1, squares


@pytest.mark.usefixtures("x64")
def test_vector_gradients_of_each_rank():
    """x @ a vector for x a vector, a matrix and a batch: float64 finite
    differences (jax.grad is the oracle above)."""
    rng = np.random.default_rng(0)
    for shape in [(4,), (3, 4), (2, 3, 4)]:
        x, y = rng.normal(size=shape), rng.normal(size=(4,))
        u = rng.normal(size=shape[:-1])  # a cotangent of the product's shape

        def f(x, y, u=u):
            return jnp.sum((x @ y) * u)

        dx, dy = kt.grad(f, grad_position=(0, 1))(x, y)
        np.testing.assert_allclose(dx, u[..., None] * y, rtol=1e-12)  # closed form
        eps = 1e-6
        fd = [(f(x, y + eps * e) - f(x, y - eps * e)) / (2 * eps) for e in np.eye(4)]
        np.testing.assert_allclose(dy, fd, rtol=1e-6, atol=1e-9)
