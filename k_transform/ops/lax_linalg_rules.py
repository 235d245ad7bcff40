"""Gradient rules of the lax linear-algebra primitives with no `ops` twin
(`eigh`, `svd`, `qr`, `cholesky` of an operand not symmetrized first), as a
library call's jaxpr holds them (`jnp.linalg.eigh`, `svd`, `qr`, `lstsq`'s
steps, `jax.scipy.linalg.cho_factor`; `pinv` and `det` are `ops.linalg`'s).

Same contract as `k_transform.ops.lax_rules`: a getter per lax class reads
the parameters and input avals statically and returns a bprop written with
our primitives (matmul, `jnp.tril`, triangular solves, the lax primitive
itself), so it differentiates again (jvp, second order). Primitives with
several results take `out` and `dout` as tuples in the primitive's order
(`eigh`: `(v, w)`; `svd`: `(s, u, vt)` or `(s,)`; `qr`: `(q, r)`).

Each rule is JAX's jvp rule (`jax/_src/lax/linalg.py`) transposed by hand,
so the numbers are JAX's, also where they are not finite: `eigh` and `svd`
divide by differences of eigen/singular values, so degenerate ones give inf
or NaN in the vectors' gradient (JAX's too); a loss of the values alone is
finite (`_quotient`: JAX's zero cotangent of the vectors is symbolic, ours
an array of zeros). JAX has no rule for a partial decomposition
(`subset_by_index`), a full-matrix `svd` or `qr` of a non-square matrix, a pivoted `qr`, complex
matrices: refused, naming the primitive.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from k_transform.errors import KTransformError
from k_transform.ops.lax import lax_op
from k_transform.ops.lax_rules import lax_rule


def _t(a):
    return jnp.swapaxes(a, -1, -2)


def _refuse(p, why: str):
    raise KTransformError(
        f"cannot differentiate the lax primitive `{p.prim.name}` (in a library call imported "
        f"from its jaxpr) {why}: JAX defines no derivative there either"
    )


def _real_matrix(p) -> tuple:
    """(m, n, dtype) of the operand; complex refused."""
    shape, dtype = p.in_avals[0]
    if not jnp.issubdtype(dtype, jnp.floating):
        raise KTransformError(
            f"cannot differentiate the lax primitive `{p.prim.name}` of a complex matrix: "
            "k_transform has no gradient rule for complex numbers"
        )
    return shape[-2], shape[-1], dtype


def _quotient(num, den):
    """num / den, but 0 where both are 0. JAX's zero cotangent is symbolic:
    its rule never forms the 0 / 0 (0 * inf) at repeated eigen/singular
    values or a zero singular value; ours is an array of zeros. The select
    tests den as well as num, so the rule stays linear in the cotangent
    (forward mode transposes it, linearized at a zero cotangent): where den
    is not 0 it is the plain quotient, and the tangents through the 0 / 0
    entries are NaN, as JAX's (its factor is infinite there)."""
    return jnp.where((num == 0) & (den == 0), 0.0, num / den)


def _whole(p, k: int) -> None:
    subset = p.param.get("subset_by_index")
    if subset is not None and tuple(subset) != (0, k):
        _refuse(p, "with `subset_by_index` (a partial decomposition)")


# -- eigh: a = v diag(w) v^T, a symmetric ---------------------------------------------
@lax_rule("eigh")
def _eigh(p):
    """JAX's jvp: M = v^T da v, dv = v (F * M), dw = diag(M), F_ij = 1/(w_j - w_i)
    off the diagonal, 0 on it. Transposed: da = v (F * (v^T dv) + diag(dw)) v^T
    (F * (v^T dv) as `_quotient`: 0 where v^T dv is, e.g. a loss of w alone)."""
    _, n, dtype = _real_matrix(p)
    _whole(p, n)
    eye = np.eye(n, dtype=dtype)
    off = ~np.eye(n, dtype=bool)

    def bprop(a, out, dout):
        v, w = out
        dv, dw = dout
        gap = jnp.expand_dims(w, -2) - jnp.expand_dims(w, -1) + eye  # w_j - w_i, 1 on the diagonal
        f_m = jnp.where(off, _quotient(_t(v) @ dv, gap), 0.0)
        c = f_m + eye * jnp.expand_dims(dw, -2)
        return (v @ c @ _t(v),)

    return bprop


# -- svd: a = u diag(s) vt, reduced ---------------------------------------------------
@lax_rule("svd")
def _svd(p):
    """JAX's jvp (reduced factors): dS = u^T da v, ds = diag(dS),
    du = u (F * (dS S + S dS^T)) [+ (I - u u^T) da v / s when m > n],
    dv = v (F * (S dS + dS^T S)) [+ (I - v v^T) da^T u / s when n > m],
    F_ij = 1/(s_j^2 - s_i^2) off the diagonal, 0 on it. Transposed, with
    P = F * (u^T du), Q = F * (v^T dv):
    da = u (diag(ds) + (P + P^T) S + S (Q + Q^T)) v^T + the two projections'
    (the products with F and the divisions by s as `_quotient`: 0 where the
    cotangent's entry is, e.g. a loss of s alone at repeated or zero s)."""
    m, n, dtype = _real_matrix(p)
    k = min(m, n)
    _whole(p, k)
    uv = p.param["compute_uv"]
    if uv and p.param["full_matrices"] and m != n:
        _refuse(p, "with `full_matrices=True` on a non-square matrix")
    factors = lax_op(
        "svd",
        p.in_avals,
        full_matrices=False,
        compute_uv=True,
        subset_by_index=p.param.get("subset_by_index"),
        algorithm=p.param.get("algorithm"),
    )
    eye = np.eye(k, dtype=dtype)
    off = ~np.eye(k, dtype=bool)

    if not uv:

        def bprop_values(a, out, dout):
            s, u, vt = factors(a)
            return ((u * jnp.expand_dims(dout[0], -2)) @ vt,)

        return bprop_values

    def bprop(a, out, dout):
        s, u, vt = out
        ds, du, dvt = dout
        dv = _t(dvt)
        row = jnp.expand_dims(s, -2)  # s_j along the columns
        gap = (row + _t(row)) * (row - _t(row)) + eye  # s_j^2 - s_i^2, 1 on the diagonal
        pu = jnp.where(off, _quotient(_t(u) @ du, gap), 0.0)
        qv = jnp.where(off, _quotient(vt @ dv, gap), 0.0)
        c = eye * jnp.expand_dims(ds, -2) + (pu + _t(pu)) * row + _t(row) * (qv + _t(qv))
        da = u @ c @ vt
        if m > n:
            g = _quotient(du, row)
            da = da + (g - u @ (_t(u) @ g)) @ vt
        if n > m:
            g = _quotient(dv, row)
            da = da + u @ _t(g - _t(vt) @ (vt @ g))
        return (da,)

    return bprop


# -- qr: a = q r, reduced ---------------------------------------------------------------
@lax_rule("qr")
def _qr(p):
    """JAX's jvp (m >= n): B = da r^-1, K = q^T B, O = tril(K, -1) - tril(K, -1)^T,
    dq = q (O - K) + B, dr = (K - O) r. Transposed, with M = q^T dq - dr r^T:
    dK = tril(M - M^T, -1) - M, dB = dq + q dK, da = dB r^-T."""
    m, n, _ = _real_matrix(p)
    if p.param["pivoting"]:
        _refuse(p, "with pivoting")
    if m < n:
        _refuse(p, "of a wide matrix (more columns than rows)")
    if p.param["full_matrices"] and m != n:
        _refuse(p, "with `full_matrices=True` on a non-square matrix")

    def bprop(a, out, dout):
        q, r = out
        dq, dr = dout
        mm = _t(q) @ dq - dr @ _t(r)
        dk = jnp.tril(mm - _t(mm), -1) - mm
        db = dq + q @ dk
        return (_t(jsl.solve_triangular(r, _t(db), lower=False)),)

    return bprop


# -- cholesky of an operand not symmetrized (`cho_factor`, `symmetrize_input=False`) --
@lax_rule("cholesky")
def _cholesky(p):
    """lax's `cholesky` reads a's lower triangle only: the gradient is the
    symmetric tangent's, g = L^-T Phi(L^T dL) L^-1 (Phi the lower triangle
    with the diagonal halved: dL = L Phi(L^-1 da L^-T) transposed), folded
    onto that triangle, tril(g + g^T) with g's diagonal once, and 0 above it
    (as finite differences give; JAX 0.11's rule too, 0.10's gave g).
    (An operand symmetrized in the jaxpr is `ops.linalg.Cholesky`, `lax_map`.)"""
    _real_matrix(p)

    def bprop(a, out, dout):
        low = jnp.tril(out)
        m = _t(low) @ dout
        phi = 0.5 * (jnp.tril(m) + jnp.tril(m, -1))
        left = jsl.solve_triangular(low, phi, trans=1, lower=True)  # L^-T Phi
        g = _t(jsl.solve_triangular(low, _t(left), trans=1, lower=True))
        return (jnp.tril(g) + jnp.tril(_t(g), -1),)

    return bprop


# -- custom_linear_solve: x with matvec(x) = b (`jax.scipy.linalg.solve`, `expm`) -------
def _matrix_matvec(p) -> bool:
    """Whether `matvec` is `x -> a @ x` on the last axis of x (a vector, or
    rows as a vmap over the right-hand side's columns leaves it), a an (n, n)
    matrix and its one constant: `jax.scipy.linalg.solve`'s and
    `jnp.linalg.solve`'s, inside `expm` too."""
    closed = p.param["jaxprs"].matvec
    jaxpr = closed.jaxpr
    if p.param["const_lengths"].matvec != 1 or closed.consts or len(jaxpr.invars) != 2:
        return False
    a, x = jaxpr.invars
    rank = len(x.aval.shape)
    if len(a.aval.shape) != 2 or rank not in (1, 2) or len(jaxpr.eqns) != rank:
        return False
    dot = jaxpr.eqns[0]
    if dot.primitive.name != "dot_general" or list(dot.invars) != [a, x]:
        return False
    if dot.params["dimension_numbers"] != (((1,), (rank - 1,)), ((), ())):
        return False
    last = dot
    if rank == 2:
        last = jaxpr.eqns[1]
        if last.primitive.name != "transpose" or last.invars[0] is not dot.outvars[0]:
            return False
        if tuple(last.params["permutation"]) != (1, 0):
            return False
    return list(jaxpr.outvars) == list(last.outvars)


@lax_rule("custom_linear_solve")
def _custom_linear_solve(p):
    """x @ a^T = b (each row a @ x_r = b_r): JAX's rule, dx = solve(db -
    matvec'(x)), transposed: db = dx a^-1 (rows), da = -db^T x. The constants
    of `solve` and `transpose_solve` (a factorization of a stopped a) get no
    gradient, as in JAX's rule. Other matvecs, or no `transpose_solve`: refused."""
    if p.param["jaxprs"].transpose_solve is None:
        _refuse(p, "with no `transpose_solve` (reverse mode needs it)")
    if not _matrix_matvec(p) or len(p.in_avals) - sum(p.param["const_lengths"]) != 1:
        raise KTransformError(
            "cannot differentiate the lax primitive `custom_linear_solve` (in a library call "
            "imported from its jaxpr): k_transform has a rule for a solve whose `matvec` "
            "multiplies by one matrix (`jax.scipy.linalg.solve`, `expm`), not for this one"
        )
    rows = len(p.in_avals[-1][0]) == 2
    others = (None,) * (len(p.in_avals) - 2)

    def bprop(xs, out, dout):
        a = xs[0]
        x, dx = out[0], dout[0]
        if rows:
            db = _t(jnp.linalg.solve(_t(a), _t(dx)))
            da = -(_t(db) @ x)
        else:
            db = jnp.linalg.solve(_t(a), dx)
            da = -(jnp.expand_dims(db, -1) * jnp.expand_dims(x, -2))
        return (da, *others, db)

    return bprop


# -- lu: p a = l u, square (`jnp.linalg.solve`'s factorization of a stopped a, `det`) ---
@lax_rule("lu")
def _lu(p):
    """JAX's jvp: X = P da, Lam = l^-1 X u^-1, dlu = l tril(Lam, -1) + triu(Lam) u.
    Transposed: C = tril(l^T dlu, -1) + triu(dlu u^T), da = P^T l^-T C u^-T.
    The pivots and the permutation are integers (no gradient)."""
    m, n, dtype = _real_matrix(p)
    if m != n:
        _refuse(p, "of a non-square matrix (k_transform's rule is for square ones)")
    eye = np.eye(n, dtype=dtype)
    columns = np.arange(n)

    def bprop(a, out, dout):
        lu, perm = out[0], out[2]
        g = dout[0]
        low = jnp.tril(lu, -1) + eye
        up = jnp.triu(lu)
        c = jnp.tril(_t(low) @ g, -1) + jnp.triu(g @ _t(up))
        y = jsl.solve_triangular(low, c, trans=1, lower=True, unit_diagonal=True)  # l^-T C
        cx = _t(jsl.solve_triangular(up, _t(y), lower=False))  # ... u^-T
        rows = (jnp.expand_dims(perm, -1) == columns).astype(dtype)  # P: row i is e_perm[i]
        return (_t(rows) @ cx,)

    return bprop
