"""Library calls without Python source, imported from their jaxprs.

Most library functions (`jnp.arccos`, `jnp.sort`, `jax.nn.softplus`,
`jax.scipy.special.logsumexp`, third-party JAX code such as optax losses)
have no primitive of ours and no source we parse. Their gradients still come
from our rules, through their jaxprs:

Design.
- *Parse time.* The parser keeps such a call as an opaque
  `ops.python.LibraryCall(fn, hint, kwnames)` (a numpy function called on
  traced values first becomes its `jax.numpy` twin: `numpy_twin`). Calls on
  constants are folded; calls of the non-differentiable list
  (`ops.python.NON_DIFFERENTIABLE_CALLS`: shapes, constructors, comparisons)
  keep their no-gradient rule.
- *K time.* Shapes are unknown when the DFunctor runs, so K of such a call is
  deferred to trace time: the DFunctor (`dfunctor.TracedCallK`) emits
  `pair = <fn>_fprop(*args)`, a call of a run-time object exactly like a call
  of a user's closure value, with `pair = (result, bprop)`.
- *Trace time.* That object, called with the arguments' concrete avals, asks
  `imported_graph(fn, hint, kwnames, args)` for the FuncGraph of the call
  (traced with `jax.make_jaxpr`, cached by fn, avals and static arguments),
  applies our DFunctor to it and runs the generated code. K of that object is
  the same object one order higher (K applied twice to the imported graph), so
  the bprop is differentiable again: jvp (double reverse) and second order work.
- `make_jaxpr` is tracing, not differentiation: JAX's rules are never used.

The graph. One parameter per argument of the call (keywords last, as the
LibraryCall passes them); array leaves inside tuples, lists and dicts are
read with `getitem`; non-array leaves (ints, strings, dtypes) are static and
baked into the trace. Each equation becomes our primitive of the same
meaning (`ops.lax_map.import_equation`: the `ops` twin, `sin` -> `ops.Sin`,
else the lax primitive's own class, `ops.lax`), and a tuple and `getitem`s
for primitives with several results; `constvars` and literals are
Constants. `jit`/`pjit`/`closed_call`/`remat` and `custom_jvp_call`/
`custom_vjp_call` are inlined by their primal body (never JAX's rule), so a
`custom_jvp` function is differentiated through what it computes, except
JAX's own ones whose rule differs from their steps' at special points
(`xlogy`, `logaddexp`, `relu`, `sinc` at 0: `ops.special.CUSTOM_JVP`), which
become the primitive a direct call maps to, whose rule is JAX's (one per
result: `sici`'s `Si` and `Ci`). The output
is rebuilt as the function's tuple/list/dict structure. A float rebuilt
from another float's bits (`bitcast_convert_type` there and back) is
refused, not given the zero gradient integer arithmetic would give;
`jnp.frexp` (and so `jnp.ldexp`) gets a primal of ours instead (see "bit
manipulation" below). Control flow inside a jaxpr is imported onto our
own control primitives, so our loop and branch rules differentiate it (a
`while` in reverse mode too, which JAX refuses): `while` is a `while_loop`
of two closed graphs (a batched `while`, one condition per element, loops
while any holds and updates only those), `cond` a chain of `switch`es
on `index > k`, `scan` a `for_range` over the rows whose stacked outputs are
buffers it carries and writes row by row (`setitem`).
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import copy
import functools
import gc
import inspect
import operator
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from k_transform.context import TRANSFORM
from k_transform.control import prims as control
from k_transform.errors import KTransformError
from k_transform.frontend import concrete, guards, python_code
from k_transform.frontend.source import is_library_value
from k_transform.ir.nodes import Constant, DebugInfo, FuncGraph, Node
from k_transform.ops import python as prims
from k_transform.ops.arithmetic import Greater
from k_transform.ops.lax_map import import_equation
from k_transform.ops.special import CUSTOM_JVP, JAX_BODIES, JaxOwnRule
from k_transform.runtime import host_log
from k_transform.runtime.state import no_parameter_reads
from k_transform.runtime.values import pytree_node

_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep

# Call-like primitives inlined by the body they call; the value is the param
# holding that body.
INLINED = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",  # jax.checkpoint (JAX 0.4.36+ names it so)
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def numpy_twin(fn):
    """The `jax.numpy` function of the same name as numpy function `fn`, else `fn`."""
    module = getattr(fn, "__module__", None) or ""
    is_numpy = isinstance(fn, np.ufunc) or module == "numpy" or module.startswith("numpy.")
    twin = getattr(jnp, getattr(fn, "__name__", ""), None) if is_numpy else None
    return twin if callable(twin) else fn


def _traced(leaf, python: bool = False) -> bool:
    """Whether `leaf` is an input of the trace (else a static value).
    `python`: user code (run as Python, or host code: a method of the user's
    object) sees what is not a JAX array as Python passes it, a Python float,
    a NumPy array or scalar, as JAX's tracer does running the user's function
    (it closes over constants): `isinstance(y, np.ndarray)`, `type(y) is
    float`, `y.dtype.itemsize` and NumPy indexing (`np.eye(k)[y]`) keep
    their meaning. Only a JAX array can carry a gradient here (the inputs of
    a gradient function are made JAX arrays, `runtime.as_jax_inputs`)."""
    if isinstance(leaf, bool):
        return False
    if python:
        return isinstance(leaf, jax.Array)
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, float, complex))


def _users_code(fn) -> bool:
    """Whether `fn` runs the user's own Python (a function of theirs, a method
    of their object, a partial of one), not library code (`jnp.arccos`)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    return not is_library_value(fn)


def _scalar(leaf) -> bool:
    """Whether `leaf` is a Python or NumPy number (traced unless JAX wants it static)."""
    return isinstance(leaf, (float, complex, np.generic)) and not isinstance(leaf, np.bool_)


def _by_id(leaf) -> bool:
    """Whether a static leaf is unhashable, so cached by its id."""
    try:
        hash(leaf)
    except TypeError:
        return True
    return False


def _static_key(leaf):
    if _by_id(leaf):
        return ("id", id(leaf))
    return (type(leaf), leaf, repr(leaf)) if _scalar(leaf) else (type(leaf), leaf)  # -0.0


def _struct(leaf):
    aval = jax.typeof(leaf)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def imported_graph(fn, hint: str, kwnames: tuple, args: tuple, host: bool = False) -> FuncGraph:
    """The FuncGraph of `fn(*args)` (the last `len(kwnames)` as keywords),
    imported from its jaxpr at these argument avals (cached).

    `host`: a host call (`ops.host`: a random generator, a counter). Given
    no JAX array it is one `HostValue` node (run per call, no gradient);
    given arrays it is traced at each call, never cached, so its host
    effects happen once per call."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(list(args))
    leaves = [leaf for _, leaf in flat]
    arrays = any(isinstance(leaf, jax.Array) for leaf in leaves)
    if host and not arrays:
        return _value_graph(fn, hint, kwnames, len(args), host)
    refused = python_code.reason(fn)  # a user function run as Python
    users = host or refused is not None or _users_code(fn)
    traced = [_traced(leaf, users) for leaf in leaves]
    plan = (id(fn), tuple(kwnames), treedef, tuple(traced))
    _wanted = TRANSFORM.cache("jaxpr.static_scalars")
    if _wanted.get(plan, (None,))[0] is fn:  # JAX wants its Python numbers static
        traced = [t and not _scalar(leaf) for leaf, t in zip(leaves, traced, strict=True)]
    structs = [_struct(leaf) for leaf, t in zip(leaves, traced, strict=True) if t]
    key = (
        id(fn),
        tuple(kwnames),
        treedef,
        tuple(traced),
        tuple((s.shape, s.dtype, s.weak_type) for s in structs),
        tuple(_static_key(leaf) for leaf, t in zip(leaves, traced, strict=True) if not t),
    )
    # The entry holds `fn` and the static leaves keyed by id (unhashable), and
    # is used only when they are the same objects: ids are reused once an
    # object is gone.
    held = (fn, *(leaf for leaf, t in zip(leaves, traced, strict=True) if not t and _by_id(leaf)))
    _graphs = TRANSFORM.cache("jaxpr.graphs")
    # A NumPy array the user's code reads as it is may be changed in place
    # before the next call (its trace holds its values then): traced again.
    cached = not host and not any(
        isinstance(leaf, np.ndarray) for leaf, t in zip(leaves, traced, strict=True) if not t
    )
    entry = _graphs.get(key) if cached else None
    if entry is not None and all(a is b for a, b in zip(entry[0], held, strict=True)):
        return entry[1]

    returned = []  # the result's structure, with its functions (see _Static)
    traces = []  # the trace `fn` ran under

    def flat_fn(*xs):
        it = iter(xs)
        full = [next(it) if t else leaf for leaf, t in zip(leaves, traced, strict=True)]
        values = jax.tree_util.tree_unflatten(treedef, full)
        pos, kw = prims.split_kwargs(values, kwnames)
        out = fn(*pos, **kw)
        traces[:] = [concrete.current_trace()]  # a tracer of it left in a global escapes
        _check_unchanged(values, treedef, full, hint, (fn, args))
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        order = _key_order(out)  # (JAX's treedef sorts a dict's keys)
        returned[:] = [out_tree, [_Static.of(leaf, hint) for leaf in out_leaves], order]
        return [leaf for leaf, s in zip(out_leaves, returned[1], strict=True) if s is None]

    # The globals and cells a function run as Python may rebind (`global RUNNING`).
    places = guards.rebound_places(fn) if refused is not None else ()
    before = [_read_place(place, name) for place, name, _ in places]
    try:
        with no_parameter_reads(hint) if refused is not None else contextlib.nullcontext():
            values = [leaf for leaf, t in zip(leaves, traced, strict=True) if t]
            abstract = host_log.traces_abstractly()  # a body JAX traces once
            if (
                host
                and not abstract
                and concrete.available()
                and all(map(concrete.concrete, values))
            ):
                # Host code runs per call: its Python sees these values, as under
                # JAX's eager gradient (a Python `if` on an array's value runs).
                # The globals it rebinds keep values, not our tracers.
                try:
                    closed, out_shape = concrete.make_jaxpr_at(flat_fn, values, structs)
                finally:
                    concrete.settle(places)
            else:
                closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*structs)
    except KTransformError:
        raise
    except Exception as exc:  # noqa: BLE001 - any tracing failure is the user's call
        retry = not host and refused is None  # (user code run as Python runs once)
        if retry and any(t and _scalar(leaf) for leaf, t in zip(leaves, traced, strict=True)):
            retried = _with_static_scalars(fn, hint, kwnames, args, plan)
            if retried is not None:
                return retried
        if not arrays:  # given no JAX array, it has no gradient: run as Python computes it
            return _value_graph(fn, hint, kwnames, len(args), host)  # (`"".join(names)`)
        if isinstance(exc, _VALUE_NEEDED) and refused is None:
            if not host and concrete.available() and all(map(concrete.concrete, values)):
                # `l.item()`: JAX's eager gradient lends the value (a Python
                # number, no gradient); traced at the values, at each call
                return imported_graph(fn, hint, kwnames, args, host=True)
            first = str(exc).strip().splitlines()[0]
            raise KTransformError(
                f"cannot differentiate the call {hint}(...): tracing it with jax.make_jaxpr "
                f"failed ({type(exc).__name__}: {first}): it needs the value of a traced "
                "array, which is not known while tracing (graph mode's jit, a loop body "
                "traced for lax), as under jax.jit; run op by op (kt.set_mode('eager')), or "
                "print with jax.debug.print"
            ) from None
        if refused is not None and _users_exception(exc):
            # the user's own exception (a KeyError, a StopIteration, a check of
            # theirs): Python raises it running the function, and so do we
            exc.add_note(
                f"raised in {hint}, which k_transform runs as Python under JAX's tracer "
                f"since it cannot parse it ({refused.bare_message})"
            )
            raise exc
        if refused is not None:
            raise KTransformError(
                f"{hint} runs as Python under JAX's tracer, since k_transform cannot parse it "
                f"({refused.bare_message}{refused.debug.describe() if refused.debug else ''}"
                f"), and JAX could not trace it ({type(exc).__name__}: {exc})"
            ) from None
        raise KTransformError(
            f"cannot differentiate the call {hint}(...): it has no primitive with a gradient "
            f"rule and tracing it with jax.make_jaxpr failed ({type(exc).__name__}: {exc})"
        ) from None
    _check_no_escape(places, before, traces, hint, refused)
    closed = discharged(closed, hint)
    paths = [path for (path, _), t in zip(flat, traced, strict=True) if t]
    shapes = iter(out_shape)
    out_tree, statics, order = returned
    out_shape = out_tree.unflatten([next(shapes) if s is None else s for s in statics])
    out_shape = _in_order(out_shape, order)
    graph = _build(closed, out_shape, paths, hint, len(args), kwnames)
    if cached:
        _graphs[key] = (held, graph)
    return graph


# JAX's errors for a traced value where Python needs its value (`l.item()`).
_VALUE_NEEDED = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)


def _users_exception(exc: Exception) -> bool:
    """Whether `exc`, raised running user code as Python, is what Python
    raises running it (a KeyError, a StopIteration, the user's own check):
    not JAX's refusal of what its tracer cannot do (a Python `if` on a traced
    value, `float(x)`), nor a name undefined (refused with its line, as the
    parser found it)."""
    jax_refusal = (jax.errors.JAXTypeError, jax.errors.JAXIndexError)
    return not isinstance(exc, (*jax_refusal, NameError))


def _with_static_scalars(fn, hint: str, kwnames: tuple, args: tuple, plan: tuple):
    """The graph of the call traced with its Python and NumPy numbers static
    (JAX wants a static value there: `jnp.linalg.norm(x, jnp.inf)`,
    `jnp.take(..., fill_value=0.0)`), remembered for this `plan`; None when
    that fails too. Exact: such a number is a constant of the program (a
    value with a gradient is a JAX array), and each value traces its own
    graph, as under `jax.jit`'s static arguments."""
    _wanted = TRANSFORM.cache("jaxpr.static_scalars")
    _wanted[plan] = (fn,)
    try:
        return imported_graph(fn, hint, kwnames, args)
    except KTransformError:
        del _wanted[plan]
        return None


_REFERENCE_OPS = frozenset({"new_ref", "empty_ref", "get", "swap", "addupdate", "free_ref"})


def discharged(closed, hint: str):
    """`closed` with its mutable array references (`jax.new_ref`, `r[...] =
    v`) made values, by JAX's state discharge: a read is the value's slice,
    a write a new value (`dynamic_update_slice`), in program order."""
    if not any(e.primitive.name in _REFERENCE_OPS for e in closed.jaxpr.eqns):
        return closed
    try:
        from jax._src.state.discharge import discharge_state
    except ImportError:  # pragma: no cover - a JAX without it
        raise KTransformError(
            f"{hint} uses mutable array references, which this JAX cannot discharge"
        ) from None
    return discharge_state(closed)


def _check_unchanged(values, treedef, leaves, hint: str, call: tuple) -> None:
    """A traced call must leave its arguments as it got them: a list it
    appends to (`list.append(rows, v)`), a dict it sets, is the caller's own
    in Python, but here a copy made for the trace, so the caller would not
    see the change (it saw none, silently, before this check). `call`:
    `(fn, args)`, the function and the arguments it was given (to name a
    default of `fn`'s own that it changes)."""
    after, tree = jax.tree_util.tree_flatten(list(values))
    if tree == treedef and all(a is b for a, b in zip(after, leaves, strict=True)):
        return
    fn, args = call
    default, value = _changed_default(fn, args, values, treedef, leaves)
    if default is not None:
        fresh = {list: "[]", dict: "{}"}.get(type(value), f"{type(value).__name__}()")
        raise KTransformError(
            f"{hint} changes `{default}`, its own default value (an object made once, "
            f"when `def {getattr(fn, '__name__', hint)}` ran, that every call leaving "
            f"`{default}` out shares, so in Python each call sees the changes of the calls "
            "before it): it runs as Python under JAX's tracer on a copy, so the default "
            "would not keep the change; pass the value in, or make a new one in the "
            f"function (`{default}=None`, then `if {default} is None: {default} = {fresh}`)"
        )
    raise KTransformError(
        f"{hint} changes an argument it was given (a list, a dict, an object's "
        "attribute): it runs as Python under JAX's tracer on a copy, so the caller "
        "would not see the change; return the new value instead"
    )


def _changed_default(fn, args, values, treedef, leaves) -> tuple:
    """`(name, value)` of the parameter of `fn` whose default is an argument
    in `args` the call changed (`values`: the arguments after the call,
    traced from `leaves`, the flat `args`), or `(None, None)`."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # (no signature: a builtin)
        return None, None
    before = jax.tree_util.tree_unflatten(treedef, leaves)  # (fresh containers)
    for arg, old, new in zip(args, before, values, strict=True):
        old_leaves, old_tree = jax.tree_util.tree_flatten(old)
        new_leaves, new_tree = jax.tree_util.tree_flatten(new)
        if old_tree == new_tree and all(map(operator.is_, old_leaves, new_leaves)):
            continue  # (this one is unchanged)
        named = [p.name for p in parameters if p.default is arg]
        if named:
            return named[0], arg
    return None, None


def _read_place(place, name):
    if name is None:  # a closure cell
        try:
            return place.cell_contents
        except ValueError:  # empty
            return None
    return place.get(name)


def _check_no_escape(places: list, before: list, traces: list, hint: str, refused) -> None:
    """Refuse a call traced abstractly (under a jit, or in a traced loop)
    that rebound a global or closure name to a value of its finished trace
    (`traces`: `global RUNNING; RUNNING = 0.9 * RUNNING + ...`): there is no
    value to leave there (`jax.jit` leaves a leaked tracer, an error where it
    is next read). The names get their values back. Traced at its values,
    the call left arrays there (`concrete.settle`)."""
    if not traces or traces[0] is None:
        return
    for place, name, shown in places:
        leaves = jax.tree_util.tree_leaves(_read_place(place, name))
        if any(isinstance(v, jax.core.Tracer) and v._trace is traces[0] for v in leaves):
            for (p, n, _), old in zip(places, before, strict=True):
                if n is None:
                    p.cell_contents = old
                else:
                    p[n] = old
            raise KTransformError(
                f"{hint} (run as Python) rebinds {shown!r} to a value it computes from traced "
                "arrays, under a jit or a traced loop, where the value is not known: "
                "nothing could be left in it (jax.jit leaves a leaked tracer). Return the "
                "value instead, or call it without a jit",
                refused.debug,  # the line that made it run as Python (`global RUNNING`)
            )


def _value_graph(fn, hint: str, kwnames: tuple, n_args: int, host: bool) -> FuncGraph:
    """`fn(x0, ..., kw_a=...)` given no JAX array as one node with no
    gradient (cached by `fn` and arity): a `HostValue` for a host call, run
    per call, else a `PythonValueCall` (`"".join(names)`: a str, which JAX
    cannot trace; what JAX traces is a constant of its jaxpr)."""
    key = ("host" if host else "value", id(fn), tuple(kwnames), n_args)
    _graphs = TRANSFORM.cache("jaxpr.graphs")
    entry = _graphs.get(key)
    if entry is not None and entry[0][0] is fn:
        return entry[1]
    name = "".join(c if c.isalnum() else "_" for c in hint).strip("_") or "call"
    graph = FuncGraph(f"{name}_host", debug=DebugInfo(file=f"<host call {hint}>", name=name))
    names = [f"x{k}" for k in range(n_args - len(kwnames))] + [f"kw_{k}" for k in kwnames]
    graph.param_names = names
    params = [graph.add_parameter(n) for n in names]
    call = prims.HostValue(fn, hint, kwnames) if host else prims.PythonValueCall(fn, hint, kwnames)
    graph.output = graph.apply(Constant(call, hint=name), *params)
    _graphs[key] = ((fn,), graph)
    return graph


def _build(closed, out_shape, paths, hint, n_args, kwnames) -> FuncGraph:
    name = "".join(c if c.isalnum() else "_" for c in hint).strip("_") or "call"
    graph = FuncGraph(f"{name}_jaxpr", debug=DebugInfo(file=f"<jaxpr of {hint}>", name=name))
    n_pos = n_args - len(kwnames)
    names = [f"x{k}" for k in range(n_pos)] + [f"kw_{k}" for k in kwnames]
    params = [graph.add_parameter(n) for n in names]
    graph.param_names = names
    inputs = [_leaf_node(graph, params, path, hint) for path in paths]
    consts = [Constant(c, hint="c") for c in closed.consts]
    outs = _inline(graph, closed.jaxpr, consts, inputs, set())
    graph.output = _rebuild(graph, out_shape, iter(outs), hint)
    return graph


def _leaf_node(graph: FuncGraph, params: list, path, hint: str) -> Node:
    """The leaf at key path `path` of the arguments: an item of a tuple, list
    or dict; a field of another pytree node (a dataclass, a class registered
    with `register_pytree_node_class`: its child by name or position)."""
    node = params[path[0].idx]
    for entry in path[1:]:
        if isinstance(entry, jax.tree_util.SequenceKey):
            node = graph.apply(Constant(prims.GetItem()), node, Constant(entry.idx))
        elif isinstance(entry, jax.tree_util.DictKey):
            node = graph.apply(Constant(prims.GetItem()), node, Constant(entry.key))
        elif isinstance(entry, (jax.tree_util.GetAttrKey, jax.tree_util.FlattenedIndexKey)):
            name = entry.name if isinstance(entry, jax.tree_util.GetAttrKey) else entry.key
            fields = graph.apply(Constant(prims.FieldsOf((name,))), node)
            node = graph.apply(Constant(prims.GetItem()), fields, Constant(0))
        else:
            raise KTransformError(
                f"cannot import the call {hint}(...): an argument holds a pytree node "
                f"({entry}) whose children cannot be read"
            )
    return node


def _inline(graph: FuncGraph, jaxpr, consts: list, inputs: list, bits: set | None) -> list[Node]:
    """The nodes of `jaxpr`'s outputs, its equations applied in `graph`; `bits`
    holds (by id) the nodes of this import that carry a float's bits (None:
    not followed, in a primal of ours)."""
    env: dict = {}

    def read(v) -> Node:
        if isinstance(v, jex_core.Literal):
            return Constant(np.asarray(v.val, v.aval.dtype), hint="lit")
        return env[v]

    for var, node in zip(jaxpr.constvars, consts, strict=True):
        env[var] = node
    for var, node in zip(jaxpr.invars, inputs, strict=True):
        env[var] = node
    for eqn in jaxpr.eqns:
        outs = _equation(graph, eqn, [read(v) for v in eqn.invars], bits)
        for var, node in zip(eqn.outvars, outs, strict=True):
            env[var] = node
    return [read(v) for v in jaxpr.outvars]


def _equation(graph: FuncGraph, eqn, args: list[Node], bits: set | None) -> list[Node]:
    name = eqn.primitive.name
    reads_bits = bits is not None and any(id(a) in bits for a in args)
    if name in CONTROL:
        seeded = reads_bits or (bits is not None and _makes_float_bits(eqn))
        loop = CONTROL[name](graph, eqn, args, bits, seeded)
        get = Constant(prims.GetItem())
        outs = [graph.apply(get, loop, Constant(k)) for k in range(len(eqn.outvars))]
        _mark_bits(bits, eqn, outs, seeded)
        return outs
    if name in INLINED:
        body = eqn.params[INLINED[name]]
        _refuse_a_rule_it_cannot_keep(eqn, body)
        if name == "custom_jvp_call" and _custom_jvp_of(body) in ARITHMETIC_PRIMALS:
            ours = ARITHMETIC_PRIMALS[_custom_jvp_of(body)](eqn)
            return _inline(graph, ours.jaxpr, [Constant(c) for c in ours.consts], args, None)
        ruled = _jax_rule_primitives(eqn, body) if name == "custom_jvp_call" else None
        if ruled is not None:
            takes_consts = getattr(ruled[0], "takes_consts", False)  # (`ops.linalg.Pinv`)
            operands = args if takes_consts else args[eqn.params["num_consts"] :]
            debug = DebugInfo(name=name)
            return [graph.apply(Constant(p, hint=p.name), *operands, debug=debug) for p in ruled]
        if isinstance(body, jex_core.ClosedJaxpr):
            consts = [Constant(c, hint="c") for c in body.consts]
            return _inline(graph, body.jaxpr, consts, args, bits)
        return _inline(graph, body, [], args, bits)
    if name == "dce_sink":
        return []  # no results: it only keeps its operand from JAX's dead-code elimination
    avals = tuple(_aval(v) for v in eqn.invars)
    float_from_bits = reads_bits and name == "bitcast_convert_type" and _inexact(eqn.outvars[0])
    out_avals = tuple(_aval(v) for v in eqn.outvars)
    outs = import_equation(
        graph,
        eqn.primitive,
        dict(eqn.params),
        avals,
        out_avals,
        args,
        float_from_bits,
        effect=bool(eqn.effects),
    )
    _mark_bits(bits, eqn, outs, reads_bits or _reads_float_bits(eqn))
    return outs


# Library functions whose gradient JAX defines by a rule of their own that
# differs from differentiating their steps, where the steps' gradient is NaN
# (the bwd function of their custom_vjp: (module, name)). Called in parsed
# code they have a primitive of ours (`k_transform.ode`); read through a
# jaxpr (code run as Python) they are refused.
ADJOINT_ONLY = {("jax.experimental.ode", "_odeint_rev"): "jax.experimental.ode.odeint"}


def _refuse_a_rule_it_cannot_keep(eqn, body) -> None:
    """A custom_jvp or custom_vjp function not JAX's own (the user's) is
    differentiated by its own rule where parsed code calls it
    (`frontend/jax_custom.py`); read through a jaxpr (a library call, code
    run as Python, a function value called at run time: traced at its
    values by `frontend/concrete.py`, which records such calls as they are),
    its rule would be lost: refused. So is a JAX function whose rule is the
    adjoint method."""
    if eqn.primitive.name.startswith("custom_"):
        info = (body.jaxpr if isinstance(body, jex_core.ClosedJaxpr) else body).debug_info
        where = (getattr(info, "func_src_info", None) or "").rsplit(" at ", 1)[-1]
        if where and not os.path.abspath(where).startswith(_JAX_DIR):
            kind = "custom_vjp" if "vjp" in eqn.primitive.name else "custom_jvp"
            raise KTransformError(
                f"cannot differentiate the jax.{kind} function {info.func_name} ({where}) "
                "here: its own gradient rule is kept where code k_transform parses calls "
                "it, not through a library call or code run as Python (a function it cannot "
                "parse, or one it meets only as a value when the program runs: an argument, "
                "a default argument, an item of a tuple, list or dict), where only its steps "
                "would be seen; call the function that uses it by its name"
            )
    bwd = getattr(eqn.params.get("bwd"), "f", None)
    key = (getattr(bwd, "__module__", None), getattr(bwd, "__name__", None))
    if key in ADJOINT_ONLY:
        raise KTransformError(
            f"cannot differentiate {ADJOINT_ONLY[key]} here: its gradient is the adjoint "
            "method (differentiating the solver's steps gives NaN), which k_transform gives "
            "once, where the call is in code it parses and `func` reads no variable of the "
            "caller (pass those as arguments); not in code that runs as Python, nor a "
            "second derivative"
        )


def _aval(var) -> tuple:
    dtype = var.aval.dtype
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # an extended dtype (a PRNG key): kept as JAX's
        pass
    return (tuple(var.aval.shape), dtype)


# -- bit manipulation ---------------------------------------------------------------------
# A float's bits (`bitcast_convert_type` to an integer type) go through integer
# arithmetic, which has no gradient; a float rebuilt from them
# (`bitcast_convert_type` back to a float type) would get a zero gradient,
# silently. The importer follows such bits (the integer and boolean results of
# equations that read them, through calls and control flow) and imports the
# rebuilding bitcast as `ops.lax.FloatFromBits`, whose rule refuses. Library
# functions known to compute so (`jnp.frexp`, hence `jnp.ldexp`: a custom_jvp
# whose rule we may not use) are imported with a primal of ours written in
# arithmetic instead (`ARITHMETIC_PRIMALS`).
def _inexact(var) -> bool:
    return jnp.issubdtype(var.aval.dtype, jnp.inexact)


def _reads_float_bits(eqn) -> bool:
    """A `bitcast_convert_type` from a float to an integer type."""
    return (
        eqn.primitive.name == "bitcast_convert_type"
        and _inexact(eqn.invars[0])
        and not _inexact(eqn.outvars[0])
    )


def _makes_float_bits(eqn) -> bool:
    """Whether the equation, or one inside its jaxprs, reads a float's bits."""
    if _reads_float_bits(eqn):
        return True
    for value in eqn.params.values():
        for body in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(body, jex_core.ClosedJaxpr):
                body = body.jaxpr
            if isinstance(body, jex_core.Jaxpr) and any(map(_makes_float_bits, body.eqns)):
                return True
    return False


def _mark_bits(bits: set | None, eqn, outs: list[Node], carries: bool) -> None:
    """When the equation reads or makes a float's bits, so do its integer and
    boolean results."""
    if carries and bits is not None:
        bits.update(id(n) for v, n in zip(eqn.outvars, outs, strict=True) if not _inexact(v))


def _frexp_primal(eqn):
    """`jnp.frexp`'s primal (the custom_jvp `_frexp`) with a gradient: the
    mantissa's value is the one JAX reads from the bits (arithmetic on a
    subnormal would be flushed to zero on CPU), its gradient that of
    `x * 2**-e` (JAX's rule), from `(x - stop_gradient(x)) * 2**-e`, which is
    0 in value; `2**-e` in two steps, where one overflows (a subnormal's
    tangent is inf, as JAX's). The exponent has no gradient. Imported with its
    bits not followed (the mantissa's gradient is stopped on purpose).
    Returns a ClosedJaxpr of the same signature."""
    primal = jex_core.jaxpr_as_fun(eqn.params["call_jaxpr"])

    def frexp(x):
        mantissa, e = primal(x)
        k = -e.astype(jnp.int32)
        half = k // 2
        two = jnp.asarray(2.0, x.dtype)
        scaled = (x - jax.lax.stop_gradient(x)) * jax.lax.pow(two, half.astype(x.dtype))
        scaled = scaled * jax.lax.pow(two, (k - half).astype(x.dtype))
        special = jnp.isinf(x) | jnp.isnan(x) | (x == 0)  # frexp returns x itself
        return jnp.where(special, x, jax.lax.stop_gradient(mantissa) + scaled), e

    (aval,) = [v.aval for v in eqn.invars]
    return jax.make_jaxpr(frexp)(jax.ShapeDtypeStruct(aval.shape, aval.dtype))


# (the function's source file in JAX, its name) -> a primal of ours
ARITHMETIC_PRIMALS = {("jax/_src/numpy/ufuncs.py", "_frexp"): _frexp_primal}


def _jax_rule_primitives(eqn, body) -> tuple | None:
    """The primitives of ours whose rules are the custom_jvp rule of JAX's
    function `body` traces (`ops.special.CUSTOM_JVP`: `xlogy`, `logaddexp`,
    `relu`, ...), one per result (`sici`'s two: each its own node, so an
    unread one gets no cotangent), for real floating results; None (its body
    is read) for one in `JAX_BODIES`; a `JaxOwnRule` per result for any other
    (it runs, but is not differentiated)."""
    key = _custom_jvp_of(body)
    builder = CUSTOM_JVP.get(key)
    if builder is None:
        if key in JAX_BODIES or not any(_inexact(v) for v in eqn.outvars):
            return None
        name = body.jaxpr.debug_info.func_name
        return tuple(JaxOwnRule(body, k, name) for k in range(len(eqn.outvars)))
    if not all(jnp.issubdtype(v.aval.dtype, jnp.floating) for v in eqn.outvars):
        return None
    ruled = builder(eqn)
    ruled = (ruled,) if ruled is not None and not isinstance(ruled, tuple) else ruled
    return ruled if ruled is not None and len(ruled) == len(eqn.outvars) else None


def _custom_jvp_of(body) -> tuple:
    """(JAX source file, name) of the function a custom_jvp_call's body traces."""
    info = body.jaxpr.debug_info
    where = (info.func_src_info or "").replace("\\", "/")
    return (where[where.find("jax/_src/") :].rsplit(":", 1)[0], info.func_name)


# -- control flow: onto our own control primitives (k_transform.control.prims) --------
def _closed_graph(
    name: str, closed, n_params: int, inputs_of, bits: set, seeded: bool
) -> tuple[FuncGraph, list, list]:
    """A closed FuncGraph of `n_params` parameters running `closed` (a
    ClosedJaxpr) on `inputs_of(graph, params)`; returns (graph, params, outs).
    `seeded`: the control equation reads a float's bits, so may each of the
    graph's integer inputs."""
    graph = FuncGraph(name, debug=DebugInfo(file="<jaxpr>", name=name))
    params = [graph.add_parameter(f"a{k}") for k in range(n_params)]
    graph.param_names = [p.name for p in params]
    consts = [Constant(c, hint="c") for c in closed.consts]
    inputs = inputs_of(graph, params)
    if seeded:
        bits.update(
            id(n) for v, n in zip(closed.jaxpr.invars, inputs, strict=True) if not _inexact(v)
        )
    outs = _inline(graph, closed.jaxpr, consts, inputs, bits)
    return graph, params, outs


def _tuple(graph: FuncGraph, items) -> Node:
    return graph.apply(Constant(prims.MakeTuple()), *items)


def _while(graph: FuncGraph, eqn, args: list[Node], bits: set, seeded: bool) -> Node:
    """`while[cond_jaxpr, body_jaxpr](*cond_consts, *body_consts, *carry)`."""
    nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    cond_jaxpr, body_jaxpr = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
    if cond_jaxpr.jaxpr.outvars[0].aval.shape != ():
        cond_jaxpr, body_jaxpr = _unbatched_while(eqn)
        args = args[: nc + nb] + args  # both now read (*cond_consts, *body_consts)
        nc = nb = nc + nb
    consts, carry = args[: nc + nb], args[nc + nb :]
    n, marks = len(carry), (bits, seeded)
    cond, _, outs = _closed_graph(
        "while_cond", cond_jaxpr, n + nc + nb, lambda g, ps: ps[n : n + nc] + ps[:n], *marks
    )
    cond.output = outs[0]
    body, _, outs = _closed_graph(
        "while_body", body_jaxpr, n + nc + nb, lambda g, ps: ps[n + nc :] + ps[:n], *marks
    )
    body.output = _tuple(body, outs)
    # its bound (`kt.set_loop_bound`) is shared by the whiles of the library call
    loop = Constant(control.WhileLoop(n, graph.debug.file), hint="while_loop")
    return graph.apply(loop, Constant(cond), Constant(body), *carry, *consts)


def _unbatched_while(eqn) -> tuple:
    """A `while` with a batched condition (a vmapped `while_loop`: one condition
    per element) as a `while` with a scalar one, as XLA runs it: loop while any
    element's condition holds, and let the body change only those elements.
    Returns the (cond, body) closed jaxprs, both over (*cond_consts,
    *body_consts, *carry); traced, not differentiated."""
    nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    cond_fn = jex_core.jaxpr_as_fun(eqn.params["cond_jaxpr"])
    body_fn = jex_core.jaxpr_as_fun(eqn.params["body_jaxpr"])

    def holds(args):
        return cond_fn(*args[:nc], *args[nc + nb :])[0]

    def body(*args):
        pred, carry = holds(args), args[nc + nb :]
        # finished elements still run the body; their inputs are cut from the
        # gradient, so their (unused) partials cannot turn zeros into NaNs
        consts = [_cut_finished(pred, c) for c in args[nc : nc + nb]]
        new = body_fn(*consts, *[_cut_finished(pred, x) for x in carry])
        return [jnp.where(_per_element(pred, x), y, x) for x, y in zip(carry, new, strict=True)]

    structs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    return jax.make_jaxpr(lambda *a: jnp.any(holds(a)))(*structs), jax.make_jaxpr(body)(*structs)


def _cut_finished(pred, x):
    """`x` where the condition holds, its value without gradient elsewhere (a
    const not batched like the condition is kept as it is)."""
    if jnp.shape(x)[: jnp.ndim(pred)] != jnp.shape(pred):
        return x
    return jnp.where(_per_element(pred, x), x, jax.lax.stop_gradient(x))


def _per_element(pred, x):
    """`pred` (one flag per batch element) broadcast against a carry `x` whose
    leading axes are the batch's."""
    if jnp.shape(x)[: jnp.ndim(pred)] != jnp.shape(pred):
        raise KTransformError(
            "cannot import the lax primitive `while` with a batched condition: a loop "
            f"carry of shape {jnp.shape(x)} is not batched like the condition "
            f"{jnp.shape(pred)}"
        )
    return jnp.reshape(pred, jnp.shape(pred) + (1,) * (jnp.ndim(x) - jnp.ndim(pred)))


def _cond(graph: FuncGraph, eqn, args: list[Node], bits: set, seeded: bool) -> Node:
    """`cond[branches](index, *operands)`: a chain of our switches on `index > k`."""
    index, ops = args[0], args[1:]
    n_params = 1 + len(ops)
    branches = []
    for k, closed in enumerate(eqn.params["branches"]):
        g, _, outs = _closed_graph(
            f"branch{k}", closed, n_params, lambda g, ps: ps[1:], bits, seeded
        )
        g.output = _tuple(g, outs)
        branches.append(g)
    chosen = branches[-1]
    for k in range(len(branches) - 2, 0, -1):  # index > k ? (the rest) : branch k
        g = FuncGraph(f"branches_from{k}", debug=DebugInfo(file="<jaxpr>", name="cond"))
        params = [g.add_parameter(f"a{j}") for j in range(n_params)]
        g.param_names = [p.name for p in params]
        test = g.apply(Constant(Greater()), params[0], Constant(k))
        g.output = g.apply(
            Constant(control.Switch()), test, Constant(chosen), Constant(branches[k]), *params
        )
        chosen = g
    test = graph.apply(Constant(Greater()), index, Constant(0))
    switch = Constant(control.Switch(), hint="switch")
    return graph.apply(switch, test, Constant(chosen), Constant(branches[0]), index, *ops)


def _scan(graph: FuncGraph, eqn, args: list[Node], bits: set, seeded: bool) -> Node:
    """`scan[jaxpr, length, reverse](*consts, *init, *xs)`: a `for` over the rows,
    writing row `i` of each stacked output (`ys`) into a buffer it carries."""
    p = eqn.params
    (n_consts, n_carry), length = _scan_counts(p), p["length"]
    body_jaxpr = p["jaxpr"]
    y_avals = [v.aval for v in body_jaxpr.jaxpr.outvars[n_carry:]]
    buffers = [Constant(np.zeros((length, *a.shape), a.dtype), hint="ys") for a in y_avals]
    n = n_carry + len(buffers)
    consts, init, xs = (
        args[:n_consts],
        args[n_consts : n_consts + n_carry],
        args[n_consts + n_carry :],
    )
    get = Constant(prims.GetItem())
    # rows read at a traced index: a numpy constant (polynomial coefficients)
    # becomes a jax array
    xs = [_as_jax(x) for x in xs]

    if _author_unrolled(p["unroll"], length):
        return _unrolled_scan(graph, p, consts, init, xs, buffers, bits)

    def inputs(g, ps):
        i, carry, rest = ps[0], ps[1 : 1 + n_carry], ps[1 + n :]
        rows = [g.apply(get, x, i) for x in rest[n_consts:]]
        return [*rest[:n_consts], *carry, *rows]

    body, params, outs = _closed_graph(
        "scan_body", body_jaxpr, 1 + n + len(consts) + len(xs), inputs, bits, seeded
    )
    i, held = params[0], params[1 + n_carry : 1 + n]
    put = Constant(prims.SetItem())
    written = [body.apply(put, b, i, y) for b, y in zip(held, outs[n_carry:], strict=True)]
    body.output = _tuple(body, [*outs[:n_carry], *written])
    bounds = (length - 1, -1, -1) if p["reverse"] else (0, length, 1)
    loop = Constant(control.ForRange(n), hint="for_range")
    bound_nodes = [Constant(b) for b in bounds]
    return graph.apply(loop, *bound_nodes, Constant(body), *init, *buffers, *consts, *xs)


def _author_unrolled(unroll, length: int) -> bool:
    """Whether a scan's author asked for (about) all of it unrolled: `unroll`
    True, or at most two trips of `unroll` iterations (`jnp.polyval`: 17
    rows, `unroll=16`), which XLA unrolls whole; as a loop of ours it ran
    4.9x JAX's time on a GPU (a kernel launch per op per row)."""
    return unroll is True or unroll > 1 and -(-length // unroll) <= 2


def _scan_counts(p) -> tuple[int, int]:
    """How many of a scan's operands are consts and how many carries. JAX 0.11
    gives their trees (`ft_in`: consts, carries, xs) where earlier versions
    gave counts."""
    if "num_consts" in p:
        return p["num_consts"], p["num_carry"]
    consts, carry, _ = p["ft_in"].unpack()
    return len(consts.vals), len(carry.vals)


def _unrolled_scan(graph: FuncGraph, p, consts, carry, xs, buffers, bits: set) -> Node:
    """A scan its author unrolled (`unroll >= length`): its body, once per row."""
    body, (_, n_carry) = p["jaxpr"], _scan_counts(p)
    body_consts = [Constant(c, hint="c") for c in body.consts]
    get, put = Constant(prims.GetItem()), Constant(prims.SetItem())
    rows = range(p["length"] - 1, -1, -1) if p["reverse"] else range(p["length"])
    for k in rows:
        items = [graph.apply(get, x, Constant(k)) for x in xs]
        outs = _inline(graph, body.jaxpr, body_consts, [*consts, *carry, *items], bits)
        carry = outs[:n_carry]
        buffers = [
            graph.apply(put, b, Constant(k), y)
            for b, y in zip(buffers, outs[n_carry:], strict=True)
        ]
    return _tuple(graph, [*carry, *buffers])


def _as_jax(node: Node) -> Node:
    if isinstance(node, Constant) and isinstance(node.value, np.ndarray):
        with jax.ensure_compile_time_eval():  # a concrete array, even mid-trace (cached)
            return Constant(jnp.asarray(node.value), hint="c")
    return node


CONTROL = {"while": _while, "cond": _cond, "scan": _scan}


class _Static:
    """A function, a Python scalar, a dtype or a pytree structure a library
    call returns (`ravel_pytree`'s `unflatten`, `cho_factor`'s `lower` flag,
    `tree_flatten`'s treedef): a value of the call's graph,
    the same at each call with these argument shapes (a Python value cannot
    depend on a traced one); a call of a function is a call of a library
    function, a flag stays a Python value that JAX takes as static. A
    function holding a traced array (a closure over the call's values) is
    refused: it would carry a value of this trace out of it."""

    def __init__(self, value):
        self.value = value

    @staticmethod
    def of(leaf, hint: str):
        """`leaf` as a _Static if it is a function or a Python scalar, else
        None (an array)."""
        if isinstance(leaf, (bool, int, float, complex, str, jax.tree_util.PyTreeDef, np.dtype)):
            return _Static(leaf)  # (a treedef: `tree_flatten`'s structure, no value)
        if isinstance(leaf, collections.abc.Iterator) and not hasattr(leaf, "shape"):
            raise KTransformError(
                f"cannot differentiate the call {hint}(...): it returns an iterator "
                f"({type(leaf).__name__}) whose items are taken after it returns, outside "
                "the trace of its arrays that k_transform differentiates; return a list or "
                "tuple of them (`list(map(...))`, `list(it)`)"
            )
        if not callable(leaf) or hasattr(leaf, "shape"):
            return None
        if _holds_a_tracer(leaf):
            raise KTransformError(
                f"cannot differentiate the call {hint}(...): it returns a function "
                f"({type(leaf).__name__}) holding the call's traced values; return the "
                "values, or call the function inside"
            )
        return _Static(leaf)


def _holds_a_tracer(value, depth: int = 8) -> bool:
    """Whether `value` refers to a JAX tracer within `depth` references
    (a closure's cells, a partial's arguments, their tuples and dicts: the
    function JAX's `grad(f)` returns holds `f` three functions down). A
    function's globals and code are not followed."""
    seen, level = set(), [value]
    for _ in range(depth):
        nxt = []
        for obj in level:
            if id(obj) in seen or isinstance(obj, _HOLD_NO_TRACER):
                continue
            seen.add(id(obj))
            if isinstance(obj, jax.core.Tracer):
                return True
            nxt += _referents(obj)
        level = nxt
    return any(isinstance(obj, jax.core.Tracer) for obj in level)


_HOLD_NO_TRACER = (str, bytes, type, types.ModuleType, types.CodeType)


def _referents(obj) -> list:
    """What `obj` refers to; of a function, its cells, defaults and attributes."""
    if isinstance(obj, types.FunctionType):
        cells = [v for cell in obj.__closure__ or () for v in gc.get_referents(cell)]
        return [*cells, obj.__defaults__, obj.__kwdefaults__, obj.__dict__]
    return gc.get_referents(obj)


def _key_order(value):
    """The order of the keys of the dicts in `value`, a call's result, as
    nested tuples (`_in_order` puts them back: Python iterates a dict in the
    order its keys were inserted, JAX's unflatten sorts them)."""
    if isinstance(value, dict):
        return ("dict", tuple((k, _key_order(v)) for k, v in value.items()))
    if type(value) in (tuple, list):
        return ("seq", tuple(_key_order(v) for v in value))
    return None


def _in_order(shape, order):
    """`shape` (the result's structure from JAX's treedef) with the keys of
    each dict in a tuple, list or dict in the order `_key_order` recorded."""
    if order is None:
        return shape
    kind, items = order
    if kind == "seq" and type(shape) in (tuple, list) and len(shape) == len(items):
        return type(shape)(_in_order(s, o) for s, o in zip(shape, items, strict=True))
    if kind == "dict" and isinstance(shape, dict) and set(shape) == {k for k, _ in items}:
        ordered = {k: _in_order(shape[k], o) for k, o in items}
        if type(shape) is dict:
            return ordered
        out = copy.copy(shape)  # a defaultdict keeps its factory
        out.clear()
        out.update(ordered)
        return out
    return shape


def _rebuild(graph: FuncGraph, shape, outs, hint: str) -> Node:
    if isinstance(shape, jax.ShapeDtypeStruct):
        return next(outs)
    if isinstance(shape, _Static):
        return Constant(shape.value, hint=getattr(shape.value, "__name__", "fn"))
    if shape is None:
        return Constant(None)
    if isinstance(shape, (tuple, list)) and not hasattr(shape, "_fields"):
        items = [_rebuild(graph, s, outs, hint) for s in shape]
        prim = prims.MakeTuple() if isinstance(shape, tuple) else prims.MakeList()
        return graph.apply(Constant(prim), *items)
    if isinstance(shape, dict):
        # the leaves come in JAX's order (a dict's keys sorted, an OrderedDict's
        # as they are); the dict is built in the order the call made it
        flat_order = list(shape) if isinstance(shape, collections.OrderedDict) else sorted(shape)
        items = {k: _rebuild(graph, shape[k], outs, hint) for k in flat_order}
        kv = [node for k in shape for node in (Constant(k), items[k])]
        return graph.apply(Constant(prims.MakeDict()), *kv)
    node = pytree_node(shape)  # a registered class, a NamedTuple, a dataclass
    if node is not None:
        children, treedef = node
        items = [_rebuild(graph, child, outs, hint) for child in children]
        return graph.apply(Constant(prims.Unflatten(treedef)), *items)
    raise KTransformError(
        f"cannot import the call {hint}(...): it returns a {type(shape).__name__}, "
        "not arrays in tuples, lists or dicts"
    )
