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
from k_transform.compiled import (
    bind_keywords,
    check_float_inputs,
    compiled_forward,
    with_defaults,
    without_aux,
)
from k_transform.errors import KTransformError
from k_transform.forward_api import check_tangents, jvp_unchecked, zero_tangent
from k_transform.frontend.source import is_user_function
from k_transform.frontend.targets import target_of
from k_transform.protocol import kt_attribute
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

    __kt_own_call__ = True  # its `__call__` is never parsed as user code (`callables`)

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
        self.nested_aux = False  # (`hessian`: the aux of a gradient function)
        self.bound = False  # called with every parameter of `fn`, by position (`_keyword_call`)
        try:  # its inputs are fn's: what a Jacobian of it is called with (`arity`)
            self.__signature__ = inspect.signature(fn)
        except (TypeError, ValueError):
            pass

    def __call__(self, *args, **kwargs):
        if not self.bound and (kwargs or len(_with_defaults(self.fn, args)) > len(args)):
            return self._keyword_call(args, kwargs)
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
        if not self.has_aux:
            return jac
        aux = rt.split_aux(out)[1]
        if self.nested_aux:  # a gradient's `(grad, (aux, ...))`: its aux as `fn` returned it
            aux = aux[0] if len(aux) == 1 else aux
        return jac, aux

    def _keyword_call(self, args: tuple, kwargs: dict):
        """Keyword arguments are passed to `fn`, not differentiated (JAX's
        semantics): the Jacobian of `fn` with every argument bound to its
        parameter, positions moved to the parameters they went to. With no
        keywords: `args` and the defaults they leave out (`_with_defaults`)."""
        if kwargs:
            flat, where = bind_keywords(self.fn, args, kwargs)
        else:
            flat, where = _with_defaults(self.fn, args), [(k, None) for k in range(len(args))]
        for k in self.positions:
            if not -len(args) <= k < len(args):
                raise KTransformError(
                    f"jacfwd/jacrev: grad_position {k} but the function got {len(args)} "
                    "positional inputs (keyword arguments are not differentiated)"
                )
        if any(item is not None for _, item in where):
            raise KTransformError(
                "jacfwd/jacrev of a function with *args called with keyword arguments: "
                "differentiate a wrapper with named parameters"
            )
        moved = [where[k % len(args)][0] for k in self.positions]
        argnum = tuple(moved) if isinstance(self.argnum, tuple) else moved[0]
        bound = Jacobian(self.fn, argnum, self.forward, self.has_aux)
        bound.nested_aux, bound.bound = self.nested_aux, True
        return bound(*flat)

    def _value_reverse(self, fn, args):
        """The value of `fn` as the vjps compute it (K of `fn`, its first order)."""
        spec = GradSpec(inputs=self.positions[0], with_value=True, has_aux=self.has_aux)
        return GradFunction(fn, spec, bound=self.bound)(*args)[0]

    def _value_forward(self, fn, args):
        """The value of `fn` as the jvps compute it (zero tangents)."""
        zeros = tuple(zero_tangent(a) for a in args)
        return jvp_unchecked(fn, tuple(args), zeros)[0]

    def _reverse(self, fn, argnum: int, args, run, value):
        """One vmapped vjp per output leaf: `(the output's treedef, a block
        per output leaf)`, each block shaped as input `argnum` (JAX's nesting:
        the output's structure of the input's structure)."""
        grad_fn = GradFunction(fn, GradSpec(inputs=argnum, sens_param=True), bound=self.bound)
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
                    else zero_tangent(a)  # (an iterator, a string: as it is)
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


def _with_defaults(fn, args: tuple) -> tuple:
    """`args` and the defaults of the parameters of `fn` they leave out
    (`compiled.with_defaults`); `args` as they are for a function taking
    `*args` or `**kwargs` (made per arity), a library function (`np.exp`,
    whose signature is not what its graph takes) or one with no signature.
    A gradient or compiled function (it carries its graph): its graph's
    defaults (`kt.jacfwd(kt.grad(f))` with `def f(x, **kwargs)`)."""
    if kt_attribute(fn, "__kt_graph__", None) is not None:
        return with_defaults(fn, args)
    if not is_user_function(fn):
        return args
    try:
        params = inspect.signature(fn).parameters.values()
        flat, _ = bind_keywords(fn, args, {})
    except (TypeError, ValueError, KTransformError):
        return args
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return args
    return flat


def _basis(leaf):
    """The unit vectors of `leaf`'s space, stacked: shape (size, *leaf.shape)."""
    size, shape = int(np.prod(jnp.shape(leaf))), jnp.shape(leaf)
    return jnp.eye(size, dtype=jnp.result_type(leaf)).reshape(size, *shape)


def _columns_last(cols, leaf):
    """Columns stacked first (size, *out) as a Jacobian block (*out, *leaf.shape)."""
    out_shape = cols.shape[1:]
    return jnp.moveaxis(cols.reshape(cols.shape[0], -1), 0, -1).reshape(*out_shape, *leaf.shape)


def _jax_options(api: str, holomorphic: bool, allow_int: bool = False) -> None:
    """JAX's `holomorphic` and `allow_int` options: their defaults (False)
    are what k_transform computes; True is refused by name."""
    if holomorphic:
        raise KTransformError(
            f"{api}(..., holomorphic=True) is not supported: k_transform differentiates "
            "real-valued functions of real inputs (split a complex function into its real "
            "and imaginary parts)"
        )
    if allow_int:
        raise KTransformError(
            f"{api}(..., allow_int=True) is not supported (JAX's float0 Jacobians for "
            "integer inputs): leave the integer inputs out of argnums"
        )


def jacrev(
    fn,
    grad_position=0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    *,
    argnums=None,
) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position` (JAX's
    `argnums`), by reverse mode (MindSpore's `jacrev`; see `Jacobian`). The
    Jacobian takes `fn`'s arguments, keywords too (passed, not differentiated)."""
    grad_position = position(grad_position, argnums, "kt.jacrev")
    _jax_options("kt.jacrev", holomorphic, allow_int)
    return Jacobian(fn, grad_position, forward=False, has_aux=has_aux)


def jacfwd(
    fn, grad_position=0, has_aux: bool = False, holomorphic: bool = False, *, argnums=None
) -> Jacobian:
    """The Jacobian of `fn` w.r.t. the input(s) at `grad_position` (JAX's
    `argnums`), by forward mode (MindSpore's `jacfwd`; see `Jacobian`)."""
    grad_position = position(grad_position, argnums, "kt.jacfwd")
    _jax_options("kt.jacfwd", holomorphic)
    return Jacobian(fn, grad_position, forward=True, has_aux=has_aux)


def hessian(
    fn, argnum: int = 0, has_aux: bool = False, holomorphic: bool = False, *, argnums=None
) -> Jacobian:
    """The Hessian of a scalar `fn` w.r.t. input(s) `argnum` (JAX's
    `argnums`): reverse over reverse (jacrev of the gradient); `(hessian,
    aux)` with `has_aux`. A function with a non-scalar output raises
    TypeError (JAX gives one Hessian per output; `kt.jacrev(kt.jacrev(f))`
    does too), never the Hessian of its sum."""
    argnum = position(argnum, argnums, "kt.hessian")
    _jax_options("kt.hessian", holomorphic)
    spec = GradSpec(inputs=argnum, scalar_output=True, has_aux=bool(has_aux))
    jac = jacrev(GradFunction(fn, spec, api="kt.hessian"), argnum, has_aux=has_aux)
    jac.nested_aux = bool(has_aux)
    return jac


def hvp(fn, args, v, argnum: int = 0):
    """A Hessian-vector product by forward over reverse: jvp of the gradient."""
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    args = _with_defaults(fn, args)  # (a default's tangent: zeros)
    check_float_inputs("kt.hvp", args, (argnum,))
    check_tangents("kt.hvp", (args[argnum],), (v,))
    grad_fn = GradFunction(fn, GradSpec(inputs=argnum))
    args = _with_defaults(grad_fn, args)  # (its graph's: a `**kwargs` left empty)
    tangents = tuple(v if k == argnum else zero_tangent(a) for k, a in enumerate(args))
    return jvp_unchecked(spread_args(grad_fn, len(args)), args, tangents)[1]


jacrev.__kt_static__ = jacfwd.__kt_static__ = hessian.__kt_static__ = True
hvp.__kt_lower__ = lowering.lower_hvp
