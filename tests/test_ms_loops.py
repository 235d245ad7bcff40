"""MindSpore's loop operators `ops.ForiLoop`, `ops.WhileLoop`, `ops.Scan`
(`k_transform/mindspore/loops.py`): values MindSpore 2.10 printed for the
same calls in graph mode, and gradients against `jax.grad` of the same loops
written in Python (JAX runs them on concrete values)."""

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.mindspore import Tensor, nn, ops

X = np.array([1.0, 2.0, 3.0], np.float32)


def half_and_add(c, xi):
    c = c * 0.5 + xi
    return c, c * 2


class Loops(nn.Cell):
    def __init__(self):
        super().__init__()
        self.scan, self.fori, self.while_loop = ops.Scan(), ops.ForiLoop(), ops.WhileLoop()

    def construct(self, x):
        c, ys = self.scan(half_and_add, x[0], (x[0], x[1], x[2]))
        f = self.fori(0, 3, lambda i, v: v * 1.5 + i, x)
        w = self.while_loop(lambda v: v.sum() < 100, lambda v: v * 2, x)
        return c, ys, f, w


class Total(nn.Cell):
    def __init__(self):
        super().__init__()
        self.loops = Loops()

    def construct(self, x):
        c, ys, f, w = self.loops(x)
        return c + ys[2] + f.sum() + w.sum()


def total_in_python(x):
    c, ys = x[0], []
    for xi in (x[0], x[1], x[2]):
        c, y = half_and_add(c, xi)
        ys.append(y)
    f = x
    for i in range(3):
        f = f * 1.5 + i
    w = x
    while w.sum() < 100:
        w = w * 2
    return c + ys[2] + f.sum() + w.sum()


def test_values_are_mindsporess_called_and_compiled():
    for run in (Loops(), kt.jit(Loops())):
        c, ys, f, w = run(Tensor(X))
        # MindSpore 2.10 (GRAPH_MODE) printed these
        np.testing.assert_allclose(c, 4.375)
        assert isinstance(ys, list)
        np.testing.assert_allclose(np.stack(ys), [3.0, 5.5, 8.75])
        np.testing.assert_allclose(f, [6.875, 10.25, 13.625])
        np.testing.assert_allclose(w, [32.0, 64.0, 96.0])


def test_gradient_through_the_three_loops():
    want = jax.grad(total_in_python)(jnp.asarray(X))
    np.testing.assert_allclose(ms.grad(Total())(Tensor(X)), want, rtol=1e-6)
