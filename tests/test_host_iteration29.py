"""Iteration over values made by host code, and the host objects a program reads.

- `for` over `enumerate(...)` / `zip(...)` of lists a function run as Python
  returned (`try`, a recursive pytree flatten) took the items as host values:
  the right value, all-zero gradients (`parse_sugar.iterated_loop`, now
  `rt.zipped`: read by position where an iterable has a length).
- A dict such a function returned came back with its keys sorted (JAX's
  treedef), so iterating it visited another order (`frontend.jaxpr._in_order`).
- Indexing a user container or iterating an Enum class crashed in the
  backward pass (`rules.getitem_grad` on a host object); `setattr` on a local
  object leaked a tracer; a str in `has_aux`'s aux crashed the compiled program.

Oracle: jax.grad / jax.value_and_grad / jax.hessian of the same code, or a
closed form.
"""

import collections
import enum
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError
from k_transform.mindspore import Parameter, ParameterTuple, Tensor, nn, ops

X = jnp.array([0.3, -0.7, 1.1])


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def _close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        if isinstance(w, str):
            assert g == w
            continue
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


# -- helpers run as Python (a `try`, recursion over a pytree) ---------------------
def as_list(x):
    try:
        return [x, 2.0 * x, jnp.sin(x)]
    finally:
        pass


def short(x):
    try:
        return [3.0 * x, x * x]
    finally:
        pass


def flat(t):
    if isinstance(t, dict):
        return [v for k in sorted(t) for v in flat(t[k])]
    if isinstance(t, (list, tuple)):
        return [v for e in t for v in flat(e)]
    return [t]


def as_dict(x):
    try:
        return {"b": x, "a": 2.0 * x}
    finally:
        pass


def as_odict(x):
    try:
        return collections.OrderedDict([("b", x), ("a", 3.0 * x)])
    finally:
        pass


def nested(x):
    try:
        return {"z": [x, {"y": x * 2.0, "c": x * 3.0}], "a": x}
    finally:
        pass


# -- enumerate / zip over them ------------------------------------------------------
def enum_for(x):
    t = 0.0
    for i, q in enumerate(as_list(x)):
        t = t + jnp.sum(q**2) * (i + 1)
    return t


def enum_genexpr(x):
    return sum(jnp.sum(q**2) * (i + 1) for i, q in enumerate(as_list(x)))


def enum_listcomp(x):
    return jnp.sum(jnp.stack([jnp.sum(q**2) * (i + 1) for i, q in enumerate(as_list(x))]))


def enum_dictcomp(x):
    d = {i: jnp.sum(q**2) for i, q in enumerate(as_list(x))}
    return d[0] + 2 * d[1] + 3 * d[2]


def enum_start_break(x):
    t = 0.0
    for i, q in enumerate(as_list(x), start=2):
        if i == 4:
            break
        t = t + jnp.sum(q**3) * i
    return t


def zip_unequal(x):
    t = 0.0
    for a, b in zip(as_list(x), short(x)):  # noqa: B905 - the shortest, as written
        t = t + jnp.sum(a * jnp.cos(b))
    return t


def zip_count(x):
    t = 0.0
    for i, q in zip(itertools.count(1), short(x)):
        t = t + jnp.sum(jnp.sin(q)) * i
    return t


def zip_strict(x):
    t = 0.0
    for a, b in zip(short(x), short(2.0 * x), strict=True):
        t = t + jnp.sum(a * b)
    return t


def nested_loops(x):
    t = 0.0
    for r in range(2):
        for i, q in enumerate(short(x * (r + 1.0))):
            t = t + jnp.sum(jnp.sin(q)) * (i + 1)
    return t


def pytree_weights(params):
    return sum(jnp.sum(p**2) * (i + 1) for i, p in enumerate(flat(params)))


ITERATION = [
    enum_for,
    enum_genexpr,
    enum_listcomp,
    enum_dictcomp,
    enum_start_break,
    zip_unequal,
    zip_count,
    zip_strict,
    nested_loops,
]


@pytest.mark.parametrize("f", ITERATION, ids=lambda f: f.__name__)
def test_items_of_host_made_lists_keep_their_gradient(f, mode):
    _close(kt.value_and_grad(f)(X), jax.value_and_grad(f)(X))


def test_items_of_host_made_lists_under_jit():
    _close(kt.jit(kt.value_and_grad(enum_for))(X), jax.value_and_grad(enum_for)(X))


def test_items_of_host_made_lists_second_order():
    _close(kt.hessian(zip_count)(X), jax.hessian(zip_count)(X))


def test_recursive_pytree_flatten_then_enumerate(mode):
    params = [X, jnp.array([1.5, 0.2, -0.4])]
    _close(kt.grad(pytree_weights)(params), jax.grad(pytree_weights)(params))


def lengths(x, n):
    try:
        return [x * (k + 1.0) for k in range(n)]
    finally:
        pass


def strict_unequal(x):
    t = 0.0
    for a, b in zip(lengths(x, 2), lengths(x, 3), strict=True):
        print("item")
        t = t + jnp.sum(a * b)
    return t


def strict_unequal_broken(x):
    t = 0.0
    for a, b in zip(lengths(x, 2), lengths(x, 3), strict=True):
        t = t + jnp.sum(a * b)
        break
    return t


def test_strict_zip_of_host_made_lists(mode, capsys):
    with pytest.raises(ValueError, match="zip\\(\\) argument 2 is longer than argument 1"):
        kt.grad(strict_unequal)(X)
    assert capsys.readouterr().out.count("item") == 2  # the body ran first, as in Python
    _close(kt.grad(strict_unequal_broken)(X), jax.grad(strict_unequal_broken)(X))


# -- the order of a dict a function run as Python returned -------------------------
def dict_keys_order(x):
    ks = list(as_dict(x))
    return jnp.sum(x) * (3.0 if ks[0] == "a" else 1.0)


def dict_items_enumerated(x):
    t = 0.0
    for i, (k, v) in enumerate(as_dict(x).items()):
        t = t + jnp.sum(jnp.sin(v)) * (i + 1) * (2.0 if k == "a" else 1.0)
    return t


def odict_items_enumerated(x):
    t = 0.0
    for i, (k, v) in enumerate(as_odict(x).items()):
        t = t + jnp.sum(jnp.sin(v)) * (i + 1) * (2.0 if k == "a" else 1.0)
    return t


def zip_over_dict(x):
    t = 0.0
    d = as_dict(x)
    for k, b in zip(d, short(x)):  # noqa: B905
        t = t + jnp.sum(d[k] * b)
    return t


def nested_dict_order(x):
    d = nested(x)
    inner = list(d["z"][1])
    return jnp.sum(d[list(d)[0]][0]) * 2.0 + jnp.sum(d["z"][1][inner[0]]) * 5.0


@pytest.mark.parametrize(
    "f",
    [
        dict_keys_order,
        dict_items_enumerated,
        odict_items_enumerated,
        zip_over_dict,
        nested_dict_order,
    ],
    ids=lambda f: f.__name__,
)
def test_dict_from_python_run_code_keeps_its_order(f, mode):
    _close(kt.value_and_grad(f)(X), jax.value_and_grad(f)(X))


# -- host objects indexed or iterated ------------------------------------------------
class Container:
    def __init__(self, *ws):
        self.ws = list(ws)

    def __getitem__(self, i):
        return self.ws[i]


class Stage(enum.IntEnum):
    A = 1
    B = 2


def index_container(x):
    c = Container(2.0, 3.0)
    return c[1] * jnp.sum(x)


def iterate_enum(x):
    y = x
    for st in Stage:
        y = y * st + jnp.sin(y)
    return jnp.sum(y)


@pytest.mark.parametrize("f", [index_container, iterate_enum], ids=lambda f: f.__name__)
def test_host_objects_indexed_or_iterated(f, mode):
    _close(kt.grad(f)(X), jax.grad(f)(X))


class Lin(nn.Cell):
    def __init__(self, v):
        super().__init__()
        self.v = Parameter(Tensor(np.array(v, np.float32)), name="v")

    def construct(self, x):
        return x * self.v


def through_cell_list(x, cells):
    for i in range(2):
        x = cells[i](x)
    return x


class ByCellList(nn.Cell):
    def __init__(self):
        super().__init__()
        self.layers = nn.CellList([Lin([1.0, 2.0, 3.0]), Lin([0.5, -1.0, 2.0])])

    def construct(self, x):
        return ops.reduce_sum(through_cell_list(x, self.layers))


def read_first(x, holder):
    return holder[0] * x


class ByContainerOfParameters(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.array([1.0, 2.0, 3.0], np.float32)), name="w")
        self.holder = Container(self.w)

    def construct(self, x):
        return ops.reduce_sum(read_first(x, self.holder))


def test_cell_list_indexed_in_a_helper_gets_its_parameters_gradients(mode):
    net = ByCellList()
    x = np.array([0.1, 0.2, 0.3], np.float32)
    d0, d1 = kt.grad(net, grad_position=None, weights=ParameterTuple(net.trainable_params()))(x)
    v0, v1 = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    _close((d0, d1), (x * v1, x * v0))  # sum(x * v0 * v1)


def test_parameter_read_through_a_containers_getitem_is_refused(mode):
    net = ByContainerOfParameters()
    grad = kt.grad(net, grad_position=None, weights=ParameterTuple(net.trainable_params()))
    with pytest.raises(KTransformError, match="indexing a Container"):
        grad(np.array([0.1, 0.2, 0.3], np.float32))


class Holder:
    pass


def setattr_on_local_object(p, x):
    h = Holder()
    for i in range(2):
        setattr(h, f"layer{i}", p[f"w{i}"])
    for i in range(2):
        x = jnp.tanh(getattr(h, f"layer{i}") * x)
    return jnp.sum(x)


def test_setattr_on_a_local_object(mode):
    p = {"w0": X, "w1": jnp.array([1.5, 0.2, -0.4])}
    x = jnp.array([1.0, 2.0, 3.0])
    _close(kt.grad(setattr_on_local_object)(p, x), jax.grad(setattr_on_local_object)(p, x))


# -- a str in a compiled program's result ---------------------------------------------
def with_metrics(w, x):
    pred = jnp.tanh(w * x)
    return jnp.mean(pred**2), {"pred_mean": jnp.mean(pred), "tag": "train"}


def with_function(w, x):
    return jnp.sum(w * x), jnp.sin


def test_str_in_aux_is_returned(mode):
    x = jnp.array([1.5, 0.2, -0.4])
    got = kt.value_and_grad(with_metrics, has_aux=True)(X, x)
    want = jax.value_and_grad(with_metrics, has_aux=True)(X, x)
    _close(got, want)  # the str is returned as it is


def test_function_in_a_compiled_result_is_refused_naming_it():
    with pytest.raises(KTransformError, match="with_function returns a function"):
        kt.value_and_grad(with_function, has_aux=True)(X, X)
