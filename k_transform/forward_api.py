"""Forward-mode API: `jvp`, `Jvp`.

`jvp(fn, inputs, v)` is `(out, J v)`, computed by double reverse: the
compiled program of `transforms.jvp_graph` (cached per function). Integer
inputs follow JAX: their tangents must be float0 or integer zeros
(`_integer_tangent`). `jvp_unchecked` is the same without the input check,
for `jacfwd` and `hvp`, which check their own inputs. Called inside code
being transformed, `jvp` lowers to graphs (`lowering.lower_jvp`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import lowering
from k_transform import runtime as rt
from k_transform.api import graph_of
from k_transform.compiled import (
    CompiledGraph,
    bind_keywords,
    check_float_inputs,
    takes_star_args,
    with_defaults,
)
from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend.targets import target_of
from k_transform.transforms import (
    jvp_graph,
)


def jvp(fn, inputs, v, has_aux=False):
    """`(out, J v)`, or `(out, J v, aux)` with `has_aux` (`fn` returns
    `(out, *aux)`; one aux value bare, several as a tuple): forward mode by
    double reverse. `inputs` and `v` are an array or a tuple of them
    (MindSpore's convention); `fn` may take `*args`."""
    single = not isinstance(inputs, (tuple, list))
    xs, vs = ((inputs,), (v,)) if single else (tuple(inputs), tuple(v))
    if len(xs) != len(vs):
        raise KTransformError(f"jvp: {len(xs)} inputs but {len(vs)} tangents")
    check_tangents("kt.jvp", xs, vs)
    vs = tuple(_integer_tangent(xs, k, t) for k, t in enumerate(vs))
    fn = target_of(fn, len(xs))
    if takes_star_args(fn):
        fn, xs, vs, given = _star_call(fn, xs, vs)
    else:
        xs, vs, given = _with_defaults(fn, xs, vs)
    if not has_aux:
        return jvp_unchecked(fn, xs, vs, given)
    # one run (the user's host code runs once): the aux values' tangents are dropped
    out, jv = jvp_unchecked(fn, xs, vs, given)
    (out, aux), jv = rt.split_aux(out), rt.split_aux(jv)[0]
    return out, jv, aux


def _star_call(fn, xs: tuple, vs: tuple) -> tuple:
    """For a function taking `*args`: its graph for this many arguments, and
    the inputs and tangents as that graph's parameters (`bind_keywords`: the
    `*args` values as one tuple; a parameter left to its default gets a zero
    tangent), and which of them the caller gave."""
    flat_x, where = bind_keywords(fn, xs, {})
    flat_v, _ = bind_keywords(fn, vs, {})
    passed = {index for index, _ in where}
    flat_v = tuple(
        v if k in passed else zero_tangent(x)
        for k, (x, v) in enumerate(zip(flat_x, flat_v, strict=True))
    )
    n_star = sum(1 for _, item in where if item is not None)
    given = tuple(k in passed for k in range(len(flat_x)))
    return graph_of(fn, star_arity=n_star), flat_x, flat_v, given


def _with_defaults(fn, xs: tuple, vs: tuple) -> tuple:
    """The inputs and tangents for all of `fn`'s parameters, where a call
    leaves some to their defaults (a `**kwargs` parameter: no keywords);
    those get zero tangents. For a graph or a gradient function (its Python
    signature is not its graph's), the constant defaults of its graph's
    parameters (`kt.jvp(kt.grad(f), ...)`, `def f(x, **kwargs)`). Also which
    inputs the caller gave (the defaults: constants to the transform)."""
    flat_x = with_defaults(fn, xs)
    rest = tuple(zero_tangent(x) for x in flat_x[len(xs) :])
    given = (True,) * len(xs) + (False,) * len(rest)
    return flat_x, (*vs, *rest), given


def zero_tangent(x):
    """The zero tangent of a value: zeros for its array leaves, a static
    leaf (a string, None) as it is, and None (the zero gradient) for an
    object (a Cell, an iterator: its tangent is an env, or none)."""

    def zero(leaf):
        numeric = isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex))
        if numeric:
            return jnp.zeros_like(leaf)
        return leaf if isinstance(leaf, (str, bytes, type(None), type, slice)) else None

    return jax.tree_util.tree_map(zero, x)


def check_tangents(api: str, xs: tuple, vs: tuple) -> None:
    """JAX's rule: each tangent has its input's structure and shapes (a
    tangent given as a tuple for one array broadcast silently, or failed
    deep inside the program with a bare TypeError)."""
    for k, (x, v) in enumerate(zip(xs, vs, strict=True)):
        rt.check_tangent(x, v, api, k)  # (inside transformed code: `CheckTangent`)


def _integer_tangent(xs, k: int, t):
    """JAX's rule for the tangent of an integer or boolean input `xs[k]`: it
    must be float0 (a zero of no dtype; made zeros here) or, ours too, a zero
    of an integer or boolean dtype; anything else is a TypeError."""
    leaves = jax.tree_util.tree_leaves
    if all(jnp.issubdtype(_dtype_of(leaf), jnp.inexact) for leaf in leaves(xs[k])):
        return t
    if getattr(t, "dtype", None) == jax.dtypes.float0:
        return jnp.zeros_like(xs[k])
    integral = all(not jnp.issubdtype(_dtype_of(leaf), jnp.inexact) for leaf in leaves(t))
    nonzero = any(
        not isinstance(leaf, jax.core.Tracer) and np.any(np.asarray(leaf)) for leaf in leaves(t)
    )
    if not integral or nonzero:
        check_float_inputs("kt.jvp", xs, (k,))
    return t


def _dtype_of(leaf):
    return leaf.dtype if hasattr(leaf, "dtype") else np.result_type(type(leaf))


jvp.__kt_lower__ = lowering.lower_jvp


def jvp_unchecked(fn, inputs, v, given: tuple | None = None):
    """`jvp` without the input check (jacfwd and hvp check their own input).
    `given`: which inputs the caller gave (see `transforms.jvp_graph`)."""
    single = not isinstance(inputs, (tuple, list))
    xs = (inputs,) if single else tuple(inputs)
    vs = (v,) if single else tuple(v)  # J v is shaped like the output either way
    if len(xs) != len(vs):
        raise KTransformError(f"jvp: {len(xs)} inputs but {len(vs)} tangents")
    given = None if given is None or all(given) else tuple(given)
    return _jvp_function(fn, given)(*xs, *vs)


def _jvp_remake(fn, given):
    def remake():
        del TRANSFORM.cache("grad.jvp")[id(fn), given]
        return _jvp_function(fn, given)

    return remake


def _jvp_function(fn, given: tuple | None = None) -> CompiledGraph:
    _jvp_cache = TRANSFORM.cache("grad.jvp")
    entry = _jvp_cache.get((id(fn), given))
    if entry is None or entry[0] is not fn:
        primal = graph_of(fn)
        graph = jvp_graph(primal, given)
        entry = (fn, CompiledGraph(graph, fn, primal=primal, remake=_jvp_remake(fn, given)))
        entry[1].bound_loops = True
        _jvp_cache[id(fn), given] = entry
    return entry[1]


class Jvp:
    """MindSpore-style `Jvp(fn)(inputs, v) -> (out, jvp_out)`."""

    __kt_own_call__ = True  # its `__call__` is never parsed as user code (`callables`)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, inputs, v):
        return jvp(self.fn, inputs, v)


# -- MindSpore's Taylor-mode and linearization functions over `jvp` -----------------
def linearize(fn, inputs):
    """MindSpore's `linearize(fn, inputs) -> (fn(*inputs), jvp_fn)`: `jvp_fn(v)`
    is `J v` at `inputs`, for `v` a tangent or a tuple of tangents, one per input."""
    xs = _as_inputs(inputs)
    out = fn(*xs)

    def jvp_fn(v):
        vs = (v,) if not isinstance(v, (tuple, list)) else tuple(v)
        return jvp(fn, xs, vs)[1]

    return out, jvp_fn


def jet(fn, primals, series):
    """MindSpore's `jet(fn, primals, series) -> (out, out_series)`: along the
    path `x(t)` whose k-th derivative at 0 is `series[k-1]` (one stack of
    derivatives per input, `x(0)` the primal), `out_series[k-1]` is the k-th
    derivative of `fn(x(t))` at 0: nested `jvp`s in `t`."""
    xs = _as_inputs(primals)
    ss = tuple(jnp.asarray(s, x.dtype) for s, x in zip(_as_inputs(series), xs, strict=True))
    order = jnp.shape(ss[0])[0]
    return fn(*xs), _stack_outputs(_path_derivatives(fn, xs, ss, order))


def derivative(fn, primals, order):
    """MindSpore's `derivative(fn, primals, order) -> (out, d^order out)`:
    `jet` with each input's first derivative one and the higher ones zero."""
    xs = _as_inputs(primals)
    ss = tuple(jnp.zeros((order, *jnp.shape(x)), x.dtype).at[0].set(1.0) for x in xs)
    return fn(*xs), _path_derivatives(fn, xs, ss, order)[-1]


def _as_inputs(values) -> tuple:
    """One array or a tuple or list of them; integer arrays made float32 (MindSpore's note)."""
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    return tuple(
        jnp.asarray(v, jnp.float32) if not jnp.issubdtype(jnp.result_type(v), jnp.inexact) else v
        for v in values
    )


def _path_derivatives(fn, xs: tuple, ss: tuple, order: int) -> list:
    """The derivatives 1..order at t = 0 of `fn(x(t))`, `x(t) = x + sum_k s[k-1] t^k / k!`."""

    def along(t):
        moved = []
        for x, s in zip(xs, ss, strict=True):
            y, term = x, 1.0
            for k in range(order):
                term = term * t / (k + 1)
                y = y + s[k] * term
            moved.append(y)
        return fn(*moved)

    def d_dt(h):
        return lambda t: jvp(h, (t,), (jnp.ones_like(t),))[1]

    t0 = jnp.zeros((), jnp.result_type(xs[0]))
    found, h = [], along
    for _ in range(order):
        h = d_dt(h)
        found.append(h(t0))
    return found


def _stack_outputs(derivatives: list):
    """Per output (an array, or each of a tuple's), its derivatives stacked on a new first axis."""
    if isinstance(derivatives[0], (tuple, list)):
        return type(derivatives[0])(jnp.stack(parts) for parts in zip(*derivatives, strict=True))
    return jnp.stack(derivatives)
