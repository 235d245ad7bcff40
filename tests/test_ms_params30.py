"""Session 30: a Parameter read in every spelling is its current value, with a
gradient; MindSpore names that meant another operation; crashes of model code.

Oracles: jax.grad of the same program on the weights' values, MindSpore's
documented values, closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import Parameter, ParameterTuple, Tensor, nn, ops

W = np.random.RandomState(0).randn(3, 4)
X = jnp.asarray(np.random.RandomState(1).randn(2, 4))
G = Parameter(W, name="g")  # a global Parameter read by a plain function


class Attr(nn.Cell):
    """`construct` reads `self.w.<attribute>` (`form`), directly or through an alias."""

    def __init__(self, form):
        super().__init__()
        self.w = Parameter(W, name="w")
        self.form = form

    def construct(self, x):
        if self.form == "T":
            return ops.reduce_sum(ops.matmul(x, self.w.T) ** 2)
        if self.form == "alias mT":
            w = self.w
            return ops.reduce_sum(ops.matmul(x, w.mT) ** 2)
        if self.form == "at":
            return ops.reduce_sum(ops.sin(x[:1] * self.w.at[0].set(1.0)))
        if self.form == "real":
            return ops.reduce_sum(ops.sin(x * self.w.real[:2]))
        return ops.reduce_sum(ops.sin(x[:1] * self.w.data))  # MindSpore's: the Parameter


ORACLES = {
    "T": lambda w, x: jnp.sum((x @ w.T) ** 2),
    "alias mT": lambda w, x: jnp.sum((x @ w.T) ** 2),
    "at": lambda w, x: jnp.sum(jnp.sin(x[:1] * w.at[0].set(1.0))),
    "real": lambda w, x: jnp.sum(jnp.sin(x * w[:2])),
    "data": lambda w, x: jnp.sum(jnp.sin(x[:1] * w)),
}


@pytest.mark.parametrize("form", list(ORACLES))
def test_an_attribute_of_a_parameter_is_read_with_its_gradient(form, x64):
    net = Attr(form)
    gf = ms.grad(net, 0, [net.w])
    gx, (gw,) = gf(X)
    want = ORACLES[form]
    np.testing.assert_allclose(gw, jax.grad(want)(jnp.asarray(W), X), rtol=1e-10)
    net.w.set_data(W * 3.0)  # an optimizer's step: the same function sees the new value
    gx, (gw,) = gf(X)
    np.testing.assert_allclose(gx, jax.grad(want, 1)(jnp.asarray(W * 3.0), X), rtol=1e-10)
    np.testing.assert_allclose(gw, jax.grad(want)(jnp.asarray(W * 3.0), X), rtol=1e-10)


def test_an_attribute_of_a_global_parameter_and_a_jitted_forward(x64):
    def f(x):
        return ops.reduce_sum(ops.matmul(x, G.T) ** 2)

    (gw,) = ms.grad(f, None, [G])(X)  # (G is float32: made before x64)
    np.testing.assert_allclose(gw, jax.grad(ORACLES["T"])(jnp.asarray(W), X), rtol=1e-5)
    net = Attr("T")
    fj = ms.jit(net)
    fj(X)
    net.w.set_data(W * 3.0)
    np.testing.assert_allclose(fj(X), ORACLES["T"](jnp.asarray(W * 3.0), X), rtol=1e-10)


class Listing(nn.Cell):
    """Sub-Cells and Parameters reached through the listing methods."""

    def __init__(self, how):
        super().__init__()
        self.a = nn.Dense(4, 4)
        self.b = nn.Dense(4, 4)
        self.how = how

    def construct(self, x):
        if self.how == "cells":
            for cell in self.cells():
                x = ops.tanh(cell(x))
        elif self.how == "name_cells":
            for _, cell in self.name_cells().items():
                x = ops.tanh(cell(x))
        else:  # cells_and_names: this Cell first, named ""
            for name, cell in self.cells_and_names():
                if name:
                    x = ops.tanh(cell(x))
        s = 0.0
        for _, p in self.parameters_and_names():
            s = s + ops.reduce_sum(p * p)
        return ops.reduce_sum(x) + s


def _listing_oracle(v, x):
    for k in range(2):
        x = jnp.tanh(x @ v[2 * k].T + v[2 * k + 1])
    return jnp.sum(x) + sum(jnp.sum(p * p) for p in v)


@pytest.mark.parametrize("how", ["cells", "name_cells", "cells_and_names"])
def test_sub_cells_reached_through_a_listing_get_their_gradients(how, x64):
    net = Listing(how)
    rng = np.random.RandomState(0)
    for p in net.get_parameters():
        p.set_data(rng.randn(*p.data.shape))
    ps = net.trainable_params()
    gf = ms.grad(net, 0, ps)
    for scale in (1.0, 2.0):  # after set_data, the new values
        for p in ps:
            p.set_data(np.asarray(p.data) * scale)
        v = [jnp.asarray(p.data) for p in ps]
        gx, gw = gf(X)
        np.testing.assert_allclose(gx, jax.grad(_listing_oracle, 1)(v, X), rtol=1e-10)
        for got, want in zip(gw, jax.grad(_listing_oracle)(v, X), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-10)


class Flagged(nn.Cell):
    def __init__(self, flag, shape):
        super().__init__()
        self.flag = Parameter(np.full(shape, flag), name="flag", requires_grad=False)
        self.w = Parameter(np.array([3.0, 4.0]), name="w")

    def construct(self, x):
        if self.flag:
            return ops.reduce_sum(x * self.w)
        return ops.reduce_sum(x * self.w * 100.0) if not self.flag else 0.0


@pytest.mark.parametrize("shape", [(1,), ()])
def test_the_truth_of_a_parameter_is_its_value(shape, x64):
    x = jnp.asarray([1.0, 2.0])
    net = Flagged(0.0, shape)
    gf = ms.grad(net, None, [net.w])
    for flag, scale in [(0.0, 100.0), (1.0, 1.0), (False, 100.0)]:
        net.flag.set_data(np.full(shape, flag))
        np.testing.assert_allclose(gf(x)[0], x * scale)  # d/dw sum(x * w * scale)
        assert float(net(x)) == pytest.approx(float(jnp.sum(x * net.w.data * scale)))


def test_a_parameter_compares_and_converts_as_its_value(x64):
    w = np.asarray([[0.0, 1.5, -2.0, 0.0]])

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(w, name="w")

        def construct(self, x):
            return ops.reduce_sum(ops.where(self.w != 0, x * self.w, x * 10.0) + (self.w == 0))

    x = jnp.asarray([[1.0, 2.0, 3.0, 4.0]])
    want = np.sum(np.where(w != 0, x * w, x * 10.0) + (w == 0))
    net = Net()
    assert float(net(x)) == pytest.approx(want)  # run as Python (PyNative)
    assert float(ms.jit(net)(x)) == pytest.approx(want)
    p = Parameter(np.array(2.5), name="p")
    assert float(p) == 2.5 and int(p) == 2 and {p: 1}[p] == 1


SCALE, ROWS = np.float64(2.0), np.array([1.0, -1.0])
H = Parameter(np.array([3.0, 4.0]), name="h")


def _host_numpy_scalar(x):
    try:  # (run as Python: k_transform does not parse try)
        y = x * (SCALE * H)
    except ValueError:
        y = x
    return ops.reduce_sum(y)


def _host_numpy_array(x):
    try:
        y = ROWS * H + x
    except ValueError:
        y = x
    return ops.reduce_sum(y)


@pytest.mark.parametrize("fn", [_host_numpy_scalar, _host_numpy_array])
def test_numpy_meeting_a_parameter_in_host_code_is_refused_not_zero(fn, x64):
    with pytest.raises(kt.KTransformError, match="reads the Parameter 'h'"):
        ms.grad(fn, None, [H])(jnp.asarray([1.0, 2.0]))


def test_mindspore_mod_truncates_and_floor_mod_floors(x64):
    # MindSpore's documented example: Mod([-4, 5, 6], [3, 2, 3]) = [-1, 1, 0]
    a, b = Tensor(np.array([-4.0, 5.0, 6.0])), Tensor(np.array([3.0, 2.0, 3.0]))
    np.testing.assert_array_equal(ops.Mod()(a, b), [-1.0, 1.0, 0.0])
    np.testing.assert_array_equal(ops.fmod(a, b), [-1.0, 1.0, 0.0])
    for floor in (ops.FloorMod()(a, b), ops.floor_mod(a, b), ops.remainder(a, b), a % b):
        np.testing.assert_array_equal(floor, [2.0, 1.0, 0.0])
    x, y = jnp.asarray([-4.5, 5.5, -7.25]), jnp.asarray([3.0, 2.0, 2.5])
    got = ms.grad(lambda x, y: ops.reduce_sum(ops.Mod()(x, y)), (0, 1))(x, y)
    want = jax.grad(lambda x, y: jnp.sum(jnp.fmod(x, y)), (0, 1))(x, y)
    np.testing.assert_allclose(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0])


class Indexed(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(W, name="w")

    def construct(self, x):
        y = x * self.w
        picked = ops.index_select(y, 1, Tensor([2, 2, 0], ms.int32))
        along = ops.gather_elements(y, 1, Tensor([[1, 0], [3, 3], [2, 1]], ms.int32))
        padded = ops.pad(y, (1, 2))
        return (
            ops.reduce_sum(picked**2) + ops.reduce_sum(along**3) + ops.reduce_sum(ops.sin(padded))
        )


def test_model_code_that_crashed(x64):
    x = jnp.asarray(np.random.RandomState(2).randn(3, 4))

    def oracle(w):
        y = x * w
        along = jnp.take_along_axis(y, jnp.asarray([[1, 0], [3, 3], [2, 1]]), axis=1)
        padded = jnp.pad(y, ((0, 0), (1, 2)))
        return (
            jnp.sum(y[:, jnp.asarray([2, 2, 0])] ** 2)
            + jnp.sum(along**3)
            + jnp.sum(jnp.sin(padded))
        )

    net = Indexed()
    np.testing.assert_allclose(ms.grad(net, None, [net.w])(x)[0], jax.grad(oracle)(jnp.asarray(W)))
    # a list made from Python values into a cast, differentiated through its items
    f = lambda a: jnp.sum(Tensor([a, a * 2.0], ms.float64) ** 2)  # noqa: E731
    assert float(kt.grad(f)(1.5)) == pytest.approx(15.0)  # d/da 5 a^2


def test_hypermap_of_a_closure_of_construct(x64):
    a, b = np.random.RandomState(3).randn(4), np.random.RandomState(4).randn(4)

    class Net(nn.Cell):
        def __init__(self, mapper):
            super().__init__()
            self.ws = ParameterTuple([Parameter(a, name="a"), Parameter(b, name="b")])
            self.map = mapper

        def construct(self, x):
            ys = self.map(lambda w: ops.sin(w * x), self.ws)
            return ops.reduce_sum(ys[0] * ys[1])

    x = jnp.asarray(np.random.RandomState(5).randn(3, 4))
    want = jax.grad(lambda a, b: jnp.sum(jnp.sin(a * x) * jnp.sin(b * x)), (0, 1))(a, b)
    for mapper in (ops.HyperMap(), ops.Map()):
        net = Net(mapper)
        got = ms.grad(net, None, net.ws)(x)
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])


def test_a_train_one_step_subclass_uses_mindspores_attributes(x64):
    x = jnp.asarray(np.random.RandomState(1).randn(4, 4))
    y = jnp.asarray(np.random.RandomState(2).randn(4, 3))

    class Step(nn.TrainOneStepCell):
        def construct(self, x, y):
            weights = self.weights
            loss = self.network(x, y)
            sens = ops.fill(loss.dtype, loss.shape, self.sens)
            grads = self.grad(self.network, weights)(x, y, sens)
            grads = self.grad_reducer(grads)
            self.optimizer(grads)
            return loss

    net = nn.Dense(4, 3)
    for p in net.get_parameters():
        p.set_data(np.asarray(p.data, np.float64))
    w0, b0 = (jnp.asarray(p.data) for p in net.trainable_params())
    step = Step(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    step(x, y)
    gw, gb = jax.grad(lambda w, b: jnp.mean((x @ w.T + b - y) ** 2), (0, 1))(w0, b0)
    np.testing.assert_allclose(net.weight.data, w0 - 0.1 * gw)
    np.testing.assert_allclose(net.bias.data, b0 - 0.1 * gb)
