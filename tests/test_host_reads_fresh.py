"""Host values a program reads are read when it runs, as Python reads them.

A class attribute (`Config.eps`, `self.eps` set on the class, one inherited
from a base class, `type(self).eps`), a method or staticmethod replaced on
the class, a partial's keywords, a mutable default and a property were read
once, when the function was first transformed: changed between two calls,
the next call (even of a fresh `kt.grad(f)`) silently used the old value
(`frontend/guards.py` guards them now; a property's getter is called). A
function run as Python that rebinds a global (`global RUNNING`) left it
bound to a leaked tracer; it holds the array now, as under `jax.grad`, and
under a jit the call is refused. Oracle: `jax.grad` of the same function
called at the same moment, and closed forms.
"""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([-1.0, 0.5, 2.0])


def same_as_jax_after(fn, change, jit=True):
    """The gradient of `fn` made and called, `change()` applied, called
    again: equal to `jax.grad(fn)` then (and under `kt.jit`, and made afresh)."""
    grads = [kt.grad(fn)] + ([kt.jit(kt.grad(fn))] if jit else [])
    for g in grads:
        g(X)
    change()
    want = jax.grad(fn)(X)
    for g in [*grads, kt.grad(fn)]:
        np.testing.assert_allclose(g(X), want, rtol=1e-6)


# -- class attributes ---------------------------------------------------------------
class Const:
    eps = 0.1


class Base:
    eps = 0.1


class Sub(Base):
    pass


class Model:
    eps = 0.1

    def loss(self, x):
        return jnp.sum(jnp.log(x**2 + self.eps))

    def loss_by_type(self, x):
        return jnp.sum(jnp.log(x**2 + type(self).eps))


SUB = Sub()
MODEL = Model()
MODULE = types.ModuleType("cfg_module")  # a user's config module
MODULE.Inner = type("Inner", (), {"eps": 0.1})
MODULE.EPS = 0.1


def by_class(x):
    return jnp.sum(jnp.log(x**2 + Const.eps))


def by_subclass_instance(x):
    return jnp.sum(jnp.log(x**2 + SUB.eps))


def by_module_class(x):
    return jnp.sum(jnp.log(x**2 + MODULE.Inner.eps))


def by_module(x):
    return jnp.sum(jnp.log(x**2 + MODULE.EPS))


def by_getattr(x):
    return jnp.sum(jnp.log(x**2 + getattr(Sub, "eps")))  # noqa: B009 - the spelling tested


CLASS_READS = {
    "Const.eps": (by_class, Const),
    "self.eps set on the class": (MODEL.loss, Model),
    "type(self).eps": (MODEL.loss_by_type, Model),
    "an instance of a subclass, set on the base": (by_subclass_instance, Base),
    "module.Inner.eps": (by_module_class, MODULE.Inner),
    "module.EPS": (by_module, MODULE),
    "getattr(Sub, 'eps'), set on the base": (by_getattr, Base),
}


@pytest.mark.parametrize("case", CLASS_READS)
def test_a_class_attribute_changed_between_calls_is_read_again(case):
    fn, owner = CLASS_READS[case]
    name = "EPS" if owner is MODULE else "eps"
    setattr(owner, name, 0.1)
    try:
        same_as_jax_after(fn, lambda: setattr(owner, name, 5.0), jit=case == "Const.eps")
    finally:
        setattr(owner, name, 0.1)


def test_an_attribute_set_on_the_instance_or_subclass_shadows_the_class_one():
    class Cfg:
        eps = 0.1

    class Child(Cfg):
        pass

    cfg = Child()

    def loss(x):
        return jnp.sum(jnp.log(x**2 + cfg.eps))

    same_as_jax_after(loss, lambda: setattr(Child, "eps", 2.0), jit=False)
    same_as_jax_after(loss, lambda: setattr(cfg, "eps", 7.0), jit=False)


def test_a_slots_field_rebound_is_read_again():
    class Slotted:
        __slots__ = ("lr",)

        def __init__(self):
            self.lr = 0.1

    cfg = Slotted()

    def loss(x):
        return jnp.sum(jnp.sin(x) * cfg.lr)

    same_as_jax_after(loss, lambda: setattr(cfg, "lr", 3.0), jit=False)


def test_a_class_list_changed_in_place_is_read_again():
    class Weights:
        ws = [1.0, 2.0]

    def loss(x):
        return jnp.sum(jnp.sin(x) * Weights.ws[0] + Weights.ws[1] * x)

    same_as_jax_after(loss, lambda: Weights.ws.__setitem__(0, 3.0), jit=False)


# -- methods replaced (monkeypatching) -----------------------------------------------
def test_a_method_or_staticmethod_replaced_on_the_class_is_called():
    class Act:
        @staticmethod
        def act(x):
            return jnp.sin(x)

        def method(self, x):
            return jnp.sin(x)

    act = Act()

    def by_static(x):
        return jnp.sum(Act.act(x))

    def by_method(x):
        return jnp.sum(act.method(x))

    def cos(x):
        return jnp.cos(x)

    def tanh(self, x):
        return jnp.tanh(x)

    same_as_jax_after(by_static, lambda: setattr(Act, "act", staticmethod(cos)), jit=False)
    same_as_jax_after(by_method, lambda: setattr(Act, "method", tanh), jit=False)
    same_as_jax_after(by_method, lambda: setattr(act, "method", cos), jit=False)


# -- partials and defaults -----------------------------------------------------------------
def scaled(x, s, t=1.0):
    return jnp.sum(jnp.sin(x) * s[0] * t)


def test_a_partials_keywords_changed_in_place_are_read_again():
    bound = [2.0]
    p = functools.partial(scaled, s=bound, t=1.0)

    def calls_it(x):
        return p(x)

    same_as_jax_after(calls_it, lambda: bound.__setitem__(0, 3.0), jit=False)
    same_as_jax_after(calls_it, lambda: p.keywords.__setitem__("t", 4.0), jit=False)
    same_as_jax_after(p, lambda: p.keywords.__setitem__("t", 0.5))  # the partial itself


def test_a_helpers_default_changed_in_place_or_replaced_is_read_again():
    scales = [2.0]

    def helper(x, s=scales, t=1.0):
        return jnp.sum(jnp.sin(x) * s[0] * t)

    def loss(x):
        return helper(x)  # the defaults are the helper's, read when it is called

    same_as_jax_after(loss, lambda: scales.__setitem__(0, -3.0), jit=False)
    same_as_jax_after(loss, lambda: setattr(helper, "__defaults__", (scales, 4.0)), jit=False)


# -- properties -----------------------------------------------------------------------------
def test_a_property_runs_where_the_line_runs():
    class Holder:
        k = 0.1
        reads = 0

        @property
        def eps(self):
            Holder.reads += 1
            return Holder.k

    h = Holder()

    def loss(x):
        return jnp.sum(jnp.log(x**2 + h.eps))

    g = kt.grad(loss)
    g(X)
    g(X)
    assert Holder.reads == 2  # once per call, as under jax.grad
    same_as_jax_after(loss, lambda: setattr(Holder, "k", 5.0), jit=False)


def test_a_cell_property_of_a_parameter_has_its_gradient():
    class Net(kt.Cell):
        def __init__(self):
            super().__init__()
            self.w = kt.Parameter(jnp.array([1.0, 2.0, 3.0]), name="w")

        @property
        def doubled(self):
            return self.w * 2.0

        def construct(self, x):
            return jnp.sum(x * self.doubled)

    net = Net()
    dx, (dw,) = kt.grad(net, weights=net.trainable_params())(X)
    np.testing.assert_allclose(dx, 2.0 * np.array([1.0, 2.0, 3.0]))  # closed form
    np.testing.assert_allclose(dw, 2.0 * np.asarray(X))  # was zeros


# -- a global rebound by a function run as Python -----------------------------------------
RUNNING = jnp.zeros(3)


def ema_loss(x):
    global RUNNING
    RUNNING = 0.9 * RUNNING + 0.1 * jax.lax.stop_gradient(x)
    return jnp.sum((x - RUNNING) ** 2)


def ema_twice(grad):
    global RUNNING
    RUNNING = jnp.zeros(3)
    grads = [np.asarray(grad(ema_loss)(X)) for _ in range(2)]
    return grads, RUNNING


def test_a_global_rebound_by_code_run_as_python_holds_the_array(mode):
    want, want_running = ema_twice(jax.grad)
    got, running = ema_twice(kt.grad)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert isinstance(running, jax.Array) and not isinstance(running, jax.core.Tracer)
    np.testing.assert_allclose(running, want_running, rtol=1e-6)


def test_a_closure_cell_rebound_by_nonlocal_holds_the_array():
    def make():
        running = jnp.zeros(3)

        def loss(x):
            nonlocal running
            running = 0.9 * running + 0.1 * jax.lax.stop_gradient(x)
            return jnp.sum((x - running) ** 2)

        return loss, lambda: running

    (ours, ours_running), (theirs, theirs_running) = make(), make()
    for _ in range(2):  # was refused: `nonlocal` in the function transformed
        np.testing.assert_allclose(kt.grad(ours)(X), jax.grad(theirs)(X), rtol=1e-6)
    assert not isinstance(ours_running(), jax.core.Tracer)
    np.testing.assert_allclose(ours_running(), theirs_running(), rtol=1e-6)


def test_a_global_rebound_under_a_jit_is_refused_and_kept():
    global RUNNING
    RUNNING = jnp.ones(3)
    with pytest.raises(kt.KTransformError, match=r"rebinds 'RUNNING'.*\n.*line \d+\n.*global"):
        kt.jit(kt.grad(ema_loss))(X)
    np.testing.assert_allclose(RUNNING, np.ones(3))  # no leaked tracer left there
