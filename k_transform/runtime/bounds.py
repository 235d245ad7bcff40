"""The bound of traced `while` loops that store per-iteration values.

A traced `while` stores each iteration's values in buffers of
`buffer_slots(where)` slots: a small first buffer when the gradient function
can retrace, the loop's bound (`DEFAULT_LOOP_BOUND` unless set with
`kt.set_loop_bound`) when not; a loop that runs longer raises
`LoopBoundExceeded` naming its line, and gradient functions then size its
buffer to the trip count and retrace.
Eager gradient functions bound concrete loops the same way (`bounded_loops`).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from k_transform.errors import KTransformError

DEFAULT_LOOP_BOUND = 1024
_bounds: dict[str, int] = {}
# A traced `for` over a range stores every carry unless set (`set_for_checkpoints`).
_for_checkpoints: dict[str, int | None] = {"slots": None}
# Whether the program being traced is run by a gradient function that catches
# LoopBoundExceeded and retraces (`retracing`); under a user's own `jax.jit`
# nothing can, and a `while` checkpoints instead (`control/checkpoint.py`).
_retrace: dict[str, bool] = {"on": False}


class LoopBoundExceeded(KTransformError):
    """A traced `while` ran more iterations than its gradient buffer holds."""

    MARK = "k_transform loop bound exceeded"


# A traced `while` run by a gradient function that retraces starts with a
# buffer of FIRST_BUFFER slots and is retraced once with the power of two above
# the trip count it measured (`buffer_slots`); a buffer of the full bound costs
# its zero-filling on every call (a 10-trip loop of 1,024 floats: 0.99 ms with
# 1,024 slots, 0.35 ms with 16). Under a user's jit a first-order `while`
# checkpoints in as many slots as CHECKPOINT_BYTES hold, between
# CHECKPOINT_SLOTS (16, 1024): few slots cost recomputation on long loops
# (100,000 trips of 64 floats: 186 ms with 64 slots, 89 ms with 1,024, where
# the reverse sweep recomputes each iteration once; 439 and 302 ms before its
# schedule stored whole gaps), many slots of a large carry cost zero-filling
# on every call.
FIRST_BUFFER = 64
CHECKPOINT_BYTES = 8 << 20
CHECKPOINT_SLOTS = (16, 1024)


def loop_bound(where: str) -> int:
    """The most iterations stored for the loop at `where` where nothing can
    grow the buffer (eager loops, loops of derivatives under a user's jit)."""
    return _bounds.get(where, DEFAULT_LOOP_BOUND)


def buffer_slots(where: str) -> int:
    """The slots a traced `while` stores its carries (or stacks) in: the
    loop's own bound once set or measured; else, when the gradient function
    retraces on overflow, FIRST_BUFFER; else the loop bound."""
    if where in _bounds or not can_retrace():
        return loop_bound(where)
    return min(FIRST_BUFFER, DEFAULT_LOOP_BOUND)


def checkpoint_slots(where: str, carry_bytes: int) -> int:
    """The checkpoints a first-order `while` under a user's jit keeps: the
    loop's own bound once set or measured, else as many carries of
    `carry_bytes` as CHECKPOINT_BYTES hold, within CHECKPOINT_SLOTS (even)."""
    low, high = CHECKPOINT_SLOTS
    fit = min(max(CHECKPOINT_BYTES // max(carry_bytes, 1), low), high, DEFAULT_LOOP_BOUND)
    slots = _bounds.get(where, fit)
    return max(2, slots + slots % 2)


_settings = {"version": 0}  # counts set_loop_bound calls: programs traced before retrace


def bounds_version() -> int:
    """Changes whenever a loop bound is set: a compiled program keys its trace on it."""
    return _settings["version"]


def set_loop_bound(bound: int, where: str | None = None) -> None:
    """Slots stored for the gradient of traced `while` loops (all, or one `file:line`)."""
    global DEFAULT_LOOP_BOUND
    _settings["version"] += 1
    if where is None:
        DEFAULT_LOOP_BOUND = int(bound)
    else:
        _bounds[where] = int(bound)


def set_for_checkpoints(slots: int | None) -> int | None:
    """A traced `for` over a range of more than `slots` trips keeps `slots`
    checkpoints (plus a few for the reverse sweep) instead of every carry,
    recomputing the rest in the reverse sweep (O(log) times the forward's
    work); None (the default) stores every carry. Returns the old setting."""
    if slots is not None and (int(slots) < 2 or int(slots) % 2):
        raise KTransformError(f"set_for_checkpoints: an even number >= 2 or None, not {slots}")
    old = _for_checkpoints["slots"]
    _for_checkpoints["slots"] = None if slots is None else int(slots)
    return old


def for_checkpoints() -> int | None:
    return _for_checkpoints["slots"]


class _Switch:
    """Within it, the module flag `switch["on"]` is `on`; restored after."""

    switch: dict[str, bool]

    def __init__(self, on: bool = True):
        self.on = on

    def __enter__(self):
        self.saved = self.switch["on"]
        self.switch["on"] = self.on
        return self

    def __exit__(self, *exc):
        self.switch["on"] = self.saved
        return False


class retracing(_Switch):
    """Within it, tracing is done for a gradient function that retraces when
    a `while` outgrows its buffer (so that buffer may simply raise)."""

    switch = _retrace


def can_retrace() -> bool:
    return _retrace["on"]


# The last run of each checkpointed loop, (trips, iterations recomputed),
# recorded for loops traced within `tracking_recompute()` (benchmarks, tests):
# the host callback that reports them costs about 0.1 ms a call.
recompute_stats: dict[str, tuple[int, int]] = {}
_track = {"on": False}


class tracking_recompute(_Switch):
    """Within it, checkpointed loops being traced report to `recompute_stats`."""

    switch = _track


def tracking() -> bool:
    return _track["on"]


def report_recompute(where: str, n, recomputed) -> None:
    """Trace time, after a checkpointed loop's reverse sweep."""
    if _track["on"]:
        jax.debug.callback(_record_recompute, where, n, recomputed)


def _record_recompute(where: str, n, recomputed) -> None:
    recompute_stats[where] = (int(n), int(recomputed))


# Concrete `while` loops (eager mode, Python conditions) of gradient and jvp
# functions are bounded too, by the same `loop_bound(where)`: a loop whose
# condition never becomes false raises LoopBoundExceeded instead of hanging.
# As gradient functions grow a traced loop's bound and retrace (up to
# EAGER_GROWTHS times), an eager loop grows its bound in place the same number
# of times, so eager and jit accept the same loops. Plain `kt.compile` code
# runs unbounded (Python's own semantics).
EAGER_GROWTHS = 6
_bounded: dict = {"on": False, "grown": {}}


class bounded_loops:
    """Within it, concrete `while` loops check `loop_bound(where)`."""

    def __init__(self, on: bool = True):
        self.on = on

    def __enter__(self):
        self.saved = dict(_bounded)
        if self.on and not _bounded["on"]:
            _bounded.update(on=True, grown={})
        return self

    def __exit__(self, *exc):
        _bounded.update(self.saved)
        return False


def count_iteration(n: int, where: str) -> None:
    """Called with the count of a concrete `while` loop's iterations so far."""
    if not _bounded["on"] or n <= loop_bound(where):
        return
    grown = _bounded["grown"].get(where, 0)
    if grown < EAGER_GROWTHS:
        _bounded["grown"][where] = grown + 1
        set_loop_bound(1 << n.bit_length(), where)
        return
    raise LoopBoundExceeded(
        f"{LoopBoundExceeded.MARK}: the while loop at {where} ran {n} iterations, more "
        f"than its bound of {loop_bound(where)} (does its condition ever become false?); "
        f"raise it with kt.set_loop_bound({n * 2}) if the loop is meant to run longer"
    )


# The marks of errors the run time's host callbacks raise on purpose (a loop
# bound outgrown, a `raise` reached: `runtime.python`): their errors reach
# the user as ours, so JAX's log of the callback's traceback is dropped.
QUIET_MARKS = [LoopBoundExceeded.MARK]


class _QuietRunTimeChecks(logging.Filter):
    """JAX logs a traceback when a debug callback raises; drop it for the checks above."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage() + (str(record.exc_info[1]) if record.exc_info else "")
        return not any(mark in text for mark in QUIET_MARKS)


for _logger in ("jax._src.debugging", "jax._src.callback"):  # debug and pure callbacks
    logging.getLogger(_logger).addFilter(_QuietRunTimeChecks())


# How many overflow checks were traced: a program with one waits for its
# result before returning (`compiled.CompiledGraph`), since on an accelerator
# the check's error arrives only when the result is read.
_checks_traced = {"n": 0}


def checks_traced() -> int:
    return _checks_traced["n"]


def count_check() -> None:
    """Note a run-time check just traced (its program's result is waited for)."""
    _checks_traced["n"] += 1


def report_overflow(n, bound: int, where: str):
    """Trace time: `n`, checked: at run time it raises LoopBoundExceeded when
    the loop at `where` ran `n` > `bound` times. The host callback sits in a
    branch taken only then (an unconditional one costs about 0.1 ms on every
    call); it is a pure callback whose result (zero) is added to `n`, which
    the program goes on with: a debug callback is an effect, and a program
    with one leaves JAX's C++ dispatch for its Python path (0.1 ms a call:
    a traced `while` of 10 trips took twice a `fori_loop`'s time)."""
    count_check()

    def check(count):
        check_bound(np.max(count), bound, where)
        return np.zeros(np.shape(count), np.result_type(count))

    shape = jax.ShapeDtypeStruct(jnp.shape(n), jnp.result_type(n))
    zero = lax.cond(
        jnp.any(n > bound),
        lambda: jax.pure_callback(check, shape, n, vmap_method="expand_dims"),
        lambda: jnp.zeros_like(n),
    )
    return n + zero


def check_bound(n, bound, where):
    """Raise LoopBoundExceeded when a loop at `where` ran `n` > `bound` times."""
    if int(n) > int(bound):
        raise LoopBoundExceeded(
            f"{LoopBoundExceeded.MARK}: the traced while loop at {where} ran {int(n)} "
            f"iterations but stores {int(bound)} for its gradient; raise it with "
            f"kt.set_loop_bound({int(n) * 2}) (gradient functions do this and retrace)"
        )
