"""MindSpore edge cases that used to give a silent wrong result (issue 26).

Each test is named after what it checks; every gradient is compared with
JAX's gradient of an equivalent program (float64 where it matters) or a
closed form, never with k_transform's own output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn, ops


def close(got, want, tol=1e-6):
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


# -- 5: Assign cannot change a Parameter's shape ---------------------------------------
ASSIGN = ops.Assign()


class Reshaper(kt.Cell):
    """Assigns a (1,)-shaped value to a ()-shaped Parameter: MindSpore raises."""

    def __init__(self):
        super().__init__()
        self.p = kt.Parameter(np.array(1.0, np.float32), name="p")

    def construct(self, x):
        ASSIGN(self.p, jnp.reshape(x, (1,)))  # the line the error shows
        return self.p * x


class Mover(kt.Cell):
    """A same-shape assign of a float64 value to a float32 Parameter."""

    def __init__(self):
        super().__init__()
        self.p = kt.Parameter(np.zeros(2, np.float32), name="p")

    def construct(self, x):
        ASSIGN(self.p, x * 2.0)
        return jnp.sum(self.p * x)


def test_assign_that_changes_a_parameter_shape_raises_eagerly_jitted_and_in_gradients():
    runs = {
        "eager": lambda net, x: net(x),
        "kt.jit": lambda net, x: kt.jit(net)(x),
        "GradOperation": lambda net, x: kt.GradOperation()(net)(x),
    }
    for how, run in runs.items():
        net = Reshaper()
        with pytest.raises(kt.KTransformError) as info:
            run(net, jnp.array(3.0))
        message = str(info.value)
        assert "Assign" in message and "'p'" in message, how
        assert "(1,)" in message and "()" in message, how
        assert "test_ms_edges.py" in message, how
        assert "ASSIGN(self.p, jnp.reshape(x, (1,)))" in message, how
        assert net.p.data.shape == (), how  # the Parameter kept its shape
    # A same-shape assign still works, cast to the Parameter's dtype.
    with jax.enable_x64(True):
        x = jnp.array([1.5, -2.0], jnp.float64)
        for how in ("eager", "kt.jit", "GradOperation"):
            net = Mover()
            out = runs[how](net, x)
            assert net.p.data.shape == (2,) and net.p.data.dtype == jnp.float32, how
            close(net.p.data, np.array([3.0, -4.0]))
            if how == "GradOperation":  # d/dx sum(p * x) with p fixed by the assign: p
                close(out, np.array([3.0, -4.0]))
            else:
                close(out, np.sum(np.array([3.0, -4.0]) * np.asarray(x)))


# -- 6: GradOperation of a network without inputs --------------------------------------
class NoInputs(kt.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(np.array([1.0, 2.0], np.float32), name="w")

    def construct(self):
        return jnp.sum(self.w * self.w)


def test_grad_operation_of_a_network_without_inputs_returns_an_empty_tuple(mode):
    net = NoInputs()
    d_w = 2.0 * np.array([1.0, 2.0])  # closed form of d sum(w * w) / dw
    assert kt.GradOperation()(net)() == ()
    assert kt.GradOperation(get_all=True)(net)() == ()
    by_list = kt.GradOperation(get_by_list=True)(net, net.trainable_params())()
    assert isinstance(by_list, tuple) and len(by_list) == 1
    close(by_list, (d_w,))
    both = kt.GradOperation(get_all=True, get_by_list=True)(net, net.trainable_params())()
    assert isinstance(both, tuple) and both[0] == () and len(both[1]) == 1
    close(both[1], (d_w,))
    sens = kt.GradOperation(sens_param=True)(net)(jnp.array(3.0))
    assert sens == ()


# -- 10: a user Primitive without n_inputs takes its arity from impl --------------------
class TwiceSin(kt.Primitive):
    def impl(self, x):
        return jnp.sin(x) * 2


@kt.bprop_getters.register(TwiceSin)
def _get_bprop_twice_sin(self):
    def bprop(x, out, dout):
        return (dout * 2.0 * jnp.cos(x),)

    return bprop


class SumAll(kt.Primitive):
    def impl(self, *xs):
        return sum(xs)


@kt.bprop_getters.register(SumAll)
def _get_bprop_sum_all(self):
    def bprop(xs, out, dout):
        return tuple(dout for _ in xs)

    return bprop


TWICE_SIN = TwiceSin()
SUM_ALL = SumAll()


def test_primitive_subclass_without_n_inputs_takes_its_arity_from_impl(mode):
    assert TwiceSin.n_inputs == 1 and SumAll.n_inputs is None  # *args stays variadic

    def f(x):
        return jnp.sum(TWICE_SIN(x) * x)

    def f_ref(x):
        return jnp.sum(jnp.sin(x) * 2 * x)

    with jax.enable_x64(True):
        x = jnp.array([0.3, -0.5, 1.2], jnp.float64)
        v = jnp.array([1.0, 2.0, -1.0], jnp.float64)
        close(kt.grad(f)(x), jax.grad(f_ref)(x))
        close(kt.jvp(f, (x,), (v,)), jax.jvp(f_ref, (x,), (v,)))

        def first(x):
            return kt.grad(f)(x)[0]

        close(kt.grad(first)(x), jax.grad(lambda x: jax.grad(f_ref)(x)[0])(x))

        def g(x, y):
            return jnp.sum(SUM_ALL(x, y, x) * y)

        close(
            kt.grad(g, grad_position=(0, 1))(x, v),
            jax.grad(lambda x, y: jnp.sum((2 * x + y) * y), (0, 1))(x, v),
        )


# -- 11: optional inputs take MindSpore's defaults ---------------------------------------
class Reductions(kt.Cell):
    """Every Reduce* primitive called without its axis: all axes."""

    def __init__(self):
        super().__init__()
        self.sum = ops.ReduceSum()
        self.mean = ops.ReduceMean()
        self.max = ops.ReduceMax()
        self.min = ops.ReduceMin()
        self.prod = ops.ReduceProd()
        self.keep = ops.ReduceSum(keep_dims=True)

    def construct(self, x):
        total = self.sum(x) + 2.0 * self.mean(x) + 3.0 * self.max(x) - self.min(x)
        total = total + self.prod(x) + jnp.sum(self.keep(x) * x)
        return total + self.sum(x * x, ())  # MindSpore's axis=(): all axes too


def reductions_ref(x):
    total = jnp.sum(x) + 2.0 * jnp.mean(x) + 3.0 * jnp.max(x) - jnp.min(x)
    total = total + jnp.prod(x) + jnp.sum(jnp.sum(x, keepdims=True) * x)
    return total + jnp.sum(x * x)


class Scaled(kt.Primitive):
    """A user primitive with an optional input: its default fills it in."""

    def impl(self, x, scale=3.0):
        return x * scale


@kt.bprop_getters.register(Scaled)
def _get_bprop_scaled(self):
    def bprop(x, scale, out, dout):
        return dout * scale, jnp.sum(dout * x)

    return bprop


SCALED = Scaled()


def test_reduce_primitives_without_axis_reduce_all_axes_and_optional_inputs_get_defaults(mode):
    with jax.enable_x64(True):
        x = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], jnp.float64)
        net = Reductions()
        want = reductions_ref(x)
        close(net(x), want)
        close(kt.jit(net)(x), want)
        close(kt.GradOperation()(net)(x), jax.grad(reductions_ref)(x))
        # numpy's axis=() still reduces no axis.
        close(kt.grad(lambda x: jnp.sum(jnp.sum(x, axis=()) ** 2))(x), 2 * x)

        def f(x):
            return jnp.sum(SCALED(x) * x)

        close(f(x), jnp.sum(3.0 * x * x))
        close(kt.grad(f)(x), 6.0 * x)


# -- 12: convolutions promote their inputs' dtypes ------------------------------------------
class ConvNet(kt.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=1, pad_mode="pad", padding=1, seed=0)
        self.pool = nn.MaxPool2d(2, 2)

    def construct(self, x):
        return jnp.sum(jnp.tanh(self.pool(self.conv(x))))


def conv_ref(x, w):
    dtype = jnp.result_type(x, w)
    y = jax.lax.conv_general_dilated(
        x.astype(dtype),
        w.astype(dtype),
        (1, 1),
        ((1, 1), (1, 1)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return jnp.sum(jnp.tanh(y))


def test_conv2d_with_float32_weights_promotes_float64_input_and_keeps_gradient_dtypes():
    with jax.enable_x64(True):
        net = ConvNet()
        w = net.conv.weight.data
        assert w.dtype == jnp.float32
        x = jnp.asarray(np.random.RandomState(0).randn(2, 2, 6, 6))  # float64
        want = conv_ref(x, w)
        for got in (net(x), kt.jit(net)(x)):
            assert got.dtype == jnp.float64
            close(got, want, 1e-5)
        grad_fn = kt.GradOperation(get_all=True, get_by_list=True)
        (dx,), (dw,) = grad_fn(net, net.trainable_params())(x)
        want_dx, want_dw = jax.grad(conv_ref, (0, 1))(x, w)
        assert dx.dtype == jnp.float64 and dw.dtype == jnp.float32
        assert want_dx.dtype == jnp.float64 and want_dw.dtype == jnp.float32
        close(dx, want_dx, 1e-5)
        close(dw, want_dw, 1e-5)
        # The other way round: float32 input, float64 weights.
        conv = ops.Conv2D(1, 1)
        x32, w64 = x.astype(jnp.float32), jnp.asarray(w, jnp.float64)

        def f(x, w):
            return jnp.sum(jnp.tanh(conv(x, w)))

        def f_ref(x, w):
            y = jax.lax.conv_general_dilated(
                x.astype(jnp.float64),
                w,
                (1, 1),
                ((1, 1), (1, 1)),
                dimension_numbers=("NCHW", "OIHW", "NCHW"),
            )
            return jnp.sum(jnp.tanh(y))

        got = kt.grad(f, grad_position=(0, 1))(x32, w64)
        want = jax.grad(f_ref, (0, 1))(x32, w64)
        assert [g.dtype for g in got] == [jnp.float32, jnp.float64]
        close(got, want, 1e-5)


class DenseLoss(kt.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(3, 2)

    def construct(self, x):
        return jnp.sum(jnp.tanh(self.dense(x)) ** 2)


def dense_ref(x, w, b):
    return jnp.sum(jnp.tanh(x @ w.T + b) ** 2)


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_dense_with_float32_weights_on_float64_input_gives_gradients_in_each_dtype(mode):
    """JAX's cotangents have their primal's dtype: a float32 weight used with
    a float64 input gets a float32 gradient (item 12's gradients)."""
    kt.set_mode(mode)
    try:
        with jax.enable_x64(True):
            net = DenseLoss()
            w, b = net.dense.weight.data, net.dense.bias.data
            x = jnp.asarray(np.random.RandomState(1).randn(4, 3))  # float64
            grad_fn = kt.GradOperation(get_all=True, get_by_list=True)
            (dx,), (dw, db) = grad_fn(net, net.trainable_params())(x)
            want = jax.grad(dense_ref, (0, 1, 2))(x, w, b)
            assert [g.dtype for g in (dx, dw, db)] == [g.dtype for g in want]
            assert (dx.dtype, dw.dtype) == (jnp.float64, jnp.float32)
            close((dx, dw, db), want, 1e-5)
    finally:
        kt.set_mode("graph")


class _BpropReturnsANumber(kt.Cell):
    def construct(self, x, y):
        return x * y

    def bprop(self, x, y, out, dout):
        return 2 * dout, 2  # a number for an array input: MindSpore raises


def test_a_custom_bprop_returning_a_number_for_an_array_is_refused():
    """It gave the number as the input's gradient (a shape-() gradient for a
    shape-(3,) input), silently; refused now, naming the bprop and its file."""
    with pytest.raises(kt.KTransformError, match="returned the number 2") as err:
        kt.GradOperation(get_all=True)(_BpropReturnsANumber())(jnp.ones(3), jnp.ones(3))
    assert "_BpropReturnsANumber.bprop" in str(err.value)
    assert "test_ms_edges.py" in str(err.value)
