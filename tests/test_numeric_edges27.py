"""Edges found after session 26: JAX's own-rule special functions at their
special points, `.at[]` modes, Jacobian keyword options, iterators and Cells
given as arguments, and the messages for host bookkeeping in a loss.

Oracles: JAX (`jax.grad`, `jax.jvp`, `jax.jacrev`, `jax.hessian`, a
`jax.custom_vjp` standing for a Cell's own bprop) on the same program, in
float64.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

X = np.array([0.0, 0.5, 1.0, -1.0, 2.0])
V = np.array([1.0, -0.5, 0.25, 2.0, 1.0])


def assert_same(got, expected):
    """Equal leaf by leaf, NaN and inf where JAX has them."""
    got_leaves, expected_leaves = (
        jax.tree_util.tree_leaves(got),
        jax.tree_util.tree_leaves(expected),
    )
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(got_leaves, expected_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-10, equal_nan=True)


# == 1. JAX's own rules at their special points ===================================
def entr(x):
    return jsp.entr(x)


def logit(x):
    return jsp.logit(x)


def log_ndtr(x):
    return jsp.log_ndtr(x * 20.0)  # 0, 10, 20, -20 (the series' edge), 40


def log_ndtr_order1(x):
    return jsp.log_ndtr(x * 20.0, series_order=1)


def log1mexp(x):
    return jax.nn.log1mexp(x + 1.0)  # 0 (-inf), and the two branches


def rel_entr(x):
    return jsp.rel_entr(x, jnp.array([0.0, 0.5, 1.0, 1.0, 0.0]))


def kl_div(x):
    return jsp.kl_div(jnp.array([0.0, 0.5, 0.0, 1.0, 2.0]), x)


SPECIAL = (entr, logit, log_ndtr, log_ndtr_order1, log1mexp, rel_entr, kl_div)


def special(x):
    return jnp.stack([fn(x) for fn in SPECIAL])


def test_own_rule_functions_first_order_match_jax():
    """entr' and logit' at 0 (and logit' at 1) are inf where differentiating
    their steps gave NaN; log_ndtr's gradient at the series' edge (x = -20)
    was half of JAX's (a max and a min tied) and NaN far in the tail. Each
    is now JAX's rule (a primitive of ours), in reverse and forward mode
    (one row of the Jacobian per function)."""
    assert_same(kt.jacrev(special)(X), jax.jacrev(special)(X))
    assert_same(kt.jvp(special, (X,), (V,)), jax.jvp(special, (X,), (V,)))


def test_own_rule_functions_second_order_match_jax_at_regular_points():
    """Second order through the new rules (they are parsed, so differentiate
    again), away from the special points: JAX's Hessian."""
    x = np.array([0.2, 0.5, 0.7])

    def loss(x):
        return jnp.sum(entr(x) + logit(x) * 0.5 + log_ndtr(x - 0.5) + log1mexp(x))

    assert_same(kt.hessian(loss)(x), jax.hessian(loss)(x))


# == 2. `.at[]` modes ==============================================================
IDX = np.array([0, 5, -1, 2, -7])
Y = np.array([1.0, 2.0, 3.0, 4.0])


def fill(x):
    return jnp.sum(x.at[IDX].get(mode="fill", fill_value=7.0) ** 2)


def fill_nan_2d(x):
    return jnp.sum(x.reshape(2, 2).at[jnp.array([0, 2]), 1].get(mode="fill") ** 3)


def clip(x):
    return jnp.sum(x.at[IDX].get(mode="clip") ** 2)


def promised(x):
    return jnp.sum(x.at[jnp.array([0, 2])].get(mode="promise_in_bounds", unique_indices=True) ** 2)


def set_dropped(x):
    return jnp.sum(x.at[IDX].set(x[:1] * 3.0 + jnp.arange(5.0), mode="drop") ** 2)


def add_dropped(x):
    return jnp.sum(x.at[IDX].add(x[1] * 3.0, mode="fill") ** 2)


def modes(x):
    return fill(x) + fill_nan_2d(x) + clip(x) + promised(x) + set_dropped(x) + add_dropped(x)


def test_at_modes_match_jax():
    """`.get(mode="fill", fill_value=...)` was refused: an index out of range
    reads the fill value and takes no gradient; "clip" clamps the index and
    its gradient goes to the clamped item; an update's "drop" is the default.
    Value, gradient, Hessian and jvp against JAX's."""
    for fn in (fill, clip):
        assert_same(kt.grad(fn)(Y), jax.grad(fn)(Y))
    assert_same(kt.jit(modes)(Y), jax.jit(modes)(Y))
    assert_same(kt.grad(modes)(Y), jax.grad(modes)(Y))
    assert_same(kt.jvp(modes, (Y,), (Y * 0.5,)), jax.jvp(modes, (Y,), (Y * 0.5,)))
    read = lambda x: fill(x) + clip(x)  # noqa: E731  (the new rules, differentiated again)
    assert_same(kt.hessian(read)(Y), jax.hessian(read)(Y))


def test_at_modes_refused_by_name():
    # (mode="clip" updates are supported since: tests/test_rules_forward29.py)
    def unknown_mode(x):
        return jnp.sum(x.at[IDX].get(mode="wrap"))

    with pytest.raises(kt.KTransformError, match="mode='wrap'"):
        kt.grad(unknown_mode)(Y)


# == 3. Jacobian keyword arguments =================================================
def scaled(x, scale=1.0):
    return jnp.sin(x) * scale


def scaled_loss(x, scale=1.0):
    return jnp.sum(jnp.sin(x) ** 2) * scale, {"a": x * 2.0}


XJ = np.array([0.3, -0.7, 1.1])


def test_jacobians_take_keyword_arguments_and_jax_options():
    """`kt.jacrev(f)(x, scale=2.0)` raised TypeError; so did `holomorphic=False`,
    `allow_int=False`, `kt.hessian(..., has_aux=True)`, and jacfwd of a
    function with a parameter left to its default."""
    for kt_jac, jax_jac in ((kt.jacrev, jax.jacrev), (kt.jacfwd, jax.jacfwd)):
        assert_same(kt_jac(scaled)(XJ, scale=2.0), jax_jac(scaled)(XJ, scale=2.0))
        assert_same(kt_jac(scaled, holomorphic=False)(XJ), jax_jac(scaled)(XJ))
    assert_same(kt.jacrev(scaled, allow_int=False)(XJ), jax.jacrev(scaled)(XJ))
    got = kt.hessian(scaled_loss, has_aux=True)(XJ, scale=3.0)
    assert_same(got, jax.hessian(scaled_loss, has_aux=True)(XJ, scale=3.0))
    hvp = kt.hvp(lambda x, s=2.0: jnp.sum(x**3) * s, (XJ,), XJ)  # a default: zero tangent
    np.testing.assert_allclose(hvp, 12.0 * XJ * XJ)


def keyword_only(x, y, *, scale=1.0):
    return jnp.sum(jnp.sin(x) * y**3) * scale


def test_second_order_of_a_function_with_keyword_only_parameters():
    """The gradient of a function with keyword-only parameters, transformed
    again, was its gradient w.r.t. the first input whatever argnums said:
    `kt.hessian(f, argnums=1)` gave the mixed derivative (a wrong number)."""
    for k in (0, 1):
        expected = jax.hessian(keyword_only, argnums=k)(XJ, XJ + 1.0)
        assert_same(kt.hessian(keyword_only, argnums=k)(XJ, XJ + 1.0), expected)
    inner = kt.grad(keyword_only, argnums=1)
    expected = jax.jacrev(jax.grad(keyword_only, argnums=1))(XJ, XJ + 1.0, scale=2.0)
    assert_same(kt.jacrev(inner)(XJ, XJ + 1.0, scale=2.0), expected)


def test_jacobian_keywords_inside_transformed_code():
    def outer(x):
        h, a = kt.hessian(scaled_loss, has_aux=True)(x, scale=3.0)
        return h * a["a"][0] + kt.jacfwd(scaled)(x, scale=2.0)

    def outer_jax(x):
        h, a = jax.hessian(scaled_loss, has_aux=True)(x, scale=3.0)
        return h * a["a"][0] + jax.jacfwd(scaled)(x, scale=2.0)

    assert_same(kt.jit(outer)(XJ), outer_jax(XJ))


def test_jacobian_options_jax_has_but_k_transform_refuses():
    with pytest.raises(kt.KTransformError, match="holomorphic=True"):
        kt.jacrev(scaled, holomorphic=True)
    with pytest.raises(kt.KTransformError, match="allow_int=True"):
        kt.jacrev(scaled, allow_int=True)


# == 4. iterators and Cells given as arguments ====================================
def from_iterator(x, it):
    s = 0.0
    for _ in range(3):
        c = next(it)
        s = s + c * jnp.sum(jnp.sin(x * c))
    return s


def over_iterator(x, it):
    s = 0.0
    for c in it:
        s = s + c * jnp.sum(x**3)
    return s


def test_an_iterator_argument_at_second_order():
    """kt.jacfwd of the gradient crashed (zeros_like of the iterator, then
    the loop's tangent read items of the iterator); the Hessian takes the
    items Python takes, as JAX's."""
    items = [1.0, 2.0, 3.0]
    expected = jax.hessian(from_iterator)(XJ[:2], iter(items))
    it = iter([*items, 4.0])
    assert_same(kt.hessian(from_iterator)(XJ[:2], it), expected)
    assert list(it) == [4.0]
    assert_same(kt.jacfwd(kt.grad(from_iterator))(XJ[:2], iter(items)), expected)
    expected = jax.hessian(over_iterator)(XJ[:2], iter(items))
    assert_same(kt.jacfwd(kt.grad(over_iterator))(XJ[:2], iter(items)), expected)


class TripleGradient(kt.nn.Cell):
    """sin, whose own bprop says 3 cos (not its steps' gradient)."""

    def construct(self, x):
        return jnp.sin(x)

    def bprop(self, x, out, dout):
        return (3.0 * dout * jnp.cos(x),)


@jax.custom_vjp
def triple_gradient(x):
    return jnp.sin(x)


triple_gradient.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (3.0 * g * jnp.cos(x),))

NET = TripleGradient()
NETS = [NET]


def cell_argument(x, net):
    return jnp.sum(net(x) ** 2)


def cell_from_list(x, k):
    return jnp.sum(NETS[k](x) ** 2)


def cell_partial(x, net):
    return jnp.sum(functools.partial(net)(x) ** 2)


def cell_in_python(x, net):
    try:  # runs as Python
        return jnp.sum(net(x) ** 2)
    finally:
        pass


def test_a_cell_bprop_met_at_run_time_is_its_gradient():
    """A Cell with its own bprop given as an argument (or taken from a list
    at run time) was differentiated through its steps (the true gradient
    2 sin cos, not the bprop's 6 sin cos): a wrong number with no error."""
    expected = jax.grad(lambda x: jnp.sum(triple_gradient(x) ** 2))(XJ)
    assert_same(kt.GradOperation()(cell_argument)(XJ, NET), expected)
    assert_same(kt.GradOperation()(cell_from_list)(XJ, 0), expected)
    assert_same(kt.GradOperation()(cell_partial)(XJ, NET), expected)
    assert_same(kt.jit(lambda x: kt.GradOperation()(cell_argument)(x, NET))(XJ), expected)
    assert_same(
        kt.jit(kt.GradOperation()(NET))(XJ), jax.grad(lambda x: jnp.sum(triple_gradient(x)))(XJ)
    )
    # forward mode is the bprop's too, as where the call is parsed
    parsed = kt.jvp(lambda x: jnp.sum(NET(x) ** 2), (XJ,), (XJ,))
    assert_same(kt.jvp(cell_argument, (XJ, NET), (XJ, None)), parsed)


def test_a_cell_bprop_in_code_run_as_python_is_refused():
    with pytest.raises(kt.KTransformError, match="Cell with its own bprop"):
        kt.GradOperation()(cell_in_python)(XJ, NET)


class Dense(kt.nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = kt.Parameter(jnp.array([[0.5, -1.0], [2.0, 0.3], [0.1, 0.2]]), name="w")
        self.b = kt.Parameter(jnp.array([0.1, -0.2]), name="b")

    def construct(self, x):
        return jnp.tanh(x @ self.w + self.b)


def dense_math(x):
    return jnp.tanh(x @ jnp.array([[0.5, -1.0], [2.0, 0.3], [0.1, 0.2]]) + jnp.array([0.1, -0.2]))


def test_forward_mode_with_a_cell_argument():
    """kt.jvp, jacfwd and hvp of `f(x, net)`: the Cell's tangent is None (an
    object, not differentiated); jacfwd and hvp crashed making its zeros."""
    net = Dense()

    def f(x, net):
        return net(x) * 2.0

    expected = jax.jvp(lambda x: dense_math(x) * 2.0, (XJ,), (XJ * 0.5,))
    assert_same(kt.jvp(f, (XJ, net), (XJ * 0.5, None)), expected)
    assert_same(kt.jacfwd(f)(XJ, net), jax.jacfwd(lambda x: dense_math(x) * 2.0)(XJ))
    loss = lambda x, net: jnp.sum(net(x) ** 2)  # noqa: E731
    expected_hvp = jax.jvp(jax.grad(lambda x: jnp.sum(dense_math(x) ** 2)), (XJ,), (XJ,))[1]
    assert_same(kt.hvp(loss, (XJ, net), XJ), expected_hvp)


# == 5. host bookkeeping and objects of constant arrays ==========================
MEAN = jnp.array([0.1, 0.2, 0.3])
STD = jnp.array([1.0, 2.0, 0.5])


class Normalizer:
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def __call__(self, x):
        return (x - self.mean) / self.std


def normalized_loss(x):
    return jnp.sum(Normalizer(MEAN, STD)(x) ** 2)


def test_an_object_built_from_constant_arrays(mode):
    """Refused as "returns a function holding the call's traced values"
    (they were constants); now run as Python, as one built from traced arrays."""
    assert_same(kt.grad(normalized_loss)(XJ), jax.grad(normalized_loss)(XJ))


TIMES: list = []


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        TIMES.append(time.perf_counter() - t0)
        return out

    return wrapper


@timed
def timed_loss(x):
    return jnp.sum(jnp.sin(x) ** 2)


def memo(fn):
    cache = {}

    def wrapper(n):
        if n not in cache:
            cache[n] = fn(n)
        return cache[n]

    return wrapper


@memo
def basis(n):
    return jnp.arange(n, dtype=jnp.float64) ** 2


def memo_loss(x):
    return jnp.sum(x * basis(3))


class Counter:
    def __init__(self):
        self.n = 0

    def tick(self):
        self.n += 1
        return self.n


COUNTER = Counter()


def counted_loss(x):
    COUNTER.tick()
    return jnp.sum(x**2)


def test_host_bookkeeping_messages_name_what_is_changed():
    """The refusals said "a variable of an enclosing function or a global"
    and advised returning the new value (a decorator cannot); for a plain
    object, a Parameter. They now name the global's module or the enclosing
    function, and the line."""
    with pytest.raises(kt.KTransformError, match=r"'TIMES', a global of the module") as info:
        kt.grad(timed_loss)(XJ)
    assert "TIMES.append(time.perf_counter() - t0)" in str(info.value)
    with pytest.raises(
        kt.KTransformError, match=r"'cache', a variable of the enclosing function `memo`"
    ):
        kt.grad(memo_loss)(XJ)
    with pytest.raises(kt.KTransformError, match="kept on the Counter object"):
        kt.grad(counted_loss)(XJ)
