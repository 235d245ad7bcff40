"""In-place changes another reference sees (`frontend.mutation`,
`frontend.effects`, `frontend.statements`): a list argument a function
changes (`l *= 2`, in a helper too), an augmented assignment to an item whose
object is shared (`m[0] += [x]` on `[[0.0] * 2] * 3`), a write into a NumPy
array a view of which was taken (`v = a[1:]; a[1] = 5.0`), and their
neighbours (the object reached through a loop, a branch, a helper's result).
Each is modelled (value and gradient equal JAX's on the same program) or
refused: at the call, or run as Python (its numbers Python's: the value, and
the gradient by central differences in float64), and in strict mode a
KTransformError naming the line."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import line_of, strict_refusal

X = 0.7


# -- 1. an argument changed in place: refused at the call ------------------------------------
def _grow(lst):
    lst *= 2


def grows_in_helper(x, lst):
    _grow(lst)
    return sum(lst) * x


def grows_itself(x, lst):
    lst *= 2
    return sum(lst) * x


def bumps_array(x, a):
    a += 1.0
    return jnp.sum(a) * x


def aliased_then_grown(x, lst):
    b = lst
    b *= 2
    return sum(lst) * x


def appends_unless_none(x, acc=None):
    if acc is None:
        acc = []
    acc.append(x)
    return sum(acc) * x


CHANGED = [
    (grows_in_helper, [1.0, 2.0], "lst *= 2"),
    (grows_itself, [1.0, 2.0], "lst *= 2"),
    (bumps_array, np.ones(2), "a += 1.0"),
    (aliased_then_grown, [1.0, 2.0], "b *= 2"),
    (appends_unless_none, [1.0], "acc.append(x)"),
]


@pytest.mark.parametrize("fn, arg, line", CHANGED, ids=[c[0].__name__ for c in CHANGED])
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "jit"])
def test_an_argument_changed_in_place_is_refused_at_the_call(fn, arg, line, api):
    """Python would change the caller's list or array; k_transform computes
    on its own copy, so the call is refused (before, the caller's list was
    left as it was and, through a helper, the value was wrong too)."""
    given = copy.copy(arg)
    with pytest.raises(kt.KTransformError, match="changes its argument") as info:
        getattr(kt, api)(fn)(jnp.asarray(X), given)
    message = str(info.value)
    assert line in message and "test_mutation_gaps.py" in message
    where = _grow if fn is grows_in_helper else fn
    assert f"line {line_of(where, line)}" in message
    np.testing.assert_array_equal(given, arg)  # nothing ran


NESTED = {
    "hessian": kt.hessian,
    "grad of grad": lambda fn: kt.grad(lambda x, lst: kt.grad(fn)(x, lst)),
    "jacrev of grad": lambda fn: kt.jacrev(kt.grad(fn)),
}


@pytest.mark.parametrize("api", NESTED)
def test_a_nested_derivative_of_a_function_changing_its_argument_is_refused(api):
    """The gradient's graph carries its function's changed parameters, so
    a derivative of it (or code calling it) checks them too (before,
    `kt.hessian` and a gradient of a gradient ran, the list unchanged)."""
    given = [1.0, 2.0]
    with pytest.raises(kt.KTransformError, match="changes its argument"):
        NESTED[api](grows_itself)(jnp.asarray(X), given)
    assert given == [1.0, 2.0]


@pytest.mark.parametrize("fn", [grows_in_helper, grows_itself], ids=lambda f: f.__name__)
@pytest.mark.parametrize("arg", [jnp.array([1.0, 2.0]), (1.0, 2.0)], ids=["array", "tuple"])
def test_an_argument_rebound_not_changed_is_modelled(fn, arg):
    """A JAX array or a tuple is rebound by `l *= 2`, as in Python."""
    value, grad = kt.value_and_grad(fn)(jnp.asarray(X), arg)
    ref_value, ref_grad = jax.value_and_grad(fn)(jnp.asarray(X), arg)
    np.testing.assert_allclose([value, grad], [ref_value, ref_grad], rtol=1e-6)
    np.testing.assert_allclose(value, fn(X, arg), rtol=1e-6)


def test_none_for_a_changed_argument_is_modelled():
    value, grad = kt.value_and_grad(appends_unless_none)(jnp.asarray(X))
    np.testing.assert_allclose([value, grad], [X * X, 2 * X], rtol=1e-6)


# -- 2. augmented assignment to a shared item; 3. a write a NumPy view sees ---------------
def rows_repeated(x):
    m = [[0.0] * 2] * 3
    m[0] += [x]
    return sum(m[1]) + len(m[2]) * x


def row_held(x):
    m = [[0.0, 1.0], [2.0, 3.0]]
    row = m[0]
    m[0] += [x]
    return sum(row) * x + len(row)


def rows_times(x):
    m = [[x, 1.0]] * 2
    m[0] *= 2
    return sum(m[1]) * x + len(m[1])


def dict_fromkeys_rows(x):
    d = dict.fromkeys("ab", [])
    d["a"] += [x]
    return sum(d["b"]) * x + len(d["b"])


def list_of_a_list(x):
    m = [[x, 1.0], [2.0, 3.0]]
    c = list(m)
    c[1] += [x]
    return sum(m[1]) * x + len(m[1])


def slice_copy_shares_rows(x):
    m = [[x, 1.0], [2.0, 3.0]]
    c = m[:]
    c[0][0] = x * 5
    return m[0][0] * x + c[0][0]


def shallow_copy_rows(x):
    m = [[x, 1.0], [2.0, 3.0]]
    c = copy.copy(m)
    c[0] += [x]
    return sum(m[0]) * x + len(m[0])


def arrays_repeated(x):
    m = [np.zeros(2)] * 2
    m[0] += 3.0
    return jnp.sum(m[1] * x)


def view_sees_setitem(x):
    a = np.zeros(3)
    v = a[1:]
    a[1] = 5.0
    return jnp.sum(v * x)


def view_sees_iadd(x):
    a = np.zeros(3)
    v = a[1:]
    a += 1
    return jnp.sum(v * x)


def view_sees_out(x):
    a = np.zeros(3)
    v = a[1:]
    np.add(a, 1, out=a)
    return jnp.sum(v * x)


def reshape_sees(x):
    a = np.zeros(4)
    v = a.reshape(2, 2)
    a[0] = 3.0
    return v[0, 0] * x


def transpose_sees(x):
    a = np.zeros((2, 2))
    v = a.T
    a[0, 1] = 3.0
    return v[1, 0] * x


def strided_sees(x):
    a = np.zeros(4)
    v = a[::2]
    a[2] = 3.0
    return jnp.sum(v * x)


def row_view_sees(x):
    a = np.zeros((2, 2))
    v = a[0]
    a[0, 1] = 3.0
    return jnp.sum(v * x)


def view_in_loop(x):
    a = np.zeros(3)
    v = a[1:]
    for i in range(3):
        a[i] = i
    return jnp.sum(v * x)


# neighbours: the array reached through a helper's result, a loop, a branch
def _ones():
    return np.ones(3)


def helper_result_aliased(x):
    r = _ones()
    b = r
    r += 1.0
    return jnp.sum(b * x)


def aliased_after_loop(x):
    a = np.ones(3)
    for _ in range(1000):
        a = a * 1.0
    b = a
    a += 1.0
    return jnp.sum(b * x)


def aliased_after_branch(x):
    a = np.ones(3)
    if x > 0:
        a = a * 2.0
    b = a
    a += 1.0
    return jnp.sum(b * x)


def rows_of_array_in_loop(x):
    m = np.ones((2, 2))
    for row in m:
        row += 1.0
    return jnp.sum(m * x)


def arrays_in_list_loop(x):
    m = [np.ones(2), np.ones(2)]
    for row in m:
        row += 1.0
    return jnp.sum(m[0] * x)


# function, the line the strict refusal names (None: refused for another construct)
SHARED = [
    (rows_repeated, "m[0] += [x]"),
    (row_held, "m[0] += [x]"),
    (rows_times, "m[0] *= 2"),
    (dict_fromkeys_rows, 'd["a"] += [x]'),
    (list_of_a_list, "c[1] += [x]"),
    (slice_copy_shares_rows, "c[0][0] = x * 5"),
    (shallow_copy_rows, None),
    (arrays_repeated, "m[0] += 3.0"),
    (view_sees_setitem, "a[1] = 5.0"),
    (view_sees_iadd, "a += 1"),
    (view_sees_out, "np.add(a, 1, out=a)"),
    (reshape_sees, "a[0] = 3.0"),
    (transpose_sees, "a[0, 1] = 3.0"),
    (strided_sees, "a[2] = 3.0"),
    (row_view_sees, "a[0, 1] = 3.0"),
    (view_in_loop, "a[i] = i"),
    (helper_result_aliased, "r += 1.0"),
    (aliased_after_loop, "a += 1.0"),
    (aliased_after_branch, "a += 1.0"),
    (rows_of_array_in_loop, "row += 1.0"),
    (arrays_in_list_loop, "row += 1.0"),
]
SHARED_IDS = [c[0].__name__ for c in SHARED]


def _python_value_and_grad(fn, x: float):
    """Python's value, and its derivative by central differences in float64
    (each program is at most quadratic in x: exact up to rounding)."""
    eps = 1e-3
    up, down = float(np.sum(fn(x + eps))), float(np.sum(fn(x - eps)))
    return float(np.sum(fn(x))), (up - down) / (2 * eps)


@pytest.mark.parametrize("fn, line", SHARED, ids=SHARED_IDS)
def test_a_change_another_reference_sees_gives_pythons_numbers(fn, line):
    value, grad = kt.value_and_grad(fn)(jnp.asarray(X))
    py_value, fd_grad = _python_value_and_grad(fn, X)
    np.testing.assert_allclose(value, py_value, rtol=1e-6)
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "fn, line", [c for c in SHARED if c[1]], ids=[c[0].__name__ for c in SHARED if c[1]]
)
def test_a_change_another_reference_sees_is_refused_naming_the_line(fn, line):
    message = strict_refusal(fn, jnp.asarray(X))
    assert "test_mutation_gaps.py" in message
    assert f"line {line_of(fn, line)}" in message, message


# -- items of their own: modelled --------------------------------------------------------------
def own_rows_grow(x):
    m = [[x, 1.0], [2.0, 3.0]]
    m[0] += [x]
    return sum(m[0]) * x + len(m[0])


def own_rows_times(x):
    m = [[x, 1.0], [2.0, 3.0]]
    m[0] *= 2
    return sum(m[0]) * x


def own_dict_values_grow(x):
    d = {"a": [x], "b": [1.0]}
    d["a"] += [x * 2]
    return sum(d["a"]) * x + sum(d["b"])


def number_item_grows(x):
    m = [x, 1.0]
    m[0] += x
    return m[0] * x + m[1]


def row_replaced_longer(x):
    m = [[x, 1.0], [2.0, 3.0]]
    m[0] = m[0] + [x]
    return sum(m[0]) * x


def rows_grow_in_loop(x):
    m = [[x], [1.0]]
    for i in range(10):
        m[i % 2] += [x]
    return sum(m[0]) * x + len(m[1])


MODELLED = [
    own_rows_grow,
    own_rows_times,
    own_dict_values_grow,
    number_item_grows,
    row_replaced_longer,
    rows_grow_in_loop,
]


@pytest.mark.parametrize("fn", MODELLED, ids=[f.__name__ for f in MODELLED])
def test_items_of_their_own_are_modelled(fn):
    """Strict mode accepts them (each has a graph); before, a row made longer
    (`m[0] += [x]`) failed in the gradient of the item assignment."""
    kt.set_strict(True)
    try:
        value, grad = kt.value_and_grad(fn)(jnp.asarray(X))
    finally:
        kt.set_strict(False)
    ref_value, ref_grad = jax.value_and_grad(fn)(jnp.asarray(X))
    np.testing.assert_allclose([value, grad], [ref_value, ref_grad], rtol=1e-6)
    py_value, fd_grad = _python_value_and_grad(fn, X)
    np.testing.assert_allclose(value, py_value, rtol=1e-6)
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-3, atol=1e-3)


def _rows_in_a_branching_loop(x, at):
    out = jnp.ones_like(x)
    for i in range(3):
        if x[0] > 0:
            out = at(out, i, jnp.tanh(out[i - 1]), "set")
        else:
            out = at(out, i, 1.0, "add")
    out = at(out, 0, 2.0, "multiply")
    return jnp.sum(out * x)


def array_rows_in_a_branching_loop(x):
    out = jnp.ones_like(x)
    for i in range(3):
        if x[0] > 0:
            out[i] = jnp.tanh(out[i - 1])
        else:
            out[i] += 1.0
    out[0] *= 2.0  # a JAX array's item: rebound, as `out.at[0].multiply(2.0)`
    return jnp.sum(out * x)


def test_an_array_item_after_a_loop_with_branches_is_modelled():
    """The question whether `out[0]` may be a list or a NumPy array follows
    the loop and its branches back to `jnp.ones_like` (it gave up after 8
    levels before, and the function ran as Python, where JAX refuses it)."""
    x = jnp.array([0.3, -0.2, 0.5])
    kt.set_strict(True)
    try:
        value, grad = kt.value_and_grad(array_rows_in_a_branching_loop)(x)
    finally:
        kt.set_strict(False)

    def oracle(x):
        return _rows_in_a_branching_loop(x, lambda a, i, v, op: getattr(a.at[i], op)(v))

    ref_value, ref_grad = jax.value_and_grad(oracle)(x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6)
