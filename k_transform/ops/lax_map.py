"""One primitive vocabulary: a lax equation as the `ops` primitive that means it.

`k_transform.frontend.jaxpr` imports each equation of a jaxpr with
`import_equation`, which picks its primitive:

- results all integers or booleans (comparisons, argmax, index arithmetic):
  `ops.lax.IndexArithmetic`, no gradient, whatever the lax primitive;
- a float rebuilt from a float's bits: `ops.lax.FloatFromBits` (refused);
- a lax primitive with an `ops` twin (`TWINS`: lax name -> builder): the
  twin, applied to the same operands (`sin` -> `Sin`, `add` -> `Add`,
  `dot_general` -> `NumpyMatMul` or `Einsum`, `reduce_sum` -> `ReduceSum`,
  `broadcast_in_dim` -> `Reshape` then `BroadcastTo`, `select_n` ->
  `Select`s): the twin's rule is the derivative, written once, in its family
  module;
- any other: `ops.lax.lax_class(name)`, whose rule is in `ops.lax_rules` /
  `ops.lax_shape_rules` (or refuses, naming the primitive).

A twin computes what the lax primitive computes on the operands a jaxpr
holds: operands of one dtype (lax requires it; literals are typed arrays), so
numpy's promotion never applies, and numpy broadcasting covers lax's rank-0
operands (twins' rules sum their gradients back with `sum_to`). A lax
primitive that a twin matches only for some parameters is not twinned
(integer `div` truncates, `rem` is C's fmod, `round` away from zero), with
the exceptions listed in `PARTIAL` (the builder returns None and the
equation gets the lax class, whose rule refuses, naming the primitive, if
it is differentiated). A parameter no twin expresses (`accuracy`,
`out_dtype`, a sharding) is refused, naming the primitive.
"""

from __future__ import annotations

import jax
import numpy as np

from k_transform.errors import KTransformError
from k_transform.ir.nodes import Apply, Constant, DebugInfo, FuncGraph, Node
from k_transform.ops import arithmetic as ar
from k_transform.ops import math as m
from k_transform.ops import python as prims
from k_transform.ops import reduce as rd
from k_transform.ops import shape as sh
from k_transform.ops.lax import TWINNED, EffectCall, FloatFromBits, IndexArithmetic, lax_class
from k_transform.ops.linalg import Cholesky, Einsum, TriangularSolve


class Lowering:
    """What a builder sees of one equation: `b.params`, `b.in_avals`,
    `b.out_avals` (`(shape, dtype)`), `b.args` (operand nodes); `b(prim, *xs)`
    applies an ops primitive in the graph being built."""

    def __init__(self, graph: FuncGraph, prim, params, in_avals, out_avals, args, debug):
        self.graph, self.name, self.params = graph, prim.name, params
        self.in_avals, self.out_avals, self.args, self.debug = in_avals, out_avals, args, debug

    def __call__(self, prim, *args) -> Node:
        return self.graph.apply(Constant(prim, hint=self.name), *args, debug=self.debug)

    def expect(self, *used: str) -> None:
        """Refuse a parameter the twin does not express (one not in `used`
        and not None)."""
        extra = {
            k: v
            for k, v in self.params.items()
            if k not in used and v is not None and not _unsharded(k, v)
        }
        if extra:
            raise KTransformError(
                f"cannot import the lax primitive `{self.name}` with {extra}: its ops twin "
                "has no such parameter"
            )


def _unsharded(name: str, value) -> bool:
    """A `sharding` over a mesh with no axes (what a JAX gradient inside traced
    code gives a broadcast constant): the default placement."""
    return name == "sharding" and getattr(getattr(value, "mesh", None), "axis_names", None) == ()


TWINS: dict[str, object] = {}  # lax name -> builder(Lowering) -> Node (or None: PARTIAL)
# lax names twinned only for some parameters: the others get the lax class
PARTIAL = {
    "dot_general": "a precision other than the default",
    "cholesky": "an operand the jaxpr does not symmetrize first, or complex",
    "triangular_solve": "complex matrices",
}


def twin(*names):
    def register(builder):
        for name in names:
            TWINS[name] = builder
            if name not in PARTIAL:
                TWINNED.add(name)
        return builder

    return register


# -- elementwise: the same operands ---------------------------------------------------
SAME_OPERANDS = {
    "neg": ar.Neg,
    "add": ar.Add,
    "add_any": ar.Add,
    "sub": ar.Sub,
    "mul": ar.Mul,
    "div": ar.Div,  # float results only: an integer `div` is IndexArithmetic
    "pow": ar.Pow,
    "sin": m.Sin,
    "cos": m.Cos,
    "tan": m.Tan,
    "exp": m.Exp,
    "log": m.Log,
    "sqrt": m.Sqrt,
    "rsqrt": m.Rsqrt,
    "tanh": m.Tanh,
    "logistic": m.Sigmoid,
    "abs": m.AbsJax,  # lax.abs: derivative 1 at 0
    "square": m.Square,
    "log1p": m.Log1p,
    "expm1": m.Expm1,
    "erf": m.Erf,
    "sinh": m.Sinh,
    "cosh": m.Cosh,
    "atan": m.Atan,
    "asinh": m.Asinh,
    "sign": m.Sign,
    "floor": m.Floor,
    "ceil": m.Ceil,
    "max": m.Maximum,
    "min": m.Minimum,
    "atan2": m.Atan2,  # lax.atan2(y, x) as jnp.arctan2(y, x)
}


def _same_operands(cls):
    def build(b: Lowering) -> Node:
        b.expect()
        return b(cls(), *b.args)

    return build


for _name, _cls in SAME_OPERANDS.items():
    twin(_name)(_same_operands(_cls))


@twin("copy", "copy_p")
def _copy(b: Lowering) -> Node:
    return b.args[0]  # a value, not a buffer: nothing to copy


@twin("convert_element_type")
def _convert(b: Lowering) -> Node:
    b.expect("new_dtype", "weak_type")
    return b(sh.Cast(), b.args[0], Constant(np.dtype(b.params["new_dtype"])))


@twin("select_n")
def _select_n(b: Lowering) -> Node:
    """`select_n(which, *cases)`: case `which`; a boolean `which` picks case 1
    where True. As `Select(which == k, case_k, ...)`, from the last case."""
    which, cases = b.args[0], b.args[1:]
    if np.dtype(b.in_avals[0][1]) == np.bool_:
        return cases[0] if len(cases) == 1 else b(m.Select(), which, cases[1], cases[0])
    chosen = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        is_k = b(ar.Equal(), which, Constant(np.asarray(k, b.in_avals[0][1])))
        chosen = b(m.Select(), is_k, cases[k], chosen)
    return chosen


@twin("clamp")
def _clamp(b: Lowering) -> Node:
    lo, x, hi = b.args
    return b(m.Clip(), x, lo, hi)


# -- reductions and scans ---------------------------------------------------------------
def _reduction(cls):
    def build(b: Lowering) -> Node:
        b.expect("axes")
        axes = tuple(b.params["axes"])
        return b(cls(), b.args[0], Constant(axes)) if axes else b.args[0]

    return build


for _name, _cls in {
    "reduce_sum": rd.ReduceSum,
    "reduce_max": rd.ReduceMax,
    "reduce_min": rd.ReduceMin,
    "reduce_prod": rd.ReduceProd,
}.items():
    twin(_name)(_reduction(_cls))


@twin("cumsum")
def _cumsum(b: Lowering) -> Node:
    return b(rd.Cumsum(b.params["axis"], b.params["reverse"]), b.args[0])


@twin("cummax", "cummin")
def _running_extremum(b: Lowering) -> Node:
    """`jax.lax.associative_scan(lax.max, x, axis, reverse)` (`lax.min`), a
    library call: JAX's jvp of `cummax` is that scan's, whose `max` splits
    a tie in halves pair by pair, so ties get JAX's shares (the value is the
    same; differentiated, its jaxpr is imported)."""
    b.expect("axis", "reverse")
    combine = jax.lax.max if b.name == "cummax" else jax.lax.min
    scan = prims.LibraryCall(jax.lax.associative_scan, "associative_scan", ("axis", "reverse"))
    axis, reverse = Constant(b.params["axis"]), Constant(b.params["reverse"])
    return b(scan, Constant(combine, hint=b.name), b.args[0], axis, reverse)


@twin("cumprod")
def _cumprod(b: Lowering) -> Node:
    axis = b.params["axis"]
    if not b.params["reverse"]:
        return b(rd.Cumprod(axis), b.args[0])
    flip = sh.Flip((axis,))
    return b(flip, b(rd.Cumprod(axis), b(flip, b.args[0])))


# -- contraction ----------------------------------------------------------------------------
def dot_specs(dimension_numbers, lhs_ndim: int, rhs_ndim: int) -> tuple[str, str, str]:
    """einsum subscripts of dot_general's lhs, rhs and result (batch axes,
    then the lhs's free axes, then the rhs's)."""
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    xs = [next(letters) for _ in range(lhs_ndim)]
    ys = [None] * rhs_ndim
    for i, j in zip([*lc, *lb], [*rc, *rb], strict=True):
        ys[j] = xs[i]
    ys = [c if c is not None else next(letters) for c in ys]
    free_x = [xs[i] for i in range(lhs_ndim) if i not in lc and i not in lb]
    free_y = [ys[j] for j in range(rhs_ndim) if j not in rc and j not in rb]
    out = [xs[i] for i in lb] + free_x + free_y
    return "".join(xs), "".join(ys), "".join(out)


@twin("dot_general")
def _dot_general(b: Lowering) -> Node | None:
    """`x @ y` when it is one (a matrix or batch of matrices times one, a
    vector's dot), else `Einsum`; operands cast first to a wider
    `preferred_element_type`. A non-default precision: no twin (PARTIAL)."""
    if b.params.get("precision") is not None:
        return None
    b.expect("dimension_numbers", "preferred_element_type")
    out_dtype = np.dtype(b.out_avals[0][1])
    args = [
        x if np.dtype(dtype) == out_dtype else b(sh.Cast(), x, Constant(out_dtype))
        for x, (_, dtype) in zip(b.args, b.in_avals, strict=True)
    ]
    lhs, rhs, out = dot_specs(b.params["dimension_numbers"], *(len(s) for s, _ in b.in_avals))
    if _is_matmul(lhs, rhs, out):
        return b(ar.NumpyMatMul(), *args)
    return b(Einsum(f"{lhs},{rhs}->{out}"), *args)


def _is_matmul(lhs: str, rhs: str, out: str) -> bool:
    """Whether `lhs,rhs->out` is numpy's `lhs @ rhs` (no broadcasting)."""
    if not lhs or not rhs:  # a scalar operand: a product, not a matmul
        return False
    if len(lhs) == 1 and len(rhs) == 1:
        return lhs == rhs and out == ""
    if len(lhs) == 1 or len(rhs) == 1:
        return len(lhs) <= 2 and len(rhs) <= 2 and lhs[-1] == rhs[0] and len(out) == 1
    batch = lhs[:-2]
    return (
        len(lhs) == len(rhs)
        and rhs[:-2] == batch
        and lhs[-1] == rhs[-2]
        and out == batch + lhs[-2] + rhs[-1]
    )


# -- linear algebra (real matrices; leading axes batch) ------------------------------------
def _applies(node: Node, cls) -> bool:
    return isinstance(node, Apply) and isinstance(getattr(node.fn, "value", None), cls)


def _swaps_last_two(a: Node, t: Node) -> bool:
    """Whether node `t` is `a` with its last two axes swapped (lax's `_T`)."""
    if not _applies(t, sh.Transpose) or t.args[0] is not a:
        return False
    perm = tuple(t.args[1].value)
    n = len(perm)
    return n >= 2 and perm == (*range(n - 2), n - 1, n - 2)


def _symmetrized(x: Node) -> bool:
    """Whether node `x` is lax's `symmetrize(a)`, `(a + a^T) / 2`, as imported."""
    if not _applies(x, ar.Div) or not isinstance(x.args[1], Constant):
        return False
    two = x.args[1].value
    if np.ndim(two) != 0 or two != 2 or not _applies(x.args[0], ar.Add):
        return False
    p, q = x.args[0].args
    return _swaps_last_two(p, q) or _swaps_last_two(q, p)


def _is_complex(aval) -> bool:
    return np.issubdtype(aval[1], np.complexfloating)


@twin("cholesky")
def _cholesky(b: Lowering) -> Node | None:
    """`Cholesky` (`jnp.linalg.cholesky`, the lower factor, zeros above) of an
    operand symmetrized in the jaxpr (`lax.linalg.cholesky`'s default,
    `jnp.linalg.cholesky`, `multivariate_normal`). `Cholesky` symmetrizes
    its operand, and its gradient is symmetric; lax's `cholesky` reads the
    lower triangle and its gradient is not symmetric, so on any other operand
    (`jax.scipy.linalg.cholesky`, `symmetrize_input=False`) the two differ:
    no twin (PARTIAL). On a symmetrized operand they agree: the symmetrize
    before it turns lax's gradient into `Cholesky`'s."""
    b.expect()
    if _is_complex(b.in_avals[0]) or not _symmetrized(b.args[0]):
        return None
    return b(Cholesky(), b.args[0])


@twin("triangular_solve")
def _triangular_solve(b: Lowering) -> Node | None:
    """`TriangularSolve(lower, transpose_a, unit_diagonal)(a, b)` (left side:
    op(a) x = b); a right-side solve, x op(a) = b, as op(a)^T x^T = b^T.
    `conjugate_a` changes nothing on real matrices; complex ones: no twin."""
    b.expect("left_side", "lower", "transpose_a", "conjugate_a", "unit_diagonal")
    if any(_is_complex(aval) for aval in b.in_avals):
        return None
    p = b.params
    a, rhs = b.args
    if p["left_side"]:
        return b(TriangularSolve(p["lower"], int(p["transpose_a"]), p["unit_diagonal"]), a, rhs)
    ndim = len(b.in_avals[1][0])
    swap = Constant((*range(ndim - 2), ndim - 1, ndim - 2))
    solve = TriangularSolve(p["lower"], 1 - int(p["transpose_a"]), p["unit_diagonal"])
    return b(sh.Transpose(), b(solve, a, b(sh.Transpose(), rhs, swap)), swap)


# -- shapes ---------------------------------------------------------------------------------
@twin("reshape")
def _reshape(b: Lowering) -> Node:
    b.expect("new_sizes", "dimensions")
    x = b.args[0]
    if b.params.get("dimensions") is not None:
        x = b(sh.Transpose(), x, Constant(tuple(b.params["dimensions"])))
    return b(sh.Reshape(), x, Constant(tuple(b.params["new_sizes"])))


@twin("squeeze")
def _squeeze(b: Lowering) -> Node:
    b.expect("dimensions")
    return b(sh.Reshape(), b.args[0], Constant(tuple(b.out_avals[0][0])))


@twin("broadcast_in_dim")
def _broadcast_in_dim(b: Lowering) -> Node:
    """Length-1 axes inserted where the result has axes the operand lacks,
    then broadcast (each step left out when it changes nothing)."""
    b.expect("shape", "broadcast_dimensions")
    shape, dims = tuple(b.params["shape"]), b.params["broadcast_dimensions"]
    expanded = [1] * len(shape)
    for d, n in zip(dims, b.in_avals[0][0], strict=True):
        expanded[d] = n
    x = b.args[0]
    if tuple(expanded) != tuple(b.in_avals[0][0]):
        x = b(sh.Reshape(), x, Constant(tuple(expanded)))
    if tuple(expanded) != shape:
        x = b(sh.BroadcastTo(), x, Constant(shape))
    return x


@twin("transpose")
def _transpose(b: Lowering) -> Node:
    return b(sh.Transpose(), b.args[0], Constant(tuple(b.params["permutation"])))


@twin("rev")
def _rev(b: Lowering) -> Node:
    return b(sh.Flip(tuple(b.params["dimensions"])), b.args[0])


@twin("concatenate")
def _concatenate(b: Lowering) -> Node:
    return b(sh.Concat(b.params["dimension"]), b(prims.MakeTuple(), *b.args))


@twin("stack")
def _stack(b: Lowering) -> Node:
    return b(sh.Stack(b.params["axis"]), b(prims.MakeTuple(), *b.args))


@twin("unstack")
def _unstack(b: Lowering) -> Node:
    return b(sh.Unstack(b.params["axis"]), b.args[0])


@twin("split")
def _split(b: Lowering) -> Node:
    cuts = tuple(int(c) for c in np.cumsum(b.params["sizes"])[:-1])
    return b(sh.Split(cuts, b.params["axis"]), b.args[0])


@twin("tile")
def _tile(b: Lowering) -> Node:
    return b(sh.Tile(tuple(b.params["reps"])), b.args[0])


# -- the importer's entry point ---------------------------------------------------------
def _inexact(aval) -> bool:
    try:
        return np.issubdtype(aval[1], np.inexact)
    except TypeError:  # an extended dtype (a PRNG key): no gradient
        return False


def import_equation(
    graph: FuncGraph,
    prim,
    params: dict,
    in_avals,
    out_avals,
    args: list,
    from_bits: bool,
    effect: bool = False,
) -> list[Node]:
    """The nodes of the results of equation `prim[params](*args)` (see the
    module for the primitive chosen); `from_bits`: a float rebuilt from a
    float's bits; `effect`: the equation has an effect (a debug callback)."""
    name = prim.name
    debug = DebugInfo(name=name.replace("-", "_"))
    node = None
    if effect and not any(_inexact(a) for a in out_avals):
        call = EffectCall(prim, params, in_avals)
        node = graph.apply(Constant(call, hint=name), *args, debug=debug)
    elif from_bits:
        bits = FloatFromBits(prim, params, in_avals)
        node = graph.apply(Constant(bits, hint=name), *args, debug=debug)
    elif not any(_inexact(a) for a in out_avals):
        index = IndexArithmetic(prim, params, in_avals)
        node = graph.apply(Constant(index, hint=name), *args, debug=debug)
    elif name in TWINS:
        lowering = Lowering(graph, prim, params, in_avals, out_avals, args, debug)
        node = TWINS[name](lowering)
    if node is None:
        lax_prim = lax_class(name)(prim, params, in_avals)
        node = graph.apply(Constant(lax_prim, hint=name), *args, debug=debug)
    if not prim.multiple_results:
        return [node]
    get = Constant(prims.GetItem())
    return [graph.apply(get, node, Constant(k), debug=debug) for k in range(len(out_avals))]
