"""Everyday JAX code k_transform refused before session 30, now accepted with
JAX's values (oracle: `jax.grad`, `jax.jvp` of the same functions):

- `functools.partial(f, ...)` of a function `f` known only at run time (an
  argument) as a `jax.vmap`, `lax.scan`, `lax.map`, `lax.cond`,
  `lax.fori_loop` or `jax.tree.map` body, or called (`prims.PartialOfValue`,
  `CallBuilder.fixed_partial`);
- `itertools` over lists of arrays (`chain`, `accumulate`, `product`, ...):
  the function runs as Python, as `map`/`sorted` of program values do;
- `print(l.item())` (JAX's gradient lends the value), `l.item()` in the loss
  run op by op; under graph mode's jit `.item()`, `jnp.nonzero(x > 0)` and a
  boolean mask `x[x > 0]` raise a KTransformError naming the line, as
  jax.jit raises;
- a `jax.custom_jvp` / `custom_vjp` function defined inside the function
  differentiated (`jax_custom.NestedCustom`); one closing over a traced
  value is refused, as JAX refuses it.
"""

import functools
import itertools
import operator
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt
from k_transform.errors import KTransformError

X = jnp.array([0.3, -0.7, 1.1])
XS = jnp.arange(6.0).reshape(2, 3) / 3


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


# -- functools.partial of a function known at run time ----------------------------
def g(w, x):
    return jnp.sin(w * x).sum()


def g_kw(x, w):
    return jnp.sin(w * x).sum()


def step(p, c, x):
    c = jnp.tanh(c * p + x)
    return c, c.sum()


def body(w, i, c):
    return c * jnp.cos(w) + i


def vmap_partial(w, fn):
    return jax.vmap(functools.partial(fn, w))(XS).sum()


def vmap_partial_kw(w, fn):
    return jax.vmap(functools.partial(fn, w=w))(XS).sum()


def scan_partial(p, fn):
    c, ys = lax.scan(partial(fn, p), jnp.zeros(3), XS)
    return c.sum() + ys.sum()


def map_partial(w, fn):
    return lax.map(partial(fn, w), XS).sum()


def cond_partial(w, fn):
    return lax.cond(jnp.sum(w) > 0, partial(fn, w), lambda x: jnp.sum(x), XS[1])


def fori_partial(w, fn):
    return jnp.sum(lax.fori_loop(0, 3, partial(fn, w), jnp.ones(3)))


def tree_map_partial(w, fn):
    out = jax.tree.map(partial(fn, w), {"a": XS[0], "b": XS[1]})
    return jnp.sum(out["a"] * out["b"])


def called_partial(w, fn):
    return partial(fn, w)(XS[0]) * 2.0


PARTIALS = {
    "vmap": lambda w: vmap_partial(w, g),
    "vmap_keyword": lambda w: vmap_partial_kw(w, g_kw),
    "scan": lambda w: scan_partial(w, step),
    "lax_map": lambda w: map_partial(w, g),
    "cond": lambda w: cond_partial(w, g),
    "fori_loop": lambda w: fori_partial(w, body),
    "called": lambda w: called_partial(w, g),
    "tree_map": lambda w: tree_map_partial(w, lambda w, t: jnp.sin(w * t)),
    "vmap_library": lambda w: jax.vmap(partial(jnp.dot, w))(XS).sum(),
}


@pytest.mark.parametrize("name", PARTIALS)
def test_partial_of_a_function_argument(name):
    f = PARTIALS[name]
    close(kt.grad(f)(X), jax.grad(f)(X))


def test_partial_of_a_function_argument_eager():
    kt.set_mode("eager")
    try:
        f = PARTIALS["called"]
        close(kt.grad(f)(X), jax.grad(f)(X))
    finally:
        kt.set_mode("graph")


def test_partial_of_a_function_argument_second_order():
    f = PARTIALS["called"]
    h = lambda w: jnp.sum(kt.grad(f)(w) ** 2)  # noqa: E731
    close(kt.grad(h)(X), jax.grad(lambda w: jnp.sum(jax.grad(f)(w) ** 2))(X))


# -- itertools over lists of arrays -------------------------------------------------
def chain_sum(x):
    return sum(jnp.sum(t) for t in itertools.chain([x, x * 2], [jnp.sin(x)]))


def chain_from_iterable(x):
    return sum(jnp.sum(t * t) for t in itertools.chain.from_iterable([[x, 2 * x], [x**3]]))


def accumulate_sum(x):
    return sum(jnp.sum(t) for t in itertools.accumulate([x, x * x, jnp.cos(x)]))


def accumulate_product(x):
    return sum(jnp.sum(t) for t in itertools.accumulate([x, x * x, jnp.cos(x)], operator.mul))


def accumulate_lambda(x):
    xs = [x, x * x, jnp.cos(x)]
    return sum(jnp.sum(t) for t in itertools.accumulate(xs, lambda a, b: a * b + 1))


def product_pairs(x):
    xs = [x, x * 2]
    return sum(jnp.sum(a * b) for a, b in itertools.product(xs, xs))


def islice_pairwise(x):
    xs = [x, x * 2, x**2, x * 4]
    return sum(jnp.sum(a * b) for a, b in itertools.pairwise(itertools.islice(xs, 1, 4)))


def starmap_combinations(x):
    pairs = itertools.combinations([x, x * 2, jnp.sin(x)], 2)
    return sum(jnp.sum(t) for t in itertools.starmap(lambda a, b: a * b, pairs))


ITERTOOLS = [
    chain_sum,
    chain_from_iterable,
    accumulate_sum,
    accumulate_product,
    accumulate_lambda,
    product_pairs,
    islice_pairwise,
    starmap_combinations,
]


@pytest.mark.parametrize("f", ITERTOOLS, ids=lambda f: f.__name__)
def test_itertools_over_arrays(f):
    close(kt.grad(f)(X), jax.grad(f)(X))


def test_itertools_over_arrays_eager(mode):
    close(kt.grad(accumulate_product)(X), jax.grad(accumulate_product)(X))


def product_of_ranges(x):
    return sum(x[i] * jnp.sin(x[j]) for i, j in itertools.product(range(x.shape[0]), repeat=2))


def test_itertools_strict_mode():
    """MindSpore's graph mode (`set_strict`): `product` of ranges stays a host
    iterator in the graph; of arrays, a refusal naming the call and line."""
    kt.set_strict(True)
    try:
        close(kt.grad(product_of_ranges)(X), jax.grad(product_of_ranges)(X))
        with pytest.raises(KTransformError, match=r"`itertools.chain\(\.\.\.\)` of values") as info:
            kt.grad(chain_sum)(X)
        assert "itertools.chain([x, x * 2]" in str(info.value)
    finally:
        kt.set_strict(False)


# -- values of traced arrays ------------------------------------------------------
def print_item(x):
    loss = jnp.sum(x**2)
    print("loss", loss.item())
    return loss


def item_in_loss(x):
    return jnp.sum(x**2) * jnp.sum(x).item()  # a Python float: no gradient through it


def nonzero_entries(x):
    return jnp.sum(jnp.sin(x[jnp.nonzero(x > 0)]))


def masked(x):
    return jnp.sum(x[x > 0] ** 2)


def test_printed_item_of_a_traced_value(mode, capsys):
    """Printed, it is host code: run per call with the value (graph mode
    too), as under JAX's gradient."""
    close(kt.grad(print_item)(X), jax.grad(print_item)(X))
    printed = capsys.readouterr().out.split()
    assert printed.count("loss") == 2  # once each, with its value
    assert float(printed[1]) == pytest.approx(float(printed[3]), rel=1e-6)


def test_item_of_a_traced_value_in_the_loss():
    """Op by op, a Python float, as in JAX's gradient; under graph mode's
    jit a refusal naming the line, as jax.jit's ConcretizationTypeError."""
    kt.set_mode("eager")
    try:
        close(kt.grad(item_in_loss)(X), jax.grad(item_in_loss)(X))
    finally:
        kt.set_mode("graph")
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(jax.grad(item_in_loss))(X)
    with pytest.raises(
        KTransformError, match=r"\.item\(\.\.\.\): tracing .* needs the value"
    ) as info:
        kt.grad(item_in_loss)(X)
    assert "jnp.sum(x).item()" in str(info.value)


@pytest.mark.parametrize(
    "f, text",
    [
        (nonzero_entries, r"jnp.nonzero\(\.\.\.\): tracing .* needs the value of a traced"),
        (masked, "a boolean mask as an index"),
    ],
    ids=["nonzero", "mask"],
)
def test_value_dependent_shapes_under_the_jit(f, text):
    refusals = (jax.errors.ConcretizationTypeError, jax.errors.NonConcreteBooleanIndexError)
    with pytest.raises(refusals):
        jax.jit(jax.grad(f))(X)  # JAX's jit refuses them too
    with pytest.raises(KTransformError, match=text) as info:
        kt.grad(f)(X)
    assert "test_everyday30.py" in str(info.value)


# -- JAX's custom_jvp / custom_vjp defined inside the function ----------------------
def inner_jvp(x):
    s = 3.0

    @jax.custom_jvp
    def f(y):
        return jnp.round(y)

    @f.defjvp
    def f_jvp(primals, tangents):
        (y,), (t,) = primals, tangents
        return f(y), s * t * jnp.cos(y)  # the rule calls the function itself

    return jnp.sum(f(x) * x) + jnp.sum(f(x**2))


def inner_vjp(x):
    @jax.custom_vjp
    def clip_grad(y):
        return jnp.sin(y)

    def fwd(y):
        return clip_grad(y), jnp.cos(y)

    def bwd(c, ct):
        return (jnp.clip(ct * c, -0.5, 0.5),)

    clip_grad.defvjp(fwd, bwd)
    total = 0.0
    for k in range(2):  # called twice
        total = total + jnp.sum(clip_grad(x * (k + 1)) ** 2)
    return total


def inner_nondiff(x):
    @functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
    def scale_grad(y, s):
        return y

    @scale_grad.defjvp
    def scale_grad_jvp(s, primals, tangents):
        return primals[0], tangents[0] * s

    return jnp.sum(scale_grad(x, 4.0) ** 2)


def inner_jvp_in_scan(x):
    @jax.custom_jvp
    def f(y):
        return jnp.round(y)

    f.defjvp(lambda p, t: (f(p[0]), t[0] * 0.5))

    def step(c, xi):
        return c + f(xi) * xi, c

    c, ys = lax.scan(step, 0.0, x)
    return c + jnp.sum(ys)


def inner_jvp_given_to_vmap(x):
    @jax.custom_jvp
    def f(y):
        return jnp.round(y) * y

    f.defjvp(lambda p, t: (f(p[0]), 2.0 * t[0] * jnp.cos(p[0])))
    return jnp.sum(jax.vmap(f)(x) * x)  # a value: not batched through its steps


def inner_vjp_given_to_map(x):
    @jax.custom_vjp
    def g(y):
        return jnp.sin(y)

    def fwd(y):
        return g(y), jnp.cos(y)

    def bwd(c, ct):
        return (3.0 * c * ct,)

    g.defvjp(fwd, bwd)
    return jnp.sum(lax.map(g, x) ** 2)


CUSTOMS = [
    inner_jvp,
    inner_vjp,
    inner_nondiff,
    inner_jvp_in_scan,
    inner_jvp_given_to_vmap,
    inner_vjp_given_to_map,
]


@pytest.mark.parametrize("f", CUSTOMS, ids=lambda f: f.__name__)
def test_custom_rule_defined_inside(f, mode):
    close(kt.grad(f)(X), jax.grad(f)(X))


@pytest.mark.parametrize(
    "f", [inner_jvp, inner_nondiff, inner_jvp_given_to_vmap], ids=lambda f: f.__name__
)
def test_custom_jvp_defined_inside_forward_and_second_order(f):
    v = jnp.array([1.0, 0.5, -2.0])
    close(kt.jvp(f, (X,), (v,)), jax.jvp(f, (X,), (v,)))
    h = lambda x: jnp.sum(kt.grad(f)(x) ** 2)  # noqa: E731
    close(kt.grad(h)(X), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2))(X))


def test_custom_vjp_defined_inside_given_as_a_value_second_order():
    f = inner_vjp_given_to_map
    h = lambda x: jnp.sum(kt.grad(f)(x) ** 2)  # noqa: E731
    close(kt.grad(h)(X), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) ** 2))(X))


def closes_over_traced(x):
    w = jnp.sum(x)

    @jax.custom_jvp
    def f(y):
        return jnp.round(y)

    @f.defjvp
    def f_jvp(primals, tangents):
        return f(primals[0]), tangents[0] * w

    return jnp.sum(f(x) * x)


def test_custom_rule_defined_inside_closing_over_a_traced_value():
    with pytest.raises(jax.errors.UnexpectedTracerError):
        jax.grad(closes_over_traced)(X)
    with pytest.raises(KTransformError, match="rule f_jvp reads w of the function") as info:
        kt.grad(closes_over_traced)(X)
    assert "@jax.custom_jvp" in str(info.value) or "def f(y)" in str(info.value)
