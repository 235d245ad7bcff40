"""MindSpore's `MultitypeFuncGraph`, `HyperMap`, `Map` and `F.partial`
(`k_transform/mindspore/multitype.py`).
Oracles: the values MindSpore 2.10 printed for the same programs
(GRAPH_MODE, recorded below), and `jax.grad` / `jax.hessian` of the same
programs written without the overloads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform.mindspore as ms
from k_transform.errors import KTransformError
from k_transform.mindspore import Tensor, nn, ops
from k_transform.mindspore.ops import composite as C
from k_transform.mindspore.ops import functional as F
from k_transform.mindspore.ops import operations as P

X = Tensor(np.array([1.0, 2.0], np.float32))
Y = Tensor(np.array([3.0, 5.0], np.float32))

add = C.MultitypeFuncGraph("add")


@add.register("Number", "Number")
def _add_numbers(x, y):
    return x + y + 100


@add.register("Tensor", "Tensor")
def _add_tensors(x, y):
    return x * y


@add.register("Tensor", "Number")
def _add_tensor_number(x, y):
    return x - y


@add.register("Tuple", "Tensor")
def _add_tuple_tensor(x, y):
    return x[0] + y


class Overloads(nn.Cell):
    def construct(self, x, y):
        return add(x, y), add(x, 2.0), add((x, y), y), add(3, 4)


def close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def test_the_names_are_mindsporess():
    assert ops.MultitypeFuncGraph is C.MultitypeFuncGraph
    assert ops.HyperMap is C.HyperMap and ops.Map is C.Map
    assert ops.partial is F.partial and F.partial(max, 3)(1) == 3
    assert P.Partial()(min, 3)(1) == 1


@pytest.mark.parametrize("run", ["python", "jit"])
def test_each_call_runs_the_overload_of_its_types(run):
    net = Overloads()
    out = net(X, Y) if run == "python" else ms.jit(net.construct)(X, Y)
    # MindSpore 2.10 printed: [3, 10], [-1, 0], [4, 7], 107
    close(out[0], [3.0, 10.0])
    close(out[1], [-1.0, 0.0])
    close(out[2], [4.0, 7.0])
    assert out[3] == 107


def test_the_gradient_goes_through_the_overloads():
    def f(a, b):
        return add(a, b).sum() + add(a, 2.0).sum() + add((a, b), b).sum()

    got = ms.grad(f, grad_position=(0, 1))(X, Y)
    # MindSpore 2.10 printed [5, 7] and [2, 3]
    close(got[0], [5.0, 7.0])
    close(got[1], [2.0, 3.0])
    want = jax.grad(lambda a, b: (a * b).sum() + (a - 2.0).sum() + (a + b).sum(), (0, 1))(X, Y)
    close(got[0], want[0])
    close(got[1], want[1])


kind = C.MultitypeFuncGraph("kind")


@kind.register("Number")
def _kind_number(x):
    return 1


@kind.register("Bool")
def _kind_bool(x):
    return 2


def test_the_most_specific_overload_wins():
    def f(x):
        return kind(True), kind(3), kind(2.5)

    # MindSpore 2.10 printed (2, 1, 1): "Bool" over "Number", registered later
    assert f(X) == (2, 1, 1)
    assert ms.jit(f)(X) == (2, 1, 1)


def test_one_overload_runs_whatever_the_types():
    one = C.MultitypeFuncGraph("one")

    @one.register("Tensor")
    def _twice(x):
        return x * 2

    assert one(3) == 6  # MindSpore 2.10 printed 6 (its one-overload rule)
    close(ms.grad(lambda x: one(x).sum())(X), [2.0, 2.0])


def test_no_matching_overload_is_mindspores_value_error():
    def f(x):
        return add(x, "s")

    with pytest.raises(ValueError, match="cannot find fn match"):
        add(X, "s")
    with pytest.raises(ValueError, match="cannot find fn match"):
        ms.grad(lambda x: f(x).sum())(X)


def test_register_checks_the_type_names():
    f = C.MultitypeFuncGraph("f")
    with pytest.raises(RuntimeError, match="Unsupported type name: Bogus"):
        f.register("Bogus")
    with pytest.raises(KTransformError, match="no RowTensor values"):
        f.register("RowTensor")
    with pytest.raises(TypeError):
        f.register(3)


square = C.MultitypeFuncGraph("square")


@square.register("Tensor")
def _square_tensor(v):
    return v * v


@square.register("Number")
def _square_number(v):
    return v + 1


class Maps(nn.Cell):
    def __init__(self):
        super().__init__()
        self.hyper_map = C.HyperMap()
        self.add_map = C.HyperMap(add)
        self.map = C.Map()

    def construct(self, x, y):
        a = self.hyper_map(square, (x, (y, 2), [x]))
        b = self.add_map((x, y), (y, 3))
        c = self.map(square, (x, y))
        d = self.hyper_map(F.partial(add, x), (y, 2))
        e = self.hyper_map(square, [x, y])
        return a, b, c, d, e


@pytest.mark.parametrize("run", ["python", "jit"])
def test_hyper_map_and_map_give_mindspores_values(run):
    net = Maps()
    a, b, c, d, e = net(X, Y) if run == "python" else ms.jit(net.construct)(X, Y)
    # MindSpore 2.10 printed (nested structure and values):
    # a: ([1, 4], ([9, 25], 3), [[1, 4]]); b: ([3, 10], [0, 2]); c: ([1, 4], [9, 25])
    # d: ([3, 10], [-1, 0]); e: [[1, 4], [9, 25]] (a list stays a list)
    close(a[0], [1.0, 4.0])
    close(a[1][0], [9.0, 25.0])
    assert a[1][1] == 3 and isinstance(a[2], list)
    close(a[2][0], [1.0, 4.0])
    close(b[0], [3.0, 10.0])
    close(b[1], [0.0, 2.0])
    close(c[1], [9.0, 25.0])
    close(d[0], [3.0, 10.0])
    close(d[1], [-1.0, 0.0])
    assert isinstance(e, list)
    close(e[1], [9.0, 25.0])


def test_hyper_map_refuses_sequences_of_other_lengths():
    with pytest.raises(ValueError, match="one length"):
        C.HyperMap(add)((X, Y), (Y,))
    with pytest.raises(ValueError, match="one length"):
        ms.grad(lambda x: C.HyperMap(add)((x, x), (x,))[0].sum())(X)


apply_step = C.MultitypeFuncGraph("apply_step")


@apply_step.register("Tensor", "Tensor", "Tensor")
def _apply_step(lr, p, g):
    return p - lr * g


class Step(nn.Cell):
    """An optimizer's update: `hyper_map(F.partial(op, lr), params, grads)`."""

    def __init__(self):
        super().__init__()
        self.hyper_map = C.HyperMap()

    def construct(self, lr, params, grads):
        return self.hyper_map(F.partial(apply_step, lr), params, grads)


def test_hyper_map_of_a_partial_with_a_traced_value():
    def f(lr, x, y):
        new = Step()(lr, (x, y), (y, x))
        return (new[0] * new[1]).sum()

    lr = Tensor(0.5, ms.float32)
    want = jax.grad(lambda r, a, b: ((a - r * b) * (b - r * a)).sum(), (0, 1, 2))(lr, X, Y)
    for got in (ms.grad(f, (0, 1, 2))(lr, X, Y), ms.jit(ms.grad(f, (0, 1, 2)))(lr, X, Y)):
        for g, w in zip(got, want, strict=True):
            close(g, w)


branch = C.MultitypeFuncGraph("branch")


@branch.register("Tensor", "Tensor")
def _branch(a, b):
    if a.sum() > 0:  # traced under the gradient: a traced `if` in an overload
        return a * a * b
    return a * b


class Mapped(nn.Cell):
    def __init__(self):
        super().__init__()
        self.hyper_map = C.HyperMap(branch)

    def construct(self, a, b):
        r = self.hyper_map((a, b), (b, a))
        return r[0] + r[1]


def test_grad_operation_of_a_cell_mapping_an_overload_with_an_if():
    got = C.GradOperation(get_all=True)(Mapped())(X, Y)
    want = jax.grad(lambda a, b: (a * a * b + b * b * a).sum(), (0, 1))(X, Y)
    close(got[0], want[0])
    close(got[1], want[1])


def test_second_order_through_an_overload():
    def h(a, b):
        return branch(a, b).sum()

    second = ms.grad(ms.grad(h))
    close(second(X, Y), jnp.diag(jax.hessian(lambda a: (a * a * Y).sum())(X)))
    close(second(-X, Y), [0.0, 0.0])  # the other branch: linear in a


def _power_sum(p, v):
    return (v**p).sum()


class Normalize(nn.Cell):
    """`P.Partial` binding a constant, then a value of the program."""

    def __init__(self):
        super().__init__()
        self.partial = P.Partial()
        self.hyper_map = C.HyperMap()

    def construct(self, x, y):
        sums = self.hyper_map(self.partial(_power_sum, 2.0), (x, y))
        scale = 1.0 / (sums[0] + sums[1])
        return self.hyper_map(self.partial(F.mul, scale), (x, y))


def test_partial_primitive_in_hyper_map():
    weights = (jnp.array([1.0, -1.0]), jnp.array([0.5, 2.0]))

    def f(x, y):
        out = Normalize()(x, y)
        return (out[0] * weights[0]).sum() + (out[1] * weights[1]).sum()

    def oracle(x, y):
        scale = 1.0 / ((x**2).sum() + (y**2).sum())
        return (scale * x * weights[0]).sum() + (scale * y * weights[1]).sum()

    got = ms.grad(f, (0, 1))(X, Y)
    want = jax.grad(oracle, (0, 1))(X, Y)
    close(got[0], want[0])
    close(got[1], want[1])


def test_a_partial_of_values_called_directly_is_refused_under_grad():
    def f(x):
        bound = F.partial(add, x)
        return bound(x).sum()

    close(f(X), (X * X).sum())
    with pytest.raises(KTransformError, match="HyperMap or Map"):
        ms.grad(f)(X)


def test_a_traced_python_number_that_would_choose_two_overloads_is_refused():
    def f(x, s):
        return add(x, s).sum()  # ("Tensor", "Number"): x - s; ("Tensor", "Tensor"): x * s

    # a Python number argument is traced: MindSpore would read it as a
    # Number, `Tensor(2.0)` as a Tensor; the reading decides the overload
    with pytest.raises(KTransformError, match="choose different overloads"):
        ms.grad(f)(X, 2.0)
    close(ms.grad(f)(X, Tensor(2.0, ms.float32)), [2.0, 2.0])  # a strong Tensor: x * s
    close(f(X, 2.0), (X - 2.0).sum())  # Python: 2.0 stays a Number


def test_values_of_every_kind_choose_their_overload():
    pick = C.MultitypeFuncGraph("pick")

    @pick.register("Function", "Tensor")
    def _function(f, v):
        return f(v) * 2

    @pick.register("None", "Tensor")
    def _none(a, v):
        return v + 100

    @pick.register("String", "Tensor")
    def _string(a, v):
        return v * 3

    @pick.register("Dictionary", "Tensor")
    def _dictionary(a, v):
        return v * a["k"]

    def f(v):
        return (
            pick(jnp.sin, v).sum()
            + pick(None, v).sum()
            + pick("s", v).sum()
            + pick({"k": v}, v).sum()
        )

    def oracle(v):
        return (2 * jnp.sin(v) + v + 100 + 3 * v + v * v).sum()

    close(f(X), oracle(X))
    close(ms.grad(f)(X), jax.grad(oracle)(X))


def test_hyper_map_over_a_long_sequence():
    """More items than a loop unrolls by default (`control.policy`): the
    mapping's loop indexes tuples, so it must stay Python's."""
    params = tuple(X * k for k in range(12))
    lr = Tensor(0.25, ms.float32)

    def f(lr, params):
        new = C.HyperMap()(F.partial(apply_step, lr), params, params)
        return sum((p * p).sum() for p in new[::3]) + new[11].sum()

    def oracle(lr, params):
        new = [p - lr * p for p in params]
        return sum((p * p).sum() for p in new[::3]) + new[11].sum()

    got = ms.grad(f, (0, 1))(lr, params)
    want = jax.grad(oracle, (0, 1))(lr, params)
    close(got[0], want[0])
    for g, w in zip(got[1], want[1], strict=True):
        close(g, w)


def test_the_only_overload_of_an_arity_still_checks_the_types():
    two = C.MultitypeFuncGraph("two")

    @two.register("Tensor")
    def _tensor(x):
        return x * 2

    @two.register("Number", "Number")
    def _numbers(x, y):
        return x + y

    close(ms.grad(lambda x: two(x).sum())(X), [2.0, 2.0])
    with pytest.raises(ValueError, match="cannot find fn match"):
        ms.grad(lambda x: (two("s") + x).sum())(X)


def test_a_multitype_func_graph_as_the_function_differentiated():
    total = C.MultitypeFuncGraph("total")

    @total.register("Tensor", "Tensor")
    def _tensors(x, y):
        return (x * y).sum()

    @total.register("Tensor", "Number")
    def _tensor_number(x, y):
        return (x - y).sum()

    for got in (ms.grad(total, (0, 1))(X, Y), C.GradOperation(get_all=True)(total)(X, Y)):
        close(got[0], Y)
        close(got[1], X)
