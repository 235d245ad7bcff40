"""Forward mode and higher derivatives through `if`, `while` and `for`.

Every control-flow program of tests/test_grad_control.py (pairs and triples
of if/while/for, break/continue/return, closures in loops, recursion) is
checked against JAX on the same function: `kt.jvp` against `jax.jvp`, the
second derivative (a Hessian-vector product by reverse over reverse) and
the third derivative against nested `jax.grad`, eagerly (loops run in
Python) and jitted (traced loops run under `lax`, storing their carries on
buffer stacks, see k_transform/dfunctor/loops.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.control import prims as control
from k_transform.runtime import bounds
from k_transform.runtime import stack as rs
from tests.test_grad_control import CASES

G = kt.GradOperation()


@pytest.fixture(autouse=True)
def _loops_as_scans(scan_loops):
    """Loops of more than 8 trips run as `lax.scan`s here (the machinery under
    test); the unroll budget's choice is tested in tests/test_unroll_policy.py."""


@pytest.fixture
def restore_mode():
    yield
    kt.set_mode("graph")


_PROGRAMS: dict = {}


def scalar_program(c, args):
    """(g, f, x): g(x) is the program at x with its other (static) arguments
    bound; f(x) = sum(g(x)). The functions are made once per program and
    static arguments, so a second input reuses their compiled derivatives."""
    x, rest = args[0], args[1:]
    key = (c.fn, repr(rest))
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _bind(c, rest)
    return (*_PROGRAMS[key], x)


_D2: dict = {}


def _d2(f, v):
    """`x -> <G(f)(x), v>`, one function per `f` and tangent shape (its
    gradient compiled once for the inputs of a program)."""
    key = (f, v.shape, str(v.dtype))
    if key not in _D2:

        def d2(x):
            return jnp.sum(G(f)(x) * v)

        _D2[key] = d2
    return _D2[key]


def _bind(c, rest):
    fn = c.fn
    if rest:
        other = rest[0]

        def g(x):
            return fn(x, other)

    else:
        g = fn

    def f(x):
        return jnp.sum(g(x))

    return g, f


def tangent(x, seed=0):
    return jnp.asarray(np.random.RandomState(seed).randn(*x.shape), x.dtype)


def close(got, want, tol):
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1.0 + np.max(np.abs(want))))


def check_jvp_and_second_order(c, args):
    g, f, x = scalar_program(c, args)
    v = tangent(x)
    close(kt.jvp(g, x, v)[1], jax.jvp(g, (x,), (v,))[1], 1e-4)
    close(G(_d2(f, v))(x), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) * v))(x), 1e-4)


def check_third_order(c, args):
    g, f, x = scalar_program(c, args)
    v = tangent(x, 1)

    def d2(x):
        return jnp.sum(G(f)(x) * v)

    def d3(x):
        return jnp.sum(G(d2)(x) * v)

    ref2 = lambda x: jnp.sum(jax.grad(f)(x) * v)  # noqa: E731
    want = jax.grad(lambda x: jnp.sum(jax.grad(ref2)(x) * v))(x)
    close(G(d3)(x), want, 1e-3)


EAGER = sorted(CASES)
GRAPH = sorted(n for n, c in CASES.items() if c.graph)
# Third order jitted compiles large programs (about 2 s each): one program per
# mechanism (traced while, scan over a range and over rows, Python-level loop
# over a tuple, break/continue/return, nesting, closures, recursion, if).
GRAPH_THIRD = (
    "if_else",
    "while_data_dependent",
    "while_newton_sqrt",
    "while_two_carries",
    "while_break",
    "while_early_return",
    "for_range_large_if",
    "for_rows",
    "for_rows_continue",
    "for_tuple_of_arrays",
    "for_in_while",
    "while_in_for",
    "closure_in_while",
    "regression_return_in_for_over_rows",
    "recursion_static_power",
)


@pytest.mark.parametrize("name", EAGER)
def test_jvp_and_second_order_eager(name, restore_mode):
    kt.set_mode("eager")
    for args in CASES[name].inputs[:2]:
        check_jvp_and_second_order(CASES[name], args)


@pytest.mark.parametrize("name", GRAPH)
def test_jvp_and_second_order_jitted(name, restore_mode):
    # (one input: each compiles anew; eager mode above runs the second one)
    check_jvp_and_second_order(CASES[name], CASES[name].inputs[0])


@pytest.mark.parametrize("name", [n for n in EAGER if n not in GRAPH_THIRD])
def test_third_order_eager(name, restore_mode):
    """(The programs of `GRAPH_THIRD` are checked compiled, below.)"""
    kt.set_mode("eager")
    check_third_order(CASES[name], CASES[name].inputs[0])


@pytest.mark.parametrize("name", GRAPH_THIRD)
def test_third_order_jitted(name, restore_mode):
    check_third_order(CASES[name], CASES[name].inputs[0])


# -- long and data-dependent loops under jit -------------------------------------------
def newton_cube_root(a):
    """Newton steps until converged: a traced, data-dependent trip count."""
    x = a
    err = jnp.max(jnp.abs(x * x * x - a))
    while err > 1e-5:
        x = x - (x * x * x - a) / (3.0 * x * x)
        err = jnp.max(jnp.abs(x * x * x - a))
    return jnp.sum(jnp.sin(x) * a)


def test_hessian_and_jvp_through_a_data_dependent_while():
    a = jnp.array([1.5, 2.0, 3.0, 0.7], jnp.float32)
    # jax differentiates the same Python loop eagerly (concrete conditions)
    close(kt.hessian(newton_cube_root)(a), jax.hessian(newton_cube_root)(a), 1e-3)
    v = tangent(a)
    want = jax.jvp(newton_cube_root, (a,), (v,))[1]
    close(kt.jvp(newton_cube_root, a, v)[1], want, 1e-4)


def long_for(x):
    for k in range(40):  # a lax.scan under jit
        x = jnp.sin(x) * 1.02 + 0.01 * k
    return jnp.sum(x * x)


def long_while(x):
    i = 0.0
    while i < 40.0:  # traced counter: a lax.while_loop under jit
        x = jnp.sin(x) * 1.02 + 0.01 * i
        i = i + 1.0
    return jnp.sum(x * x)


def rows_sum(m):
    total = 0.0
    for row in m:  # 12 rows: a lax.scan under jit
        total = total + jnp.sum(jnp.tanh(row) * row)
    return total


@pytest.mark.parametrize("fn", [long_for, long_while])
def test_second_order_through_long_traced_loops(fn):
    x = jnp.array([0.3, -0.8, 1.1], jnp.float32)
    close(kt.hessian(fn)(x), jax.hessian(long_for)(x), 1e-3)
    v = tangent(x)
    close(kt.jvp(fn, x, v)[1], jax.jvp(long_for, (x,), (v,))[1], 1e-4)


def test_second_order_through_a_scan_over_rows():
    m = jnp.asarray(np.random.RandomState(2).randn(12, 3), jnp.float32)
    close(kt.hessian(rows_sum)(m), jax.hessian(rows_sum)(m), 1e-4)


def test_second_order_loop_grows_its_bound_and_retraces():
    """A traced while longer than the stack bound: the gradient function
    raises the loop's bound and retraces; the result is still exact."""
    old = bounds.DEFAULT_LOOP_BOUND
    bounds.set_loop_bound(8)
    try:
        x = jnp.array([0.3, -0.8, 1.1], jnp.float32)
        close(kt.hessian(long_while)(x), jax.hessian(long_for)(x), 1e-3)
    finally:
        bounds.set_loop_bound(old)


def test_hvp_under_a_users_jit_stores_what_the_loop_ran():
    """`jax.jit(kt.jvp(kt.grad(f)))` through a 40-step `for`: the reverse
    loops of K of the loop pop the forward's stack until it is empty, so they
    store as many carries as it holds (40), not the loop bound a `while`
    under a user's jit gets (1,024 per stack: the hvp of a 10-step loop of
    4,096 floats took 118x JAX's time)."""
    grad_fn = kt.grad(long_for)
    hvp = jax.jit(lambda x, v: kt.jvp(lambda y: grad_fn(y), (x,), (v,))[1])
    x = jnp.array([0.3, -0.8, 1.1], jnp.float32)
    v = tangent(x)
    close(hvp(x, v), jax.jvp(jax.grad(long_for), (x,), (v,))[1], 1e-4)
    text = str(jax.make_jaxpr(hvp)(x, v))
    assert "f32[40,3]" in text
    assert f"[{bounds.DEFAULT_LOOP_BOUND}," not in text


def chain_for(n):
    def f(x):
        for k in range(n):  # a lax.scan under jit (more than 8 trips)
            x = jnp.sin(x) * 1.02 + 0.01 * k
        return jnp.sum(x * x)

    return f


def third_derivative(f, v):
    d2 = lambda x: jnp.sum(G(f)(x) * v)  # noqa: E731
    return lambda x: G(lambda y: jnp.sum(G(d2)(y) * v))(x)


def jax_third_derivative(f, v):
    d2 = lambda x: jnp.sum(jax.grad(f)(x) * v)  # noqa: E731
    return jax.grad(lambda x: jnp.sum(jax.grad(d2)(x) * v))


def test_third_order_stores_the_stacks_it_carries_as_counts():
    """Third order differentiates loops whose carry holds a stack; each
    iteration stores that stack's count, not the stack (`light`/`heavy`), so
    memory grows with the trip count (it grew with its square: 10 MB for 80
    steps of 64 floats)."""
    x = jnp.array([0.3, -0.8, 1.1], jnp.float32)
    v = tangent(x, 1)
    temps = {}
    for n in (16, 48):
        f = chain_for(n)
        d3 = jax.jit(third_derivative(f, v))
        temps[n] = d3.lower(x).compile().memory_analysis().temp_size_in_bytes
        close(d3(x), jax_third_derivative(f, v)(x), 1e-3)
    assert temps[48] < 3.5 * temps[16], temps  # 3x the trips: 2.1x the memory (was 6.4x)


def _buf_stack(rng, n, cap=4):
    return rs.BufStack(jnp.asarray(rng.randn(cap, 2), jnp.float32), jnp.asarray(n, jnp.int32))


@pytest.mark.parametrize("which", ["push", "pop", "push_grad", "pop_grad"])
def test_stack_rules_are_the_gradients_of_their_buffers(which):
    """The rules of stack push and pop and of their gradients (all four are
    in loops differentiated again) against JAX's gradient of the same
    functions of the buffer: a stack's gradient is its buffer's."""
    rng = np.random.RandomState(5)
    item = jnp.asarray(rng.randn(2), jnp.float32)
    fn, rule = {
        "push": (rs.stack_push, control.bprop_stack_push),
        "pop": (rs.stack_pop, control.bprop_stack_pop),
        "push_grad": (rs.stack_push_grad, control.bprop_stack_push_grad),
        "pop_grad": (rs.stack_pop_grad, control.bprop_stack_pop_grad),
    }[which]
    pushes = which.startswith("push")
    args = (_buf_stack(rng, 2), item) if pushes else (_buf_stack(rng, 2), None)
    out, vjp = jax.vjp(
        lambda s, i: fn(s, i) if pushes else fn(s), args[0], args[1] if pushes else item
    )
    cot = (
        _buf_stack(rng, 3)
        if pushes
        else (jnp.asarray(rng.randn(2), jnp.float32), _buf_stack(rng, 1))
    )
    want = vjp(cot)
    got = rule(*args, out, cot)
    got_stack, want_stack = got[0], want[0]
    close(got_stack.buf, want_stack.buf, 1e-6)
    if pushes:
        close(got[1], want[1], 1e-6)


def test_light_and_heavy_rules_against_jax():
    """`heavy(stored, like)` rebuilds a stack from a count and the final
    buffer: its rule gives `like` the gradient below the count (a stack's
    value is its first n slots) and `stored` the rest; `light`'s rule gives
    the stack none (a count has no gradient)."""
    rng = np.random.RandomState(6)
    arr = jnp.asarray(rng.randn(3), jnp.float32)
    like = (_buf_stack(rng, 4), arr)
    stored = (jnp.asarray(2, jnp.int32), jnp.asarray(rng.randn(3), jnp.float32))
    below = jnp.arange(4)[:, None] < 2
    d_buf = jnp.where(below, jnp.asarray(rng.randn(4, 2), jnp.float32), 0.0)
    dout = (rs.BufStack(d_buf, jnp.asarray(2, jnp.int32)), jnp.asarray(rng.randn(3), jnp.float32))
    _, vjp = jax.vjp(
        lambda b, a: rs.heavy((stored[0], a), (rs.BufStack(b, like[0].n), arr)),
        like[0].buf,
        stored[1],
    )
    want_buf, want_arr = vjp(dout)
    d_stored, d_like = control.bprop_heavy(stored, like, None, dout)
    close(d_like[0].buf, want_buf, 1e-6)
    close(d_stored[1], want_arr, 1e-6)
    assert d_stored[0] is None and d_like[1] is None
    d_x = control.bprop_light(like, None, (stored[0], dout[1]))[0]
    assert d_x[0] is None
    close(d_x[1], dout[1], 1e-6)


# -- Parameters read inside a loop -------------------------------------------------------
class Recurrent(kt.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.RandomState(4)
        self.w = kt.Parameter(jnp.asarray(rng.randn(3, 3) * 0.5, jnp.float32), name="w")

    def construct(self, x):
        h = x
        for _ in range(12):
            h = jnp.tanh(h @ self.w)
        return jnp.sum(h * h)


def test_grad_of_parameter_gradient_through_a_loop():
    net = Recurrent()
    params = kt.ParameterTuple(net.trainable_params())
    x = jnp.array([[0.5, -0.2, 0.9]], jnp.float32)
    w = net.w.data

    def ref(x, w):
        h = x
        for _ in range(12):
            h = jnp.tanh(h @ w)
        return jnp.sum(h * h)

    grad_w = kt.GradOperation(get_by_list=True)(net, params)

    def mixed(x):
        return jnp.sum(grad_w(x)[0])

    want = jax.grad(lambda x: jnp.sum(jax.grad(ref, argnums=1)(x, w)))(x)
    close(G(mixed)(x), want, 1e-4)
    v = tangent(x)
    close(kt.jvp(net, x, v)[1], jax.jvp(lambda x: ref(x, w), (x,), (v,))[1], 1e-4)


def rows_listcomp(x):
    """A comprehension over an array's rows: a loop whose carry, a list, grows."""
    y = x * 0.5 + 0.1
    z = jnp.sin(x)
    y = 0.5 * jnp.sum(
        jnp.stack([jnp.sin(r) * -1.5 * x for r in jnp.stack((x, x, -0.5 * y))]), axis=0
    )
    return jnp.sum(jnp.tanh(x)) + jnp.sum(y * z)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_regression_hvp_through_a_loop_growing_a_list(mode, restore_mode):
    """Fuzzer-found: the gradient of `heavy`'s final carry was built in the
    final list's length and added to the shorter one of an iteration."""
    kt.set_mode(mode)
    x, v = jnp.array([0.3, -0.2, 0.7]), jnp.array([1.0, 0.5, -1.0])
    close(kt.hvp(rows_listcomp, (x,), v), jax.jvp(jax.grad(rows_listcomp), (x,), (v,))[1], 1e-5)


# -- third order through lax.scan: forward over reverse ---------------------------------
def scan_carry_only(x):
    s, _ = jax.lax.scan(lambda s, _: (jnp.sin(s) * 1.1, None), x, None, length=3)
    return jnp.sum(s**2)


def scan_with_xs(x):
    def body(s, r):
        s = jnp.tanh(s * r + 0.3)
        return s, jnp.sin(s) * r

    s, ys = jax.lax.scan(body, x, jnp.stack([x, 2.0 * x, -x]))
    return jnp.sum(s**2) + jnp.sum(ys * ys)


def scan_carry_tuple(x):
    def body(c, _):
        a, b = c
        return (jnp.sin(a) * b, jnp.cos(b) + a * 0.5), None

    (a, b), _ = jax.lax.scan(body, (x, x * 0.7), None, length=4)
    return jnp.sum(a * b)


SCANS = [scan_carry_only, scan_with_xs, scan_carry_tuple]


@pytest.mark.parametrize("f", SCANS, ids=lambda f: f.__name__)
def test_regression_jvp_of_grad_through_a_scan(f):
    """`kt.jvp(kt.grad(f))` through `lax.scan` (double reverse of the second
    order: third order) raised a ValueError in `heavy`: ItemsGrad's rule
    star-unpacks a comprehension, a loop growing a tuple of gradients that
    hold the scan's stacks, so an iteration's stored tuple is shorter than
    the final one (`runtime.stack._grown`). With xs, `heavy_grad`'s rule gave
    the gradient of a stack `like`'s count instead of the stored one, and the
    result was wrong (`heavy_grad_back`). Against `jax.jvp(jax.grad(f))`,
    eagerly, under `kt.jit`, and as `kt.hvp`."""
    x, v = jnp.array([0.3, 0.5]), jnp.array([1.0, -0.4])
    want = jax.jvp(jax.grad(f), (x,), (v,))[1]
    close(kt.jvp(kt.grad(f), (x,), (v,))[1], want, 1e-5)
    if f is scan_with_xs:  # (one compiled third order: the suite's time)
        close(kt.jit(lambda x, v: kt.jvp(kt.grad(f), (x,), (v,))[1])(x, v), want, 1e-5)
    else:
        close(kt.hvp(f, (x,), v), want, 1e-5)


def test_heavy_grad_back_is_the_transpose_of_heavy_grad():
    """<heavy_grad(d), dd> = <d, heavy_grad_back(dd)>, over a carry whose list
    the loop grew (the stored list is shorter); each result has its own
    side's counts (a gradient stack's count names the slot push and pop
    rules touch)."""
    rng = np.random.RandomState(7)
    n1, n2 = jnp.asarray(1, jnp.int32), jnp.asarray(3, jnp.int32)
    like = (_buf_stack(rng, 0), [_buf_stack(rng, 4), _buf_stack(rng, 2)])
    stored = (n1, [n2])
    d = (_buf_stack(rng, 1), [_buf_stack(rng, 3)])
    dd = (_buf_stack(rng, 0), [_buf_stack(rng, 4), _buf_stack(rng, 2)])
    fwd = rs.heavy_grad(d, stored, like)
    back = rs.heavy_grad_back(dd, stored, like)
    assert len(fwd[1]) == 2 and fwd[1][1] is None and len(back[1]) == 1
    assert int(fwd[0].n) == 0 and int(back[0].n) == 1 and int(back[1][0].n) == 3

    def dot(a, b):
        return jnp.vdot(a[0].buf, b[0].buf) + jnp.vdot(a[1][0].buf, b[1][0].buf)

    close(dot(fwd, dd), dot(d, back), 1e-6)
    rebuilt = rs.heavy(stored, like)
    assert len(rebuilt[1]) == 1 and int(rebuilt[1][0].n) == 3
    close(rebuilt[1][0].buf, like[1][0].buf, 0)
