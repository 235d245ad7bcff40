"""Regression tests for issue 11 ("Python semantics, exactly") and issue 14.

Each class of bug has one `test_regression_<what>`, checked against JAX
(`jax.grad`, `jax.jvp`, `jax.hessian`) on the same program, eagerly and
jitted. The XLA abort is reproduced in a subprocess, so a regression cannot
take the test process down.
"""

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform.runtime import bounds

MODES = ("eager", "graph")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=MODES)
def mode(request):
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


def close(got, want, tol=1e-5):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol)


# -- 5: a `return` no path takes, inside a traced while -------------------------------
FLAG = True


def loop_with_untaken_return(x):
    k = 0
    y = x
    while jnp.sum(x) < 10 and k < 5:
        x = x * 1.5 + 0.1
        k = k + 1
        if not FLAG:
            return jnp.sum(jnp.sin(x))
        y = y + x
    return jnp.sum(x * y)


def loop_with_taken_return(x):
    k = 0
    while jnp.sum(x) < 10 and k < 5:
        x = x * 1.5 + 0.1
        k = k + 1
        if FLAG:
            return jnp.sum(jnp.sin(x))
    return jnp.sum(x * x)


@pytest.mark.parametrize("fn", [loop_with_untaken_return, loop_with_taken_return])
def test_regression_while_static_return_jvp_and_second_order(mode, fn):
    x, v = jnp.array([0.5, 0.7]), jnp.array([1.0, 0.3])
    close(kt.jvp(fn, x, v), jax.jvp(fn, (x,), (v,)), 1e-4)
    close(kt.hessian(fn)(x), jax.hessian(fn)(x), 1e-4)

    def grad_sum(y):
        return jnp.sum(kt.grad(fn)(y))

    close(kt.grad(grad_sum)(x), jax.grad(lambda y: jnp.sum(jax.grad(fn)(y)))(x), 1e-4)


# -- 6: NumPy inputs in eager mode ----------------------------------------------------
def at_on_a_slice(x):
    y = x[1:].at[0].add(x[0] * 2.0)
    return jnp.sum(y * y)


def test_regression_eager_numpy_inputs(mode):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    v = np.array([0.5, -1.0, 2.0], np.float32)
    want = jax.grad(at_on_a_slice)(jnp.asarray(x))
    close(kt.grad(at_on_a_slice)(x), want)
    close(kt.GradOperation()(at_on_a_slice)(x), want)
    close(kt.vjp(at_on_a_slice, x)[1](np.float32(1.0)), (want,))
    close(kt.jvp(at_on_a_slice, x, v), jax.jvp(at_on_a_slice, (x,), (v,)))
    close(kt.compile(at_on_a_slice)(x), at_on_a_slice(jnp.asarray(x)))


# -- 7: the gradient API inside differentiated code -----------------------------------
def inner(x):
    return jnp.sum(jnp.sin(x) * x)


def vec(x):
    return jnp.sin(x) * x


def uses_grad(x):
    return jnp.sum(kt.grad(inner)(x) ** 2)


def uses_value_and_grad(x):
    value, g = kt.value_and_grad(inner)(x)
    return value * jnp.sum(g)


def uses_vjp(x):
    out, vjp_fn = kt.vjp(vec, x)
    return jnp.sum(vjp_fn(out)[0])


def uses_jvp(x):
    out, tangent = kt.jvp(vec, x, x)
    return jnp.sum(out * tangent)


def uses_grad_operation(x):
    return jnp.sum(kt.GradOperation()(inner)(x) ** 2)


def uses_jacrev(x):
    return jnp.sum(kt.jacrev(vec)(x) ** 2)


def uses_jacfwd(x):
    return jnp.sum(jnp.sin(kt.jacfwd(vec)(x)))


def uses_hessian(x):
    return jnp.sum(kt.hessian(inner)(x) ** 2)


def uses_hvp(x):
    return jnp.sum(kt.hvp(inner, x, x) ** 2)


REFERENCES = {
    uses_grad: lambda x: jnp.sum(jax.grad(inner)(x) ** 2),
    uses_value_and_grad: lambda x: (
        jax.value_and_grad(inner)(x)[0] * jnp.sum(jax.value_and_grad(inner)(x)[1])
    ),
    uses_vjp: lambda x: jnp.sum(jax.vjp(vec, x)[1](vec(x))[0]),
    uses_jvp: lambda x: jnp.sum(vec(x) * jax.jvp(vec, (x,), (x,))[1]),
    uses_grad_operation: lambda x: jnp.sum(jax.grad(inner)(x) ** 2),
    uses_jacrev: lambda x: jnp.sum(jax.jacrev(vec)(x) ** 2),
    uses_jacfwd: lambda x: jnp.sum(jnp.sin(jax.jacfwd(vec)(x))),
    uses_hessian: lambda x: jnp.sum(jax.hessian(inner)(x) ** 2),
    uses_hvp: lambda x: jnp.sum(jax.jvp(jax.grad(inner), (x,), (x,))[1] ** 2),
}


@pytest.mark.parametrize("fn", list(REFERENCES), ids=lambda f: f.__name__)
def test_regression_grad_api_inside_differentiated_code(mode, fn):
    x = jnp.arange(3.0) * 0.3 + 0.1
    ref = REFERENCES[fn]
    close(kt.compile(fn)(x), ref(x), 1e-4)
    close(kt.grad(fn)(x), jax.grad(ref)(x), 1e-4)


# -- 8: the getitem gradient XLA's simplifier aborted on ------------------------------
CRASHER = """
import jax, jax.numpy as jnp, numpy as np
import k_transform as kt

def f(x):
    return jnp.sum(jnp.cumsum(x, axis=0)[None, :][0][::-1])

x = jnp.arange(4.0)
np.testing.assert_allclose(kt.grad(f)(x), jax.grad(f)(x))
kt.set_mode("eager")
np.testing.assert_allclose(kt.grad(f)(x), jax.grad(f)(x))
print("OK")
"""


def test_regression_getitem_grad_none_axis_with_reversed_cumsum_in_subprocess(tmp_path):
    script = tmp_path / "crasher.py"  # k_transform reads the program's source from a file
    script.write_text(textwrap.dedent(CRASHER))
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr[-2000:]


def strided_slices(x):
    a = x[::-1] * 1.0
    b = x[None, 1:][0]
    c = x[5:0:-2]
    d = x[1::3]
    e = x[None][:, ::2][0]
    return jnp.sum(jnp.sin(a[:3]) * b[:3]) + jnp.sum(c * c) + jnp.sum(d) + jnp.sum(jnp.cos(e))


def test_regression_getitem_grad_strided_and_new_axis_slices(mode):
    x = jnp.arange(7.0) * 0.25
    close(kt.grad(strided_slices)(x), jax.grad(strided_slices)(x))
    v = jnp.linspace(-1.0, 1.0, 7)
    close(kt.jvp(strided_slices, x, v), jax.jvp(strided_slices, (x,), (v,)))


# -- 9: integer inputs ----------------------------------------------------------------
def square(x):
    return x * x


def scaled(x, n):
    return jnp.sum(x * n * n)


def scalar_square(x):
    return jnp.sum(x * x)


@pytest.mark.parametrize(
    "call",
    [
        # kt.grad and kt.value_and_grad follow MindSpore's grad (integer inputs
        # give integer gradients or are left out: tests/test_ms_dropin.py)
        lambda x: kt.jvp(scalar_square, x, x),
        lambda x: kt.jacfwd(square)(x),
        lambda x: kt.jacrev(square)(x),
        lambda x: kt.hessian(scalar_square)(x),
        lambda x: kt.hvp(scalar_square, x, x),
    ],
)
@pytest.mark.parametrize("x", [3, jnp.arange(3)], ids=["python_int", "int32_array"])
def test_regression_integer_inputs_raise_in_jax_style_api(mode, call, x):
    with pytest.raises(TypeError):
        jax.grad(scalar_square)(x)  # the oracle: JAX refuses integer inputs too
    with pytest.raises(TypeError, match="real- or complex-valued inputs"):
        call(x)


def test_regression_integer_inputs_jvp_tangents_as_jax(mode):
    x, y = jnp.array([0.5, 1.5]), jnp.array([2, 3], jnp.int32)
    float0 = np.zeros(2, jax.dtypes.float0)
    want = jax.jvp(scaled, (x, y), (jnp.ones(2), float0))
    close(kt.jvp(scaled, (x, y), (jnp.ones(2), float0)), want)
    close(kt.jvp(scaled, (x, y), (jnp.ones(2), jnp.zeros(2, jnp.int32))), want)
    with pytest.raises(TypeError):
        jax.jvp(scaled, (x, y), (jnp.ones(2), jnp.ones(2)))  # the oracle refuses too
    with pytest.raises(TypeError, match="real- or complex-valued inputs .* input 1 "):
        kt.jvp(scaled, (x, y), (jnp.ones(2), jnp.ones(2)))
    with pytest.raises(TypeError, match="input 1"):
        kt.jvp(scaled, (x, y), (jnp.ones(2), jnp.ones(2, jnp.int32)))


def test_regression_integer_inputs_vjp_gives_zeros_as_jax(mode):
    x = jnp.arange(3)
    out, vjp_fn = kt.vjp(scalar_square, x)
    want_out, want_vjp = jax.vjp(scalar_square, x)
    assert want_vjp(jnp.ones(()))[0].dtype == jax.dtypes.float0  # JAX: a zero of no dtype
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(vjp_fn(jnp.ones((), jnp.int32))[0], jnp.zeros(3, jnp.int32))


def test_regression_integer_inputs_grad_operation_matches_mindspore(mode):
    # MindSpore 2.10: GradOperation()(x * x) at int32 [3, 4] is int32 [6, 8].
    x = jnp.array([3, 4], jnp.int32)
    want = jax.grad(scalar_square)(x.astype(jnp.float32)).astype(jnp.int32)
    got = kt.GradOperation()(square)(x)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, want)
    y, n = jnp.array([3.0, 4.0]), jnp.array([2, 5], jnp.int32)
    dy, dn = kt.GradOperation(get_all=True)(scaled)(y, n)
    want_y, want_n = jax.grad(scaled, argnums=(0, 1))(y, n.astype(jnp.float32))
    close(dy, want_y)
    assert dn.dtype == jnp.int32
    np.testing.assert_array_equal(dn, want_n.astype(jnp.int32))
    close(kt.grad(scaled)(y, n), jax.grad(scaled)(y, n))  # an integer input not differentiated


# -- 10: a while loop whose condition never becomes false -----------------------------
@pytest.fixture
def small_loop_bound():
    saved = bounds.DEFAULT_LOOP_BOUND, dict(bounds._bounds)
    kt.set_loop_bound(4)
    yield
    bounds.DEFAULT_LOOP_BOUND = saved[0]
    bounds._bounds.clear()
    bounds._bounds.update(saved[1])


def forever_static(x):
    k = 0
    while k >= 0:
        x = x * 0.5
        k = k + 1
    return jnp.sum(x)


def forever_data(x):
    while jnp.sum(x) > -1.0:
        x = x * 0.5 + 1.0
    return jnp.sum(x)


def forever_for_jvp(x):
    k = 0
    while k >= 0:
        x = x * 0.5
        k = k + 1
    return jnp.sum(x)


def forever_for_vjp(x):
    while jnp.sum(x) > -1.0:
        x = x * 0.5 + 1.0
    return jnp.sum(x)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: kt.grad(forever_static)(x),
        lambda x: kt.grad(forever_data)(x),
        lambda x: kt.jvp(forever_for_jvp, x, x),
        lambda x: kt.vjp(forever_for_vjp, x),
    ],
    ids=["grad_static", "grad_data", "jvp", "vjp_forward"],
)
def test_regression_eager_endless_while_raises(small_loop_bound, call):
    kt.set_mode("eager")
    try:
        with pytest.raises(
            kt.KTransformError, match=r"while loop at .*test_semantics_fixes.py:\d+"
        ):
            call(jnp.ones(2))
    finally:
        kt.set_mode("graph")


def long_loop(x):
    k = 0
    while k < 200:
        x = x * 0.999 + 0.001 * jnp.sin(x)
        k = k + 1
    return jnp.sum(x)


def test_regression_eager_long_while_grows_its_bound(small_loop_bound):
    # bound 4 grows in place to 4 * 2**6 = 256, as jit would by retracing
    kt.set_mode("eager")
    try:
        x = jnp.array([0.3, 1.2])
        close(kt.grad(long_loop)(x), jax.grad(long_loop)(x), 1e-4)
        close(kt.compile(forever_data_bounded)(x), forever_data_bounded(x))
    finally:
        kt.set_mode("graph")


def forever_data_bounded(x):
    k = 0
    while k < 2000:  # far past the bound: plain kt.compile code is never bounded
        x = x * 0.5 + 1.0
        k = k + 1
    return jnp.sum(x)


# -- 14: graphs cached by id(cell) ----------------------------------------------------
class Scaled(kt.Cell):
    def __init__(self, w):
        super().__init__()
        self.w = kt.Parameter(np.asarray(w, np.float32), name="w")

    def construct(self, x):
        return jnp.sum(jnp.sin(x * self.w))


def scaled_reference(x, w):
    return jnp.sum(jnp.sin(x * w))


def test_regression_fresh_cells_never_reuse_a_dead_cells_graph(mode):
    x = jnp.array([0.3, 0.7])
    for k in range(30):
        w = np.array([1.0 + k, 0.5 * k], np.float32)
        net = Scaled(w)
        params = kt.ParameterTuple(net.trainable_params())
        got_w = kt.GradOperation(get_by_list=True)(net, params)(x)[0]
        close(got_w, jax.grad(scaled_reference, argnums=1)(x, w))
        close(kt.grad(net)(x), jax.grad(scaled_reference)(x, w))
        del net, params
        gc.collect(1)  # the young generations: a full collection of a long test run is slow


# -- gradient functions fill in the target's default arguments -----------------------


def with_defaults(x, scale=2.0, flag=True):
    y = jnp.sin(x) * scale
    if flag:
        y = y * y
    return jnp.sum(y)


def test_regression_gradient_of_function_with_defaults(mode):
    x = jnp.arange(3.0)
    for extra in [(), (3.0,), (3.0, False)]:
        want = jax.grad(with_defaults)(x, *extra)
        close(kt.grad(with_defaults)(x, *extra), want)
        close(kt.GradOperation()(with_defaults)(x, *extra), want)
    close(kt.grad(with_defaults)(x, flag=False), jax.grad(with_defaults)(x, flag=False))
