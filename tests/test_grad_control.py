"""Gradients through control flow, checked against `jax.grad` as the oracle.

Each program below is an ordinary module-level Python function that combines
`if`/`elif`/`else`, `while`, `for` over ranges, tuples and array rows, nested in
pairs and triples, with `break`, `continue`, early `return`, closures defined
inside loops, recursion and variables first assigned inside a loop.

The oracle is `jax.grad` of the SAME function run eagerly on concrete arrays
(Python control flow then sees concrete values). Every program is registered
with 2-3 argument tuples chosen so that its data-dependent conditions take
different paths, and is differentiated by k_transform:

- in eager mode (generated code run op by op: concrete control flow),
- in graph mode (jitted: `if` -> `lax.cond`, `while` -> `lax.while_loop`, ...),
- once under the user's own `jax.jit` of the gradient function.

The gradient is taken with respect to the first argument; Python ints are
static. Inputs are float32; tolerance rtol=1e-4, atol=1e-5 throughout.
"""

import dataclasses
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt
from k_transform.errors import UnboundedRecursion

RTOL = 1e-4
ATOL = 1e-5


@pytest.fixture(autouse=True)
def _loops_as_scans(scan_loops):
    """Loops of more than 8 trips run as `lax.scan`s here (the machinery under
    test); the unroll budget's choice is tested in tests/test_unroll_policy.py."""


def vec(*values):
    return jnp.asarray(values, jnp.float32)


def mat(rows):
    return jnp.asarray(rows, jnp.float32)


# Vectors whose sums and entries have different signs and sizes.
XP = vec(0.5, 1.2, 0.3, 0.8)  # all positive, sum 2.8
XN = vec(-0.7, -0.2, -1.1, -0.4)  # all negative
XM = vec(0.9, -1.3, 0.4, -0.2)  # mixed, sum -0.2
VECS = ((XP,), (XN,), (XM,))

MP = mat([[0.5, 0.2, -0.1, 0.3], [0.4, -0.6, 0.9, 0.1], [-0.3, 0.8, 0.2, 0.5]])
MN = mat([[-0.5, 0.1, -0.4, -0.3], [0.2, -0.9, -0.1, 0.3], [0.7, 0.6, -0.2, 0.4]])
MM = mat([[0.1, -0.2, 0.3, -0.4], [-0.8, -0.1, -0.6, -0.2], [0.9, 0.4, 0.2, 0.3]])
MATS = ((MP,), (MN,), (MM,))


@dataclasses.dataclass(frozen=True)
class Case:
    fn: Callable
    inputs: tuple  # tuples of arguments, one per path
    graph: bool = True  # False: recursion on a traced condition (runs op by op)

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.inputs[0]) if isinstance(a, (int, bool)))


CASES: dict[str, Case] = {}


def case(*inputs, graph: bool = True):
    """Register a program with the argument tuples it is checked at."""

    def register(fn):
        assert fn.__name__ not in CASES, fn.__name__
        CASES[fn.__name__] = Case(fn, tuple(inputs), graph)
        return fn

    return register


# ---------------------------------------------------------------------------
# if / elif / else
# ---------------------------------------------------------------------------
@case(*VECS)
def if_else(x):
    if jnp.sum(x) > 0.0:
        y = jnp.sin(x) * x
    else:
        y = jnp.cos(x) * 2.0
    return jnp.sum(y)


@case((XP,), (XN,), (vec(0.0, 0.1, 0.2, 0.3),))
def if_elif_else(x):
    if x[0] > 0.4:
        y = x * x
    elif x[0] > -0.1:
        y = jnp.tanh(x) * 3.0
    else:
        y = jnp.exp(x)
    return jnp.sum(y)


@case(*VECS)
def if_without_else(x):
    y = x * 2.0
    if jnp.max(x) > 0.6:
        y = y * y
    return jnp.sum(y)


@case((XP,), (XN,), (XM,), (vec(-0.5, 0.5, 0.1, 0.2),))
def if_nested_if(x):
    if x[0] > 0.0:
        if x[1] > 0.0:
            y = x * x[1]
        else:
            y = jnp.sin(x) + x[1]
    else:
        if jnp.sum(x) < -1.0:
            y = x * 3.0
        else:
            y = jnp.cos(x * x[0])
    return jnp.sum(y)


@case(*VECS)
def if_and_condition(x):
    if x[0] > 0.0 and x[1] < 0.0:
        y = x * x[0]
    else:
        y = x + 1.0
    return jnp.sum(jnp.sin(y))


@case(*VECS)
def if_early_return(x):
    if jnp.sum(x) > 1.0:
        return jnp.sum(x * x)
    y = jnp.tanh(x)
    if jnp.min(x) < -1.0:
        return jnp.sum(y * 2.0)
    return jnp.sum(y * x)


@case((XP, 0.5), (XN, -2.0), (XM, 1.5))
def if_on_float_arg(x, a):
    if a > 0.0:
        y = x * a
    else:
        y = x / (1.0 + a * a)
    return jnp.sum(y * y)


# ---------------------------------------------------------------------------
# while (traced conditions are bounded by a counter so they terminate)
# ---------------------------------------------------------------------------
@case(*VECS)
def while_data_dependent(x):
    y = x
    i = 0
    while jnp.sum(y * y) < 10.0 and i < 40:
        y = y * 1.3 + 0.1
        i = i + 1
    return jnp.sum(y)


@case((XP, 2.0), (XP, 9.0), (XN, 0.3))
def while_newton_sqrt(x, a):
    # Newton's iteration for sqrt(a) * x, with a data-dependent stop.
    y = x * 0.0 + 1.0
    i = 0
    while jnp.max(jnp.abs(y * y - a)) > 1e-3 and i < 30:
        y = 0.5 * (y + a / y)
        i = i + 1
    return jnp.sum(y * x)


@case(*VECS)
def while_with_if(x):
    y = x
    i = 0
    while i < 6:
        if jnp.sum(y) > 0.0:
            y = y * 0.5 - 0.3
        else:
            y = jnp.sin(y) + 0.4
        i = i + 1
    return jnp.sum(y * x)


@case(*VECS)
def while_break(x):
    y = x
    i = 0
    while i < 20:
        y = y + jnp.sin(y) * 0.5
        if jnp.sum(y) > 3.0:
            break
        i = i + 1
    return jnp.sum(y)


@case(*VECS)
def while_continue(x):
    y = x
    i = 0
    while i < 8:
        i = i + 1
        if jnp.sum(y) < 0.0:
            y = y + 0.4
            continue
        y = y * jnp.cos(y)
    return jnp.sum(y * y)


@case(*VECS)
def while_early_return(x):
    y = x
    i = 0
    while i < 10:
        y = y * 1.2 + 0.2
        if jnp.max(y) > 2.0:
            return jnp.sum(y * x)
        i = i + 1
    return jnp.sum(jnp.tanh(y))


@case(*VECS)
def while_in_while(x):
    y = x
    i = 0
    while i < 3:
        j = 0
        while jnp.sum(y) < 2.0 and j < 5:
            y = y + 0.3 * jnp.exp(-y * y)
            j = j + 1
        y = y * 0.9
        i = i + 1
    return jnp.sum(y * x)


@case(*VECS)
def while_two_carries(x):
    y = x
    s = jnp.sum(x)
    i = 0
    while s < 4.0 and i < 12:
        y = jnp.sin(y) + 0.5
        s = s + jnp.sum(y * y)
        i = i + 1
    return s + jnp.sum(y)


# ---------------------------------------------------------------------------
# for over range (n <= 8 unrolled, larger n scanned), tuples and rows
# ---------------------------------------------------------------------------
@case(*VECS)
def for_range_small_if(x):
    s = 0.0
    for i in range(5):
        if x[i % 4] > 0.0:
            s = s + jnp.sin(x[i % 4]) * i
        else:
            s = s - x[(i + 1) % 4] * 0.5
    return s


@case(*VECS)
def for_range_large_if(x):
    y = x
    for i in range(12):
        if jnp.sum(y) > 0.0:
            y = y * 0.8 - 0.05 * i
        else:
            y = jnp.tanh(y) + 0.1
    return jnp.sum(y * x)


@case((XP, 3), (XN, 5), (XM, 11))
def for_range_static_n(x, n):
    y = x
    for _ in range(n):
        y = jnp.sin(y) + x * 0.5
    return jnp.sum(y)


@case(*VECS)
def for_range_step_and_reverse(x):
    s = x * 0.0
    for i in range(0, 10, 3):
        s = s + x * i
    for j in range(4, 0, -1):
        if x[j - 1] > 0.0:
            s = s * jnp.cos(x[j - 1])
    return jnp.sum(s)


@case(*VECS)
def for_range_break(x):
    y = x
    for _ in range(10):
        y = y * 1.5
        if jnp.max(jnp.abs(y)) > 2.5:
            break
    return jnp.sum(jnp.sin(y))


@case(*VECS)
def for_range_continue(x):
    s = 0.0
    for i in range(4):
        if x[i] < 0.0:
            continue
        s = s + x[i] * x[i] * (i + 1)
    return s + x[0]


@case(*VECS)
def for_range_early_return(x):
    y = x
    for _ in range(12):
        y = y + 0.25
        if jnp.sum(y) > 2.0:
            return jnp.sum(y * y)
    return jnp.sum(y * x)


@case(*VECS)
def for_range_first_assigned_in_loop(x):
    for i in range(3):
        last = x * (i + 1.0)
        if jnp.sum(x) > 0.0:
            last = last * last
    return jnp.sum(last) + i


@case(*VECS)
def for_tuple_of_floats(x):
    s = x
    for c in (0.5, 1.5, -2.0):
        if jnp.sum(s) * c > 0.0:
            s = s * c
        else:
            s = s + c
    return jnp.sum(jnp.sin(s))


@case(*VECS)
def for_tuple_of_arrays(x):
    total = 0.0
    for v in (x, x * x, jnp.sin(x)):
        if jnp.sum(v) > 0.5:
            total = total + jnp.sum(v * 2.0)
        else:
            total = total - jnp.sum(v)
    return total


@case(*MATS)
def for_rows(m):
    acc = m[0] * 0.0
    for row in m:
        acc = acc * 0.5 + jnp.sin(row)
    return jnp.sum(acc)


@case(*MATS)
def for_rows_if(m):
    s = 0.0
    for row in m:
        if jnp.sum(row) > 0.5:
            s = s + jnp.sum(row * row)
        else:
            s = s + jnp.sum(jnp.cos(row))
    return s


@case(*MATS)
def for_rows_continue(m):
    acc = 0.0
    for row in m:
        if row[0] < 0.0:
            continue
        acc = acc + jnp.sum(jnp.tanh(row)) * row[0]
    return acc


# ---------------------------------------------------------------------------
# Nested pairs and triples
# ---------------------------------------------------------------------------
@case(*VECS)
def for_in_for(x):
    s = 0.0
    for i in range(3):
        for j in range(4):
            if x[j] > 0.1 * i:
                s = s + x[j] * i
            else:
                s = s + jnp.sin(x[j])
    return s


@case(*VECS)
def for_in_while(x):
    y = x
    i = 0
    while jnp.sum(y) < 3.0 and i < 6:
        for j in range(3):
            y = y + 0.1 * (j + 1) * jnp.cos(y)
        i = i + 1
    return jnp.sum(y * x)


@case(*VECS)
def while_in_for(x):
    y = x
    for i in range(3):
        j = 0
        while y[i] < 1.0 and j < 4:
            y = y * 1.1 + 0.2
            j = j + 1
    return jnp.sum(y)


@case(*VECS)
def if_in_for_in_while(x):
    y = x
    k = 0
    while k < 3:
        for j in range(4):
            if y[j] > 0.0:
                y = y + 0.1 * jnp.sin(y)
            else:
                y = y * 0.9
        k = k + 1
    return jnp.sum(y * y)


@case(*VECS)
def for_for_inner_break(x):
    s = 0.0
    for i in range(3):
        for j in range(4):
            if x[j] * (i + 1) > 1.0:
                break
            s = s + x[j] * (i + 1)
    return s * s


@case(*MATS)
def rows_range_if_triple(m):
    s = 0.0
    for row in m:
        for j in range(4):
            if row[j] > 0.0:
                s = s + row[j] * row[(j + 1) % 4]
            elif row[j] > -0.3:
                s = s - row[j]
            else:
                s = s + jnp.exp(row[j])
    return s


@case(*VECS)
def nested_early_return(x):
    y = x
    for i in range(3):
        j = 0
        while j < 4:
            y = y + 0.3 * i
            if jnp.sum(y) > 3.5:
                return jnp.sum(jnp.sin(y) * x)
            j = j + 1
    return jnp.sum(y * x)


@case(*VECS)
def while_if_continue_break(x):
    y = x
    i = 0
    while i < 15:
        i = i + 1
        if y[0] < 0.0:
            y = y + 0.5
            continue
        if jnp.sum(y) > 4.0:
            break
        y = y * 1.25
    return jnp.sum(y * x)


# ---------------------------------------------------------------------------
# Closures, helper calls, recursion
# ---------------------------------------------------------------------------
def scale_if_positive(v, c):
    if jnp.sum(v) > 0.0:
        return v * c
    return v - c


def power_rec(x, n):
    """x ** n by recursion on the static int n."""
    if n == 0:
        return x * 0.0 + 1.0
    return x * power_rec(x, n - 1)


def halve_until_small(x):
    """Recursion on a traced condition: cannot terminate under jit (the
    recursion would have to be unrolled without bound), so eager only."""
    if jnp.sum(jnp.abs(x)) < 1.0:
        return jnp.sum(x * x)
    return halve_until_small(x * 0.5) + jnp.sum(jnp.sin(x))


def tree_rec(x, depth):
    """Two recursive calls per level, static depth, traced branch inside."""
    if depth == 0:
        return jnp.sum(jnp.tanh(x))
    if jnp.sum(x) > 0.0:
        y = x * 0.5
    else:
        y = x + 0.5
    return tree_rec(y, depth - 1) + tree_rec(jnp.sin(y), depth - 1)


@case(*VECS)
def closure_in_for(x):
    s = 0.0
    for i in range(3):

        def f(v):
            return jnp.sum(jnp.sin(v * (i + 1)) * x)  # noqa: B023 (called at once)

        s = s + f(x + i)
    return s


@case(*VECS)
def closure_in_while(x):
    y = x
    i = 0
    while jnp.sum(y) < 2.5 and i < 5:

        def step(v):
            return v + 0.2 * jnp.cos(v) * x

        y = step(y)
        i = i + 1
    return jnp.sum(y * y)


@case(*VECS)
def closure_in_if(x):
    if jnp.sum(x) > 0.0:

        def g(v):
            return v * x

        y = g(x * 2.0)
    else:

        def h(v):
            return v + jnp.sin(x)

        y = h(x * 2.0)
    return jnp.sum(y)


@case(*VECS)
def for_tuple_continue(x):
    s = 0.0
    for c in (0.5, -1.0, 2.0):
        if jnp.sum(x) * c < 0.0:
            continue
        s = s + jnp.sum(jnp.sin(x * c))
    return s


@case((XP,), (XN,), (vec(0.1, -0.1, 0.2, -0.1),))
def while_elif_chain(x):
    y = x
    i = 0
    while i < 6:
        if jnp.sum(y) > 1.0:
            y = y * 0.6
        elif jnp.sum(y) > 0.0:
            y = y + jnp.sin(y)
        elif jnp.sum(y) > -1.0:
            y = y - 0.3 * jnp.cos(y)
        else:
            y = jnp.tanh(y) * 2.0
        i = i + 1
    return jnp.sum(y * x)


@case(*VECS)
def return_in_every_branch_in_scan(x):
    y = x
    for i in range(12):  # noqa: B007 (i is read after the loop)
        y = y + 0.1 * jnp.cos(y)
        if jnp.sum(y) > 4.0:
            return jnp.sum(y)
        elif jnp.sum(y) < -4.0:
            return jnp.sum(y * y)
    return jnp.sum(y * x) + i


@case(*VECS)
def lambda_in_loop(x):
    y = x
    for i in range(4):
        f = lambda v: v * (0.5 + 0.25 * i) + x[i]  # noqa: B023
        y = f(y)
    return jnp.sum(jnp.sin(y))


@case(*VECS)
def closure_called_in_loop(x):
    def bump(v):
        if jnp.sum(v) > 1.0:
            return v * 0.5
        return v + jnp.tanh(x)

    y = x
    for _ in range(4):
        y = bump(y)
    return jnp.sum(y * y)


@case(*VECS)
def helper_in_loop(x):
    y = x
    i = 0
    while i < 5:
        y = scale_if_positive(y, 0.7) + 0.1
        i = i + 1
    return jnp.sum(y * x)


@case((XP, 3), (XN, 4), (XM, 1))
def recursion_static_power(x, n):
    return jnp.sum(power_rec(x, n))


@case((XP, 2), (XN, 3), (XM, 2))
def recursion_static_tree(x, depth):
    return tree_rec(x, depth) * 2.0


# Eager only: recursion on a traced condition never terminates under jit.
@case((vec(0.3, 0.1, -0.2, 0.1),), (XP,), (vec(3.0, -2.5, 4.0, 1.0),), graph=False)
def recursion_traced_condition(x):
    return halve_until_small(x)


@case(*VECS)
def loop_var_after_loop(x):
    y = x
    for i in range(6):
        y = y + x[i % 4]
    return jnp.sum(jnp.sin(y)) * i


@case((XP, 2), (XN, 4), (XM, 0))
def while_static_counter_traced_if(x, n):
    y = x
    k = 0
    while k < n:
        if jnp.sum(y) > 0.0:
            y = jnp.sin(y)
        else:
            y = y * y
        k = k + 1
    return jnp.sum(y + x)


@case(*VECS)
def where_and_if_in_loop(x):
    y = x
    for _ in range(10):
        y = jnp.where(y > 0.0, y * 0.9, y * 1.1 + 0.05)
        if jnp.mean(y) > 0.2:
            y = y - 0.1 * jnp.tanh(y)
    return jnp.sum(y * x)


@case(*VECS)
def loops_inside_if(x):
    y = x
    if jnp.sum(x) > -0.5:
        for _ in range(3):
            y = y + 0.2 * jnp.sin(y)
    else:
        k = 0
        while jnp.sum(y) < 1.0 and k < 5:
            y = y * 0.5 + 0.4
            k = k + 1
    return jnp.sum(y * x)


@case(*VECS)
def return_in_loop_in_if(x):
    y = x
    if jnp.sum(x) > -1.5:
        for _ in range(4):
            if jnp.sum(y) > 3.0:
                return jnp.sum(y * y)
            y = y * 1.5 + 0.1
    return jnp.sum(jnp.sin(y))


# ---------------------------------------------------------------------------
# Found by tests/test_fuzz.py (regressions)
# ---------------------------------------------------------------------------
# Each was a mismatch or a crash found by the fuzzer or while writing this
# file; the names say what broke.
REG_M = (
    (jnp.array([[0.5, 0.2], [0.4, -0.6]], jnp.float32),),
    (jnp.array([[-0.5, -0.2], [0.4, 0.9]], jnp.float32),),
)


@case(*REG_M)
def regression_break_in_for_over_rows(m):
    acc = m[0] * 0.0
    for row in m:
        acc = acc + row
        if jnp.sum(acc) > 0.6:
            break
    return jnp.sum(acc)


@case(*REG_M)
def regression_return_in_for_over_rows(m):
    for row in m:
        if jnp.sum(row) > 0.0:
            return jnp.sum(row * row)
    return jnp.sum(m)


@case(*VECS)
def regression_return_in_for_over_tuple(x):
    for c in (1.0, 2.0):
        if jnp.sum(x) * c > 3.0:
            return jnp.sum(x * c)
    return jnp.sum(x)


@case(*VECS)
def regression_def_in_both_branches(x):
    if jnp.sum(x) > 0.0:

        def g(v):
            return v * x

    else:

        def g(v):
            return v + x

    return jnp.sum(g(x))


@case(*VECS)
def regression_break_in_loop_inside_if(x):
    s = x
    if jnp.sum(x) > -1.5:
        for _ in range(2):
            s = s * 2.0
            if jnp.sum(x) > 0.0:
                break
    return jnp.sum(s)


@case(*VECS, (jnp.zeros(3, jnp.float32),))
def regression_while_that_never_runs(x):
    y = x
    t = jnp.tanh(x)
    k = 0
    while jnp.sum(x) > 0.0 and k < 1:
        k = k + 1
        y = t
    return jnp.sum(y)


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------
@pytest.fixture
def restore_mode():
    yield
    kt.set_mode("graph")


def assert_grad_matches(c: Case, kt_grad_fn):
    for args in c.inputs:
        want = jax.grad(c.fn)(*args)
        got = kt_grad_fn(*args)
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL, err_msg=f"{c.name}{args}"
        )


def test_at_least_45_programs():
    assert len(CASES) >= 45


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager(name, restore_mode):
    c = CASES[name]
    kt.set_mode("eager")
    assert_grad_matches(c, kt.GradOperation()(c.fn))


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph(name, restore_mode):
    c = CASES[name]
    kt.set_mode("graph")
    if c.graph:
        assert_grad_matches(c, kt.GradOperation()(c.fn))
        return
    # A recursion whose base case a traced condition chooses: XLA cannot
    # compile it, so k_transform's own compiled call runs it op by op.
    with pytest.warns(UserWarning, match="runs op by op"):
        assert_grad_matches(c, kt.GradOperation()(c.fn))


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_jit(name, restore_mode):
    c = CASES[name]
    kt.set_mode("graph")
    grad_fn = jax.jit(kt.GradOperation()(c.fn), static_argnums=c.static_argnums)
    if not c.graph:  # traced arguments: nothing to run op by op
        with pytest.raises(UnboundedRecursion, match=r"does not end under jax.jit(.|\n)*line"):
            grad_fn(*c.inputs[0])
        return
    want = jax.grad(c.fn)(*c.inputs[0])
    got = grad_fn(*c.inputs[0])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


def test_paths_differ():
    """Sanity check of the table: the inputs of a program give different
    gradients (a cheap proxy for different paths) for most programs."""
    same = []
    for c in CASES.values():
        grads = [np.asarray(jax.grad(c.fn)(*args)) for args in c.inputs]
        if all(g.shape == grads[0].shape and np.allclose(g, grads[0]) for g in grads[1:]):
            same.append(c.name)
    assert not same, same


def test_get_all_through_control(restore_mode):
    for mode in ("eager", "graph"):
        kt.set_mode(mode)
        for args in ((XP, 0.5), (XN, -2.0)):
            got = kt.GradOperation(get_all=True)(if_on_float_arg)(*args)
            want = jax.grad(if_on_float_arg, argnums=(0, 1))(*args)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


X64_CASES = ["for_range_continue", "for_rows_continue", "for_for_inner_break"]


@pytest.mark.parametrize("name", X64_CASES)
def test_graph_float32_inputs_under_x64(name, restore_mode):
    """With x64 on, `s = 0.0` is a weak float64 that one branch of a traced
    `if` keeps while the other makes it float32; the branches join as in
    lax.cond (the weak value takes the other's dtype), jitted and in jvp."""
    c = CASES[name]
    kt.set_mode("graph")
    with jax.enable_x64(True):
        x = jnp.asarray(c.inputs[0][0], jnp.float32)
        want = jax.grad(c.fn)(x)
        got = kt.GradOperation()(c.fn)(x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)
        v = jnp.cos(jnp.arange(x.size, dtype=x.dtype)).reshape(x.shape)
        got_t = kt.jvp(c.fn, x, v)[1]
        want_t = jax.jvp(c.fn, (x,), (v,))[1]
        np.testing.assert_allclose(np.asarray(got_t), np.asarray(want_t), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------
# A 10,000-iteration data-dependent while loop
# ---------------------------------------------------------------------------
LONG_STEPS = 10_000


def long_while(x, stop):
    y = x
    t = stop * 0.0
    while t < stop:
        y = y + 0.001 * jnp.sin(y) * x
        t = t + 1.0
    return jnp.sum(y * y)


def long_scan(x, steps: int):
    def body(y, _):
        return y + 0.001 * jnp.sin(y) * x, None

    y, _ = lax.scan(body, x, None, length=steps)
    return jnp.sum(y * y)


@pytest.mark.parametrize("mode", ["eager", "graph", "user_jit"])
def test_long_while_10000(mode, restore_mode):
    x = vec(0.5, -1.0, 2.0, 0.1)
    stop = jnp.float32(LONG_STEPS)
    want = jax.jit(jax.grad(long_scan), static_argnums=1)(x, LONG_STEPS)
    kt.set_mode("eager" if mode == "eager" else "graph")
    grad_fn = kt.GradOperation()(long_while)
    if mode == "user_jit":
        grad_fn = jax.jit(grad_fn)
    got = grad_fn(x, stop)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
def branch_shape_mismatch(x):
    if jnp.sum(x) > 0.0:  # the branches return arrays of different shapes
        y = x[:2]
    else:
        y = x
    return jnp.sum(y)


def test_branch_shape_mismatch_names_if_and_line(restore_mode):
    kt.set_mode("graph")
    lines, start = inspect.getsourcelines(branch_shape_mismatch)
    line = start + next(i for i, s in enumerate(lines) if s.strip().startswith("if "))
    with pytest.raises(kt.KTransformError) as info:
        kt.GradOperation()(branch_shape_mismatch)(XP)
    message = str(info.value)
    assert "if" in message
    assert "test_grad_control.py" in message
    assert str(line) in message
