"""Rules of the lax linear-algebra primitives a library call's jaxpr holds
(`k_transform/ops/lax_linalg_rules.py`: `eigh`, `svd`, `qr`, `cholesky`,
`lu`, `custom_linear_solve`), `cummax`/`cummin` (`ops.lax_map`), and JAX's
own rules of `det` and `pinv` (`ops.linalg`), finite at singular matrices
and repeated singular values where the steps' are not.

Each loss calls the public `jnp.linalg` / `jax.scipy.linalg` / `lax`
function in code the parser reads; oracle: `jax.grad`, `jax.jvp` (and
`jax.hessian` for a few) of the same function, float32, on small random
well-conditioned matrices. Losses of eigen/singular vectors are gauge
invariant (`v v^T`, `u s vt`), as the vectors' signs are arbitrary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import k_transform as kt

RNG = np.random.RandomState(0)
SQUARE = jnp.asarray(RNG.randn(4, 4), jnp.float32)
TALL = jnp.asarray(RNG.randn(4, 3), jnp.float32)
WIDE = jnp.asarray(RNG.randn(3, 4), jnp.float32)
TIES = jnp.asarray([[1.0, 2.0], [1.0, 0.0], [1.0, 3.0], [1.0, 3.0], [0.0, 3.0]], jnp.float32)
EYE = jnp.eye(4, dtype=jnp.float32)
WEIGHTS = jnp.arange(1.0, 6.0, dtype=jnp.float32)[:, None]


def spd(a):
    return a @ a.T + 4.0 * jnp.eye(a.shape[0], dtype=a.dtype)


def eigenvalues(a):
    return jnp.sum(jnp.linalg.eigh(a + a.T)[0] ** 3)


def eigenvectors(a):
    v = jnp.linalg.eigh(a + a.T)[1][:, :2]
    return jnp.sum(jnp.sin(v @ v.T))


def singular_values(a):
    s = jnp.linalg.svd(a, compute_uv=False)
    return jnp.sum(s**2 * jnp.arange(s.shape[0], dtype=s.dtype))


def svd_reconstruction(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return jnp.sum(jnp.sin((u * s) @ vt))


def svd_leading_pair(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return jnp.sum(jnp.sin(u[:, :2] @ vt[:2])) * s[0]


def qr_factors(a):
    q, r = jnp.linalg.qr(a)
    return jnp.sum(jnp.sin(q)) + jnp.sum(r**2)


def cho_factor(a):
    return jnp.sum(jnp.sin(jsl.cho_factor(spd(a), lower=True)[0]))


def solve_pos(a):
    return jnp.sum(jnp.sin(jsl.solve(spd(a), jnp.arange(4.0), assume_a="pos")))


def solve_pos_matrix(a):
    return jnp.sum(jnp.sin(jsl.solve(spd(a), a[:, :2], assume_a="pos")))


def solve_general(a):
    return jnp.sum(jnp.sin(jsl.solve(a + 4.0 * jnp.eye(4), a[:, 1])))


def lu_factor(a):
    return jnp.sum(jnp.sin(jsl.lu_factor(a)[0]))


def expm(a):
    return jnp.sum(jnp.sin(jsl.expm(0.3 * a)))


def pinv(a):
    return jnp.sum(jnp.sin(jnp.linalg.pinv(a)))


def lstsq(a):
    return jnp.sum(jnp.sin(jnp.linalg.lstsq(a, jnp.arange(4.0))[0]))


def cho_solve(a):  # cho_factor's `lower` flag stays a Python bool
    return jnp.sum(jnp.sin(jsl.cho_solve(jsl.cho_factor(spd(a)), jnp.arange(4.0))))


def cummin_reverse(a):
    return jnp.sum(jnp.sin(jax.lax.cummin(a, axis=1, reverse=True)) * jnp.arange(4.0))


def cummax_ties(a):  # JAX's shares of a tie: halves, pair by pair in its scan
    return jnp.sum(jax.lax.cummax(a, axis=0) * WEIGHTS)


def cummax_ties_reverse(a):
    return jnp.sum(jax.lax.cummax(a, axis=0, reverse=True) * WEIGHTS)


CASES = [
    (eigenvalues, SQUARE),
    (eigenvectors, SQUARE),
    (singular_values, TALL),
    (singular_values, WIDE),
    (svd_reconstruction, TALL),
    (svd_leading_pair, TALL),
    (svd_leading_pair, WIDE),
    (qr_factors, TALL),
    (cho_factor, SQUARE),
    (solve_pos, SQUARE),
    (solve_pos_matrix, SQUARE),
    (solve_general, SQUARE),
    (lu_factor, SQUARE),
    (expm, SQUARE),
    (pinv, TALL),
    (lstsq, TALL),
    (cho_solve, SQUARE),
    (cummin_reverse, SQUARE),
    (cummax_ties, TIES),
    (cummax_ties_reverse, TIES),
]


def _close(ours, theirs, tol=2e-4):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "f, x", CASES, ids=[f"{f.__name__}-{'x'.join(map(str, x.shape))}" for f, x in CASES]
)
def test_grad_and_jvp(f, x):
    _close(kt.grad(f)(x), jax.grad(f)(x))
    v = jnp.asarray(RNG.randn(*x.shape), x.dtype)
    _close(kt.jvp(f, (x,), (v,))[1], jax.jvp(f, (x,), (v,))[1])


def _low_rank(m: int, n: int, rank: int):
    return jnp.asarray(RNG.randn(m, rank) @ RNG.randn(rank, n), jnp.float32)


def pinv_hermitian_rtol(a):  # a traced rtol; pinv of (a + a^T) / 2
    return jnp.sum(jnp.sin(jnp.linalg.pinv(a, rtol=0.05, hermitian=True)) * jnp.arange(3.0))


def det_sin(a):
    return jnp.sin(2.0 * jnp.linalg.det(a))


def det_in_library(a):  # jax.scipy.linalg.det: jnp.linalg.det's custom_jvp in a jaxpr
    return jsl.det(a) * 3.0


SINGULAR = [
    (pinv, jnp.eye(4, 3, dtype=jnp.float32)),  # repeated singular values
    (pinv_hermitian_rtol, jnp.diag(jnp.asarray([2.0, 1.0, 0.0], jnp.float32))),
    (det_sin, _low_rank(4, 4, 3)),
    (det_sin, jnp.diag(jnp.asarray([1.0, 2.0, 0.0, 0.0], jnp.float32))),
    (det_in_library, _low_rank(4, 4, 3)),
]


@pytest.mark.parametrize(
    "f, x", SINGULAR, ids=[f"{f.__name__}-{k}" for k, (f, _) in enumerate(SINGULAR)]
)
def test_singular_points(f, x):
    """JAX's rules give finite numbers there (NaN from the steps)."""
    expected = jax.grad(f)(x)
    assert np.all(np.isfinite(expected))
    _close(kt.grad(f)(x), expected)
    v = jnp.asarray(RNG.randn(*x.shape), x.dtype)
    _close(kt.jvp(f, (x,), (v,))[1], jax.jvp(f, (x,), (v,))[1])


def test_det_second_order():
    """Reverse over reverse through `adjugate` (an LU): a Hessian-vector
    product at a nonsingular matrix."""
    w = jnp.asarray(RNG.randn(4, 4), jnp.float32)
    ours = kt.grad(lambda a: jnp.sum(kt.grad(det_sin)(a) * w))(SQUARE)
    theirs = jax.grad(lambda a: jnp.sum(jax.grad(det_sin)(a) * w))(SQUARE)
    _close(ours, theirs, tol=2e-3)


def test_hessian():
    """(Second order of the others: their jvp differentiates their rule.)"""
    _close(kt.hessian(eigenvalues)(SQUARE), jax.hessian(eigenvalues)(SQUARE), tol=2e-3)
