"""`k_transform.mindspore`: a MindSpore 2.x script written with MindSpore's
names only (`import k_transform.mindspore as ms`), its gradients and training
steps checked against JAX's gradient of the same math in jax.numpy; the
submodule imports MindSpore code uses (`P`, `F`, `C`, `mstype`, `ds`,
`initializer`); and a MindSpore name k_transform lacks raising
`AttributeError` that names it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform.mindspore as ms
from k_transform.mindspore import Parameter, ParameterTuple, Tensor, context, nn, ops

TOL = {"rtol": 1e-5, "atol": 1e-6}  # float32


# -- the MindSpore script -------------------------------------------------------------
class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8, weight_init="normal")
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(8, 3, weight_init="normal")

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class GradNet(nn.Cell):
    """MindSpore's idiom: the gradients of the loss w.r.t. the weights."""

    def __init__(self, net_with_loss):
        super().__init__()
        self.net = net_with_loss
        self.weights = ParameterTuple(net_with_loss.trainable_params())
        self.grad_op = ops.GradOperation(get_by_list=True)

    def construct(self, x, y):
        return self.grad_op(self.net, self.weights)(x, y)


class TrainStep(nn.Cell):
    """A hand-written train step, as MindSpore 1.x/2.x scripts write it."""

    def __init__(self, net_with_loss, optimizer):
        super().__init__(auto_prefix=False)
        self.net = net_with_loss
        self.weights = optimizer.parameters
        self.optimizer = optimizer
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, x, y):
        loss = self.net(x, y)
        grads = self.grad(self.net, self.weights)(x, y)
        self.optimizer(grads)
        return loss


def data():
    rng = np.random.RandomState(0)
    x = Tensor(rng.randn(5, 4), ms.float32)
    y = Tensor(rng.randn(5, 3), ms.float32)
    return x, y


def make_net(seed=1):
    ms.set_seed(seed)
    return Net()


# -- the oracle: the same math in jax.numpy, differentiated by JAX ---------------------
NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def values(net) -> tuple:
    params = dict(net.parameters_and_names())
    return tuple(jnp.asarray(np.asarray(params[n].data)) for n in NAMES)


def oracle_loss(weights, x, y):
    w1, b1, w2, b2 = weights  # MindSpore's Dense: y = x @ W.T + b, W (out, in)
    h = jnp.maximum(x @ w1.T + b1, 0.0)
    return jnp.mean((h @ w2.T + b2 - y) ** 2)


def oracle_grads(weights, x, y):
    return jax.grad(oracle_loss)(weights, x, y)


def oracle_momentum(weights, x, y, lr, momentum, steps):
    """MindSpore's Momentum: v = momentum * v + g; p -= lr * v."""
    moments = [jnp.zeros_like(w) for w in weights]
    weights = list(weights)
    for _ in range(steps):
        grads = oracle_grads(tuple(weights), x, y)
        moments = [momentum * v + g for v, g in zip(moments, grads, strict=True)]
        weights = [w - lr * v for w, v in zip(weights, moments, strict=True)]
    return weights


@pytest.fixture(autouse=True)
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.GRAPH_MODE)  # the default: leave it for the next test


def assert_close_all(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL)


# -- tests -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["GRAPH_MODE", "PYNATIVE_MODE"])
def test_grad_operation_by_list_matches_jax(mode):
    ms.set_context(mode=getattr(ms, mode), device_target="CPU")
    assert ms.get_context("mode") == getattr(ms, mode)
    net = make_net()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    x, y = data()
    grads = GradNet(loss_net)(x, y)
    assert_close_all(grads, oracle_grads(values(net), x, y))


def test_value_and_grad_with_weights_and_sgd_matches_jax():
    """MindSpore 2.x's functional style: value_and_grad over the optimizer's
    parameters, then `optimizer(grads)`."""
    net = make_net()
    loss_fn = nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)
    x, y = data()
    before = values(net)
    loss, grads = grad_fn(x, y)
    np.testing.assert_allclose(float(loss), float(oracle_loss(before, x, y)), **TOL)
    want = oracle_grads(before, x, y)
    assert_close_all(grads, want)
    optimizer(grads)
    assert_close_all(values(net), [w - 0.1 * g for w, g in zip(before, want, strict=True)])


@pytest.mark.parametrize("wrapper", ["TrainOneStepCell", "hand-written"])
def test_momentum_train_steps_match_jax(wrapper):
    net = make_net()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    if wrapper == "TrainOneStepCell":
        step = nn.TrainOneStepCell(loss_net, optimizer)
    else:
        step = TrainStep(loss_net, optimizer)
    step.set_train()
    x, y = data()
    start = values(net)
    losses = [float(step(x, y)) for _ in range(3)]
    np.testing.assert_allclose(losses[0], float(oracle_loss(start, x, y)), **TOL)
    assert losses[2] < losses[0]
    assert_close_all(values(net), oracle_momentum(start, x, y, 0.05, 0.9, steps=3))


def test_checkpoint_round_trip(tmp_path):
    net = make_net(seed=1)
    x, _ = data()
    path = str(tmp_path / "net.ckpt")
    ms.save_checkpoint(net, path)
    fresh = make_net(seed=2)
    assert not np.allclose(np.asarray(fresh(x)), np.asarray(net(x)))
    param_dict = ms.load_checkpoint(path)
    not_loaded, _ = ms.load_param_into_net(fresh, param_dict)
    assert not not_loaded
    np.testing.assert_array_equal(np.asarray(fresh(x)), np.asarray(net(x)))


def test_submodule_imports_and_primitives_in_a_cell_match_jax():
    """`P`, `F`, `C` as MindSpore code imports them, used in a parsed construct."""
    import k_transform.mindspore.common.dtype as mstype
    import k_transform.mindspore.dataset as ds
    import k_transform.mindspore.nn as msnn
    from k_transform.mindspore.common.initializer import Normal, initializer
    from k_transform.mindspore.ops import composite as C
    from k_transform.mindspore.ops import functional as F
    from k_transform.mindspore.ops import operations as P

    assert msnn is nn and C.GradOperation is ops.GradOperation and F.grad is ms.grad
    assert mstype.float32 == ms.float32 == jnp.float32 and ms.int32 == jnp.int32
    assert ms.float16 == jnp.float16 and ms.float64 == jnp.float64 and ms.bool_ == jnp.bool_
    assert Tensor([1, 2], mstype.float32).dtype == jnp.float32
    assert context.GRAPH_MODE == ms.GRAPH_MODE == 0 and context.PYNATIVE_MODE == 1
    assert len(list(ds.NumpySlicesDataset((np.zeros((4, 2)),), shuffle=False).batch(2))) == 2

    class Model(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(initializer(Normal(0.5), (3, 4), mstype.float32), name="w")
            self.matmul = P.MatMul(transpose_b=True)
            self.tanh = P.Tanh()
            self.reduce_sum = P.ReduceSum(keep_dims=False)

        def construct(self, x):
            h = self.tanh(self.matmul(x, self.w))
            return self.reduce_sum(F.square(h), 1) + ops.reduce_mean(F.exp(x), 1)

    model = Model()
    x, _ = data()
    weights = ParameterTuple(model.trainable_params())
    grad_x, grad_w = C.GradOperation(get_all=True, get_by_list=True)(model, weights)(x)

    def oracle(w, x):
        h = jnp.tanh(x @ w.T)
        return jnp.sum(jnp.sum(h**2, 1) + jnp.mean(jnp.exp(x), 1))

    w = jnp.asarray(np.asarray(model.w.data))
    want_w, want_x = jax.grad(oracle, argnums=(0, 1))(w, x)
    np.testing.assert_allclose(np.asarray(grad_x[0]), np.asarray(want_x), **TOL)
    np.testing.assert_allclose(np.asarray(grad_w[0]), np.asarray(want_w), **TOL)


@pytest.mark.parametrize(
    "module, name, says",
    [
        (ms, "set_device", "k_transform has no such name yet"),
        (nn, "ReLU6", "k_transform has no such name yet"),
        (ops, "TensorScatterUpdate", "k_transform has no such name yet"),
        (ops, "Argmax", "k_transform has a different `Argmax`"),
        (context, "set_ps_context", "k_transform has no such name yet"),
    ],
)
def test_a_missing_name_raises_naming_it(module, name, says):
    with pytest.raises(AttributeError) as info:
        getattr(module, name)
    message = str(info.value)
    assert f"{module.__name__.removeprefix('k_transform.')}.{name}`" in message
    assert says in message
    assert not hasattr(module, name)
    with pytest.raises(ImportError):
        exec(f"from {module.__name__} import {name}", {})


def test_set_context_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="mode must be"):
        ms.set_context(mode=2)
    with pytest.raises(ValueError, match="enable_auto_mixed_precision"):
        ms.set_context(enable_auto_mixed_precision=True)
    with pytest.raises(ValueError, match="'variable_memory_max_size'"):
        ms.get_context("variable_memory_max_size")


class RowScale(nn.Cell):
    def construct(self, x, w):
        return ops.reduce_sum(ops.vmap(lambda r, v: ops.tanh(r * v), in_axes=(0, None))(x, w))


def test_vmap_is_mindspores_and_batched():
    """`ms.vmap` / `ops.vmap(fn, in_axes, out_axes)` (absent before): in a
    parsed construct it runs batched (`frontend/batching.py`)."""
    x, w = jnp.arange(6.0).reshape(2, 3) / 5, jnp.array([0.5, -1.0, 2.0])
    want = jax.grad(lambda a, b: jnp.sum(jnp.tanh(a * b)), argnums=(0, 1))(x, w)
    got = ms.ops.GradOperation(get_all=True)(RowScale())(x, w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert ms.vmap is ops.vmap


def test_the_tensor_function():
    """`mindspore.tensor(data, dtype)` (MindSpore 2.3+, used throughout its
    docstrings) was our `tensor` submodule: "'module' object is not callable"."""
    import k_transform.mindspore as mindspore

    x = mindspore.tensor([[1, 2], [3, 4]], mindspore.float32)
    assert x.dtype == np.float32 and x.shape == (2, 2)
    got = mindspore.ops.grad(lambda t: (t**2).sum())(x)
    np.testing.assert_allclose(got, 2.0 * np.array([[1, 2], [3, 4]], np.float32))
