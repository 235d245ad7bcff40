"""Library calls with no primitive of ours, differentiated through their jaxprs.

Each case is a `jax.numpy` / `jax.nn` / `jax.scipy.special` function that
`k_transform` does not map (checked: `primitive_for_value` is None), called
in user code that the parser reads; the call is imported from its jaxpr at
trace time and differentiated with our lax-level rules
(`k_transform/frontend/jaxpr.py`, `k_transform/ops/lax_rules.py`). Oracle:
JAX's own `jax.grad` / `jax.jvp` of the same program, in float64, eager and
under `jax.jit`; a second derivative for a few. Inputs stay away from ties
and kinks (max, abs, sort), where any subgradient is right.

Control flow inside a jaxpr (`while`, `cond`, `scan`) is imported onto our
own control primitives: functions that lower to loops (`jnp.polyval`,
`jsp.ndtri`, `jnp.interp`) are swept too, and an opaque library function
running `lax.while_loop` gets a reverse-mode gradient (tested below against
the same loop unrolled, since JAX refuses it).
"""

from __future__ import annotations

import functools

import jax
import jax.extend
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from jax.interpreters import mlir

import k_transform as kt
from k_transform.codegen.compile import emit_source
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.ops.mapping import primitive_for_value

RNG = np.random.default_rng(0)
# numpy float64 inputs: arithmetic on them at import (X - 0.5) stays float64
# whatever the x64 switch, which is on only inside this module's tests.
X = RNG.uniform(0.15, 0.85, (2, 3))  # distinct, in (0, 1)
Y = RNG.uniform(0.15, 0.85, (2, 3))
BIG = X + 1.5  # > 1
V = RNG.normal(size=(2, 3))
W = RNG.normal(size=(2, 3))


@pytest.fixture(autouse=True)
def x64():
    """float64 for this module's tests only (a module-level switch leaked
    into every later test on the same xdist worker)."""
    with jax.enable_x64(True):
        yield


# (name, function of the inputs, inputs); one input: unary, two: binary.
UNARY = [
    ("arccos", jnp.arccos, X),
    ("arcsin", jnp.arcsin, X),
    ("arccosh", jnp.arccosh, BIG),
    ("arctanh", jnp.arctanh, X),
    ("log2", jnp.log2, X),
    ("log10", jnp.log10, X),
    ("exp2", jnp.exp2, X),
    ("cbrt", jnp.cbrt, X),
    ("deg2rad", jnp.deg2rad, X),
    ("sinc", jnp.sinc, X),
    ("fabs", jnp.fabs, X - 0.5),
    ("negative", jnp.negative, X),
    ("sort", jnp.sort, X),
    ("sort_axis0", functools.partial(jnp.sort, axis=0), X),
    ("diff", jnp.diff, X),
    ("cumulative_sum", functools.partial(jnp.cumulative_sum, axis=1), X),
    ("cumulative_prod", functools.partial(jnp.cumulative_prod, axis=1), X),
    ("trace", jnp.trace, X),
    ("diagonal", jnp.diagonal, X),
    ("fliplr", jnp.fliplr, X),
    ("rot90", jnp.rot90, X),
    ("repeat", functools.partial(jnp.repeat, repeats=2, axis=1), X),
    ("atleast_3d", jnp.atleast_3d, X),
    ("nansum", jnp.nansum, X),
    ("average", jnp.average, X),
    ("median", jnp.median, X),
    ("ptp", jnp.ptp, X),
    ("logcumsumexp", lambda x: jax.lax.cumlogsumexp(x, axis=1), X),
    ("asarray_stack", lambda x: jnp.array([x[0], 2.0 * x[1]]), X),
    ("silu", jax.nn.silu, X - 0.5),
    ("ndtri", jsp.ndtri, X),  # a scan and selects in its jaxpr
    ("elu", jax.nn.elu, X - 0.5),
    ("selu", jax.nn.selu, X - 0.5),
    ("celu", jax.nn.celu, X - 0.5),
    ("leaky_relu", jax.nn.leaky_relu, X - 0.5),
    ("log_sigmoid", jax.nn.log_sigmoid, X),
    ("relu6", jax.nn.relu6, 8.0 * X - 1.0),
    ("hard_tanh", jax.nn.hard_tanh, 3.0 * X - 1.5),
    ("mish", jax.nn.mish, X),
    ("squareplus", jax.nn.squareplus, X),
    ("standardize", jax.nn.standardize, X),
    ("glu", jax.nn.glu, np.concatenate([X, Y], axis=1)),
    ("expit", jsp.expit, X),
    ("entr", jsp.entr, X),
    ("gammaln", jsp.gammaln, BIG),
    ("erfc", jsp.erfc, X),
    ("erfinv", jsp.erfinv, X - 0.5),
    ("ndtr", jsp.ndtr, X),
    ("digamma", jsp.digamma, BIG),
    # lax functions, one per rule not reached above
    ("lax_pad", lambda x: jax.lax.pad(x, 0.5, ((1, 2, 1), (0, -1, 0))), X),
    ("lax_dynamic_slice", lambda x: jax.lax.dynamic_slice(x, (1, 1), (1, 2)), X),
    ("lax_clamp", lambda x: jax.lax.clamp(0.3, x, 0.7), X),
    ("lax_select", lambda x: jax.lax.select(x > 0.5, x, 2.0 * x), X),
    ("lax_tan", jax.lax.tan, X),
    ("lax_top_k", lambda x: jax.lax.top_k(x, 2)[0], X),
    ("lax_logistic", jax.lax.logistic, X),
    ("lax_square", jax.lax.square, X),
    ("lax_integer_pow", lambda x: jax.lax.integer_pow(x, 3), X),
    ("lax_cumsum_reverse", lambda x: jax.lax.cumsum(x, axis=1, reverse=True), X),
    ("lax_convert", lambda x: jnp.float64(jax.lax.convert_element_type(x, jnp.float32)), X),
    ("nanmax", lambda x: jnp.nanmax(x, axis=1), X),
    ("nanprod", jnp.nanprod, X),
    ("permute_dims", lambda x: jnp.permute_dims(x, (1, 0)), X),
]

BINARY = [
    ("logaddexp", jnp.logaddexp, X, Y),
    ("logaddexp2", jnp.logaddexp2, X, Y),
    ("hypot", jnp.hypot, X, Y),
    ("power", jnp.power, X, Y),
    ("float_power", jnp.float_power, X, Y),
    ("true_divide", jnp.true_divide, X, Y),
    ("copysign", jnp.copysign, X, Y - 0.5),
    ("fmax", jnp.fmax, X, Y),
    ("kron", jnp.kron, X, Y),
    ("inner", jnp.inner, X, Y),
    ("vdot", jnp.vdot, X, Y),
    ("tensordot", functools.partial(jnp.tensordot, axes=((1,), (1,))), X, Y),
    ("cross", lambda a, b: jnp.cross(a, b), X, Y),
    ("hstack", lambda a, b: jnp.hstack([a, b]), X, Y),
    ("xlogy", jsp.xlogy, X, Y),
    ("xlog1py", jsp.xlog1py, X, Y),
    ("rel_entr", jsp.rel_entr, X, Y),
    ("logsumexp_b", lambda a, b: jsp.logsumexp(a, b=b, axis=1), X, Y),
    ("fmod", lambda a, b: jnp.fmod(3.0 * a, b), X, Y),
    ("lax_atan2", jax.lax.atan2, X, Y),
    ("batch_matmul", lambda a, b: jax.lax.batch_matmul(a[None], b.T[None]), X, Y),
    ("lax_sort_two", lambda a, b: jax.lax.sort((a, b), num_keys=1)[1], X, Y),
    ("dynamic_update_slice", lambda a, b: jax.lax.dynamic_update_slice(a, b[:1, :2], (1, 0)), X, Y),
    ("polyval", lambda a, b: jnp.polyval(a[0], b), X, Y),  # a scan
    # an overwriting scatter with a repeated index: one update wins element 0
    ("put_repeated", lambda a, b: jnp.put(a, jnp.array([0, 4, 0]), b[0], inplace=False), X, Y),
    ("interp", lambda a, b: jnp.interp(b * 0.9, jnp.linspace(0.0, 1.0, 6), a.ravel()), X, Y),
]


def tangent_like(x):
    return jnp.cos(1.0 + jnp.arange(x.size, dtype=x.dtype)).reshape(x.shape)


def unary_program(fn):
    def f(x):
        return jnp.sum(jnp.sin(fn(x)))

    return f


def binary_program(fn):
    def f(x, y):
        return jnp.sum(jnp.sin(fn(x, y)))

    return f


def _fn_of(case):
    fn = case[1]
    return fn.func if isinstance(fn, functools.partial) else fn


def test_cases_are_not_mapped():
    """Every function swept here reaches the jaxpr import, not a mapped primitive."""
    mapped = [c[0] for c in UNARY + BINARY if primitive_for_value(_fn_of(c)) is not None]
    assert not mapped


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-11)


def _with_modes(cases):
    """Every case jitted (graph mode); every third also eagerly, to keep `make test`
    under 15 minutes on 2 cores (eager mode runs the same rules op by op)."""
    return [
        pytest.param(c, m, id=f"{m}-{c[0]}")
        for k, c in enumerate(cases)
        for m in (("graph", "eager") if k % 3 == 0 else ("graph",))
    ]


@pytest.mark.parametrize("case, mode", _with_modes(UNARY), indirect=["mode"])
def test_unary_grad_and_jvp(case, mode):
    _, fn, x = case
    f = unary_program(fn)
    _close(kt.grad(f)(x), jax.grad(f)(x))
    v = tangent_like(x)
    out, tangent = kt.jvp(f, x, v)
    want_out, want_tangent = jax.jvp(f, (x,), (v,))
    _close(out, want_out)
    _close(tangent, want_tangent)


@pytest.mark.parametrize("case, mode", _with_modes(BINARY), indirect=["mode"])
def test_binary_grad_and_jvp(case, mode):
    _, fn, x, y = case
    f = binary_program(fn)
    for got, want in zip(
        kt.grad(f, grad_position=(0, 1))(x, y), jax.grad(f, argnums=(0, 1))(x, y), strict=True
    ):
        _close(got, want)
    out, tangent = kt.jvp(f, (x, y), (V, W))
    want_out, want_tangent = jax.jvp(f, (x, y), (V, W))
    _close(out, want_out)
    _close(tangent, want_tangent)


def test_under_user_jit():
    """The gradient function inside the user's own jax.jit."""
    f = unary_program(jnp.arccos)
    _close(jax.jit(kt.grad(f))(X), jax.grad(f)(X))


# -- lax.log2: a primitive JAX 0.11.2 added ------------------------------------------------
def _log2_primitive():
    """`lax.log2_p`, which `jnp.log2` traces to from JAX 0.11.2 (earlier it was
    `log(x) / log(2)`, swept above), or on an earlier JAX a stand-in primitive of
    the same name and value: the importer picks a primitive's class and rule by
    its name (`ops.lax.lax_class("log2")`, `d_log2` in `ops.lax_rules`), so both
    take the path that 0.11's `jnp.log2` takes."""
    real = getattr(jax.lax, "log2_p", None)
    if real is not None:
        return real

    def impl(x, accuracy):
        return jax.lax.log(x) * np.asarray(1.4426950408889634, x.dtype)  # JAX's lowering

    stand_in = jax.extend.core.Primitive("log2")
    stand_in.def_impl(impl)
    stand_in.def_abstract_eval(lambda x, accuracy: x)
    mlir.register_lowering(stand_in, mlir.lower_fun(impl, multiple_results=False))
    return stand_in


LOG2_P = _log2_primitive()


def lax_log2(x):
    return LOG2_P.bind(x, accuracy=None)


@pytest.mark.parametrize("mode", ["graph", "eager"], indirect=True)
def test_log2_primitive(mode):
    """The `log2` rule against the closed form: for f = sum(sin(log2 x)),
    f' = cos(log2 x) / (x ln 2) and f'' = -(sin(log2 x) / ln 2 + cos(log2 x)) / (x^2 ln 2)."""
    assert [e.primitive.name for e in jax.make_jaxpr(lax_log2)(X).jaxpr.eqns] == ["log2"]
    f = unary_program(lax_log2)
    log2x, ln2 = np.log2(X), np.log(2.0)
    d1 = np.cos(log2x) / (X * ln2)
    d2 = -(np.sin(log2x) / ln2 + np.cos(log2x)) / (X * X * ln2)
    _close(kt.grad(f)(X), d1)
    out, tangent = kt.jvp(f, X, V)
    _close(out, np.sum(np.sin(log2x)))
    _close(tangent, np.sum(d1 * V))
    _close(kt.grad(lambda x: jnp.vdot(kt.grad(f)(x), V))(X), d2 * V)


# -- second order ------------------------------------------------------------------------
SECOND = [
    "arccos",
    "sort",
    "cbrt",
    "elu",
    "standardize",
    "logcumsumexp",
    "median",
    "diagonal",
    "lax_pad",
    "lax_dynamic_slice",
    "cumulative_prod",
]


@pytest.mark.parametrize("name", SECOND)
def test_second_derivative(name):
    fn, x = next((c[1], c[2]) for c in UNARY if c[0] == name)
    f = unary_program(fn)

    def df_v(x):
        return jnp.vdot(kt.grad(f)(x), V)

    want = jax.grad(lambda x: jnp.vdot(jax.grad(f)(x), V))(x)
    _close(kt.grad(df_v)(x), want)


@pytest.mark.parametrize("name", ["logaddexp", "power", "kron", "dynamic_update_slice"])
def test_second_derivative_binary(name):
    fn, x, y = next((c[1], c[2], c[3]) for c in BINARY if c[0] == name)
    f = binary_program(fn)
    h = kt.grad(lambda x, y: kt.grad(f, grad_position=1)(x, y)[0, 0])(x, y)
    want = jax.grad(lambda x, y: jax.grad(f, argnums=1)(x, y)[0, 0])(x, y)
    _close(h, want)


# -- a third-party JAX function ---------------------------------------------------------
def optax_like_softmax_cross_entropy(logits, labels):
    """Written as optax writes its losses: jax.nn and take_along_axis."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    smooth = jnp.mean(jnp.clip(logits, -3.0, 3.0) ** 2, axis=-1)
    return -picked + 0.01 * smooth


def test_third_party_loss():
    labels = jnp.array([2, 0])
    opaque = jax.jit(optax_like_softmax_cross_entropy)  # no source k_transform reads

    def loss(logits):
        return jnp.mean(opaque(logits, labels))

    def oracle(logits):
        return jnp.mean(optax_like_softmax_cross_entropy(logits, labels))

    _close(kt.grad(loss)(4.0 * X), jax.grad(oracle)(4.0 * X))
    _, tangent = kt.jvp(loss, 4.0 * X, V)
    _close(tangent, jax.jvp(oracle, (4.0 * X,), (V,))[1])


# -- item 5: constructors and numpy twins --------------------------------------------------
def test_constructors_and_numpy_twins():
    """numpy functions on traced values run as their jax.numpy twins (JAX itself
    refuses them: the oracle spells the twins)."""

    def f(x):
        base = jnp.full((2, 3), 0.5) + jnp.zeros_like(x) + np.ones((2, 3))
        stacked = jnp.array([x[0, 0], x[1, 2] * 3.0])
        twin = np.multiply(x, x) + np.arccos(x)
        return jnp.sum(base * twin) + jnp.sum(stacked**2) + jnp.sum(jnp.asarray(x) * 2.0)

    def oracle(x):
        base = jnp.full((2, 3), 0.5) + jnp.zeros_like(x) + np.ones((2, 3))
        stacked = jnp.array([x[0, 0], x[1, 2] * 3.0])
        twin = jnp.multiply(x, x) + jnp.arccos(x)
        return jnp.sum(base * twin) + jnp.sum(stacked**2) + jnp.sum(jnp.asarray(x) * 2.0)

    _close(kt.grad(f)(X), jax.grad(oracle)(X))
    _close(kt.jvp(f, X, V)[1], jax.jvp(oracle, (X,), (V,))[1])


def test_integer_and_static_arguments():
    """Integer arrays and Python ints are inputs without gradients."""

    def f(x):
        idx = jnp.array([2, 0, 1])
        return jnp.sum(jnp.roll(jnp.take(x, idx, axis=1), 1) * jnp.linspace(0.0, 1.0, 3))

    _close(kt.grad(f)(X), jax.grad(f)(X))


def _opaque(fn):
    fn.__module__ = "jax.opaque_for_test"  # library code: traced, never parsed
    return jax.jit(fn)  # (a jitted *user* function is read from its source)


def test_control_flow_in_opaque_jaxpr(mode):
    """fori_loop (a scan), cond and switch inside a library function's jaxpr."""

    def body(x):
        y = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) * 1.5 + i, x)
        y = jax.lax.cond(jnp.sum(y) > 0, jnp.cos, lambda v: v * v, y)
        return jax.lax.switch(jnp.argmax(y[0]), [jnp.sin, jnp.exp, jnp.tanh], y)

    opaque = _opaque(body)

    def f(x):
        return jnp.sum(opaque(x) ** 2)

    for x in (X, -X):
        _close(kt.grad(f)(x), jax.grad(f)(x))
    _close(kt.jvp(f, X, V)[1], jax.jvp(f, (X,), (V,))[1])


def _loop_prims(jaxpr) -> set:
    found = set()
    for eqn in jaxpr.eqns:
        found |= {eqn.primitive.name} & {"scan", "while"}
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found |= _loop_prims(sub)
    return found


def test_a_scan_its_author_unrolled_is_straight_code():
    """`jnp.polyval` scans 17 rows with `unroll=16`: two trips, which XLA
    unrolls whole. Imported as straight code, its gradient has no loop (as
    a loop of ours it ran 4.9x JAX's time on a GPU); 12 rows by 2 stay a loop."""
    coef = jnp.asarray(np.linspace(-1.0, 1.0, 17))

    def f(x):
        return jnp.sum(jnp.polyval(coef, jnp.tanh(x)))

    assert not _loop_prims(jax.make_jaxpr(kt.grad(f))(X).jaxpr)
    _close(kt.grad(f)(X), jax.grad(f)(X))
    rows = jnp.tile(jnp.asarray(X), (6, 1))  # 12 rows, one at a time
    stepped = _opaque(lambda x: jax.lax.scan(lambda c, r: (c * r + 1.0, c), x, rows, unroll=2)[0])
    assert _loop_prims(jax.make_jaxpr(kt.grad(lambda x: jnp.sum(stepped(x))))(X[0]).jaxpr)


def test_while_in_opaque_jaxpr_reverse_mode(mode):
    """A library `lax.while_loop` (JAX cannot reverse it) against the same
    loop run by Python under `jax.grad`."""

    def loop(x, while_loop):
        return while_loop(lambda c: jnp.sum(c) < 20.0, lambda c: c * 1.5 + jnp.sin(c), x)

    opaque = _opaque(lambda x: loop(x, jax.lax.while_loop))

    def python_while(cond, body, c):
        while cond(c):
            c = body(c)
        return c

    def f(x):
        return jnp.sum(opaque(x) ** 2)

    want = jax.grad(lambda x: jnp.sum(loop(x, python_while) ** 2))(X)
    _close(kt.grad(f)(X), want)


def test_batched_while_in_opaque_jaxpr(mode):
    """A vmapped `lax.while_loop` (one condition per element, as in jsp.expi)
    inside a library function: each element loops its own number of times.
    Oracle: the same loop run by Python for each element under `jax.grad`."""

    def loop(x, while_loop):
        step = lambda c: (c[0] * 1.3 + jnp.sin(c[1]), c[1] + 0.5)  # noqa: E731
        return while_loop(lambda c: c[0] < 4.0, step, (x, x))[0]

    opaque = _opaque(jax.vmap(lambda x: loop(x, jax.lax.while_loop)))

    def python_while(cond, body, c):
        while cond(c):
            c = body(c)
        return c

    def f(x):
        return jnp.sum(jnp.cos(opaque(x.ravel())))

    def oracle(x):
        return sum(jnp.cos(loop(v, python_while)) for v in x.ravel())

    trips = [int(np.ceil(np.log(4.0 / v) / np.log(1.3))) for v in X.ravel()]
    assert len(set(trips)) > 1  # the elements need different trip counts
    _close(kt.grad(f)(X), jax.grad(oracle)(X))


_STRIDED = dict(window_strides=(2, 1), padding=((1, 2), (0, 1)), lhs_dilation=(1, 1))
_DILATED = dict(
    window_strides=(1, 2), padding=((1, 1), (2, 0)), lhs_dilation=(2, 1), rhs_dilation=(1, 2)
)
_GROUPS = dict(window_strides=(1, 1), padding="VALID", lhs_dilation=(1, 1))
_NWC = dict(window_strides=(2,), padding=((2, 1),), dimension_numbers=("NWC", "WIO", "NWC"))
# name: (lhs shape, rhs shape, conv_general_dilated keywords); an explicit lhs_dilation
# keeps NCHW cases off our own Conv2D mapping (the lax rule is what is tested)
CONV_CASES = {
    "strided_padded": ((2, 3, 7, 6), (4, 3, 3, 2), _STRIDED),
    "dilated": ((1, 2, 7, 7), (3, 2, 2, 3), _DILATED),
    "feature_groups": ((2, 4, 5, 5), (6, 2, 3, 3), dict(_GROUPS, feature_group_count=2)),
    "batch_groups": ((4, 2, 5, 5), (6, 2, 2, 2), dict(_GROUPS, batch_group_count=2)),
    "nwc_1d": ((2, 9, 3), (3, 3, 4), _NWC),
}


def _close_tree(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        _close(u, v)


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv_general_dilated(name):
    """`lax.conv_general_dilated` (no primitive of ours) through its lax rule: strides,
    padding, both dilations, feature and batch groups, other layouts; gradients of
    both operands, a jvp and a second derivative against JAX's."""
    lhs_shape, rhs_shape, kw = CONV_CASES[name]
    x = np.cos(np.arange(np.prod(lhs_shape))).reshape(lhs_shape)
    w = np.sin(np.arange(np.prod(rhs_shape)) + 0.5).reshape(rhs_shape)

    def f(x, w):
        return jnp.sum(jnp.sin(jax.lax.conv_general_dilated(x, w, **kw)))

    _close_tree(jax.jit(kt.grad(f, (0, 1)))(x, w), jax.grad(f, (0, 1))(x, w))
    tangents = (np.cos(x), np.cos(w))
    _close_tree(kt.jvp(f, (x, w), tangents)[1], jax.jvp(f, (x, w), tangents)[1])

    def second(grad):
        def g(x, w):
            dx, dw = grad(f, (0, 1))(x, w)
            return jnp.sum(dx * tangents[0]) + jnp.sum(dw * tangents[1])

        return g

    def g_kt(x, w):
        dx, dw = kt.grad(f, (0, 1))(x, w)
        return jnp.sum(dx * tangents[0]) + jnp.sum(dw * tangents[1])

    want = jax.grad(second(jax.grad), (0, 1))(x, w)
    _close_tree(jax.jit(kt.grad(g_kt, (0, 1)))(x, w), want)


def test_untraceable_call_is_a_clear_error():
    def untraceable(x):
        return float(x[0, 0]) * x  # concrete value of a traced array

    def f(x):
        return jnp.sum(untraceable_opaque(x))

    untraceable.__module__ = "jax.opaque_for_test"  # library code: traced, never parsed
    untraceable_opaque = jax.jit(untraceable)
    with pytest.raises(KTransformError, match="tracing it with jax.make_jaxpr failed"):
        kt.grad(f)(X)


def test_generated_code_binds_lax_primitives():
    kt.grad(unary_program(jnp.arccos))(X)
    sources = [emit_source(graph)[0] for _, graph in TRANSFORM.cache("jaxpr.graphs").values()]
    assert any("lax_acos_p.bind(" in text for text in sources)


def test_select_with_several_cases():
    """`jnp.select` lowers to a `select_n` with an integer predicate."""

    def g(x):
        return jnp.select([x < 0.3, x < 0.6], [jnp.sin(x), 2.0 * x], x * x)

    f = unary_program(g)
    _close(kt.grad(f)(X), jax.grad(f)(X))


# -- linear algebra inside a jaxpr: cholesky and triangular_solve -------------------------
# Imported as `Cholesky` and `TriangularSolve` (`k_transform/ops/lax_map.py`).
A = np.array([[1.2, 0.3, -0.4], [0.2, 0.9, 0.1], [-0.3, 0.5, 1.1]])  # not symmetric
MEAN = np.array([0.1, -0.2, 0.3])
OBS = np.array([[0.5, -0.1, 0.2], [0.0, 0.4, -0.3]])  # two observations


def gaussian_log_likelihood(a, mean):
    """`multivariate_normal.logpdf` (lax `cholesky` of a symmetrized covariance,
    then a right-side `triangular_solve`), the covariance built from `a`."""
    cov = a @ a.T + jnp.eye(3)
    return jnp.sum(jax.scipy.stats.multivariate_normal.logpdf(OBS, mean, cov))


def test_multivariate_normal_logpdf():
    assert primitive_for_value(jax.scipy.stats.multivariate_normal.logpdf) is None
    want = jax.grad(gaussian_log_likelihood, (0, 1))(A, MEAN)
    _close_tree(kt.grad(gaussian_log_likelihood, (0, 1))(A, MEAN), want)
    _close_tree(kt.jit(kt.grad(gaussian_log_likelihood, (0, 1)))(A, MEAN), want)


def test_multivariate_normal_logpdf_second_order():
    def df_v(a, mean):
        da, dmean = kt.grad(gaussian_log_likelihood, (0, 1))(a, mean)
        return jnp.vdot(da, A.T) + jnp.vdot(dmean, MEAN[::-1])

    def df_v_jax(a, mean):
        da, dmean = jax.grad(gaussian_log_likelihood, (0, 1))(a, mean)
        return jnp.vdot(da, A.T) + jnp.vdot(dmean, MEAN[::-1])

    _close_tree(kt.grad(df_v, (0, 1))(A, MEAN), jax.grad(df_v_jax, (0, 1))(A, MEAN))
    hvp = kt.hvp(gaussian_log_likelihood, (A, MEAN), A.T)
    _close(hvp, jax.jvp(jax.grad(gaussian_log_likelihood), (A, MEAN), (A.T, 0 * MEAN))[1])


CHOLESKY_INPUT = (
    A @ A.T + np.eye(3) + np.array([[0.0, 0.3, -0.2], [0.1, 0.0, 0.4], [0.0, -0.1, 0.0]])
)


CHOLESKY_CASES = {
    "lax": (jax.lax.linalg.cholesky, CHOLESKY_INPUT),
    "jnp-jitted": (jax.jit(jnp.linalg.cholesky), CHOLESKY_INPUT),
    "jnp-batch": (jax.jit(jnp.linalg.cholesky), np.stack([CHOLESKY_INPUT, CHOLESKY_INPUT.T])),
}


@pytest.mark.parametrize("name", sorted(CHOLESKY_CASES))
def test_cholesky_of_a_non_symmetric_matrix(name):
    """lax's default symmetrizes its input: JAX's gradient is symmetric, and
    the function reads both triangles."""
    fn, x = CHOLESKY_CASES[name]
    f = unary_program(fn)
    v = np.broadcast_to(A, x.shape)
    _close(kt.grad(f)(x), jax.grad(f)(x))
    _close(kt.jvp(f, x, v)[1], jax.jvp(f, (x,), (v,))[1])

    def df_v(m):
        return jnp.vdot(kt.grad(f)(m), v)

    _close(kt.grad(df_v)(x), jax.grad(lambda m: jnp.vdot(jax.grad(f)(m), v))(x))


def test_unsymmetrized_cholesky_gradient_is_the_lower_triangles():
    """`jax.scipy.linalg.cholesky` reads one triangle: the entries above the
    diagonal have no effect, and each one below stands for both of a
    symmetric pair. Oracle: central differences in float64 (JAX 0.10's
    gradient was the symmetric tangent's, not folded: 0.168 above the
    diagonal, 0.574 for 0.742 below it; JAX 0.11's is this one)."""
    f = unary_program(lambda m: jax.scipy.linalg.cholesky(m, lower=True))
    _close(kt.jit(f)(CHOLESKY_INPUT), f(CHOLESKY_INPUT))
    h, want = 1e-6, np.zeros((3, 3))
    for i, j in np.ndindex(3, 3):
        e = np.zeros((3, 3))
        e[i, j] = h
        want[i, j] = (f(CHOLESKY_INPUT + e) - f(CHOLESKY_INPUT - e)) / (2 * h)
    assert np.all(want[np.triu_indices(3, 1)] == 0.0)
    np.testing.assert_allclose(kt.grad(f)(CHOLESKY_INPUT), want, rtol=1e-7, atol=1e-9)


TRIANGULAR = A + np.diag([1.0, 1.5, 2.0])  # both triangles filled
RHS = np.array([[0.3, -0.5], [0.8, 0.1], [-0.2, 0.6]])


@pytest.mark.parametrize("left_side", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("transpose_a", [False, True], ids=["n", "t"])
def test_triangular_solve_parameters(left_side, lower, transpose_a):
    unit = lower != transpose_a  # each of unit_diagonal's values, both sides
    rhs = RHS if left_side else RHS.T

    def solve(a, b):
        return jax.lax.linalg.triangular_solve(
            a,
            b,
            left_side=left_side,
            lower=lower,
            transpose_a=transpose_a,
            conjugate_a=transpose_a,  # a no-op on real matrices
            unit_diagonal=unit,
        )

    f = binary_program(solve)
    got = kt.grad(f, grad_position=(0, 1))(TRIANGULAR, rhs)
    _close_tree(got, jax.grad(f, argnums=(0, 1))(TRIANGULAR, rhs))
    tangents = (A.T, np.cos(rhs))
    _, tangent = kt.jvp(f, (TRIANGULAR, rhs), tangents)
    _close(tangent, jax.jvp(f, (TRIANGULAR, rhs), tangents)[1])


def test_batched_triangular_solve_second_order():
    """`jax.scipy.linalg.solve_triangular` on a batch, both operands
    differentiated twice."""
    a = np.stack([TRIANGULAR, TRIANGULAR.T + 0.5 * np.eye(3)])
    b = np.stack([RHS, RHS[::-1]])
    solve = jax.jit(lambda a, b: jax.scipy.linalg.solve_triangular(a, b, trans=1, lower=False))
    f = binary_program(solve)
    va, vb = np.cos(a), np.sin(b)

    def second(grad):
        def g(a, b):
            da, db = grad(f, (0, 1))(a, b)
            return jnp.vdot(da, va) + jnp.vdot(db, vb)

        return g

    _close_tree(kt.grad(second(kt.grad), (0, 1))(a, b), jax.grad(second(jax.grad), (0, 1))(a, b))


# -- Python numbers where JAX wants a static argument ---------------------------------
IDX = np.array([0, 5, 2, -1, 4])
TIES = np.array([[3.0, -3.0, 2.0], [1.0, -2.0, 3.0]])  # |max| reached twice, rows tie too


def norm_inf(x):
    return jnp.linalg.norm(x.ravel(), jnp.inf) + jnp.linalg.norm(x.ravel(), -jnp.inf)


def norm_inf_matrix(x):
    return jnp.linalg.norm(x, jnp.inf) * jnp.linalg.norm(x, ord=1)  # max row / column sums


def norm_ord(x):
    return jnp.linalg.norm(x[0], ord=2) + jnp.linalg.norm(x[1], 3.0) + jnp.linalg.norm(x, "fro")


def take_fill(x):
    got = jnp.take(x.ravel(), IDX, mode="fill", fill_value=0.5)
    other = jnp.take(x, IDX[:2], axis=1, mode="fill", fill_value=-1)  # an int, static already
    return jnp.sum(got**2) + jnp.sum(other * x[0, 0])


STATIC_NUMBERS = [norm_inf, norm_inf_matrix, norm_ord, take_fill]


@pytest.mark.parametrize("f", STATIC_NUMBERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("at", [X - 0.5, TIES], ids=["distinct", "ties"])
def test_python_numbers_stay_static(f, at):
    """`jnp.linalg.norm(x, jnp.inf)`, `fill_value=0.0`: a Python float where
    JAX wants a static argument was traced, and refused ('Non-hashable static
    arguments'); it is static now. Exact at ties of a max-norm (JAX's split)."""
    _close(kt.grad(f)(at), jax.grad(f)(at))
    _close(kt.jit(kt.grad(f))(at), jax.grad(f)(at))
    _close(kt.jvp(f, (at,), (V,))[1], jax.jvp(f, (at,), (V,))[1])


def test_static_numbers_trace_per_value():
    """Each value is its own trace (as `jax.jit`'s static arguments): -0.0 is not 0.0."""

    def fill(x, value):
        return jnp.take(x, np.array([0, 9]), mode="fill", fill_value=value)

    def neg_zero(x):
        return fill(x, -0.0)[1] * x[0]

    def pos_zero(x):
        return fill(x, 0.0)[1] * x[0] + jnp.sum(fill(x, 1.5))

    x = X[0]
    for f in (neg_zero, pos_zero):
        value, grad = kt.value_and_grad(f)(x)
        want_value, want_grad = jax.value_and_grad(f)(x)
        assert np.signbit(float(value)) == np.signbit(float(want_value))
        _close(value, want_value)
        _close(grad, want_grad)
    assert np.signbit(float(kt.value_and_grad(neg_zero)(x)[0]))


def test_a_differentiated_fill_value_is_refused():
    """A value with a gradient where JAX wants a static one: refused, as JAX refuses it."""

    def f(x):
        return jnp.sum(jnp.take(x, np.array([0, 9]), mode="fill", fill_value=x[1]))

    with pytest.raises(Exception, match="concrete|static|hash"):
        jax.grad(f)(X[0])
    with pytest.raises(KTransformError, match="jnp.take") as info:
        kt.grad(f)(X[0])
    assert "test_jaxpr_import.py" in str(info.value)


def test_matrix_two_norm():
    """`jnp.linalg.norm(m, 2)` of a matrix is its largest singular value: an
    `svd` inside the jaxpr (`ops.lax_linalg_rules`)."""

    def f(m):
        return jnp.linalg.norm(m, ord=2)

    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-7, atol=1e-9)
