"""A Cell (or a list, tuple or dict of Cells and Parameters) given to a
function as an argument: its Parameters get their gradients.

There the Cell is a value, and `net.w` reads its Parameter when the program
runs. The gradient of such an object is an env of its Parameters'
gradients (`runtime.state.param_env`): GetAttr's rule makes it
(`attr_env`), a Cell called as a value is its `construct` parsed with `self`
fixed (`traced.DynamicCallK`), and the caller, where the object is a
constant, adds it to its env (`DFunctor.contribute`). Before, the gradient
stopped at the call and the Parameters got zeros, with no error.

Oracle: jax.grad of the same computation with the Parameters' arrays as
explicit arguments.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError
from k_transform.mindspore import Parameter, ParameterTuple, Tensor, nn, ops

W = np.array([1.0, 2.0, 3.0], np.float32)
V = np.array([0.5, -1.0, 2.0], np.float32)
X = np.array([0.1, 0.2, 0.3], np.float32)


class Lin(nn.Cell):
    def __init__(self):
        super().__init__()
        self.v = Parameter(Tensor(V), name="v")

    def construct(self, x):
        return x * self.v


class Base(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(W), name="w")
        self.layer = Lin()

    def construct(self, x):
        return x * self.w


def scale(x, net):
    return net.w * x


def through_layer(x, net):
    return net.layer.v * x + net.w


def call_layer(x, layer):
    return layer(x)


def from_list(x, ps):
    return ps[0] * x + ps[1]


def from_cells(x, cells):
    return cells[0].w * cells[1](x)


def from_dict(x, d):
    return d["n"].w * x


def times(x, p):
    return p * x


class ByHelper(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(scale(x, self)))


class ByBaseConstruct(Base):  # the older spelling of super().construct(x)
    def construct(self, x):
        return ops.reduce_sum(ops.sin(Base.construct(self, x)))


class ByNested(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(through_layer(x, self)))


class BySubCell(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(call_layer(x, self.layer) * self.w))


class ByParamList(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(from_list(x, [self.w, self.layer.v])))


class ByCellTuple(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(from_cells(x, (self, self.layer))))


class ByCellList(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(from_cells(x, [self, self.layer])))


class ByDict(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(from_dict(x, {"n": self})))


class ByParameter(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(times(x, self.w)))


class ByLambda(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin((lambda n: n.w * x)(self)))


def _oracle(expr):
    return lambda w, v, x: jnp.sum(jnp.sin(expr(w, v, x)))


CASES = [
    (ByHelper, _oracle(lambda w, v, x: w * x)),
    (ByBaseConstruct, _oracle(lambda w, v, x: x * w)),
    (ByNested, _oracle(lambda w, v, x: v * x + w)),
    (BySubCell, _oracle(lambda w, v, x: x * v * w)),
    (ByParamList, _oracle(lambda w, v, x: w * x + v)),
    (ByCellTuple, _oracle(lambda w, v, x: w * (x * v))),
    (ByCellList, _oracle(lambda w, v, x: w * (x * v))),
    (ByDict, _oracle(lambda w, v, x: w * x)),
    (ByParameter, _oracle(lambda w, v, x: w * x)),
    (ByLambda, _oracle(lambda w, v, x: w * x)),
]


def _expected(oracle):
    return jax.grad(oracle, (0, 1))(W, V, X)


def _by_name(net, grads):
    return dict(zip([p.name for p in net.trainable_params()], grads, strict=True))


@pytest.mark.parametrize("cls, oracle", CASES, ids=[c.__name__ for c, _ in CASES])
def test_grad_operation_by_list(cls, oracle):
    net = cls()
    params = ParameterTuple(net.trainable_params())
    got = _by_name(net, kt.GradOperation(get_by_list=True)(net, params)(Tensor(X)))
    ew, ev = _expected(oracle)
    np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["layer.v"], ev, rtol=1e-5, atol=1e-6)


def test_grad_with_weights_and_input():
    net = ByNested()
    dx, dws = kt.grad(net, grad_position=0, weights=ParameterTuple(net.trainable_params()))(X)
    oracle = _oracle(lambda w, v, x: v * x + w)
    ew, ev, ex = jax.grad(oracle, (0, 1, 2))(W, V, X)
    got = _by_name(net, dws)
    np.testing.assert_allclose(dx, ex, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["layer.v"], ev, rtol=1e-5, atol=1e-6)


def test_value_and_grad_with_weights_jitted():
    net = BySubCell()
    fn = kt.value_and_grad(net, grad_position=None, weights=ParameterTuple(net.trainable_params()))
    oracle = _oracle(lambda w, v, x: x * v * w)
    for _ in range(2):  # the second call reuses the compiled program
        value, grads = kt.jit(fn)(X)
        np.testing.assert_allclose(value, oracle(W, V, X), rtol=1e-5)
        ew, ev = _expected(oracle)
        got = _by_name(net, grads)
        np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["layer.v"], ev, rtol=1e-5, atol=1e-6)


class ByPartial(Base):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(functools.partial(scale, net=self)(x)))


def test_partial_holding_a_cell_is_refused_not_zero():
    """`functools.partial(f, net=self)` made in the program and called: `f`
    runs under JAX's tracer, where a Parameter it reads would get no
    gradient: refused (it was a silent zero)."""
    net = ByPartial()
    grad = kt.GradOperation(get_by_list=True)(net, ParameterTuple(net.trainable_params()))
    with pytest.raises(KTransformError, match="reads the Parameter 'w'"):
        grad(Tensor(X))


def sin_sum(x, net):
    return jnp.sum(jnp.sin(net.w * x))


class ByInnerGrad(Base):  # a gradient penalty: second order through `net.w`
    def construct(self, x):
        return ops.reduce_sum(kt.grad(sin_sum)(x, self) ** 2)


def test_second_order_through_a_cell_argument():
    net = ByInnerGrad()
    grad = kt.GradOperation(get_by_list=True)(net, ParameterTuple(net.trainable_params()))
    got = _by_name(net, grad(Tensor(X)))

    def oracle(w, x):
        return jnp.sum(jax.grad(lambda x: jnp.sum(jnp.sin(w * x)))(x) ** 2)

    np.testing.assert_allclose(got["w"], jax.grad(oracle)(W, X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["layer.v"], np.zeros(3), atol=0)


@pytest.mark.parametrize(
    "cls, expr",
    [(ByNested, lambda w, v, x: v * x + w), (ByCellTuple, lambda w, v, x: w * (x * v))],
    ids=["ByNested", "ByCellTuple"],
)
def test_jvp_of_the_weights_gradient(cls, expr):
    """jvp by double reverse differentiates the env plumbing's rules (ParamEnv,
    AttrEnv and their transposes, each the other's rule)."""
    net = cls()
    grad = kt.grad(net, grad_position=None, weights=ParameterTuple(net.trainable_params()))
    t = np.array([1.0, -2.0, 0.5], np.float32)
    out, tangent = kt.jvp(grad, (X,), (t,))

    def oracle(x):
        return jax.grad(lambda w, v: jnp.sum(jnp.sin(expr(w, v, x))), (0, 1))(W, V)

    want_out, want_tangent = jax.jvp(oracle, (X,), (t,))
    for got, want in zip([*out, *tangent], [*want_out, *want_tangent], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
