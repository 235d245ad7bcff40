"""Callables that are not plain Python functions: what k_transform reads for them.

A gradient target, or a function called in differentiated code, may be a
wrapper around the Python function that holds the program. `parser.parse`
and `GraphBuilder.call` (`frontend/calls.py`) read them by these rules:

- A wrapper written in Python (a `functools.wraps` decorator's inner
  function, an object with a user `__call__` and a `__wrapped__`) is user
  code and is parsed as written: whatever it does around the call of what
  it wraps (scaling the result, changing arguments) is differentiated too.
  One that only forwards (its body is `return g(*args, **kwargs)` of its own
  `*args`/`**kwargs`, `g` being what it wraps) means exactly a call of what
  it wraps and is read as that (`forwards_only`), so the target keeps its
  named parameters.
- A library wrapper object, which is not user code (what `jax.jit(f)` and
  `partial(jax.jit, static_argnums=...)(f)` return), is read through its
  `__wrapped__` chain down to the first user callable (`unwrap`) where it is
  the function differentiated. These wrappers call what they wrap with the
  arguments given and return its result, so reading `f` means what calling
  them means, except for *when* `f`'s Python runs: a cache
  (`functools.lru_cache`, `functools.cache`: `caches_results`) runs it only
  for new arguments, and JAX traces `f` once per input signature under
  `jax.jit` and `jax.checkpoint` (`traces_once`). So a cache is never read
  through (it is called as it is, as host code), nor, where it is called
  (`call=True`), a wrapper JAX traces once: that call is a library call,
  its jaxpr imported (`GraphBuilder.wrapped_callee` parses `f` instead when
  it reads a Parameter, which JAX's trace would make a constant). A bound
  method of a wrapper is the method of what it wraps, bound to its object.
  A library *Python function* with a `__wrapped__` is not unwrapped: what
  `jax.vmap(f)` or JAX's gradient of `f` return computes something other than `f`,
  and is called as a library function; except the wrappers known to return
  `f`'s values (`SAME_VALUES`: `jax.checkpoint`, `jax.named_call`).
  Static arguments are plain Python values to k_transform, and Python ints
  stay static when the gradient function runs (and when the user jits it
  with the same `static_argnums`). A library function is never unwrapped
  into library code (`jnp.*` functions are `jax.jit`-wrapped too): only a
  user callable found on the chain is read.
- An object with a user-written `__call__` (or Cell-like `construct`) is
  parsed through that method, bound to the object (`user_call_method`).
- A `functools.partial(f, *args, **kw)` is a call of `f` with the bound
  arguments first, as Python runs it: at a call site the bound values are
  passed as constants (`GraphBuilder.partial_call`); as a gradient target it
  is the Python function `partial_function` writes, whose signature is
  `inspect.signature` of the partial (bound keywords become keyword defaults
  a call may override) and whose body calls `f`.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import textwrap
import types

import gast

from k_transform.context import TRANSFORM
from k_transform.errors import KTransformError
from k_transform.frontend import guards
from k_transform.frontend.source import is_user_function
from k_transform.protocol import kt_attribute

_serial = itertools.count(1)


def user_call_method(value):
    """`construct` of a Cell-like object, or a user-written `__call__`. A
    `__call__` the user wrote on a Cell comes first: it is what Python calls
    (k_transform's own Cells' `__call__` run `construct`, or check inputs)."""
    if isinstance(value, (type, types.FunctionType, functools.partial)):
        return None
    cls = type(value)
    if kt_attribute(cls, "__kt_own_call__", False):  # a gradient object: never parsed
        return None
    call = getattr(cls, "__call__", None)  # noqa: B004 -- the method itself, not callable()
    if is_user_function(call) and not (call.__module__ or "").startswith("k_transform."):
        return call
    for attr in ("construct", "__call__"):
        method = getattr(cls, attr, None)
        if kt_attribute(method, "__kt_jit__", False):  # `@kt.jit def construct`: what it compiles
            method = method.__wrapped__
        if is_user_function(method):
            return method
    return None


def is_readable(value) -> bool:
    """User code k_transform parses itself: a function, a bound method of
    one, a partial, or an object with a user-written `__call__`."""
    if isinstance(value, types.MethodType):
        return is_user_function(value.__func__)
    return (
        is_user_function(value)
        or isinstance(value, functools.partial)
        or user_call_method(value) is not None
    )


def custom_rule_kind(value) -> str | None:
    """ "custom_vjp" or "custom_jvp" for a function JAX's decorators made (read
    from its type: k_transform refers to no JAX autodiff API), else None."""
    kind = type(value).__name__
    if kind in ("custom_vjp", "custom_jvp") and type(value).__module__.startswith("jax."):
        return kind
    return None


def unwrap(value, call: bool = False):
    """`value` when it is user code (or nothing under it is); for a library
    wrapper, the first user callable down its `__wrapped__` chain. A bound
    method of a wrapper is the method of what it wraps, bound to the same
    object. Never through a cache (`caches_results`); for a `call` site,
    not through a wrapper that traces what it wraps once (`traces_once`)."""
    if isinstance(value, types.MethodType) and not is_user_function(value.__func__):
        inner = unwrap(value.__func__, call)  # (`__wrapped__` of the method drops `self`)
        return value if inner is value.__func__ else types.MethodType(inner, value.__self__)
    current, seen = value, {id(value)}
    while not is_readable(current) or forwards_only(current):
        if custom_rule_kind(current) is not None:
            return current  # its `__wrapped__` is its primal, without its rule
        if caches_results(current) or (call and traces_once(current)):
            return value  # called as it is: what it wraps runs when it runs it
        if (
            isinstance(current, types.FunctionType)
            and not is_user_function(current)
            and not same_values(current)
        ):
            return value  # a library function (`jax.vmap(f)`, a JAX gradient) transforms f
        try:
            current = current.__wrapped__
        except Exception:  # noqa: BLE001 - any object may be asked; none is an answer
            return value
        if id(current) in seen:
            return value
        seen.add(id(current))
    return current


# Library wrappers that return what they wrap returns (they change memory use
# or names only): `jax.checkpoint`/`jax.remat` (`fun_remat`), `jax.named_call`.
REMAT = ("jax._src.ad_checkpoint", "fun_remat")
SAME_VALUES = {REMAT, ("jax._src.source_info_util", "wrapper")}


def same_values(fn: types.FunctionType, table=SAME_VALUES) -> bool:
    """Whether the library function `fn` (or the one it closes over, under
    JAX's traceback wrapper) is one of `table` (`SAME_VALUES`)."""
    cells = [c.cell_contents for c in fn.__closure__ or () if _has_contents(c)]
    inner = [f for f in cells if isinstance(f, types.FunctionType)]
    return any((f.__globals__.get("__name__"), f.__code__.co_name) in table for f in [fn, *inner])


_LRU_CACHE = type(functools.lru_cache(maxsize=None)(len))


def caches_results(value) -> bool:
    """A memoizing wrapper (`functools.lru_cache`, `functools.cache`): a call
    runs what it wraps only for arguments not seen before, so it is called as
    it is, as Python calls it (run as host code, through its cache; given
    arrays, which are unhashable, it raises as under JAX)."""
    return isinstance(value, _LRU_CACHE)


def traces_once(value) -> bool:
    """`jax.jit(f)` (also `partial(jax.jit, static_argnums=...)(f)`) or
    `jax.checkpoint(f)`: JAX traces `f` once per input signature and reuses
    the trace, so `f`'s Python (a print, a host draw) runs at its first trace
    only. A call of one is a library call (its jaxpr imported, JAX's cache
    deciding when `f` runs; `frontend/jaxpr.py`), not `f` parsed; as the
    function differentiated, `f` is read (it runs when it is traced there)."""
    kind = type(value)
    if kind.__name__ == "PjitFunction" and kind.__module__.startswith("jaxlib"):
        return True
    return (
        isinstance(value, types.FunctionType)
        and not is_user_function(value)
        and same_values(value, {REMAT})
    )


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def forwards_only(value) -> bool:
    """Whether the Python wrapper `value` does nothing but call its
    `__wrapped__` with its own `*args, **kwargs` and return the result."""
    wrapped = getattr(value, "__wrapped__", None)
    fn = value if isinstance(value, types.FunctionType) else user_call_method(value)
    if wrapped is None or fn is None:
        return False
    try:
        tree = gast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return False
    body = [
        s
        for s in tree.body
        if not (isinstance(s, gast.Expr) and isinstance(s.value, gast.Constant))
    ]
    if not (
        len(body) == 1 and isinstance(body[0], gast.Return) and _forwarding(body[0].value, tree)
    ):
        return False
    callee = body[0].value.func
    if isinstance(callee, gast.Attribute):  # self.__wrapped__(*args, **kwargs)
        return callee.attr == "__wrapped__" and isinstance(callee.value, gast.Name)
    names = inspect.getclosurevars(fn)
    found = {**names.globals, **names.nonlocals}.get(callee.id, None)
    return found is wrapped


def _docstring(statement) -> bool:
    return isinstance(statement, gast.Expr) and isinstance(statement.value, gast.Constant)


def _forwarding(call, fdef) -> bool:
    """`call` is `name(*args, **kwargs)` with `fdef`'s own `*args` and `**kwargs`."""
    a = fdef.args
    return (
        isinstance(call, gast.Call)
        and isinstance(call.func, (gast.Name, gast.Attribute))
        and a.vararg is not None
        and a.kwarg is not None
        and len(call.args) == 1
        and isinstance(call.args[0], gast.Starred)
        and isinstance(call.args[0].value, gast.Name)
        and call.args[0].value.id == a.vararg.id
        and len(call.keywords) == 1
        and call.keywords[0].arg is None
        and isinstance(call.keywords[0].value, gast.Name)
        and call.keywords[0].value.id == a.kwarg.id
    )


def wrapped_target(value, call: bool = False):
    """What a call of the wrapper `value` reads instead (`unwrap`), or None
    when `value` is not a wrapper of user code (or, at a `call` site, one
    called as it is: `traces_once`)."""
    inner = unwrap(value, call)
    return None if inner is value else inner


def partial_function(p: functools.partial) -> types.FunctionType:
    """A Python function that does what the partial `p` does, with
    `inspect.signature(p)` as its own; its source is registered in
    `linecache`, so the parser reads it like any other."""
    # Functions written for partial objects, by the partial's id; each entry
    # holds its partial, so the id is not reused while the entry lives, and
    # what it bound: a keyword changed in place (`p.keywords["t"] = 2.0`, a
    # bound list appended to) writes the function again. The function holds
    # its partial (`__kt_partial__`), so that its graph is guarded on it
    # (`guards.Recorder.read_function`).
    _partials = TRANSFORM.cache("callables.partials")
    entry = _partials.get(id(p))
    if entry is not None and entry[0] is p and guards.unchanged(p, entry[2]):
        return entry[1]
    fn = _write_partial(p)
    fn.__kt_partial__ = p
    _partials[id(p)] = (p, fn, guards.snapshot(p))
    return fn


def _write_partial(p: functools.partial) -> types.FunctionType:
    try:
        sig = inspect.signature(p)
    except (TypeError, ValueError) as exc:
        raise KTransformError(f"the signature of {p!r} is not available: {exc}") from None
    params = list(sig.parameters.values())
    taken = {q.name for q in params}
    callee = _name(getattr(p.func, "__name__", "fn"), taken)
    taken.add(callee)
    bound = _bound_names(p, taken)
    scope = {"__name__": __name__, callee: p.func, "_kt_defaults": {}}
    scope.update(zip(bound, p.args, strict=True))
    header, call = [], list(bound)
    star_done = False
    for k, q in enumerate(params):
        text = q.name
        if q.default is not q.empty:
            scope["_kt_defaults"][q.name] = q.default
            text += f"=_kt_defaults[{q.name!r}]"
        if q.kind is q.VAR_POSITIONAL:
            text, star_done = "*" + q.name, True
            call.append(text)
        elif q.kind is q.VAR_KEYWORD:
            text = "**" + q.name
            call.append(text)
        elif q.kind is q.KEYWORD_ONLY:
            if not star_done:
                header.append("*")
                star_done = True
            call.append(f"{q.name}={q.name}")
        else:
            call.append(q.name)
        header.append(text)
        last_posonly = q.kind is q.POSITIONAL_ONLY and (
            k + 1 == len(params) or params[k + 1].kind is not q.POSITIONAL_ONLY
        )
        if last_posonly:
            header.append("/")
    name = _name(f"{callee}_partial", taken)
    source = f"def {name}({', '.join(header)}):\n    return {callee}({', '.join(call)})\n"
    filename = f"<k_transform: functools.partial of {callee} #{next(_serial)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - our own text
    return scope[name]


def _bound_names(p: functools.partial, taken: set) -> list[str]:
    """Names for the positional values `p` binds: the parameters of `p.func`
    they fill where known (readable generated code), else `arg<k>`."""
    try:
        inner = [
            q.name
            for q in inspect.signature(p.func).parameters.values()
            if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        inner = []
    names = []
    for k in range(len(p.args)):
        name = _name(inner[k] if k < len(inner) else f"arg{k}", taken)
        taken.add(name)
        names.append(name)
    return names


def _name(want: str, taken: set) -> str:
    """`want` as an identifier not in `taken` (`want_1`, `want_2`, ...)."""
    base = want if want.isidentifier() else "fn"
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
