"""Gradients at dtype edges (session 27): casts to integer or bool dtypes, and
complex values, each against JAX (or MindSpore's documented Cast rule)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
import k_transform.mindspore as ms

X = jnp.array([1.7, -2.2, 0.5, 3.0])


def _astype_int(x):
    return jnp.sum(x * x.astype(jnp.int32))


def _astype_bool(x):
    return jnp.sum(x * x.astype(bool))


def _asarray_int(x):
    return jnp.sum(x * jnp.asarray(x, dtype=jnp.int32))


def _uint8_of_abs(x):  # an integer intermediate's rule (Abs) before the cast
    return jnp.sum(jnp.abs(x).astype(jnp.uint8) * x)


def _abs_of_int(x):  # the int -> float cast gives the int Abs rule a zero
    return jnp.sum(jnp.abs(x.astype(jnp.int32)).astype(jnp.float32) * x)


def _where_int(x):
    return jnp.sum(jnp.where(x > 0, x.astype(jnp.int32), 0) * x)


def _quantized(x):  # float -> int -> float round trip (once a ValueError)
    return jnp.sum(x.astype(jnp.int32).astype(x.dtype) * x)


def _lax_convert(x):
    return jnp.sum(x * jax.lax.convert_element_type(x, jnp.int8))


CASTS = [_astype_int, _astype_bool, _asarray_int, _uint8_of_abs, _abs_of_int, _where_int]
CASTS += [_quantized, _lax_convert]


@pytest.mark.parametrize("f", CASTS, ids=lambda f: f.__name__)
def test_cast_to_integer_has_zero_derivative_as_in_jax(f):
    np.testing.assert_allclose(kt.grad(f)(X), jax.grad(f)(X), rtol=1e-6)


def test_cast_to_integer_second_order_is_zero():
    np.testing.assert_allclose(kt.hessian(_astype_int)(X), jax.hessian(_astype_int)(X), atol=1e-6)


def test_mindspore_cast_passes_the_gradient_through_truncated():
    """MindSpore's Cast rule, `cast(dout, dtype(x))` with the sensitivity
    already cast to the integer output dtype (checked against MindSpore 2.x:
    grad of sum(x * Cast(x, int32)) is 2 * int(x))."""
    expected = 2.0 * jnp.trunc(X)

    def prim(x):
        return (x * ms.ops.Cast()(x, ms.int32)).sum()

    def functional(x):
        return (x * ms.ops.cast(x, ms.int32)).sum()

    def round_trip(x):
        return (ms.ops.cast(ms.ops.cast(x, ms.int32), ms.float32) * x).sum()

    for f in (prim, functional, round_trip):
        np.testing.assert_allclose(ms.grad(f)(X), expected, rtol=1e-6, err_msg=f.__name__)


Z = jnp.array([1.0 + 2.0j, -3.0 + 0.5j, 0.3 - 1.0j])
R = jnp.array([1.0, -2.0, 0.5])
A = jnp.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]) + 0.5j


def _abs_z(z):
    return jnp.sum(jnp.abs(z))


def _abs_plus_imag(z):
    return jnp.sum(jnp.abs(z) + jnp.imag(z))


def _abs_of_square(z):
    return jnp.sum(jnp.abs(z * z))


def _analytic(x):  # a real input through complex intermediates
    c = x + 1j * x[::-1]
    return jnp.sum(jnp.abs(c * c))


COMPLEX = [
    (_abs_z, Z),
    (_abs_plus_imag, Z),
    (_abs_of_square, Z),
    (_analytic, R),
    (lambda x: jnp.sum(jnp.abs(A @ x)), R),
    (lambda x: jnp.sum(jnp.abs(jnp.dot(jnp.stack([x, x]), A.T))), R),
    (lambda x: jnp.abs(jnp.einsum("i,i->", x, Z)), R),
    (lambda x: jnp.sum(jnp.abs(jnp.outer(x, Z))), R),
    (lambda x: jnp.sum(jnp.abs(jnp.concatenate([x, Z]) ** 2)), R),
    (lambda x: jnp.sum(jnp.abs(jnp.stack([x, Z]) ** 2)), R),
    (lambda x: jnp.sum(jnp.abs(x.astype(jnp.complex64) * Z)), R),
]


@pytest.mark.parametrize("f, a", COMPLEX, ids=range(len(COMPLEX)))
def test_complex_gradients_follow_jax(f, a):
    """JAX's convention: d/dre - 1j d/dim for a complex input, and a real
    input's gradient is real (the real part of its complex cotangent)."""
    ours, ref = kt.grad(f)(a), jax.grad(f)(a)
    assert ours.dtype == ref.dtype
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_real_input_through_complex_values_hessian():
    np.testing.assert_allclose(
        kt.jit(kt.hessian(_analytic))(R), jax.hessian(_analytic)(R), rtol=1e-5, atol=1e-5
    )


def test_jit_hessian_of_an_empty_array():
    """`ravel_rows` once reshaped to `(0, -1)`: ZeroDivisionError."""

    def loss(x):
        return jnp.sum(x * 2.0)

    x = jnp.zeros((0,))
    assert kt.jit(kt.hessian(loss))(x).shape == jax.hessian(loss)(x).shape == (0, 0)


def test_grad_spelled_with_argnums_refuses_integer_inputs_as_jax():
    def loss(x, k):
        return jnp.sum(x * k)

    x, k = jnp.array([1.5, -2.5, 0.5]), jnp.array([1, 2, 3])
    with pytest.raises(TypeError):
        jax.grad(loss, argnums=1)(x, k)
    for api in (kt.grad, kt.value_and_grad):
        with pytest.raises(TypeError, match="input 1 is .* int32"):
            api(loss, argnums=1)(x, k)
    # MindSpore's spelling keeps MindSpore's rule: the gradient in int32
    assert kt.grad(loss, grad_position=1)(x, k).dtype == jnp.int32
    np.testing.assert_allclose(kt.grad(loss, argnums=0)(x, k), jax.grad(loss)(x, k))
