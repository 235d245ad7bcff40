"""Functions with a rule of their own (`jax.custom_vjp`, `jax.custom_jvp`)
reached through a function value called at run time (an argument, a default
argument, an item of a tuple or dict) or through code run as Python (no
source: `exec`). Such code is traced at its values (`frontend/concrete.py`),
which used to inline these calls by their primal body: JAX's own rules
(`relu`, `xlogy`) and the user's were silently dropped. Now the call is
recorded as a call: JAX's own rules hold, the user's is refused.
Oracle: `jax.grad` / `jax.hessian` on the same code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import xlogy

import k_transform as kt
from k_transform.errors import KTransformError


@jax.custom_vjp
def scaled_sin(x):  # value sin(x), gradient 10 * g
    return jnp.sin(x)


scaled_sin.defvjp(lambda x: (jnp.sin(x), None), lambda r, g: (10.0 * g,))


def act(v):
    return scaled_sin(v) * 2


def loss_default(w, act_fn=act):
    return jnp.sum(act_fn(w))


def loss_dict(w, acts={"a": act}):  # noqa: B006 - a default read, never changed
    return jnp.sum(acts["a"](w))


def loss_tuple(w, fs=(act,)):
    return jnp.sum(fs[0](w))


def loss_passed(w, fn):
    return jnp.sum(fn(w) * 3.0)


def relu_helper(v):
    return jax.nn.relu(v)


Z = jnp.array([0.0, 1.0, -1.0])


def test_jax_relu_in_a_function_passed_as_an_argument_keeps_its_rule():
    # relu's derivative at 0 is JAX's rule's 0, not max's tie 0.5
    np.testing.assert_allclose(
        kt.grad(loss_passed)(Z, relu_helper), jax.grad(loss_passed)(Z, relu_helper)
    )


@pytest.mark.parametrize(
    "loss, extra",
    [(loss_default, ()), (loss_dict, ()), (loss_tuple, ()), (loss_passed, (act,))],
    ids=["default", "dict default", "tuple default", "argument"],
)
def test_a_users_custom_vjp_reached_as_a_value_is_refused_not_dropped(loss, extra):
    with pytest.raises(KTransformError, match="custom_vjp function scaled_sin"):
        kt.grad(loss)(Z, *extra)


def test_called_by_name_the_same_rule_is_kept():
    def loss(w):
        return jnp.sum(act(w))

    np.testing.assert_allclose(kt.grad(loss)(Z), jax.grad(loss)(Z))  # 20 * g


# -- functions without source, run as Python, as default arguments ------------
_NS = {"xlogy": xlogy, "jax": jax, "jnp": jnp}
exec("f_xlogy = lambda v: xlogy(v, v + 1.0)", _NS)  # noqa: S102 - no source on purpose
exec("f_relu = lambda v: jax.nn.relu(v) * v", _NS)  # noqa: S102
exec(  # noqa: S102
    "@jax.custom_jvp\n"
    "def cj(x):\n"
    "    return jnp.sin(x)\n"
    "@cj.defjvp\n"
    "def cj_jvp(p, t):\n"
    "    return cj(p[0]), 10.0 * t[0]\n"
    "f_cj = lambda v: cj(v)\n",
    _NS,
)


def sum_xlogy(v, fn=_NS["f_xlogy"]):
    return jnp.sum(fn(v))


def sum_relu(v, fn=_NS["f_relu"]):
    return jnp.sum(fn(v))


def sum_cj(v, fn=_NS["f_cj"]):
    return jnp.sum(fn(v))


def test_xlogy_without_source_keeps_its_rule_at_second_order():
    v = jnp.array([0.0, 0.5])  # xlogy's Hessian at 0 is 2 by JAX's rule
    np.testing.assert_allclose(
        kt.hessian(sum_xlogy)(v), jax.hessian(sum_xlogy)(v), rtol=1e-5, atol=1e-6
    )


def test_relu_without_source_keeps_its_rule_at_second_order():
    z = jnp.zeros(2)
    np.testing.assert_allclose(kt.grad(sum_relu)(z), jax.grad(sum_relu)(z))
    np.testing.assert_allclose(kt.hessian(sum_relu)(z), jax.hessian(sum_relu)(z))


def test_eager_second_order_through_code_without_source():
    v = jnp.array([0.0, 0.5])
    kt.set_mode("eager")
    try:
        got = kt.grad(lambda u: jnp.sum(kt.grad(sum_xlogy)(u)))(v)
    finally:
        kt.set_mode("graph")
    want = jax.grad(lambda u: jnp.sum(jax.grad(sum_xlogy)(u)))(v)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_users_custom_jvp_without_source_is_refused_not_dropped():
    with pytest.raises(KTransformError, match="custom_jvp function cj"):
        kt.grad(sum_cj)(jnp.array([0.0, 0.5]))


# -- the recorded call's body: once, at its values, closing over them -----------
def test_a_jax_rule_closing_over_a_traced_value_and_python_running_once():
    calls = []

    def inverse(m):  # pinv's rule (a custom_jvp) closes over the traced rtol
        calls.append(1)
        return jnp.linalg.pinv(m, rtol=jnp.max(m) * 1e-3) * 2.0

    def loss(m, fn):
        return jnp.sum(fn(m) * m)

    m = jnp.array([[1.0, 0.5], [0.2, 2.0]])
    want = jax.grad(loss)(m, inverse)
    calls.clear()
    np.testing.assert_allclose(kt.grad(loss)(m, inverse), want, rtol=1e-4)
    assert len(calls) == 1  # the user's Python ran once for the one call
