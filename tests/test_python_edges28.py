"""Everyday Python found in public code (jax-md, blackjax, implicit layers)
that k_transform refused or got wrong, each checked against JAX on the same
code: dict displays with `**`, writes into fresh copies and through
`update`, a helper writing into a dict its caller made and rebinds, and a
keyword call of a custom_vjp's nondiff function argument."""

import functools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import strict_refusal

X = jnp.array([1.0, 2.0, 4.0])
S = jnp.array(1.5)
D = {"a": jnp.array(2.0), "b": jnp.array(3.0)}


def close(got, want):
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5), got, want)


# -- jax-md's merge_dicts: `{**a, **b}`, then a write into `dict(a)` ----------


def merge_dicts(a, b, ignore_unused_parameters=False):
    if not ignore_unused_parameters:
        return {**a, **b}
    merged = dict(a)
    for key in merged.keys():
        b_val = b.get(key)
        if b_val is not None:
            merged[key] = b_val
    return merged


def pair(**kwargs):
    merge = partial(merge_dicts, ignore_unused_parameters=True)

    def energy(R, **dynamic_kwargs):
        kw = merge(kwargs, dynamic_kwargs)
        return jnp.sum(R**2) * kw["sigma"]

    return energy


def test_jax_md_merge_dicts_of_a_closed_over_dict():
    energy = pair(sigma=jnp.array(2.0))
    close(kt.grad(energy)(X, sigma=3.0), jax.grad(energy)(X, sigma=3.0))
    close(kt.grad(energy)(X), jax.grad(energy)(X))


# -- dict displays with `**` -------------------------------------------------

G = {"a": 1.0, "b": 2.0}


def unpacked_parameter(x, d):
    m = {**d, "b": x * 2.0, **{"c": x}}
    m["a"] = m["a"] * x
    return m["a"] + m["b"] * m["c"] + jnp.sum(jnp.stack(list(m.values())))


def unpacked_global(x):
    m = {"b": x, **G, "z": 3.0}  # G's "b" replaces x, at the first place
    return m["b"] * x + len(m) + list(m.keys()).index("z")


def merged_parameters(x, d, e):
    m = {**d, **e}
    m["q"] = x
    return m["p"] * m["q"] + m["r"] + d["p"]


def copy_then_write_the_original(x):
    d = {"p": x}
    m = {**d, "p": x * 3.0}
    d["p"] = x * 5.0  # `m` holds d's items, not d
    return m["p"] + d["p"]


@pytest.mark.parametrize(
    "fn, args",
    [
        (unpacked_parameter, (S, D)),
        (unpacked_global, (S,)),
        (merged_parameters, (S, {"p": jnp.array(2.0)}, {"r": jnp.array(4.0), "p": 7.0})),
        (copy_then_write_the_original, (S,)),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_dict_display_with_unpacking(fn, args):
    argnums = tuple(range(len(args)))
    got = kt.value_and_grad(fn, grad_position=argnums)(*args)
    close(got, jax.value_and_grad(fn, argnums=argnums)(*args))


def repeated_key(x):
    m = {"b": x, "c": 1.0, "b": 2.0 * x}  # noqa: F601 - Python keeps the last value
    return m["b"] * x + jnp.sum(jnp.stack(list(m.values())))


def test_a_replaced_key_sends_no_gradient_to_its_first_value():
    close(kt.grad(repeated_key)(S), jax.grad(repeated_key)(S))
    close(kt.jvp(repeated_key, S, 1.0)[1], jax.jvp(repeated_key, (S,), (1.0,))[1])


# -- writes into fresh copies, and `update` ------------------------------------


def update_of_a_copy(x, d):
    m = d.copy()
    m.update({"a": x * 3.0})
    return m["a"] * x


def update_of_a_comprehension(x, d):
    m = {k: v for k, v in d.items()}
    m.update({"a": x * 3.0})
    return m["a"] * x


def setdefault_of_a_copy(x, d):
    m = d.copy()
    m.setdefault("c", x)
    return m["c"] * x


def update_by_a_dict_value(x, d):
    m = dict(d)
    m.update(d, z=x)
    m.update({"a": x * 3.0})
    return m["a"] * m["z"] + m["b"]


def merge_in_place_and_or(x, d):
    m = {"q": x}
    m |= d
    n = d | {"a": x * 2.0}
    return m["q"] * n["a"] + n["b"] + m["a"]


def writes_into_copies(x, d):
    a = d.copy()
    a["a"] = x
    b = {**d}
    b["b"] = 2.0 * x
    c = list(d.values())
    c[0] = 3.0 * x
    return a["a"] * b["b"] + c[0] + d["a"]


@pytest.mark.parametrize(
    "fn",
    [
        update_of_a_copy,
        update_of_a_comprehension,
        setdefault_of_a_copy,
        update_by_a_dict_value,
        merge_in_place_and_or,
        writes_into_copies,
    ],
)
def test_in_place_changes_of_a_copy_are_pythons(fn):
    got = kt.value_and_grad(fn, grad_position=(0, 1))(S, D)
    close(got, jax.value_and_grad(fn, argnums=(0, 1))(S, D))


def test_a_write_into_an_item_a_shallow_copy_shares_is_refused():
    def nested(x, d):
        m = {**d}
        m["a"]["k"] = x  # the caller's inner dict
        return m["a"]["k"]

    with pytest.raises(kt.KTransformError):
        kt.grad(nested)(S, {"a": {"k": jnp.array(1.0)}})


# -- blackjax's median_heuristic: a helper writing into its dict argument ------


def heuristic(params, x):
    params["scale"] = jnp.median(x)
    return params


def run(x, median=False):
    params = {"scale": 1.0}
    if median:
        params = heuristic(params, x)
    return jnp.sum(x**2) * params["scale"]


def twice(x):
    params = {"scale": 1.0, "b": x}
    params = heuristic(params, x)
    params = heuristic(params, x * 2.0)
    return jnp.sum(x**2) * params["scale"] * params["b"][0]


def copied(x, p):
    params = dict(p)
    params = heuristic(params, x)
    return jnp.sum(x**2) * params["scale"] + p["scale"]


@pytest.mark.parametrize("median", [False, True])
def test_helper_writing_the_dict_its_caller_made_and_rebinds(median):
    def f(x):
        return run(x, median)

    close(kt.grad(f)(X), jax.grad(f)(X))
    close(kt.jvp(f, X, jnp.ones(3))[1], jax.jvp(f, (X,), (jnp.ones(3),))[1])


def test_helper_writing_a_dict_rebound_twice_or_a_copy():
    close(kt.grad(twice)(X), jax.grad(twice)(X))
    p = {"scale": jnp.array(2.0)}
    close(kt.grad(copied, grad_position=(0, 1))(X, p), jax.grad(copied, argnums=(0, 1))(X, p))


def no_return(params, x):
    params["scale"] = jnp.median(x)


def shared_name(x):
    params = {"scale": 1.0}
    other = params  # sees the write in Python
    params = heuristic(params, x)
    return jnp.sum(x**2) * params["scale"] + other["scale"]


def not_rebound(x):
    params = {"scale": 1.0}
    heuristic(params, x)
    return jnp.sum(x**2) * params["scale"]


def in_a_loop(x):
    params = {"scale": 1.0}
    for _ in range(2):
        params = heuristic(params, x)
    return jnp.sum(x**2) * params["scale"]


def callers_argument(x, params):
    params = heuristic(params, x)
    return jnp.sum(x**2) * params["scale"]


def returns_nothing(x):
    params = {"scale": 1.0}
    params = no_return(params, x)
    return jnp.sum(x**2)


@pytest.mark.parametrize(
    "fn", [shared_name, not_rebound, in_a_loop, callers_argument, returns_nothing]
)
def test_helper_writing_an_argument_others_may_see_is_refused_at_the_write(fn):
    args = (X, {"scale": jnp.array(2.0)}) if fn is callers_argument else (X,)
    with pytest.raises(kt.KTransformError) as info:
        kt.grad(fn)(*args)
    message = str(info.value)
    assert "params['scale'] = ..." in message and "d = f(d, ...)" in message
    assert "test_python_edges28.py" in message


# -- implicit layers: a keyword call of a custom_vjp's nondiff function --------


def solver(g, z_init, scale=1.0):
    return g(g(z_init)) * scale


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def layer(solver, f, params, x):
    return solver(lambda z: f(params, x, z), z_init=jnp.zeros_like(x), scale=2.0)


def layer_fwd(solver, f, params, x):
    z = layer(solver, f, params, x)
    return z, (params, x, z)


def layer_bwd(solver, f, res, g):
    params, x, z = res
    return (g * jnp.cos(params) * z, g * jnp.sin(x))


layer.defvjp(layer_fwd, layer_bwd)


def ff(params, x, z):
    return jnp.tanh(params * z + x)


def layer_loss(p, x):
    return jnp.sum(layer(solver, ff, p, x) ** 2)


def test_custom_vjp_primal_calls_its_function_argument_by_keyword():
    p, x = jnp.array([0.5, -1.5]), jnp.array([0.1, 0.2])
    want = jax.value_and_grad(layer_loss, argnums=(0, 1))(p, x)
    close(kt.value_and_grad(layer_loss, grad_position=(0, 1))(p, x), want)


def apply_by_keyword(g, x):
    return g(x, scale=2.0)


def scaled_sin(x, scale=1.0):
    return jnp.sin(x) * scale


def keyword_call_of_a_parameter(x):
    c = x * 3.0
    return jnp.sum(apply_by_keyword(scaled_sin, x) + apply_by_keyword(lambda z, scale: c * z, x))


def test_keyword_call_of_a_function_value_elsewhere_keeps_running_as_python():
    x = jnp.array([0.3, 0.7])
    close(kt.grad(keyword_call_of_a_parameter)(x), jax.grad(keyword_call_of_a_parameter)(x))


def test_custom_vjp_with_function_arguments_at_second_order():
    """fwd calls the custom_vjp function again: one order up, its nondiff
    functions still reach it as the user wrote them (they crashed as fprops)."""
    p, x = jnp.array([0.5, -1.5]), jnp.array([0.1, 0.2])
    d_p, d_x = jax.grad(layer_loss, argnums=(0, 1))(p, x)  # (JAX has no jvp of a custom_vjp)
    _, tangent = kt.jvp(layer_loss, (p, x), (jnp.ones(2), jnp.ones(2)))
    close(tangent, jnp.sum(d_p) + jnp.sum(d_x))
    second = kt.grad(lambda q: kt.grad(layer_loss)(q, x)[0])(p)
    close(second, jax.grad(lambda q: jax.grad(layer_loss)(q, x)[0])(p))


def test_a_write_after_functools_partial_kept_the_dict_runs_as_python():
    """`functools.partial(use, params)` holds the dict: a later write is
    seen through it in Python (was: the old value, a silently wrong gradient;
    then refused; the dict being the function's own, it now runs as Python)."""

    def use(p, x):
        return p["scale"] * x

    def kept(x):
        params = {"scale": 1.0}
        g = functools.partial(use, params)
        params["scale"] = x * 3.0
        return g(x)

    close(kt.grad(kept)(S), jax.grad(kept)(S))
    assert "another reference" in strict_refusal(kept, S)
