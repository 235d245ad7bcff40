"""Second order through a rule whose branch calls the rule's own primitive.

K of such a rule meets the same branch graph twice: once where the rule is
inlined with constant inputs (its `if` on a static fact, written as a Python
`if` with the branch inline) and once inside K of that branch, whose bprop
inlines the rule again with computed inputs (the `if` then a traced switch
calling the branch's K-graph by name). Codegen forgot the module-level name
of a graph it wrote inline, so the switch called a function never defined
(`NameError: ..._if17_true_fprop`, session 26). A user's own primitive with
such a rule, and list slice assignment (SetItem's rule: its branch for a
list that grows or shrinks calls `set_item`), are checked against JAX on
equivalent programs, at first and second order.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.frontend import python_code


# -- a user's primitive whose rule calls it again in a branch -------------------
class Scale(kt.Primitive):
    """`x * k[0]` for a tuple `k`, `x * k` for a number: `k` is a Python value."""

    n_inputs = 2

    def impl(self, x, k):
        return x * (k[0] if isinstance(k, tuple) else k)


@kt.bprop_getters.register(Scale)
def _get_bprop_scale(self):
    def bprop(x, k, out, dout):
        if isinstance(k, tuple) and x.ndim == 1:  # static; `k[0]` no constant inside
            k2 = k[0]
            return SCALE(dout, k2), None
        return SCALE(dout, k), None

    return bprop


SCALE = Scale()


def scaled(x):  # the constant `k` first: its rule's `if` is inlined first
    y = SCALE(x, (1.5,))
    return jnp.sum(jnp.sin(SCALE(y, (x.shape[0] * 0.5,)) * x))


def scaled_jax(x):
    return jnp.sum(jnp.sin(x * 1.5 * (x.shape[0] * 0.5) * x))


X = jnp.array([0.3, 0.5, 0.7])
V = jnp.array([1.0, 0.5, -0.2])


@pytest.fixture
def eager():
    # (eager runs the generated code without compiling it: the same source,
    # and the fuzzer's failing program was eager)
    kt.set_mode("eager")
    yield
    kt.set_mode("graph")


def test_rule_calling_its_primitive_in_a_branch_second_order(eager):
    np.testing.assert_allclose(kt.grad(scaled)(X), jax.grad(scaled_jax)(X), rtol=1e-5)
    ref = jax.jvp(jax.grad(scaled_jax), (X,), (V,))[1]
    np.testing.assert_allclose(kt.hvp(scaled, (X,), V), ref, rtol=1e-5, atol=1e-6)


# -- list slice assignment: the list grows, shrinks or keeps its length ----------
def grow(x):
    a = [x[0], x[1] * 2.0, x[2]]
    a[1:2] = [x[1] ** 2, jnp.sin(x[0]), x[2] * 3.0]
    return a[0] * a[1] + a[2] * a[3] + a[4] * len(a)


def shrink(x):
    a = [x[0], x[1], x[2], x[0] * x[1]]
    a[1:3] = [jnp.cos(x[2]) * x[1]]
    return a[0] * a[1] * a[2] + len(a)


def same_size(x):
    a = [x[0], x[1], x[2]]
    a[0:2] = (x[1] * x[2], jnp.exp(x[0]))
    return a[0] * a[1] + a[2] * a[1]


def reversed_rows(x):  # an extended slice, from an array's rows
    a = [x[0], x[1], x[2]]
    a[::-1] = jnp.stack([x[0] ** 2, x[1] * x[2], x[2]])
    return a[0] * a[1] + a[2] ** 3


def unknown_list(x):  # `list(x)`: a list the parser does not build itself
    a = list(x)
    a[2:] = [a[2] * a[0], a[1] ** 2]
    return a[0] * a[2] + a[3] * a[1]


SLICES = [grow, shrink, same_size, reversed_rows, unknown_list]


@pytest.mark.parametrize("f", SLICES, ids=lambda f: f.__name__)
def test_list_slice_assignment(f):
    # (the same Python on JAX values is the oracle: a list is a list there too)
    value, grad = kt.value_and_grad(f)(X)
    ref_value, ref_grad = jax.value_and_grad(f)(X)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5)
    assert python_code.reason(f) is None  # parsed, not run as Python


@pytest.mark.parametrize("f", [grow, shrink, reversed_rows], ids=lambda f: f.__name__)
def test_list_slice_assignment_second_order(f, eager):
    ref = jax.jvp(jax.grad(f), (X,), (V,))[1]
    np.testing.assert_allclose(kt.hvp(f, (X,), V), ref, rtol=1e-5, atol=1e-6)


def array_slice_then_item(x):
    """The fuzzer's program (array_setitem, hvp) that met the NameError: an
    array's slice written, then an item, in a function with a traced `if`."""
    out = jnp.zeros(3)
    if jnp.sum(x) > -1.5:
        out[0] = jnp.tanh(jnp.sum(x))
    else:
        out[0] += jnp.tanh(jnp.sum(x))
    out[0:1] = x[0:1]
    out[0] *= jnp.tanh(jnp.sum(x))
    return jnp.sum(x) + jnp.sum(out * x * jnp.sin(x))


def array_slice_then_item_jax(x):
    out = jnp.zeros(3)
    t = jnp.tanh(jnp.sum(x))
    out = jnp.where(jnp.sum(x) > -1.5, out.at[0].set(t), out.at[0].add(t))
    out = out.at[0:1].set(x[0:1])
    out = out.at[0].multiply(jnp.tanh(jnp.sum(x)))
    return jnp.sum(x) + jnp.sum(out * x * jnp.sin(x))


def test_array_slice_assignment_hvp(eager):
    ref = jax.jvp(jax.grad(array_slice_then_item_jax), (X,), (V,))[1]
    got = kt.hvp(array_slice_then_item, (X,), V)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
