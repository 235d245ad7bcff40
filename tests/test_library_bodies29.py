"""Host code in the bodies JAX traces once (session 29): the function given to
`lax.scan`, `lax.fori_loop`, `lax.while_loop`, `lax.map`, `jax.vmap`, and every
branch of `lax.cond` / `lax.switch`, runs its Python once per call of that
construct, as under JAX, though k_transform's models run it per step, row or
taken branch (`frontend.lax_models`, `runtime.host_log.traced_once`): a host
draw is the same at every step, a counter advances once, a print prints once
(a `jax.debug.print` at every step, as in JAX). Where a later step would run
its host code otherwise than the first, it is refused. Oracles: JAX on the
same code, and the counts Python makes under it."""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.7, 1.1])
RS = np.random.RandomState(0)


def close(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-6)


def run(fn, *args):
    """`fn(*args)` from a fresh draw of RS, and the lines it printed."""
    RS.seed(0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn(*args)
    return value, out.getvalue().splitlines()


def same_as_jax(f, *args, kt_fn=kt.grad, jax_fn=jax.grad):
    """kt_fn(f) and jax_fn(f) give the same values and print the same lines."""
    expected, printed = run(jax_fn(f), *args)
    got, kt_printed = run(kt_fn(f), *args)
    close(got, expected)
    assert kt_printed == printed
    return printed


# -- loops: the body's host code runs once per call -----------------------------------
def scan_with_draw_and_print(x):
    def step(c, xi):
        print("scan body")
        noise = np.float32(RS.randn())  # drawn once: the same at every step
        c = c * 0.9 + jnp.sin(xi) + noise
        return c, c**2

    c, ys = jax.lax.scan(step, 0.0, x)
    return c + jnp.sum(ys)


def test_scan_body_draws_and_prints_once():
    assert same_as_jax(scan_with_draw_and_print, X) == ["scan body"]
    jitted = same_as_jax(
        scan_with_draw_and_print,
        X,
        kt_fn=lambda g: kt.jit(kt.grad(g)),
        jax_fn=lambda g: jax.jit(jax.grad(g)),
    )
    assert jitted == ["scan body"]


def counting_step(c, xi):
    global STEPS
    STEPS += 1  # a global counter: the function runs as Python (traced once)
    return c + jnp.sin(xi) * STEPS, None


STEPS = 0


def scan_with_counter(x):
    return jax.lax.scan(counting_step, 0.0, x)[0]


def test_scan_body_run_as_python_with_a_counter_is_traced_once():
    global STEPS
    STEPS = 0
    expected = jax.value_and_grad(scan_with_counter)(X)
    assert STEPS == 1
    STEPS = 0
    close(kt.value_and_grad(scan_with_counter)(X), expected)
    assert STEPS == 1


def fori_with_draw(x):
    def body(i, v):
        print("fori body")
        return v * 1.1 + jnp.sin(x[i]) + np.float32(RS.randn())

    return jax.lax.fori_loop(0, 3, body, 0.0)


def map_with_draw(x):
    return jnp.sum(jax.lax.map(lambda v: jnp.sin(v) + np.float32(RS.randn()), x) ** 2)


def nested_scans_with_draw(x):
    def outer(c, xi):
        def inner(d, yi):
            return d + jnp.sin(yi) * np.float32(RS.randn()), None

        return jax.lax.scan(inner, c, x * xi)[0], None

    return jax.lax.scan(outer, 0.0, x)[0]


@pytest.mark.parametrize("f", [fori_with_draw, map_with_draw, nested_scans_with_draw])
def test_loop_bodies_draw_once(f):
    same_as_jax(f, X)


def while_with_draw(x):
    def cond(s):
        print("cond")
        return s[0] < 3

    def body(s):
        print("body")
        i, v = s
        return i + 1, v * 1.1 + jnp.sin(x[i]) + np.float32(RS.randn())

    return jax.lax.while_loop(cond, body, (0, 0.0))[1]


def test_while_loop_test_and_body_run_once():
    """JAX refuses reverse mode here: its forward mode is the oracle."""
    value, printed = run(while_with_draw, X)
    (got, grad), kt_printed = run(kt.value_and_grad(while_with_draw), X)
    assert kt_printed == printed == ["cond", "body"]
    close(got, value)
    close(grad, run(jax.jacfwd(while_with_draw), X)[0])


def test_a_draw_in_the_body_is_the_same_for_second_order():
    def h(x):
        def step(c, xi):
            return jnp.sin(c) * xi + np.float32(RS.randn()), None

        return jax.lax.scan(step, x[0], x)[0]

    same_as_jax(h, X, kt_fn=kt.hessian, jax_fn=jax.hessian)


def test_jax_debug_print_still_runs_at_every_step():
    def f(x):
        def step(c, xi):
            jax.debug.print("c={c:.3f}", c=c)
            return c * 0.9 + jnp.sin(xi), None

        return jax.lax.scan(step, 0.0, x)[0]

    assert len(same_as_jax(f, X)) == 3


# -- vmap and apply_along_axis: the function runs once, not per row --------------------
def vmap_with_draw_and_print(x):
    def row(v):
        print("row")
        return jnp.sin(v) * np.float32(RS.randn())

    return jnp.sum(jax.vmap(row)(x))


def along_axis_with_print(x):
    def row(r):
        print("row")
        return jnp.sin(r) * 2.0

    return jnp.sum(jnp.apply_along_axis(row, 1, jnp.stack([x, -x])))


@pytest.mark.parametrize("f", [vmap_with_draw_and_print, along_axis_with_print])
def test_mapped_function_runs_once(f):
    assert same_as_jax(f, X) == ["row"]


# -- cond and switch: every branch's Python runs, in order -----------------------------
def cond_with_prints(x):
    def t(v):
        print("true branch")
        return jnp.sin(v)

    def f(v):
        print("false branch")
        return jnp.cos(v)

    return jnp.sum(jax.lax.cond(jnp.sum(x) > 0, t, f, x))


def switch_with_prints(x):
    def b0(v):
        print("b0")
        return jnp.sin(v)

    def b1(v):
        print("b1")
        return jnp.sqrt(v)  # NaN where v < 0: not taken, no NaN in the gradient

    def b2(v):
        print("b2")
        return v * np.float32(RS.randn())

    return jnp.sum(jax.lax.switch(jnp.int32(jnp.sum(x) > 0) * 2, (b0, b1, b2), x))


@pytest.mark.parametrize("f", [cond_with_prints, switch_with_prints])
def test_branches_are_all_traced_once(f):
    printed = same_as_jax(f, X)
    assert len(printed) == (2 if f is cond_with_prints else 3)
    assert same_as_jax(
        f, X, kt_fn=lambda g: kt.jit(kt.grad(g)), jax_fn=lambda g: jax.jit(jax.grad(g))
    )
    assert same_as_jax(f, -X)


# -- what a later step would run otherwise is refused -----------------------------------
def fori_draw_by_index(x):
    def body(i, v):
        return v + jnp.sum(RS.randn(i + 1)) * x[i]  # JAX: `i` is traced, randn refuses it

    return jax.lax.fori_loop(0, 3, body, 0.0)


def test_host_call_given_the_steps_values_is_refused():
    with pytest.raises(
        kt.KTransformError, match="(?i)lax.fori_loop calls rs.randn with values"
    ) as e:
        run(kt.grad(fori_draw_by_index), X)
    assert any("RS.randn(i + 1)" in n for n in getattr(e.value, "__notes__", ()))


# -- a neighbour: a call of a function value whose result is unused still runs ---------
def noisy(v):
    print("noisy called")
    return v * np.float32(RS.randn())


def apply_and_drop(fn, v):
    fn(v)  # the result unused: Python still calls fn (it prints and draws)
    return v * np.float32(RS.randn())


def dropped_call(x):
    return jnp.sum(apply_and_drop(noisy, x))


def test_unused_call_of_a_function_value_runs_its_host_code():
    assert same_as_jax(dropped_call, X) == ["noisy called"]
