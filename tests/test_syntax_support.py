"""Python constructs common in model code (MindSpore graph-mode syntax), kept
with Python's semantics: comprehensions, iteration builtins, starred
assignment and unpacking, `*args`/`**kwargs`/keyword-only parameters,
keyword arguments to gradient functions, `jnp.cumsum` without an axis.

Each program is checked against JAX as the oracle (its value as plain
Python, its gradient with `jax.grad` of the same function), eagerly and
jitted. Constructs whose semantics cannot be kept raise `KTransformError`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

MODES = ("eager", "graph")


@pytest.fixture(params=MODES)
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def close(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), (a, b)
    for u, v in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


def check(fn, *args, argnums=0):
    """Value as plain Python and gradient as `jax.grad`, in the current mode."""
    close(kt.compile(fn)(*args), fn(*args))
    close(kt.grad(fn, grad_position=argnums)(*args), jax.grad(fn, argnums=argnums)(*args))


X = jnp.array([[0.5, -1.0], [2.0, 0.3], [-0.7, 1.5]])
LONG = jnp.arange(24.0).reshape(12, 2) / 10.0  # more rows than the unroll limit


# -- comprehensions ------------------------------------------------------------------
def stack_of_rows(x):
    return jnp.sum(jnp.stack([jnp.sin(r) * r for r in x]) ** 2)


def weighted_sum(x, xs, ws):
    return x * sum(a * b for a, b in zip(xs, ws, strict=False))  # stops at the shortest


def doubled_dict(x):
    d = {"a": x, "b": x * x}
    e = {k: v * 2.0 for k, v in d.items()}
    return e["a"] * e["b"]


def doubled_dict_arg(x, d):
    e = {k: v * x for k, v in d.items()}
    return e["p"] + 3.0 * e["q"]


def nested_filtered(x):
    ys = [x * i for i in range(5) if i % 2 == 0]
    zs = [a * b for a in ys for b in (1.0, 2.0) if b > 1.5]
    return sum(zs) + len(ys)


def comprehension_scope(x):
    r = x * 3.0
    total = sum(r * r for r in (x, 2.0 * x))
    return total + r  # `r` is still the outer one (Python 3 scope)


def comprehension_in_loop(x):
    acc = 0.0
    for k in range(3):
        acc = acc + sum([jnp.sum(r) * k for r in x])
    return acc


@pytest.mark.parametrize("fn", [stack_of_rows, comprehension_in_loop])
def test_regression_comprehension_over_array_rows(mode, fn):
    check(fn, X)
    check(fn, LONG)


def test_regression_generator_in_call_zip_shortest(mode):
    check(weighted_sum, 2.0, (1.0, 2.0, 3.0), (4.0, 5.0), argnums=(0, 1, 2))


def test_regression_dict_comprehension(mode):
    check(doubled_dict, 1.5)
    check(doubled_dict_arg, 1.5, {"p": 2.0, "q": -1.0}, argnums=(0, 1))


def test_regression_nested_comprehension_static_filter(mode):
    check(nested_filtered, 1.5)


def test_regression_comprehension_variables_do_not_leak(mode):
    check(comprehension_scope, 1.5)
    check(comprehension_in_loop, X)


def traced_filter(x):
    return sum([v for v in x if v > 0.0])


def test_regression_traced_filter_eager_or_refused():
    x = jnp.array([1.0, -2.0, 3.0])
    kt.set_mode("eager")  # concrete: the filter is Python's
    close(kt.grad(traced_filter)(x), jax.grad(traced_filter)(x))
    kt.set_mode("graph")  # traced: the list's length would depend on data
    with pytest.raises(kt.KTransformError):
        kt.grad(traced_filter)(x)


def second_order(x):
    ys = [jnp.sin(r) * r for r in reversed(x)]
    return sum(jnp.sum(y) for y in ys) + jnp.sum(jnp.stack(ys) ** 3)


def test_regression_comprehension_second_order(mode):
    close(kt.hessian(second_order)(X), jax.hessian(second_order)(X))
    v = jnp.ones_like(X)
    close(kt.jvp(second_order, X, v), jax.jvp(second_order, (X,), (v,)))


# -- iteration builtins ----------------------------------------------------------------
def enumerate_reversed(x):
    s = 0.0
    for i, r in enumerate(reversed(x), start=1):
        s = s + i * jnp.sum(r * r)
    return s


def zip_loop(x, xs):
    s = 0.0
    for a, (k, b) in zip(xs, enumerate(x), strict=False):
        s = s + a * k * jnp.sum(b)
    return s


def items_loop(x):
    d = {"u": x, "v": 2.0 * x}
    s = 0.0
    for k, v in d.items():
        s = s + v * len(k)
    for k in d:
        s = s + d[k]
    return s


def ranges(x, n):
    return sum(x * i for i in range(1, 7, 2)) + sum([x for _ in range(n)])


def test_regression_enumerate_reversed(mode):
    check(enumerate_reversed, X)
    check(enumerate_reversed, LONG)


def test_regression_zip_enumerate_loop(mode):
    check(zip_loop, X, (1.0, 2.0), argnums=(0, 1))


def test_regression_dict_items_loop(mode):
    check(items_loop, 1.5)


def test_regression_range_static_args(mode):
    check(ranges, 1.5, 3)


def scalar_builtins(x, xs):
    m = max(xs) * min(x, 2.0) + max(a * x for a in xs) - min(xs[0], xs[1], x)
    a = abs(x - 3.0) + float(2) * x + round(1.6) + int(2.7)
    flag = 1.0 if isinstance(xs, tuple) else 0.0
    return m + a + sum(xs, 10.0) * flag + len(list(xs)) + tuple(xs)[1]


def test_regression_scalar_builtins(mode):
    check(scalar_builtins, 1.5, (1.0, 4.0, -2.0), argnums=(0, 1))


def rows_builtins(x):
    return sum(abs(r) for r in x)


def test_regression_builtins_over_rows(mode):
    check(lambda x: jnp.sum(rows_builtins(x)), X)


def float_of_traced(x):
    return float(x) * x


def test_regression_float_of_traced_value(mode):
    # `float(tracer)` raises in JAX (ConcretizationTypeError): refused, as there.
    with pytest.raises(kt.KTransformError, match="float"):
        kt.grad(float_of_traced)(jnp.float32(1.5))


# -- starred assignment and unpacking --------------------------------------------------
def starred(xs):
    h, *rest = xs
    *init, last = xs
    a, *mid, b = xs
    return h * sum(rest) + last * len(init) + sum(mid) * a * b


def starred_rows(x):
    first, *others = x
    return jnp.sum(first * jnp.stack(others))


def star_literals(x):
    a = (x, 2.0 * x)
    b = [*a, x * x]
    c = (*b, *a)
    return b[0] * b[2] + sum(c)


def star_literal_rows(x):
    rows = (*x, x[0])
    return jnp.sum(jnp.stack(rows) ** 2)


def _affine(a, b, c=1.0, *, scale=1.0):
    return (a * b + c) * scale


def star_calls(x):
    args = (x, 2.0)
    kw = {"c": x, "scale": 3.0}
    return _affine(*args, **kw) + _affine(x, *(x,), **{"scale": x})


def test_regression_starred_assignment(mode):
    check(starred, (1.0, 2.0, 3.0, 4.0))
    check(starred_rows, X)


def test_regression_star_in_literals(mode):
    check(star_literals, 1.5)
    check(star_literal_rows, X)


def test_regression_star_and_double_star_calls(mode):
    check(star_calls, 1.5)


# -- parameters: *args, **kwargs, keyword-only, positional-only --------------------------
def _var(*args, scale=1.0, **kw):
    return scale * sum(args) + kw["b"] * len(kw)


def _posonly(a, /, b, *, c=2.0):
    return a * b * c


def signatures(x):
    def inner(*xs, **opts):
        return xs[0] * opts["k"] + len(xs)

    def lam(*v):
        return v[0] * v[-1]

    total = _var(x, x * x, scale=3.0, b=x) + _posonly(x, b=2.0) + _posonly(x, 1.0, c=x)
    return total + inner(x, 1.0, k=x) + lam(x, 2.0, x) + (lambda *v, k=1.0: v[1] * k)(x, x, k=x)


def test_regression_variadic_and_keyword_only_parameters(mode):
    check(signatures, 1.5)


def _pair(a, b):
    return a * b


def _head_times_rest(a, *rest):
    return a * sum(rest)


def forwarding(x):
    def wrap(*args, **kwargs):
        return _pair(*args) + _head_times_rest(*args) + _head_times_rest(x, *args, **kwargs)

    return wrap(x, 2.0)


class Inner(kt.Cell):
    def construct(self, a, b):
        return jnp.sin(a) * b


class Forward(kt.Cell):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def construct(self, *inputs):
        return self.inner(*inputs)


def cell_forwarding(x):
    return Forward()(x, 3.0)


def test_regression_forwarding_varargs(mode):
    check(forwarding, 1.5)
    net = Forward()
    close(kt.grad(net)(1.5, 3.0), jax.grad(lambda x, y: jnp.sin(x) * y)(1.5, 3.0))


def signature_error(x):
    return _posonly(a=x, b=2.0)


def test_positional_only_passed_by_keyword_is_refused():
    with pytest.raises(kt.KTransformError, match="unexpected keyword"):
        kt.compile(signature_error)(1.0)


def keyword_target(x, y=1.0, *, scale=2.0):
    return jnp.sin(x) * y * scale


def test_regression_gradient_keyword_arguments(mode):
    f = keyword_target
    close(kt.grad(f)(1.0, y=3.0), jax.grad(f)(1.0, y=3.0))
    close(kt.GradOperation()(f)(1.0, scale=3.0), jax.grad(f)(1.0, scale=3.0))
    want = jax.grad(f, argnums=(0, 1))(1.0, 2.0, scale=3.0)
    close(kt.GradOperation(get_all=True)(f)(1.0, 2.0, scale=3.0), want)
    close(kt.grad(f, grad_position=(0, 1))(1.0, 2.0, scale=3.0), want)
    close(kt.grad(f)(1.0), jax.grad(f)(1.0))


# -- jnp.cumsum without an axis -----------------------------------------------------------
def cumsum_flat(x):
    return jnp.sum(jnp.cumsum(x) * jnp.arange(6.0)) + jnp.sum(x.cumsum() ** 2)


def test_regression_cumsum_without_axis(mode):
    check(cumsum_flat, X)


# -- what cannot keep Python's semantics --------------------------------------------------
def zip_as_value(x):
    return jnp.sum(jnp.stack(zip(x, x, strict=True)))


def zip_strict_unequal(x):
    return sum(a * b for a, b in zip(x, (1.0, 2.0), strict=True))


def min_with_key(x):
    return min(x, key=abs)


def isinstance_traced(x):
    return 1.0 if isinstance(x, float) else 0.0


def set_comprehension(x):
    return len({v for v in (1, 2)}) * x


def varargs_gradient(*xs):
    return xs[0] * xs[1]


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        (zip_as_value, "zip(...) used as a value"),
        (min_with_key, "key="),
        (isinstance_traced, "isinstance"),
        (set_comprehension, "set comprehension"),
    ],
)
def test_refused_constructs_are_named(fn, words):
    """In strict mode (without it these run as Python: `test_python_code.py`)."""
    kt.set_strict(True)
    try:
        with pytest.raises(kt.KTransformError, match=None) as info:
            kt.compile(fn)(jnp.ones(3))
    finally:
        kt.set_strict(False)
    message = str(info.value)
    assert words in message
    assert fn.__code__.co_filename in message


def test_regression_zip_strict(mode):
    check(zip_strict_unequal, jnp.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"zip\(\) argument 2 is shorter than argument 1"):
        kt.compile(zip_strict_unequal)(jnp.ones(3))  # Python's exception and message


def test_regression_gradient_of_varargs_function(mode):
    f = varargs_gradient
    close(kt.grad(f)(1.0, 2.0), jax.grad(f)(1.0, 2.0))
    close(kt.grad(f, grad_position=1)(1.0, 2.0), jax.grad(f, argnums=1)(1.0, 2.0))
    want = jax.grad(f, argnums=(0, 1))(1.0, 2.0)
    close(kt.GradOperation(get_all=True)(f)(1.0, 2.0), want)


PAIR = (lambda a: a * 2.0, lambda a: jnp.sin(a) * a)  # two lambdas, one line, one parameter
NESTED = lambda a: (lambda b: jnp.cos(b) * a)(a * 3.0)  # noqa: E731


def test_each_lambda_on_a_line_is_its_own():
    """Several lambdas with the same parameters on one line: k_transform took
    the first for each, so the gradient of the second was the first's (2.0
    for sin(a) * a), with no error. The one whose body holds the code's
    positions is read. Oracle: jax.grad of the same lambdas."""
    x = jnp.float32(0.7)
    for fn in (*PAIR, NESTED):
        np.testing.assert_allclose(kt.grad(fn)(x), jax.grad(fn)(x), rtol=1e-6)


def _decorated(fn):
    return fn


@_decorated
@_decorated
def twice_decorated(x):
    return jnp.sin(x)


class _WithMethod:
    @staticmethod
    def method(x):
        def inner(y):
            return y * x

        return inner(x)


def test_the_source_read_is_what_inspect_reads():
    """k_transform reads a function's lines from its code object's file and
    line (`frontend.source._source_lines`), not by inspect's search of every
    loaded module; the lines and first line number are inspect's, for
    decorated functions, lambdas sharing a line, methods and nested defs."""
    import inspect

    from k_transform.frontend.source import _source_lines

    nested = _WithMethod.method.__code__.co_consts
    inner = next(c for c in nested if inspect.iscode(c))
    codes = [f.__code__ for f in (twice_decorated, *PAIR, NESTED, _WithMethod.method)] + [inner]
    for code in codes:
        assert _source_lines(code, globals()) == inspect.getsourcelines(code)


def stacked_copies(x):
    s = jnp.stack([x] * 3)
    return jnp.sum(jnp.sin(s) * s)


def repeated_items(x):
    s = [x] * 3
    return jnp.sum(s[0] * s[1] * jnp.sin(s[2]))


def repeated_tuple(x):
    s = 2 * (x, x * x)
    return jnp.sum(jnp.stack(s) ** 3)


@pytest.mark.parametrize("fn", [stacked_copies, repeated_items, repeated_tuple])
def test_a_repeated_sequence_gives_every_copy_its_gradient(fn):
    """`[x] * 3` and `2 * (x, y)`: the gradient of the product repeated the
    gradient list again and `sum_to` took the first copy's items, so x got a
    third of its gradient (0.199 for 0.598) with no error. Oracle: jax.grad,
    first and second order."""
    x = jnp.linspace(0.1, 0.5, 4)
    np.testing.assert_allclose(kt.grad(fn)(x), jax.grad(fn)(x), rtol=1e-5)
    v = jnp.linspace(1.0, -1.0, 4)
    want = jax.jvp(jax.grad(fn), (x,), (v,))[1]
    np.testing.assert_allclose(kt.hvp(fn, (x,), v), want, rtol=1e-4, atol=1e-6)


def flatten_rest(x):
    return jnp.sum(jnp.tanh(x.reshape((x.shape[0], np.prod(x.shape[1:])))) * np.size(x[0]))


def test_numpy_on_shapes_computes_what_numpy_does():
    """`np.prod(x.shape[1:])` (HIPS autograd's convnet): numpy on Python ints
    ran as `jnp.prod` of a tuple, a TypeError; it is numpy's now."""
    x = jnp.ones((2, 3, 4)) * 0.1
    np.testing.assert_allclose(kt.grad(flatten_rest)(x), jax.grad(flatten_rest)(x), rtol=1e-6)


# The shapes below are the point: each body goes on past its first line.
# fmt: off
_LAMBDAS = [
    lambda x: jnp.sum(x * x)
    + jnp.sum(3.0 * x),
    lambda x: jnp.sum(x * x), lambda x: jnp.sum(x)
    * 5.0,
    lambda x: jnp.sum(x * x)
    # a comment line inside the body
    - jnp.sum(jnp.sin(x)),
]
_LAMBDAS.append(
    dict(
        a=lambda x: jnp.sum(jnp.cos(x))
        * jnp.sum(x),
    )["a"]
)
# fmt: on


@pytest.mark.parametrize("k", range(len(_LAMBDAS)))
def test_a_lambda_whose_body_goes_on_to_later_lines(k):
    """A lambda starting a line inside open brackets, its body going on to
    the next lines: `inspect` gives only its first line, and the parser
    read the body cut there (`jnp.sum(x * x)` for the first): a silently
    wrong gradient (found by helper-30). The reading kept is the one whose
    lambda holds every position of the lambda's code."""
    f = _LAMBDAS[k]
    x = jnp.array([1.0, 2.0])
    close(kt.grad(f)(x), jax.grad(f)(x))
