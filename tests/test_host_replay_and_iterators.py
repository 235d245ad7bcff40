"""Host calls replayed by equal arguments, and iterators advanced as Python does.

- A derivative that runs the user's code again (a Jacobian's rows, a Hessian,
  a vjp's pullback) replays its host calls (`runtime.host_log`): a call is
  the recorded one when its arguments are the same, and a string is the same
  by value (two generated modules hold two copies of `"f called"`: only some
  strings are interned). Oracle: JAX's transforms, their prints and draws.
- An iterator (`itertools.count`, `product`, `iter(f, sentinel)`, ...) is a
  one-shot host object: a `for` takes its items one at a time and stops at
  its `break`; a comprehension, `list(...)` or `zip` takes them at once (zip
  as many as its other iterables have); a derivative running the code again
  replays them. Oracle: `jax.grad`, `jax.hessian`, `jax.jvp` of the same code.
"""

import contextlib
import io
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([-1.0, 0.5, 2.0])
V = jnp.array([0.3, -0.2, 1.0])

# -- host calls replayed: the same arguments by value --------------------------------
_state = {"rs": np.random.RandomState(0)}


def _effects(x):
    print("f called", 1.5, "a b")
    noise = _state["rs"].randn(3)
    return jnp.sin(x) * noise * jnp.sum(x**2)


def _scalar_effects(x):
    return jnp.sum(_effects(x))


def _run(fn):
    """`fn()`'s value, what it printed and the generator's next draw."""
    _state["rs"] = np.random.RandomState(0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn()
    return value, out.getvalue(), _state["rs"].randn()


def _pullback_twice(vjp):
    out, pull = vjp(_effects, X)
    return out, pull(V), pull(2 * V)


@pytest.mark.parametrize(
    "ours, oracle",
    [
        (lambda: kt.jacrev(_effects)(X), lambda: jax.jacrev(_effects)(X)),
        (lambda: kt.jacfwd(_effects)(X), lambda: jax.jacfwd(_effects)(X)),
        (lambda: kt.hessian(_scalar_effects)(X), lambda: jax.hessian(_scalar_effects)(X)),
        (
            lambda: kt.hvp(_scalar_effects, (X,), V),
            lambda: jax.jvp(jax.grad(_scalar_effects), (X,), (V,))[1],
        ),
        (lambda: _pullback_twice(kt.vjp), lambda: _pullback_twice(jax.vjp)),
    ],
    ids=["jacrev", "jacfwd", "hessian", "hvp", "vjp"],
)
def test_host_calls_run_once_per_call(ours, oracle):
    got, printed, draw = _run(ours)
    want, want_printed, want_draw = _run(oracle)
    assert printed == want_printed == "f called 1.5 a b\n"  # once: a string with spaces too
    assert draw == want_draw  # one draw of 3, replayed for the other rows
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_same_arguments_by_value_not_by_equality_alone():
    from k_transform.runtime.host_log import _same

    assert _same(("f called",), ("f " + "called",))  # another copy of the string
    assert _same((b"a b", 2, (None, "x y")), (b"a " + b"b", 2, (None, "x " + "y")))
    assert not _same((1,), (True,)) and not _same((1,), (1.0,))
    assert not _same((0.0,), (-0.0,))  # 1 / x tells them apart
    assert _same((np.arange(3.0),), (np.arange(3.0),))
    assert not _same((np.arange(3.0),), (np.arange(3),))  # another dtype

    class Obj:
        def __eq__(self, other):
            return True

    assert not _same((Obj(),), (Obj(),))  # a user's object: only itself


# -- iterators ------------------------------------------------------------------------
def count_break(x):
    tot = 0.0
    for i in itertools.count(1):  # unbounded: only the break ends it
        if i > 3:
            break
        tot = tot + jnp.sum(jnp.sin(x) * i)
    return tot


def cycle_break(x):
    tot, n = 0.0, 0
    for w in itertools.cycle([1.0, 2.0]):
        n = n + 1
        if n > 5:
            break
        tot = tot + jnp.sum(x**2) * w
    return tot


def repeat_times(x):
    tot = 0.0
    for k in itertools.repeat(2.0, 3):
        tot = tot + jnp.sum(jnp.sin(x) * k)
    return tot


def product_pairs(x):
    tot = 0.0
    for i, j in itertools.product(range(3), range(3)):
        tot = tot + x[i] * x[j] * (i + 1)
    return tot


def comprehensions(x):
    a = sum(x[i] * x[j] for i, j in itertools.combinations(range(3), 2))
    b = sum(x[i] * jnp.cos(x[j]) for i, j in itertools.permutations(range(3), 2))
    c = sum(x[i] * jnp.sin(x[j]) for i, j in itertools.product(range(3), repeat=2))
    return a + b + c + jnp.sum(x * jnp.array(list(itertools.repeat(2.0, 3))))


def islice_and_zip(x):
    tot = 0.0
    for i in itertools.islice(itertools.count(), 4):
        tot = tot + x[i % 3] * i
    for i, v in zip(itertools.count(), [x[0], x[1], x[2]]):  # zip takes 3 of count's
        tot = tot + v * (i + 1)
    return tot + sum(v * i for v, i in zip(x, itertools.count(5)))


class _Source:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n


def call_until_sentinel(x):
    tot = 0.0
    for k in iter(_Source(), 4):
        tot = tot + jnp.sum(jnp.sin(x) * k)
    return tot


def shared_iterator(x):
    it = itertools.count(10)
    tot = 0.0
    for a in it:  # the break leaves it at 12
        tot = tot + jnp.sum(jnp.sin(x) * a)
        if a >= 11:
            break
    for a in it:
        tot = tot + jnp.sum(x**2 * a)
        if a >= 13:
            break
    return tot + jnp.sum(x) * next(it)


def iterator_read_in_loop(x):
    it = itertools.count(1)
    tot = 0.0
    for _ in range(9):  # a loop (longer than the parser unrolls) whose body takes items of `it`
        for a in it:
            tot = tot + jnp.sum(jnp.sin(x) * a)
            if a % 2 == 0:
                break
        tot = tot + sum(jnp.sin(x[i]) * a for i, a in zip(range(2), it, strict=False))
    return tot


ITERATING = [
    count_break,
    cycle_break,
    repeat_times,
    product_pairs,
    comprehensions,
    islice_and_zip,
    call_until_sentinel,
    shared_iterator,
]


@pytest.mark.parametrize("f", ITERATING, ids=lambda f: f.__name__)
def test_iterators_gradient(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-6)
    np.testing.assert_allclose(kt.jit(f)(X), f(X), rtol=1e-6)


@pytest.mark.parametrize(
    "f, jac", [(count_break, kt.hessian), (product_pairs, kt.jacfwd), (shared_iterator, kt.hessian)]
)
def test_iterators_second_order(f, jac):
    # a Jacobian's rows and a Hessian run the code again: the items are replayed
    # (jacfwd(product_pairs) gave zeros: its rows met the iterator used up)
    want = (jax.hessian if jac is kt.hessian else jax.jacfwd)(f)(X)
    np.testing.assert_allclose(jac(f)(X), want, rtol=1e-6)


def test_iterator_read_inside_a_loop_body_second_order():
    # the reverse loop runs the body again: its items of `it` are replayed, not taken anew
    f = iterator_read_in_loop
    want = jax.jvp(jax.grad(f), (X,), (V,))[1]
    np.testing.assert_allclose(kt.hvp(f, (X,), V), want, rtol=1e-6)


def test_unbounded_iterator_made_a_sequence_is_refused(monkeypatch):
    from k_transform.runtime import python as rt_python

    monkeypatch.setattr(rt_python, "ITEMS_CAP", 50)

    def f(x):
        return sum(x * i for i in itertools.count())

    with pytest.raises(kt.KTransformError, match="unbounded"):
        kt.grad(f)(X)


def test_traced_break_over_an_iterator_is_refused_under_jit():
    def f(x):
        tot = 0.0
        for i in itertools.count(1):
            if tot > 3.0:  # traced under a jit: Python's next item depends on it
                break
            tot = tot + jnp.sum(x**2) * i
        return tot

    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-6)
    with pytest.raises(kt.KTransformError, match="iterator"):
        kt.jit(f)(X)
