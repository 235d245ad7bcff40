"""A Cell (or a list, tuple or dict of Cells and Parameters) given to a
function as an argument: its Parameters get their gradients.

There the Cell is a value, and `net.w` reads its Parameter when the program
runs. The gradient of such an object is an env of its Parameters'
gradients (`runtime.state.param_env`): GetAttr's rule makes it
(`attr_env`), a Cell called as a value is its `construct` parsed with `self`
fixed (`traced.DynamicCallK`), and the caller, where the object is a
constant, adds it to its env (`DFunctor.contribute`); given to the function
differentiated itself, the gradient function adds it (`transforms.grad_graph`).
Before, the gradient stopped at the call and the Parameters got zeros, with
no error.

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


# -- a Cell given to the function differentiated itself ---------------------------
# Its gradient, the env of its Parameters', is that of an input of the gradient
# function: the weights read it there (`transforms._with_argument_params`).
# Before, they read only the env of what the function holds: zeros, silently.
def top_loss(net, x):
    return ops.reduce_sum(ops.sin(net.layer(x) * net.w))


TOP_ORACLE = _oracle(lambda w, v, x: x * v * w)


def _weights_and_x():
    ew, ev, ex = jax.grad(TOP_ORACLE, (0, 1, 2))(W, V, X)
    return ew, ev, ex


def _by_list(net, params):
    return kt.GradOperation(get_by_list=True)(top_loss, params)(net, Tensor(X)), None


def _by_grad(net, params):
    return kt.grad(top_loss, None, params)(net, Tensor(X)), None


def _by_value_and_grad(net, params):
    value, grads = kt.value_and_grad(top_loss, None, params)(net, Tensor(X))
    np.testing.assert_allclose(value, TOP_ORACLE(W, V, X), rtol=1e-5)
    return grads, None


def _with_all_inputs(net, params):
    (_, dx), grads = kt.GradOperation(get_all=True, get_by_list=True)(top_loss, params)(
        net, Tensor(X)
    )
    return grads, dx


def _with_position(net, params):
    dx, grads = kt.grad(top_loss, 1, params)(net, Tensor(X))
    return grads, dx


@pytest.mark.parametrize(
    "spelling", [_by_list, _by_grad, _by_value_and_grad, _with_all_inputs, _with_position]
)
def test_cell_argument_of_the_function_differentiated(spelling):
    net = Base()
    grads, dx = spelling(net, ParameterTuple(net.trainable_params()))
    got = _by_name(net, grads)
    ew, ev, ex = _weights_and_x()
    np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["layer.v"], ev, rtol=1e-5, atol=1e-6)
    if dx is not None:
        np.testing.assert_allclose(dx, ex, rtol=1e-5, atol=1e-6)


def in_list(nets, x):
    return top_loss(nets[0], x)


def in_dict(nets, x):
    return top_loss(nets["net"], x)


def by_keyword(x, net=None):
    return top_loss(net, x)


def by_star(x, *nets):
    return top_loss(nets[-1], x)


CONTAINED = [
    ("list", in_list, lambda net: (([net], Tensor(X)), {})),
    ("tuple", in_list, lambda net: (((net,), Tensor(X)), {})),
    ("dict", in_dict, lambda net: (({"net": net}, Tensor(X)), {})),
    ("keyword", by_keyword, lambda net: ((Tensor(X),), {"net": net})),
    ("star", by_star, lambda net: ((Tensor(X), net), {})),
]


@pytest.mark.parametrize("fn, call", [c[1:] for c in CONTAINED], ids=[c[0] for c in CONTAINED])
def test_cell_argument_in_a_container_keyword_or_star_args(fn, call):
    net = Base()
    args, kwargs = call(net)
    got = _by_name(net, kt.grad(fn, None, ParameterTuple(net.trainable_params()))(*args, **kwargs))
    ew, ev, _ = _weights_and_x()
    np.testing.assert_allclose(got["w"], ew, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["layer.v"], ev, rtol=1e-5, atol=1e-6)


CLOSED = Base()


def with_closure_cell(net, x):
    return top_loss(net, x) + top_loss(CLOSED, x * 2.0)


def test_cell_argument_and_a_cell_the_function_holds():
    """The two envs add: the held Cell's Parameters get theirs, the
    argument's theirs, and one Cell both given and held gets the sum."""
    net = Base()
    weights = ParameterTuple(net.trainable_params() + CLOSED.trainable_params())
    got = kt.grad(with_closure_cell, None, weights)(net, Tensor(X))
    ew, ev, _ = _weights_and_x()
    cw, cv = jax.grad(lambda w, v: TOP_ORACLE(w, v, 2.0 * X), (0, 1))(W, V)
    for g, want in zip(got, (ew, ev, cw, cv), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    same = kt.grad(with_closure_cell, None, ParameterTuple(CLOSED.trainable_params()))
    for g, want in zip(same(CLOSED, Tensor(X)), (ew + cw, ev + cv), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def weighted(w, x):
    return ops.reduce_sum(ops.sin(w * x))


def test_a_weight_given_as_an_argument_is_refused_not_zero():
    """The program sees the Parameter's value: what flows through it would
    not reach the weight's gradient (it was a zero)."""
    net = Base()
    weights = ParameterTuple(net.trainable_params())
    with pytest.raises(
        KTransformError, match="Parameter 'w', one of the weights, is given as argument 0"
    ):
        kt.grad(weighted, None, weights)(net.w, Tensor(X))
    with pytest.raises(
        KTransformError, match=r"'layer.v', one of the weights, is given as argument 1 \(at \[0\]\)"
    ):
        kt.grad(from_list, 0, weights)(Tensor(X), [net.layer.v, net.w])
    # not among the weights: an input as any array
    got = kt.grad(weighted, 0, ParameterTuple([net.layer.v]))(net.w, Tensor(X))
    np.testing.assert_allclose(got[0], np.cos(W * X) * X, rtol=1e-5)


# -- methods and sub-Cells called on a Cell the program was given ----------------
# `net.layer(x)` and `net.encode(x)` are the attribute read and a call of its
# value (`traced._method_graph`), which parse the sub-Cell's `construct` or the
# method with `self` fixed. Before, JAX's trace ran them, holding the
# Parameters' values as constants: zeros, silently.
class WithMethod(Base):
    def encode(self, x):
        return self.layer(x) * self.w

    def construct(self, x):
        return ops.reduce_sum(ops.sin(self.encode(x)))


def sub_cell_called(net, x):
    return ops.reduce_sum(ops.sin(net.layer(x) * net.w))


def method_called(net, x):
    return ops.reduce_sum(ops.sin(net.encode(x)))


def construct_called(net, x):
    return net.construct(x)


class Holding(nn.Cell):  # the Cell reaching the helper as an argument, one level down
    def __init__(self, helper):
        super().__init__()
        self.net = WithMethod()
        self.helper = helper

    def construct(self, x):
        return self.helper(self.net, x)


@pytest.mark.parametrize("helper", [sub_cell_called, method_called, construct_called])
def test_methods_and_sub_cells_of_a_cell_argument(helper):
    ew, ev, _ = _weights_and_x()
    net = WithMethod()
    got = _by_name(net, kt.grad(helper, None, ParameterTuple(net.trainable_params()))(net, X))
    held = Holding(helper)
    grads = kt.GradOperation(get_by_list=True)(held, ParameterTuple(held.trainable_params()))(X)
    inner = dict(zip([p.name for p in held.trainable_params()], grads, strict=True))
    for w, v in [(got["w"], got["layer.v"]), (inner["net.w"], inner["net.layer.v"])]:
        np.testing.assert_allclose(w, ew, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v, ev, rtol=1e-5, atol=1e-6)


def test_get_by_list_without_weights_takes_those_of_the_cells_given():
    """MindSpore's default weights, the trainable Parameters the function
    reads, include those of the Cells it is given (they were left out: `()`)."""
    net = Base()
    ew, ev, _ = _weights_and_x()
    got = kt.GradOperation(get_by_list=True)(top_loss)(net, Tensor(X))
    for g, want in zip(got, (ew, ev), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    both = kt.GradOperation(get_by_list=True)(with_closure_cell)(net, Tensor(X))
    cw, cv = jax.grad(lambda w, v: TOP_ORACLE(w, v, 2.0 * X), (0, 1))(W, V)
    for g, want in zip(both, (cw, cv, ew, ev), strict=True):  # its own first
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
