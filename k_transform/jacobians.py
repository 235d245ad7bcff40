"""Jacobians and second derivatives: `jacrev`, `jacfwd`, `hessian`, `hvp`.

A `Jacobian` is one vmapped vjp per output leaf (`jacrev`) or one vmapped
jvp per input leaf (`jacfwd`), nested as JAX's (the output's structure of
the input's); `hessian` is reverse over reverse (jacrev of the gradient),
`hvp` forward over reverse (jvp of the gradient). Called inside code being
transformed, they lower to graphs (`lowering.lower_jacobian`,
`lowering.lower_hvp`).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import lowering
from k_transform import runtime as rt
from k_transform.api import graph_of
from k_transform.compiled import check_float_inputs, compiled_forward, without_aux
from k_transform.errors import KTransformError
from k_transform.forward_api import check_tangents, jvp_unchecked
from k_transform.frontend.targets import target_of
from k_transform.reverse import GradFunction, position, spread_args
from k_transform.runtime import host_log
from k_transform.transforms import (
    GradSpec,
)


class Jacobian:
    """What `jacrev(fn, grad_position, has_aux)` / `jacfwd(...)` return:
    called on arrays, the Jacobian of `fn` w.r.t. the input at
    `grad_position` (one vjp per output element, or one jvp per input
    element, vmapped); for a tuple of positions output-major, as JAX's and
    MindSpore's: the output's structure of tuples over the positions
    (`jac[i][j]` = d out_i / d in_j for a tuple output); and
    `(jacobian, aux)` with `has_aux` (MindSpore's structure: one aux value
    bare, several as a tuple); called inside code being transformed, it
    lowers to graphs (`lowering.lower_jacobian`)."""

    def __init__(self, fn, argnum, forward: bool, has_aux: bool = False):
        if isinstance(argnum, list):
            argnum = tuple(argnum)
        positions = argnum if isinstance(argnum, tuple) else (argnum,)
        if not positions or not all(
            isinstance(k, int) and not isinstance(k, bool) for k in positions
        ):
            raise KTransformError(
                f"jacfwd/jacrev: grad_position must be an int or a tuple of ints, not {argnum!r}"
            )
        self.fn, self.argnum, self.forward, self.has_aux = fn, argnum, forward, bool(has_aux)
        self.positions = positions
        try:  # its inputs are fn's: what a Jacobian of it is called with (`arity`)
            self.__signature__ = inspect.signature(fn)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args):
        check_float_inputs("kt.jacfwd" if self.forward else "kt.jacrev", args, self.positions)
        for k in self.positions:
            if not -len(args) <= k < len(args):
                raise KTransformError(
                    f"jacfwd/jacrev: grad_position {k} but the function got {len(args)} inputs"
                )
        fn = spread_args(target_of(self.fn, len(args)), len(args))
        # jvps of `fn` itself (its aux values' tangents dropped): one program. Where
        # it may run host code, that runs once, as in JAX: the first run (its value)
        # records it and the others replay it (`OneRun`)
        target = without_aux(fn) if self.has_aux and not self.forward else fn
        run, out = host_log.call, None
        if graph_of(fn).may_call_host():
            run = host_log.OneRun()
            out = run(self._value_forward if self.forward else self._value_reverse, fn, args)
        elif self.has_aux or not self.forward:
            out = compiled_forward(fn)(*args)
        one = self._forward if self.forward else self._reverse
        parts = [one(target, k % len(args), args, run, out) for k in self.positions]
        tree = parts[0][0]
        if isinstance(self.argnum, tuple):  # each output leaf: a tuple over the positions
            blocks = [tuple(p[1][i] for p in parts) for i in range(tree.num_leaves)]
        else:
            blocks = parts[0][1]
        jac = jax.tree_util.tree_unflatten(tree, blocks)
        return (jac, rt.split_aux(out)[1]) if self.has_aux else jac

    def _value_reverse(self, fn, args):
        """The value of `fn` as the vjps compute it (K of `fn`, its first order)."""
        spec = GradSpec(inputs=self.positions[0], with_value=True, has_aux=self.has_aux)
        return GradFunction(fn, spec)(*args)[0]

    def _value_forward(self, fn, args):
        """The value of `fn` as the jvps compute it (zero tangents)."""
        zeros = tuple(jax.tree_util.tree_map(jnp.zeros_like, a) for a in args)
        return jvp_unchecked(fn, tuple(args), zeros)[0]

    def _reverse(self, fn, argnum: int, args, run, value):
        """One vmapped vjp per output leaf: `(the output's treedef, a block
        per output leaf)`, each block shaped as input `argnum` (JAX's nesting:
        the output's structure of the input's structure)."""
        grad_fn = GradFunction(fn, GradSpec(inputs=argnum, sens_param=True))
        out = rt.split_aux(value)[0] if self.has_aux else value
        leaves, tree = jax.tree_util.tree_flatten(out)
        blocks = []
        for k, leaf in enumerate(leaves):
            basis = _basis(leaf)

            def row(u, k=k):
                sens = [u if j == k else jnp.zeros_like(other) for j, other in enumerate(leaves)]
                return grad_fn(*args, jax.tree_util.tree_unflatten(tree, sens))

            rows = run(jax.vmap(row), basis)
            blocks.append(
                jax.tree_util.tree_map(
                    lambda r, x, leaf=leaf: r.reshape(*jnp.shape(leaf), *jnp.shape(x)),
                    rows,
                    args[argnum],
                )
            )
        return tree, blocks

    def _forward(self, fn, argnum: int, args, run, value):
        """One vmapped jvp per input leaf, regrouped as `_reverse` gives them."""
        x_leaves, x_tree = jax.tree_util.tree_flatten(args[argnum])
        per_input = []
        for k, leaf in enumerate(x_leaves):
            leaf = jnp.asarray(leaf)

            def column(v, k=k):
                seed = [v if j == k else jnp.zeros_like(o) for j, o in enumerate(x_leaves)]
                tangents = tuple(
                    jax.tree_util.tree_unflatten(x_tree, seed)
                    if i == argnum
                    else jax.tree_util.tree_map(jnp.zeros_like, a)
                    for i, a in enumerate(args)
                )
                tangent = jvp_unchecked(fn, tuple(args), tangents)[1]
                return rt.split_aux(tangent)[0] if self.has_aux else tangent

            cols = run(jax.vmap(column), _basis(leaf))
            out_leaves, out_tree = jax.tree_util.tree_flatten(cols)
            per_input.append([_columns_last(c, leaf) for c in out_leaves])
        blocks = [
            jax.tree_util.tree_unflatten(x_tree, [cols[j] for cols in per_input])
            for j in range(len(per_input[0]))
        ]
        return out_tree, blocks

    def __kt_lower__(self, builder, args, kwargs, e):
        return lowering.lower_jacobian(builder, self, args, kwargs, e)


def _basis(leaf):
    """The unit vectors of `leaf`'s space, stacked: shape (size, *leaf.shape)."""
    size, shape = int(np.prod(jnp.shape(leaf))), jnp.shape(leaf)
    return jnp.eye(size, dtype=jnp.result_type(leaf)).reshape(size, *shape)


def _columns_last(cols, leaf):
    """Columns stacked first (size, *out) as a Jacobian block (*out, *leaf.shape)."""
    out_shape = cols.shape[1:]
    return jnp.moveaxis(cols.reshape(cols.shape[0], -1), 0, -1).reshape(*out_shape, *leaf.shape)


def jacrev(fn, grad_position=0, has_aux: bool = False, *, argnums=None) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position` (JAX's
    `argnums`), by reverse mode (MindSpore's `jacrev`; see `Jacobian`)."""
    grad_position = position(grad_position, argnums, "kt.jacrev")
    return Jacobian(fn, grad_position, forward=False, has_aux=has_aux)


def jacfwd(fn, grad_position=0, has_aux: bool = False, *, argnums=None) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position` (JAX's
    `argnums`), by forward mode (MindSpore's `jacfwd`; see `Jacobian`)."""
    grad_position = position(grad_position, argnums, "kt.jacfwd")
    return Jacobian(fn, grad_position, forward=True, has_aux=has_aux)


def hessian(fn, argnum: int = 0, *, argnums=None) -> Jacobian:
    """The Hessian of a scalar `fn` w.r.t. input `argnum` (JAX's `argnums`, an
    int here): reverse over reverse (jacrev of the gradient). A function with
    a non-scalar output raises TypeError (JAX gives one Hessian per output;
    `kt.jacrev(kt.jacrev(f))` does too), never the Hessian of its sum."""
    argnum = position(argnum, argnums, "kt.hessian")
    spec = GradSpec(inputs=argnum, scalar_output=True)
    return jacrev(GradFunction(fn, spec, api="kt.hessian"), argnum)


def hvp(fn, args, v, argnum: int = 0):
    """A Hessian-vector product by forward over reverse: jvp of the gradient."""
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    check_float_inputs("kt.hvp", args, (argnum,))
    check_tangents("kt.hvp", (args[argnum],), (v,))
    grad_fn = GradFunction(fn, GradSpec(inputs=argnum))
    zeros = jax.tree_util.tree_map
    tangents = tuple(v if k == argnum else zeros(jnp.zeros_like, a) for k, a in enumerate(args))
    return jvp_unchecked(spread_args(grad_fn, len(args)), args, tangents)[1]


jacrev.__kt_static__ = jacfwd.__kt_static__ = hessian.__kt_static__ = True
hvp.__kt_lower__ = lowering.lower_hvp
