"""Host calls run once: recorded when code first runs, replayed when a derivative runs it again.

K of a loop (`control.k_loops`) runs an iteration's K-body in its forward
loop, and a derivative of it (a Hessian-vector product, jvp of a gradient)
runs that K-body again in the reverse loop, recomputed from the iteration's
carry. APIs run the user's function more than once too (a Jacobian's rows,
a vjp and its pullback). A host call there (`rs.randn(3)`, `next(it)`,
`print`, a method of the user's object run as Python) must run once, as
Python (and JAX) runs it: a second draw would be another function. So:

- each Python iteration of a recording loop (`records=`, the forward loops
  of `k_loops`) opens a `HostLog` (`recording`), and every host call made in
  it appends its result: the value, or for a call differentiated by tracing
  (`traced.TracedCallK`) its `(result, bprop)`, tagged with its kind;
- the stack the iteration pushes its carry on keeps that log beside the
  item (`runtime.stack.stack_push`, read back by `stack_log`);
- the recomputation runs under it (`replay`, the `HostReplay` primitive):
  each host call takes the next recorded result and runs nothing;
- `OneRun` does the same for the runs of one API call: there a call is the
  recorded one when its arguments are the same (`_same`: the same objects,
  or equal strings, numbers and arrays: two generated modules hold two
  copies of a string), else it runs (a pullback given another cotangent).

Host calls are emitted as `_host(fn)(...)`, which is `fn` itself when no log
is open. A call reached during replays takes its value from the innermost
replay and is appended to every log opened after that replay (so a loop
nested in a recomputed body records what it replays); with no replay open
it runs and is appended to every open log; the host calls a host call makes
are part of it. A log that is missing (a stack rebuilt without it) or used
up, a result of another kind, or one holding tracers of a trace that has
ended raise a KTransformError: nothing is silently run a second time.

A host call reached while a loop body or branch is traced for `lax`
(`traced_body`) raises `HostInTrace` before it runs: host code known only
at run time (a method of the user's object) would run once for all
iterations; the loop keeps Python's iterations instead (`control.runtime`).

A body JAX traces once (the function given to `lax.scan`, `lax.fori_loop`,
`lax.while_loop`, `lax.map`, `jax.vmap`: `frontend.lax_models`) runs its
host code once per call of that construct, as there, though its model runs
it per step or row: the model runs under `traced_once(construct, ...)`, a
frame whose first body run (`body_run()` starts each) records the body's
host calls and whose later runs replay them, in order (each value is also
appended to the logs of the iterations that run them, so a derivative that
runs an iteration again replays it). A replayed call given other arguments
than in the first run is one JAX ran once, on tracers: one whose result is
None (`print(c)`) gives that; any other (a draw sized by the step's value,
a function run as Python given the step's values) is refused
(`KTransformError`): neither run again nor given the first step's result.
Where that first run calls the user's Python given arrays (a function run
as Python, an object's `__call__`), the call is traced as JAX traces the
body, on abstract values (`_traced_abstractly`), so a later step computes
its result from that trace; a gradient's call differentiated by tracing
does the same (`traced.TracedCallK`). A function value the program calls
that it knows only when it runs goes through `called`: the user's Python is
host code there too (a plain program's, as a gradient's `DynamicCallK`).
"""

from __future__ import annotations

import functools
import types

import jax
import numpy as np

from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.runtime.values import describe


def _refused(what: str, where: str) -> KTransformError:
    """A host call a replay cannot give: it is not run a second time."""
    return KTransformError(
        "internal: code run again (to differentiate it once more, or for another row of a "
        f"Jacobian) reached a host call (print, a random generator, next(...), a method of "
        f"your object) {what}; it is not run a second time{describe(where)}"
    )


class HostLog(list):
    """The results of the host calls of one iteration, in order (no pytree: a
    host value, carried beside a stack's item)."""

    __slots__ = ("agains",)  # {index: how that call computes for other arrays}
    __kt_constant__ = True  # `runtime.residuals` keeps it as it is

    def append_call(self, entry, again) -> None:
        if again is not None:
            if getattr(self, "agains", None) is None:
                self.agains = {}
            self.agains[len(self)] = again
        self.append(entry)

    def again(self, k):
        """How the call recorded at `k` computes its result for other arrays
        of the same shapes without running its host code again, or None."""
        return (getattr(self, "agains", None) or {}).get(k)


class _Frame:
    """An open log: recorded into, or replayed (`exact`: code run again on
    the same inputs, a loop's iteration; else the runs of one API call,
    whose backward parts differ: a call given other arguments runs)."""

    __slots__ = ("log", "replaying", "at", "where", "exact")

    def __init__(self, log, replaying: bool, where: str = "", exact: bool = True):
        self.log, self.replaying, self.at, self.where = log, replaying, 0, where
        self.exact = exact


class _OnceFrame(_Frame):
    """The frame of a body JAX traces once (`traced_once`): for each of its
    functions (`key`: a while loop's test and step), recording in its first
    run, replaying from its start in each later one (`body_run`)."""

    __slots__ = ("logs", "key", "checked")

    def __init__(self, construct: str):
        super().__init__(HostLog(), replaying=False, where=construct)
        self.logs: dict = {}  # key: [its log, its runs so far]
        self.key = None
        self.checked = False  # whether the run is checked when it ends (not traced)

    def run(self, key) -> None:
        """A run of function `key` begins (the one before it has ended)."""
        self.finished()
        entry = self.logs.setdefault(key, [HostLog(), 0])
        entry[1] += 1
        self.key, self.log, self.replaying, self.at = key, entry[0], entry[1] > 1, 0
        self.checked = not _tracing

    def ran(self, key) -> bool:
        return key in self.logs

    def finished(self) -> None:
        """Refuse a replayed run that made fewer host calls than the first
        (one traced for `lax` may have been left: it is not checked)."""
        if self.checked and self.replaying and self.at != len(self.log):
            raise _not_once(self, None, "makes fewer host calls in a later step than in its first")


_frames: list[_Frame] = []


_tracing = 0  # loop bodies or branches being traced for `lax` (`traced_body`)


class HostInTrace(Exception):
    """Raised, before it runs, by a host call reached while a loop body or a
    branch is traced for `lax` (`traced_body`): host code known only at run
    time (a method of the user's object, a generator given as an argument).
    Traced once, it would run once for every iteration (and again in the
    reverse loop); the run time keeps Python's iterations instead, or
    refuses a traced test."""


class traced_body:
    """`with traced_body():` a loop body or branches traced for `lax` (see `HostInTrace`)."""

    def __enter__(self):
        global _tracing
        _tracing += 1

    def __exit__(self, *exc):
        global _tracing
        _tracing -= 1


def tracing() -> bool:
    """Whether a loop body or branch is being traced for `lax` (`traced_body`)."""
    return _tracing > 0


def host(fn, kind="value"):
    """`fn`, or while a log is open a function that records or replays its
    calls. `kind`: what its result is (a value; `TracedCallK` gives its order
    of K), checked on replay, so a result is never taken for another kind."""
    if _tracing and not _replayed_once(fn):
        raise HostInTrace(fn)
    if not _frames:
        return _explained(fn)
    return lambda *args, **kwargs: _call(fn, kind, args, kwargs)


_CONCRETE_NEEDED = (
    jax.errors.ConcretizationTypeError,  # a Python `if`, bool(...) of a traced value
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
)


def _explained(fn):
    """`fn`, whose Python meeting a traced value (a jit traces it) raises a
    KTransformError naming it, not JAX's bare conversion error."""
    if not callable(fn):
        return fn

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _CONCRETE_NEEDED as exc:
            code = getattr(fn, "__code__", None)
            where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
            name = getattr(fn, "__qualname__", type(fn).__name__)
            entry = TRANSFORM.cache("python_code.functions").get(id(fn))
            why = f" ({entry[1].bare_message})" if entry is not None and entry[0] is fn else ""
            raise KTransformError(
                f"{name} runs as Python, not transformed{why}; under a jit it met a traced "
                f"value where Python needs a concrete one ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}): call it without a jit, or write it with the "
                f"constructs k_transform transforms{describe(where)}"
            ) from None

    return call


def _replayed_once(fn) -> bool:
    """Whether a call of `fn` now takes its result from the innermost body
    traced once (`traced_once`), running nothing: allowed where that body
    is traced for `lax` (a traced `lax.cond`'s taken branch)."""
    if _each_step(fn):
        return False
    for frame in reversed(_frames):
        if isinstance(frame, _OnceFrame):
            return frame.replaying
        if frame.replaying:
            return False
    return False


def _call(fn, kind, args, kwargs):
    """`fn(*args, **kwargs)`, run once: recorded in the open logs, or replayed."""
    frames = _frames
    if _each_step(fn):  # JAX runs it at every step: no body traced once holds it
        frames = [frame for frame in _frames if not isinstance(frame, _OnceFrame)]
    source = next((k for k in range(len(frames) - 1, -1, -1) if frames[k].replaying), None)
    if source is None:  # a body traced once is traced as JAX traces it: on no values
        once = any(isinstance(frame, _OnceFrame) for frame in frames)
        value, again = _ran(fn, args, kwargs, once, kind)
    elif isinstance(frames[source], _OnceFrame):
        value, again = _once_next(frames[source], fn, kind, args, kwargs)
    else:
        value, again = _next(frames[source], fn, kind, args, kwargs)
    for frame in frames[(source or -1) + 1 :]:
        if not frame.replaying:
            frame.log.append_call((kind, value, (args, kwargs)), again)
    return value


def _next(frame: _Frame, fn, kind, args, kwargs):
    if frame.log is None or frame.at >= len(frame.log):
        raise _refused("whose result was not recorded when the code first ran", frame.where)
    recorded, value, given = frame.log[frame.at]
    again = frame.log.again(frame.at)
    frame.at += 1
    if not frame.exact and not _same(given, (args, kwargs)):
        # another run's backward part (a pullback given another cotangent): it runs
        return _ran(fn, args, kwargs, False)
    if recorded != kind:
        raise _refused(f"whose recorded result is of another kind ({recorded!r})", frame.where)
    if _holds_ended_trace(value):
        raise _refused("whose recorded result was made under a trace that has ended", frame.where)
    return value, again


# JAX's callbacks run when the program runs, at each step of a loop
_EACH_STEP_MODULES = ("jax.debug", "jax._src.debugging")


def _target(fn):
    """The function a host call runs: `fn`, or the user's where `fn` is the
    run of a call differentiated by tracing (`traced.TracedCallK._run`)."""
    call = getattr(getattr(fn, "__self__", None), "call", None)
    return getattr(call, "fn", fn)


def _each_step(fn) -> bool:
    module = getattr(_target(fn), "__module__", None) or ""
    return any(module == m or module.startswith(m + ".") for m in _EACH_STEP_MODULES)


def _once_next(frame: _OnceFrame, fn, kind, args, kwargs):
    """The result of a host call in a later run of a body JAX traces once:
    the first run's (see the module docstring)."""
    if frame.at >= len(frame.log):
        raise _not_once(
            frame, fn, "makes more host calls in a later step than in its first ({name})"
        )
    recorded, value, given = frame.log[frame.at]
    again = frame.log.again(frame.at)
    frame.at += 1
    if recorded != kind:
        raise _not_once(
            frame, fn, "makes other host calls in a later step than in its first ({name})"
        )
    if _same(given, (args, kwargs)):
        return value, again
    if again is not None and _same_avals(given, (args, kwargs)):  # traced once, run again
        return again(*args, **kwargs), again
    if kind == "value" and value is None:  # `print(c)`: JAX prints once
        return None, None
    raise _not_once(frame, fn, "calls {name} with values that change from step to step")


def _not_once(frame: _OnceFrame, fn, what: str) -> KTransformError:
    """The refusal of a host call a later step of a body traced once would
    run otherwise than its first: it names the call (a function run as
    Python by its definition), and the generated code's frames it passes
    through give the user's line (`compiled._note_user_line`)."""
    call = getattr(getattr(fn, "__self__", None), "call", None)  # a `TracedCallK`'s run
    target = _target(fn)
    name = getattr(call, "hint", None) or getattr(target, "__qualname__", None)
    code = getattr(target, "__code__", None) if isinstance(target, types.FunctionType) else None
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    what = what.format(name=name or type(target).__name__)
    exc = KTransformError(
        f"the function given to {frame.where} {what}: JAX "
        "traces that function once, running its Python (a print, a random draw, a function "
        "run as Python, a global counter) once for all steps, on traced values; k_transform "
        "runs each step, and keeps that host code to its first step only where the others "
        "would give the same: make it independent of the step's values, or move it out of "
        f"the function{describe(where)}"
    )
    exc.at_user_line = True  # (no debug: the line is the generated frame's it leaves)
    return exc


_noted = None  # the `again` the host call running now noted (`note_again`)
_abstract = False  # whether it runs for a body traced once (`traces_abstractly`)


def note_again(again) -> None:
    """Noted by a host call as it returns (`traced.TracedCallK`, given arrays):
    `again(*args)` computes its result for other arrays of the same shapes
    and dtypes from its trace, without running its Python again."""
    global _noted
    _noted = again


def traces_abstractly() -> bool:
    """Whether the host call running now runs in the first step of a body
    JAX traces once: traced on no values, as JAX traces it, so that its
    trace holds for every step (`note_again`)."""
    return _abstract


def _ran(fn, args, kwargs, once: bool, kind="value"):
    """`_run`, and the `again` the call noted (None: none). In the first run
    of a body JAX traces once, the user's Python given arrays is traced as
    JAX traces it (`_traced_abstractly`), which gives its `again`."""
    global _abstract, _noted
    if once and kind == "value" and _users_python(fn):
        return _traced_abstractly(fn, args, kwargs)
    saved, _abstract, _noted = _abstract, once, None
    try:
        value = _run(fn, args, kwargs)
    finally:
        _abstract = saved
    again, _noted = _noted, None
    return value, again


# Library code: its Python is not the user's (a value called: `called`); the
# random generators of these modules are host code all the same.
_LIBRARY = ("jax", "jaxlib", "numpy", "scipy", "math", "cmath", "builtins", "functools")
_LIBRARY += ("operator", "k_transform")
_HOST_LIBRARY = ("numpy.random",)


def _within(module: str, names: tuple) -> bool:
    return any(module == m or module.startswith(m + ".") for m in names)


def _module_of(fn) -> str:
    """The module of the code calling `fn` runs (a partial's function, a
    bound method's; a builtin method's object's: `rng.normal`)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if isinstance(fn, types.FunctionType):
        if fn.__code__.co_filename.startswith("<k_transform:"):  # generated code
            return "k_transform"
        return fn.__module__ or ""
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinFunctionType):
        if owner is not None and not isinstance(owner, types.ModuleType):
            return type(owner).__module__ or ""
        return fn.__module__ or "builtins"
    return type(fn).__module__ or ""


def _users_python(fn) -> bool:
    """Whether calling `fn` runs the user's own Python (a function of theirs,
    a method or `__call__` of their object, a partial of one), not code
    k_transform generated nor library code."""
    return not _within(_module_of(fn), _LIBRARY)


def called(fn):
    """`fn`, a function value the program calls that it knows only when it
    runs (one it was given, or a call made): the user's Python run as it is
    (a function k_transform runs as Python, an object's `__call__`) is host
    code, called through `host` (run once in a body JAX traces once, as the
    gradient's `traced.DynamicCallK` runs it); code k_transform generated and
    library code are called as they are (their host calls go through `host`)."""
    if (_frames or _tracing) and (_users_python(fn) or _within(_module_of(fn), _HOST_LIBRARY)):
        return host(fn)
    return fn


def _traced_abstractly(fn, args, kwargs):
    """`(value, again)` of the user's Python `fn(*args, **kwargs)` run in the
    first run of a body JAX traces once: JAX traces that body on abstract
    values, so `fn` is traced so (its Python runs once, `jax.make_jaxpr` over
    the JAX arrays among its arguments) and `again(*args, **kwargs)` computes
    its result for other arrays of the same shapes from that trace, running
    no Python (`_once_next`). Non-array results (a flag, a string) are the
    trace's. Given no JAX array it is run as it is (no `again`)."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    at = [k for k, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]
    if not at:
        return _run(fn, args, kwargs), None
    made = []

    def flat(*xs):
        full = list(leaves)
        for k, x in zip(at, xs, strict=True):
            full[k] = x
        a, kw = jax.tree_util.tree_unflatten(tree, full)
        out, out_tree = jax.tree_util.tree_flatten(_run(_explained(fn), a, kw))
        made[:] = [out_tree, [None if isinstance(v, jax.Array) else v for v in out]]
        kept = [v for v in made[1] if v is not None and not isinstance(v, _PLAIN)]
        if kept:  # (it may hold this trace's values: an iterator over them)
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise KTransformError(
                f"{name} runs as Python in a function JAX traces once (a body of lax.scan, "
                f"jax.vmap, ...) and returns a {type(kept[0]).__name__}: k_transform traces "
                "it once there, as JAX does, and keeps of its result arrays, numbers and "
                "strings (and tuples, lists and dicts of them); return those"
            )
        return [v for v in out if isinstance(v, jax.Array)]

    closed = jax.make_jaxpr(flat)(*[_abstract_of(leaves[k]) for k in at])
    out_tree, statics = made

    def again(*args, **kwargs):
        new = jax.tree_util.tree_leaves((args, kwargs))
        outs = iter(jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *[new[k] for k in at]))
        return out_tree.unflatten([next(outs) if v is None else v for v in statics])

    return again(*args, **kwargs), again


# the non-array results a trace of the user's Python keeps (`_traced_abstractly`)
_PLAIN = (type(None), bool, int, float, complex, str, bytes, type, np.generic, np.ndarray, np.dtype)


def _abstract_of(x):
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _same_avals(a, b) -> bool:
    """Whether two calls' arguments differ only in the values of their JAX
    arrays (the same shapes and dtypes), all else the same (`_same`)."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if isinstance(x, jax.Array) or isinstance(y, jax.Array):
            if not (isinstance(x, jax.Array) and isinstance(y, jax.Array)):
                return False
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
        elif not _same_leaf(x, y):
            return False
    return True


def _run(fn, args, kwargs):
    """Run a host call: the host calls it makes are part of it (its result
    is what is recorded), so it runs with no log open."""
    global _frames
    saved, _frames = _frames, []
    try:
        return fn(*args, **kwargs)
    finally:
        _frames = saved


# host arguments compared by value: immutable, so equal means the same call
# (a string's copies differ between generated modules: only some are interned)
_VALUES = (str, bytes, range, type(Ellipsis), np.dtype)
# arrays and numbers: by value, dtype and shape (a mutable NumPy array is
# compared as it is now; the record holds the object the first run was given)
_NUMBERS = (jax.Array, np.ndarray, np.generic, int, float, complex, bool)


def _same(a, b) -> bool:
    """Whether two calls' arguments are the same: pytrees of one structure
    whose leaves are identical objects, equal strings (bytes, ranges, ...)
    of one type, or concrete arrays and numbers equal in value, dtype, shape
    and sign of zero (a tracer only to itself; any other object, a user's
    or a function, only to itself)."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    if tree_a != tree_b:
        return False
    return all(map(_same_leaf, leaves_a, leaves_b))


def _same_leaf(x, y) -> bool:
    if x is y:
        return True
    if isinstance(x, jax.core.Tracer) or isinstance(y, jax.core.Tracer):
        return False
    if isinstance(x, _VALUES):
        return type(x) is type(y) and x == y
    if not isinstance(x, _NUMBERS) or not isinstance(y, _NUMBERS):
        return False
    if np.shape(x) != np.shape(y) or _dtype(x) != _dtype(y):
        return False
    if not np.array_equal(x, y, equal_nan=True):
        return False
    if not np.issubdtype(np.result_type(x), np.floating):
        return True
    return np.array_equal(np.signbit(x), np.signbit(y))  # -0.0 == 0.0, yet 1 / x differs


def _dtype(x):
    return x.dtype if hasattr(x, "dtype") else type(x)


def _holds_ended_trace(value) -> bool:
    """Whether `value` holds a tracer of a trace that has ended (JAX's
    `Trace.is_valid`, where this JAX has it)."""
    for x in jax.tree_util.tree_leaves(value):
        valid = getattr(getattr(x, "_trace", None), "is_valid", None)
        if isinstance(x, jax.core.Tracer) and valid is not None and not valid():
            return True
    return False


def traced_once(construct: str, fn, *args):
    """`fn(*args)`, the model of `construct` (`lax.scan`, `jax.vmap`, ...),
    whose body runs host code once: see the module docstring."""
    frame = _OnceFrame(construct)
    _frames.append(frame)
    try:
        out = fn(*args)
    finally:
        del _frames[_frames.index(frame) :]
    frame.finished()
    return out


def body_run(key=0, after=None) -> None:
    """A run of the body (its function `key`) of the innermost `traced_once`
    starts: the first records its host calls, each later one replays them.
    Nothing where a replay of another kind is nearer (the body run again
    by a derivative replays its own iteration's log) or while the body is
    traced for `lax` before its first run (where a host call is refused
    before it runs: Python then runs the steps)."""
    for frame in reversed(_frames):
        if isinstance(frame, _OnceFrame):
            if not _tracing or frame.ran(key):
                frame.run(key)
            return
        if frame.replaying:
            return


class recording:
    """`with recording():` one iteration of a recording loop; `current()` is its log."""

    def __enter__(self) -> HostLog:
        frame = _Frame(HostLog(), replaying=False)
        _frames.append(frame)
        return frame.log

    def __exit__(self, *exc):
        _frames.pop()


def current() -> HostLog | None:
    """The log of the innermost iteration being recorded (None: none is)."""
    for frame in reversed(_frames):
        if not frame.replaying:
            return frame.log
    return None


def replay(log, fn, *args, where: str = "", exact: bool = True):
    """`fn(*args)` with its host calls taking the results recorded in `log`
    (`where`: the loop, named in errors; `exact`: it must make all of them)."""
    frame = _Frame(log, replaying=True, where=where, exact=exact)
    _frames.append(frame)
    try:
        out = fn(*args)
    finally:
        _frames.pop()
    if exact and log is not None and frame.at != len(log):
        raise _refused("fewer times than when it first ran", where)
    return out


def call(fn, *args):
    """`fn(*args)`: the runs of an API call that runs no host code (no `OneRun`)."""
    return fn(*args)


class OneRun:
    """The runs of one call of an API that runs the user's function more
    than once (a Jacobian's rows, a vjp and its pullback, the aux values of a
    jvp) as one run of its host code, as in JAX: the first run records its
    host calls, the others replay them. All run the same order of K (the
    recorded result of a call differentiated by tracing is its fprop's);
    a later run may make fewer calls (a jitted program cached by the first)."""

    def __init__(self):
        self.log = None

    def __call__(self, fn, *args):
        if self.log is None:
            with recording() as log:
                out = fn(*args)
            self.log = log
            return out
        return replay(self.log, fn, *args, exact=False)
