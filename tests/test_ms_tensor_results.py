"""Results handed back to MindSpore code are read as Tensors (`out.asnumpy()`,
`g.abs()`): importing `k_transform.mindspore` gives JAX's array type the
methods of `ops/tensor_methods.METHODS` it lacks (`k_transform/mindspore/tensor.py`),
and leaves the ones it has to JAX. Oracles: NumPy and JAX on the same values."""

import jax
import jax.numpy as jnp
import numpy as np

import k_transform.mindspore as ms
from k_transform.mindspore import nn, ops
from k_transform.mindspore.tensor import ADDED, ARRAY_TYPE

X = np.array([[1.0, -2.0, 3.0], [-0.5, 4.0, -1.5]], np.float32)


class Net(nn.Cell):
    def construct(self, x):
        return ops.sin(x) * x


def test_results_of_calls_and_gradients_have_mindsporess_methods():
    out = Net()(ms.Tensor(X))
    assert isinstance(out.asnumpy(), np.ndarray)
    np.testing.assert_allclose(out.asnumpy(), np.sin(X) * X, rtol=1e-6)
    grad = ms.grad(Net())(ms.Tensor(X))
    np.testing.assert_allclose(
        grad.asnumpy(), jax.grad(lambda x: jnp.sum(jnp.sin(x) * x))(X), rtol=1e-6
    )
    np.testing.assert_allclose(out.abs().asnumpy(), np.abs(np.sin(X) * X), rtol=1e-6)
    assert out.expand_dims(0).shape == (1, 2, 3) and out.dim() == 2 and out.numel() == 6
    np.testing.assert_allclose(out.pow(2), (np.sin(X) * X) ** 2, rtol=1e-6)


def test_jaxs_own_methods_keep_their_meaning():
    assert "asnumpy" in ADDED and "abs" in ADDED
    assert not {"mean", "sum", "view", "all", "reshape", "astype"} & set(ADDED)
    x = jnp.asarray(X)
    np.testing.assert_allclose(x.mean(0), X.mean(0), rtol=1e-6)  # JAX's: axis only
    assert x.view(jnp.int32).dtype == jnp.int32  # JAX's view: a dtype
    assert isinstance(x, ARRAY_TYPE)


class ScaleIfTensor(nn.Cell):
    def construct(self, a):
        b = ms.Tensor(np.array([3.0, 4.0, 5.0], np.float32), ms.float32)
        c = ms.Tensor(a * 2.0, ms.float32)  # a dtype class among the arguments
        if isinstance(a, ms.Tensor):
            return (a * b * c).sum()
        return a.sum()


def test_tensor_is_a_class_for_isinstance_and_a_function_for_calls():
    x = ms.Tensor(np.array([1.0, 2.0, -1.0], np.float32))
    assert isinstance(x, ms.Tensor) and isinstance(ms.Parameter(x, name="p"), ms.Tensor)
    assert not isinstance(np.ones(2), ms.Tensor) and isinstance(x, ARRAY_TYPE)
    b = np.array([3.0, 4.0, 5.0], np.float32)
    np.testing.assert_allclose(ScaleIfTensor()(x), np.sum(b * 2 * x * x), rtol=1e-6)
    want = jax.grad(lambda a: jnp.sum(a * b * a * 2.0))(x)
    np.testing.assert_allclose(ms.grad(ScaleIfTensor())(x), want, rtol=1e-6)
    np.testing.assert_allclose(ms.jit(ScaleIfTensor())(x), np.sum(b * 2 * x * x), rtol=1e-6)
