"""Idioms of model code that reached generated code unhandled.

- Zero-argument `super()` (`frontend.calls.super_call`) means what Python
  means: `super(__class__, first)`, the class cell of the method and its first
  argument; `super(C, obj)` of constants is made by the parser, so the parent's
  method is parsed (a Cell's Parameters read there get their gradients). A
  Cell's own `__call__` is what `cell(x)` runs (`callables.user_call_method`).
- Constants whose repr is no literal of their own type (IntEnum members,
  NumPy scalars, NamedTuples) are referenced, not written as repr
  (`codegen.emit._literal`); static arguments key programs by the type of
  each part (`compiled._hashable`).
- A registered pytree module given as an argument and called, `layer(x)`, is
  a method call whose first input is the module (`traced._object_call`): its
  leaves get gradients, at any order.

Oracles: jax.grad / jax.jvp on the same program, or closed forms.
"""

import collections
import dataclasses
import enum
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms
from k_transform.codegen.emit import _literal
from k_transform.mindspore import Parameter, Tensor, nn, ops

X = jnp.array([0.1, 0.5, 1.2])


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def _close(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


# -- zero-argument super() -------------------------------------------------------------------
class Base:
    scale = 4.0

    def f(self, x):
        return 2.0 * jnp.sin(x)

    @property
    def offset(self):
        return 0.5


class Child(Base):
    scale = 1.0

    def f(self, x):
        y = x
        for _ in range(2):  # in a loop body and a branch too
            y = y + super().f(y)
        if x.shape[0] > 1:
            y = y * super().f(x)
        return y + x * super().scale + super().offset


class M1(Base):
    def f(self, x):
        return 2.0 * super().f(x)


class M2(Base):
    def f(self, x):
        return x * super().f(x)


class Diamond(M1, M2):  # super() in M1 goes to M2 for a Diamond
    def f(self, x):
        s = super()
        return s.f(x) + 1.0


class Rebinds(Base):
    def f(self, x, other):
        self = other  # noqa: F841 -- super() reads the first argument as it is now
        return super().f(x)


class Other(Rebinds):  # super(Rebinds, Other()).f is Base.f
    def f(self, x, other):
        return jnp.exp(x)


CHILD, DIAMOND, REBINDS, OTHER = Child(), Diamond(), Rebinds(), Other()


@pytest.mark.parametrize(
    "loss",
    [
        lambda x: jnp.sum(CHILD.f(x)),
        lambda x: jnp.sum(DIAMOND.f(x)),
        lambda x: jnp.sum(REBINDS.f(x, OTHER)),
    ],
    ids=["loop_branch_attrs", "mro", "rebound_self"],
)
def test_zero_argument_super(mode, loss):
    _close(kt.grad(loss)(X), jax.grad(loss)(X))
    if mode == "graph":
        _close(kt.jit(loss)(X), loss(X))


class MakerBase:
    k = 2.0

    @classmethod
    def make(cls, x):
        return jnp.cos(x) * cls.k


class Maker(MakerBase):
    k = 3.0

    @classmethod
    def make(cls, x):
        return super().make(x) + x * cls.k


class Holder:
    def __init__(self, s):
        self.s = s


class Scaled(Holder):
    def __init__(self, s):
        super().__init__(s * 2.0)

    def f(self, x):
        return x * self.s


def test_super_in_classmethod_and_in_init_of_object_built_in_loss():
    def loss(x):
        return jnp.sum(Maker.make(x)) + jnp.sum(Scaled(3.0).f(x))

    _close(kt.grad(loss)(X), jax.grad(loss)(X))

    def traced_init(x):  # an object of traced values: the loss runs as Python
        return jnp.sum(Scaled(x).f(x))

    _close(kt.grad(traced_init)(X), jax.grad(traced_init)(X))


class InLambda(Base):
    def f(self, x):
        g = lambda: super().f(x)  # noqa: E731 -- Python: "super(): no arguments"
        return g()


IN_LAMBDA = InLambda()


def test_super_where_python_raises_still_raises():
    with pytest.raises(RuntimeError):
        IN_LAMBDA.f(X)
    with pytest.raises((RuntimeError, kt.KTransformError), match="super"):
        kt.grad(lambda x: jnp.sum(IN_LAMBDA.f(x)))(X)


W = np.array([1.0, 2.0, 3.0], np.float32)
XX = np.array([0.1, 0.2, 0.3], np.float32)


class BaseCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(W), name="w")

    def construct(self, x):
        return x * self.w


class ZeroArg(BaseCell):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(super().construct(x)))


class Explicit(BaseCell):  # was a zero gradient for w: the parent's method ran as Python
    def construct(self, x):
        return ops.reduce_sum(ops.sin(super(Explicit, self).construct(x)))  # noqa: UP008


class ByType(BaseCell):
    def construct(self, x):
        return ops.reduce_sum(ops.sin(super(type(self), self).construct(x)))


class InHelper(BaseCell):
    def helper(self, x):
        return super().construct(x)

    def construct(self, x):
        return ops.reduce_sum(ops.sin(self.helper(x)))


@pytest.mark.parametrize("cls", [ZeroArg, Explicit, ByType, InHelper])
def test_super_construct_in_cell(mode, cls):
    net = cls()
    d_x = ms.ops.GradOperation()(net)(Tensor(XX))
    params = ms.ParameterTuple(net.trainable_params())
    (d_w,) = ms.ops.GradOperation(get_by_list=True)(net, params)(Tensor(XX))
    _close(d_x, np.cos(XX * W) * W)
    _close(d_w, np.cos(XX * W) * XX)


class Doubled(BaseCell):
    def __call__(self, x):  # what `cell(x)` runs, not construct alone
        return super().__call__(x) * 2.0


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.inner = Doubled()

    def construct(self, x):
        return ops.reduce_sum(ops.sin(self.inner(x)))


def test_cell_overriding_call_with_super_call(mode):
    net = Outer()
    assert np.isclose(float(net(Tensor(XX))), np.sum(np.sin(2 * XX * W)), rtol=1e-6)
    d_x = ms.ops.GradOperation()(net)(Tensor(XX))
    params = ms.ParameterTuple(net.trainable_params())
    (d_w,) = ms.ops.GradOperation(get_by_list=True)(net, params)(Tensor(XX))
    _close(d_x, np.cos(2 * XX * W) * 2 * W)
    _close(d_w, np.cos(2 * XX * W) * 2 * XX)


# -- constants that are no literals ----------------------------------------------------------
class Power(enum.IntEnum):
    ONE = 1
    TWO = 2


class Dim(enum.IntEnum):
    BATCH = 0
    FEAT = 1


class Scale(float, enum.Enum):
    BIG = 2.0


def enum_numbers(x):
    y = jnp.sum(x**Power.TWO * Scale.BIG + Power.ONE * x)
    return y + jnp.sum(jnp.mean(x, axis=Dim.BATCH) ** 2) + x[0, Dim.FEAT] * 3.0


def test_enum_members_used_as_numbers():
    """`x ** Power.TWO`, `axis=Dim.BATCH`, `x[0, Dim.FEAT]`, `x * Scale.BIG`."""
    x = jnp.array([[-1.0, 0.5, 2.0], [0.3, 0.2, 0.1]])
    _close(kt.grad(enum_numbers)(x), jax.grad(enum_numbers)(x))
    _close(kt.jit(enum_numbers)(x), enum_numbers(x))


class MyStr(str):
    pass


Pt = collections.namedtuple("Pt", "a b")
LITERALS = [
    True, 3, -3, 10**30, 2.5, -0.0, math.inf, -math.inf, math.nan, "q'\"", b"xy", None, ...,
    (1, -2.0), (), slice(1, None, -1),
]  # fmt: skip
NOT_LITERALS = [
    Power.TWO, Scale.BIG, MyStr("s"), np.float64(2.5), np.float32(2.0), np.int64(3),
    np.bool_(True), 1 + 2j, Pt(1, 2), (Power.TWO, 1), slice(1, Power.TWO),
]  # fmt: skip


@pytest.mark.parametrize("value", LITERALS + NOT_LITERALS, ids=repr)
def test_literal_is_the_value_itself(value):
    """A literal evaluates to an equal value of the same type (sign of zero
    and NaN kept); anything else is referenced (None)."""
    text = _literal(value)
    if any(value is v for v in NOT_LITERALS):
        assert text is None
        return
    back = eval(text)  # noqa: S307 -- the emitter's own output
    assert type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)
        assert back == value or (math.isnan(back) and math.isnan(value))
    else:
        assert back == value


def _tag(c):  # run as Python (try): sees the constant's own type
    try:
        return float(len(type(c).__name__))
    except TypeError:
        return -1.0


POINT = Pt(1, 2)


def test_namedtuple_constant_keeps_its_type():
    def f(x):  # the NamedTuple was written as a plain tuple
        return x * _tag(POINT)

    _close(kt.jit(f)(X), f(X))


def test_static_arguments_keyed_by_the_type_of_each_part():
    def f(x, t):
        return x * (2.0 if type(t[0]) is bool else 3.0)

    def h(x, t):
        return x * (2.0 if isinstance(t, Power) else 3.0)

    x = jnp.ones(())
    for fn in (kt.jit(f), kt.grad(f)):
        assert [float(fn(x, (True,))), float(fn(x, (1,)))] == [2.0, 3.0]
    for fn in (kt.jit(h), kt.grad(h)):  # kt.grad: an IntEnum argument's zero gradient
        assert [float(fn(x, 1)), float(fn(x, Power.ONE))] == [3.0, 2.0]


# -- a pytree module called as the differentiated argument ------------------------------------
@jax.tree_util.register_pytree_node_class
class Linear:
    def __init__(self, w, b):
        self.w = w
        self.b = b

    def __call__(self, x):
        return x @ self.w + self.b

    def tree_flatten(self):
        return (self.w, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=[])
@dataclasses.dataclass
class Dense:
    w: jax.Array
    b: jax.Array

    def __call__(self, x):
        return jnp.tanh(x @ self.w + self.b)


XM = jnp.array([[0.3, -0.2, 0.5], [1.0, 0.1, -0.4]])
LIN = Linear(jnp.ones((3, 1)) * 0.5, jnp.array([0.2]))
DENSE = Dense(jnp.arange(6.0).reshape(3, 2) * 0.1, jnp.array([0.1, -0.2]))


def module_loss(m, x):  # called twice and read as a pytree too
    return jnp.sum(m(x) ** 2) + jnp.sum(m(2.0 * x)) + jnp.sum(m.w**2)


@pytest.mark.parametrize("module", [LIN, DENSE], ids=["pytree_class", "dataclass"])
def test_pytree_module_called(module):
    got = kt.grad(module_loss, grad_position=(0, 1))(module, XM)
    _close(got, jax.grad(module_loss, argnums=(0, 1))(module, XM))


def test_pytree_module_call_second_order():
    def norm_of_x_grad(m):  # the call is K'd twice
        return jnp.sum(kt.grad(module_loss, grad_position=1)(m, XM) ** 2)

    def oracle(m):
        return jnp.sum(jax.grad(module_loss, argnums=1)(m, XM) ** 2)

    _close(kt.grad(norm_of_x_grad)(DENSE), jax.grad(oracle)(DENSE))
