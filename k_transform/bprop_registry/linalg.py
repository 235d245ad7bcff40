"""Rules for linear algebra (real matrices, leading axes batch).

Written with the primitives themselves (inverse, solves, triangular solves,
einsum), so they differentiate again. Matrix rules follow Giles, "An extended
collection of matrix derivative results" (2008); Cholesky's is Murray (2016):
dA = sym(L^-T Phi(L^T dL) L^-1), Phi taking the lower triangle with the
diagonal halved.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from k_transform import ops
from k_transform.bprop_registry.reduction import _unreduce
from k_transform.bprop_registry.registry import bprop_getters

sum_to = ops.SumTo()


def _t(a):
    return jnp.swapaxes(a, -1, -2)


def _as_matrix(v):
    """A trailing length-1 axis on a batch of scalars."""
    return jnp.expand_dims(jnp.expand_dims(v, -1), -1)


@bprop_getters.register(ops.Inv)
def get_bprop_inv(self):
    return lambda a, out, dout: (-(_t(out) @ dout @ _t(out)),)


@bprop_getters.register(ops.Solve)
def get_bprop_solve(self):
    def bprop(a, b, out, dout):
        db = jnp.linalg.solve(_t(a), dout)
        if b.ndim == a.ndim - 1:  # b is a (batch of) vector(s)
            da = -jnp.expand_dims(db, -1) * jnp.expand_dims(out, -2)
        else:
            da = -(db @ _t(out))
        return sum_to(da, a), sum_to(db, b)

    return bprop


@bprop_getters.register(ops.Det)
def get_bprop_det(self):
    return lambda a, out, dout: (_as_matrix(dout * out) * _t(jnp.linalg.inv(a)),)


@bprop_getters.register(ops.Slogdet)
def get_bprop_slogdet(self):
    return lambda a, out, dout: (_as_matrix(dout[1]) * _t(jnp.linalg.inv(a)),)


@bprop_getters.register(ops.Cholesky)
def get_bprop_cholesky(self):
    def bprop(a, out, dout):
        m = _t(out) @ dout
        phi = 0.5 * (jnp.tril(m) + jnp.tril(m, -1))
        left = jsl.solve_triangular(out, phi, trans=1, lower=True)  # L^-T Phi
        da = _t(jsl.solve_triangular(out, _t(left), trans=1, lower=True))  # ... L^-1
        return (0.5 * (da + _t(da)),)

    return bprop


@bprop_getters.register(ops.TriangularSolve)
def get_bprop_triangular_solve(self):
    """op(a) x = b: db = op(a)^-T dout, d op(a) = -db x^T, kept to a's triangle."""
    solve_adjoint = ops.TriangularSolve(self.lower, 1 - self.trans, self.unit_diagonal)
    trans = self.trans
    diagonal = 0 if not self.unit_diagonal else (-1 if self.lower else 1)
    triangle = ops.Tril(diagonal) if self.lower else ops.Triu(diagonal)

    def bprop(a, b, out, dout):
        db = solve_adjoint(a, dout)
        g, x = db, out
        if b.ndim == a.ndim - 1:
            g, x = jnp.expand_dims(db, -1), jnp.expand_dims(out, -1)
        da = -(g @ _t(x)) if trans == 0 else -(x @ _t(g))
        return sum_to(triangle(da), a), db

    return bprop


@bprop_getters.register(ops.Norm)
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
    return ops.Einsum(f"{out},{other}->{kept}"), dropped


@bprop_getters.register(ops.Einsum)
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
        return da, db

    return bprop
