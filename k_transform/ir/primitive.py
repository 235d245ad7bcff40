"""`Primitive`: an operation the IR treats as atomic.

A primitive instance is a callable value: `impl(*args)` runs it with jax. Its
attributes (axis, keep_dims, transpose_b, ...) are fixed when it is created,
so two instances with the same class and attributes are equal. Codegen asks
`emit` for a Python expression; the default calls the instance by name.
Called with a `kt.Parameter` (a Cell's `construct` run as plain Python), an
instance computes with the Parameter's current value, unless the primitive
`takes_parameters` (`Assign`).

Arity: `n_inputs` (None: any number, packed into one tuple for the rule).
A subclass that does not set it takes it from `impl`'s signature (`impl(self,
x)`: one input; `impl(self, *args)`: any). Trailing inputs a call leaves out
get `input_defaults` (MindSpore's defaults: `ReduceSum()(x)` is
`ReduceSum()(x, None)`, all axes), by default `impl`'s own defaults; the
parser fills them in (`specialize`), and so does a call run as Python.
Gradient rules are looked up by class in `k_transform.bprop_registry`.
"""

from __future__ import annotations

import inspect

from k_transform.ir.nodes import Constant
from k_transform.protocol import kt_attribute


class Primitive:
    """Base class of every primitive. Subclass it and write `impl`.

    `effectful` primitives (print, assert, assign) are kept in program order
    and never pruned; `host` ones also run code of the host (print, a
    random generator's draw): a program calling one runs per call, not
    compiled unless asked (`FuncGraph.calls_host`). `n_inputs` (None: any)
    is checked by the verifier; unset, it is `impl`'s number of inputs.
    `input_defaults` are the values of the trailing inputs a call may leave
    out.
    Instances are equal when their class and instance attributes are equal.
    """

    effectful = False
    host = False
    n_inputs: int | None = None
    input_defaults: tuple = ()
    graph_slots: tuple[int, ...] = ()  # inputs that must be FuncGraphs (control flow)
    reads_item = False  # `x[k]`: codegen may unpack the tuples read this way
    takes_parameters = False  # `impl` receives `kt.Parameter`s themselves (assign)
    # inputs read only for their structure (the tuple `getitem_grad` fills):
    # they get no gradient, whatever the rule returns there
    structure_inputs: tuple[int, ...] = ()
    name = ""
    attrs: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__
        _arity_from_impl(cls)

    def __init__(self, name: str | None = None, **attrs):
        self.name = name or type(self).__name__
        self.attrs = attrs
        for key, value in attrs.items():
            setattr(self, key, value)

    def impl(self, *args):
        raise NotImplementedError(f"primitive {self.name} has no impl")

    def __call__(self, *args):
        args = (*args, *self.missing_inputs(len(args)))
        if not self.takes_parameters:  # a `kt.Parameter` (a Cell run as Python) is its value
            args = tuple(
                a.value() if kt_attribute(a, "__kt_parameter__", False) else a for a in args
            )
        return self.impl(*args)

    def missing_inputs(self, n_args: int) -> tuple:
        """The defaults of the inputs after the first `n_args`, when a call
        with `n_args` inputs may leave them out (else `()`)."""
        n, defaults = self.n_inputs, self.input_defaults
        if n is None or not n - len(defaults) <= n_args < n:
            return ()
        return tuple(defaults[len(defaults) - (n - n_args) :])

    def specialize(self, args: list) -> tuple[Primitive, list]:
        """At parse time, on the input nodes of a call: the primitive and
        inputs to apply (here: left-out trailing inputs become constants)."""
        return self, [*args, *(Constant(v, hint=repr(v)) for v in self.missing_inputs(len(args)))]

    def emit(self, e, args: list[str]) -> str:
        """A Python expression computing this primitive on `args` (names)."""
        return f"{e.ref(self, self.name)}({', '.join(args)})"

    def graph_arity(self, slot: int, n_args: int) -> int:
        """How many parameters the graph at input `slot` takes, given `n_args` inputs."""
        raise NotImplementedError(f"{self.name} takes no graphs")

    def result_arity(self, args: list) -> int:
        """How many results it returns as a tuple, when known from `args` (else 0)."""
        return 0

    def subgraphs(self) -> list:
        """FuncGraphs this primitive runs (beyond its inputs)."""
        return []

    def parameters(self) -> list:
        """`kt.Parameter`s this primitive reads or writes (held as attributes)."""
        return []

    def _key(self):
        items = []
        for k, v in sorted(vars(self).items()):
            if k == "attrs":  # its entries are attributes already
                continue
            try:
                hash(v)
            except TypeError:
                v = ("id", id(v))
            items.append((k, v))
        return (type(self), tuple(items))

    def __eq__(self, other):
        return isinstance(other, Primitive) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self) -> str:
        if not self.attrs:
            return self.name
        attrs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.attrs.items()))
        return f"{self.name}[{attrs}]"


def _arity_from_impl(cls: type) -> None:
    """`n_inputs` and `input_defaults` from `impl`'s signature, where the
    class (or a base other than Primitive) does not set them itself."""
    params = list(inspect.signature(cls.impl).parameters.values())[1:]  # after self
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return  # impl(self, *args): variadic, as declared
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    derived = set()
    if not _sets(cls, "n_inputs"):
        cls.n_inputs = len(positional)
        derived.add("n_inputs")
    if not _sets(cls, "input_defaults") and cls.n_inputs == len(positional):
        cls.input_defaults = tuple(p.default for p in positional if p.default is not p.empty)
        derived.add("input_defaults")
    cls._derived = frozenset(derived)


def _sets(cls: type, attr: str) -> bool:
    """Whether `cls` or a base below Primitive sets `attr` (not derived)."""
    for klass in cls.__mro__:
        if klass is Primitive:
            return False
        if attr in klass.__dict__:
            return attr not in klass.__dict__.get("_derived", ())
    return False


class MakeTuple(Primitive):
    """`(a, b, ...)`: the tuple every layer builds (the parser's tuple
    literals, the DFunctor's `(result, bprop)` and gradients, codegen's
    tuples of gradients)."""

    n_inputs = None
    static_when = "inputs"

    def __init__(self):
        super().__init__("make_tuple")

    def impl(self, *items):
        return tuple(items)

    def emit(self, e, args):
        return f"({args[0]},)" if len(args) == 1 else f"({', '.join(args)})"
