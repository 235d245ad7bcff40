"""Gradient rules of the lax reductions, contractions and shape primitives
with no `ops` twin (`reduce_sum`, `transpose`, `broadcast_in_dim`, ... are
imported as their twins: `k_transform.ops.lax_map`).

Same contract as `k_transform.ops.lax_rules` (which holds `lax_rule` and the
elementwise rules): a getter per lax primitive class reads the parameters and
input avals statically and returns a bprop written with our primitives.
Rules that need a scatter or a gather call `jax.lax` functions; the parser
keeps them as library calls, which second order imports from their jaxprs
again (`k_transform.frontend.jaxpr`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.errors import KTransformError
from k_transform.ops.lax import lax_op, traced_op
from k_transform.ops.lax_map import dot_specs
from k_transform.ops.lax_rules import _inexact, _no_gradient, lax_rule
from k_transform.ops.reduce import Cumsum


# -- cumulative (cumsum and cumprod are imported as Cumsum and Cumprod) --------------------
@lax_rule("cumlogsumexp")
def _cumlogsumexp(p):
    back = Cumsum(p.param["axis"], not p.param["reverse"])
    return lambda x, out, dout: (jnp.exp(x) * back(dout * jnp.exp(-out)),)


# -- contraction ----------------------------------------------------------------------------
@lax_rule("dot_general")
def _dot_general(p):
    """Only a dot_general with a precision (`ops.lax_map.PARTIAL`); the others
    are imported as NumpyMatMul or Einsum."""
    shapes = (len(p.in_avals[0][0]), len(p.in_avals[1][0]))
    x, y, o = dot_specs(p.param["dimension_numbers"], *shapes)
    to_x, to_y = f"{o},{y}->{x}", f"{x},{o}->{y}"

    def bprop(x, y, out, dout):
        return jnp.einsum(to_x, dout, y), jnp.einsum(to_y, x, dout)

    return bprop


# -- shapes (the others are imported as their ops twins) ---------------------------
@lax_rule("slice")
def _slice(p):
    (shape, dtype) = p.in_avals[0]
    start, limit = p.param["start_indices"], p.param["limit_indices"]
    strides = p.param["strides"] or (1,) * len(shape)
    out_shape = tuple(-(-(hi - lo) // s) for lo, hi, s in zip(start, limit, strides, strict=True))
    config = tuple(
        (lo, n - (lo + (m - 1) * s + 1) if m else n - lo, s - 1)
        for lo, n, m, s in zip(start, shape, out_shape, strides, strict=True)
    )
    pad = lax_op("pad", [(out_shape, dtype), ((), dtype)], padding_config=config)
    zero = np.zeros((), dtype)
    return lambda x, out, dout: (pad(dout, zero),)


@lax_rule("pad")
def _pad(p):
    dtype, config = p.in_avals[0][1], p.param["padding_config"]
    out_shape = p.out_avals()[0]
    unpad_config = tuple((-lo, -hi, 0) for lo, hi, _ in config)
    unpad = lax_op("pad", [(out_shape, dtype), ((), dtype)], padding_config=unpad_config)
    mid = tuple(n - lo - hi for n, (lo, hi, _) in zip(out_shape, config, strict=True))
    pick = lax_op(
        "slice",
        [(mid, dtype)],
        start_indices=(0,) * len(mid),
        limit_indices=mid,
        strides=tuple(i + 1 for _, _, i in config),
    )
    zero = np.zeros((), dtype)

    def bprop(x, pad_value, out, dout):
        dx = pick(unpad(dout, zero))
        return dx, jnp.sum(dout) - jnp.sum(dx)

    return bprop


# -- dynamic slices, gather, scatter ------------------------------------------------------
@lax_rule("dynamic_slice")
def _dynamic_slice(p):
    nones = (None,) * (len(p.in_avals) - 1)

    def bprop(xs, out, dout):
        x = xs[0]
        zeros = jnp.zeros_like(x)
        return (jax.lax.dynamic_update_slice(zeros, dout, xs[1:]),) + nones

    return bprop


@lax_rule("dynamic_update_slice")
def _dynamic_update_slice(p):
    nones = (None,) * (len(p.in_avals) - 2)
    sizes = p.in_avals[1][0]

    def bprop(xs, out, dout):
        index = xs[2:]
        dx = jax.lax.dynamic_update_slice(dout, jnp.zeros_like(xs[1]), index)
        return (dx, jax.lax.dynamic_slice(dout, index, sizes)) + nones

    return bprop


def scatter_add_as(dn, q: dict, op=jax.lax.scatter_add):
    """`op(x, indices, updates)` (a scatter-add, or another lax scatter)
    with the dimension numbers `dn` and the index options of the gather or
    scatter whose parameters are `q`."""

    def scatter(x, indices, updates):
        return op(
            x,
            indices,
            updates,
            dn,
            indices_are_sorted=q["indices_are_sorted"],
            unique_indices=q["unique_indices"],
            mode=q["mode"],
        )

    return scatter


@lax_rule("gather")
def _gather(p):
    dn, q = p.param["dimension_numbers"], p.param
    scatter_dn = jax.lax.ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims,
        inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.start_indices_batching_dims,
    )

    scatter = scatter_add_as(scatter_dn, q)

    add = traced_op("scatter-add", scatter, [*p.in_avals, p.out_avals()])

    def bprop(x, indices, out, dout):
        return add(jnp.zeros_like(x), indices, dout), None

    return bprop


def _window_gather(p):
    """The gather that reads back, for each element of a scatter's updates, the
    operand element it was scattered to (the scatter's adjoint on `updates`)."""
    dn, q = p.param["dimension_numbers"], p.param
    updates_shape = p.in_avals[2][0]
    slice_sizes, pos = [], 0
    for i in range(len(p.in_avals[0][0])):
        if i in dn.inserted_window_dims or i in dn.operand_batching_dims:
            slice_sizes.append(1)
        else:
            slice_sizes.append(updates_shape[dn.update_window_dims[pos]])
            pos += 1
    gather_dn = jax.lax.GatherDimensionNumbers(
        offset_dims=dn.update_window_dims,
        collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims,
    )

    def gather(x, indices):
        return jax.lax.gather(
            x,
            indices,
            gather_dn,
            tuple(slice_sizes),
            indices_are_sorted=q["indices_are_sorted"],
            unique_indices=q["unique_indices"],
            mode=q["mode"],
            fill_value=0,  # an update the scatter dropped (out of bounds) reads no gradient
        )

    return lambda avals: traced_op("gather", gather, avals)


@lax_rule("scatter-add")
def _scatter_add(p):
    pick = _window_gather(p)(p.in_avals[:2])
    return lambda x, indices, updates, out, dout: (dout, None, pick(dout, indices))


@lax_rule("scatter-sub")
def _scatter_sub(p):
    pick = _window_gather(p)(p.in_avals[:2])
    return lambda x, indices, updates, out, dout: (dout, None, -pick(dout, indices))


@lax_rule("scatter")
def _scatter(p):
    """An overwriting scatter (`x.at[i].set(u)` in library code). With repeated
    indices one update wins each operand element; which one is found by
    scattering unique ids the same way and reading them back (JAX's approach):
    the operand gets `dout` where nothing was written, each update the `dout`
    of the element it won."""
    dn, q = p.param["dimension_numbers"], p.param
    (x_shape, _), index_aval, (u_shape, _) = p.in_avals
    ids_avals = [(x_shape, np.int32), index_aval, (u_shape, np.int32)]

    scatter = scatter_add_as(dn, q, jax.lax.scatter)
    place = traced_op("scatter", scatter, ids_avals)
    pick_ids = _window_gather(p)(ids_avals[:2])
    pick = _window_gather(p)(p.in_avals[:2])
    ids = np.arange(1, int(np.prod(u_shape)) + 1, dtype=np.int32).reshape(u_shape)

    def bprop(x, indices, updates, out, dout):
        written = place(jnp.zeros(x_shape, jnp.int32), indices, ids)
        won = pick_ids(written, indices) == ids
        dx = jnp.where(written == 0, dout, jnp.zeros_like(dout))
        return dx, None, jnp.where(won, pick(dout, indices), jnp.zeros_like(updates))

    return bprop


@lax_rule("top_k")
def _top_k(p):
    """The k largest along `axis`: each value's sensitivity goes back to where it
    was taken from (the indices are distinct within a row)."""
    axis = p.param.get("axis", len(p.in_avals[0][0]) - 1)

    def bprop(x, out, dout):
        back = jnp.put_along_axis(jnp.zeros_like(x), out[1], dout[0], axis=axis, inplace=False)
        return (back,)

    return bprop


# -- sort ---------------------------------------------------------------------------------
@lax_rule("sort")
def _sort(p):
    dim, n = p.param["dimension"], len(p.in_avals)
    if p.param["num_keys"] != 1 or n > 2:
        raise KTransformError(
            "cannot differentiate the lax primitive `sort` with several keys or more than "
            "two operands"
        )
    if not _inexact(p.in_avals[0]):
        return _no_gradient(p)
    second = n == 2 and _inexact(p.in_avals[1])

    def unsort(x, d):
        # the inverse permutation by one scatter, not a second argsort
        order = jnp.argsort(x, axis=dim, stable=True)
        iota = jax.lax.broadcasted_iota(order.dtype, order.shape, dim)
        inverse = jnp.put_along_axis(jnp.zeros_like(order), order, iota, axis=dim, inplace=False)
        return jnp.take_along_axis(d, inverse, axis=dim)

    if n == 1:
        return lambda xs, out, dout: (unsort(xs[0], dout[0]),)
    if second:
        return lambda xs, out, dout: (unsort(xs[0], dout[0]), unsort(xs[0], dout[1]))
    return lambda xs, out, dout: (unsort(xs[0], dout[0]), None)


# -- convolution ----------------------------------------------------------------------------
def _dilate(sizes, factors) -> np.ndarray:
    return np.array([0 if s == 0 else 1 + f * (s - 1) for s, f in zip(sizes, factors, strict=True)])


def _swap01(spec) -> tuple:
    return (spec[1], spec[0], *spec[2:])


def _split_axis(shape, src: int, parts: int) -> tuple:
    """`shape` with axis `src` split into (parts, shape[src] // parts)."""
    return (*shape[:src], parts, shape[src] // parts, *shape[src + 1 :])


def _merge_axis(shape, src: int, dst: int) -> tuple:
    """(perm, shape) moving axis `src` in front of axis `dst` (numbered with `src`
    removed) and merging the two: JAX's `lax.reshape(x, shape, perm)` idiom."""
    perm = [i for i in range(len(shape)) if i != src]
    perm.insert(dst, src)
    merged = [s for i, s in enumerate(shape) if i != src]
    merged[dst] *= shape[src]
    return tuple(perm), tuple(merged)


@lax_rule("conv_general_dilated")
def _conv_general_dilated(p):
    """Both transposes of a convolution are convolutions (XLA's arithmetic, as in
    JAX's rule): the input's gradient convolves `dout` with the flipped kernel
    (strides and input dilation trade places), the kernel's convolves the input
    with `dout` (groups of features become groups of the batch)."""
    q = p.param
    dn = q["dimension_numbers"]
    (lhs_shape, _), (rhs_shape, _) = p.in_avals
    out_shape = p.out_avals()[0]
    fg, bg = q["feature_group_count"], q["batch_group_count"]
    strides, pads = q["window_strides"], q["padding"]
    lhs_dil, rhs_dil = q["lhs_dilation"], q["rhs_dilation"]
    in_sp = [lhs_shape[d] for d in dn.lhs_spec[2:]]
    k_sp = [rhs_shape[d] for d in dn.rhs_spec[2:]]
    out_sp = [out_shape[d] for d in dn.out_spec[2:]]
    k_dil, out_dil = _dilate(k_sp, rhs_dil), _dilate(out_sp, strides)
    lo = np.array([a for a, _ in pads])
    before = k_dil - lo - 1
    after = _dilate(in_sp, lhs_dil) + k_dil - 1 - out_dil - before
    lhs_pads = [(int(a), int(b)) for a, b in zip(before, after, strict=True)]
    hi = out_dil - _dilate(in_sp, lhs_dil) + k_dil - lo - 1
    rhs_pads = [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)]
    common = {"precision": q["precision"], "preferred_element_type": q["preferred_element_type"]}
    groups = max(fg, bg)
    # the kernel for the input's gradient: groups moved from its out axis to its in axis
    o_axis, i_axis = dn.rhs_spec[0], dn.rhs_spec[1]
    split = _split_axis(rhs_shape, o_axis, groups)
    perm, merged = _merge_axis(split, o_axis, i_axis)
    flip_axes = tuple(dn.rhs_spec[2:])

    def lhs_conv(g, w):
        return jax.lax.conv_general_dilated(
            g,
            w,
            lhs_dil,
            lhs_pads,
            lhs_dilation=strides,
            rhs_dilation=rhs_dil,
            dimension_numbers=jax.lax.ConvDimensionNumbers(
                dn.out_spec, _swap01(dn.rhs_spec), dn.lhs_spec
            ),
            feature_group_count=groups,
            **common,
        )

    def rhs_conv(x, g):
        return jax.lax.conv_general_dilated(
            x,
            g,
            rhs_dil,
            rhs_pads,
            lhs_dilation=lhs_dil,
            rhs_dilation=strides,
            dimension_numbers=jax.lax.ConvDimensionNumbers(
                _swap01(dn.lhs_spec), _swap01(dn.out_spec), _swap01(dn.rhs_spec)
            ),
            feature_group_count=bg,
            batch_group_count=fg,
            **common,
        )

    dout_aval = (out_shape, p.in_avals[0][1])
    to_lhs = traced_op("conv_general_dilated", lhs_conv, [dout_aval, (merged, p.in_avals[1][1])])
    to_rhs = traced_op("conv_general_dilated", rhs_conv, [p.in_avals[0], dout_aval])
    # batch groups: the input's gradient comes out with groups on its feature axis
    b_axis, f_axis = dn.lhs_spec[0], dn.lhs_spec[1]
    lhs_grad_shape = to_lhs.out_avals()[0]
    out_perm, out_merged = _merge_axis(_split_axis(lhs_grad_shape, f_axis, bg), f_axis, b_axis)

    def bprop(x, w, out, dout):
        kernel = jnp.flip(w, flip_axes)
        if groups > 1:
            kernel = jnp.reshape(jnp.transpose(jnp.reshape(kernel, split), perm), merged)
        dx = to_lhs(dout, kernel)
        if bg > 1:
            parts = jnp.reshape(dx, _split_axis(lhs_grad_shape, f_axis, bg))
            dx = jnp.reshape(jnp.transpose(parts, out_perm), out_merged)
        return dx, to_rhs(x, dout)

    return bprop
