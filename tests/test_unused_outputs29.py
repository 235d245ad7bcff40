"""Items no one reads send no cotangent, whatever holds them (oracle: JAX).

A zero cotangent times an infinite slope (`sqrt` at 0) is NaN, where JAX,
whose zeros are symbolic, has numbers. `dfunctor/liveness.py` finds, item by
item, what may get a sensitivity: through a dict (a display, `dict(k=v)`, a
comprehension; read by key or `.get`), a `switch` (a recursion's `if`, a
NamedTuple out of a traced `if`), a tail call, a helper's parameter read
only in part (`use(d)` reading `d["s"]`), and a function value called
at run time (a lambda or def given as an argument or a default, a
`functools.partial`), and the aux values of a `has_aux` gradient. Each of the
first cases gave NaN before (session 29).
The second half reads the item elsewhere too (later, in a loop, through an
alias, a closure or another helper): its gradient must not become zero.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")

X = np.array([0.3, 1.2, 2.5])


def bad(x):  # sqrt(0): an infinite slope, in items no one reads
    return jnp.sqrt(jnp.sum(x * x) - jnp.sum(x * x))


def stats(x):
    return jnp.sum(x), bad(x)


class Stats(NamedTuple):
    total: object
    spread: object


# -- an unread item: no cotangent ----------------------------------------------------
def dres(x):
    return {"s": jnp.sum(x), "bad": bad(x)}


def dict_result(x):
    return dres(x)["s"] ** 2


def dict_get(x):
    return dres(x).get("s") ** 2


def dcomp(x):
    return {k: (jnp.sum(x) if k == "s" else bad(x)) for k in ("s", "bad")}


def dict_comprehension(x):
    return dcomp(x)["s"] ** 2


def dict_call(x):
    d = dict(s=jnp.sum(x), bad=bad(x))
    return d["s"] ** 2


def nested_dict(x):
    def h(x):
        return {"s": jnp.sum(x), "bad": bad(x)}, jnp.sum(x**3)

    r = h(x)
    return r[0]["s"] * r[1]


def rec(x, n):
    if n == 0:
        return jnp.sum(x), bad(x)
    a, b = rec(x * 1.5, n - 1)
    return a * 2.0, b


def recursive(x):
    a, _ = rec(x, 1)
    return a * a


def by_flag(x, flag):
    if flag:
        return Stats(jnp.sum(x), bad(x))
    return Stats(2.0 * jnp.sum(x), bad(x))


def namedtuple_switch(x):
    return by_flag(x, True).total ** 2 + by_flag(x, False)[0]


def by_sign(x):
    if jnp.sum(x) > 0:
        return Stats(jnp.sum(x * x), bad(x))
    return Stats(-jnp.sum(x), bad(x))


def namedtuple_traced_if(x):
    return by_sign(x).total * 3.0


def wrapper(x):
    return stats(x)


def tail_call(x):
    a, _ = wrapper(x)
    return a**2


def apply(f, x):
    return f(x)


def lambda_argument(x):
    a, _ = apply(lambda z: (jnp.sum(z), bad(z)), x)
    return a**2


def scaled_stats(c, x):
    return c * jnp.sum(x), bad(x)


def partial_function(x):
    p = functools.partial(scaled_stats, 2.0)
    return p(x)[0] ** 2


def s_of(d):
    return d["s"] ** 2


def dict_given_to_a_helper(x):  # `s_of` reads only d["s"] of its parameter
    return s_of({"s": jnp.sum(x), "bad": bad(x)}) + s_of(dres(x))


def first_twice(t):
    return t[0] * 2.0


def tuple_given_to_a_helper(x):
    return first_twice((jnp.sum(x), bad(x))) * jnp.sum(x)


UNREAD = [dict_result, dict_get, dict_comprehension, dict_call, nested_dict, recursive]
UNREAD += [namedtuple_switch, namedtuple_traced_if, tail_call, lambda_argument, partial_function]
UNREAD += [dict_given_to_a_helper, tuple_given_to_a_helper]


@pytest.mark.parametrize("f", UNREAD, ids=lambda f: f.__name__)
def test_an_unread_item_sends_no_cotangent_at_every_order(f):
    want = jax.grad(f)(X)
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(kt.grad(f)(X), want, rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("f", [dict_get, recursive, lambda_argument], ids=lambda f: f.__name__)
def test_grad_of_grad_and_jvp_with_an_unread_item_match_jax(f):
    got = kt.grad(lambda x: jnp.sum(kt.grad(f)(x)))(X)
    np.testing.assert_allclose(got, jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))(X), rtol=1e-12)
    out, tangent = kt.jvp(f, (X,), (X,))
    np.testing.assert_allclose([out, tangent], jax.jvp(f, (X,), (X,)), rtol=1e-12)


LOG = lambda x: jnp.log(x)  # noqa: E731


def log_by_default(x, fn=LOG):
    return fn(x)


def test_a_function_given_as_a_default_argument_at_second_order_matches_jax():
    """`fn(x)`, a call of a run-time value: K of it at the second order is
    made for the bprop the first order reads, not for `log(0)` it drops."""
    want = jax.grad(jax.grad(log_by_default))(0.0)
    assert np.isneginf(want)
    assert kt.grad(kt.grad(log_by_default))(0.0) == want


def sin_and_bad(z):
    return jnp.sum(jnp.sin(z)), bad(z)


def test_the_aux_values_of_a_gradient_get_no_cotangent():
    """`has_aux`: only `out` is differentiated; K is made for it alone."""
    grads, aux = kt.grad(sin_and_bad, has_aux=True)(X)
    want, want_aux = jax.grad(sin_and_bad, has_aux=True)(X)
    np.testing.assert_allclose(grads, want, rtol=1e-12)
    np.testing.assert_array_equal(jax.tree.leaves(aux), [want_aux])

    def k(x):
        (v, _), dz = kt.value_and_grad(sin_and_bad, has_aux=True)(x)
        return v + jnp.sum(dz)

    def j(x):
        (v, _), dz = jax.value_and_grad(sin_and_bad, has_aux=True)(x)
        return v + jnp.sum(dz)

    np.testing.assert_allclose(kt.grad(k)(X), jax.grad(j)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(k)(X), jax.hessian(j)(X), rtol=1e-12, atol=1e-14)


def dict_overwritten(x):  # the old value under "bad" is replaced: it gets none
    d = {"s": jnp.sum(x), "bad": bad(x)}
    d["bad"] = jnp.sum(x * x) * 3.0
    return d["bad"] + d["s"] ** 2


def dict_updated(x):
    d = {"s": jnp.sum(x), "bad": bad(x)}
    d["s"] = d["s"] * 2.0
    return d["s"] ** 2


@pytest.mark.parametrize("f", [dict_overwritten, dict_updated], ids=lambda f: f.__name__)
def test_an_item_assigned_over_or_left_unread_gets_no_cotangent(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-14)


# -- the item is read elsewhere: its cotangent counts ------------------------------
def pair(x):
    return jnp.sum(x * x), jnp.sum(x**3)


def dpair(x):
    return {"a": jnp.sum(x * x), "b": jnp.sum(x**3)}


def returned_whole(x):
    def helper(x):
        t = pair(x)
        return t, jnp.sum(x)

    t, _ = helper(x)
    return t[0] + t[1]


def read_later(x):
    t = pair(x)
    y = t[0] * 2.0
    return y + t[1]


def read_in_a_loop(x):
    t = pair(x)
    acc = 0.0
    for i in range(3):
        acc = acc + t[1] * i
    return t[0] + acc


def aliased(x):
    t = pair(x)
    u = t
    return u[1] * 2.0 + t[0]


def second_of(t):
    return t[1] * 2.0


def passed_to_a_helper(x):
    t = pair(x)
    return t[0] + second_of(t)


def read_by_a_closure(x):
    t = pair(x)
    g = lambda: t[1] * 3.0  # noqa: E731
    return t[0] + g()


def read_by_a_variable_index(x):
    t = pair(x)
    s = 0.0
    for i in range(2):
        s = s + t[i]
    return s


def dict_keys_in_a_loop(x):
    d = dpair(x)
    acc = 0.0
    for k in ("a", "b"):
        acc = acc + d[k]
    return acc


def dict_get_missing(x):
    d = dpair(x)
    return d.get("zz", x[0]) + d.get("b")


def b_of(d):
    return d["b"]


def dict_passed_on(x):
    d = dpair(x)
    return d["a"] * b_of(d)


def by_sign_pair(x):
    if jnp.sum(x) > 0:
        return pair(x)
    return pair(-x)


def other_item_of_a_switch(x):
    a, b = by_sign_pair(x)
    return b + jnp.sin(a)


def field_and_index(x):
    s = by_flag(x * 2.0, True)
    return s.total * s[0]


def a_and_closure(d):
    g = lambda: d["b"] * 2.0  # noqa: E731
    return d["a"] + g()


def a_and_b_of(d):
    return d["a"] + b_of(d)


def a_then_b(d, n):
    if n == 0:
        return d["a"]
    return a_then_b(d, n - 1) + d["b"]


def parameter_read_in_part(x):  # each helper reads both items of its parameter, somewhere
    return a_and_closure(dpair(x)) * a_and_b_of(dpair(x)) + a_then_b(dpair(x), 2)


READ = [returned_whole, read_later, read_in_a_loop, aliased, passed_to_a_helper]
READ += [read_by_a_closure, read_by_a_variable_index, dict_keys_in_a_loop, dict_get_missing]
READ += [dict_passed_on, other_item_of_a_switch, field_and_index, parameter_read_in_part]


@pytest.mark.parametrize("f", READ, ids=lambda f: f.__name__)
def test_an_item_read_elsewhere_keeps_its_cotangent(f):
    want = jax.grad(f)(X)
    assert np.all(want != 0.0)
    np.testing.assert_allclose(kt.grad(f)(X), want, rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-12)


def test_dict_of_pairs_is_still_a_library_call():
    def f(x):
        d = dict([("a", x * 2.0), ("b", jnp.sin(x))])
        return jnp.sum(d["a"] * d["b"])

    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)


# -- NamedTuples built by keyword, or with defaults left out (helper-82's hunt) ---------
# The items are in the class's field order, not the arguments': a read of
# `s[1]` of `NT(b=y, a=x)` is y. Read by the argument's position, the read
# item looked dead: a silent zero gradient.
class KwPair(NamedTuple):
    a: object
    b: object


class WithDefaults(NamedTuple):
    a: object
    b: object = 1.0
    c: object = 2.0


def kw_index(x):
    s = KwPair(b=jnp.sum(x**3), a=jnp.sum(x * x))
    return s[1]


def kw_unpack(x):
    a, b = KwPair(b=jnp.sum(x**3), a=jnp.sum(x * x))
    return b * a


def default_negative_index(x):
    s = WithDefaults(jnp.sum(x * x), jnp.sum(x**3))
    return s[-2]


def kw_helper(x):
    return KwPair(b=jnp.sum(x**3), a=jnp.sqrt(jnp.sum(x * x) - jnp.sum(x * x)))


def kw_helper_field(x):
    return kw_helper(x).b


def kw_helper_index(x):
    return kw_helper(x)[1] + kw_helper(x)[-1]


def kw_rnn(x):
    carry = KwPair(b=jnp.zeros(3), a=x)
    for _ in range(3):
        h, c = carry
        c2 = jnp.tanh(c + h * 0.5)
        carry = KwPair(b=c2, a=h * c2 + x)
    return jnp.sum(carry[0])


@pytest.mark.parametrize(
    "f",
    [kw_index, kw_unpack, default_negative_index, kw_helper_field, kw_helper_index, kw_rnn],
    ids=lambda f: f.__name__,
)
def test_a_namedtuple_built_by_keyword_is_read_in_field_order(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-12)
    np.testing.assert_allclose(kt.hessian(f)(X), jax.hessian(f)(X), rtol=1e-12, atol=1e-14)
    assert np.any(jax.grad(f)(X) != 0)  # (a zero would hide the bug)
