"""Parameters and state at run time: `read_param`, `assign`, `param_scope`."""

from __future__ import annotations

import contextlib
import types

import jax
import jax.numpy as jnp

from k_transform.errors import KTransformError
from k_transform.protocol import kt_attribute
from k_transform.runtime.values import describe, env_get, pytree_node, zeros_like_value

# -- parameters and state --------------------------------------------------
# A gradient function binds each Parameter to the (possibly traced) value it
# was called with; generated code reads parameters through `read_param` and
# writes them with `assign` (`ops.Assign`). Writes update the binding, so
# later reads in program order see them, and are collected in `updates`,
# which the caller writes back to the Parameters after the (jitted) call.
_param_scopes: list[param_scope] = []


class param_scope:
    def __init__(self, params=(), values=(), parent: param_scope | None = None, assigns=True):
        self.params = {id(p): p for p in params}
        self.bindings = {id(p): v for p, v in zip(params, values, strict=True)}
        self.assigns = assigns  # False: the program has no Assign (nothing to thread)
        if parent is not None:
            self.params, self.bindings = dict(parent.params), dict(parent.bindings)
            self.assigns = parent.assigns
        self.updates: dict[int, object] = {}

    def __enter__(self):
        _param_scopes.append(self)
        return self

    def __exit__(self, *exc):
        _param_scopes.pop()
        return False

    def new_values(self) -> dict[int, object]:
        return dict(self.updates)


def read_param(param):
    if _refusing_reads:
        raise KTransformError(
            f"{_refusing_reads[-1]} runs as Python under JAX's tracer (k_transform cannot parse "
            f"it) and reads the Parameter {param.name!r}, which would get no gradient there: "
            "pass the Parameter in as an argument, or write it so that k_transform parses it"
        )
    for scope in reversed(_param_scopes):
        if id(param) in scope.bindings:
            return scope.bindings[id(param)]
    return param.stored


_refusing_reads: list[str] = []


def refuse_lost_bprop(cell) -> None:
    """A Cell whose class defines `bprop`, called inside a user function run
    as Python under JAX's tracer (`no_parameter_reads`): only the steps of its
    `construct` would be seen there, its bprop lost (a gradient other than the
    one it defines, silently): refused."""
    if _refusing_reads and isinstance(getattr(type(cell), "bprop", None), types.FunctionType):
        raise KTransformError(
            f"{_refusing_reads[-1]} runs as Python under JAX's tracer (k_transform cannot "
            f"parse it) and calls {type(cell).__name__}, a Cell with its own bprop, which "
            "would be lost there (its steps differentiated instead): call the Cell from code "
            "k_transform parses, or pass the Cell in as an argument"
        )


# -- gradients of objects that hold Parameters ------------------------------
# A Cell (or any object, or a list, tuple or dict of them) handed to a
# function as an argument is a value there: `net.w` reads its Parameter at
# run time. The gradient of such an object is an env holding its
# Parameters' gradients under their keys (`key(p)`, `ops.structural.ParamKey`),
# as the gradient of a closure is an env; the caller, where the object is a
# constant, adds it to its own env, where the gradient function finds it.
def param_env(value, grad, key):
    """`grad`, the gradient of `value` (a Parameter, an object's env, or a
    list, tuple or dict of them), as an env of Parameter gradients (empty
    when it holds none)."""
    if grad is None or value is None:
        return {}
    if kt_attribute(value, "__kt_parameter__", False):
        return {} if isinstance(grad, dict) else {key(value): grad}
    parts = []
    if isinstance(value, dict) and isinstance(grad, dict) and _is_plain(value):
        parts = [param_env(value[k], grad[k], key) for k in value if k in grad]
    elif isinstance(value, (list, tuple)) and isinstance(grad, (list, tuple)):
        if len(value) == len(grad):
            parts = [param_env(v, g, key) for v, g in zip(value, grad, strict=True)]
    elif isinstance(grad, dict):  # an object's gradient: already an env
        return {k: g for k, g in grad.items() if isinstance(k, key)}
    env: dict = {}
    for part in parts:
        for k, g in part.items():
            env[k] = env[k] + g if k in env else g
    return env


def param_env_t(value, denv, like, key):
    """The transpose of `param_env(value, ., key)`: the part of the env
    `denv` that belongs to `value`'s Parameters, structured like `like`
    (a gradient of `value`)."""
    if like is None or value is None:
        return like
    if kt_attribute(value, "__kt_parameter__", False):
        return like if isinstance(like, dict) else env_get(denv, key(value), like)
    if isinstance(value, dict) and isinstance(like, dict) and _is_plain(value):
        return {k: param_env_t(value.get(k), denv, g, key) for k, g in like.items()}
    if isinstance(value, (list, tuple)) and isinstance(like, (list, tuple)):
        if len(value) == len(like):
            items = [param_env_t(v, denv, g, key) for v, g in zip(value, like, strict=True)]
            return type(like)(items)
    if isinstance(like, dict):
        denv = denv if isinstance(denv, dict) else {}
        return {k: g for k, g in denv.items() if isinstance(k, key)}
    return zeros_like_value(like)


def _is_plain(value) -> bool:
    return isinstance(value, dict) and pytree_node(value) is None


def _is_object(x) -> bool:
    """An object with attributes rather than pytree fields (a Cell)."""
    if x is None or isinstance(x, (tuple, list, dict)) or hasattr(x, "shape"):
        return False
    return pytree_node(x) is None


def attr_env(x, value, grad, key):
    """The part of the gradient of the object `x` that its attribute `value`
    (with gradient `grad`) gives when it holds Parameters (`x.w`, `x.layer`):
    their env; None for a pytree node (its field takes `grad`, GetAttr's rule)."""
    return param_env(value, grad, key) if _is_object(x) else None


def attr_env_t(x, value, denv, like, key):
    """The transpose of `attr_env(x, value, ., key)` (its gradient w.r.t. `grad`)."""
    return param_env_t(value, denv, like, key) if _is_object(x) else zeros_like_value(like)


@contextlib.contextmanager
def no_parameter_reads(hint: str):
    """Within it (the trace of a user function run as Python,
    `frontend.python_code`), reading a Parameter raises: its value would be a
    constant of the trace, with no gradient."""
    _refusing_reads.append(hint)
    try:
        yield
    finally:
        _refusing_reads.pop()


class AttrSlot:
    """An attribute a transformed method assigns (`self.h = v` in `construct`),
    written back like an assigned Parameter: the method ends with an `Assign`
    of the attribute's final value to this slot (`frontend/cell_state.py`),
    and after the call `set_data` sets the attribute, as MindSpore's graph
    mode does. Its `stored` is None: the method never reads it."""

    __kt_parameter__ = True
    requires_grad = False
    keeps_type = True  # any value: no cast to the old value's dtype

    def __init__(self, owner, attr: str):
        self.owner, self.attr = owner, attr
        self.name = f"self.{attr}"
        self.stored = None

    def set_data(self, value) -> None:
        setattr(self.owner, self.attr, value)


def assign(param, value, where: str = ""):
    """`param = value`, in program order: bound in the current scope, or set.
    The value takes the Parameter's dtype; a value of another shape is an
    error (MindSpore's `Assign`), raised at `where` ("file:line")."""
    if not kt_attribute(param, "__kt_parameter__", False):
        raise KTransformError(
            f"ops.assign: the first argument must be a Parameter known where the program "
            "is parsed (`self.w`, `self.params[0]`, `p` of `for p in self.params`), here it "
            f"is a {type(param).__name__}: a Parameter picked by an index known only when the "
            "program runs (`self.params[k]`, `k` an argument) or passed through `zip` "
            "reaches the program as its value; index with a constant or loop over the Parameters "
            f"(`for p in self.params`){describe(where)}"
        )
    scope = _param_scopes[-1] if _param_scopes else None
    old = param.stored if scope is None else scope.bindings.get(id(param), param.stored)
    if not getattr(param, "keeps_type", False):
        _check_shape(param, old, value, where)
        value = jnp.asarray(value, jnp.result_type(old))
    if scope is None:
        param.set_data(value)
        return value
    scope.params[id(param)] = param
    scope.bindings[id(param)] = value
    scope.updates[id(param)] = value
    return value


def _check_shape(param, old, value, where: str) -> None:
    if jnp.shape(value) != jnp.shape(old):
        raise KTransformError(
            f"ops.Assign of a value of shape {tuple(jnp.shape(value))} to the Parameter "
            f"{param.name!r} of shape {tuple(jnp.shape(old))}: an assignment cannot change a "
            f"Parameter's shape (reshape the value, or make a new Parameter){describe(where)}"
        )


def forked():
    """A scope for probing code on abstract values: what it assigns stays in
    the fork (a no-op context outside any scope)."""
    return param_scope(parent=_param_scopes[-1]) if _param_scopes else contextlib.nullcontext()


def assigned_in(fn, *args) -> list[int]:
    """Parameters `fn(*args)` assigns (probed with eval_shape: nothing runs)."""
    if not _param_scopes or not _param_scopes[-1].assigns:
        return []
    found: list[int] = []

    def probe(*a):
        with param_scope(parent=_param_scopes[-1]) as fork:
            fn(*a)
            found.extend(k for k in fork.updates if k not in found)

    jax.eval_shape(probe, *args)
    return found


def stateful_branch(fn, ids):
    """`fn` returning `(out, new values of the parameters ids)` as well."""

    def run(*args):
        with param_scope(parent=_param_scopes[-1]) as fork:
            out = fn(*args)
            return out, tuple(fork.bindings.get(k, fork.params[k].stored) for k in ids)

    return run


def write_back(ids, values):
    scope = _param_scopes[-1]
    for k, v in zip(ids, values, strict=True):
        scope.bindings[k] = v
        scope.updates[k] = v
