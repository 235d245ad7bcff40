"""Tracing user Python at the values it is called with, as Python would run it.

User code k_transform runs as Python (`frontend.python_code`) is traced into a
jaxpr so that our rules differentiate it. `jax.make_jaxpr` alone sees only
shapes, so a Python `if` on an array's value (`if jnp.sum(x) > 0:`), an
`int(n)` or a `while` on a computed value cannot run there, though Python,
and JAX's own eager gradient, run them: there the values are known.

`make_jaxpr_at(fn, values)` keeps them known. It traces `fn` with
`jax.make_jaxpr` under a trace of ours, `ConcreteTrace`, whose tracers carry
two things: the concrete value (computed by JAX's eager evaluation, one
primitive at a time) and the staged tracer of the jaxpr being recorded. Each
primitive the user's Python applies is both evaluated and recorded; `bool`,
`int` and the like read the concrete value, so Python takes the branch it
takes for these values, and the jaxpr records the path taken (as Python
would run it: it holds for these values, and is traced again at the next
call). What needs a value JAX does not lend from a traced array under its
own gradient (`float(x)`, `np.asarray(x)`) fails as there.

Nothing is differentiated here: values are computed, equations recorded.
Under a jit (the arguments are tracers) there are no values; the caller
traces abstractly, as `jax.jit` does, and a Python `if` on a traced value is
refused as JAX refuses it.

Calls of functions with a rule of their own (`custom_jvp`, `custom_vjp`)
are recorded as such calls, as `jax.make_jaxpr` records them: the jaxpr
import keeps JAX's own rules and refuses the user's. A debug callback
(`jax.debug.print`) is only recorded: it runs when the program runs.

This relies on JAX's trace API (`jax._src.core`: `Trace`, `Tracer`,
`set_current_trace`); where it is missing (an older JAX), `available()` is
False and the caller traces abstractly.
"""

from __future__ import annotations

import operator

import jax

try:  # JAX's trace API (the "stackless" core)
    from jax._src import core as _core
    from jax._src import linear_util as lu

    _NAMES = "Trace Tracer typeof set_current_trace eval_trace unsafe_get_current_trace"
    _API = all(hasattr(_core, name) for name in _NAMES.split())
except ImportError:  # pragma: no cover - an older JAX
    _core, _API = None, False

_RECORDED_ONLY = frozenset({"debug_callback", "debug_print"})


def available() -> bool:
    return _API


def concrete(leaf) -> bool:
    """Whether `leaf` holds a value (not a tracer of an enclosing jit)."""
    return not isinstance(leaf, jax.core.Tracer)


def make_jaxpr_at(flat_fn, values: list, structs: list):
    """`jax.make_jaxpr(flat_fn, return_shape=True)(*structs)`, traced with
    `values` (concrete, one per struct) known to the user's Python."""

    def at_values(*staged):
        trace = ConcreteTrace(_core.unsafe_get_current_trace())
        tracers = [ConcreteTracer(trace, v, s) for v, s in zip(values, staged, strict=True)]
        with _core.set_current_trace(trace):
            out = flat_fn(*tracers)
        return jax.tree_util.tree_map(trace.staged, out)

    return jax.make_jaxpr(at_values, return_shape=True)(*structs)


def current_trace():
    """JAX's current trace (None without its trace API)."""
    return _core.unsafe_get_current_trace() if _API else None


def settle(places) -> None:
    """Python's values in the names a function run as Python rebound while
    it was traced at its values (`global RUNNING; RUNNING = 0.9 * RUNNING +
    0.1 * jax.lax.stop_gradient(x)`; `places` from `guards.rebound_places`):
    where a name holds our tracers once the trace is over, their values, so
    the user's global holds an array, as JAX's eager gradient leaves it, and
    not a tracer that escaped its trace."""
    for place, name, _ in places:
        if name is None:  # a closure cell (`nonlocal`)
            try:
                value = place.cell_contents
            except ValueError:  # empty
                continue
        else:
            value = place.get(name)
        settled = _settled(value, set())
        if settled is not value:
            if name is None:
                place.cell_contents = settled
            else:
                place[name] = settled


def _settled(value, seen: set):
    """`value` with our tracers replaced by their values: a list or dict in
    place (another name may hold it), a tuple made anew; `value` itself
    when it holds none."""
    if _API and isinstance(value, ConcreteTracer):
        return value.value
    if id(value) in seen or type(value) not in (list, dict, tuple):
        return value
    seen.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _settled(item, seen)
        return value
    items = [_settled(item, seen) for item in value]
    if isinstance(value, list):
        value[:] = items
        return value
    return value if all(map(operator.is_, items, value)) else tuple(items)


if _API:

    class ConcreteTracer(_core.Tracer):
        """A value of the user's Python: its concrete `value` and the
        `staged` tracer of the jaxpr that records how it was computed."""

        __slots__ = ("value", "staged")

        def __init__(self, trace, value, staged):
            super().__init__(trace, _core.typeof(staged))
            self.value = value
            self.staged = staged

        def to_concrete_value(self):
            return _core.to_concrete_value(self.value)

        def full_lower(self):
            return self

    def _nested(fun, values: tuple, computed: list):
        """The body of a custom call as the parent's trace calls it, with its
        tracers (`staged`): `fun` run under a `ConcreteTrace` over that trace,
        on `values`; the values of its results go to `computed`."""

        def body(*staged):
            trace = ConcreteTrace(_core.unsafe_get_current_trace())
            inputs = [ConcreteTracer(trace, v, s) for v, s in zip(values, staged, strict=True)]
            with _core.set_current_trace(trace):
                out = fun.call_wrapped(*inputs)
            computed[:] = [trace._pair(o)[0] for o in out]
            return [trace.staged(o) for o in out]

        return body

    class ConcreteTrace(_core.Trace):
        """Evaluates each primitive (JAX's eager evaluation) and records it
        on the `parent` trace (the jaxpr being made)."""

        def __init__(self, parent):
            super().__init__()
            self.parent = parent

        def _pair(self, x):
            # (a value of an enclosing trace of ours, read by the body of a
            # custom call: its staged tracer is a constant of the body's jaxpr)
            if isinstance(x, ConcreteTracer):
                return x.value, x.staged
            return x, x

        def staged(self, x):
            return self._pair(x)[1]

        def _bind(self, primitive, args, params):
            pairs = [self._pair(a) for a in args]
            values, staged = [v for v, _ in pairs], [s for _, s in pairs]
            with _core.set_current_trace(self.parent):
                out_staged = primitive.bind(*staged, **params)
            if primitive.name in _RECORDED_ONLY:
                out_values = [None for _ in out_staged] if primitive.multiple_results else None
            else:
                with _core.set_current_trace(_core.eval_trace):
                    out_values = primitive.bind(*values, **params)
            if primitive.multiple_results:
                return [
                    ConcreteTracer(self, v, s) for v, s in zip(out_values, out_staged, strict=True)
                ]
            return ConcreteTracer(self, out_values, out_staged)

        def process_primitive(self, primitive, tracers, params, /):
            return self._bind(primitive, tracers, params)

        def stage_value(self, val):
            value, staged = self._pair(val)
            if isinstance(val, ConcreteTracer) and val._trace is self:
                return val
            return ConcreteTracer(self, value, self.parent.stage_value(staged))

        def process_call(self, call_primitive, f, tracers, params, /):
            with _core.set_current_trace(self):
                return f.call_wrapped(*tracers)

        def process_custom_jvp_call(self, primitive, fun, jvp, tracers, /, **params):
            process = self.parent.process_custom_jvp_call
            return self._custom_call(process, primitive, fun, (jvp,), tracers, params)

        def process_custom_vjp_call(self, primitive, fun, fwd, bwd, tracers, /, **params):
            process = self.parent.process_custom_vjp_call
            return self._custom_call(process, primitive, fun, (fwd, bwd), tracers, params)

        def _custom_call(self, process, primitive, fun, rule: tuple, tracers, params):
            """A call of a function with a rule of its own (`custom_jvp`,
            `custom_vjp`), recorded as that call, as `jax.make_jaxpr` records
            it, so that the jaxpr import decides what its rule becomes
            (`frontend.jaxpr`: JAX's own `relu`, `xlogy` get their rule; the
            user's is refused there), never as its primal body alone, whose
            gradient is what the rule exists to replace. The parent traces
            the body into the call's jaxpr; it runs once, under a trace of
            ours over that one (`_nested`), so that its Python sees the values
            too and they are computed alongside."""
            pairs = [self._pair(t) for t in tracers]
            values, staged = [v for v, _ in pairs], [s for _, s in pairs]
            computed: list = []
            body = lu.wrap_init(_nested(fun, values, computed), debug_info=fun.debug_info)
            with _core.set_current_trace(self.parent):
                out_staged = process(primitive, body, *rule, staged, **params)
            return [ConcreteTracer(self, v, s) for v, s in zip(computed, out_staged, strict=True)]

        def cur_qdd(self, x):
            value, _ = self._pair(x)
            return _core.cur_qdd(value)
