"""`jax.experimental.ode.odeint` as one primitive whose gradient is the adjoint method.

Differentiating the solver's own steps (its jaxpr: an adaptive `while` per
output time) is what the program computes, but its step-size control takes
`0 ** -0.2` and `0 / 0` in branches it does not select, so that gradient is
NaN where the solution is fine (JAX's forward mode through the same steps
gives the same NaN). JAX's own gradient of odeint is the adjoint method:
the augmented system solved backwards in time. `Odeint` is that rule, with
the vector-Jacobian products of the user's dynamics made by k_transform
(`kt.vjp`), so the gradient is ours, as JAX defines it
(`tests/test_python_code.py::test_odeint_gradient_is_the_adjoint`).

The parser reads `odeint(func, y0, t, *args, rtol=..., ...)` in differentiated
code as `Odeint(func, rtol, atol, mxstep, hmax)` applied to `(y0, t, *args)`
(`ops.mapping`'s adapter table). `func` must be a function that reads no
variable of the function calling odeint (pass such values in `args`, as JAX
asks for the values to differentiate). Called in code run as Python, odeint
is JAX's function, read through its jaxpr: its solver steps are
differentiated (`frontend.jaxpr` refuses that, naming odeint).
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
from jax.experimental.ode import odeint

from k_transform.bprop_registry import bprop_getters
from k_transform.errors import KTransformError
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ops.mapping import NotStatic, register_function
from k_transform.reverse import vjp


class Odeint(Primitive):
    """`Odeint(func, rtol, atol, mxstep, hmax)(y0, t, *args)`: the solution of
    dy/dt = func(y, t, *args) at the times `t` (`odeint`'s)."""

    n_inputs = None  # y0, t and the arguments of `func`

    def __init__(self, func, rtol=1.4e-8, atol=1.4e-8, mxstep=jnp.inf, hmax=jnp.inf):
        if isinstance(func, FuncGraph):  # a nested def: the Python function it is
            if func.python_fn is None:
                raise KTransformError(
                    f"odeint of `{func.name}`, a function reading variables of the function "
                    "calling odeint: pass them to odeint as arguments after `t`"
                )
            func = func.python_fn
        super().__init__("Odeint", func=func, rtol=rtol, atol=atol, mxstep=mxstep, hmax=hmax)

    def options(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "mxstep": self.mxstep, "hmax": self.hmax}

    def impl(self, y0, t, *args):
        return odeint(self.func, y0, t, *args, **self.options())


@register_function(odeint)
def _odeint_call(call):
    """`odeint(func, y0, t, *args, rtol=, atol=, mxstep=, hmax=)` with `func`
    and the options constants."""
    options = {"rtol": 1.4e-8, "atol": 1.4e-8, "mxstep": jnp.inf, "hmax": jnp.inf}
    if len(call.args) < 3 or set(call.kwargs) - set(options):
        return None
    if not isinstance(call.args[0], Constant):
        raise NotStatic("func")
    options.update({k: call.static(len(call.args), k) for k in call.kwargs})
    return Odeint(call.args[0].value, **options), call.args[1:]


class _Problem:
    """`func` and the options of one odeint call, held where the rule reads
    them (a function itself there would be parsed as a function of the rule)."""

    def __init__(self, func, options: dict):
        self.func, self.options = func, options


def adjoint(problem: _Problem, ys, ts, args, g):
    """The gradients of `<g, ys>` for `ys = odeint(func, y0, ts, *args,
    **options)`, w.r.t. `y0`, `ts` and `args`: the augmented system (y,
    y_bar, t_bar, args_bar) integrated backwards between consecutive output
    times."""
    func, options = problem.func, problem.options

    def at(tree, i):
        return jax.tree_util.tree_map(lambda leaf: leaf[i], tree)

    def augmented(state, minus_t, *a):
        y, y_bar = state[0], state[1]
        y_dot, pullback = vjp(func, y, -minus_t, *a)
        cts = pullback(y_bar)
        return (jax.tree_util.tree_map(operator.neg, y_dot), *cts)

    def step(carry, i):
        y_bar, t0_bar, args_bar = carry
        y_dot = func(at(ys, i), ts[i], *args)
        t_bar = sum(jnp.vdot(a, b) for a, b in zip(_leaves(y_dot), _leaves(at(g, i)), strict=True))
        t0_bar = t0_bar - t_bar
        start = (at(ys, i), y_bar, t0_bar, args_bar)
        times = jnp.stack([-ts[i], -ts[i - 1]])
        _, y_bar, t0_bar, args_bar = odeint(augmented, start, times, *args, **options)
        y_bar, t0_bar, args_bar = (at(v, 1) for v in (y_bar, t0_bar, args_bar))
        y_bar = jax.tree_util.tree_map(jnp.add, y_bar, at(g, i - 1))
        return (y_bar, t0_bar, args_bar), t_bar

    zeros = tuple(jax.tree_util.tree_map(jnp.zeros_like, a) for a in args)
    start = (at(g, -1), jnp.zeros((), ts.dtype), zeros)
    steps = jnp.arange(ts.shape[0] - 1, 0, -1)
    (y_bar, t0_bar, args_bar), rev_ts_bar = jax.lax.scan(step, start, steps)
    ts_bar = jnp.concatenate([t0_bar[None], rev_ts_bar[::-1]])
    return (y_bar, ts_bar, *args_bar)


adjoint.__kt_library__ = True  # imported through its jaxpr where differentiated again


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


@bprop_getters.register(Odeint)
def get_bprop_odeint(self):
    problem = _Problem(self.func, self.options())

    def bprop(xs, out, dout):
        return adjoint(problem, out, xs[1], xs[2:], dout)

    return bprop
