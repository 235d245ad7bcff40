"""`net(x)` in PyNative: construct runs as Python, per call, with MindSpore's
Tensor methods on arrays (`k_transform.eager`, issue 30 item 8).

The expected values are what MindSpore 2.10 (CPU, PYNATIVE_MODE) printed for
the same construct on X below (probe /tmp/s19/h8_ms.py, session 19). Each
test runs under `kt.set_mode("eager")` and "graph" (the `mode` fixture):
`net(x)` runs as Python in both, as MindSpore's PyNative call does.
"""

from __future__ import annotations

import functools
import importlib
import linecache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import nn

X = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)


class Methods(nn.Cell):
    def construct(self, x):
        return (
            x.abs(),
            x.mean(0, True),
            x.sum(1),
            x.asnumpy(),
            x.reshape(3, 2),
            x.astype(ms.float16),
            x.shape,
            x.dtype,
            x.expand_dims(0),
            x.transpose(1, 0),
            x.max(axis=0),
            x.view(3, 2),
            x.mean(axis=1, keep_dims=True),
            x.sum(1, keepdims=True),
            x.pow(2),
            (x.dim(), x.numel(), x.prod(0, True), x.mean(()), x.all()),
        )


def test_tensor_methods_give_mindspores_values(mode):
    out = Methods()(ms.Tensor(X))
    # MindSpore 2.10 PYNATIVE printed these for X (one line per output above)
    expected = [
        [[1, 2, 3], [4, 5, 6]],
        [[-1.5, 1.5, -1.5]],
        [2, -5],
        [[1, -2, 3], [-4, 5, -6]],
        [[1, -2], [3, -4], [5, -6]],
        [[1, -2, 3], [-4, 5, -6]],
    ]
    for got, want in zip(out[:6], expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert out[1].shape == (1, 3)
    assert type(out[3]) is np.ndarray and out[3].dtype == np.float32
    assert out[5].dtype == ms.float16
    assert out[6] == (2, 3) and out[7] == ms.float32
    np.testing.assert_array_equal(out[8], X[None])
    np.testing.assert_array_equal(out[9], [[1, -4], [-2, 5], [3, -6]])
    np.testing.assert_array_equal(out[10], [1, 5, 3])
    np.testing.assert_array_equal(out[11], [[1, -2], [3, -4], [5, -6]])
    np.testing.assert_allclose(out[12], [[0.6666666865348816], [-1.6666666269302368]], rtol=1e-6)
    np.testing.assert_array_equal(out[13], [[2], [-5]])
    np.testing.assert_array_equal(out[14], [[1, 4, 9], [16, 25, 36]])
    dim, numel, prod, mean_all, all_ = out[15]  # MindSpore: 2, 6, [[-4 -10 -18]], -0.5, True
    assert (dim, numel) == (2, 6) and bool(all_) is True
    np.testing.assert_array_equal(prod, [[-4, -10, -18]])
    np.testing.assert_allclose(mean_all, -0.5)


def test_view_of_a_dtype_reads_the_bits():
    class Bits(nn.Cell):
        def construct(self, x):
            return x.view(ms.int32)

    # MindSpore 2.10 PYNATIVE printed these for X.view(ms.int32)
    want = [[1065353216, -1073741824, 1077936128], [-1065353216, 1084227584, -1061158912]]
    np.testing.assert_array_equal(Bits()(ms.Tensor(X)), want)


class Scaled(nn.Cell):
    """A Parameter's methods, a helper method, a name-mangled attribute,
    a closure variable and super(): all as Python has them."""

    def __init__(self, shift):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(np.array([-1.0, 2.0, -3.0], np.float32)), name="w")
        self.__scale = 2.0
        self.calls = []

    def _helper(self, x):
        return self.__abs(x).sum(0) * self.__scale

    def __abs(self, x):
        return x.abs()

    def construct(self, x):
        self.calls.append(len(self.calls))
        print("construct ran")
        return self._helper(x) + self.w.abs() + self.w.mean(0, True)


def test_parameters_helpers_and_host_effects_run_per_call(mode, capsys):
    net = Scaled(0.0)
    x = ms.Tensor(X)
    first, second = net(x), net(x)
    # |X|.sum(0) * 2 + |w| + mean(w) = [10, 14, 18] + [1, 2, 3] - 2/3
    want = np.array([11.0, 16.0, 21.0], np.float32) - 2.0 / 3.0
    np.testing.assert_allclose(first, want, rtol=1e-6)
    np.testing.assert_array_equal(first, second)
    assert net.calls == [0, 1]  # one append per call, in graph mode too (no jit)
    assert capsys.readouterr().out == "construct ran\nconstruct ran\n"


def test_closures_and_super_keep_their_cells():
    offset = jnp.float32(1.0)

    class Base(nn.Cell):
        def construct(self, x):
            return x.abs() + offset

    class Child(Base):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.float32(-1.0)), name="w")

        def construct(self, x):
            return super().construct(x).mean(0, True) * self.factor()

        def factor(self):
            return self.w.abs()

    np.testing.assert_allclose(Child()(ms.Tensor(X)), [[3.5, 4.5, 5.5]])
    offset = jnp.float32(10.0)  # the same cell, read at the next call  # noqa: F841
    np.testing.assert_allclose(Child()(ms.Tensor(X)), [[12.5, 13.5, 14.5]])


def test_errors_point_at_the_users_line():
    class Bad(nn.Cell):
        def construct(self, x):
            return x.abs().reshape(4, 4)  # the failing line

    with pytest.raises(TypeError) as info:
        Bad()(ms.Tensor(X))
    frame = [f for f in info.traceback if f.name == "construct"][-1]
    assert "the failing line" in str(frame.statement)


def test_without_source_construct_runs_as_written():
    """No source to read (exec): the construct is called as Python wrote it,
    so a Tensor method JAX's arrays have with another meaning keeps JAX's
    (`x.mean(0, True)`: JAX reads True as a dtype and raises; never a silently
    different value), and jnp code works as before."""
    scope = {"jnp": jnp}
    exec("def construct(self, x):\n    return x.mean(0, True)\n", scope)  # noqa: S102
    exec("def jnp_construct(self, x):\n    return jnp.abs(x).mean(0)\n", scope)  # noqa: S102
    Bare = type("Bare", (nn.Cell,), {"construct": scope["construct"]})
    Plain = type("Plain", (nn.Cell,), {"construct": scope["jnp_construct"]})
    with pytest.raises(TypeError, match="data type"):
        Bare()(ms.Tensor(X))
    np.testing.assert_allclose(Plain()(ms.Tensor(X)), [2.5, 3.5, 4.5])


def test_gradients_are_unchanged():  # graph mode: eager gradients are slow, same machinery
    class Loss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.array([0.5, -1.0, 2.0], np.float32)), name="w")

        def construct(self, x):
            return (x.mean(0, True) * self.w).sum() + (x * self.w).abs().sum()

    def oracle(x, w):  # the same program over plain arrays, differentiated by JAX
        return (jnp.mean(x, 0, keepdims=True) * w).sum() + jnp.abs(x * w).sum()

    net, x = Loss(), ms.Tensor(X)
    dx, dw = kt.grad(net, grad_position=0, weights=net.trainable_params())(x)
    want_dx, want_dw = jax.jit(jax.grad(oracle, (0, 1)))(x, net.w.data)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-6)
    np.testing.assert_allclose(dw[0], want_dw, rtol=1e-6)
    np.testing.assert_allclose(net(x), jax.jit(oracle)(x, net.w.data), rtol=1e-6)


def test_a_source_edited_since_import_is_not_rewritten(tmp_path, monkeypatch):
    """The source read is checked against the code Python loaded: a file
    edited since (`* 2` -> `* 3`) leaves the construct as loaded, run as
    written (JAX's meaning of `x.mean(0, True)`: a TypeError), never the
    edited file's value."""
    path = tmp_path / "edited_cell.py"
    text = "from k_transform.mindspore import nn\n\n\n"
    text += "class Net(nn.Cell):\n    def construct(self, x):\n        return x.mean(0, True) * 2\n"
    path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    net = importlib.import_module("edited_cell").Net()
    path.write_text(text.replace("* 2", "* 3"))
    linecache.checkcache(str(path))
    with pytest.raises(TypeError, match="data type"):
        net(ms.Tensor(X))


def test_a_construct_the_parser_refuses_runs_eagerly():
    """`try` is refused by the transform (a clear KTransformError under
    kt.jit and gradients); `net(x)` is Python, so it runs, Tensor methods too."""

    class Guarded(nn.Cell):
        def construct(self, x):
            try:
                y = x.abs()
            except ValueError:
                y = x
            return y.sum()

    net = Guarded()
    np.testing.assert_allclose(net(ms.Tensor(X)), 21.0)
    with pytest.raises(kt.KTransformError, match="try/except"):
        kt.jit(net)(ms.Tensor(X))


def test_a_decorated_construct_runs_as_written():
    """A decorator may depend on the function it wraps: not rewritten, run
    as Python wrote it (jnp works; `x.mean(0, True)` has JAX's meaning, a
    TypeError, not MindSpore's)."""

    def traced(fn):
        @functools.wraps(fn)
        def wrapper(self, x):
            self.seen += 1
            return fn(self, x)

        return wrapper

    class Decorated(nn.Cell):
        seen = 0

        @traced
        def construct(self, x):
            return jnp.abs(x).sum() if self.seen == 1 else x.mean(0, True)

    net = Decorated()
    np.testing.assert_allclose(net(ms.Tensor(X)), 21.0)
    with pytest.raises(TypeError, match="data type"):
        net(ms.Tensor(X))
