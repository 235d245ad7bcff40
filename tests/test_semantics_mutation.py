"""Mutation of lists and arrays keeps Python's meaning, or is refused.

Programs mutate lists (`append`, `extend`, `insert`, `pop`, `lst[k] = v`) and
arrays (`out[i] = v`, `out[a:b] = v`, `out[i] *= v`, `a[i][j] = v`) in straight
code, in unrolled and lax loops and in traced branches. Oracles:

- list programs: `jax.value_and_grad` of the SAME function (Python runs the
  mutation itself);
- array programs: `jax.value_and_grad` of the same program written with
  `out = out.at[i].set(v)` (numpy's in-place meaning, functionally).

Every check runs eagerly (`kt.set_mode("eager")`) and jitted (graph mode).
Aliasing that k_transform cannot follow (another name, a container, a
closure or a caller holding the mutated object) must raise `KTransformError`
naming the mutation and the user's line.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.errors import KTransformError
from tests.refusals import strict_refusal

X4 = jnp.asarray([0.5, -1.2, 0.3, 0.8], jnp.float32)
X12 = jnp.linspace(-1.0, 1.5, 12, dtype=jnp.float32)
M3 = jnp.asarray([[0.5, 0.2, -0.1], [0.4, -0.6, 0.9], [-0.3, 0.8, 0.2]], jnp.float32)


@pytest.fixture(params=["eager", "graph"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def check(fn, oracle, *args):
    value, grad = kt.value_and_grad(fn)(*args)
    want_value, want_grad = jax.value_and_grad(oracle)(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def refused(fn, *args, match):
    with pytest.raises(KTransformError, match=match) as info:
        kt.grad(fn)(*args)
    assert "test_semantics_mutation.py" in str(info.value)
    return str(info.value)


# -- 1. list methods ------------------------------------------------------------
def append_straight(x):
    outs = []
    outs.append(jnp.sin(x))
    outs.append(x * x)
    return jnp.sum(jnp.stack(outs) * x)


def append_short_loop(x):
    outs = []
    for i in range(3):
        outs.append(x * i + jnp.cos(x))
    return jnp.sum(jnp.stack(outs) ** 2)


def append_long_loop(x):  # 12 > UNROLL_LIMIT: a runtime loop, unrolled (list grows)
    outs = []
    for i in range(12):
        outs.append(x[i] * jnp.sin(x[i] + i))
    return jnp.sum(jnp.stack(outs) ** 2)


def append_rows(x):  # for over array rows
    outs = []
    for row in x:
        outs.append(jnp.tanh(row) * row)
    return jnp.sum(jnp.stack(outs))


def append_while_static(x):
    outs = [x[0]]
    i = 1
    while i < 4:
        outs.append(outs[-1] * x[i])
        i += 1
    return jnp.sum(jnp.stack(outs))


def extend_insert_pop(x):
    lst = [x[0], x[1]]
    lst.extend([x[2] * 2.0, jnp.sin(x[3])])
    lst.insert(1, x[0] * x[3])
    lst.insert(-1, x[2] ** 2)
    last = lst.pop()
    first = lst.pop(0)
    lst[1] = lst[1] * 3.0
    return jnp.sum(jnp.stack(lst)) * last + first


def list_setitem_in_loop(x):
    acc = [x[0], x[1]]
    for i in range(12):  # a lax loop carrying the list (its length is kept)
        acc[0] = acc[0] * 0.9 + jnp.sin(x[i % 4]) * acc[1]
    acc[1] = acc[0] * 2.0
    return acc[0] * acc[1]


def list_copy(x):
    a = [x[0], x[1]]
    b = a.copy()
    c = list(a)
    a.append(x[2])
    b.append(x[3] * 2.0)
    c[0] = x[3]
    return jnp.sum(jnp.stack(a)) + jnp.sum(jnp.stack(b)) * jnp.sum(jnp.stack(c))


def pop_value_in_if(x):
    lst = [x[0], x[1], x[2]]
    top = lst.pop()
    if jnp.sum(x) > 0:
        top = top * 2.0
    return top + jnp.sum(jnp.stack(lst))


LIST_PROGRAMS = [
    (append_straight, X4),
    (append_short_loop, X4),
    (append_long_loop, X12),
    (append_rows, X12.reshape(12, 1)),
    (append_while_static, X4),
    (extend_insert_pop, X4),
    (list_setitem_in_loop, X12),
    (list_copy, X4),
    (pop_value_in_if, X4),
    (pop_value_in_if, -X4 - 1.0),
]


@pytest.mark.parametrize(
    "fn, x", LIST_PROGRAMS, ids=[f"{f.__name__}{k}" for k, (f, _) in enumerate(LIST_PROGRAMS)]
)
def test_regression_list_mutation_kept(mode, fn, x):
    check(fn, fn, x)


@pytest.mark.parametrize("fn", [append_straight, extend_insert_pop, list_copy])
def test_regression_list_mutation_second_order(mode, fn):
    """The list rules are differentiable again: Hessians match jax.hessian."""
    np.testing.assert_allclose(kt.hessian(fn)(X4), jax.hessian(fn)(X4), rtol=1e-4, atol=1e-5)


def test_regression_tuple_of_list_differentiable(mode):
    def fn(x):
        lst = [x[0], x[1] * x[2]]
        lst.append(x[3])
        t = tuple(lst)
        return t[0] * t[1] + t[2] ** 2

    check(fn, fn, X4)


def grows_in_traced_while(x):
    outs = []
    s = jnp.sum(x)
    while s < 3.0:
        outs.append(s)
        s = s + 1.0
    return s * len(outs)


def grows_in_traced_if(x):
    outs = [x]
    if jnp.sum(x) > 0:
        outs.append(x * 2.0)
    return jnp.sum(jnp.stack(outs))


def test_regression_list_growth_traced_control(mode):
    """A list whose length depends on traced control: Python's value eagerly,
    a clear error under jit (never a dropped append)."""
    for fn in (grows_in_traced_while, grows_in_traced_if):
        if mode == "eager":
            check(fn, fn, X4)
        else:
            with pytest.raises(KTransformError, match="list") as info:
                kt.grad(fn)(X4)
            assert "test_semantics_mutation.py" in str(info.value)


# -- 2. array item and slice assignment in loops and branches -------------------
def item_in_lax_loop(x):
    out = jnp.zeros(12)
    for i in range(12):
        out[i] = x[i] * x[(i + 1) % 12]
    return jnp.sum(out * jnp.sin(x))


def item_in_lax_loop_at(x):
    out = jnp.zeros(12)
    for i in range(12):
        out = out.at[i].set(x[i] * x[(i + 1) % 12])
    return jnp.sum(out * jnp.sin(x))


def slice_in_if(x):
    out = jnp.ones(4)
    if jnp.sum(x) > 0:
        out[1:3] = x[1:3] * 2.0
    else:
        out[0] = x[3]
    return jnp.sum(out * x)


def slice_in_if_at(x):
    out = jnp.ones(4)
    if jnp.sum(x) > 0:
        out = out.at[1:3].set(x[1:3] * 2.0)
    else:
        out = out.at[0].set(x[3])
    return jnp.sum(out * x)


def augmented_item_in_while(x):
    out = jnp.ones(4)
    i = jnp.zeros((), jnp.int32)
    while jnp.sum(out) < 40.0:
        out[i % 4] *= 1.5 + x[i % 4] ** 2
        i = i + 1
    return jnp.sum(out)


def augmented_item_in_while_at(x):
    out = jnp.ones(4)
    i = jnp.zeros((), jnp.int32)
    while jnp.sum(out) < 40.0:
        out = out.at[i % 4].multiply(1.5 + x[i % 4] ** 2)
        i = i + 1
    return jnp.sum(out)


def nested_item(x):
    a = jnp.zeros((3, 3))
    for i in range(3):
        a[i][i] = x[i, i] * 2.0
        a[i, (i + 1) % 3] = x[i, 0]
    return jnp.sum(a * x)


def nested_item_at(x):
    a = jnp.zeros((3, 3))
    for i in range(3):
        a = a.at[i, i].set(x[i, i] * 2.0)
        a = a.at[i, (i + 1) % 3].set(x[i, 0])
    return jnp.sum(a * x)


def copied_param(x):
    y = x.copy()
    y[0] = jnp.sin(x[1])
    return jnp.sum(y * x)


def copied_param_at(x):
    y = x
    y = y.at[0].set(jnp.sin(x[1]))
    return jnp.sum(y * x)


ARRAY_PROGRAMS = [
    (item_in_lax_loop, item_in_lax_loop_at, X12),
    (slice_in_if, slice_in_if_at, X4),
    (slice_in_if, slice_in_if_at, -X4),
    (augmented_item_in_while, augmented_item_in_while_at, X4),
    (nested_item, nested_item_at, M3),
    (copied_param, copied_param_at, X4),
]


@pytest.mark.parametrize(
    "fn, oracle, x",
    ARRAY_PROGRAMS,
    ids=[f"{f.__name__}{k}" for k, (f, _, _) in enumerate(ARRAY_PROGRAMS)],
)
def test_regression_array_item_assignment_carried(mode, fn, oracle, x):
    check(fn, oracle, x)


# -- 3. aliasing ----------------------------------------------------------------
def alias_array(x):
    out = jnp.zeros(4)
    b = out
    out[0] = x[0]
    return jnp.sum(b * x)


def alias_list(x):
    lst = [x[0]]
    other = lst
    lst.append(x[1])
    return jnp.sum(jnp.stack(other))


def alias_in_container(x):
    lst = [x[0]]
    both = (lst, x)
    lst.append(x[1])
    return jnp.sum(jnp.stack(both[0]))


def alias_in_loop(x):
    rows = []
    row = [x[0]]
    for i in range(2):
        rows.append(row)
        row.append(x[i])
    return jnp.sum(jnp.stack(rows[0]))


def mutates_argument(lst, v):
    lst.append(v)
    return v


def caller_reads_after(x):
    lst = [x[0]]
    mutates_argument(lst, x[1])
    return jnp.sum(jnp.stack(lst))


def identity(v):
    return v


def alias_through_call(x):
    out = jnp.zeros(4)
    b = identity(out)
    out[1] = x[1]
    return jnp.sum(b * x)


def mutate_loop_target(x):
    rows = [[x[0]], [x[1]]]
    for r in rows:
        r.append(x[2])
    return x[0]


def mutate_param(x):
    x[0] = 1.0
    return jnp.sum(x)


def iterate_while_growing(x):
    lst = [x[0]]
    for v in lst:
        lst.append(v)
    return x[0]


def nested_list_item(x):
    row = [x[0], x[1]]
    grid = [row, row]
    grid[0][0] = x[2]
    return grid[1][0]


def nested_dict_item(x):
    out = jnp.zeros(4)
    d = {"k": out}
    d["k"][0] = x[0]
    return jnp.sum(out)


def item_method_call(x):
    rows = [[x[0]], [x[1]]]
    rows[0].append(x[2])
    return jnp.sum(jnp.stack(rows[0]))


@pytest.mark.parametrize(
    "fn, match",
    [
        (alias_array, r"`out\[0\] = \.\.\.` mutates 'out' while another reference"),
        (caller_reads_after, "mutates the argument 'lst'"),
        (alias_through_call, "another reference"),
        (mutate_loop_target, "may be shared"),
        (mutate_param, "mutates the argument 'x'"),
        (iterate_while_growing, "another reference"),
        (nested_list_item, "item of the container"),
        (nested_dict_item, "item of the container"),
    ],
)
def test_regression_mutation_of_aliased_object_refused(mode, fn, match):
    refused(fn, X4, match=match)


@pytest.mark.parametrize(
    "fn, match",
    [
        (alias_list, r"`lst.append\(\.\.\.\)` mutates 'lst' while another reference"),
        (alias_in_container, "another reference"),
        (alias_in_loop, "another reference"),
    ],
)
def test_change_of_a_local_list_seen_through_another_name_runs_as_python(mode, fn, match):
    """Both names are the function's own (a list it made): the parser has
    no model of the second name, so the function runs as Python, exactly
    (was: refused); strict mode still names the change and its line."""
    np.testing.assert_allclose(kt.grad(fn)(X4), jax.grad(fn)(X4), rtol=1e-6)
    assert re.search(match, strict_refusal(fn, X4))


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_in_place_method_call_on_an_item_runs_as_python(mode):
    """`rows[0].append(v)`: the parser has no model of it, so the function
    runs as Python under JAX's tracer (`frontend/python_code.py`), as JAX runs it."""
    from k_transform.frontend import python_code

    kt.set_mode(mode)
    try:
        got = kt.grad(item_method_call)(X4)
    finally:
        kt.set_mode("graph")
    np.testing.assert_allclose(got, jax.grad(item_method_call)(X4), rtol=1e-6)
    assert "on an item" in str(python_code.reason(item_method_call))


def test_regression_alias_after_last_mutation_is_fine(mode):
    def fn(x):
        out = jnp.zeros(4)
        out[2] = x[2] * x[0]
        b = out
        return jnp.sum(b * x)

    def oracle(x):
        out = jnp.zeros(4).at[2].set(x[2] * x[0])
        return jnp.sum(out * x)

    check(fn, oracle, X4)


# -- 4. mutation from a nested def or lambda ------------------------------------
def closure_appends(x):
    acc = []

    def add(v):
        acc.append(v)

    add(x[0])
    return jnp.sum(jnp.stack(acc))


def closure_sets_item(x):
    out = jnp.zeros(4)

    def put(i, v):
        out[i] = v
        return v

    put(0, x[0])
    return jnp.sum(out)


def lambda_appends(x):
    acc = [x[1]]
    f = lambda v: acc.append(v)  # noqa: E731
    f(x[0])
    return jnp.sum(jnp.stack(acc))


GLOBAL_LIST = []


def global_append(x):
    GLOBAL_LIST.append(x)
    return jnp.sum(x)


def test_regression_mutation_of_a_global_refused(mode):
    refused(global_append, X4, match="a global of the module")
    assert GLOBAL_LIST == []


@pytest.mark.parametrize("fn", [closure_appends, lambda_appends])
def test_nested_def_changing_the_functions_list_runs_as_python(mode, fn):
    """A def or lambda nested in the function appending to its list (the
    "emit" idiom): the parser has no model of the change, so the function
    runs as Python, exactly (was: refused as a change outside the function)."""
    np.testing.assert_allclose(kt.grad(fn)(X4), jax.grad(fn)(X4), rtol=1e-6)
    assert "a variable of an enclosing function in" in strict_refusal(fn, X4)


def test_nested_def_setting_an_item_of_the_functions_array_raises_as_python(mode):
    # Run as Python, JAX's array refuses item assignment (TypeError), as
    # Python with JAX does; the message names the line.
    with pytest.raises(TypeError, match="immutable") as info:
        kt.grad(closure_sets_item)(X4)
    assert "out[i] = v" in "\n".join(getattr(info.value, "__notes__", []))


def test_regression_closure_reads_mutated_list(mode):
    """A closure called after a mutation sees it (Python reads at call time)."""

    def fn(x):
        acc = [x[0]]

        def total():
            return jnp.sum(jnp.stack(acc))

        acc.append(x[1] * 3.0)
        return total() * x[2]

    check(fn, fn, X4)


# -- 5. refused in-place methods ------------------------------------------------
def sort_in_place(x):
    lst = [x[1], x[0]]
    lst.sort()
    return lst[0]


def sort_by_key_in_place(x):
    pairs = [(3, x[0]), (1, x[1]), (2, x[2])]
    pairs.sort(key=lambda p: p[0])
    return sum(i * v**2 for i, v in pairs)


@pytest.mark.parametrize("fn", [sort_in_place, sort_by_key_in_place])
def test_in_place_sort_of_the_functions_list_runs_as_python(mode, fn):
    """The parser has no model of `lst.sort()`: the function runs as Python,
    exactly (was: refused); strict mode names it."""
    np.testing.assert_allclose(kt.grad(fn)(X4), jax.grad(fn)(X4), rtol=1e-6)
    assert re.search(r"in-place method call `(lst|pairs).sort\(", strict_refusal(fn, X4))


def test_regression_library_functions_named_like_list_methods():
    """`jnp.append(x, v)`, `np.sort(x)`, `jnp.insert` are functions, not mutations
    of a module (checked by the round trip: they have no gradient rule)."""

    def fn(x):
        y = jnp.append(x, x[0] * 2.0)
        y = jnp.insert(y, 1, x[2])
        return np.sort(np.asarray([3.0, 1.0])) * jnp.sum(y)

    np.testing.assert_allclose(kt.compile(fn)(X4), fn(X4), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(kt.compile(fn))(X4), fn(X4), rtol=1e-6)


def alias_then_list_augassign(x):
    lst = [x[0]]
    other = lst
    lst += [x[1]]
    return jnp.sum(jnp.stack(other))


def alias_then_list_augassign_var(x):
    lst = [x[0]]
    more = [x[1], x[2]]
    other = lst
    lst += more
    return jnp.sum(jnp.stack(other))


@pytest.mark.parametrize("fn", [alias_then_list_augassign, alias_then_list_augassign_var])
def test_regression_list_augmented_assignment_is_mutation(mode, fn):
    refused(fn, X4, match=r"`lst \+= \.\.\.` \(a list extended in place\) mutates 'lst'")


def test_regression_list_augmented_assignment_unaliased(mode):
    def fn(x):
        lst = [x[0]]
        for i in range(3):
            lst += [x[i + 1] * lst[-1]]
        return jnp.sum(jnp.stack(lst))

    check(fn, fn, X4)
