"""The `__kt_*__` attributes: how a layer asks an object of a higher one about itself.

Imports run down the layers (docs/architecture.md). Where a lower layer must
treat an object of a higher one specially (the parser meets `kt.vjp` inside
user code; codegen meets a `kt.Parameter`), it reads one of these attributes
from the object instead of importing the object's module: a callback up the
layers. `CALLBACKS` is every such attribute, what it promises, and the
modules that may set it; `tests/test_layout.py` checks that an attribute
set in one unit and read in a lower one (or one of its row) is listed here,
and that only the listed modules set it.
"""

from __future__ import annotations

CALLBACKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "__kt_static__": (
        "true: a call of it with constant arguments runs while parsing, and its "
        "result is a constant (GradOperation(), kt.grad(f), kt.jacrev(f), a Cell's "
        "trainable_params(), guarded by what its `__kt_reads__` says it reads)",
        ("k_transform.reverse", "k_transform.jacobians", "k_transform.cell"),
    ),
    "__kt_compiles__": (
        "true: `kt.jit(f)` inside parsed code is `f`, as `jax.jit(f)` there (the "
        "program around it is compiled as one)",
        ("k_transform.jit_api",),
    ),
    "__kt_lower__": (
        "`__kt_lower__(builder, args, kwargs, node)`: its call is built into the "
        "graph being parsed by it (`builder` the parser's GraphBuilder, the "
        "arguments as nodes), which returns the result node (kt.vjp, kt.jvp, "
        "kt.hvp, a Jacobian of a closure; the builders are `lowering.py`)",
        (
            "k_transform.reverse",
            "k_transform.forward_api",
            "k_transform.jacobians",
            "k_transform.ops.functional",  # MindSpore's functional names (`ops.sin`)
            "k_transform.common.tensor",  # `Tensor(x)`: the function `tensor`
            "k_transform.mindspore.multitype",  # MultitypeFuncGraph, HyperMap: parse-time dispatch
            "k_transform.mindspore.custom",  # custom_vjp: its call through its own bprop
        ),
    ),
    "__kt_graph__": (
        "the FuncGraph it runs: a call of it is a call of that graph (a "
        "gradient function, a `kt.compile`d program)",
        ("k_transform.api", "k_transform.compiled", "k_transform.reverse", "k_transform.jit_api"),
    ),
    "__kt_graph_for__": (
        "`__kt_graph_for__(n)`: the FuncGraph it runs when given `n` values for "
        "its `*args` (the gradient of a `*args` function, made per arity)",
        ("k_transform.reverse",),
    ),
    "__kt_source__": (
        "the generated Python it runs (`kt.get_source`)",
        ("k_transform.codegen.compile", "k_transform.compiled"),
    ),
    "__kt_library__": (
        "true: a function of k_transform's that a differentiated call of it reads "
        "through its jaxpr, as library code (`ops.python.imports_jaxpr`)",
        (
            "k_transform.ops.tensor_methods",
            "k_transform.ode",
            "k_transform.frontend.batching",
            "k_transform.mindspore.tensor",
            "k_transform.runtime.python",
            "k_transform.runtime.values",
        ),
    ),
    "__kt_jit__": (
        "true: `kt.jit` of a function; on a class (`@kt.jit def construct`) the "
        "parser reads the function it compiles (`__wrapped__`) as the method",
        ("k_transform.jit_api",),
    ),
    "__kt_own_call__": (
        "true: its `__call__` is k_transform's (a gradient, jit or Jacobian "
        "object), never parsed as a user's method (`callables.user_call_method`)",
        (
            "k_transform.compiled",
            "k_transform.jit_api",
            "k_transform.forward_api",
            "k_transform.jacobians",
        ),
    ),
    "__kt_parameter__": (
        "true: it is a `kt.Parameter` (or a slot written back like one), read "
        "through `read_param` and written by `ops.Assign`",
        ("k_transform.cell", "k_transform.runtime.state"),
    ),
}


def kt_attribute(value, name: str, default=None):
    """`getattr(value, name, default)` for one of these attributes. An object
    whose `__getattr__` raises another error than AttributeError for a name
    it lacks (a dict read by attribute, `__getattr__ = dict.__getitem__`)
    has none."""
    try:
        return getattr(value, name, default)
    except Exception as exc:  # noqa: BLE001 - the object's own error for a name it lacks
        if _ours(exc):  # a gradient function made again as its graph is read, and refused
            raise
        return default


def _ours(exc: Exception) -> bool:
    """A `KTransformError` (by its module: `errors` is of this module's row)."""
    return any(c.__module__ == "k_transform.errors" for c in type(exc).__mro__)
