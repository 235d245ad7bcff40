"""Run-time values: `UNDEFINED`, gradient values and their arithmetic.

`UNDEFINED` stands for a variable not yet assigned on some path (first
assigned inside a loop or one branch). Eagerly it raises when used; under a
traced cond or loop its slot takes zeros shaped like the value the other path
gives, which Python semantics guarantee is never read.

Gradient values mirror primal values: arrays for arrays, tuples for tuples,
dicts ("envs", keyed by free-variable keys) for functions, None for values
with no gradient (None, strings, objects), and for a registered pytree node
(a NamedTuple, a registered dataclass or class) the same type with gradient
children, as JAX's gradient gives. `add_grad` adds them. A value with
gradient arithmetic of its own (the stacks of `k_transform.runtime.stack`)
subclasses `GradValue`; `add_grad`, `zeros_like_value` and `fit` defer to it.
"""

from __future__ import annotations

import dataclasses
import linecache
import operator
import types

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.errors import KTransformError


class _Undefined:
    """The value of a variable that has not been assigned yet."""

    def __repr__(self):
        return "UNDEFINED"

    def __bool__(self):
        raise KTransformError("a variable was used before it was assigned")

    def _fail(self, *args, **kwargs):
        raise KTransformError("a variable was used before it was assigned")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __getitem__ = __call__ = __neg__ = _fail
    __array__ = __jax_array__ = __lt__ = __gt__ = __le__ = __ge__ = _fail


UNDEFINED = _Undefined()


jax.tree_util.register_pytree_node(_Undefined, lambda u: ((), None), lambda aux, kids: UNDEFINED)


class GradValue:
    """A run-time value with gradient arithmetic of its own."""

    __kt_parts__ = True  # `runtime.residuals` takes it apart by its `__slots__`

    def add_grad(self, other):
        """`self + other` as gradients (`other` is not None)."""
        raise NotImplementedError

    def zeros_like(self):
        """The zero gradient of `self` (None: zeros of any extent)."""
        raise NotImplementedError

    def fit_value(self, value):
        """`value` (a gradient or None) padded to the structure of `self`."""
        raise NotImplementedError


# -- pytree nodes --------------------------------------------------------------
_LEAF_TYPES = (jax.Array, np.ndarray, np.generic, int, float, complex, str, bytes, slice)


def strongly_typed(data):
    """Python numbers (and lists of them) as MindSpore's `Tensor(data)` types
    them: a float is float32, an int int64 (int32 unless JAX has x64), a bool
    bool, none of them weakly typed as JAX's `jnp.asarray(2.0)`; other data
    as it is. Library code to the parser (`Tensor(...)` in a construct), its
    gradient through its jaxpr."""
    if not _python_numbers(data):
        return data
    array = np.asarray(data)
    return jnp.asarray(array.astype(np.float32) if array.dtype.kind == "f" else array)


strongly_typed.__kt_library__ = True


def _python_numbers(data) -> bool:
    if isinstance(data, (list, tuple)):
        return len(data) > 0 and all(_python_numbers(item) for item in data)
    return isinstance(data, (bool, int, float))


def pytree_node(x):
    """`(children, treedef)` of a registered pytree node other than a plain
    tuple, list, dict or None (NamedTuples, registered dataclasses and
    classes), one level down; None for anything else."""
    if type(x) in (tuple, list, dict) or x is None or isinstance(x, (_LEAF_TYPES, GradValue)):
        return None
    if x is UNDEFINED or is_tracer(x) or hasattr(type(x), "__next__"):  # (an iterator: a
        return None  # leaf, which JAX warns of for `zip` and `enumerate` objects)
    children, treedef = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)
    # (an empty node, `EmptyState()`, is one node with no leaves: a node, not a leaf)
    leaf = jax.tree_util.treedef_is_leaf(treedef) and treedef.num_leaves == 1
    return None if leaf else (children, treedef)


def dict_like(x, grads: dict):
    """`grads` (gradients by key) as a container of `x`'s dict type: an
    OrderedDict, a defaultdict or a registered dict subclass keeps its type
    (and its pytree metadata), as JAX's gradients do; a plain dict, or
    `grads` whose keys are not `x`'s, stays a plain dict."""
    if type(x) is dict or not isinstance(x, dict) or not isinstance(grads, dict):
        return grads
    node = pytree_node(x)
    if node is None:
        return grads
    flat = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)[0]
    keys = [getattr(path[0], "key", UNDEFINED) for path, _ in flat]
    if any(k is UNDEFINED for k in keys) or set(keys) != set(grads):
        return grads
    return jax.tree_util.tree_unflatten(node[1], [grads[k] for k in keys])


def rebuild(x, children):
    """A container of `x`'s type (tuple, list, NamedTuple, pytree node) over `children`."""
    node = pytree_node(x)
    if node is not None:
        return jax.tree_util.tree_unflatten(node[1], list(children))
    return type(x)(children)


def node_children(d, like) -> list:
    """The children of `d`, a gradient of the pytree node `like`: those of
    `d`, a node of `like`'s type, or, where `like` is a NamedTuple, the
    items of a plain tuple or list `d` (what a rule that takes a sequence
    may give it: its pytree children are its items, in order). Gradients
    mirror values, so a gradient of a node is the node's type however it was
    made, and `add_grad` of the two forms keeps the node's."""
    node = pytree_node(d)
    if node is not None:
        return node[0]
    if type(d) in (tuple, list) and isinstance(like, tuple) and hasattr(like, "_fields"):
        children = pytree_node(like)[0]  # (unless registered otherwise)
        if len(d) == len(like) == len(children) and all(map(operator.is_, children, like)):
            return list(d)
    raise KTransformError(
        f"internal: a gradient of a {type(like).__name__} came as a {type(d).__name__}"
    )


def _no_field(x, name: str):
    """Refuse a gradient through `x.name`, no pytree field of `x`."""
    what = "a property" if isinstance(getattr(type(x), name, None), property) else "an attribute"
    exc = KTransformError(
        f"`.{name}` is {what} of {type(x).__name__}, not one of its pytree fields: "
        "k_transform differentiates a property read where the function makes the object "
        f"(`{type(x).__name__}(...).{name}`), not of one it is given; compute it in the "
        "function instead"
    )
    exc.at_user_line = True  # (the generated code's frame gives the user's line)
    raise exc


def _field_index(x, name: str, children, paths) -> int | None:
    """The position among `x`'s pytree children of its field `name`: by key
    path (dataclasses, NamedTuples), else by identity (`x.name is child`);
    an int `name` is that position (a node whose children have no names)."""
    if isinstance(name, int):
        return name
    for k, path in enumerate(paths):
        if getattr(path[0], "name", None) == name:
            return k
    if isinstance(getattr(type(x), name, None), property):
        _no_field(x, name)
    value = getattr(x, name, UNDEFINED)
    return next((k for k, c in enumerate(children) if c is value), None)


def replace_fields(x, values, names, grad: bool = False):
    """`x` with its fields `names` set to `values` (NamedTuple `_replace`,
    `dataclasses.replace`). With `grad`, `x` and `values` are gradients: a
    field that is not a pytree child (static data) takes no gradient."""
    if x is None:
        return None
    if isinstance(x, tuple) and hasattr(x, "_replace"):
        names = [x._fields[n] if isinstance(n, int) else n for n in names]  # (a position)
        for name in names:
            if name not in x._fields:
                _no_field(x, name)
        return x._replace(**dict(zip(names, values, strict=True)))
    node = pytree_node(x)
    if node is None and grad and not hasattr(x, "shape"):
        # the zero gradient of an object that is no pytree (a host value, made
        # by host code from constants: `Lin(3.0)`): its attributes take none
        return x
    if node is None and dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **dict(zip(names, values, strict=True)))  # a new instance
    if node is None:
        raise KTransformError(f"`.{names[0]}` of a {type(x).__name__}: not a pytree with fields")
    children, treedef = node
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)[0]]
    children = list(children)
    for name, value in zip(names, values, strict=True):
        k = _field_index(x, name, children, paths)
        if k is None and not grad:
            raise KTransformError(f"`{name}` is not a pytree field of {type(x).__name__}")
        if k is not None:
            children[k] = value
    return jax.tree_util.tree_unflatten(treedef, children)


def fields_of(x, names, cls=None):
    """The fields `names` of the pytree node `x` (Nones when `x` is None); an
    int name is the child at that position (`tree_flatten`'s order). A plain
    dict is the gradient of an object that is no pytree (a Cell: the env of
    its Parameters, `runtime.state.param_env`), whose fields take none. A
    plain tuple or list `x` is the gradient of a NamedTuple `cls` that a rule
    gave as its items (`node_children`)."""
    if x is None or type(x) is dict:
        return (None,) * len(names)
    if type(x) in (tuple, list) and cls is not None and hasattr(cls, "_fields"):
        x = cls._make(x)  # (its fields are its items, in order: the gradient of `cls(...)`)
    if any(isinstance(name, int) for name in names):
        children = pytree_node(x)[0]
        return tuple(children[n] if isinstance(n, int) else getattr(x, n) for n in names)
    return tuple(getattr(x, name) for name in names)


def is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def any_traced(tree) -> bool:
    """Whether any leaf of `tree` is traced. Dicts may mix key types (envs),
    and nested closure envs share sub-envs, so each container is visited once
    (a walk that unfolds the sharing grows exponentially with nesting depth)."""
    seen: set[int] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, tuple, list)):
            if id(node) not in seen:
                seen.add(id(node))
                stack.extend(node.values() if isinstance(node, dict) else node)
        elif any(is_tracer(leaf) for leaf in jax.tree_util.tree_leaves(node)):
            return True
    return False


# -- filling UNDEFINED slots ---------------------------------------------
def _zeros_like_shape(s):
    return jnp.zeros(s.shape, s.dtype)


def fill_undefined(values, shapes):
    """Replace UNDEFINED entries of `values` by zeros of the matching shape."""
    out = []
    for v, s in zip(values, shapes, strict=True):
        if v is UNDEFINED and s is not UNDEFINED:
            v = jax.tree_util.tree_map(_zeros_like_shape, s)
        out.append(v)
    return tuple(out)


def _is_undef(x):
    return x is UNDEFINED


def shape_of(tree):
    return jax.tree_util.tree_map(
        lambda v: v if v is UNDEFINED else jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)),
        tree,
        is_leaf=_is_undef,
    )


def describe(where: str) -> str:
    """`where` ("file:line") as the tail of an error message, with the line shown."""
    if not where:
        return ""
    path, _, line = where.rpartition(":")
    text = linecache.getline(path, int(line)).strip() if line.isdigit() else ""
    return f'\n  File "{path}", line {line}' + (f"\n    {text}" if text else "")


def brief(shape) -> str:
    if hasattr(shape, "shape"):
        return f"{tuple(shape.shape)} {shape.dtype}"
    return type(shape).__name__


def fit(value, shape):
    """`value` padded with zeros to the structure `shape`."""
    if shape is None:
        return None
    if shape is UNDEFINED:  # a variable no path assigns (a `return` never taken)
        return UNDEFINED
    if isinstance(shape, GradValue):
        return shape.fit_value(value)
    if isinstance(shape, dict):
        value = value if isinstance(value, dict) else {}
        return {k: fit(value.get(k), s) for k, s in shape.items()}
    node = pytree_node(shape)
    if node is not None:
        kids = node_children(value, shape) if value is not None else (None,) * len(node[0])
        return rebuild(shape, [fit(v, s) for v, s in zip(kids, node[0], strict=True)])
    if isinstance(shape, (tuple, list)):
        value = value if value is not None else (None,) * len(shape)
        return rebuild(shape, [fit(v, s) for v, s in zip(value, shape, strict=True)])
    if value is None:
        return jnp.zeros(shape.shape, shape.dtype)
    return jnp.asarray(value, shape.dtype)


# -- gradients ----------------------------------------------------------------
# Gradient values mirror primal values: arrays for arrays, tuples for tuples,
# dicts ("envs", keyed by free-variable keys) for functions, None for values
# with no gradient (None, strings, objects). `add_grad` adds them.
def add_grad(a, b):
    if a is None or a is UNDEFINED:  # UNDEFINED: a slot no path fills (no gradient)
        return b
    if b is None or b is UNDEFINED:
        return a
    if isinstance(a, GradValue):
        return a.add_grad(b)
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, value in b.items():
            out[key] = add_grad(out[key], value) if key in out else value
        return dict_like(a, out)
    if pytree_node(a) is None and pytree_node(b) is not None:
        a, b = b, a  # the sum keeps the node's structure (see `node_children`)
    node = pytree_node(a)
    if node is not None:
        kids = node_children(b, a)
        return rebuild(a, [add_grad(x, y) for x, y in zip(node[0], kids, strict=True)])
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a)(add_grad(x, y) for x, y in zip(a, b, strict=True))
    return a + b


def restrict_grad(grad, like):
    """The part of `grad` (a gradient of `add_grad(a, b)`'s output) that the
    operand `like` (a or b) contributed to: an env keeps only `like`'s keys,
    None and UNDEFINED get None, tuples go item by item, an array passes.
    Exact, not a pruning: an entry `like` lacks never depended on it. Without
    it, a gradient of the env of a sum of envs carried every key of the sum
    into each operand, and at second order the env of each bprop closure
    held those of all the calls before it (nested at every level). An empty
    env passes `grad` whole: a loop's stored copy of the env it accumulates
    keeps the layout of its first iteration, `{}`, (`fit` drops the keys it
    gains later), and restricting by it lost every closure's gradient."""
    if like is None or like is UNDEFINED or grad is None:
        return None
    if isinstance(like, dict):
        if not isinstance(grad, dict):
            return grad
        if not like:
            return grad
        return {k: restrict_grad(grad[k], v) for k, v in like.items() if k in grad}
    if type(like) in (tuple, list) and type(grad) is type(like) and len(grad) == len(like):
        return type(grad)(restrict_grad(g, v) for g, v in zip(grad, like, strict=True))
    return grad


def aux_sens(out, first):
    """The sensitivity of a `has_aux` output `(value, *aux)` (MindSpore's
    convention): `first` for the value, zeros for the auxiliary values."""
    if not isinstance(out, (tuple, list)) or not out:
        raise KTransformError(
            f"has_aux=True: the function must return a tuple (output, *aux), not "
            f"{type(out).__name__}"
        )
    return rebuild(out, [first, *(zeros_like_value(a) for a in out[1:])])


def split_aux(out):
    """`(value, aux)` of a `has_aux` output `(value, *aux)`: one aux value
    bare, several as a tuple (MindSpore's vjp, jvp, jacfwd and jacrev)."""
    if not isinstance(out, (tuple, list)) or len(out) < 2:
        what = "an array" if hasattr(out, "shape") else type(out).__name__
        what = f"a {len(out)}-tuple" if isinstance(out, (tuple, list)) else what
        raise KTransformError(
            f"has_aux=True: the function must return a tuple (output, aux, ...), not {what}"
        )
    return out[0], (out[1] if len(out) == 2 else tuple(out[1:]))


def join_aux(value, d_split):
    """The gradient of `out` from that of `split_aux(out)` (its inverse)."""
    d_value, d_aux = d_split
    if len(value) == 2:
        return rebuild(value, [d_value, d_aux])
    d_aux = (None,) * (len(value) - 1) if d_aux is None else d_aux
    return rebuild(value, [d_value, *d_aux])


def zeros_like_value(x):
    """The zero gradient of `x` (None where `x` has no gradient)."""
    if x is UNDEFINED:
        return None
    if isinstance(x, GradValue):
        return x.zeros_like()
    node = pytree_node(x)
    if node is not None:
        return rebuild(x, [zeros_like_value(v) for v in node[0]])
    if isinstance(x, (tuple, list)):
        return type(x)(zeros_like_value(v) for v in x)
    if isinstance(x, dict):
        return {k: zeros_like_value(v) for k, v in x.items()}
    if isinstance(x, bool) or x is None or isinstance(x, (str, slice, type(Ellipsis))):
        return None
    if isinstance(x, (types.ModuleType, type)):  # `jnp`, `jnp.float32`: `shape` and `dtype`
        return None  # are their attributes, not an array's
    if isinstance(x, (int, float)):  # an IntEnum member's zero is a plain 0
        exact = type(x) in (int, float) or isinstance(x, np.generic)
        return type(x)(0) if exact else (0 if isinstance(x, int) else 0.0)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jnp.zeros(jnp.shape(x), jnp.result_type(x))
    if callable(x):
        return {}
    return None


def scalar_sens(x):
    """The output sensitivity of a function JAX's API requires to have a
    scalar output (`kt.hessian`): 1, or a TypeError as JAX raises."""
    if jnp.shape(x) != ():
        raise TypeError(
            "kt.hessian is defined for functions with a scalar output; this one's has "
            f"shape {jnp.shape(x)} (JAX's hessian of it has one Hessian per output: "
            "kt.jacrev(kt.jacrev(f)) or kt.jacfwd(kt.jacrev(f)))"
        )
    return jnp.ones_like(x)


def ones_like_value(x):
    """The default output sensitivity: ones shaped like `x`."""
    node = pytree_node(x)
    if node is not None:
        return rebuild(x, [ones_like_value(v) for v in node[0]])
    if isinstance(x, (tuple, list)):
        return type(x)(ones_like_value(v) for v in x)
    if isinstance(x, dict):
        return {k: ones_like_value(v) for k, v in x.items()}
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return type(x)(1)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jnp.ones(jnp.shape(x), jnp.result_type(x))
    return None


def env_get(env, key, like):
    """The gradient stored under `key` in `env`, or zeros like `like` (also
    where it is None, the zero gradient: what a closure's K sent back for a
    value the program uses as an object, or read through an unused result)."""
    if isinstance(env, dict) and env.get(key) is not None:
        return _in_dtype_of(env[key], like)
    return zeros_like_value(like)


def _in_dtype_of(grad, x):
    """`grad` in `x`'s float dtype, as JAX's cotangents are (a float32 weight
    used with float64 inputs gets a float32 gradient)."""
    want, have = getattr(x, "dtype", None), getattr(grad, "dtype", None)
    if want is None or have is None or want == have:
        return grad
    if jnp.issubdtype(want, jnp.floating) and jnp.issubdtype(have, jnp.floating):
        return grad.astype(want)
    return grad


def env_del(env, key):
    if isinstance(env, dict) and key in env:
        env = dict(env)
        del env[key]
    return env


def check_grad(grad, x, rule: str):
    """`grad` if it fits the input `x`, else an error naming the rule. A
    Python number for an array input of another shape is refused too (as
    MindSpore refuses it): its meaning, a broadcast or a mistake, is a guess."""
    number = isinstance(grad, (int, float)) and not isinstance(grad, bool)
    if number and hasattr(x, "shape") and jnp.shape(x) != ():
        raise KTransformError(
            f"{rule} returned the number {grad!r} as the gradient of an input of shape "
            f"{jnp.shape(x)}: return an array of that shape (jnp.full_like(x, {grad!r}))"
        )
    if grad is None or not hasattr(grad, "shape") or not hasattr(x, "shape"):
        return grad
    if jnp.shape(grad) != jnp.shape(x):
        raise KTransformError(
            f"{rule} returned a gradient of shape {jnp.shape(grad)} for an input of shape "
            f"{jnp.shape(x)}"
        )
    return grad


def check_tangent(x, v, api: str, k: int | None):
    """`v` if it has the structure and shapes of the input `x` it is the
    tangent of (JAX's rule), else an error naming `api` and the input `k`
    (None: `x` holds all the inputs, `v` all the tangents). None is the
    tangent of an input without numbers (a Cell, an iterator: an object the
    function reads, not differentiated)."""
    x_leaves, x_tree = jax.tree_util.tree_flatten(x)
    if v is None and not any(
        hasattr(a, "shape") or isinstance(a, (int, float, complex)) for a in x_leaves
    ):
        return v
    v_leaves, v_tree = jax.tree_util.tree_flatten(v)
    x_shapes, v_shapes = [jnp.shape(a) for a in x_leaves], [jnp.shape(a) for a in v_leaves]
    if x_tree != v_tree or x_shapes != v_shapes:
        which = (
            "the tangents must have the inputs'"
            if k is None
            else f"the tangent for input {k} must have the input's"
        )
        raise KTransformError(
            f"{api}: {which} structure and shapes: the input is {x_tree} of shapes "
            f"{x_shapes}, the tangent {v_tree} of shapes {v_shapes}"
        )
    return v


def as_jax_inputs(args) -> tuple:
    """`args` with NumPy arrays and scalars and Python floats made JAX arrays,
    as `jax.jit` makes them: eager runs then see the same types (`x.at[...]`)
    and return the same types as jitted ones."""

    def convert(v):
        if isinstance(v, float):  # traced under a jit: a weakly typed array
            return jnp.asarray(v)
        return jnp.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v

    return tuple(jax.tree_util.tree_map(convert, a) for a in args)


def input_grad(d, arg, integers: bool = False):
    """The gradient reported for an input. Integer arrays get a zero (JAX's
    float0 cotangent) or, with `integers` (MindSpore's GradOperation), their
    gradient cast to their own dtype; boolean arrays, static inputs (Python
    ints, bools, None, strings) and inputs nothing flowed to get a zero.
    Containers and pytree nodes get theirs leaf by leaf. A variable not yet
    defined (UNDEFINED) has an undefined one, filled as its value is where
    branches join."""
    if arg is UNDEFINED:
        return UNDEFINED
    node = pytree_node(arg)
    if node is not None or type(arg) in (tuple, list, dict):
        return _container_input_grad(d, arg, node, integers)
    if isinstance(arg, (types.ModuleType, type)):  # `np.ndarray` has a `dtype`, a descriptor
        return None
    if hasattr(arg, "dtype") and not jnp.issubdtype(arg.dtype, jnp.inexact):
        if not integers or d is None or d is UNDEFINED or jnp.issubdtype(arg.dtype, jnp.bool_):
            return jnp.zeros_like(arg)
        return jnp.broadcast_to(jnp.asarray(d, arg.dtype), jnp.shape(arg))
    if d is None or arg is None or isinstance(arg, (bool, int, str)):
        return zeros_like_value(arg)
    return _in_dtype_of(d, arg)


def _container_input_grad(d, arg, node, integers: bool):
    if isinstance(arg, dict):
        d = d if isinstance(d, dict) else {}
        return dict_like(arg, {k: input_grad(d.get(k), v, integers) for k, v in arg.items()})
    kids = node[0] if node is not None else list(arg)
    if d is None or d is UNDEFINED:
        d_kids = [None] * len(kids)
    else:
        d_kids = node_children(d, arg) if node is not None else list(d)
    return rebuild(arg, [input_grad(g, v, integers) for g, v in zip(d_kids, kids, strict=True)])
