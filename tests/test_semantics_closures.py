"""Closures keep Python's semantics (issue 11), checked against jax.grad.

Each program is ordinary Python; the oracle is `jax.grad` (and the value) of
the SAME function run by JAX on concrete arrays. k_transform runs it eagerly
and jitted. Covered: default values evaluated at the def, late binding (a
closure reads a variable when called: after a loop, through an alias, a
container, a factory, another function), `nonlocal` threaded through direct
calls; closures escaping a traced loop or a traced `if` when their
variables are rebound run as Python (refused in strict mode); refused with a
KTransformError (never a wrong number): escaping `nonlocal` writers,
unbounded recursion on a traced condition under jit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError
from tests.refusals import strict_refusal

X = jnp.asarray([0.5, 1.2, -0.3], jnp.float32)
XN = jnp.asarray([-0.4, -1.1, 0.2], jnp.float32)


def check(fn, *inputs):
    for x in inputs:
        want_value, want_grad = fn(x), jax.grad(fn)(x)
        for jit in (False, True):
            value, grad = _run(fn, x, jit)
            np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def _run(fn, x, jit):
    kt.set_mode("graph" if jit else "eager")
    try:
        return kt.value_and_grad(fn)(x)
    finally:
        kt.set_mode("graph")


def runs_as_python(fn, *words, inputs=(X, XN)):
    """A closure whose bindings the graph cannot keep: the function runs as
    Python (Python keeps them), per call, matching jax.grad; under kt.jit
    refused where jax.jit refuses; in strict mode refused with the reason
    (`words`)."""
    for x in inputs:
        want = jax.value_and_grad(fn)(x)
        for jit in (False, True):  # graph mode runs code run as Python per call
            for g, w in zip(_run(fn, x, jit), want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        try:
            jax.jit(jax.value_and_grad(fn))(x)
        except Exception:  # noqa: BLE001 - JAX's jit refuses a traced Python test
            with pytest.raises(KTransformError):  # so does kt.jit
                kt.jit(kt.value_and_grad(fn))(x)
    kt.set_strict(True)
    try:
        refused(fn, *words)
    finally:
        kt.set_strict(False)


def refused(fn, *words):
    for jit in (False, True):
        kt.set_mode("graph" if jit else "eager")
        try:
            with pytest.raises(KTransformError) as info:
                kt.value_and_grad(fn)(X)
        finally:
            kt.set_mode("graph")
        message = str(info.value)
        for w in words:
            assert w in message, message
        assert "line" in message


# -- 1. default values are evaluated where the def runs ----------------------
def default_then_rebound(x):
    a = x * 2.0

    def g(v, c=a):  # noqa: E306
        return v * c

    a = jnp.sin(x)
    return jnp.sum(g(x) + a)


def lambda_defaults_in_loop(x):
    fs = []
    for i in range(3):
        fs.append(lambda v, i=i: v * (i + 1.0))
    return jnp.sum(fs[0](x) + fs[1](x) * 2.0 + fs[2](jnp.sin(x)))


def test_regression_default_at_definition():
    check(default_then_rebound, X, XN)


def test_regression_default_in_loop_idiom():
    check(lambda_defaults_in_loop, X)


def default_passed_explicitly(x):
    y = x * 0.5 + 0.1

    def g(v, c=y):  # noqa: E306
        return v * c

    y = g(x, x)  # the default's value is needed by no call
    return jnp.sum(x) + jnp.sum(y * jnp.sin(x))


def test_regression_unused_default_value_jvp():
    """Found by the fuzzer: jvp emitted a default computed in a graph not emitted."""
    v = jnp.ones_like(X)
    want = jax.jvp(default_passed_explicitly, (X,), (v,))
    for jit in (False, True):
        kt.set_mode("graph" if jit else "eager")
        try:
            got = kt.jvp(default_passed_explicitly, X, v)
        finally:
            kt.set_mode("graph")
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    check(default_passed_explicitly, X)


# -- 2. late binding -------------------------------------------------------------
def lambdas_after_static_loop(x):
    fs = []
    for i in range(3):
        fs.append(lambda v: v * (i + 1.0))  # noqa: B023 (late binding is the point)
    return jnp.sum(fs[0](x) + fs[1](jnp.cos(x)))


def defs_in_tuple_after_loop(x):
    fs = ()
    for i in range(3):

        def f(v):  # noqa: E306
            return jnp.sin(v) * i  # noqa: B023

        fs = fs + (f,)
    return jnp.sum(fs[0](x) * x)


def alias_then_rebind(x):
    a = x * 2.0

    def g(v):  # noqa: E306
        return v * a

    h = g
    box = [g]
    a = jnp.sin(x)
    return jnp.sum(h(x) + box[0](x * x))


def _make_scaler(c):
    def g(v):
        return v * c

    h = g
    c = jnp.tanh(c) * 3.0
    return h


def factory_final_bindings(x):
    g = _make_scaler(x)
    return jnp.sum(g(x))


def _apply(f, v):
    return f(v) + f(v * 0.5)


def passed_to_function(x):
    a = x * 2.0
    g = lambda v: v * a  # noqa: E731
    a = jnp.cos(x)
    return jnp.sum(_apply(g, x))


def rebound_inside_if(x):
    a = x * 2.0

    def g(v):  # noqa: E306
        return v * a

    if jnp.sum(x) > 0.0:
        a = jnp.sin(x)
        y = g(x)
    else:
        y = g(x) * 2.0
    return jnp.sum(y)


def closure_out_of_if(x):
    a = x * 2.0
    if jnp.sum(x) > 0.0:
        g = lambda v: v * a  # noqa: E731
    else:
        g = lambda v: v + a  # noqa: E731
    return jnp.sum(g(x))


def free_variable_gradient(x):
    w = jnp.sin(x)
    g = lambda v: jnp.sum(v * w)  # noqa: E731
    w = w * x
    return g(x) * 2.0


def test_regression_late_binding_after_static_loop():
    check(lambdas_after_static_loop, X)
    check(defs_in_tuple_after_loop, X)


def test_regression_late_binding_alias_and_container():
    check(alias_then_rebind, X, XN)


def test_regression_factory_sees_final_bindings():
    check(factory_final_bindings, X)


def test_regression_closure_passed_to_function():
    check(passed_to_function, X)


def test_regression_closure_rebound_inside_if():
    check(rebound_inside_if, X, XN)
    check(closure_out_of_if, X, XN)


def test_regression_free_variable_gradient_late():
    check(free_variable_gradient, X)


# -- nonlocal -----------------------------------------------------------------------
def nonlocal_accumulator(x):
    acc = x * 0.0

    def add(v):  # noqa: E306
        nonlocal acc
        acc = acc + v

    add(x)
    add(jnp.sin(x))
    return jnp.sum(acc * x)


def nonlocal_counter_in_loops(x):
    n = 0
    acc = x

    def step(v):  # noqa: E306
        nonlocal n, acc
        n = n + 1
        acc = acc * v
        return jnp.sum(acc)

    for _ in range(3):
        step(jnp.cos(x))
    total = step(x)
    return total * n


def nonlocal_traced_loop_and_if(x):
    acc = x * 0.0

    def add(v):  # noqa: E306
        nonlocal acc
        acc = acc + v

    while jnp.sum(acc) < 2.0:
        add(jnp.abs(x) + 0.1)
    if jnp.sum(x) > 0.0:
        add(x * x)
    return jnp.sum(acc * x)


def test_regression_nonlocal_direct_calls():
    check(nonlocal_accumulator, X)
    check(nonlocal_counter_in_loops, X)
    check(nonlocal_traced_loop_and_if, X, XN)


def nonlocal_escapes(x):
    acc = x

    def add(v):  # noqa: E306
        nonlocal acc
        acc = acc + v

    fs = [add]
    fs[0](x)
    return jnp.sum(acc)


def test_regression_nonlocal_escape_runs_as_python():
    # The parser threads `nonlocal` only through direct calls: the function
    # runs as Python, exactly (was: refused); strict mode names the escape.
    check(nonlocal_escapes, X)
    message = strict_refusal(nonlocal_escapes, X)
    assert "'add'" in message and "nonlocal" in message and "fs = [add]" in message


# -- refused: closures that cannot be rebound ------------------------------------------
def closure_escapes_traced_loop(x):
    i = 0.0
    f = lambda v: v  # noqa: E731
    while jnp.sum(x) * i < 3.0:

        def f(v):  # noqa: F811 (rebinding f is the point)
            return v * i  # noqa: B023

        i = i + 1.0
    return jnp.sum(f(x))


def closure_out_of_if_then_rebound(x):
    a = x * 2.0
    if jnp.sum(x) > 0.0:
        g = lambda v: v * a  # noqa: E731
    else:
        g = lambda v: v + a  # noqa: E731
    a = jnp.sin(x)
    return jnp.sum(g(x))


def test_regression_closure_escaping_traced_loop_runs_as_python():
    # (at XN its `while` never ends, in Python too)
    runs_as_python(closure_escapes_traced_loop, "'f'", "loop", inputs=(X,))


def test_regression_closure_escaping_if_then_rebound_runs_as_python():
    runs_as_python(closure_out_of_if_then_rebound, "'g'", "if")


# A closure returned by a nested factory reads the enclosing function's variables
# by cell: rebound after the factory call, Python's closure sees the new value
# (fuzzer-found: k_transform used the old one, silently). The graph cannot keep
# that: the function runs as Python (refused in strict mode); the factory's
# own parameters and a binding that does not change are fine.
def factory_closure_rebound(x):
    z = x * 2.0

    def make():
        def g(v):
            return v * z

        return g

    h = make()
    for _ in range(2):
        z = h(x)
    return jnp.sum(z)


def factory_closure_not_rebound(x):
    z = jnp.sin(x)

    def make(scale):
        def g(v):
            return v * z * scale

        return g

    h = make(2.0)
    return jnp.sum(h(x) + h(z))


def factory_own_parameter_shadowing(x):
    a = x * 2.0

    def make(a):  # the closure reads the factory's `a`, not this function's
        def g(v):
            return v * a

        return g

    h = make(jnp.cos(x))
    a = jnp.sin(x)
    return jnp.sum(h(x) + a)


def test_regression_factory_closure_rebound_runs_as_python():
    runs_as_python(factory_closure_rebound, "'g'", "make()", "'z'")


def test_regression_factory_closures_by_cell_otherwise():
    check(factory_closure_not_rebound, X, XN)
    check(factory_own_parameter_shadowing, X, XN)


# -- 3. recursion on a traced base case ---------------------------------------------------
def _halve(x):
    if jnp.sum(jnp.abs(x)) < 1.0:
        return jnp.sum(x * x)
    return _halve(x * 0.5) + jnp.sum(jnp.sin(x))


def traced_recursion(x):
    return _halve(x * 3.0)


def test_regression_traced_recursion_runs_op_by_op():
    """XLA cannot compile a recursion whose base case a traced condition
    chooses: k_transform's own compiled call runs it op by op (with a
    warning), the user's jax.jit gets a KTransformError naming the line."""
    with pytest.warns(UserWarning, match="'_halve'.*runs op by op"):
        value, grad = kt.value_and_grad(traced_recursion)(X)
    np.testing.assert_allclose(value, traced_recursion(X), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(traced_recursion)(X), rtol=1e-5)
    with pytest.raises(KTransformError) as info:
        jax.jit(kt.value_and_grad(traced_recursion))(X)
    message = str(info.value)
    assert "'_halve'" in message and "line" in message and "if jnp.sum" in message
    check_eager_only(traced_recursion)


def check_eager_only(fn):
    value, grad = _run(fn, X, jit=False)
    np.testing.assert_allclose(value, fn(X), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(fn)(X), rtol=1e-5)


def late_bound_scalar(x):
    a = x * 2.0
    g = lambda v: jnp.sin(v * a)  # noqa: E731
    a = jnp.cos(x)
    return g(x) * x


def test_regression_second_order_and_jvp_through_late_closure():
    x = jnp.float32(0.7)
    want = jax.grad(jax.grad(late_bound_scalar))(x)
    for jit in (False, True):
        kt.set_mode("graph" if jit else "eager")
        try:
            got = kt.grad(kt.grad(late_bound_scalar))(x)
            out, tangent = kt.jvp(late_bound_scalar, x, jnp.float32(1.0))
        finally:
            kt.set_mode("graph")
        np.testing.assert_allclose(got, want, rtol=1e-4)
        _, want_tangent = jax.jvp(late_bound_scalar, (x,), (jnp.float32(1.0),))
        np.testing.assert_allclose(tangent, want_tangent, rtol=1e-5)


def container_read_in_branch(x):
    a = x * 2.0
    g = lambda v: v * a  # noqa: E731
    box = [g, x]
    if jnp.sum(x) > 0.0:
        a = jnp.sin(x)
        y = box[0](x) + box[1]
    else:
        y = box[0](x * x)
    return jnp.sum(y)


def nested_recursion_and_shadowing(x):
    a = x * 2.0

    def g(v):
        return v * a

    def p(v, n):
        a = v + 100.0  # a local of p: g still reads the enclosing `a`
        if n == 0:
            return g(v) + a * 0.0
        return p(v * x, n - 1)

    a = jnp.cos(x)
    return jnp.sum(p(x, 3))


def test_regression_closure_container_read_in_branch():
    check(container_read_in_branch, X, XN)


def test_regression_nested_recursion_keeps_lexical_scope():
    check(nested_recursion_and_shadowing, X)


def conditional_lambda_then_rebound(x):
    a = x * 2.0
    g = (lambda v: v * a) if jnp.sum(x) > 0.0 else (lambda v: v + a)  # noqa: E731
    a = jnp.sin(x)
    return jnp.sum(g(x))


def conditional_lambda(x):
    a = x * 2.0
    g = (lambda v: v * a) if jnp.sum(x) > 0.0 else (lambda v: v + a)  # noqa: E731
    return jnp.sum(g(x))


def test_regression_conditional_lambda():
    check(conditional_lambda, X, XN)
    runs_as_python(conditional_lambda_then_rebound, "lambda", "rebound", "g = (lambda v")


def closure_as_default(x):
    a = x * 2.0
    g = lambda v: v * a  # noqa: E731

    def k(v, f=g):
        return f(v) + 1.0

    a = jnp.sin(x)
    return jnp.sum(k(x) * x)


def test_regression_closure_as_default_value():
    check(closure_as_default, X)


def def_in_loop_after_tail_if(x):
    z = jnp.sin(x)
    if x[0] > 5.0:  # the rest of the function becomes this `if`'s other branch
        return jnp.sum(z)
    for _ in range(2):

        def g(v):
            return z + v  # noqa: B023 (late binding is the point)

        z = g(x) * 2.0
    y = g(z)  # sees the last `z`
    return jnp.sum(y * x)


def test_regression_closure_rebound_inside_a_branch_graph():
    """Found by the fuzzer: a rebinding inside a branch graph of a variable the
    branch had captured was taken for the captured value (a stale closure)."""
    check(def_in_loop_after_tail_if, X, XN)


# -- nonlocal accumulators in nested static loops: values share sub-envs -----
def nonlocal_accumulators_in_nested_loops(x):
    y = x * 0.5 + 0.1
    z = jnp.sin(x)
    for c1 in (-0.5, -0.25):
        for _c2 in (-1.5, 2.0, -0.5):
            acc = 0.0 * x

            def add(v):  # noqa: E306
                nonlocal acc
                acc = acc + v
                return v * 0.5

            for _ in range(3):
                z = add(1.5 * x - x[0] * x)
            y = jnp.tanh(jnp.tanh(acc) + jnp.cos(c1 * y))
            acc2 = 0.0 * x

            def add2(v):  # noqa: E306
                nonlocal acc2
                acc2 = acc2 + v
                return v * 0.5

            z = add2(x)
            add2(1.5 * x)
            z = jnp.tanh(jnp.tanh(acc2) + 0.2 * jnp.sum(-1.5 * y) * x[0] * x)
    return jnp.sum(0.2 * jnp.sum(z * x) * y) + jnp.sum(y * z)


def test_regression_nonlocal_nested_loops_second_order_eager():
    """The fuzzer's program whose eager Hessian-vector product took minutes:
    nested closure envs share sub-envs, and the runtime's test for traced
    values walked every path through them (now each container once)."""
    x = jnp.asarray([0.3, -0.2, 0.7], jnp.float32)
    v = jnp.asarray([1.0, 0.5, -1.0], jnp.float32)
    fn = nonlocal_accumulators_in_nested_loops
    kt.set_mode("eager")
    try:
        got = kt.hvp(fn, (x,), v)
    finally:
        kt.set_mode("graph")
    want = jax.jvp(jax.grad(fn), (x,), (v,))[1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_regression_traced_test_visits_shared_values_once(monkeypatch):
    """`any_traced` on a value whose sub-values are shared 12 levels deep
    (3**12 paths to the leaf) looks at each container once."""
    from k_transform.runtime import values

    shared = {"leaf": 1.0}
    for _ in range(12):
        shared = {"a": shared, "b": (shared, [shared])}
    seen = []
    real = values.is_tracer
    monkeypatch.setattr(values, "is_tracer", lambda v: seen.append(v) or real(v))
    assert not values.any_traced(shared)
    assert len(seen) == 1
    found = []
    jax.make_jaxpr(lambda t: found.append(values.any_traced({"env": shared, "t": [t]})) or t)(1.0)
    assert found == [True]
