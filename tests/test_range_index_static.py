"""The index of a `for` over a static range stays a Python int wherever the
loop runs in Python, with `break`, `continue` or `return` in it too
(`frontend/desugar.py` keeps such a loop a `for`, `control/runtime.for_range`
stops at a break flag it knows, `control/policy` unrolls a body that needs
the int). Uses that need the int: `x[:i]`, `range(i)`, `lst[i]` of a Python
list, `jnp.zeros(i)` and shapes, `f"w{i}"` as a key, `if i == 1` choosing
branches of different types. Each is checked against `jax.value_and_grad` of
the same Python (run op by op, where the break's test is concrete); a loop
whose range is traced, which JAX refuses too, gets a KTransformError naming
the `for`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError

X = jnp.array([0.3, 0.5, -0.2, 0.4, 1.5, 0.1, 0.7, -0.6, 0.2, 0.8, 0.35, 0.45])
WS = [0.5 * k + 0.25 for k in range(12)]
TABLE = {f"w{k}": 0.5 * k - 1.0 for k in range(12)}


def close(got, want):
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# Nine iterations: past what the parser unrolls, so the run time decides; the
# break's test reads the array (traced under the gradient function's jit).
def sliced_break(x):
    y = 0.0
    for i in range(1, 10):
        y = y + jnp.sum(x[:i]) * x[i]
        if x[i] > 1.0:
            break
    return y


def inner_range_return(x):
    y = 0.0
    for i in range(1, 10):
        for j in range(i % 3):
            y = y + x[j] * x[i]
        if x[i] > 1.0:
            return y * 2.0
    return y


def list_item_break(x):
    y = 0.0
    for i in range(1, 10):
        y = y + WS[i] * x[i] ** 2
        if x[i] > 1.0:
            break
    return y


def shapes_break(x):
    y = 0.0
    for i in range(1, 10):
        y = y + jnp.sum(jnp.zeros((i, 1)).reshape(-1, i) + x[i])
        if x[i] > 1.0:
            break
    return y


def fstring_key_return(x):
    y = 0.0
    for i in range(1, 10):
        y = y + TABLE[f"w{i}"] * x[i]
        if x[i] > 1.0:
            return y
    return -y


def static_if_break(x):
    y = 0.0
    for i in range(1, 10):
        if i % 2 == 0:
            z = x[:2]  # the branches give different shapes: only an int `i` chooses
        else:
            z = x[:3]
        y = y + jnp.sum(z) * x[i]
        if x[i] > 1.0:
            break
    return y


def helper_by_parity_continue(x):
    y = 0.0
    for i in range(1, 10):
        if x[i] < 0.0:
            continue
        h = jnp.sin if i % 2 == 0 else jnp.cos
        y = y + h(x[i])
    return y


def short_list_return(x):  # five iterations: unrolled by the parser
    y = 0.0
    for i in range(1, 6):
        y = y + WS[i] * jnp.sum(jnp.zeros(i) + x[i])
        if x[i] > 1.0:
            return y
    return y


def static_break_shapes(x):  # the break's test is a Python bool
    y = 0.0
    for i in range(1, 10):
        y = y + jnp.sum(x[:i]) * WS[i]
        if i == 6:
            break
    return y


PROGRAMS = [
    sliced_break,
    inner_range_return,
    list_item_break,
    shapes_break,
    fstring_key_return,
    static_if_break,
    helper_by_parity_continue,
    short_list_return,
    static_break_shapes,
]


@pytest.mark.parametrize("fn", PROGRAMS)
def test_index_stays_an_int_in_graph_mode(fn):
    close(kt.value_and_grad(fn)(X), jax.value_and_grad(fn)(X))


@pytest.mark.parametrize("fn", [shapes_break])
def test_index_stays_an_int_eagerly_and_under_kt_jit(fn):
    want = jax.value_and_grad(fn)(X)
    kt.set_mode("eager")
    try:
        close(kt.value_and_grad(fn)(X), want)
    finally:
        kt.set_mode("graph")
    close(kt.jit(fn)(X), want[0])


def test_index_stays_an_int_under_a_users_jit():
    close(jax.jit(kt.value_and_grad(list_item_break))(X), jax.value_and_grad(list_item_break)(X))


def test_second_order_through_a_break_on_a_list_index():
    v = jnp.linspace(-1.0, 1.0, X.shape[0])
    got = kt.jvp(kt.grad(list_item_break), (X,), (v,))[1]
    close(got, jax.jvp(jax.grad(list_item_break), (X,), (v,))[1])


# -- a long loop whose break is traced still stops there (a lax.while_loop) ---------
def solver(x):
    y = x
    for _ in range(30):
        y = y * 0.9 + 0.05 * jnp.sin(y)
        if jnp.sum(y**2) < 1.5:
            break
    return jnp.sum(y**2)


def test_traced_break_of_a_long_loop():
    want = jax.value_and_grad(solver)(X)
    close(kt.value_and_grad(solver)(X), want)
    close(jax.jit(kt.value_and_grad(solver))(X), want)  # checkpointed: no retrace


# -- a `for` over a list stops at its break too ----------------------------------------
def list_loop_break(x):
    y = 0.0
    for w in [0.5, 1.5, 2.5, 3.5]:
        y = y + w * x[0] ** 2
        if y > 0.2:
            break
    return y


def test_for_over_a_list_with_a_break():
    close(kt.value_and_grad(list_loop_break)(X), jax.value_and_grad(list_loop_break)(X))


# -- an unrolled loop: what one copy of the body assigns in an `if`, the next reads ---
def carried_through_if(x):
    acc = 0.0
    y = 0.0
    for i in range(1, 4):
        if x[i] < 0.0:
            continue
        acc = acc * 0.5 + x[i]  # read by the next iteration only
        y = y + acc
    return y


def test_unrolled_loop_carries_what_an_if_assigns():
    close(kt.value_and_grad(carried_through_if)(X), jax.value_and_grad(carried_through_if)(X))


# -- a traced range: the index is traced, as under jax.jit ----------------------------
def traced_range_slice(x, n):
    y = 0.0
    for i in range(n):
        y = y + jnp.sum(x[:i])
    return y


def test_traced_range_needing_an_int_index_is_refused():
    with pytest.raises(KTransformError) as err:
        kt.jit(traced_range_slice)(X, jnp.asarray(3))
    text = str(err.value)
    assert "index as a Python int" in text and "for i in range(n):" in text
    assert "test_range_index_static.py" in text
