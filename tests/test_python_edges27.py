"""Python's meaning at the edges found in session 26, each checked against
Python itself (the exception's type and message, the prints in order) or
JAX's numbers:

1. `kt.jvp` / `kt.hvp` inside transformed code given a function's inputs as
   one tuple-valued variable, the function having defaults (`BindInputs`);
2. `zip(..., strict=True)` of unequal lengths in a `for`: the body runs for
   the items that pair up, then ValueError (not before the loop);
3. `f(*seq)` with too few or too many items: Python's TypeError;
4. a `while` counter bounding a slice where the loop runs under `lax`;
5. None carried into a loop whose `break` is traced;
6. the refusal of a Hessian of a function changing its argument in place
   names the user's function;
7. `enumerate` / `zip` of unbounded iterators (`itertools.count()`) stop
   where Python stops.
"""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.refusals import line_of

Q = jnp.array([0.0, 1.1, 2.3, 2.9])
V = jnp.array([1.0, 0.5, -0.2, 0.3])
A, B = jnp.array([1.0, 2.0]), jnp.array([0.3, 0.4])
VA, VB = jnp.array([1.0, -1.0]), jnp.array([0.5, 0.1])


def close(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


# -- 1. kt.jvp / kt.hvp given the inputs as one variable -----------------------------------
def energy(q, k=3.0):
    return 0.5 * k * jnp.sum(jnp.sin(q) * q)


def two(a, b, k=3.0):
    return k * jnp.sum(a * jnp.cos(b))


def jvp_energy(xs, vs):
    return kt.jvp(energy, xs, vs)[1]


def jvp_two(xs, vs):
    return kt.jvp(two, xs, vs)[1]


def hvp_energy(xs, v):
    return kt.hvp(energy, xs, v)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@pytest.mark.parametrize(
    "xs, vs",
    [((Q, 2.0), (V, 0.0)), ([Q, 2.0], [V, 0.0]), ((Q,), (V,)), (Q, V)],
    ids=["tuple-all", "list-all", "one-tuple", "lone"],
)
def test_jvp_of_a_function_with_defaults_given_a_tuple_variable(xs, vs):
    """Before: the tuple holding all parameters was refused when run ("takes
    1 input but inputs holds 2 values"); writing it out worked."""
    want = jax.jvp(energy, _as_tuple(xs), _as_tuple(vs))[1]
    close(kt.jit(jvp_energy)(xs, vs), want)


def test_jvp_with_two_required_parameters_given_a_tuple_variable():
    """Refused while parsing before (how many values the variable holds shows only when run)."""
    step = kt.jit(jvp_two)
    close(step((A, B), (VA, VB)), jax.jvp(two, (A, B), (VA, VB))[1])
    close(step((A, B, 2.0), (VA, VB, 1.0)), jax.jvp(two, (A, B, 2.0), (VA, VB, 1.0))[1])


def test_gradients_through_the_bound_inputs_and_tangents():
    """BindInputs' rule (and its gradient's, at second order) against JAX."""
    xs, vs = (Q, 2.0), (V, 0.0)
    for k in (0, 1):
        want = jax.grad(lambda xs, vs: jax.jvp(energy, xs, vs)[1], argnums=k)(xs, vs)
        close(kt.grad(jvp_energy, grad_position=k)(xs, vs), want)

    def inner(q):
        return jnp.sum(kt.grad(lambda q2: jvp_energy(q2, V))(q))

    want = jax.grad(lambda q: jnp.sum(jax.grad(lambda q2: jax.jvp(energy, (q2,), (V,))[1])(q)))
    close(kt.grad(inner)(Q), want(Q))


def test_hvp_given_a_tuple_variable():
    close(kt.jit(hvp_energy)((Q, 2.0), V), kt.hvp(energy, (Q, 2.0), V))


@pytest.mark.parametrize(
    "fn, xs, vs, message",
    [
        (jvp_energy, (Q, 2.0, 1.0), (V, 0.0, 0.0), "takes 1 to 2 inputs but inputs holds 3"),
        (jvp_two, (A,), (VA,), "takes 2 to 3 inputs but inputs holds 1"),
        (jvp_energy, (Q, 2.0), (V,), "the tangents must have the inputs' structure"),
    ],
)
def test_inputs_of_the_wrong_count_are_refused_when_run(fn, xs, vs, message):
    with pytest.raises(kt.KTransformError, match=re.escape(message)):
        kt.jit(fn)(xs, vs)


# -- 2. zip(strict=True): the loop's effects, then Python's ValueError -------------------------
def zip_printing(x, a, b):
    s = 0.0
    for p, q in zip(a, b, strict=True):
        print("pair", p)
        s = s + p * q * x
    return s


def enumerate_zip_printing(x, a, b):
    s = 0.0
    for i, (p, q) in enumerate(zip(a, b, strict=True)):
        print("item", i)
        s = s + p * q * x
    return s


def zip_breaking(x, a, b):
    s = 0.0
    for p, q in zip(a, b, strict=True):
        s = s + p * q * x
        if s > 2.5:
            break
    return s


def python_run(fn, *args):
    """What Python prints and raises running `fn(*args)`."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            fn(*args)
            error = None
        except Exception as e:  # noqa: BLE001 -- compared with ours
            error = (type(e), str(e))
    return out.getvalue(), error


@pytest.mark.parametrize("fn", [zip_printing, enumerate_zip_printing])
@pytest.mark.parametrize("api", ["grad", "jit"])
def test_zip_strict_prints_the_pairs_then_raises(fn, api, capsys):
    """Before: the ValueError came before the loop ran; its prints were dropped."""
    args = (1.0, [1.0, 2.0, 3.0], [1.0, 1.0])
    printed, (kind, message) = python_run(fn, *args)
    assert printed.count("\n") == 2
    with pytest.raises(kind, match=re.escape(message)):
        getattr(kt, api)(fn)(*args)
    assert capsys.readouterr().out == printed


def test_zip_strict_that_breaks_first_does_not_raise():
    """Python raises only when the shorter iterable ends the loop; a traced
    `break` (under kt.jit) decides when the program runs."""
    a, b = [1.0, 2.0, 3.0], [1.0, 1.0]
    step = kt.jit(zip_breaking)
    assert float(step(1.0, a, b)) == zip_breaking(1.0, a, b) == 3.0
    np.testing.assert_allclose(kt.grad(zip_breaking)(1.0, a, b), 3.0)
    with pytest.raises(ValueError, match="zip\\(\\) argument 2 is shorter than argument 1"):
        step(0.5, a, b)


# -- 3. f(*seq) with the wrong number of items -----------------------------------------------
def three(a, b, c):
    return a * b + c


def defaulted(a, b=1.0, c=2.0):
    return a * b + c


def star_three(x, seq):
    return three(*seq)


def star_three_after_x(x, seq):
    return three(x, *seq)


def star_defaulted(x, seq):
    return defaulted(x, *seq)


@pytest.mark.parametrize(
    "fn, seq",
    [
        (star_three, (2.0, 3.0)),
        (star_three, (1.0, 2.0, 3.0, 4.0)),
        (star_three_after_x, ()),
        (star_three_after_x, [1.0, 2.0, 3.0]),
        (star_defaulted, (1.0, 2.0, 3.0)),
    ],
)
def test_star_arguments_of_the_wrong_count_raise_pythons_type_error(fn, seq):
    """Before: an AssertionError from our own length check."""
    with pytest.raises(TypeError) as python:
        fn(2.0, seq)
    with pytest.raises(TypeError, match=re.escape(str(python.value))):
        kt.grad(fn)(2.0, seq)


def test_star_arguments_of_the_right_count_still_run():
    assert kt.grad(star_defaulted)(2.0, (3.0,)) == 3.0
    assert kt.grad(star_three_after_x)(2.0, (3.0, 1.0)) == 3.0


# -- 4. a while counter bounding a slice -----------------------------------------------------
def counted_slices(x):
    n = 3
    i = 0
    s = 0.0
    while i < n:
        y = x[:i]
        s = s + jnp.sum(y)
        i = i + 1
    return s


def slices_until_large(x):
    i = 0
    s = 0.0
    while s < 5.0:
        y = x[:i]
        s = s + jnp.sum(y) + 1.0
        i = i + 1
    return s


def slices_until_break(x):
    i = 0
    s = 0.0
    while i < 4:
        y = x[:i]
        s = s + jnp.sum(y)
        if s > 2.0:
            break
        i = i + 1
    return s


def test_a_python_counter_bounding_a_slice_works():
    x = jnp.arange(4.0)
    close(kt.grad(counted_slices)(x), jax.grad(counted_slices)(x))


@pytest.mark.parametrize("fn", [slices_until_large, slices_until_break])
def test_a_counter_traced_by_the_loop_is_refused_naming_the_lines(fn):
    """The test (or a `break`) is traced, so the loop runs under `lax` and
    `i` is traced: JAX's bare IndexError before; now a KTransformError
    naming the `while` and, in a note, the slice's line."""
    with pytest.raises(kt.KTransformError, match="needs a value the loop changes") as info:
        kt.grad(fn)(jnp.arange(4.0))
    assert f"line {line_of(fn, 'while ')}" in str(info.value)
    notes = "".join(getattr(info.value, "__notes__", ()))
    assert f"line {line_of(fn, 'y = x[:i]')}" in notes


# -- 5. None carried into a loop whose break is traced, or out of a traced `if` ---------------
def first_above_for(xs):
    best = None
    for x in xs:
        if x > 1.0:
            best = x
            break
    return best * 2.0


def first_above_while(x):
    best = None
    i = 0
    while i < 5:
        if x * i > 1.0:
            best = x * i
            break
        i += 1
    return best * 2.0


def none_unless_large(x):
    best = None
    if x > 1.0:
        best = x
    if best is None:
        return x * 3.0
    return best * 2.0


def none_until_found(x):
    best = None
    i = 0
    while x * i < 1.0:
        best = x * i
        i += 1
    return best


@pytest.mark.parametrize(
    "fn, arg, head",
    [
        (first_above_for, jnp.linspace(0.0, 3.0, 40), "if x > 1.0"),
        (first_above_while, 0.6, "if x * i > 1.0"),
        (none_unless_large, 0.5, "if x > 1.0"),
    ],
)
def test_none_or_an_array_by_a_traced_test_is_refused_naming_the_line(fn, arg, head):
    """Before: a bare ValueError (`while`), "loop variable 1" (`for`), and
    for `none_unless_large` a silent wrong gradient, 0.0 for Python's 3.0
    (K of the traced `if` took None for zeros, so `best is None` was False)."""
    with pytest.raises(kt.KTransformError, match="give None in one and an array") as info:
        kt.grad(fn)(arg)
    assert f"line {line_of(fn, head)}" in str(info.value)


def test_none_carried_into_a_traced_loop_is_refused_naming_the_variable():
    with pytest.raises(kt.KTransformError, match="loop variable 'best' is None") as info:
        kt.grad(none_until_found)(0.3)
    assert f"line {line_of(none_until_found, 'while x')}" in str(info.value)


# -- 6. the Hessian's refusal names the user's function --------------------------------------
def doubles_its_argument(x, acc):
    acc *= 2
    return jnp.sum(x**3) + jnp.sum(jnp.asarray(acc))


@pytest.mark.parametrize("api", [kt.hessian, lambda f: kt.grad(kt.grad(f))])
def test_a_nested_derivative_refusal_names_the_users_function(api):
    with pytest.raises(kt.KTransformError, match="changes its argument") as info:
        api(doubles_its_argument)(jnp.array(1.0), np.ones(2))
    message = str(info.value)
    assert message.startswith("doubles_its_argument(...)") and "_grad" not in message
    assert f"line {line_of(doubles_its_argument, 'acc *= 2')}" in message


# -- 7. enumerate / zip of unbounded iterators -----------------------------------------------
def enumerate_count(x):
    total = 0.0
    for i, c in enumerate(itertools.count(3), start=1):
        if i > 3:
            break
        total = total + x[i - 1] * c
    return total


def zip_counts(x):
    total = 0.0
    for i, j in zip(itertools.count(), itertools.count(1)):
        if i >= 2:
            break
        total = total + x[i] * j
    return total


def enumerate_count_traced_break(x):
    total = 0.0
    for _i, _c in enumerate(itertools.count()):
        total = total + x
        if total > 3.0:
            break
    return total


@pytest.mark.parametrize("fn", [enumerate_count, zip_counts])
def test_unbounded_iterators_stop_where_python_stops(fn):
    """Before: enumerate (or a zip of iterators only) took its iterator
    whole, a KTransformError past 1,000,000 items."""
    x = jnp.array([-1.0, 0.5, 2.0])
    close(kt.grad(fn)(x), jax.grad(fn)(x))
    close(kt.jit(kt.grad(fn))(x), jax.grad(fn)(x))


def test_an_unbounded_iterator_with_a_traced_break_is_refused_clearly():
    assert kt.grad(enumerate_count_traced_break)(1.0) == 4.0  # the break is concrete here
    with pytest.raises(kt.KTransformError, match="a `break` whose test is traced") as info:
        kt.jit(enumerate_count_traced_break)(1.0)
    assert f"line {line_of(enumerate_count_traced_break, 'for _i')}" in str(info.value)
