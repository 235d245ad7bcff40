"""Linear algebra at its edges (session 27): where a rule's factor is
infinite (repeated eigen/singular values, a zero singular value, a singular
matrix) and the cotangent it multiplies is zero, JAX's symbolic zero never
forms the product; ours must not turn it into NaN. Float64; oracle:
`jax.grad`, `jax.hessian`, `jax.jacfwd(jax.grad)` of the same function, at
the edge and at an ordinary point (where forward mode, which transposes
the rule at a zero cotangent, must still see the vectors' tangents).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt

pytestmark = pytest.mark.usefixtures("x64")

RNG = np.random.RandomState(27)
_B = RNG.randn(3, 3)
SYMMETRIC = _B + _B.T
TALL = RNG.randn(3, 2)


def eigenvalues(m):
    w, v = jnp.linalg.eigh(m)  # the vectors unused: a zero cotangent
    return jnp.sum(w * jnp.arange(1.0, 4.0))


def top_eigenvalue(m):
    return jnp.max(jnp.linalg.eigvalsh(m))


def eigen_both(m):
    w, v = jnp.linalg.eigh(m)
    return jnp.sum(w**2) + jnp.sum(jnp.sin(v @ jnp.diag(w) @ v.T))


def singular_values(m):
    u, s, vt = jnp.linalg.svd(m, full_matrices=False)
    return jnp.sum(s * jnp.arange(1.0, 1.0 + s.shape[0]))


def svd_both(m):
    u, s, vt = jnp.linalg.svd(m, full_matrices=False)
    return jnp.sum(s) + jnp.sum(jnp.sin((u * s) @ vt))


def det(m):
    return jnp.linalg.det(m)


def det_sum(m):
    return jnp.sum(jnp.linalg.det(m))


def det_squared(m):
    return jnp.linalg.det(m) ** 2


def det_outer(v):
    return jnp.linalg.det(jnp.outer(v, v))


# The oracle for det's derivatives: JAX on the same programs with det as its
# Leibniz polynomial, whose derivatives of every order are finite (JAX 0.10's
# det of a 2x2 or 3x3 was that polynomial; 0.11's custom rule gives NaN Hessians
# at singular matrices)
def leibniz_det(m):
    n = m.shape[-1]
    total = 0.0
    for perm in itertools.permutations(range(n)):
        inversions = sum(perm[i] > perm[j] for i in range(n) for j in range(i + 1, n))
        term = (-1.0) ** inversions
        for i in range(n):
            term = term * m[..., i, perm[i]]
        total = total + term
    return total


POLYNOMIAL = {
    "det": leibniz_det,
    "det_sum": lambda m: jnp.sum(leibniz_det(m)),
    "det_squared": lambda m: leibniz_det(m) ** 2,
    "det_outer": lambda v: leibniz_det(jnp.outer(v, v)),
}


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "fn, m",
    [
        (eigenvalues, np.diag([1.0, 1.0, 2.0])),
        (top_eigenvalue, np.eye(3)),
        (eigenvalues, SYMMETRIC),
        (singular_values, np.eye(3)),
        (singular_values, np.diag([2.0, 0.0, 0.0])),
        (singular_values, np.zeros((3, 2))),  # tall: du / s at s = 0
        (singular_values, np.zeros((2, 3))),  # wide: dv / s
        (singular_values, TALL),
    ],
    ids=[
        "eigh-repeated",
        "eigvalsh-identity",
        "eigh-ordinary",
        "svd-identity",
        "svd-zeros",
        "svd-tall-zero",
        "svd-wide-zero",
        "svd-ordinary",
    ],
)
def test_values_only_gradient_is_finite_at_repeated_values(fn, m):
    """A loss of eigen/singular values alone: finite (JAX's), was all NaN."""
    m = jnp.asarray(m)
    _close(kt.grad(fn)(m), jax.grad(fn)(m))


@pytest.mark.parametrize("fn, m", [(eigen_both, SYMMETRIC), (svd_both, TALL)], ids=["eigh", "svd"])
def test_forward_over_reverse_at_ordinary_point(fn, m):
    """The zero-cotangent select keeps the rules linear in the cotangent:
    forward mode (which transposes them at a zero cotangent) still sees the
    vectors' tangents: jvp of the gradient is JAX's."""
    m = jnp.asarray(m)
    t = jnp.asarray(RNG.randn(*m.shape))
    _close(kt.jvp(kt.grad(fn), (m,), (t,))[1], jax.jvp(jax.grad(fn), (m,), (t,))[1])


def test_vectors_gradient_at_repeated_values_stays_non_finite():
    """Where the vectors' cotangent is not zero the factor is infinite, as
    in JAX: no finite number made up."""
    m = jnp.diag(jnp.array([1.0, 1.0, 2.0]))

    def first_vector(m):
        return jnp.sum(jnp.linalg.eigh(m)[1][:, 0] * jnp.array([1.0, 2.0, 3.0]))

    assert not np.all(np.isfinite(jax.grad(first_vector)(m)))
    assert not np.all(np.isfinite(kt.grad(first_vector)(m)))


SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])
SINGULAR3 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 5.0]])


@pytest.mark.parametrize(
    "fn, m",
    [
        (det_squared, SINGULAR),
        (det, SINGULAR3),
        (det, np.zeros((4, 4))),  # rank <= n - 2: JAX's adjugate is 0, and so its derivatives
        (det, RNG.randn(4, 4)),
        (det_sum, RNG.randn(2, 3, 3)),  # a batch
    ],
    ids=["2x2-squared", "3x3", "4x4-zero", "ordinary-4x4", "batch"],
)
def test_det_second_order_at_singular_matrix(fn, m):
    """JAX's det of a 2x2 or 3x3 is a polynomial: its Hessian is finite at a
    singular matrix (ours was NaN, from the LU inside the adjugate)."""
    m, oracle = jnp.asarray(m), POLYNOMIAL[fn.__name__]
    _close(kt.grad(fn)(m), jax.grad(oracle)(m))
    _close(kt.hessian(fn)(m), jax.hessian(oracle)(m))


def test_det_second_order_through_outer_and_nested_grad():
    v = jnp.array([1.0, 2.0])
    _close(kt.hessian(det_outer)(v), jax.hessian(POLYNOMIAL["det_outer"])(v))
    zero = jnp.zeros((2, 2))
    want = jax.grad(lambda m: jnp.sum(jax.grad(leibniz_det)(m) * m))(zero)
    _close(kt.grad(lambda m: jnp.sum(kt.grad(det)(m) * m))(zero), want)
