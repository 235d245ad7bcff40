"""Inputs a transform does not differentiate are constants to it, not inputs with zero tangents.

JAX's zero tangents and cotangents are symbolic: a gradient nobody asked for
is never computed. k_transform's are arrays of zeros, so a gradient computed
and thrown away at first order is transposed at second order, and where it
is infinite (`log1p(-y)` at a hard label `y` of 1) the zero cotangent times
it is NaN. These programs (optax's `sigmoid_focal_loss` with 0/1 labels, a
found case) gave NaN from `kt.jvp` and `kt.hessian` where JAX gives numbers:

- a helper given a constant (`loss(logits, LABELS)`): K of the helper is made
  for that call, differentiated w.r.t. the other arguments only
  (`dfunctor.CallFlags`);
- a segment of forward mode whose input has no tangent
  (`forward.double_reverse(part, mask)`);
- an input left to its default in `kt.jvp` (`transforms.jvp_graph(given=...)`).

Parameters read by such a helper keep their gradients (checked against JAX).
Oracle: JAX on the same functions, in float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

LABELS = np.array([1.0, 0.0, 1.0])  # hard labels: log1p(-y) is -inf at 1
X = np.array([0.3, -0.2, 1.1])
T = np.array([0.7, -1.3, 0.4])


def focal(logits, labels):  # the shape of optax's sigmoid_focal_loss
    labels = jnp.astype(labels, logits.dtype)
    return jnp.sum(jax.nn.softplus(logits + jnp.log1p(-labels)))


def mixed(logits, labels):  # the constant meets the input through ones_like
    labels = labels * jnp.ones_like(logits)
    return jnp.sum(jax.nn.softplus(logits + jnp.log1p(-labels)))


def with_default(logits, labels=LABELS):
    labels = labels * jnp.ones_like(logits)
    return jnp.sum(jax.nn.softplus(logits + jnp.log1p(-labels)))


def looped(logits, labels):  # forward mode's segments (a loop: J, not one double reverse)
    total = 0.0
    for k in range(2):
        total = total + mixed(logits * (k + 1.0), labels)
    return total


CASES = {
    "astype": lambda z: focal(z, LABELS),
    "ones_like": lambda z: mixed(z, LABELS),
    "default": with_default,
    "loop": lambda z: looped(z, LABELS),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_mode_and_hessian_match_jax(name):
    f = CASES[name]
    want_out, want_jv = jax.jvp(f, (X,), (T,))
    out, jv = kt.jvp(f, (X,), (T,))
    np.testing.assert_allclose(out, want_out, rtol=1e-12)
    np.testing.assert_allclose(jv, want_jv, rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)


def test_jvp_of_a_function_whose_default_is_left_out_matches_jax():
    want = jax.jvp(with_default, (X,), (T,))[1]
    assert np.isfinite(want)
    np.testing.assert_allclose(kt.jvp(with_default, X, T)[1], want, rtol=1e-12)


def _dense(x, w, scale):
    return jnp.tanh(x @ w) * scale


class Net(kt.nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.linspace(-0.5, 0.5, 6).reshape(3, 2), name="w")

    def construct(self, x):
        return jnp.sum(_dense(x, self.w, 2.0) ** 2)  # the helper is given a constant scale


def test_parameters_read_through_a_helper_given_constants_keep_their_gradients():
    net = Net()
    x = np.array([[0.2, -0.1, 0.4]])
    got = kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))(x)

    def loss(w):
        return jnp.sum(_dense(x, w, 2.0) ** 2)

    np.testing.assert_allclose(got[0], jax.grad(loss)(np.asarray(net.w)), rtol=1e-12)


def test_a_function_given_to_a_helper_stays_differentiated():
    def apply(fn, x, k):
        return fn(x) * k

    def f(x):
        return jnp.sum(apply(lambda v: jnp.sin(v) * x[0], x, 3.0))

    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.jvp(f, (X,), (T,))[1], jax.jvp(f, (X,), (T,))[1], rtol=1e-12)
