"""Gradient rules of the lax reductions that pick an element: windowed
reductions (`reduce_window_max`, `reduce_window_min`, `reduce_window_sum`,
and a `reduce_window` whose reducer is `max`, `min` or `add`: max and average
pooling) and the scatters that keep a maximum or minimum (`scatter-max`,
`scatter-min`: `jax.ops.segment_max`, `x.at[i].max(u)`).

Same contract as `k_transform.ops.lax_rules` (which holds `lax_rule`): a
getter per lax primitive class reads the parameters and input avals
statically and returns a bprop written with our primitives and library calls
that have rules, so it is differentiated again (second order, jvp).

Windows. Which operand element sits at each position of each window is
static: `_window_positions` lists, for every output element, the flat index
of the operand element at each of its window positions, row-major (the order
XLA visits them), or `size` for a position in the padding or in a hole of
base dilation (those hold the init value). The bprop reads the windows with
one gather and sends each output's sensitivity back with one `segment_sum`,
which drops index `size`.
- max/min: each window's sensitivity goes to its first largest (smallest)
  element, a padding position included (JAX's `select_and_scatter_add` with
  `ge`/`le`; a tie is not shared); with a NaN, where XLA's select puts it.
- sum: every element of the window gets the window's sensitivity.
- `reduce_window` (the generic form, which kt's import meets when the init
  value is traced, a Python float in the user's code): as the above; the
  init value (padding, and the start of each window's reduction) gets the
  sensitivity of the windows where a padding position is picked or where it
  is strictly larger (smaller) than the element picked (a tie goes to the
  element, as with the identity JAX uses). JAX gives this form no reverse
  mode, and its forward mode shares ties; the rule follows JAX's answer for
  the same code with a constant init value.

Scatters. JAX's rule shares each result element's sensitivity evenly among
the contenders equal to the result: the updates that land there and the
operand element itself; an operand element no update reaches keeps its
sensitivity.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.errors import KTransformError
from k_transform.ops.lax import traced_op
from k_transform.ops.lax_rules import lax_rule
from k_transform.ops.lax_shape_rules import _window_gather, scatter_add_as


# -- windowed reductions ----------------------------------------------------------------
def _window_positions(x_shape, out_shape, q) -> np.ndarray:
    """`(*out_shape, K)` flat operand indices of each output's K window positions
    (row-major), `size` where the position is padding or a dilation hole."""
    n = len(x_shape)
    size = int(np.prod(x_shape))
    flat = np.zeros((1,) * 2 * n, np.int64)
    valid = np.ones((1,) * 2 * n, bool)
    strides = np.cumprod((1,) + tuple(x_shape[:0:-1]))[::-1]  # row-major element strides
    for d in range(n):
        o = np.arange(out_shape[d]).reshape(-1, 1)
        k = np.arange(q["window_dimensions"][d]).reshape(1, -1)
        # position in the dilated operand (padding removed) of window element k of output o
        c = o * q["window_strides"][d] + k * q["window_dilation"][d] - q["padding"][d][0]
        bd = q["base_dilation"][d]
        ok = (c >= 0) & (c % bd == 0) & (c // bd < x_shape[d])
        shape = [1] * 2 * n
        shape[d], shape[n + d] = out_shape[d], q["window_dimensions"][d]
        flat = flat + (c // bd * strides[d]).reshape(shape)
        valid = valid & ok.reshape(shape)
    index = np.where(valid, flat, size)
    index = np.broadcast_to(index, tuple(out_shape) + tuple(q["window_dimensions"]))
    return index.reshape(tuple(out_shape) + (-1,))


def _window_bprop(x_aval, out_shape, q, reducer, init=None):
    """The bprop of a windowed `reducer` ("max", "min", "add") of an operand of
    aval `x_aval`; `init` the identity, or None when the init value is an input
    (the generic `reduce_window`: the bprop then takes and returns it too)."""
    x_shape, dtype = x_aval
    size = int(np.prod(x_shape))
    index = _window_positions(x_shape, out_shape, q)
    valid = index < size
    safe = np.where(valid, index, 0)
    n_init = (np.sum(~valid, axis=-1) + 1).astype(dtype)  # init values summed: padding, start
    place = np.arange(index.shape[-1])  # the window positions, in order
    last = index.shape[-1] - 1

    def dx_of(chosen, dout):
        """Each output's sensitivity sent to the flat operand index `chosen`
        (`size`, padding or the init value, is dropped)."""
        dflat = jax.ops.segment_sum(
            jnp.reshape(dout, (-1,)), jnp.reshape(chosen, (-1,)), num_segments=size
        )
        return jnp.reshape(dflat, x_shape)

    def select(x, fill):
        """Each window's values and the position XLA's select picks: it walks
        the window keeping the element it holds while that is >= (<=) the next,
        so the first largest (smallest), or, a NaN being dropped for the next
        element, the first after the last NaN (the last NaN if it ends the window)."""
        w = jnp.where(valid, jnp.reshape(x, (-1,))[safe], fill)
        last_nan = jnp.max(jnp.where(jnp.isnan(w), place, -1), axis=-1, keepdims=True)
        after = place > last_nan
        if reducer == "max":
            best = jnp.max(jnp.where(after, w, -np.inf), axis=-1, keepdims=True)
        else:
            best = jnp.min(jnp.where(after, w, np.inf), axis=-1, keepdims=True)
        at = jnp.argmax(after & (w == best), axis=-1)
        return w, jnp.where(last_nan[..., 0] == last, last, at)

    def chosen_of(at):
        return jnp.take_along_axis(index, at[..., None], axis=-1)[..., 0]

    if reducer == "add":
        spread = index.reshape(-1)
        if init is not None:
            return lambda x, out, dout: (dx_of(spread, jnp.repeat(dout, index.shape[-1])),)

        def bprop_sum(x, z, out, dout):
            d = dout[0]
            return dx_of(spread, jnp.repeat(d, index.shape[-1])), jnp.sum(d * n_init)

        return bprop_sum

    if init is not None:
        fill = np.asarray(init, dtype)
        return lambda x, out, dout: (dx_of(chosen_of(select(x, fill)[1]), dout),)

    def bprop_chooser(x, z, out, dout):
        w, at = select(x, z)
        # the init value takes the window only from a smaller (larger) choice
        picked = jnp.take_along_axis(w, at[..., None], axis=-1)[..., 0]
        beats = z > picked if reducer == "max" else z < picked
        chosen = jnp.where(beats, size, chosen_of(at))  # `size`: padding or the init value
        dz = jnp.sum(jnp.where(chosen == size, dout[0], jnp.zeros_like(dout[0])))
        return dx_of(chosen, dout[0]), dz

    return bprop_chooser


def _out_shape(p):
    out = p.out_avals()
    return (out[0] if isinstance(out, list) else out)[0]


@lax_rule("reduce_window_max", "reduce_window_min", "reduce_window_sum")
def _reduce_window_monoid(p):
    """Max (min) pooling, sum pooling with the identity init value."""
    reducer = p.prim.name.removeprefix("reduce_window_")
    reducer = "add" if reducer == "sum" else reducer
    identity = {"max": -np.inf, "min": np.inf, "add": 0.0}[reducer]  # float results only
    return _window_bprop(p.in_avals[0], _out_shape(p), p.param, reducer, identity)


def _reducer(jaxpr) -> str | None:
    """`max`, `min` or `add` when the jaxpr is that one operation of its two inputs."""
    eqns = jaxpr.eqns
    if len(eqns) != 1 or len(jaxpr.invars) != 2 or list(eqns[0].outvars) != list(jaxpr.outvars):
        return None
    name = eqns[0].primitive.name
    operands = sorted(map(id, eqns[0].invars))  # both inputs, not a literal or one twice
    if name in ("max", "min", "add") and operands == sorted(map(id, jaxpr.invars)):
        return name
    return None


@lax_rule("reduce_window")
def _reduce_window(p):
    """A `reduce_window` given its reducer as a jaxpr: `max`, `min` or `add` of
    one operand, with an init value that is an input (see the module)."""
    reducer = _reducer(p.param["jaxpr"])
    if len(p.in_avals) != 2 or reducer is None or p.param["consts"]:
        raise KTransformError(
            "cannot differentiate the lax primitive `reduce_window` (in a library call "
            "imported from its jaxpr): k_transform has no gradient rule for windowed "
            "reductions other than max, min and sum of one operand"
        )
    return _window_bprop(p.in_avals[0], _out_shape(p), p.param, reducer)


# -- scatters that keep a maximum or minimum --------------------------------------------
@lax_rule("scatter-max", "scatter-min")
def _scatter_extremum(p):
    """`out[j] = max(x[j], updates landing on j)`: the sensitivity of `out[j]` is
    shared evenly by the contenders equal to it, the updates landing on `j` and
    `x[j]`; an `x[j]` no update reaches keeps it."""
    dn, q = p.param["dimension_numbers"], p.param
    (x_shape, _), index_aval, (u_shape, _) = p.in_avals

    scatter = scatter_add_as(dn, q)

    count = traced_op(
        "scatter-add", scatter, [(x_shape, np.int32), index_aval, (u_shape, np.int32)]
    )
    pick = _window_gather(p)(p.in_avals[:2])  # each update's element of an x-shaped array
    zeros, ones = np.zeros(x_shape, np.int32), np.ones(x_shape, np.int32)
    no_updates, all_updates = np.zeros(u_shape, np.int32), np.ones(u_shape, np.int32)

    def bprop(x, indices, updates, out, dout):
        won = updates == pick(out, indices)  # an update equal to the result where it lands
        kept = x == out
        reached = count(zeros, indices, all_updates) > 0
        ties = count(zeros, indices, jnp.where(won, all_updates, no_updates))
        ties = ties + jnp.where(kept, ones, zeros)
        share = dout / jnp.maximum(ties, 1)
        dx = jnp.where(reached, jnp.where(kept, share, jnp.zeros_like(dout)), dout)
        return dx, None, jnp.where(won, pick(share, indices), jnp.zeros_like(updates))

    return bprop
