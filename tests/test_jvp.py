"""Forward mode by double reverse, and higher derivatives, against JAX.

`kt.jvp` is compared with `jax.jvp`, second and third derivatives with
nested `jax.grad`, on straight-line code, closures, Cells, calls, and on a
primitive JAX cannot differentiate (a `pure_callback` with only a bprop).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from tests.corpus import PROGRAMS

X = jnp.array([0.5, -1.2, 2.0], jnp.float32)
Y = jnp.array([1.5, 0.3, -0.7], jnp.float32)
VX = jnp.array([1.0, 0.5, -2.0], jnp.float32)
VY = jnp.array([0.1, -0.2, 0.3], jnp.float32)


def close(a, b, tol=1e-4):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


def straight(x, y):
    z = jnp.sin(x) * y + jnp.exp(0.3 * x) / (1.0 + y * y)
    return jnp.tanh(z) * x


def helper(a, b):
    return a * jnp.cos(b)


def calls(x, y):
    return helper(x, y) + helper(y, x) ** 2


def closure(x, y):
    scale = jnp.sum(y)

    def inner(v):
        return jnp.sin(v) * scale + v * x

    return inner(x * y)


def tuple_out(x, y):
    return x * y, jnp.sum(x) * y


@pytest.mark.parametrize("fn", [straight, calls, closure, tuple_out], ids=lambda f: f.__name__)
def test_jvp_matches_jax(fn):
    close(kt.jvp(fn, (X, Y), (VX, VY)), jax.jvp(fn, (X, Y), (VX, VY)))


def sin_times(x):
    return jnp.sin(x) * x


def test_jvp_single_input_convention():
    close(kt.jvp(sin_times, X, VX), jax.jvp(sin_times, (X,), (VX,)))


def tangent_sum(xs, vs):
    return jnp.sum(kt.jvp(sin_times, xs, vs)[1])


def test_jvp_inputs_known_when_run_inside_compiled_code():
    """`kt.jvp(fn, inputs, v)` in compiled code, `inputs` an argument: a
    one-tuple or a lone array, told apart when run (as the eager call does);
    the gradient through it has the argument's structure."""
    step = kt.jit(lambda xs, vs: kt.jvp(sin_times, xs, vs))
    want = jax.jvp(sin_times, (X,), (VX,))
    close(step((X,), (VX,)), want)
    close(step(X, VX), want)
    oracle = jax.grad(lambda xs: jnp.sum(jax.jvp(sin_times, xs, (VX,))[1]))((X,))
    got = kt.grad(tangent_sum)((X,), (VX,))
    assert isinstance(got, tuple)
    close(got, oracle)
    close(kt.grad(tangent_sum)(X, VX), oracle[0])
    with pytest.raises(kt.KTransformError, match="takes 1 input but inputs holds 2"):
        step((X, Y), (VX, VY))


def test_jvp_class():
    close(kt.Jvp(straight)((X, Y), (VX, VY)), jax.jvp(straight, (X, Y), (VX, VY)))


class Dense(kt.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.RandomState(0)
        self.weight = kt.Parameter(rng.randn(3, 2).astype(np.float32))

    def construct(self, x):
        return jnp.tanh(x @ self.weight)


def test_jvp_of_cell():
    net = Dense()
    x = jnp.asarray(np.random.RandomState(1).randn(4, 3).astype(np.float32))
    v = jnp.ones_like(x)
    ref = jax.jvp(lambda x: jnp.tanh(x @ net.weight.data), (x,), (v,))
    close(kt.jvp(net, x, v), ref)


STRAIGHT_CORPUS = [
    p
    for p in PROGRAMS.values()
    if not {"control", "loop", "if", "while", "for", "ops", "container", "library", "subscript"}
    & set(p.tags)
    and all(n in ("x", "y", "z", "w", "m", "m2", "v3") for n in p.arg_names)
]


@pytest.mark.parametrize("prog", STRAIGHT_CORPUS, ids=lambda p: p.name)
def test_jvp_on_corpus(prog):
    args = prog.args(0)
    tangents = tuple(jnp.asarray(np.random.RandomState(3).randn(*a.shape), a.dtype) for a in args)
    close(kt.jvp(prog.fn, args, tangents), jax.jvp(prog.fn, args, tangents), 2e-4)


def scalar(x):
    return jnp.sum(jnp.sin(x) * x * x + jnp.exp(0.2 * x))


def test_second_and_third_derivatives():
    g2 = kt.GradOperation()(lambda x: jnp.sum(kt.GradOperation()(scalar)(x)))
    close(g2(X), jax.grad(lambda x: jnp.sum(jax.grad(scalar)(x)))(X))
    g3 = kt.GradOperation()(
        lambda x: jnp.sum(kt.GradOperation()(lambda z: jnp.sum(kt.GradOperation()(scalar)(z)))(x))
    )
    ref3 = jax.grad(lambda x: jnp.sum(jax.grad(lambda z: jnp.sum(jax.grad(scalar)(z)))(x)))
    close(g3(X), ref3(X), 1e-3)


def test_second_derivative_through_closure():
    def f(x):
        c = jnp.cos(x)
        g = lambda v: jnp.sum(v * c * v)
        return g(x)

    close(kt.hessian(f)(X), jax.hessian(f)(X))


def cubic_sum(x):
    return jnp.sum(jnp.sin(x) * x**2)


def two_inputs(x, y):
    return jnp.sin(x) * jnp.sum(x * y) + y**2


@pytest.mark.parametrize("outer", ["jacfwd", "jacrev"])
@pytest.mark.parametrize("inner", ["jacfwd", "jacrev"])
def test_jacobians_of_jacobians(outer, inner):
    """JAX's Hessian idiom `jacfwd(jacrev(f))` and its three siblings: the
    inner Jacobian is lowered where the outer one's target calls it."""
    kt_h = getattr(kt, outer)(getattr(kt, inner)(cubic_sum))
    want = jax.hessian(cubic_sum)(X)
    close(kt_h(X), want)
    close(kt.jit(kt_h)(X), want)
    mixed = getattr(kt, outer)(getattr(kt, inner)(two_inputs, grad_position=1), grad_position=0)
    close(mixed(X, Y), getattr(jax, outer)(getattr(jax, inner)(two_inputs, 1), 0)(X, Y))


def logistic_loss(params):
    """The JAX cookbook's logistic regression loss, its parameters a pytree."""
    w, b = params["w"], params["b"]
    inputs = jnp.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30]])
    preds = 0.5 * (jnp.tanh((inputs @ w + b) / 2) + 1)
    return -jnp.sum(
        jnp.log(preds * jnp.array([1.0, 1.0, 0.0]) + (1 - preds) * jnp.array([0.0, 0.0, 1.0]))
    )


def pair_map(p):
    """A tuple in, a tuple out."""
    a, b = p
    return (jnp.sin(a) * b, jnp.sum(a * a) * b)


# jacfwd of jacfwd (16 s here): tests/test_structure_edges.py
# `test_nested_jacobians_positions[*-jacfwd-jacfwd]` (CI time)
@pytest.mark.parametrize(
    "outer, inner", [("jacfwd", "jacrev"), ("jacrev", "jacfwd"), ("jacrev", "jacrev")]
)
def test_jacobians_of_jacobians_of_pytrees(outer, inner):
    """Nested Jacobians of functions of dicts and tuples give JAX's nesting
    (the lowered inner Jacobian reads rows of trees as a matrix); these raised
    a bare internal error before."""
    params = {"w": jnp.array([0.3, -0.2, 0.5]), "b": jnp.array(0.1)}
    pair = (jnp.array([0.4, -0.7]), jnp.array(1.3))
    dicts, tuples = (logistic_loss, params), (pair_map, pair)
    # CI time: each mixed nesting on one of the two (dicts in; tuples in and out)
    cases = {"jacfwd-jacrev": [dicts], "jacrev-jacfwd": [tuples]}.get(f"{outer}-{inner}")
    for fn, x in cases or [dicts, tuples]:
        got = getattr(kt, outer)(getattr(kt, inner)(fn))(x)
        want = getattr(jax, outer)(getattr(jax, inner)(fn))(x)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        close(got, want)


def test_jacobians_and_hessian():
    f = lambda x: jnp.sin(x) * jnp.sum(x * x)
    close(kt.jacrev(f)(X), jax.jacrev(f)(X))
    close(kt.jacfwd(f)(X), jax.jacfwd(f)(X))
    close(kt.hessian(scalar)(X), jax.hessian(scalar)(X), 1e-3)
    close(kt.hvp(scalar, X, VX), jax.hessian(scalar)(X) @ VX, 1e-3)


# -- a primitive JAX cannot differentiate, with only a bprop ---------------------
class SquareCallback(kt.Primitive):
    """x**2 on the host; its bprop is the only derivative anyone gives."""

    n_inputs = 1

    def impl(self, x):
        return jax.pure_callback(
            lambda v: np.asarray(v) ** 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x
        )


@kt.bprop_getters.register(SquareCallback)
def _get_bprop_square_callback(self):
    def bprop(x, out, dout):
        return (2.0 * x * dout,)

    return bprop


SQUARE = SquareCallback()


def uses_callback(x):
    return jnp.sin(SQUARE(x)) * x


def test_callback_primitive_gets_jvp_and_second_derivative():
    ref = lambda x: jnp.sin(x * x) * x
    close(kt.jvp(uses_callback, X, VX), jax.jvp(ref, (X,), (VX,)))
    scalar_cb = lambda x: jnp.sum(uses_callback(x))
    close(kt.hessian(scalar_cb)(X), jax.hessian(lambda x: jnp.sum(ref(x)))(X), 1e-3)


def branchy(x, y):
    if jnp.sum(x) > 0.0:
        z = jnp.sin(x) * y
    else:
        z = x * x - y
    return z * 2.0 if jnp.max(y) > 1.0 else z


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_jvp_and_second_order_through_if(mode, sign):
    x, y = X * sign, Y * sign
    kt.set_mode(mode)
    try:
        got = kt.jvp(branchy, (x, y), (VX, VY))
        scalar_fn = lambda x: jnp.sum(branchy(x, y) ** 2)
        hess = kt.hessian(scalar_fn)(x)
    finally:
        kt.set_mode("graph")
    close(got, jax.jvp(branchy, (x, y), (VX, VY)))
    close(hess, jax.hessian(scalar_fn)(x), 1e-3)


def test_second_order_through_a_short_static_for_loop():
    def looped(x):
        for k in range(3):  # unrolled at transform time: any order works
            x = jnp.sin(x) * (1.0 + 0.1 * k)
        return jnp.sum(x)

    close(kt.hessian(looped)(X), jax.hessian(looped)(X), 1e-3)
    close(kt.jvp(looped, X, VX), jax.jvp(looped, (X,), (VX,)))


def test_second_order_through_a_while_loop():
    """The whole control corpus is in test_higher_order_control.py; this is
    the smallest case, next to the `for` and `if` ones above."""

    def looped(x):
        while jnp.sum(x) < 10.0:
            x = x * 1.5 + 1.0
        return jnp.sum(x * x)

    close(kt.hessian(looped)(X), jax.hessian(looped)(X), 1e-3)
    close(kt.jvp(looped, X, VX), jax.jvp(looped, (X,), (VX,)))


def test_a_tangent_unlike_its_input_is_refused():
    """JAX's rule: a tangent has its input's structure and shapes. A tuple
    given to kt.hvp for one array failed deep in the program with a bare
    TypeError; a shorter tangent would broadcast."""
    x, v = jnp.array([0.3, -0.7, 1.1]), jnp.array([1.0, 0.5, -0.2])

    def f(a):
        return jnp.sum(a[0] * jnp.sin(a))

    with pytest.raises(kt.KTransformError, match="tangent for input 0 must have"):
        kt.hvp(f, (x,), (v,))
    with pytest.raises(kt.KTransformError, match="tangent for input 0 must have"):
        kt.jvp(f, x, v[:2])
    want = jax.grad(lambda a: jnp.vdot(jax.grad(f)(a), v))(x)
    np.testing.assert_allclose(kt.hvp(f, (x,), v), want, rtol=1e-5)


def _sin_times(a):
    return jnp.sin(a) * a


_batched = jax.vmap(_sin_times)


def _jvp_of_batched(x, v):
    return kt.jvp(_batched, x, v)[1] + kt.jvp(jnp.tanh, x, v)[1]


def test_a_library_wrapper_as_the_target():
    """`kt.jvp(jax.vmap(f), x, v)`: JAX's wrapper is called, not parsed (its
    `try` was refused), also inside compiled code, where a library target
    takes as many arguments as `inputs` holds (`kt.jvp(jnp.tanh, x, v)`
    there called tanh with x and v)."""
    x = jnp.array([[0.3, -0.7, 1.1], [0.5, 0.2, -1.0]])
    v = x * 0.5 + 0.1
    want = jax.jvp(_batched, (x,), (v,))[1]
    np.testing.assert_allclose(kt.jvp(_batched, x, v)[1], want, rtol=1e-6)
    want = jax.vjp(_batched, x)[1](v)[0]
    np.testing.assert_allclose(kt.vjp(_batched, x)[1](v)[0], want, rtol=1e-6)
    want = jax.jvp(_batched, (x,), (v,))[1]
    both = want + jax.jvp(jnp.tanh, (x,), (v,))[1]
    np.testing.assert_allclose(kt.jit(_jvp_of_batched)(x, v), both, rtol=1e-6)
    pairs = jax.vmap(lambda a, b: jnp.sum(a * b), in_axes=(0, None))
    got = kt.jvp(pairs, (x, x[0]), (v, v[0]))[1]
    np.testing.assert_allclose(got, jax.jvp(pairs, (x, x[0]), (v, v[0]))[1], rtol=1e-6)
