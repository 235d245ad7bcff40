"""Pytrees everywhere a JAX user expects them, against JAX as the oracle in float64.

NamedTuples, registered dataclasses, pytree classes with methods (equinox-style
modules) and nested dicts/lists/tuples as inputs, outputs and `has_aux` of
`kt.grad`, `value_and_grad`, `vjp`, `jvp`, `jacrev`, `jacfwd`, `hessian` and
`GradOperation`, and as values inside differentiated code (`p.w`, `p[0]`,
`p._replace(...)`, `dataclasses.replace`, constructors). Gradients come back
with the input's pytree type, as `jax.grad` gives them. Every case runs eagerly
(`kt.set_mode("eager")`) and inside the user's own `jax.jit`.
"""

import collections
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")


@pytest.fixture(params=["eager", "jit"])
def run(request):
    """Calls a k_transform function eagerly, or inside the user's jax.jit."""
    if request.param == "eager":
        kt.set_mode("eager")
        yield lambda fn, *args: fn(*args)
        kt.set_mode("graph")
    else:
        yield lambda fn, *args: jax.jit(lambda *a: fn(*a))(*args)


def close(a, b, tol=1e-10):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b), (a, b)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# -- pytree types ------------------------------------------------------------------
class Params(NamedTuple):
    w: jax.Array
    b: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Layer:
    w: jax.Array
    b: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Scaled:
    w: jax.Array
    power: int = dataclasses.field(metadata=dict(static=True))


@jax.tree_util.register_pytree_node_class
class Linear:
    """An equinox-style module: array fields, methods that use them."""

    def __init__(self, w, b):
        self.w, self.b = w, b

    def tree_flatten(self):
        return (self.w, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __call__(self, x):
        return jnp.tanh(x @ self.w + self.b)

    @property
    def scale(self):
        return jnp.exp(self.b)


# NumPy float64 (made before the x64 fixture runs; both sides see float64).
W = np.arange(6.0).reshape(2, 3) / 5 - 0.4
B = np.array([0.3, -0.2, 0.1])
X = np.array([0.7, -1.1])


# -- values inside differentiated code --------------------------------------------
def nt_attr(p, x):
    return jnp.sum(jnp.sin(x @ p.w + p.b))


def nt_index(p, x):
    w, b = p
    return jnp.sum(jnp.sin(x @ p[0] + b) * w[0, 0])


def nt_replace(p, x):
    q = p._replace(w=p.w * 2.0)
    return jnp.sum(jnp.sin(x @ q.w + q.b))


def nt_construct(p, x):
    q = Params(p.w * p.b, b=jnp.cos(p.b))
    return jnp.sum(q.w) + jnp.sum(q.b * x[0])


def dc_attr(layer, x):
    return jnp.sum(jnp.tanh(x @ layer.w) * layer.b)


def dc_replace(layer, x):
    other = dataclasses.replace(layer, b=layer.b**2)
    built = Layer(w=other.w + 1.0, b=other.b)
    return jnp.sum(jnp.sin(x @ built.w + built.b))


def dc_static_field(s, x):
    return jnp.sum((x @ s.w) ** s.power)


def module_method(m, x):
    return jnp.sum(Linear.__call__(m, x) ** 2)


def module_fields(m, x):
    return jnp.sum(jnp.tanh(x @ m.w + m.b) ** 2)


def nested(tree, x):
    inner = tree["layers"][0]
    return jnp.sum(jnp.sin(x @ inner["w"] + tree["layers"][1][1])) * tree["scale"]


CASES = {
    "namedtuple-attr": (nt_attr, Params(W, B)),
    "namedtuple-index": (nt_index, Params(W, B)),
    "namedtuple-replace": (nt_replace, Params(W, B)),
    "namedtuple-construct": (nt_construct, Params(B, B + 1.0)),
    "dataclass-attr": (dc_attr, Layer(W, B)),
    "dataclass-replace": (dc_replace, Layer(W, B)),
    "dataclass-static-field": (dc_static_field, Scaled(W, 3)),
    "module-method": (module_method, Linear(W, B)),
    "module-fields": (module_fields, Linear(W, B)),
    "nested-dict-list-tuple": (nested, {"layers": [{"w": W}, (0.5, B)], "scale": 1.5}),
}


@pytest.mark.parametrize("name", CASES)
def test_grad_of_pytree_input(name, run):
    fn, tree = CASES[name]
    got = run(kt.grad(fn), tree, X)
    close(got, jax.grad(fn)(tree, X))
    assert type(got) is type(tree)


@pytest.mark.parametrize("name", ["namedtuple-attr", "dataclass-replace", "nested-dict-list-tuple"])
def test_grad_of_both_inputs(name, run):
    fn, tree = CASES[name]
    close(run(kt.grad(fn, grad_position=(0, 1)), tree, X), jax.grad(fn, argnums=(0, 1))(tree, X))


def test_value_and_grad(run):
    got = run(kt.value_and_grad(dc_attr), Layer(W, B), X)
    close(got, jax.value_and_grad(dc_attr)(Layer(W, B), X))


def test_grad_operation_get_all(run):
    got = run(kt.GradOperation(get_all=True)(nt_attr), Params(W, B), X)
    close(got, jax.grad(nt_attr, argnums=(0, 1))(Params(W, B), X))


def test_second_order_through_fields(run):
    got = run(kt.hessian(nt_attr), Params(W, B), X)
    close(got, jax.hessian(nt_attr)(Params(W, B), X))


def test_property_is_refused():
    def uses_property(m, x):
        return jnp.sum(m.scale * x[0])

    with pytest.raises(kt.KTransformError, match="property"):
        kt.grad(uses_property)(Linear(W, B), X)


# -- has_aux, outputs ------------------------------------------------------------
def with_aux(tree, x):
    loss = jnp.sum(tree["w"] ** 2) * x[0]
    return loss, {"pred": [tree["w"] * 2.0, x], "stats": Params(jnp.sum(x), loss)}


def test_has_aux_pytree(run):
    tree = {"w": B}
    g, aux = jax.grad(with_aux, has_aux=True)(tree, X)
    close(run(kt.grad(with_aux, has_aux=True), tree, X), (g, (aux,)))  # MindSpore's (grads, (aux,))
    got = run(kt.value_and_grad(with_aux, has_aux=True), tree, X)
    close(got, jax.value_and_grad(with_aux, has_aux=True)(tree, X))


def to_params(x):
    return Params(jnp.sin(x), x * jnp.cos(x))


def to_dict(tree, x):
    return {"y": [tree.w * x[0], jnp.tanh(tree.b)], "z": (jnp.sum(tree.w),)}


def test_vjp_pytree_output(run):
    out, back = kt.vjp(to_params, X)
    ref, ref_back = jax.vjp(to_params, X)
    close(out, ref)
    v = Params(jnp.array([1.0, -2.0]), jnp.array([0.5, 3.0]))
    close(run(back, v), ref_back(v))


def test_vjp_pytree_input_and_output(run):
    tree = Layer(W, B)
    out, back = kt.vjp(to_dict, tree, X)
    ref, ref_back = jax.vjp(to_dict, tree, X)
    close(out, ref)
    v = jax.tree_util.tree_map(lambda a: jnp.ones_like(a) * 0.7, ref)
    got = run(back, v)
    close(got, ref_back(v))
    assert type(got[0]) is Layer


def test_jvp_pytree(run):
    tree = Layer(W, B)
    tangent = Layer(jnp.ones_like(W) * 0.3, jnp.array([1.0, 0.0, -1.0]))
    vx = jnp.array([0.2, 0.5])

    def jvp(t, x, vt, v):
        return kt.jvp(to_dict, (t, x), (vt, v))

    close(run(jvp, tree, X, tangent, vx), jax.jvp(to_dict, (tree, X), (tangent, vx)))


def test_jvp_namedtuple_output(run):
    v = jnp.array([1.0, -0.5])
    close(run(lambda x, t: kt.jvp(to_params, (x,), (t,)), X, v), jax.jvp(to_params, (X,), (v,)))


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobian_pytrees(jac, run):
    tree = Layer(W, B)
    got = run(getattr(kt, jac)(to_dict), tree, X)
    close(got, getattr(jax, jac)(to_dict)(tree, X))


def test_hessian_dict_input(run):
    def f(tree):
        return jnp.sum(jnp.sin(tree["a"]) * tree["b"][0] ** 2)

    tree = {"a": B, "b": [jnp.array([1.5, -0.5, 2.0])]}
    close(run(kt.hessian(f), tree), jax.hessian(f)(tree))


# -- integer leaves follow JAX ----------------------------------------------------
def with_int(tree, x):
    return jnp.sum(tree["w"] * x[0]) + jnp.sum(tree["n"])


def test_integer_leaf_refused_by_jacrev():
    """JAX-style transforms refuse an integer leaf as JAX does (`kt.grad`
    follows MindSpore's `grad` there: tests/test_ms_dropin.py)."""
    tree = {"w": B, "n": jnp.array([1, 2])}
    with pytest.raises(TypeError):
        jax.jacrev(with_int)(tree, X)
    with pytest.raises(TypeError):
        kt.jacrev(with_int)(tree, X)


def test_integer_leaf_vjp_zero(run):
    tree = {"w": B, "n": jnp.array([1, 2])}
    _, back = kt.vjp(with_int, tree, X)
    _, ref_back = jax.vjp(with_int, tree, X)
    got, ref = run(back, 1.0), ref_back(1.0)
    close(got[0]["w"], ref[0]["w"])
    close(got[1], ref[1])
    assert ref[0]["n"].dtype == jax.dtypes.float0  # JAX's float0; ours a zero integer array
    np.testing.assert_array_equal(np.asarray(got[0]["n"]), 0)


# -- dicts: iterated in differentiated code, and dict types kept -------------------
class Registry(dict):
    """A dict subclass registered as a pytree (keys sorted, as JAX's dict)."""


jax.tree_util.register_pytree_with_keys(
    Registry,
    lambda d: (tuple((jax.tree_util.DictKey(k), d[k]) for k in sorted(d)), tuple(sorted(d))),
    lambda keys, kids: Registry(zip(keys, kids, strict=True)),
)


def sum_squares(params):
    total = 0.0
    for k in params:
        total = total + jnp.sum(params[k] ** 2)
    return total


def ordered_items(params):
    total = 0.0
    for k, v in params.items():  # noqa: B007 - the form users write
        total = total * 2.0 + jnp.sum(jnp.sin(v))  # order matters
    return total


def sorted_keys(params):
    total = 0.0
    for k in sorted(params):
        total = total * 3.0 + jnp.sum(params[k] * params[k][0])
    return total


def keys_as_list(params):
    names = list(params)
    sizes = [k for k in params if k != "w"]
    total = len(params) * jnp.sum(params[names[0]] ** 2)
    if "b" in params and "missing" not in params:
        total = total + jnp.sum(jnp.cos(params[sizes[0]]))
    return total


def built_dict(x):
    d = {"z": jnp.sin(x), "a": x**2}  # insertion order, not sorted
    total = 0.0
    for k in list(d):
        total = total * 2.0 + jnp.sum(d[k])
    return total + sum_squares(d) + len(d)


DICT_FNS = [sum_squares, ordered_items, sorted_keys, keys_as_list]


@pytest.mark.parametrize("f", DICT_FNS, ids=lambda f: f.__name__)
def test_iterating_a_dict(f, run):
    """`for k in d`, `.items()`, `sorted(d)`, `list(d)`, `len(d)`, `k in d`
    (`list(d)` and comprehensions over a dict were refused: "iterating a
    dict here is not supported")."""
    params = {"w": W, "b": B}
    close(run(kt.grad(f), params), jax.grad(f)(params))
    tangent = {"w": W * 0.5 - 0.1, "b": B + 0.2}
    got = run(lambda p, t: kt.jvp(f, (p,), (t,)), params, tangent)
    close(got, jax.jvp(f, (params,), (tangent,)))


def test_iterating_a_dict_built_inside(run):
    """A dict built in the program iterates in insertion order, as Python's."""
    x = B
    assert float(built_dict(x)) == pytest.approx(float(jax.jit(built_dict)(x)))
    close(run(kt.grad(built_dict), x), jax.grad(built_dict)(x))
    close(run(kt.value_and_grad(built_dict), x), jax.value_and_grad(built_dict)(x))


@pytest.mark.parametrize(
    "make",
    [collections.OrderedDict, Registry, lambda items: collections.defaultdict(list, items)],
    ids=["OrderedDict", "registered-subclass", "defaultdict"],
)
@pytest.mark.parametrize("f", [sum_squares, ordered_items], ids=lambda f: f.__name__)
def test_dict_types_kept_by_the_gradient(make, f, run):
    """The gradient of an OrderedDict, a defaultdict or a registered dict
    subclass has the input's type (it came back a plain dict), as JAX's."""
    params = make([("w", W), ("b", B)])
    got, want = run(kt.grad(f), params), jax.grad(f)(params)
    assert type(got) is type(want)
    assert list(got) == list(want)
    close(got, want)
    _, back = kt.vjp(f, params)
    assert type(back(1.0)[0]) is type(want)
