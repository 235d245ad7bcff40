"""`jax.tree_util.tree_flatten` / `tree_structure` inside a loss: the
structure (a PyTreeDef) is a static value of the call, the leaves are
differentiated (was: refused, make_jaxpr cannot return a treedef). Oracle:
JAX on the same code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

P = {"a": jnp.array([0.3, -0.7]), "b": (jnp.array([1.5, 0.2]), jnp.array(0.4))}


def flatten_unflatten(params):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    leaves = [jnp.tanh(leaf) * (k + 1) for k, leaf in enumerate(leaves)]
    p2 = jax.tree_util.tree_unflatten(treedef, leaves)
    return jnp.sum(p2["a"] ** 2) + jnp.sum(p2["b"][0]) * p2["b"][1]


def structure_method(params):
    treedef = jax.tree_util.tree_structure(params)
    leaves = jax.tree_util.tree_leaves(params)
    scaled = [leaf * treedef.num_leaves for leaf in leaves]
    p2 = treedef.unflatten(scaled)
    return jnp.sum(jnp.sin(p2["a"])) * jnp.sum(p2["b"][0] ** 2)


@pytest.mark.parametrize("f", [flatten_unflatten, structure_method], ids=lambda f: f.__name__)
def test_tree_flatten_in_a_loss(mode, f):
    got, want = kt.grad(f)(P), jax.grad(f)(P)
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5), got, want)


def test_tree_flatten_second_order_under_jit():
    x = jnp.array([0.3, -0.7, 0.5])

    def f(x):
        return flatten_unflatten({"a": x[:2], "b": (x[1:], x[0])})

    np.testing.assert_allclose(kt.jit(kt.hessian(f))(x), jax.hessian(f)(x), rtol=1e-5, atol=1e-6)
