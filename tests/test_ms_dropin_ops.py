"""MindSpore's functional ops API and the primitive names we lacked (issue 30).

`ops.sin(x)`, `ops.reduce_sum(x, axis)`, `F.assign(p, v)`, `ops.AddN`,
`ops.TensorAdd`, `ops.Real`/`ops.Imag`: every name in the table is swept,
its value against the jax.numpy function of the same meaning and its
gradient (our rules) against jax.grad of that jax.numpy function. The
parameter names are MindSpore 2.10's (`inspect.signature` there).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import ops
from k_transform.ops import functional as F

X = jnp.array([[0.5, 1.2, 0.3], [0.8, 0.4, 1.5]])
Y = jnp.array([[1.1, 0.7, 0.2], [0.6, 1.3, 0.9]])
M = jnp.array([[0.3, 0.9], [1.4, 0.2], [0.5, 0.7]])

# name: (our call, the jax.numpy oracle); both take X and Y (some ignore Y)
ORACLES = {
    "sin": (lambda x, y: ops.sin(x), lambda x, y: jnp.sin(x)),
    "cos": (lambda x, y: ops.cos(x), lambda x, y: jnp.cos(x)),
    "tan": (lambda x, y: ops.tan(x), lambda x, y: jnp.tan(x)),
    "exp": (lambda x, y: ops.exp(x), lambda x, y: jnp.exp(x)),
    "log": (lambda x, y: ops.log(x), lambda x, y: jnp.log(x)),
    "sqrt": (lambda x, y: ops.sqrt(x), lambda x, y: jnp.sqrt(x)),
    "tanh": (lambda x, y: ops.tanh(x), lambda x, y: jnp.tanh(x)),
    "sigmoid": (lambda x, y: ops.sigmoid(x), lambda x, y: jax.nn.sigmoid(x)),
    "relu": (lambda x, y: ops.relu(x - 0.7), lambda x, y: jax.nn.relu(x - 0.7)),
    "abs": (lambda x, y: ops.abs(x - 0.7), lambda x, y: jnp.abs(x - 0.7)),
    "square": (lambda x, y: ops.square(x), lambda x, y: jnp.square(x)),
    "neg": (lambda x, y: ops.neg(x), lambda x, y: -x),
    "reciprocal": (lambda x, y: ops.reciprocal(x), lambda x, y: 1.0 / x),
    "log1p": (lambda x, y: ops.log1p(x), lambda x, y: jnp.log1p(x)),
    "expm1": (lambda x, y: ops.expm1(x), lambda x, y: jnp.expm1(x)),
    "rsqrt": (lambda x, y: ops.rsqrt(x), lambda x, y: 1.0 / jnp.sqrt(x)),
    "erf": (lambda x, y: ops.erf(x), lambda x, y: jax.scipy.special.erf(x)),
    "sinh": (lambda x, y: ops.sinh(x), lambda x, y: jnp.sinh(x)),
    "cosh": (lambda x, y: ops.cosh(x), lambda x, y: jnp.cosh(x)),
    "atan": (lambda x, y: ops.atan(x), lambda x, y: jnp.arctan(x)),
    "asinh": (lambda x, y: ops.asinh(x), lambda x, y: jnp.arcsinh(x)),
    "sign": (lambda x, y: ops.sign(x - 0.7) * x, lambda x, y: jnp.sign(x - 0.7) * x),
    "floor": (lambda x, y: ops.floor(x * 3) * x, lambda x, y: jnp.floor(x * 3) * x),
    "ceil": (lambda x, y: ops.ceil(x * 3) * x, lambda x, y: jnp.ceil(x * 3) * x),
    "real": (lambda x, y: ops.real(x), lambda x, y: jnp.real(x)),
    "imag": (lambda x, y: ops.imag(x) + x, lambda x, y: jnp.imag(x) + x),
    "zeros_like": (lambda x, y: ops.zeros_like(x) + x, lambda x, y: x),
    "ones_like": (lambda x, y: ops.ones_like(x) * x, lambda x, y: x),
    "stop_gradient": (
        lambda x, y: ops.stop_gradient(x) * x,
        lambda x, y: jax.lax.stop_gradient(x) * x,
    ),
    "add": (lambda x, y: ops.add(x, y), lambda x, y: x + y),
    "tensor_add": (lambda x, y: ops.tensor_add(x, y), lambda x, y: x + y),
    "sub": (lambda x, y: ops.sub(x, y), lambda x, y: x - y),
    "mul": (lambda x, y: ops.mul(x, y), lambda x, y: x * y),
    "div": (lambda x, y: ops.div(x, y), lambda x, y: x / y),
    "maximum": (lambda x, y: ops.maximum(x, y), lambda x, y: jnp.maximum(x, y)),
    "minimum": (lambda x, y: ops.minimum(x, y), lambda x, y: jnp.minimum(x, y)),
    "atan2": (lambda x, y: ops.atan2(x, y), lambda x, y: jnp.arctan2(x, y)),
    "matmul": (lambda x, y: ops.matmul(x, y.T), lambda x, y: x @ y.T),
    "dot": (lambda x, y: ops.dot(x[0], y[1]), lambda x, y: jnp.dot(x[0], y[1])),
    "equal": (lambda x, y: ops.equal(x, y) * x, lambda x, y: (x == y) * x),
    "not_equal": (lambda x, y: ops.not_equal(x, y) * x, lambda x, y: (x != y) * x),
    "greater": (lambda x, y: ops.greater(x, y) * x, lambda x, y: (x > y) * x),
    "greater_equal": (lambda x, y: ops.greater_equal(x, y) * y, lambda x, y: (x >= y) * y),
    "less_equal": (lambda x, y: ops.less_equal(x, y) * y, lambda x, y: (x <= y) * y),
    "pow": (lambda x, y: ops.pow(x, y), lambda x, y: x**y),
    "outer": (lambda x, y: ops.outer(x[0], y[1]), lambda x, y: jnp.outer(x[0], y[1])),
    "bmm": (lambda x, y: ops.bmm(x[None], y.T[None]), lambda x, y: x[None] @ y.T[None]),
    "select": (lambda x, y: ops.select(x > y, x, y), lambda x, y: jnp.where(x > y, x, y)),
    "where": (lambda x, y: ops.where(x > y, x, y), lambda x, y: jnp.where(x > y, x, y)),
    "clamp": (lambda x, y: ops.clamp(x, 0.45, max=1.0), lambda x, y: jnp.clip(x, 0.45, 1.0)),
    "clip": (lambda x, y: ops.clip(x, min=0.6), lambda x, y: jnp.clip(x, 0.6)),
    "addn": (lambda x, y: ops.addn((x, y * y, x)), lambda x, y: x + y * y + x),
    "reduce_sum": (lambda x, y: ops.reduce_sum(x * y, 1), lambda x, y: jnp.sum(x * y, 1)),
    "reduce_mean": (lambda x, y: ops.reduce_mean(x * y), lambda x, y: jnp.mean(x * y)),
    "reduce_max": (lambda x, y: ops.reduce_max(x, (0,)), lambda x, y: jnp.max(x, 0)),
    "reduce_min": (lambda x, y: ops.reduce_min(x, 1), lambda x, y: jnp.min(x, 1)),
    "sum": (
        lambda x, y: ops.sum(x, dim=0, keepdim=True),
        lambda x, y: jnp.sum(x, 0, keepdims=True),
    ),
    "mean": (lambda x, y: ops.mean(x, 1, True), lambda x, y: jnp.mean(x, 1, keepdims=True)),
    "prod": (lambda x, y: ops.prod(x, 1), lambda x, y: jnp.prod(x, 1)),
    "amax": (lambda x, y: ops.amax(x, 1, keepdims=True), lambda x, y: jnp.max(x, 1, keepdims=True)),
    "amin": (lambda x, y: ops.amin(x), lambda x, y: jnp.min(x)),
    "logsumexp": (lambda x, y: ops.logsumexp(x, 1), lambda x, y: jax.nn.logsumexp(x, 1)),
    "cumsum": (lambda x, y: ops.cumsum(x, 1), lambda x, y: jnp.cumsum(x, 1)),
    "argmax": (
        lambda x, y: ops.argmax(x, dim=1) * 1.0 * y[:, 0],
        lambda x, y: jnp.argmax(x, 1) * 1.0 * y[:, 0],
    ),
    "argmin": (
        lambda x, y: ops.argmin(x, 0) * 1.0 * y[0],
        lambda x, y: jnp.argmin(x, 0) * 1.0 * y[0],
    ),
    "transpose": (lambda x, y: ops.transpose(x, (1, 0)) * y.T, lambda x, y: x.T * y.T),
    "reshape": (lambda x, y: ops.reshape(x, (3, 2)) @ y, lambda x, y: x.reshape(3, 2) @ y),
    "expand_dims": (
        lambda x, y: ops.expand_dims(x, 1) * y[:, None],
        lambda x, y: x[:, None] * y[:, None],
    ),
    "broadcast_to": (lambda x, y: ops.broadcast_to(x[0], (2, 3)) * y, lambda x, y: x[0] * y),
    "cast": (lambda x, y: ops.cast(x, jnp.float32) * y, lambda x, y: x * y),
    "squeeze": (lambda x, y: ops.squeeze(x[:1], 0) * y, lambda x, y: x[0] * y),
    "concat": (lambda x, y: ops.concat((x, y), 1), lambda x, y: jnp.concatenate((x, y), 1)),
    "stack": (lambda x, y: ops.stack([x, y], axis=2), lambda x, y: jnp.stack([x, y], 2)),
    "tile": (lambda x, y: ops.tile(x, (2, 1)), lambda x, y: jnp.tile(x, (2, 1))),
    "tril": (lambda x, y: ops.tril(x @ y.T), lambda x, y: jnp.tril(x @ y.T)),
    "triu": (lambda x, y: ops.triu(x @ y.T, diagonal=1), lambda x, y: jnp.triu(x @ y.T, 1)),
    "gather": (
        lambda x, y: ops.gather(x, jnp.array([2, 0, 2]), 1) * y,
        lambda x, y: jnp.take(x, jnp.array([2, 0, 2]), 1) * y,
    ),
    "softmax": (lambda x, y: ops.softmax(x) * y, lambda x, y: jax.nn.softmax(x) * y),
    "log_softmax": (
        lambda x, y: ops.log_softmax(x, 0) * y,
        lambda x, y: jax.nn.log_softmax(x, 0) * y,
    ),
}
NOT_SWEPT = {"assign"}  # a state update: its own test below


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def test_every_functional_name_is_swept():
    assert set(ORACLES) | NOT_SWEPT == set(F.FUNCTIONAL)
    assert set(F.FUNCTIONAL) <= set(ops.__all__)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_functional_value_and_gradient(name):
    ours, oracle = ORACLES[name]

    def loss(x, y):
        return jnp.sum(jnp.sin(ours(x, y)))

    def want_loss(x, y):
        return jnp.sum(jnp.sin(oracle(x, y)))

    close(ours(X, Y), oracle(X, Y))  # as Python (a Cell run eagerly)
    close(kt.jit(loss)(X, Y), want_loss(X, Y))
    got = kt.grad(loss, grad_position=(0, 1))(X, Y)
    want = jax.grad(want_loss, argnums=(0, 1))(X, Y)
    for g, w in zip(got, want, strict=True):
        close(g, w)


def test_signatures_are_mindspores():
    # parameter names as `inspect.signature` shows them in MindSpore 2.10
    assert str(inspect.signature(ops.reduce_sum)) == "(x, axis=())"
    assert str(inspect.signature(ops.sum)) == "(input, dim=None, keepdim=False)"
    assert str(inspect.signature(ops.matmul)) == "(input, other)"
    assert str(inspect.signature(F.assign)) == "(variable, value)"
    assert F.sin is ops.sin


def test_functional_passed_as_a_value():
    close(kt.grad(ops.sin)(jnp.array(0.3)), jnp.cos(0.3))
    close(kt.grad(ops.reduce_sum)(X), jnp.ones_like(X))


class AssignNet(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(jnp.array([1.0, 2.0]), name="w")

    def construct(self, x):
        F.assign(self.w, self.w * x)
        return ops.reduce_sum(ops.sin(self.w) * x)


@pytest.mark.parametrize("run", ["python", "grad"])
def test_functional_assign_updates_the_parameter(run):
    net, x = AssignNet(), jnp.array([0.5, 3.0])
    w0 = net.w.value()
    if run == "python":
        close(net(x), jnp.sum(jnp.sin(w0 * x) * x))
    else:
        # the assigned value is a state update: no gradient flows through it
        # (MindSpore's Assign), so d/dx is sin(w_new) with w_new held fixed
        close(kt.grad(net)(x), jnp.sin(w0 * x))
    close(net.w.value(), w0 * x)


def test_addn_and_tensor_add_primitives():
    def f(a, b):
        return jnp.sum(ops.AddN()([a, b * b, a]) * ops.TensorAdd()(a, b))

    def want(a, b):
        return jnp.sum((a + b * b + a) * (a + b))

    close(ops.AddN()((X, Y)), X + Y)
    got = kt.grad(f, grad_position=(0, 1))(X, Y)
    for g, w in zip(got, jax.grad(want, argnums=(0, 1))(X, Y), strict=True):
        close(g, w)


def test_real_imag_of_complex_inputs_follow_jax():
    # JAX's convention (MindSpore's Imag rule gives the conjugate gradient)
    z = jnp.array([1.0 + 2.0j, 3.0 - 1.0j], jnp.complex64)

    def f(z):
        return jnp.sum(ops.Real()(z) * 2.0 + ops.Imag()(z) ** 2)

    def want(z):
        return jnp.sum(jnp.real(z) * 2.0 + jnp.imag(z) ** 2)

    close(ops.Real()(z), jnp.real(z))
    close(ops.Imag()(z), jnp.imag(z))
    close(kt.grad(f)(z), jax.grad(want)(z))


def test_attribute_that_is_traced_is_refused_with_the_users_line():
    def keep(x, flag):
        return ops.sum(x, 0, flag)

    with pytest.raises(kt.KTransformError, match=r"ops\.sum: `keep_dims` must be a constant"):
        kt.grad(keep)(X, jnp.array(True))


def test_wrong_arguments_name_the_signature_and_line():
    def wrong(x):
        return ops.sin(x, 1)

    with pytest.raises(kt.KTransformError, match=r"ops\.sin\(input\): too many positional") as info:
        kt.grad(wrong)(X)
    assert "test_ms_dropin_ops.py" in str(info.value)
