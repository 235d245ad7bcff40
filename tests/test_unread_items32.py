"""An item no one reads sends no cotangent, and an item read keeps its
gradient (oracle: JAX on the same code, grad and grad of grad, in float64).

A zero times an infinite slope (`sqrt` at 0) is NaN, where JAX, whose zeros
are symbolic, has numbers. Each `unread` case gave NaN before session 32
(the gradient, or the second derivative), each `read` twin reads the item
the other leaves unread and must keep its gradient:
- `list(d.values())[0]`, `list(d.items())[0][1]`: the comprehension that
  builds the list is a closure the function only calls; it reads what K of
  each call, made for the items read, reads (`reads._called_closures`);
- `a, *_ = h(x)` and `for a, *rest in [...]`: the starred target is
  `list(value[k:])`, ops whose items liveness follows (a slice, a copy);
- `for a, b in [h(x), h(y)]` at second order: K of a loop is made of its
  twin (`differentiated_as`), which liveness now reads (`reads._callees`),
  and the loop K reads each item of the list it is given as the body reads
  its item, for the carries read (`liveness.EACH`, `_items_iterated`);
- `lax.scan` with a body that closes over a value, at second order: the
  bprop of the loop's K calls the body it is given (`reads._calls_of`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64_eager")


def pair(v, d0):
    return v * 2.0 + jnp.sin(v), jnp.sqrt(d0 * v)


# -- a list of a dict's values or items, read at one index -------------------------------
def dict_values(x, d0):
    d = {"a": x * 3.0 + jnp.sin(x), "b": jnp.sqrt(d0 * x)}
    return list(d.values())[0] * x


def dict_values_read(x, d0):
    d = {"a": x * 3.0 + jnp.sin(x), "b": jnp.sqrt(d0 * x)}
    vs = list(d.values())
    return vs[0] * vs[1]


def dict_items(x, d0):
    d = {"a": x * 2.0 + jnp.sin(x), "b": jnp.sqrt(d0 * x)}
    return list(d.items())[0][1] * x


def dict_items_read(x, d0):
    d = {"a": x * 2.0 + jnp.sin(x), "b": jnp.sqrt(d0 * x)}
    return list(d.items())[1][1] * x


# -- starred targets ----------------------------------------------------------------------
def ignored_star(x, d0):
    a, *_ = pair(x, d0)
    return a * a


def starred_read(x, d0):
    a, *rest = pair(x, d0)
    return a * rest[0]


def three(v, d0):
    return v * 2.0, jnp.sqrt(d0 * v), v * v


def starred_middle(x, d0):
    a, *_, c = three(x, d0)
    return a * c + a


def starred_middle_read(x, d0):
    a, *mid, c = three(x, d0)
    return a * c + mid[-1] * a


def for_starred(x, d0):
    t = 0.0
    for a, *_rest in [pair(x, d0), pair(x * 3.0, d0)]:
        t = t + a * a
    return t


def for_starred_read(x, d0):
    t = 0.0
    for a, *rest in [pair(x, d0), pair(x * 3.0, d0)]:
        t = t + a * rest[0]
    return t


# -- a for over a list of pairs, one item of each read (second order) ---------------------
def for_pairs(x, d0):
    t = 0.0
    for a, _b in [pair(x, d0), pair(x * 2.0, d0)]:
        t = t + a * a
    return t


def for_pairs_read(x, d0):
    t = 0.0
    for a, b in [pair(x, d0), pair(x * 2.0, d0)]:
        t = t + a * b
    return t


def pairs(x, d0):
    return [pair(x, d0), pair(x * 2.0, d0), pair(x * 3.0, d0)]


def for_pairs_of_a_helper(x, d0):  # (NaN at first order too before)
    t = 0.0
    for a, _b in pairs(x, d0):
        t = t + a * a
    return t


# -- lax.scan of a closure whose second output no one reads (second order) ----------------
def scan_closure(x, d0):
    d = x * d0

    def body(c, _):
        return c * 1.5 + jnp.sin(c), (c * 2.0, jnp.sqrt(d * c))

    c, (ys, _) = jax.lax.scan(body, x, None, length=2)
    return c + jnp.sum(ys)


def scan_closure_read(x, d0):
    d = x * d0

    def body(c, _):
        return c * 1.5 + jnp.sin(c), (c * 2.0, jnp.sqrt(d * c))

    c, (ys, zs) = jax.lax.scan(body, x, None, length=2)
    return c + jnp.sum(ys) * jnp.sum(zs)


UNREAD = [dict_values, dict_items, ignored_star, starred_middle, for_starred, for_pairs]
UNREAD += [for_pairs_of_a_helper, scan_closure]
READ = [dict_values_read, dict_items_read, starred_read, starred_middle_read, for_starred_read]
READ += [for_pairs_read, scan_closure_read]


def _check(f, points):
    grad, second = kt.grad(f), kt.grad(kt.grad(f))
    for x, d0 in points:
        want, want2 = jax.grad(f)(x, d0), jax.grad(jax.grad(f))(x, d0)
        assert np.isfinite(want) and np.isfinite(want2)
        np.testing.assert_allclose(grad(x, d0), want, rtol=1e-12)
        np.testing.assert_allclose(second(x, d0), want2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", UNREAD, ids=lambda f: f.__name__)
def test_an_unread_item_sends_no_cotangent(f):
    # d0 = 0: `sqrt` at 0 in what no one reads (NaN before); 0.3: a generic point
    _check(f, [(0.0, 0.0), (0.7, 0.3)])


@pytest.mark.parametrize("f", READ, ids=lambda f: f.__name__)
def test_the_item_read_keeps_its_gradient(f):
    _check(f, [(0.7, 0.3)])
