"""Assignment expressions (`:=`) are parsed where Python binds them: in a
statement, an `if` test, a `while` test (moved into the loop body), a call's
argument, a lambda's body. Where the binding would land in a graph of its
own (a branch of `x if c else y`, the right operand of `and`/`or`, a
comprehension) the parser refuses and the function runs as Python. Oracle:
JAX on the same code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([1.0, -2.0, 3.0, 0.5])


def in_where(x):
    return jnp.sum(jnp.where(jnp.isfinite(s := jnp.sin(x)), s, 0.0) ** 2)


def read_before_bind(x):
    s = x
    y = s * (s := x * 2)  # the first `s` is the old one
    return jnp.sum(y + s)


def in_if_test(x):
    if (m := jnp.sum(x)) > 0:
        y = m * x
    else:
        y = x
    return jnp.sum(y) * m


def countdown(x):
    n = 5
    acc = x
    while (n := n - 1) > 0:  # n is 0 after the loop
        acc = acc * 0.9 + jnp.sin(acc)
    return jnp.sum(acc) * (n + 1)


def traced_while_test(x):
    s = jnp.sum(x**2)
    k = 0.0
    while (s := s * 0.5) > 0.1:
        k = k + s
    return k + s


def while_with_jumps(x):
    i = 0
    acc = 0.0
    while (i := i + 1) < 10:
        if i % 3 == 0:
            continue
        acc = acc + x[i % 4] * i
        if i > 7:
            break
    return acc * i


def in_loop_body(x):
    acc = 0.0
    for xi in x:
        acc = acc + (h := jnp.sin(xi)) * h
    return acc + h


def in_lambda(x):
    f = lambda z: (w := z * 2) + w  # binds in the lambda's scope
    return jnp.sum(f(x))


PARSED = [
    in_where,
    read_before_bind,
    in_if_test,
    countdown,
    traced_while_test,
    while_with_jumps,
    in_loop_body,
    in_lambda,
]


@pytest.mark.parametrize("f", PARSED, ids=lambda f: f.__name__)
def test_walrus_gradient_is_parsed(f):
    g = kt.grad(f)
    np.testing.assert_allclose(g(X), jax.grad(f)(X), rtol=1e-5)
    assert "runs as Python" not in kt.get_source(g)
    value, _ = kt.value_and_grad(f)(X)
    np.testing.assert_allclose(value, f(X), rtol=1e-5)


@pytest.mark.parametrize("f", [in_where, countdown, traced_while_test], ids=lambda f: f.__name__)
def test_walrus_second_order_under_jit(f):
    # Session 28: the function ran as Python, so kt.jit(kt.hessian(f)) refused.
    np.testing.assert_allclose(kt.jit(kt.hessian(f))(X), jax.hessian(f)(X), rtol=1e-5, atol=1e-6)


def in_conditional_expression(x):
    return jnp.sum(x) if x[0] > 0 else (s := jnp.sum(x * 2)) * s


def in_comprehension(x):
    return sum([(y := x[i]) * y for i in range(3)]) + y  # y leaks to the function


@pytest.mark.parametrize("f", [in_conditional_expression, in_comprehension])
def test_walrus_refused_where_it_cannot_bind_runs_as_python(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-5)
    assert "runs as Python" in kt.get_source(kt.grad(f))


# -- `:=` makes a second name for its object: the aliasing check sees it ---------
def alias_by_walrus_then_append(x):
    y = (a := [x])  # y and a name one list
    a.append(x * 2)
    return jnp.sum(jnp.stack(y))


def walrus_of_a_name_then_append(x):
    a = [x]
    if len(c := a) > 0:  # c is a
        c.append(x * 3)
    return jnp.sum(jnp.stack(a))


def walrus_in_a_display_then_append(x):
    a = [x]
    b = [(c := a), 1]
    c.append(x)
    return jnp.sum(jnp.stack(b[0]))


@pytest.mark.parametrize(
    "f",
    [alias_by_walrus_then_append, walrus_of_a_name_then_append, walrus_in_a_display_then_append],
)
def test_walrus_alias_then_mutation_is_refused_with_its_lines(f):
    # Without the aliasing facts the parser dropped the append seen through
    # the other name: [1, 1] where Python (and JAX) give [3, 3].
    with pytest.raises(kt.KTransformError, match="mutates") as err:
        kt.grad(f)(X)
    lines, first = f.__code__.co_firstlineno, str(err.value)
    # the other reference is named by its line in this file
    assert f"line {lines + 1})" in first or f"line {lines + 2})" in first, first


def walrus_binds_a_fresh_list(x):
    out = []
    while (k := len(out)) < 3:
        out.append(x * k)
    return jnp.sum(jnp.stack(out)) * k


def test_walrus_fresh_list_is_mutated_as_python_does():
    np.testing.assert_allclose(
        kt.grad(walrus_binds_a_fresh_list)(X), jax.grad(walrus_binds_a_fresh_list)(X)
    )
