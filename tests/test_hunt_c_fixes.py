# ruff: noqa: B023, B905 -- late-binding closures and zip() are what these tests exercise
"""Bug-hunt C fixes: late-binding closures in comprehensions, host NumPy
arrays changed in place between calls, a sliced loop index with a `break`,
container Cells iterated by `enumerate`/`zip`/index, `x.sort()` of a JAX
array, `x.nbytes`, `x.at[i].mul(v)`. Each is checked against
`jax.value_and_grad` of the same program (or a clear refusal)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn, ops
from tests.refusals import strict_refusal


def _same(ours, ref):
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# -- 1. closures made in comprehensions see the variable's final value ------------
def listcomp_closures(x):
    fs = [lambda: x * i for i in range(3)]
    return sum(g() for g in fs)


def dictcomp_closures(x):
    table = {k: (lambda v: v * k) for k in (1.0, 2.0, 3.0)}
    return table[1.0](x) + table[3.0](x)


def nested_listcomp_closures(x):
    fs = [lambda: x * i * j for i in range(2) for j in range(1, 3)]
    return sum(g() for g in fs)


def tuple_items_closures(x):
    pairs = [(i, lambda: x * i) for i in range(3)]
    return sum(g() * k for k, g in pairs)


def default_binds_early(x):
    fs = [lambda i=i: x * i for i in range(3)]
    return sum(g() for g in fs)


def dict_loop_closures(x):
    d = {}
    for k in range(3):
        d[k] = lambda: x * k
    return d[0]() + d[1]()


def genexpr_closures(x):  # lazy: each closure is called before the next item
    return sum(g() for g in (lambda: x * i for i in range(3)))


@pytest.mark.parametrize(
    "fn",
    [
        listcomp_closures,
        dictcomp_closures,
        nested_listcomp_closures,
        tuple_items_closures,
        default_binds_early,
        dict_loop_closures,
        genexpr_closures,
    ],
)
def test_comprehension_closures_bind_late(fn):
    x = jnp.array(1.5)
    _same(kt.value_and_grad(fn)(x), jax.value_and_grad(fn)(x))


def closures_over_a_list_argument(x, ys):
    fs = [lambda: x * y for y in ys]
    return sum(g() for g in fs)


def test_comprehension_closures_over_a_runtime_length():
    x, ys = jnp.array(1.5), [jnp.array(1.0), jnp.array(2.0)]
    _same(kt.value_and_grad(closures_over_a_list_argument)(x, ys), (6.0, 4.0))


# -- 2. a host NumPy array changed in place is read again -------------------------
W = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def uses_global_array(x):
    return jnp.sum((W @ x) ** 2)


def test_global_numpy_array_changed_in_place():
    x = jnp.array([1.0, -1.0])
    g = kt.value_and_grad(uses_global_array)
    _same(g(x), jax.value_and_grad(uses_global_array)(x))
    old = W.copy()
    try:
        W[0, 0] = 10.0
        ref = jax.value_and_grad(uses_global_array)(x)
        _same(g(x), ref)  # the same gradient function
        _same(kt.value_and_grad(uses_global_array)(x), ref)  # a fresh one
        _same(g(x), ref)  # unchanged again: the program is reused
    finally:
        W[...] = old


def test_closure_numpy_array_changed_in_place():
    m = np.array([1.0, 2.0], np.float32)

    def f(x):
        return jnp.sum(m * x**2)

    x = jnp.array([0.5, 2.0])
    g = kt.grad(f)
    _same(g(x), jax.grad(f)(x))
    m[1] = -3.0
    _same(g(x), jax.grad(f)(x))


# -- 3. a range index that bounds a slice stays a Python int with a break ---------
def first_above(x, thr):
    for i in range(x.shape[0]):
        if x[i] > thr:
            return jnp.sum(x[:i] ** 2) + x[i]
    return jnp.sum(x)


def first_above_break(x, thr):
    out = jnp.sum(x)
    for i in range(x.shape[0]):
        if x[i] > thr:
            out = jnp.sum(x[:i] ** 2) + x[i]
            break
    return out


@pytest.mark.parametrize("fn", [first_above, first_above_break])
@pytest.mark.parametrize("thr", [1.0, 10.0])
def test_sliced_loop_index_with_early_exit(fn, thr):
    x = jnp.array([0.1, 0.5, 1.5, 3.0])
    _same(kt.value_and_grad(fn)(x, thr), jax.value_and_grad(fn)(x, thr))


# -- 4. container Cells iterated by enumerate, zip and index ----------------------
class Block(nn.Cell):
    def __init__(self, d):
        super().__init__()
        self.dense = nn.Dense(d, d)

    def construct(self, x):
        return x + ops.Tanh()(self.dense(x))


class Plain(nn.Cell):
    def __init__(self):
        super().__init__()
        self.blocks = nn.CellList([Block(4) for _ in range(3)])

    def construct(self, x):
        s = 1.0
        for b in self.blocks:
            x = b(x) * s
            s = s + 1.0
        return ops.ReduceMean()(x**2)


class Enumerated(Plain):
    def construct(self, x):
        for i, b in enumerate(self.blocks):
            x = b(x) * (i + 1.0)
        return ops.ReduceMean()(x**2)


class Indexed(Plain):
    def construct(self, x):
        for i in range(len(self.blocks)):
            x = self.blocks[i](x) * (i + 1.0)
        return ops.ReduceMean()(x**2)


class Zipped(Plain):
    def construct(self, x):
        for s, b in zip([1.0, 2.0, 3.0], self.blocks):
            x = b(x) * s
        return ops.ReduceMean()(x**2)


def _cell_grads(cls):
    kt.set_seed(0)
    net = cls()
    x = jnp.linspace(-1, 1, 8).reshape(2, 4)
    return kt.GradOperation(get_by_list=True)(net, kt.ParameterTuple(net.trainable_params()))(x)


@pytest.mark.parametrize("cls", [Enumerated, Indexed, Zipped])
def test_cell_list_iterated_by_position(cls):
    _same(_cell_grads(cls), _cell_grads(Plain))


# -- array methods -------------------------------------------------------------------
def sort_method(x):
    return jnp.sum(x.sort() * jnp.arange(4.0)) + jnp.sum((x * 2).sort()[:2])


def nbytes_attribute(x):
    return x.sum() * (x.nbytes / 4) + x.itemsize * x[0]


def at_mul(x, v):
    return jnp.sum(x.at[jnp.array([0, 2])].mul(v) ** 2)


@pytest.mark.parametrize("fn", [sort_method, nbytes_attribute])
def test_array_methods(fn):
    x = jnp.array([0.3, -1.0, 2.0, 0.1])
    _same(kt.value_and_grad(fn)(x), jax.value_and_grad(fn)(x))


def at_multiply_unique(x, v):  # the oracle: JAX differentiates scatter_mul so only
    return jnp.sum(x.at[jnp.array([0, 2])].multiply(v, unique_indices=True) ** 2)


def test_at_mul_is_multiply():
    x, v = jnp.array([1.0, 2.0, 3.0, 4.0]), jnp.array([5.0, -1.0])
    ours = kt.value_and_grad(at_mul, argnums=(0, 1))(x, v)
    _same(ours, jax.value_and_grad(at_multiply_unique, argnums=(0, 1))(x, v))


def sorts_a_list_in_place(x):
    items = [x[1], x[0]]
    items.sort()
    return items[0]


def test_list_sort_in_place_runs_as_python_strict_names_its_line():
    # Session 29: the function's own list sorted in place runs as Python, exactly.
    x = jnp.array([0.3, -1.0])
    np.testing.assert_allclose(
        kt.grad(sorts_a_list_in_place)(x), jax.grad(sorts_a_list_in_place)(x)
    )
    message = strict_refusal(sorts_a_list_in_place, x)
    assert "`items.sort(...)`" in message and "test_hunt_c_fixes" in message


def sorts_a_list_argument(x, items):
    y = items.sort()
    return x * (y is None)


def test_list_argument_sort_is_refused_with_its_line():
    with pytest.raises(kt.KTransformError, match=r"(?s)\.sort\(.*test_hunt_c_fixes\.py"):
        kt.grad(sorts_a_list_argument)(1.0, [2.0, 1.0])
