"""Compiled programs: `CompiledGraph`, the run mode, and what the API families share.

A `CompiledGraph` is a transform graph (a gradient, jvp or plain program)
compiled to Python; on each call it

1. reads the current value of every Parameter the program uses (never baked
   in: `p.set_data(...)` is seen by the next call without recompiling);
2. runs the generated code with those values bound (for a gradient function,
   `fprop(*args)` -> `(out, bprop)`, then `bprop(sens)` -> `(env, d_args...)`;
   Parameter gradients come out of the env under their keys) and writes back
   the Parameters the program `Assign`ed;
3. is jitted by default: Python ints, bools, strings and None are static
   arguments, floats and arrays traced. `set_mode("eager")` (or `jit=False`)
   runs the same generated code op by op; NumPy inputs become JAX arrays in
   both modes. In both, the concrete `while` loops of gradient and jvp
   functions are bounded (see `runtime.bounds.bounded_loops`); a traced loop
   that outgrows its gradient buffer is retraced with a larger bound.

Shared by the API families (`reverse`, `forward_api`, `jacobians`,
`jit_api`): `without_aux` and `compiled_forward` (the first output, and the
whole output, for `has_aux`), `bind_keywords` and `with_defaults` (a call's
arguments as the graph's positional ones), and `check_float_inputs`, JAX's refusal of integer
inputs to differentiate.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import runtime as rt
from k_transform.api import graph_of
from k_transform.cell import Cell, Parameter
from k_transform.codegen.compile import compile_graph, user_line
from k_transform.context import TRANSFORM
from k_transform.control import policy
from k_transform.control.runtime import refusal_of
from k_transform.errors import (
    KTransformError,
    KTransformRuntimeError,
    UnboundedRecursion,
    needs_static,
)
from k_transform.frontend import callables, effects
from k_transform.frontend.guards import guards_of, stale, stale_names
from k_transform.ir.nodes import Constant, FuncGraph
from k_transform.ir.primitive import Primitive
from k_transform.ir.verify import verify
from k_transform.ops.state import Assign
from k_transform.protocol import kt_attribute
from k_transform.runtime.bounds import (
    LoopBoundExceeded,
    bounded_loops,
    bounds_version,
    checks_traced,
    for_checkpoints,
    retracing,
    set_loop_bound,
    tracking,
)
from k_transform.transforms import (
    first_output_graph,
)

_mode = {"jit": True}


def set_mode(mode: str) -> None:
    """ "graph" (jit, the default) or "eager" (generated code op by op)."""
    if mode not in ("graph", "eager"):
        raise ValueError("mode must be 'graph' or 'eager'")
    _mode["jit"] = mode == "graph"


def parameters_of(root: FuncGraph) -> list[Parameter]:
    """Every Parameter the graphs reachable from `root` read or assign."""
    found: dict[int, Parameter] = {}
    for graph in root.reachable():
        for node in graph.used_nodes():
            value = node.value if isinstance(node, Constant) else None
            if isinstance(value, Primitive):
                for p in value.parameters():
                    found.setdefault(id(p), p)
            elif isinstance(value, Parameter):
                found.setdefault(id(value), value)
    return list(found.values())


@functools.cache
def _array_type() -> type:
    """The type of a concrete JAX array (`jax.Array` includes tracers), made
    at first use: an array made at import would start XLA's backend before
    a data-parallel program's `jax.distributed.initialize`; concrete even when
    first asked under a trace (the user's `jax.jit` of a gradient function)."""
    with jax.ensure_compile_time_eval():
        return type(jax.device_put(np.zeros((), np.float32)))  # (jnp.zeros compiles)


def _all_concrete(values: tuple) -> bool:
    array = _array_type()
    for v in values:
        if type(v) is not array:
            return False
    return True


def _is_static(x) -> bool:
    """Python ints, bools, strings, None, slices, dtypes and tuples of them are
    static (part of the compile key); floats and arrays are traced."""
    if isinstance(x, tuple):
        return all(_is_static(v) for v in x)
    if isinstance(x, type) or isinstance(x, np.dtype):
        return True
    return x is None or x is Ellipsis or isinstance(x, (bool, int, str, slice))


def _host_object(leaf) -> bool:
    """An argument that is neither an array, a number nor a static value: a
    Python object whose methods are host code (`rs.randn(3)` with `rs` a
    `RandomState` argument), so the program runs per call, not compiled."""
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, float, complex)) or _is_static(leaf):
        return False
    return not hasattr(leaf, "__jax_array__") and not hasattr(leaf, "shape")


def _hashable(x):
    """A hashable stand-in for a static argument (slices are unhashable),
    with the type of each part: `(True,)` and `(1,)`, or `1` and an IntEnum
    member, are equal and hash alike, yet a program may tell them apart."""
    if isinstance(x, tuple):
        return (type(x), tuple(_hashable(v) for v in x))
    if isinstance(x, slice):
        return (slice, _hashable(x.start), _hashable(x.stop), _hashable(x.step))
    return (type(x), x)


@jax.tree_util.register_pytree_node_class
class _TraceConstant:
    """A leaf of a compiled program's result that jax.jit cannot return (a
    str: an aux dict's `"tag": "train"`, which JAX's gradient returns as it
    is). At trace time it is a constant of the program (a value computed
    from traced ones is a tracer), so it travels out of the jit as pytree
    metadata, the same at each call of that trace, and `_finish` hands the
    value back."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def tree_flatten(self):
        return (), _Same(self.value)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(aux.value)


class _Same:
    """Pytree metadata holding a value compared by identity (a value need
    not be hashable, and JAX compares metadata)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self):
        return id(self.value)


_JAX_LEAVES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)
# Leaves returned as they are: values that hold no array (an object or a
# function might hold a tracer of the trace, which must not escape it)
_CONSTANT_LEAVES = (str, bytes, type, range, slice, np.dtype, enum.Enum, type(Ellipsis))


def _is_jax_leaf(leaf) -> bool:
    return isinstance(leaf, _JAX_LEAVES) or hasattr(leaf, "__jax_array__")


def _trace_constants(result, fn):
    """`result` (of the user's `fn`, traced) with each str (any leaf of
    `_CONSTANT_LEAVES`) wrapped (`_TraceConstant`); `result` itself when there
    is none. Another value jax.jit cannot return is refused, naming it."""
    leaves, treedef = jax.tree_util.tree_flatten(result)
    if all(map(_is_jax_leaf, leaves)):
        return result
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(result)[0]]
    kept = []
    for path, leaf in zip(paths, leaves, strict=True):
        if not _is_jax_leaf(leaf) and not isinstance(leaf, _CONSTANT_LEAVES):
            code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
            where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
            name = getattr(fn, "__qualname__", "the function")
            raise KTransformError(
                f"{name} returns a {type(leaf).__name__} (at result"
                f"{jax.tree_util.keystr(path)}), which a compiled program cannot return: "
                "return arrays, numbers and strings (or call it in eager mode, "
                f"kt.set_mode('eager')){where}"
            )
        kept.append(leaf if _is_jax_leaf(leaf) else _TraceConstant(leaf))
    return treedef.unflatten(kept)


def _trace_constant_values(result):
    """The inverse of `_trace_constants` on a compiled call's result."""
    is_constant = lambda x: isinstance(x, _TraceConstant)  # noqa: E731
    leaves, treedef = jax.tree_util.tree_flatten(result, is_leaf=is_constant)
    if not any(map(is_constant, leaves)):
        return result
    return treedef.unflatten([x.value if is_constant(x) else x for x in leaves])


MAX_RETRACES = 12  # each retrace sizes one loop's buffer to its measured trip count
_EAGER = "eager"  # `CompiledGraph._jitted[key]`: a recursion on a traced value runs op by op
_RETRY = "retry"  # `CompiledGraph._recover`: a loop's bound grew, trace again


def _trace_settings() -> tuple:
    """What a trace depends on beyond the arguments and the retrace mode: the
    loop settings, and whether checkpointed loops report their recompute."""
    return (policy.UNROLL_BUDGET, for_checkpoints(), tracking(), bounds_version())


# Graph nodes above which a program is compiled with XLA's classic CPU
# emitters: its fusion emitters stall on a long fused chain (a gradient of
# 700 straight-line statements, about 11,000 nodes: 8-11 s; 800: over two
# minutes; 1,000: over ten), the classic ones scale linearly (1,000: 19 s)
# and ran models as fast (bench/transform_time.py, first_call).
LARGE_PROGRAM = 8_000


@functools.cache
def _classic_emitters() -> dict | None:
    """The compiler option for XLA's classic CPU emitters (see LARGE_PROGRAM),
    or None where this XLA has no such option (JAX 0.11's: its compile of
    every large program failed with INVALID_ARGUMENT), found by compiling
    an empty program with it once."""
    options = {"xla_cpu_use_fusion_emitters": False}
    try:
        jax.jit(lambda: 0.0, compiler_options=options).lower().compile()
    except Exception:  # noqa: BLE001 -- JaxRuntimeError: "No such compile option"
        return None
    return options


_BOUND_MESSAGE = re.compile(r"while loop at (?P<where>.*?) ran (?P<n>\d+) iterations")


def _grow_loop_bound(exc: Exception) -> bool:
    """Raise the bound of the loop named in `exc` to the power of two above its
    trip count (at most twice the memory the loop needs; few retraces)."""
    match = _BOUND_MESSAGE.search(str(exc)) if LoopBoundExceeded.MARK in str(exc) else None
    if match is None:
        return False
    set_loop_bound(1 << int(match["n"]).bit_length(), match["where"])
    return True


_NOTE = "raised in your code, which k_transform runs as generated code: "


def _note_user_line(exc: Exception, run) -> None:
    """Add to `exc` (JAX's error at an operation of the user's, a shape
    mismatch say) the user's file, line and source line it came from: its
    traceback shows the generated code's frames, not the user's. A
    KTransformError the run time raised from such an error (a loop refusing
    it, naming the loop) gets that error's line."""
    if any(str(n).startswith(_NOTE) for n in getattr(exc, "__notes__", ())):
        return
    if isinstance(exc, KTransformError):
        own = getattr(exc, "at_user_line", False)  # raised at a line of the user's
        if exc.debug is not None or (exc.__cause__ is None and not own):
            return
        where = user_line(exc if own else exc.__cause__, run)
    else:
        where = user_line(exc, run)
    if where is not None:
        exc.add_note(_NOTE + where)


def _static_needed(exc: Exception, run) -> KTransformError | None:
    """JAX's bare IndexError or TypeError for a traced value where it needs a
    Python number (a slice bound, a shape: `x[k:]` with `k = int(alpha * n)`
    and `alpha` an argument, which the jit traces) as a KTransformError
    naming the user's line, as jax.jit's ConcretizationTypeError does."""
    mask = isinstance(exc, jax.errors.NonConcreteBooleanIndexError)
    if not mask and not needs_static(exc):
        return None
    where = user_line(exc, run)
    if where is None:
        return None
    text = str(exc).strip().splitlines()
    if mask:  # `x[x > 0]`: a shape that depends on the values
        return KTransformError(
            "a boolean mask as an index (`x[x > 0]`) of a traced array: the result's shape "
            "depends on the values, which the jit of graph mode does not know while tracing "
            "(jax.jit raises NonConcreteBooleanIndexError too); use jnp.where(mask, x, 0), "
            "or run op by op (kt.set_mode('eager')), where it has a gradient as in JAX "
            f"({type(exc).__name__}: {text[0] if text else ''})\n  {where}"
        )
    return KTransformError(
        "a traced value where JAX needs a Python number (a slice bound, a shape): the jit "
        "of graph mode traces the arguments of a call and the arrays computed, as jax.jit "
        "does; make it a Python number (`int(...)` of a value computed from shapes, "
        "constants and arguments given as Python ints, which stay static), or run op by op "
        f"(kt.set_mode('eager')) "
        f"({type(exc).__name__}: {text[0] if text else ''})\n  {where}"
    )


class CompiledGraph:
    """A transform graph compiled to Python and run with Parameters bound.

    Called like the graph; jitted by default with static Python scalars
    (`set_mode("eager")` or `jit=False` runs the generated code op by op).
    `__kt_graph__` lets user code that calls this object be transformed too;
    the graph is compiled to Python at the first call (or `__kt_source__`
    read), so a gradient function only used inside another transform
    (`kt.jvp(kt.grad(f), ...)`) never generates its own code.

    Python's names are read when a call runs: before each call the guards of
    the parsed graphs (`frontend.guards`: the globals and closure cells read,
    with their values) are checked, and if a name was rebound since, the
    program is made again by `remake` (a function returning a fresh
    CompiledGraph; `primal`: the parsed graph whose guards count).
    """

    __kt_own_call__ = True  # its `__call__` is never parsed as user code (`callables`)

    def __init__(
        self,
        graph: FuncGraph,
        fn=None,
        jit: bool | None = None,
        primal: FuncGraph | None = None,
        remake=None,
        jit_host: bool = False,
    ):
        self.guards = guards_of(primal or graph)
        self._primal = primal
        # A graph that changes a parameter in place (`l *= 2`): each call checks
        # that the caller's argument is no object Python would change.
        source = primal or graph
        if primal is not None and primal.changed_parameters:
            if graph.param_names == primal.param_names:  # (code calling this graph checks too)
                graph.changed_parameters = {**primal.changed_parameters, **graph.changed_parameters}
        self._changing = source if source.changed_parameters else None
        self.remake = remake
        self.fn = fn
        self.jit = jit
        self._graph = graph  # `__kt_graph__`; it may be replaced (see GradFunction)
        self._compiled_graph = graph
        self.params = parameters_of(graph)
        self.assigns = any(
            isinstance(getattr(n.fn, "value", None), Assign)
            for g in graph.reachable()
            for n in g.nodes
        )
        self._jitted: dict[tuple, object] = {}
        self._checked: set[tuple] = set()  # keys whose program checks a loop bound
        self._constants: set[tuple] = set()  # keys whose result holds a str (`_TraceConstant`)
        self._direct: tuple | None = None  # (key, program) of the last call of arrays only
        self.bound_loops = False  # gradient and jvp functions: see `_eager`
        # Host calls (a random generator, a counter) run per call, as without
        # a jit: such a program is not compiled unless asked (`kt.jit`, jit=True).
        # `jit_host` (kt.jit): compiled all the same, host code runs at trace.
        calls_host = graph.calls_host()
        self.host = calls_host and not jit_host
        self.jit_host = jit_host
        # Compiled with host code in it (kt.jit, jit=True): host values it
        # read (a global or attribute a function run as Python reads, a
        # draw) are frozen in its traces, as in a `jax.jit`'s. An object made
        # anew traces again (`own_traces`), as a fresh `jax.jit` of a new function does.
        self.traces_host = calls_host and (jit_host or jit is True)
        # The defaults of `fn`'s parameters (not arrays) by position: an
        # argument that is one is a constant of the program (`_parts`).
        self.defaults = default_arguments(fn, primal or graph)

    def own_traces(self) -> None:
        """No traces of its own yet: a new object sharing another's program
        (`reverse.GradFunction`) traces it again at its first call."""
        self._jitted = {}
        self._checked = set()
        self._direct = None

    def under_jit(self) -> CompiledGraph:
        """This program as `kt.jit` runs it: compiled even where it calls host
        code (which then runs when it is traced, as under `jax.jit`); a
        subclass that binds its own arguments (a gradient function) makes
        itself again so."""
        remake = self.remake
        return CompiledGraph(
            self._compiled_graph,
            self.fn,
            self.jit,
            primal=self._primal,
            remake=None if remake is None else lambda: remake().under_jit(),
            jit_host=True,
        )

    @property
    def __kt_graph__(self) -> FuncGraph:
        """The graph it runs, made again first if a name it read was rebound
        (`refresh`): a transform of this object (`kt.jacrev(kt.grad(f))`, a
        function calling it, parsed again) builds on the graph a call would run."""
        self.refresh()
        return self._graph

    @__kt_graph__.setter
    def __kt_graph__(self, graph: FuncGraph) -> None:
        self._graph = graph

    @functools.cached_property
    def run(self):
        """The graph's generated Python function."""
        verify(self._compiled_graph)
        return compile_graph(self._compiled_graph)

    @property
    def __kt_source__(self) -> str:
        return self.run.__kt_source__

    def refresh(self) -> None:
        """Made again if a global or closure name it read was rebound."""
        if not stale(self.guards):
            return
        if self.remake is None:
            names = ", ".join(stale_names(self.guards))
            raise KTransformError(
                f"{self._graph.name} read {names}, rebound since it was transformed: "
                "make the function again (kt.grad(f), kt.jit(f), ...)"
            )
        fresh = self.remake()
        kept = {k: v for k, v in vars(self).items() if k in ("bound_loops", "constant_sequences")}
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__, **kept)

    def __call__(self, *args):
        if self._changing is not None:
            refused = effects.changed_arguments(self._changing, args)
            if refused is not None:
                raise KTransformError(refused)
        direct = self._direct
        # The common call, arrays only as the last such call, goes straight to
        # that call's program: the loop below without its lookups.
        if (
            direct is not None
            and len(args) == direct[0][0]
            and _all_concrete(args)
            and direct[0][3] == _trace_settings()
            and (self.jit or _mode["jit"])
            and not stale(self.guards)
        ):
            values = tuple([p.stored for p in self.params])
            if _all_concrete(values):
                key, jitted = direct
                try:
                    return self._finish(key, jitted(values, args))
                except Exception as exc:  # noqa: BLE001 -- as in the loop below
                    self._direct = None
                    result = self._recover(exc, key, True, values, args)
                    if result is not _RETRY:
                        return result
        self.refresh()
        values = tuple([p.stored for p in self.params])
        parts = self._parts(args, values)
        if parts is None:
            return self._eager(values, self._inputs(args))
        fixed, traced, retrace = parts
        # What tracing depends on beyond the arguments: the retrace mode, the
        # loop settings and whether checkpointed loops report their recompute
        # (a program is shared by gradient objects).
        statics = tuple(self._static_key(k, v) for k, v in fixed.items()) if fixed else ()
        for _ in range(MAX_RETRACES):
            key = (len(args), statics, retrace, _trace_settings())
            jitted = self._jitted.get(key)
            if jitted is None:
                jitted = self._jitted[key] = self._jit(key, fixed, len(args), retrace)
            if jitted is _EAGER:
                return self._eager(values, self._inputs(args))
            try:
                result = self._finish(key, jitted(values, traced))
            except Exception as exc:  # noqa: BLE001 -- see `_recover`
                result = self._recover(exc, key, retrace, values, args)
                if result is _RETRY:  # the next key has the bound grown
                    continue
                return result
            if retrace and not statics and self.jit is not False:
                self._direct = (key, jitted)
            return result
        raise KTransformError("a traced while loop kept outgrowing its gradient buffer")

    def _finish(self, key: tuple, output):
        """The result of a compiled call. A program that checks a loop's
        bound is waited for, so that an overflow raises here (see `_traced_as`)."""
        if self._checked and key in self._checked:
            jax.block_until_ready(output)
        if key in self._constants:
            output = (_trace_constant_values(output[0]), output[1])
        return self._write_back(output) if output[1] else output[0]

    def _recover(self, exc: Exception, key: tuple, retrace: bool, values, args):
        """After the program of `key` raised `exc`: the result run op by op (a
        recursion XLA cannot compile), `_RETRY` (a traced while outgrew its
        gradient buffer: its bound is grown), or `exc` raised (as the user's
        own exception where the program reached a `raise`)."""
        if isinstance(exc, UnboundedRecursion):
            if not retrace:  # under the user's jax.jit: no concrete values to run
                raise exc.with_traceback(None) from None
            self._jitted[key] = _EAGER
            warnings.warn(_recursion_runs_eagerly(exc), stacklevel=4)
            return self._eager(values, self._inputs(args))
        if _grow_loop_bound(exc):
            return _RETRY
        raised = rt.raised_at_run_time(exc)  # a `raise` the program reached
        if raised is not None:
            raise raised from None
        raise exc

    def _defaulted(self, args: tuple) -> set[int]:
        """The positions of `args` holding their parameter's default object:
        a call left them to their defaults (`bind_keywords`)."""
        defaults = self.defaults
        return {k for k, d in defaults.items() if k < len(args) and args[k] is d}

    def _inputs(self, args: tuple) -> tuple:
        """`args` for a run op by op: NumPy values and Python floats made JAX
        arrays, as a jit makes them; a default left to itself is Python's
        own object, as in a call of the function."""
        defaulted = self._defaulted(args) if self.defaults else ()
        made = rt.as_jax_inputs(args)
        return tuple(args[k] if k in defaulted else a for k, a in enumerate(made))

    def _static_key(self, k: int, v) -> tuple:
        """A static argument as part of a program's key: its value, or for a
        default left to itself, its position (the same object at each call,
        which need not be hashable)."""
        if k in self.defaults and v is self.defaults[k]:
            return (k, "default")
        return (k, type(v), _hashable(v))

    def _parts(self, args: tuple, values: tuple):
        """`(static arguments by position, traced ones, whether loops may
        retrace)` of a compiled call, or None for a call run op by op.

        A parameter the call left to its default is a constant of the
        program, as in Python (`jax.jit` does not trace defaults either): a
        default object (`cfg=Config()`) is no refused argument under
        `kt.jit`; elsewhere one that is a host object runs per call, as any
        host object argument."""
        use_jit = (_mode["jit"] and not self.host) if self.jit is None else self.jit
        compiled = self.jit or self.jit_host
        defaulted = self._defaulted(args) if self.defaults else set()
        if use_jit and not defaulted and _all_concrete(args) and _all_concrete(values):
            return {}, args, True  # arrays only (the common call): nothing static, no tracer
        given = [a for k, a in enumerate(args) if k not in defaulted]
        leaves = jax.tree_util.tree_leaves(given) if use_jit else ()
        objects = [type(a).__name__ for a in leaves if _host_object(a)]
        if objects and compiled:
            raise KTransformError(
                f"{self._graph.name} is compiled (kt.jit) and was given a "
                f"{objects[0]}, which is not an array: as jax.jit, it can take arrays, "
                "numbers and static values (read the object as a global, or call "
                "without kt.jit: its methods then run per call)"
            )
        if not compiled and use_jit:  # a default generator's methods run per call too
            held = jax.tree_util.tree_leaves([args[k] for k in defaulted])
            objects += [type(a).__name__ for a in held if _host_object(a)]
        if not use_jit or objects:  # a generator's methods are host code: per call
            return None
        static = tuple(k for k, a in enumerate(args) if k in defaulted or _is_static(a))
        traced = tuple(a for k, a in enumerate(args) if k not in static)
        # Under a user's own jax.jit no retrace can happen: loops checkpoint instead.
        return {k: args[k] for k in static}, traced, not rt.any_traced((values, traced))

    def _jit(self, key: tuple, fixed: dict, n: int, retrace: bool):
        options = None
        # (Under the user's jax.jit, `retrace` False, the program is part of
        # theirs, and JAX takes compiler options only for the outermost jit.)
        if retrace and jax.default_backend() == "cpu" and self._size > LARGE_PROGRAM:
            options = _classic_emitters()  # see LARGE_PROGRAM
        return jax.jit(self._traced_as(key, fixed, n, retrace), compiler_options=options)

    @functools.cached_property
    def _size(self) -> int:
        return sum(len(g.nodes) for g in self._compiled_graph.reachable())

    def _eager(self, values, args):
        """The generated code run op by op; gradient and jvp functions bound
        their concrete `while` loops (`runtime.bounds.bounded_loops`)."""
        with bounded_loops(self.bound_loops):
            try:
                output = self._compute(values, args)
            except RecursionError:
                raise KTransformRuntimeError(
                    f"{self._graph.name}: a recursion did not end: Python's recursion "
                    "limit was reached running the program op by op (an endless loop of "
                    "calls, or deeper than Python allows: each call takes a few frames here)"
                ) from None
            return self._write_back(output)

    def _traced_as(self, key: tuple, fixed: dict, n: int, retrace: bool):
        """`_compute` taking only the traced arguments (`fixed` holds the
        static ones), traced in `retrace` mode. A program that checks a
        loop's bound (`runtime.bounds.report_overflow`) has its `key` noted
        in `_checked`: `__call__` waits for its result, so that an overflow
        raises there, where the program can grow the bound and retrace (on a
        GPU the check's error would otherwise surface where the user first
        reads the result)."""

        def compute(values, traced):
            it = iter(traced)
            args = tuple(fixed[k] if k in fixed else next(it) for k in range(n))
            before = checks_traced()
            with retracing(retrace):
                result, updates = self._compute(values, args)
            if checks_traced() > before:
                self._checked.add(key)
            returned = _trace_constants(result, self.fn)
            if returned is not result:
                self._constants.add(key)
            return returned, updates

        return compute

    def _compute(self, values, args):
        """(result, {index: new value}) for the Parameters the program assigned."""
        with rt.param_scope(self.params, values, assigns=self.assigns) as scope:
            try:
                result = self.run(*args)
            except Exception as exc:
                refusal = refusal_of(exc)  # JAX's error a loop knows the cause of
                if refusal is not None:
                    refusal.__cause__ = exc
                    _note_user_line(refusal, self.run)
                    raise refusal from exc
                static = _static_needed(exc, self.run)
                if static is not None:
                    raise static from exc
                _note_user_line(exc, self.run)
                raise
        index = {id(p): k for k, p in enumerate(self.params)}
        return result, {index[i]: v for i, v in scope.updates.items() if i in index}

    def _write_back(self, output):
        result, updates = output
        for k, value in updates.items():
            if isinstance(value, jax.core.Tracer):
                raise KTransformError(
                    f"{self._graph.name} assigns the Parameter {self.params[k].name}; "
                    "a program with state updates cannot run inside your own jax.jit: call it "
                    "directly (it is compiled already)"
                )
            self.params[k].set_data(value)
        return result

    def __repr__(self) -> str:
        return f"<k_transform {self._graph.name}>"


def _recursion_runs_eagerly(exc: UnboundedRecursion) -> str:
    return (
        f"the recursion in {exc.function!r} has a base case chosen by a traced condition, "
        "which XLA cannot compile (a computation cannot call itself): this program runs "
        "op by op, with concrete values, at each call"
    )


def without_aux(fn):
    """The graph of `fn(*xs)[0]` (cached per graph of `fn`)."""
    primal = graph_of(fn)
    _first_outputs = TRANSFORM.cache("grad.first_outputs")
    entry = _first_outputs.get(id(primal))
    if entry is None or entry[0] is not primal:
        entry = (primal, first_output_graph(primal))
        _first_outputs[id(primal)] = entry
    return entry[1]


def compiled_forward(fn) -> CompiledGraph:
    """`fn` compiled (cached per graph), for the aux values of `has_aux`."""
    primal = graph_of(fn)
    _forwards = TRANSFORM.cache("grad.forwards")
    entry = _forwards.get(id(primal))
    if entry is None or entry[0] is not primal:
        entry = (primal, CompiledGraph(primal, remake=lambda: compiled_forward(fn)))
        entry[1].bound_loops = True
        _forwards[id(primal)] = entry
    return entry[1]


def bind_keywords(fn, args: tuple, kwargs: dict) -> tuple[tuple, list]:
    """`args` and `kwargs` as the positional arguments of `fn`'s graph, and
    for each of `args`: (the graph parameter it went to, its index in `*args`
    or None)."""
    target = fn.construct if isinstance(fn, Cell) else fn
    try:
        sig = inspect.signature(callables.unwrap(target), follow_wrapped=False)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise KTransformError(f"calling {getattr(target, '__name__', target)}: {exc}") from None
    bound.apply_defaults()
    flat, where = [], []
    for name, p in sig.parameters.items():
        if p.kind is p.VAR_POSITIONAL:
            where += [(len(flat), k) for k in range(len(bound.arguments[name]))]
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and len(where) < len(args):
            where.append((len(flat), None))
        flat.append(bound.arguments[name])
    return tuple(flat), where


def with_defaults(fn, args: tuple) -> tuple:
    """`args` followed by the defaults of the parameters of `fn` they leave
    out (a `**kwargs` parameter: no keywords), as a call of `fn` binds them;
    `args` as they are for what has no Python signature of its graph's (a
    graph, a gradient function) or none at all; for those, the constants
    its graph's parameters default to (`kt.jvp(kt.grad(f), (x,), (v,))`
    with `def f(x, **kwargs)`: the gradient's graph takes `kwargs` too)."""
    graph = fn if isinstance(fn, FuncGraph) else kt_attribute(fn, "__kt_graph__", None)
    if isinstance(graph, FuncGraph):
        if kt_attribute(fn, "__kt_graph_for__", None) is not None:
            return args  # the gradient of a `*args` function: made per arity
        if "__signature__" in getattr(fn, "__dict__", {}):
            # a gradient function called as its target is (`GradFunction`): the
            # target's default objects, as a call of it binds them
            try:
                return bind_keywords(fn, args, {})[0]
            except KTransformError:
                return args
        return (*args, *_graph_defaults(graph, len(args)))
    try:
        return bind_keywords(fn, args, {})[0]
    except KTransformError:  # no Python signature to read: called as it is
        return args


def _graph_defaults(graph: FuncGraph, given: int) -> tuple:
    """The constant defaults of `graph`'s parameters after the first `given`
    (a call binds them so), or none where one of those has no constant default
    (the call is left as it is: its arity error is the graph's)."""
    names = (graph.param_names or [])[given:]
    nodes = [(graph.defaults or {}).get(name) for name in names]
    if not all(isinstance(node, Constant) for node in nodes):
        return ()
    if any(isinstance(node.value, FuncGraph) for node in nodes):
        return ()  # a function default is a graph here, no value to pass
    return tuple(node.value for node in nodes)


def default_arguments(fn, graph: FuncGraph) -> dict[int, object]:
    """The default objects of the parameters of `fn` (its Python signature:
    positions as `bind_keywords` makes them), or where it has none of its
    graph's (a graph, a gradient function), of `graph`'s (its constants).
    Array defaults are left out: traced as any array argument."""
    found = {}
    if fn is not None and not isinstance(fn, FuncGraph):
        if isinstance(kt_attribute(fn, "__kt_graph__", None), FuncGraph):
            return {}  # a gradient function: its Python signature is not its graph's
        target = fn.construct if isinstance(fn, Cell) else fn
        try:
            sig = inspect.signature(callables.unwrap(target), follow_wrapped=False)
        except (TypeError, ValueError):
            return {}
        for k, p in enumerate(sig.parameters.values()):
            if p.default is not p.empty:
                found[k] = p.default
    else:
        graph = fn if isinstance(fn, FuncGraph) else graph
        for k, name in enumerate(graph.param_names or ()):
            node = (graph.defaults or {}).get(name)
            if isinstance(node, Constant) and not isinstance(node.value, FuncGraph):
                found[k] = node.value
    return {k: d for k, d in found.items() if not isinstance(d, (jax.Array, np.ndarray))}


def takes_star_args(fn) -> bool:
    """Whether `fn` (a Cell: its `construct`) has a `*args` parameter. A
    gradient or compiled function (it carries its graph) takes its target's
    parameters, whatever its Python signature."""
    if isinstance(fn, FuncGraph) or isinstance(kt_attribute(fn, "__kt_graph__", None), FuncGraph):
        return False
    target = callables.unwrap(fn.construct if isinstance(fn, Cell) else fn)
    try:
        params = inspect.signature(target, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_POSITIONAL for p in params)


_INEXACT = frozenset(map(np.dtype, ("float16", "float32", "float64", "complex64", "complex128")))


def check_float_inputs(api: str, args, positions) -> None:
    """JAX's rule for its differentiation API: the inputs differentiated must
    be float (or complex) arrays or Python floats; an integer or boolean input
    raises TypeError instead of getting a silent zero gradient."""
    for k in positions:
        if k >= len(args):
            continue
        arg = args[k]
        leaves = (arg,) if type(arg) is _array_type() else jax.tree_util.tree_leaves(arg)
        for leaf in leaves:
            dtype = leaf.dtype if hasattr(leaf, "dtype") else np.result_type(type(leaf))
            if dtype not in _INEXACT and not jnp.issubdtype(dtype, jnp.inexact):
                raise TypeError(
                    f"{api} requires real- or complex-valued inputs (a float dtype), but input "
                    f"{k} is {type(leaf).__name__} of dtype {dtype}; pass a float array "
                    "(e.g. x.astype(jnp.float32)) or leave it out of the differentiated inputs "
                    "(kt.GradOperation gives integer arrays an integer gradient, as MindSpore)"
                )
