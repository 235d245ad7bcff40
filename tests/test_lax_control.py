"""`lax.scan`, `lax.while_loop`, `lax.fori_loop`, `lax.map`, `lax.cond`,
`lax.switch` and `jax.vmap` with Python bodies, in differentiated code.

The calls are read as Python models (`k_transform/frontend/lax_models.py`),
so their bodies, closures over the differentiated values included, are
differentiated by our own loop and branch rules. Oracle: `jax.grad` /
`jax.jvp` of the same program in float64 (JAX differentiates these calls
itself); for a traced `lax.while_loop`, which JAX cannot reverse, the same
program with the loop written as a Python `while` run eagerly by JAX.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import k_transform as kt

RNG = np.random.default_rng(3)
X = RNG.uniform(-0.8, 0.8, (4, 3))  # numpy float64: stays float64 under the x64 fixture
W = RNG.uniform(-0.6, 0.6, (3, 3))
V = RNG.normal(size=(4, 3))


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(params=["graph", "eager"])
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# -- programs: each is f(x) -> scalar, x of shape (4, 3) --------------------------------
def scan_rnn(x):
    w = jnp.tanh(x[0])  # a closure over a value that depends on x

    def step(h, xt):
        h = jnp.tanh(h * w + xt)
        return h, jnp.sum(h * h)

    h, ys = lax.scan(step, jnp.zeros(3), x)
    return jnp.sum(h) + jnp.sum(ys * jnp.arange(1.0, 5.0))


def scan_reverse_pytree(x):
    def step(carry, item):
        a, b = carry
        row, scale = item["row"], item["scale"]
        a = a * jnp.cos(row) + scale
        b = b + jnp.sin(a)
        return (a, b), (a, jnp.sum(b))

    (a, b), (ys, zs) = lax.scan(
        step, (x[0], 0.5 * x[1]), {"row": x, "scale": x[:, 0]}, reverse=True
    )
    return jnp.sum(a * b) + jnp.sum(ys**2) + jnp.sum(zs)


def scan_length_only(x):
    def step(c, _):
        return c * jnp.sin(c) + 0.1, None

    c, ys = lax.scan(step, x[1], None, length=5)
    return jnp.sum(c)


def fori_static(x):
    def body(i, y):
        return y * jnp.cos(y) + x[i % 4]

    return jnp.sum(lax.fori_loop(0, 6, body, x[0]))


def map_rows(x):
    return jnp.sum(lax.map(lambda r: jnp.sin(r) * jnp.sum(r), x) ** 2)


def cond_two_operands(x):
    out = lax.cond(
        jnp.sum(x[0]) > 0,
        lambda a, b: jnp.sin(a) * b,
        lambda a, b: a * a - b,
        x[1],
        x[2],
    )
    return jnp.sum(out)


def switch_three(x):
    branches = [lambda a: jnp.sin(a), lambda a: a * a, lambda a: jnp.exp(-a)]
    index = jnp.argmax(jnp.sum(x, axis=1)) % 3
    return jnp.sum(lax.switch(index, branches, x[3]))


def vmap_rows(x):
    scale = jnp.sum(x[0])

    def per_row(r, m):
        return jnp.sum(jnp.tanh(r @ m) * scale)

    return jnp.sum(jax.vmap(per_row, in_axes=(0, None))(x, jnp.eye(3) + 0.1) ** 2)


def vmap_nested(x):
    inner = jax.vmap(lambda a: a * jnp.sin(a))
    return jnp.sum(jax.vmap(lambda r: inner(r) * jnp.sum(r))(x))


def apply_along_and_over_axes(x):
    w = jnp.sin(x[0])  # the mapped functions close over a value that depends on x
    y = jnp.apply_along_axis(lambda r: jnp.cumsum(r * w[0]) + jnp.sum(r * w), 1, x)
    z = jnp.apply_along_axis(lambda c: jnp.sum(jnp.tanh(c) * w[1]), 0, x)
    u = jnp.apply_over_axes(jnp.sum, x * w, [0, 1])
    return jnp.sum(jnp.sin(y)) + jnp.sum(z**2) + jnp.sum(u**3)


PROGRAMS = [
    scan_rnn,
    scan_reverse_pytree,
    scan_length_only,
    fori_static,
    map_rows,
    cond_two_operands,
    switch_three,
    vmap_rows,
    vmap_nested,
    apply_along_and_over_axes,
]
INPUTS = [X, -X]  # both branches of the cond and of the switch are taken


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_grad(f, mode):
    for x in INPUTS:
        close(kt.grad(f)(x), jax.grad(f)(x))


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_jvp_and_second_order(f):
    x = X
    out, tangent = kt.jvp(f, x, V)
    want_out, want_tangent = jax.jvp(f, (x,), (V,))
    close(out, want_out)
    close(tangent, want_tangent)

    def hvp(x):
        return jnp.sum(kt.grad(f)(x) * V)

    close(kt.grad(hvp)(x), jax.grad(lambda x: jnp.sum(jax.grad(f)(x) * V))(x), 1e-7)


def test_under_user_jit():
    for f in (scan_rnn, vmap_rows, switch_three):
        close(jax.jit(kt.grad(f))(X), jax.grad(f)(X))


# -- a traced lax.while_loop: reverse mode that JAX itself refuses ---------------------
def newton_like(x, while_loop):
    def cond(state):
        y, k = state
        return jnp.logical_and(jnp.sum(y * y) < 40.0, k < 50)

    def body(state):
        y, k = state
        return y * 1.3 + jnp.sin(y) * x[0], k + 1

    y, k = while_loop(cond, body, (x[1], 0))
    return jnp.sum(y) + k


def python_while(cond, body, value):
    while cond(value):
        value = body(value)
    return value


def test_while_loop_reverse_mode(mode):
    f = lambda x: newton_like(x, lax.while_loop)  # noqa: E731
    oracle = lambda x: newton_like(x, python_while)  # noqa: E731
    with pytest.raises(ValueError):  # JAX: reverse-mode of while_loop is not supported
        jax.grad(f)(X)
    for x in INPUTS:
        close(kt.grad(f)(x), jax.grad(oracle)(x))
    close(jax.jit(kt.grad(f))(X), jax.grad(oracle)(X))
    close(kt.jvp(f, X, V)[1], jax.jvp(oracle, (X,), (V,))[1])


def test_while_condition_calls_a_function_argument(mode):
    """A `while` whose condition calls a function it was passed (the model of
    lax.while_loop, and user code alike) sees the loop's current value."""

    def loop(cond_fun, body_fun, val):
        while cond_fun(val):
            val = body_fun(val)
        return val

    def f(x):
        y, n = loop(lambda s: s[1] < 5, lambda s: (s[0] * jnp.sin(s[0]) + 1.0, s[1] + 1), (x, 0))
        return jnp.sum(y) * n

    close(kt.grad(f)(X), jax.grad(f)(X))


# -- global transformed functions: library functions, not read as their `f` ---------
def row_energy(r):
    return jnp.sum(jnp.sin(r) * r)


batched_energy = jax.vmap(row_energy)
energy_grad = jax.grad(row_energy)
checkpointed_energy = jax.checkpoint(row_energy)


def test_global_vmap_and_grad_are_not_read_as_f(mode):
    """`jax.vmap(f)` and `jax.grad(f)` carry `__wrapped__ = f`; reading them as
    `f` would be silently wrong. They are library calls (jaxpr import)."""

    def f(x):
        return jnp.sum(batched_energy(x) ** 2) + jnp.sum(energy_grad(x[0]) ** 2)

    close(kt.grad(f)(X), jax.grad(f)(X))


# -- batched: any axes; refused with the user's line where it cannot be -------------------
def vmap_out_axes(x):
    w = jnp.sum(x[0])
    return jnp.sum(jax.vmap(lambda r: jnp.sin(r) * w, out_axes=1)(x) ** 2)


def vmap_axis_1(x):
    return jnp.sum(jax.vmap(jnp.sin, in_axes=1)(x) * x.T)


@pytest.mark.parametrize("f", [vmap_out_axes, vmap_axis_1], ids=lambda f: f.__name__)
def test_vmap_axes_run_batched(f):
    """`jax.vmap` of a closure or a library function is one batched call
    (`frontend.batching`): other axes than 0 are JAX's (refused before, when
    it was a loop), to second order."""
    close(kt.grad(f)(X), jax.grad(f)(X))
    v = X * 0.3 - 0.1
    close(kt.hvp(f, (X,), v), jax.grad(lambda a: jnp.vdot(jax.grad(f)(a), v))(X))


def vmap_named_axis(x):
    return jnp.sum(jax.vmap(jnp.sin, axis_name="rows")(x))


def test_unsupported_vmap_options_name_the_line():
    with pytest.raises(kt.KTransformError) as info:
        kt.grad(vmap_named_axis)(X)
    message = str(info.value)
    assert "jax.vmap" in message and "test_lax_control.py" in message
    assert "return jnp.sum(jax.vmap(" in message


# -- acceptance: the shape of GradBench's JAX evals (jit + vmap + scan), in our words ---
def coupled_rate(x):
    """dy_k/dt = x_k * y_{k-1} (x_0 for k = 0), one component per vmap lane."""

    def field(y):
        def lane(k, xk, y_prev):
            return jnp.where(k == 0, xk, xk * y_prev)

        return jax.vmap(lane)(jnp.arange(x.shape[0]), x, jnp.roll(y, 1))

    return field


@functools.partial(jax.jit, static_argnums=1)
def integrate_rk4(x, steps):
    field, dt = coupled_rate(x), 1.5 / steps

    def step(y, _):
        a = field(y)
        b = field(y + dt / 2 * a)
        c = field(y + dt / 2 * b)
        d = field(y + dt * c)
        y = y + dt / 6 * (a + 2 * b + 2 * c + d)
        return y, y

    _, path = lax.scan(step, jnp.zeros_like(x), None, length=steps)
    return path[-1]


@functools.partial(jax.jit, static_argnums=1)
def polynomial_fit_loss(coef, n_samples):
    def residual(i):
        t = -1.0 + 2.0 * i / (n_samples - 1.0)
        powers = jnp.cumprod(jnp.full(coef.shape[0], t).at[0].set(1.0))
        return (jnp.sign(t) - jnp.sum(coef * powers)) ** 2

    return 0.5 * jnp.sum(jax.vmap(residual)(jnp.arange(n_samples)))


def test_jitted_vmap_scan_programs(mode):
    """Gradient targets decorated with `partial(jax.jit, static_argnums=1)`
    that call `jax.vmap` and `lax.scan`, as GradBench's ode and llsq evals do."""
    x = jnp.linspace(0.2, 0.9, 5)

    def last(x):
        return integrate_rk4(x, 8)[-1]

    close(kt.grad(last)(x), jax.grad(last)(x))
    close(jax.jit(kt.grad(last))(x), jax.grad(last)(x))
    close(kt.grad(polynomial_fit_loss)(x, 12), jax.grad(polynomial_fit_loss)(x, 12))


def test_checkpoint_and_named_call_closures_are_read_as_f(mode):
    """`jax.checkpoint` and `jax.named_call` return what they wrap returns:
    a local closure under them is read as its source (its free variables
    keep their gradients); a global one is read through to its function."""

    def f(x):
        w = jnp.sin(x[0])

        def tanh_layer(h):
            return jnp.tanh(h * w)

        layer = jax.checkpoint(tanh_layer)
        named = jax.named_call(lambda h: h * jnp.cos(w), name="scaled")
        return jnp.sum(named(layer(layer(x[1])))) + jnp.sum(checkpointed_energy(x[2]))

    close(kt.grad(f)(X), jax.grad(f)(X))


# -- jax.vmap batched (frontend/batching.py), or the loop where it cannot be --------------
def vmap_sibling_closure(x):
    c = x[1]

    def scale(v):  # a closure the mapped function calls: it stays the loop model
        return v * c

    return jnp.sum(jax.vmap(lambda r: scale(r) + jnp.sin(r))(x) ** 2)


def vmap_pytrees(x):
    def lane(d, t):
        return {"a": d["p"] * t[0], "b": jnp.sin(d["q"]) + t[1]}

    out = jax.vmap(lane, in_axes=(0, (None, 0)))({"p": x, "q": x * 2}, (x[0], x))
    return jnp.sum(out["a"] * out["b"])


def vmap_nested_closures(x):
    s = jnp.sum(x)

    def outer(r):
        m = jnp.max(r)
        return jax.vmap(lambda q: q * m * s)(r)

    a, b = jax.vmap(lambda r: (jnp.sin(r), jnp.sum(r)))(x)
    return jnp.sum(jax.vmap(outer)(x) ** 2) + jnp.sum(a) * jnp.sum(b)


def vmap_updates_and_lists(x):
    def lane(r):
        out = jnp.zeros(3).at[1].set(r[0] * r[2])
        rows = []
        for v in r:
            rows.append(v * 2.0)
        return out + jnp.stack(rows)

    return jnp.sum(jax.vmap(lane)(x) ** 2)


@pytest.mark.parametrize(
    "f",
    [vmap_sibling_closure, vmap_pytrees, vmap_nested_closures, vmap_updates_and_lists],
    ids=lambda f: f.__name__,
)
def test_vmap_batched_or_as_a_loop(f):
    close(kt.grad(f)(X), jax.grad(f)(X))
    close(kt.jit(kt.grad(f))(X), jax.grad(f)(X))
    v = X * 0.3 - 0.1
    close(kt.hvp(f, (X,), v), jax.grad(lambda a: jnp.vdot(jax.grad(f)(a), v))(X))


def _signed_rows(r):
    if jnp.sum(r) > 0:
        return r * 2.0
    return -r


def vmap_of_a_branch(x):
    return jnp.sum(jax.vmap(_signed_rows)(x) ** 2)


def test_vmap_of_a_python_branch_takes_each_rows_path():
    """A Python `if` on a row's values inside the mapped function (JAX's vmap
    refuses it): batched, each row takes its own branch. Oracle: the rows
    one by one under jax.grad."""
    rows = lambda x: jnp.sum(jnp.stack([_signed_rows(r) for r in x]) ** 2)  # noqa: E731
    close(kt.grad(vmap_of_a_branch)(X), jax.grad(rows)(X))
    close(kt.jit(kt.grad(vmap_of_a_branch))(X), jax.grad(rows)(X))


def _example_loss(w, x):
    return jnp.sum(jnp.tanh(x * w) ** 2)


def per_example_gradients(w):
    g = jax.vmap(kt.grad(_example_loss), in_axes=[None, 0])(w, X)
    return jnp.sum(g**2)


def test_vmap_of_a_gradient_function_is_per_example_gradients():
    """`jax.vmap(kt.grad(loss), in_axes=[None, 0])`: the gradient's graph,
    batched (a library call of it had no rule: caught on the way), with
    `in_axes` a list literal (refused before: 'constant axes expected')."""
    jax_version = lambda w: jnp.sum(jax.vmap(jax.grad(_example_loss), (None, 0))(w, X) ** 2)  # noqa: E731
    w = jnp.array([0.5, -0.3, 1.2])
    close(kt.grad(per_example_gradients)(w), jax.grad(jax_version)(w))
    close(kt.jit(kt.grad(per_example_gradients))(w), jax.grad(jax_version)(w))


def _sq_dist(x, y):
    return jnp.exp(-jnp.sum((x - y) ** 2))


def _cov_map(cov, xs):  # JAX's GP example's Gram matrix
    return jax.vmap(lambda x: jax.vmap(lambda y: cov(x, y))(xs))(xs)


def test_vmap_of_a_lambda_calling_a_function_argument():
    """The lambda reads `cov`, a function given to its caller: batched, it
    was handed to `jax.vmap` as a mapped-over-nothing argument, a
    KTransformError from the trace (JAX's GP and kernel examples); it runs
    as the sequential model now."""
    xs = jnp.arange(6.0).reshape(3, 2) / 4

    def loss(xs):
        return jnp.sum(_cov_map(_sq_dist, xs))

    np.testing.assert_allclose(kt.grad(loss)(xs), jax.grad(loss)(xs), rtol=1e-5, atol=1e-6)


# -- `in_axes` per leaf of a dict argument ------------------------------------------
def _dict_lane(p, x):
    return jnp.tanh(jnp.sum(p["w"] * x) + p["b"])


def vmap_dict_in_axes(p):
    return jnp.sum(jax.vmap(_dict_lane, in_axes=({"w": None, "b": None}, 0))(p, X) ** 2)


def vmap_dict_leaf_mapped(p):
    rows = jax.vmap(lambda q: jnp.sum(q["a"] * q["w"]), in_axes=({"a": 0, "w": None},))
    return jnp.sum(jnp.sin(rows({"a": X, "w": p["w"]})) * p["b"])


def _gram_with(cov, p, xs):  # reads the function `cov` given to it: the sequential model
    lane = lambda q, x: cov(q["c"] * x, q["s"]) + q["s"][0]  # noqa: E731
    return jax.vmap(lane, in_axes=({"c": None, "s": 0}, 0))(p, xs)


def _rbf(x, y):
    return jnp.exp(-jnp.sum((x - y) ** 2))


def vmap_dict_model(p):
    return jnp.sum(_gram_with(_rbf, p, X) ** 2)


DICT_AXES = {
    "batched": (vmap_dict_in_axes, {"w": W[0], "b": 0.3}),
    "leaf-mapped": (vmap_dict_leaf_mapped, {"w": W[0], "b": 0.3}),
    "model": (vmap_dict_model, {"c": 0.7, "s": X * 0.5}),
}


@pytest.mark.parametrize("name", DICT_AXES)
def test_vmap_dict_in_axes(name, mode):
    """`in_axes=({"w": None, "b": 0}, 0)`: a dict entry per leaf of a dict
    argument, batched or as the sequential model (refused before: 'constant
    axes expected'); gradient, jvp and second order against JAX."""
    f, p = DICT_AXES[name]
    close_tree(kt.grad(f)(p), jax.grad(f)(p))
    t = jax.tree_util.tree_map(lambda a: jnp.ones_like(a) * 0.3, p)
    close_tree(kt.jvp(f, (p,), (t,)), jax.jvp(f, (p,), (t,)))
    hvp = lambda q: jax.jvp(jax.grad(f), (q,), (t,))[1]  # noqa: E731
    close_tree(kt.hvp(f, (p,), t), hvp(p))


def test_vmap_dict_in_axes_of_a_function_argument_runs_the_model():
    source = kt.get_source(kt.grad(vmap_dict_model))
    assert "tree_index_at" in source


def test_vmap_dict_in_axes_not_a_prefix_refused():
    """Keys of `in_axes` that are not the argument's: JAX's ValueError, ours named."""
    p = {"c": 0.7, "s": X * 0.5, "extra": 1.0}
    with pytest.raises(ValueError):
        jax.grad(vmap_dict_model)(p)
    with pytest.raises(kt.KTransformError, match="tree prefix"):
        kt.grad(vmap_dict_model)(p)


def vmap_bare_dict_axes(p):
    return jnp.sum(jax.vmap(lambda q: q["s"] * q["c"], in_axes={"s": 0, "c": None})(p))


def test_vmap_bare_dict_in_axes_refused_as_jax_does():
    """A bare dict `in_axes` is JAX's TypeError too (an entry per argument is needed)."""
    p = {"c": 0.7, "s": X}
    with pytest.raises(TypeError):
        jax.grad(vmap_bare_dict_axes)(p)
    with pytest.raises(kt.KTransformError, match=r"in_axes=\(\{\.\.\.\},\)") as info:
        kt.grad(vmap_bare_dict_axes)(p)
    assert "test_lax_control.py" in str(info.value)


def close_tree(a, b, tol=1e-9):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b), (a, b)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        close(u, v, tol)
