"""Forward mode through control flow (`k_transform.dfunctor.forward`) against JAX.

J maps a loop to one loop over values and tangents and a switch to a switch
of the branches' J-graphs; straight-line code between them goes by double
reverse. Each program is checked against `jax.jvp` (on the same function, or
on its `lax` form where JAX cannot trace a Python `while`), eagerly and under
`jax.jit`, and the jvp graph is checked to be J's (one loop, not a recording
loop and its transposed sweep) or double reverse where J does not reach.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt
from k_transform.api import graph_of
from k_transform.codegen.compile import emit_source
from k_transform.control.prims import WhileLoop
from k_transform.dfunctor.forward import forward_jvp
from k_transform.ir.nodes import Constant
from k_transform.transforms import GradSpec, grad_graph

X = jnp.array([0.5, -1.2, 2.0], jnp.float32)
V = jnp.array([1.0, 0.5, -2.0], jnp.float32)
W = jnp.array([0.3, 0.1, -0.4], jnp.float32)


def close(a, b, tol=1e-5):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


def step(x, w):
    return jnp.tanh(x * w) + 0.1 * jnp.sin(x)


# -- programs with a form JAX traces ----------------------------------------------
def traced_while(x, w):
    i = jnp.zeros(())  # traced counter: a lax.while_loop
    while i < 5.0:
        x = step(x, w)
        i = i + 1.0
    return x


def traced_while_lax(x, w):
    body = lambda s: (s[0] + 1.0, step(s[1], w))  # noqa: E731
    return lax.while_loop(lambda s: s[0] < 5.0, body, (jnp.zeros(()), x))[1]


def int_counter_while(x, w):
    k = 0
    s = jnp.zeros(())
    while jnp.sum(x) < 40.0 + k:  # data-dependent trip count
        x = x * 1.5 + w
        s = s + jnp.sum(x)
        k = k + 1
    return s * x


def int_counter_while_lax(x, w):
    def body(st):
        k, s, x = st
        x = x * 1.5 + w
        return k + 1, s + jnp.sum(x), x

    k, s, x = lax.while_loop(lambda st: jnp.sum(st[2]) < 40.0 + st[0], body, (0, jnp.zeros(()), x))
    return s * x


def for_range(x, w):
    acc = jnp.zeros_like(x)
    for k in range(12):  # long enough to stay a lax.scan
        acc = acc + step(x, w) * k
        x = x * 0.9
    return acc


def for_over_rows(x, w):
    m = jnp.outer(x, w)
    s = jnp.zeros_like(x)
    for row in m:
        s = s * 0.5 + jnp.sin(row)
    return s


def tangent_from_invariant_only(x, w):
    # the carry starts as a constant: its tangent appears in the body (w's)
    y = jnp.ones(3)
    for _ in range(10):
        y = y * jnp.cos(w) + 0.1
    return y * x


def branch_in_loop(x, w):
    for k in range(10):
        if jnp.sum(x) > 1.0:
            x = x * 0.8 + w
        else:
            x = jnp.sin(x) + k
    return x


def early_return(x, w):
    for k in range(10):
        x = step(x, w)
        if jnp.max(x) > 0.95:
            return x * k
    return x


def nested_loops(x, w):
    for _ in range(3):
        j = jnp.zeros(())
        while j < 3.0:
            x = step(x, w)
            j = j + 1.0
    return jnp.sum(x * x)


def print_in_loop(x, w):
    for _ in range(10):
        x = step(x, w)
        print("x", x)
    return x


def helper_tuple(x, w):
    return x * w, jnp.sin(x)


def call_with_tuples(x, w):
    a, b = helper_tuple(x, w)
    for _ in range(9):
        a, b = helper_tuple(a + b, w)
    return a - b


CASES = [
    (traced_while, traced_while_lax),
    (int_counter_while, int_counter_while_lax),
    (for_range, for_range),
    (for_over_rows, for_over_rows),
    (tangent_from_invariant_only, tangent_from_invariant_only),
    (branch_in_loop, None),
    (early_return, None),
    (nested_loops, None),
    (print_in_loop, None),
    (call_with_tuples, call_with_tuples),
]


def _oracle(fn, jax_fn, x, w, vx, vw):
    if jax_fn is not None:
        return jax.jvp(jax_fn, (x, w), (vx, vw))
    # no form JAX traces: central differences in float64
    with jax.enable_x64(True):
        x64, w64 = jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64)
        eps = 1e-6
        plus = fn(x64 + eps * vx, w64 + eps * vw)
        minus = fn(x64 - eps * vx, w64 - eps * vw)
        return fn(x64, w64), (plus - minus) / (2 * eps)


@pytest.mark.parametrize("fn, jax_fn", CASES, ids=lambda f: getattr(f, "__name__", "-"))
def test_loops_and_branches_match(fn, jax_fn, mode, capsys):
    want = _oracle(fn, jax_fn, X, W, V, V * 0.5)
    close(kt.jvp(fn, (X, W), (V, V * 0.5)), want, 1e-4)
    jitted = jax.jit(lambda x, w, vx, vw: kt.jvp(fn, (x, w), (vx, vw)))
    close(jitted(X, W, V, V * 0.5), want, 1e-4)
    assert forward_jvp(graph_of(fn)) is not None, "J should reach this program"


def test_one_loop_runs():
    """A `while` under J is one loop over (carry, tangent): the generated
    jvp has one `while_loop` and no stack (double reverse had three loops)."""
    source = emit_source(forward_jvp(graph_of(traced_while)))[0]
    assert source.count("while_loop(") == 1, source
    assert "stack" not in source


def test_zero_tangents_are_not_carried():
    """The int counter and a carry that never meets an input carry no tangent."""
    graph = forward_jvp(graph_of(int_counter_while))
    loops = [
        node.fn.value
        for g in graph.reachable()
        for node in g.nodes
        if isinstance(node.fn, Constant) and isinstance(node.fn.value, WhileLoop)
    ]
    assert [loop.n_carry for loop in loops] == [3 + 2]  # (k, s, x) and the tangents of s, x


def test_print_runs_once_per_iteration(capsys):
    kt.jvp(print_in_loop, (X, W), (V, V))
    assert capsys.readouterr().out.count("x ") == 10


def test_closures_are_mapped():
    """A closure called in a loop: its J-graph is built inside J of the
    function that defines it, reading the values and tangents it captures."""

    def outer(x, w):
        def body(y):
            return y * w  # reads w: a closure

        for _ in range(10):
            x = body(x)
        return x

    assert forward_jvp(graph_of(outer)) is not None
    close(kt.jvp(outer, (X, W), (V, V)), jax.jvp(outer, (X, W), (V, V)))


def test_function_argument_goes_by_double_reverse():
    def twice(f, x):
        return f(f(x))

    def passes(x, w):
        for _ in range(10):
            x = jnp.sin(x) * w
        return twice(lambda y: y * w, x)

    assert forward_jvp(graph_of(passes)) is None  # a function value J did not make
    close(kt.jvp(passes, (X, W), (V, V)), jax.jvp(passes, (X, W), (V, V)))


def kmeans_cost(centers, points):
    d = jnp.sum((points[:, None, :] - centers[None, :, :]) ** 2, axis=-1)
    return jnp.sum(jnp.min(d, axis=1))


def test_hvp_is_forward_over_reverse():
    """hvp = J of the gradient graph: J maps K(f)'s bprop closure (a function
    value) to its J-graph, so the gradient's reverse pass runs once, forward."""
    rng = np.random.RandomState(0)
    c = jnp.asarray(rng.randn(5, 3).astype(np.float32))
    p = jnp.asarray(rng.randn(40, 3).astype(np.float32))
    v = jnp.asarray(rng.randn(5, 3).astype(np.float32))
    graph = forward_jvp(grad_graph(graph_of(kmeans_cost), GradSpec(inputs=0)))
    assert graph is not None
    want = jax.jvp(jax.grad(kmeans_cost), (c, p), (v, jnp.zeros_like(p)))[1]
    close(kt.hvp(kmeans_cost, (c, p), v), want, 1e-4)
    close(jax.jit(lambda c, p, v: kt.hvp(kmeans_cost, (c, p), v))(c, p, v), want, 1e-4)


def test_second_order_through_j():
    """grad of a J jvp (the DFunctor on J's graph) and jvp of jvp."""

    def f(x):
        return jnp.sum(traced_while(x, W) ** 2)

    def f_lax(x):  # JAX's reverse mode needs a static trip count
        for _ in range(5):
            x = step(x, W)
        return jnp.sum(x**2)

    g = kt.grad(lambda x: kt.jvp(f, (x,), (V,))[1])(X)
    close(g, jax.grad(lambda x: jax.jvp(f_lax, (x,), (V,))[1])(X), 1e-4)
    jj = kt.jvp(lambda x: kt.jvp(f, (x,), (V,))[1], (X,), (W,))
    close(jj, jax.jvp(lambda x: jax.jvp(f_lax, (x,), (V,))[1], (X,), (W,)), 1e-4)


def _factory(a, b):
    def g(v):
        return 0.2 * jnp.sum(a) * a

    return g


def closures_reading_some_variables(x):
    y = x * 0.5 + 0.1
    z = jnp.sin(x)
    for _ in range(2):

        def make(a, b):
            def g(v):
                return 1.5 * x * x[1] * y + jnp.exp(jnp.tanh(-1.5 * v))

            return g

        h = make(jnp.exp(jnp.tanh(y)), 1.5 * x * -1.5 * x)
        z = jnp.tanh(h(0.2 * jnp.sum(x) * z))
    h2 = _factory(jnp.exp(jnp.tanh(-1.5 * y)), x[0] * x)
    z = h2(x[2] * x)
    return jnp.sum(0.2 * jnp.sum(1.5 * y) * x[1] * y) + jnp.sum(y * z)


def test_regression_hvp_through_a_closure_env_missing_an_entry():
    """Found by `make fuzz`: a closure's gradient env holds no entry for a
    variable it does not read (`env_get` gives zeros); differentiated again,
    a dict's rule read that entry from the sensitivity and raised KeyError.
    An absent entry of a dict's gradient is zero (`DictGet`)."""
    x = jnp.array([0.3, -0.5, 0.8], jnp.float32)
    want = jax.jvp(jax.grad(closures_reading_some_variables), (x,), (V,))[1]
    close(kt.hvp(closures_reading_some_variables, (x,), V), want, 1e-4)


def _normalized(x):
    # `jnp.finfo` is refused by the parser: the function runs as Python, a
    # library call with an effect (kept in program order)
    return x / jnp.maximum(jnp.linalg.norm(x), jnp.finfo(x.dtype).eps)


def _weighted_loss(x):
    return jnp.sum(_normalized(x) * jnp.arange(3.0))


def _calls_the_loss(x):
    return _weighted_loss(x) + 0.5 * jnp.sum(x)


def test_a_call_run_as_python_below_a_user_function_has_its_tangent():
    """J copied a call with an effect (a function run as Python) with a zero
    tangent: `kt.jvp` and `kt.jacfwd` were exact zeros, grad right (found by
    helper-28 on optax's ranking losses and numpyro's `safe_normalize`). It
    is now a segment of its own, after the one before it."""
    close(kt.jvp(_calls_the_loss, (X,), (V,)), jax.jvp(_calls_the_loss, (X,), (V,)))
    close(kt.jacfwd(_calls_the_loss)(X), jax.jacfwd(_calls_the_loss)(X))
