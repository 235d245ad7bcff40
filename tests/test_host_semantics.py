"""Python's meaning of host values the parser reads: containers changed in
place between calls (`frontend.guards`), a global rebound by a helper during
the call, generator expressions, `float`/`bool`/`any`/`all` of traced values,
`iter`/`next`, `dataclasses.replace`. Supported cases give Python's value and
JAX's gradient; refused ones (strict mode) a KTransformError naming the line.
"""

import dataclasses
import inspect
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.frontend import guards, parser
from tests.refusals import line_of, strict_refusal

X = jnp.array(0.7)
V = jnp.array([0.5, -1.0, 2.0])


def close(got, want):
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), got, want
    )


def same_as_jax(fn, x):
    close(kt.value_and_grad(fn)(x), jax.value_and_grad(fn)(x))


def refused_at(fn, x, text: str, needle: str, where=None):
    """Strict mode refuses `fn` with a message holding `text`, naming the line
    of `fn` (or of `where`) holding `needle`."""
    message = strict_refusal(fn, x)
    assert text in message
    assert "test_host_semantics.py" in message
    assert f"line {line_of(where or fn, needle)}" in message


# -- containers changed in place between calls ---------------------------------------------
GL_DICT = {"w": 1.0, "nested": {"b": [1.0, 2.0]}}
GL_LIST = [1.0, np.array([1.0, 2.0])]
GL_SET = {1.0}


def reads_dict(x):
    return x * GL_DICT["w"] + x * GL_DICT["nested"]["b"][1]


def reads_list(x):
    return x * GL_LIST[0] + x * jnp.sum(GL_LIST[1])


def reads_set(x):
    return x * len(GL_SET)


def make_closure():
    k = [1.0]

    def g(x):
        return x * k[0]

    return g, k


@pytest.mark.parametrize("fresh", [False, True], ids=["same_object", "fresh_transform"])
def test_containers_changed_between_calls_are_seen(mode, fresh):
    g, k = make_closure()
    fns = (reads_dict, reads_list, reads_set, g)
    made = [kt.value_and_grad(f) for f in fns]
    for m in made:
        m(X)
    try:
        GL_DICT["w"] = 4.0
        GL_DICT["nested"]["b"].append(5.0)
        GL_DICT["nested"]["b"][1] = 3.0
        GL_LIST[0] = -2.0
        GL_LIST[1][0] = 10.0  # an array inside a list, changed in place
        GL_SET.add(2.0)
        k[0] = 4.0
        for fn, m in zip(fns, made, strict=True):
            got = kt.value_and_grad(fn)(X) if fresh else m(X)
            close(got, jax.value_and_grad(fn)(X))
    finally:
        GL_DICT.update(w=1.0, nested={"b": [1.0, 2.0]})
        GL_LIST[:] = [1.0, np.array([1.0, 2.0])]
        GL_SET.clear()
        GL_SET.add(1.0)


def test_a_zero_changing_sign_in_a_list_is_seen():
    signs = [0.0]

    def f(x):
        return x / signs[0]

    before = kt.value_and_grad(f)(X)
    signs[0] = -0.0
    assert np.signbit(kt.value_and_grad(f)(X)[0]) != np.signbit(before[0])


def test_guard_check_of_unchanged_containers_is_cheap():
    big = [float(i) for i in range(1000)]
    small = {"a": 1.0, "b": [1.0, 2.0]}

    def f(x):
        return x * big[3] + x * small["b"][1]

    checks = guards.guards_of(parser.parse(f))
    assert not guards.stale(checks)
    start = time.perf_counter()
    for _ in range(200):
        guards.stale(checks)
    per_call = (time.perf_counter() - start) / 200
    assert per_call < 5e-4  # some 20 us for a thousand floats
    big[999] = 1.5
    assert guards.stale(checks)


# -- a global rebound during the call -------------------------------------------------------
SCALE = 2.0


def _bump():
    global SCALE
    SCALE = SCALE + 1.0


def reads_after_rebinding(x):
    a = x * SCALE
    _bump()
    b = x * SCALE
    return a + b * 10


def test_global_rebound_by_a_helper_is_read_again(mode):
    global SCALE
    SCALE = 2.0
    want = jax.value_and_grad(reads_after_rebinding)(X)
    SCALE = 2.0
    close(kt.value_and_grad(reads_after_rebinding)(X), want)
    assert SCALE == 3.0
    SCALE = 2.0


def test_global_rebound_by_a_helper_is_refused_where_it_is_called():
    """The parser refuses the reader (which then runs as Python), naming the
    helper's call; in strict mode the helper's `global` is refused first."""
    with pytest.raises(kt.KTransformError, match="'SCALE'.*_bump") as info:
        parser.parse(reads_after_rebinding)
    lines, first = inspect.getsourcelines(reads_after_rebinding)
    assert f"line {first + 2}" in str(info.value)
    refused_at(reads_after_rebinding, X, "`global`", "global SCALE", where=_bump)


# -- generator expressions ------------------------------------------------------------------
def gen_twice(x):
    g = (v * v for v in [x[0], x[1], x[2]])
    a = sum(g)
    b = sum(g)
    return a + 10 * b


def gen_lazy(x):
    a = [x[0], x[0] * 2]
    g = (v * 3 for v in a)
    a[1] = x[0] * 100
    return sum(g)


def any_short_circuit(x):
    g = (v > 0 for v in [1.0, 2.0, -1.0])
    a = any(g)
    return x[0] * a + x[0] * sum(1 for _ in g) * 10


def gen_consumed_at_once(x):
    a = sum(v * v for v in [x[0], x[1]])
    b = max(v * 2 for v in [x[0], x[2]])
    c = tuple(v + 1 for v in [x[1], x[2]])
    d = min(list(v for v in [x[0], x[2]]))
    return a + b + c[0] * c[1] + d


@pytest.mark.parametrize("fn", [gen_twice, gen_lazy, any_short_circuit, gen_consumed_at_once])
def test_generator_expressions_are_pythons(mode, fn):
    same_as_jax(fn, V)


@pytest.mark.parametrize(
    "fn, needle", [(gen_twice, "g = ("), (gen_lazy, "g = ("), (any_short_circuit, "g = (")]
)
def test_generator_expressions_not_consumed_at_once_are_refused(fn, needle):
    refused_at(fn, V, "generator expression", needle)


def _loud(v):
    print("item", v)
    return v > 0


def _quiet(v):
    return v > 0


def any_runs_host_code(x):
    return x[0] * any(_loud(v) for v in [x[0], x[1]])


def any_calls_a_helper(x):
    return x[0] * any(_quiet(v) for v in [x[0], x[1]]) + x[1] * all(_quiet(v) for v in x)


def test_any_of_a_generator_running_host_code_is_refused():
    refused_at(any_runs_host_code, V, "any()", "any(")


def test_any_of_a_generator_calling_a_helper_is_pythons(mode):
    same_as_jax(any_calls_a_helper, V)
    same_as_jax(any_calls_a_helper, -V)


# -- float, bool, any and all of traced values ----------------------------------------------
def float_of_traced(x):
    return float(x) * x


def float_of_shape(x):
    return x * float(x.shape[0])


def test_float_of_a_traced_value_is_refused():
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.value_and_grad(float_of_traced)(X)
    refused_at(float_of_traced, X, "float()", "float(x)")
    with pytest.raises(kt.KTransformError):
        kt.value_and_grad(float_of_traced)(X)


def test_float_of_a_static_value_is_pythons(mode):
    close(kt.grad(lambda v: jnp.sum(float_of_shape(v)))(V), jnp.full(3, 3.0))


def bool_if(x):
    if bool(x > 0.5):
        return x * 2
    return x


def bool_value(x):
    return x * bool(x > 0.5) + bool(0.0) + bool([1])


@pytest.mark.parametrize("fn", [bool_if, bool_value])
@pytest.mark.parametrize("x", [0.7, 0.2])
def test_bool_of_a_traced_test_is_the_plain_test(mode, fn, x):
    same_as_jax(fn, jnp.array(x))


def any_all_of_constants(x):
    flags = [v > 0 for v in [1.0, -1.0]]
    return x[0] * any(flags) + x[1] * all(flags) * 10


def any_all_traced(x):
    a = any(v > 1.0 for v in [x[0], x[1], x[2]])
    b = all([x[0] > 0, x[2] > 0])
    if any(v < -0.5 for v in [x[0], x[1]]):
        a = a + 1.0
    return x[0] * a + x[2] * b


@pytest.mark.parametrize("fn", [any_all_of_constants, any_all_traced])
def test_any_and_all_are_pythons(mode, fn):
    same_as_jax(fn, V)
    same_as_jax(fn, -V)


def test_jvp_through_a_product_with_any_of_constants(mode):
    t = jnp.ones(3)
    close(kt.jvp(any_all_of_constants, V, t), jax.jvp(any_all_of_constants, (V,), (t,)))


# -- iter/next and dataclasses.replace --------------------------------------------------------
def iter_next(x):
    it = iter([x, x * 2])
    a = next(it)
    return a + 2 * next(it) + next(it, 5.0)


def test_iter_next_runs_as_python(mode):
    same_as_jax(iter_next, X)


def test_iter_next_is_refused_naming_next_in_strict_mode():
    refused_at(iter_next, X, "iter(...)", "it = iter(")


@dataclasses.dataclass
class Cfg:
    a: float = 1.0


def dc_replace(x):
    c = Cfg(a=2.0)
    c2 = dataclasses.replace(c, a=5.0)
    return x * c.a + x * c2.a


def test_dataclasses_replace_builds_a_new_instance(mode):
    same_as_jax(dc_replace, X)
