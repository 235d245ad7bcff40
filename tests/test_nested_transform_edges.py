"""Nested transforms at their edges: a Hessian (a transform of a gradient
function) sees a name rebound since it was made; `kt.jit` of a Hessian or
Jacobian of a function with a defaulted parameter; a tangent of the wrong
structure inside transformed code; `hasattr` on a module while parsing; the
line a refusal shows; `random.gauss` run as Python; a lambda written in a
`for` statement's header. Oracles: JAX's transforms of the same functions."""

import contextlib
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

X = jnp.array([0.3, -0.7, 1.1])
V = jnp.array([1.0, 0.5, -0.2])
SCALE = 2.0


def scaled(x):
    return SCALE * jnp.sum(x**3)


def scaled_hessian(x):  # closed form
    return jnp.diag(6.0 * SCALE * x)


def close(a, b):
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.allclose(p, q, atol=1e-5) for p, q in pairs
    )


# -- a transform of a gradient function reads the names its function reads -------------
def test_transforms_of_gradients_see_a_rebound_global():
    global SCALE
    made = {
        "hessian": kt.hessian(scaled),
        "jit(hessian)": kt.jit(kt.hessian(scaled)),
        "jacfwd(grad)": kt.jacfwd(kt.grad(scaled)),
        "jacrev(jacrev)": kt.jacrev(kt.jacrev(scaled)),
    }
    try:
        for name, fn in made.items():
            SCALE = 2.0
            assert close(fn(X), scaled_hessian(X)), name
            SCALE = 5.0  # the old graph gave the Hessian for 2.0 (no error)
            assert close(fn(X), scaled_hessian(X)), name
    finally:
        SCALE = 2.0


def test_gradient_of_a_gradient_and_its_callers_see_a_rebound_global():
    global SCALE
    g = kt.grad(scaled)

    def user(x):  # a parsed function calling a gradient function
        return jnp.sum(g(x) ** 2)

    gg = kt.grad(lambda t: kt.grad(scaled)(t * X)[0])
    try:
        for scale in (2.0, 5.0):
            SCALE = scale  # d/dx sum((3 s x^2)^2) = 36 s^2 x^3; d/dt 3 s (t x0)^2 = 6 s t x0^2
            assert close(kt.grad(user)(X), 36.0 * scale**2 * X**3)
            assert close(gg(0.5), 6.0 * scale * 0.5 * X[0] ** 2)
    finally:
        SCALE = 2.0


def test_hessian_sees_a_rebound_closure_cell_and_attribute():
    def make():
        scale = 2.0

        def h(x):
            return scale * jnp.sum(x**3)

        def set_scale(v):
            nonlocal scale
            scale = v

        return h, set_scale

    h, set_scale = make()
    hess = kt.hessian(h)
    hess(X)
    set_scale(5.0)
    assert close(hess(X), jnp.diag(30.0 * X))

    class Config:
        k = 2.0

    cfg = Config()
    cfg.k = 2.0

    def h2(x):
        return cfg.k * jnp.sum(x**3)

    hess2 = kt.hessian(h2)
    hess2(X)
    cfg.k = 5.0
    assert close(hess2(X), jnp.diag(30.0 * X))


# -- defaulted parameters inside transformed code -----------------------------------------
def energy(q, k=3.0):
    d = q - jnp.roll(q, 1)
    return 0.5 * k * jnp.sum((d - 1.0) ** 2 * q)


def test_jit_of_hessian_and_jacobians_of_a_function_with_a_default():
    hess = jax.hessian(energy)(X)
    assert close(kt.jit(kt.hessian(energy))(X), hess)
    assert close(kt.jit(kt.jacfwd(kt.grad(energy)))(X), hess)
    assert close(kt.jacfwd(kt.jacrev(energy))(X), hess)


def test_jvp_hvp_vjp_inside_jit_of_a_function_with_a_default():
    jvp = kt.jit(lambda x, v: kt.jvp(energy, (x,), (v,)))(X, V)
    assert close(jvp, jax.jvp(energy, (X,), (V,)))
    lone = kt.jit(lambda x, v: kt.jvp(energy, x, v))(X, V)  # was x[0] with k=x[1]: 0.0
    assert close(lone, jax.jvp(energy, (X,), (V,)))
    hvp = kt.jit(lambda x, v: kt.hvp(energy, (x,), v))(X, V)
    assert close(hvp, jax.hessian(energy)(X) @ V)
    grads = kt.jit(lambda x: kt.vjp(energy, x)[1](1.0))(X)
    assert len(grads) == 1  # the input given, not the default
    assert close(grads[0], jax.grad(energy)(X))


def test_a_jacobian_given_a_keyword_inside_transformed_code():
    # once dropped (then refused): passed, not differentiated, as JAX's and as outside
    expected = jax.jacrev(energy)(X, k=2.0)
    assert close(kt.jit(lambda x: kt.jacrev(energy)(x, k=2.0))(X), expected)
    assert close(kt.jacrev(energy)(X, k=2.0), expected)


# -- tangents checked inside transformed code ---------------------------------------------
def tanh_sq(x):
    return jnp.sum(jnp.tanh(x) ** 2 * x)


def test_hvp_and_jvp_tangent_of_the_wrong_structure_under_jit():
    with pytest.raises(kt.KTransformError, match="kt.hvp: the tangent for input 0"):
        kt.jit(lambda x, v: kt.hvp(tanh_sq, (x,), (v,)))(X, V)
    with pytest.raises(kt.KTransformError, match="kt.jvp: the tangent for input 0"):
        kt.jit(lambda x, v: kt.jvp(tanh_sq, (x,), (v[:2],)))(X, V)
    with pytest.raises(kt.KTransformError, match="2 inputs but 1 tangents"):
        kt.jit(lambda x, v: kt.jvp(lambda a, b: jnp.sum(a * b), (x, x), (v,)))(X, V)
    right = kt.jit(lambda x, v: kt.hvp(tanh_sq, (x,), v))(X, V)
    assert close(right, jax.hessian(tanh_sq)(X) @ V)


# -- attributes read while parsing ----------------------------------------------------------
def gelu_if_there(x):
    act = jax.nn.gelu if hasattr(jax.nn, "gelu") else jnp.tanh
    fallback = getattr(jax.nn, "no_such_activation", jnp.sin)
    return jnp.sum(act(x) + fallback(x))


def test_hasattr_and_getattr_default_of_a_module_are_read_while_parsing():
    hess = jax.hessian(gelu_if_there)(X)
    assert close(kt.jit(kt.hessian(gelu_if_there))(X), hess)  # was refused as host code
    assert close(kt.hessian(gelu_if_there)(X), hess)


def test_hasattr_of_an_object_is_guarded():
    class Options:
        pass

    opts = Options()

    def f(x):
        return jnp.sum(x * opts.scale) if hasattr(opts, "scale") else jnp.sum(x)

    g = kt.grad(f)
    assert close(g(X), jnp.ones(3))
    opts.scale = 3.0  # added since: hasattr is now True, as Python sees it
    assert close(g(X), jnp.full(3, 3.0))

    class Flags:
        pass

    def h(x):
        return jnp.sum(x * getattr(Flags, "factor", 1.0)) * (
            2.0 if hasattr(Flags, "double") else 1.0
        )

    g = kt.grad(h)
    assert close(g(X), jnp.ones(3))
    Flags.factor, Flags.double = 3.0, True  # on the class, later
    assert close(g(X), jnp.full(3, 6.0))


def printing(x):
    print("f ran")
    return jnp.sum(jnp.sin(x))


def test_refusal_of_host_code_under_jit_of_hessian_shows_the_users_line():
    with pytest.raises(kt.KTransformError) as info:
        kt.jit(kt.hessian(printing))(X)
    text = str(info.value)
    assert __file__ in text and 'print("f ran")' in text
    assert "targets.py" not in text


# -- stdlib random: host calls ---------------------------------------------------------------
def noisy(w):
    return jnp.sum(w * random.gauss(0.0, 1.0)) + jnp.sum(w * random.normalvariate(0.0, 1.0))


def test_random_gauss_runs_as_python_once_per_call():
    w = jnp.array([0.1, 0.2])
    g = kt.grad(noisy)
    for seed in (0, 1):  # a new draw per call, Python's numbers
        random.seed(seed)
        expected = jax.grad(noisy)(w)
        random.seed(seed)
        assert close(g(w), expected)


# -- a lambda in a statement's header ---------------------------------------------------------
def test_lambda_in_a_for_header_and_closing_brackets():
    x = jnp.array([0.3, -0.7])
    for name, f in [("quartic", lambda v: jnp.sum(v**4)), ("sine", lambda v: jnp.sum(jnp.sin(v)))]:
        assert close(kt.grad(f)(x), jax.grad(f)(x)), name
    # fmt: off
    cases = [
        ("cube", lambda v: jnp.sum(v**3)), ("cos", lambda v: jnp.sum(jnp.cos(v)))]  # noqa: E501
    # fmt: on
    for name, f in cases:
        assert close(kt.grad(f)(x), jax.grad(f)(x)), name


def test_lambdas_in_with_and_elif_headers():
    x = jnp.array([0.3, -0.7])
    with contextlib.nullcontext(lambda v: jnp.sum(jnp.sin(v) * v)) as f:
        assert close(kt.grad(f)(x), jax.grad(f)(x))
    if x.shape == (5,):
        pass
    elif (f := lambda v: jnp.sum(v**5)) is not None:
        assert close(kt.grad(f)(x), jax.grad(f)(x))
