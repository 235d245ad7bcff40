"""ADBench-style objectives: GMM and bundle adjustment, k_transform vs JAX.

Both objectives are written fresh from the published ADBench formulas
(Srajer, Schuh, Fitzgibbon, "A benchmark of selected algorithmic
differentiation tools on some problems in computer vision and machine
learning", 2018) with the operations k_transform differentiates, and
vectorised over data points / observations. The gradient of the scalar
objective w.r.t. all its parameters is taken by
`jax.jit(kt.grad(f, grad_position=...))` and `jax.jit(jax.grad(f, argnums=...))`,
checked equal, then timed alternately (medians; see `bench/models.py`).

GMM (`gmm_objective(alphas, means, icf, x, gamma, m)`): K components in d
dimensions, N points; each component's inverse covariance factor Q_k has
diagonal exp(icf[k, :d]) and strictly lower part icf[k, d:] (column-major, as
ADBench). The lower part is scattered into a d x d matrix by a matmul with a
constant 0/1 selection matrix (no scatter primitive is needed). The objective
is sum_i logsumexp_k(alpha_k + sum(log diag Q_k) - |Q_k (x_i - mu_k)|^2 / 2)
- N logsumexp(alpha) + the Wishart prior; additive constants (which do not
change the gradient) are left out. Gradient w.r.t. alphas, means, icf.

Bundle adjustment (`ba_objective(cams, points, weights, feats)`): n cameras of
11 parameters (Rodrigues rotation r, centre C, focal f, principal point x0,
radial distortion k1, k2), m points, p observations (camera and point index
per observation: constant integer arrays, gathered by indexing). For each
observation: Xc = R(r) (X - C) by Rodrigues' formula (with the theta = 0
branch as jnp.where), p = Xc[:2] / Xc[2], distortion
p * (1 + k1 |p|^2 + k2 |p|^4), projection f * p + x0; residual
w * (proj - feat) and the weight residual 1 - w^2. The objective is the sum
of squares of all residuals; gradient w.r.t. cameras, points and weights.

    python -m bench.run adbench      # writes bench/results/adbench.json
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from bench.common import machine
from bench.models import bench_case

GMM_SIZES = ((10, 25, 1_000), (32, 50, 1_000), (64, 25, 10_000))  # (d, K, N)
BA_SIZES = ((49, 7_776, 31_843), (21, 11_315, 36_455))  # ADBench ba1, ba2: (n, m, p)


# ---------------------------------------------------------------------- GMM


def lower_selection(d: int) -> np.ndarray:
    """(d(d-1)/2, d*d) 0/1 matrix: icf[d:] @ S is the row-major flattening of the
    strictly lower triangular L, filled column by column (ADBench's order)."""
    rows = []
    for col in range(d):
        for row in range(col + 1, d):
            rows.append(row * d + col)
    s = np.zeros((len(rows), d * d), np.float32)
    s[np.arange(len(rows)), rows] = 1.0
    return s


def gmm_objective(alphas, means, icf, x, select, gamma, m):
    d = x.shape[1]
    n = x.shape[0]
    k = means.shape[0]
    log_diag = icf[:, 0:d]
    lower = icf[:, d:]
    q_diag = jnp.exp(log_diag)
    sum_qs = jnp.sum(log_diag, axis=1)
    ls = jnp.reshape(lower @ select, (k, d, d))
    centred = jnp.expand_dims(jnp.transpose(x), 0) - jnp.expand_dims(means, 2)  # (K, d, N)
    qx = jnp.expand_dims(q_diag, 2) * centred + ls @ centred
    inner = jnp.expand_dims(alphas + sum_qs, 1) - 0.5 * jnp.sum(qx * qx, axis=1)  # (K, N)
    slse = jnp.sum(jax.nn.logsumexp(inner, axis=0))
    prior = jnp.sum(
        0.5 * gamma * gamma * (jnp.sum(q_diag * q_diag, axis=1) + jnp.sum(lower * lower, axis=1))
        - m * sum_qs
    )
    return slse - n * jax.nn.logsumexp(alphas) + prior


def gmm_args(rng, d, k, n):
    icf_size = d + d * (d - 1) // 2
    return (
        jnp.asarray(rng.standard_normal(k), jnp.float32),
        jnp.asarray(rng.uniform(0.0, 1.0, (k, d)), jnp.float32),
        jnp.asarray(rng.uniform(-0.1, 0.1, (k, icf_size)), jnp.float32),
        jnp.asarray(rng.uniform(0.0, 1.0, (n, d)), jnp.float32),
        jnp.asarray(lower_selection(d)),
        jnp.float32(1.0),
        jnp.float32(0.0),
    )


# ------------------------------------------------------- bundle adjustment


def cross(a, b):
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    b0, b1, b2 = b[:, 0], b[:, 1], b[:, 2]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=1)


def rodrigues_rotate(rot, x):
    """Rotate each row of `x` by the axis-angle vector in the same row of `rot`."""
    sqtheta = jnp.sum(rot * rot, axis=1, keepdims=True)
    nonzero = sqtheta != 0.0
    theta = jnp.sqrt(jnp.where(nonzero, sqtheta, 1.0))
    costheta = jnp.cos(theta)
    sintheta = jnp.sin(theta)
    w = rot / theta
    w_cross_x = cross(w, x)
    tmp = jnp.sum(w * x, axis=1, keepdims=True) * (1.0 - costheta)
    rotated = x * costheta + w_cross_x * sintheta + w * tmp
    return jnp.where(nonzero, rotated, x + cross(rot, x))


def radial_distort(rad, proj):
    rsq = jnp.sum(proj * proj, axis=1, keepdims=True)
    factor = 1.0 + rad[:, 0:1] * rsq + rad[:, 1:2] * rsq * rsq
    return proj * factor


def project(cams, x):
    xcam = rodrigues_rotate(cams[:, 0:3], x - cams[:, 3:6])
    distorted = radial_distort(cams[:, 9:11], xcam[:, 0:2] / xcam[:, 2:3])
    return distorted * cams[:, 6:7] + cams[:, 7:9]


def ba_objective(cams, points, weights, feats, cam_index, point_index):
    proj = project(cams[cam_index], points[point_index])
    w = jnp.expand_dims(weights, 1)
    err = w * (proj - feats)
    w_err = 1.0 - weights * weights
    return jnp.sum(err * err) + jnp.sum(w_err * w_err)


def ba_args(rng, n, m, p):
    cams = np.concatenate(
        [
            rng.uniform(-0.2, 0.2, (n, 3)),  # rotation
            rng.uniform(-1.0, 1.0, (n, 2)),  # centre x, y
            rng.uniform(-12.0, -8.0, (n, 1)),  # centre z: points sit in front
            rng.uniform(400.0, 600.0, (n, 1)),  # focal
            rng.uniform(-5.0, 5.0, (n, 2)),  # principal point
            rng.uniform(-1e-2, 1e-2, (n, 2)),  # k1, k2
        ],
        axis=1,
    )
    points = rng.uniform(-1.0, 1.0, (m, 3))
    cam_index = np.arange(p) % n
    point_index = np.concatenate([np.arange(m), rng.integers(0, m, max(p - m, 0))])[:p]
    return (
        jnp.asarray(cams, jnp.float32),
        jnp.asarray(points, jnp.float32),
        jnp.asarray(rng.uniform(0.5, 1.0, p), jnp.float32),
        jnp.asarray(rng.uniform(-50.0, 50.0, (p, 2)), jnp.float32),
        jnp.asarray(cam_index, jnp.int32),
        jnp.asarray(point_index, jnp.int32),
    )


# -------------------------------------------------------------------- run


def run() -> dict:
    kt.set_mode("graph")
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    results = {}
    for d, k, n in GMM_SIZES:
        name = f"gmm_d{d}_K{k}_N{n}"
        results[name] = bench_case(
            gmm_objective, gmm_args(rng, d, k, n), 3, rtol=2e-3, atol=1e-2, budget_s=6.0
        )
        print(f"  {name}: {results[name]['case_wall_s']:.1f} s", flush=True)
    for n, m, p in BA_SIZES:
        name = f"ba_n{n}_m{m}_p{p}"
        results[name] = bench_case(
            ba_objective, ba_args(rng, n, m, p), 3, rtol=2e-3, atol=1e-1, budget_s=6.0
        )
        print(f"  {name}: {results[name]['case_wall_s']:.1f} s", flush=True)
    return {
        "benchmark": "adbench",
        "machine": machine(),
        "cases": results,
        "wall_s": time.perf_counter() - start,
    }


def summary(results: dict) -> str:
    from bench.models import summary as table

    return table(results)
