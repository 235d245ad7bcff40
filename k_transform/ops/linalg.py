"""Linear algebra primitives (real matrices; leading axes batch).

`Inv`, `Solve(a, b)`, `Det`, `Slogdet` (a tuple `(sign, logabsdet)`),
`Cholesky` (lower factor), `TriangularSolve(lower, trans, unit_diagonal)(a,
b)` (`jax.scipy.linalg.solve_triangular`; b a vector or a matrix),
`Norm(keep_dims)(x, axis)` (`jnp.linalg.norm` with the default ord: the
2-norm of vectors, Frobenius of matrices), `Einsum(equation)(a, b)` for two
operands with explicit letters (no `...`, no letter twice in one operand) and
`Pinv(body, hermitian)` (`jnp.linalg.pinv`, as its jaxpr holds it).

`Det` and `Pinv` have rules of JAX's own (a `custom_jvp`), finite where the
steps' are not: `det`'s gradient at a singular matrix is its cofactor matrix
(`adjugate`: polynomials for 2x2 and 3x3, as JAX's `det`, else JAX's
`_cofactor_solve`), `pinv`'s at repeated or zero
singular values is Golub and Pereyra's formula (the steps, an `svd`, divide
by differences of singular values).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.extend import core as jax_core

from k_transform.bprop_registry.helpers import rule
from k_transform.bprop_registry.registry import bprop_getters
from k_transform.ops.base import AttrPrimitive, JaxPrimitive, elementwise
from k_transform.ops.mapping import NONE, map_functions, register_function
from k_transform.ops.math import Tril, Triu
from k_transform.ops.reduce import _unreduce
from k_transform.ops.structural import SumTo


def slogdet(a) -> tuple:
    """JAX's `(sign, logabsdet)`, a NamedTuple (`.logabsdet` reads it)."""
    return jnp.linalg.slogdet(a)


Inv = elementwise("Inv", jnp.linalg.inv, "jnp.linalg.inv", 1, "`jnp.linalg.inv(a)`.")
Solve = elementwise("Solve", jnp.linalg.solve, "jnp.linalg.solve", 2, "`a^-1 b`.")
Det = elementwise("Det", jnp.linalg.det, "jnp.linalg.det", 1, "`jnp.linalg.det(a)`.")
Slogdet = elementwise("Slogdet", slogdet, "slogdet", 1, "`(sign, log|det a|)`.")
Cholesky = elementwise(
    "Cholesky", jnp.linalg.cholesky, "jnp.linalg.cholesky", 1, "Lower L, a = L L^T."
)


class TriangularSolve(JaxPrimitive):
    """`TriangularSolve(lower, trans, unit_diagonal)(a, b)`: x with op(a) x = b,
    op(a) = a (trans 0) or a^T (trans 1), reading one triangle of a."""

    jax_fn = staticmethod(jsl.solve_triangular)
    jax_name = "jax.scipy.linalg.solve_triangular"
    jax_kwargs = {"trans": "trans", "lower": "lower", "unit_diagonal": "unit_diagonal"}
    n_inputs = 2

    def __init__(self, lower: bool = False, trans: int = 0, unit_diagonal: bool = False):
        trans = {"N": 0, "T": 1, "C": 1}.get(trans, trans)
        super().__init__(lower=bool(lower), trans=min(int(trans), 1), unit_diagonal=unit_diagonal)


class Norm(JaxPrimitive):
    """`Norm(keep_dims)(x, axis)`: `sqrt(sum(x**2, axis))` (`jnp.linalg.norm`)."""

    jax_fn = staticmethod(jnp.linalg.norm)
    jax_name = "jnp.linalg.norm"
    jax_kwargs = {"keep_dims": "keepdims"}
    n_inputs = 2

    def __init__(self, keep_dims: bool = False):
        super().__init__(keep_dims=keep_dims)

    def impl(self, x, axis=None):
        return jnp.linalg.norm(x, axis=axis, keepdims=self.keep_dims)

    def emit(self, e, args):
        keep = ", keepdims=True" if self.keep_dims else ""
        return f"{e.ref(jnp.linalg.norm, self.jax_name)}({args[0]}, axis={args[1]}{keep})"


def explicit_equation(equation: str) -> str | None:
    """`equation` with its output spelled out, or None when not a plain
    two-operand contraction (ellipsis, a repeated letter, not two operands)."""
    equation = equation.replace(" ", "")
    if "." in equation:
        return None
    inputs, _, output = equation.partition("->")
    operands = inputs.split(",")
    if len(operands) != 2 or any(len(set(op)) != len(op) for op in operands):
        return None
    if "->" not in equation:
        letters = "".join(operands)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return f"{operands[0]},{operands[1]}->{output}"


class Einsum(JaxPrimitive):
    """`Einsum(equation)(a, b)`: `jnp.einsum(equation, a, b)`."""

    n_inputs = 2

    def __init__(self, equation: str = "ij,jk->ik"):
        explicit = explicit_equation(equation)
        if explicit is None:
            raise ValueError(f"Einsum needs two operands without '...' or repeats: {equation!r}")
        super().__init__(equation=explicit)

    def impl(self, a, b):
        return jnp.einsum(self.equation, a, b)

    def emit(self, e, args):
        return f"{e.ref(jnp.einsum, 'jnp.einsum')}({self.equation!r}, {args[0]}, {args[1]})"


class Pinv(AttrPrimitive):
    """`Pinv(body, hermitian)(*consts, a)`: `jnp.linalg.pinv(a, rtol, hermitian)`
    computed by `body`, the ClosedJaxpr of JAX's custom_jvp `_pinv` as a
    jaxpr's `custom_jvp_call` holds it: a traced `rtol` is its one constant
    (an input before `a`, no gradient), a static one is baked in.
    `takes_consts`: the importer passes the call's constants too."""

    takes_consts = True

    def __init__(self, body, hermitian: bool = False):
        super().__init__(body=body, hermitian=hermitian)
        self.n_inputs = len(body.jaxpr.invars)

    def impl(self, *args):
        return jax_core.jaxpr_as_fun(self.body)(*args)[0]

    def __repr__(self):
        return f"Pinv[hermitian={self.hermitian}]"


map_functions(
    {
        Inv: (jnp.linalg.inv, np.linalg.inv),
        Det: (jnp.linalg.det, np.linalg.det),
        Slogdet: (jnp.linalg.slogdet, np.linalg.slogdet),
        Cholesky: (jnp.linalg.cholesky, np.linalg.cholesky),
    }
)
map_functions({Solve: (jnp.linalg.solve, np.linalg.solve)}, n=2)


@register_function(jsl.solve_triangular)
def _solve_triangular(call):
    names = ("a", "b", "trans", "lower", "unit_diagonal")
    if not call.names_ok(names, 5):
        return None
    prim = TriangularSolve(
        call.static(3, "lower", False),
        call.static(2, "trans", 0),
        call.static(4, "unit_diagonal", False),
    )
    return prim, [call.arg(0, "a"), call.arg(1, "b")]


@register_function(jnp.linalg.norm, np.linalg.norm)
def _norm(call):
    """The default ord only; other norms stay library calls."""
    if not call.names_ok(("x", "ord", "axis", "keepdims"), 4) or call.static(1, "ord") is not None:
        return None
    return Norm(call.static(3, "keepdims", False)), [call.arg(0, "x"), call.arg(2, "axis", NONE)]


@register_function(jnp.einsum, np.einsum)
def _einsum(call):
    if call.kwargs or len(call.args) != 3:
        return None
    equation = call.static(0, "subscripts")
    if not isinstance(equation, str) or explicit_equation(equation) is None:
        return None
    return Einsum(equation), call.args[1:]


# == gradient rules ==============================================================
# Rules for linear algebra (real matrices, leading axes batch).
#
# Written with the primitives themselves (inverse, solves, triangular solves,
# einsum), so they differentiate again. Matrix rules follow Giles, "An extended
# collection of matrix derivative results" (2008); Cholesky's is Murray (2016):
# dA = sym(L^-T Phi(L^T dL) L^-1), Phi taking the lower triangle with the
# diagonal halved.

sum_to = SumTo()


def _t(a):
    return jnp.swapaxes(a, -1, -2)


def _as_matrix(v):
    """A trailing length-1 axis on a batch of scalars."""
    return jnp.expand_dims(jnp.expand_dims(v, -1), -1)


@rule(Inv)
def bprop_inv(a, out, dout):
    return (-(_t(out) @ dout @ _t(out)),)


@rule(Solve)
def bprop_solve(a, b, out, dout):
    db = jnp.linalg.solve(_t(a), dout)
    if b.ndim == a.ndim - 1:  # b is a (batch of) vector(s)
        da = -jnp.expand_dims(db, -1) * jnp.expand_dims(out, -2)
    else:
        da = -(db @ _t(out))
    return sum_to(da, a), sum_to(db, b)


def _cofactors(a):
    """The cofactor matrix (adj(a)^T) of a 2x2 or 3x3 a, as polynomials: JAX's
    det of these sizes is the polynomial (`_det_2x2`, `_det_3x3`), so its
    derivatives of every order are these', finite at a singular a."""
    if a.shape[-1] == 2:
        return jnp.roll(a, (1, 1), (-2, -1)) * np.array([[1.0, -1.0], [-1.0, 1.0]], a.dtype)

    def shifted(i, j):  # entry (r, c) is a[(r + i) % 3, (c + j) % 3]
        return jnp.roll(a, (-i, -j), (-2, -1))

    return shifted(1, 1) * shifted(2, 2) - shifted(1, 2) * shifted(2, 1)


def _pivoted(a) -> tuple:
    """(lu, permutation, partial products of the pivots with the sign of
    the permutation), u's last pivot replaced as `adjugate` says."""
    n = a.shape[-1]
    lu, pivots, permutation = jax.lax.linalg.lu(a)
    parity = jnp.count_nonzero(pivots != jnp.arange(n, dtype=pivots.dtype), axis=-1)
    sign = (1 - 2 * (parity % 2)).astype(a.dtype)
    partial_det = jnp.cumprod(jnp.diagonal(lu, axis1=-2, axis2=-1), axis=-1) * sign[..., None]
    return lu.at[..., -1, -1].set(1.0 / partial_det[..., -2]), permutation, partial_det


def adjugate(a):
    """adj(a) = det(a) a^-1, finite where a is singular. 2x2 and 3x3: the
    polynomials (`_cofactors`). Larger: JAX's `_cofactor_solve(a, I)` (its
    `det`'s jvp rule). With p a = l u, adj(a) = det(a) u^-1 l^-1 p. u's last
    pivot (0 at rank n - 1) is replaced by 1 / (the signed product of the
    others) and the rows of l^-1 p but the last are scaled by det(a): one
    solve with that u is det(a) u^-1 l^-1 p, with no division by the last
    pivot. Where that solve still overflows (another pivot is 0: rank n - 2
    or less), adj(a) = 0, as JAX's; there the steps run on the identity
    instead of a (the test reads a stopped a), so their derivatives are 0,
    not the 0 * inf of a singular u's (JAX's are 0 too)."""
    n = a.shape[-1]
    if n == 1:
        return jnp.ones_like(a)
    if n <= 3:
        return _t(_cofactors(a))
    lu, _, _ = _pivoted(jax.lax.stop_gradient(a))
    ones = jnp.ones(a.shape[:-1] + (1,), a.dtype)
    test = jsl.solve_triangular(lu, ones, lower=False)
    singular = jnp.any(jnp.isnan(test) | jnp.isinf(test), axis=(-2, -1))[..., None, None]
    lu, permutation, partial_det = _pivoted(jnp.where(singular, np.eye(n, dtype=a.dtype), a))
    x = (jnp.expand_dims(permutation, -1) == jnp.arange(n)).astype(a.dtype)  # p
    x = jsl.solve_triangular(lu, x, lower=True, unit_diagonal=True)
    scale = jnp.where(jnp.arange(n) == n - 1, 1.0, partial_det[..., -1:])
    x = jsl.solve_triangular(lu, x * jnp.expand_dims(scale, -1), lower=False)
    return jnp.where(singular, 0.0, x)


@rule(Det)
def bprop_det(a, out, dout):
    """JAX's rule: d det = tr(adj(a) da), finite at a singular a."""
    return (_as_matrix(dout) * _t(adjugate(a)),)


def _pinv_gradient(a, p, g):
    """JAX's jvp (Golub and Pereyra), P = pinv(a), transposed:
    da = -P^T g P^T + (I - a P) g^T P P^T + P^T P g^T (I - P a)."""
    x = (_t(g) @ p) @ _t(p)
    y = _t(p) @ (p @ _t(g))
    return -(_t(p) @ g @ _t(p)) + x - a @ (p @ x) + y - (y @ p) @ a


def _symmetric(a):
    return 0.5 * (a + _t(a))


@bprop_getters.register(Pinv)
def get_bprop_pinv(self):
    """`hermitian`: pinv reads (a + a^T) / 2, so does JAX's rule (its
    gradient is symmetrized); the constant `rtol` gets none."""
    hermitian = self.hermitian

    def gradient(a, out, dout):
        if hermitian:
            return _symmetric(_pinv_gradient(_symmetric(a), out, dout))
        return _pinv_gradient(a, out, dout)

    if self.n_inputs == 2:
        return lambda rtol, a, out, dout: (None, gradient(a, out, dout))
    return lambda a, out, dout: (gradient(a, out, dout),)


@rule(Slogdet)
def bprop_slogdet(a, out, dout):
    return (_as_matrix(dout[1]) * _t(jnp.linalg.inv(a)),)


@rule(Cholesky)
def bprop_cholesky(a, out, dout):
    m = _t(out) @ dout
    phi = 0.5 * (jnp.tril(m) + jnp.tril(m, -1))
    left = jsl.solve_triangular(out, phi, trans=1, lower=True)  # L^-T Phi
    da = _t(jsl.solve_triangular(out, _t(left), trans=1, lower=True))  # ... L^-1
    return (0.5 * (da + _t(da)),)


@bprop_getters.register(TriangularSolve)
def get_bprop_triangular_solve(self):
    """op(a) x = b: db = op(a)^-T dout, d op(a) = -db x^T, kept to a's triangle."""
    solve_adjoint = TriangularSolve(self.lower, 1 - self.trans, self.unit_diagonal)
    trans = self.trans
    diagonal = 0 if not self.unit_diagonal else (-1 if self.lower else 1)
    triangle = Tril(diagonal) if self.lower else Triu(diagonal)

    def bprop(a, b, out, dout):
        db = solve_adjoint(a, dout)
        g, x = db, out
        if b.ndim == a.ndim - 1:
            g, x = jnp.expand_dims(db, -1), jnp.expand_dims(out, -1)
        da = -(g @ _t(x)) if trans == 0 else -(x @ _t(g))
        return sum_to(triangle(da), a), db

    return bprop


@bprop_getters.register(Norm)
def get_bprop_norm(self):
    keep_dims = self.keep_dims

    def bprop(x, axis, out, dout):
        scale = _unreduce(dout, axis, keep_dims) / _unreduce(out, axis, keep_dims)
        return x * scale, None

    return bprop


def _einsum_gradient_spec(equation: str, which: int) -> tuple:
    """For operand `which` of `a,b->out`: the einsum giving its gradient from
    (dout, other) and the axes of the operand that equation drops (letters
    in neither `other` nor `out`: the gradient is broadcast along them)."""
    inputs, out = equation.split("->")
    mine, other = inputs.split(",")[which], inputs.split(",")[1 - which]
    kept = "".join(c for c in mine if c in out or c in other)
    dropped = tuple(k for k, c in enumerate(mine) if c not in kept)
    return Einsum(f"{out},{other}->{kept}"), dropped


@bprop_getters.register(Einsum)
def get_bprop_einsum(self):
    grad_a, dropped_a = _einsum_gradient_spec(self.equation, 0)
    grad_b, dropped_b = _einsum_gradient_spec(self.equation, 1)

    def bprop(a, b, out, dout):
        da = grad_a(dout, b)
        db = grad_b(dout, a)
        if dropped_a:
            da = jnp.broadcast_to(jnp.expand_dims(da, dropped_a), jnp.shape(a))
        if dropped_b:
            db = jnp.broadcast_to(jnp.expand_dims(db, dropped_b), jnp.shape(b))
        return sum_to(da, a), sum_to(db, b)  # same shapes: a real operand's real part

    return bprop
