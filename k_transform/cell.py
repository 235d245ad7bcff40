"""MindSpore-style `Cell`, `Parameter` and `ParameterTuple`.

A `Cell` holds Parameters and sub-Cells as attributes and computes in
`construct`; `net(x)` runs `construct` as Python, per call, with MindSpore's
Tensor methods on arrays (`x.abs()`, `x.mean(0, True)`: `k_transform.eager`).
Gradient functions parse `construct` with `self` fixed (attributes are resolved at transform
time), and read each Parameter's value when they are called, never baking it
into compiled code. A Cell may define `bprop(self, *inputs, out, dout)` to
override the gradient of its `construct` (also when the Cell itself is the
function differentiated). Run as plain Python (`net(x)`), a Parameter reaches
JAX as its value: through `__jax_array__`, through kt primitives, and as a
pytree (one leaf, its value) for jitted JAX functions.
"""

from __future__ import annotations

import itertools
import operator

import jax
import jax.numpy as jnp
import numpy as np

from k_transform import eager
from k_transform import runtime as rt

_uids = itertools.count()


def _as_array(data):
    """`data` as a JAX array. A numpy array is put on the device as it is
    (same dtype as `jnp.asarray`'s): `jnp.asarray` compiles an XLA program
    per shape to copy it (10-30 ms; a LeNet-5's nine weights and moments 0.1 s
    of its first training step)."""
    if isinstance(data, np.ndarray):
        return jax.device_put(data)
    return jnp.asarray(data)


class Parameter:
    """A named, mutable array that behaves like its value."""

    __kt_parameter__ = True

    def __init__(self, data, name: str | None = None, requires_grad: bool = True):
        self.uid = next(_uids)
        self._data = _as_array(data)
        self.name = name or f"param{self.uid}"
        self.requires_grad = requires_grad

    @property
    def data(self):
        """MindSpore's `.data`, which is the Parameter: its value where the
        program runs (`value()`): traced inside a gradient, and refused in
        code run as Python under JAX's tracer, where it would be a constant
        (the stored array there gave a silent zero gradient)."""
        return self.value()

    @property
    def stored(self):
        """The array the Parameter holds, whatever program is running."""
        return self._data

    def set_data(self, data) -> Parameter:
        self._data = _as_array(data)
        return self

    def value(self):
        """The value seen by the running program: inside a gradient call, the
        (possibly traced) value it was called with, else `data`."""
        return rt.read_param(self)

    # NumPy defers to it as to a JAX array: `np.float64(2) * p` is `p.__rmul__`
    __array_priority__ = 100
    __hash__ = object.__hash__  # (`__eq__` is elementwise, as an array's)

    def __jax_array__(self):
        return self.value()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value(), dtype=dtype)

    def __getattr__(self, name):
        if name.startswith("__") or name == "_data":
            raise AttributeError(name)
        return getattr(self.value(), name)

    def __getitem__(self, index):
        return self.value()[index]

    def __iter__(self):
        return iter(self.value())

    def __len__(self):
        return len(self._data)

    # The value's truth and number, as an array's (`if self.flag:`): parsed,
    # read where the line runs (`frontend.control_flow.known_truth`)
    def __bool__(self):
        return bool(self.value())

    def __float__(self):
        return float(self.value())

    def __int__(self):
        return int(self.value())

    def __index__(self):
        return operator.index(self.value())

    def __complex__(self):
        return complex(self.value())

    def __repr__(self) -> str:
        shape, dtype = tuple(self._data.shape), self._data.dtype
        return f"Parameter(name={self.name!r}, shape={shape}, dtype={dtype})"


def _delegate(op):
    return lambda self, *args: op(self.value(), *args)


def _rdelegate(op):
    return lambda self, other: op(other, self.value())


for _name, _op in [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
    ("matmul", operator.matmul),
    ("and", operator.and_),
    ("or", operator.or_),
    ("xor", operator.xor),
    ("lshift", operator.lshift),
    ("rshift", operator.rshift),
]:
    setattr(Parameter, f"__{_name}__", _delegate(_op))
    setattr(Parameter, f"__r{_name}__", _rdelegate(_op))
for _name, _op in [
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", operator.abs),
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("invert", operator.invert),
]:
    setattr(Parameter, f"__{_name}__", _delegate(_op))


# A Parameter handed to a jitted JAX function (`jnp.take`, `jax.jit(f)`) is
# its current value: a pytree whose one leaf is `value()`, rebuilt as that
# value (JAX no longer reads `__jax_array__` when it abstracts arguments).
jax.tree_util.register_pytree_node(
    Parameter, lambda p: ((p.value(),), None), lambda _, children: children[0]
)


class ParameterTuple(tuple):
    """A tuple of Parameters (the `weights` of `GradOperation(get_by_list=True)`)."""

    def __new__(cls, params=()):
        params = tuple(params)
        for p in params:
            if not isinstance(p, Parameter):
                raise TypeError(f"ParameterTuple holds Parameters, got {type(p).__name__}")
        return super().__new__(cls, params)

    def clone(self, prefix: str, init="same") -> ParameterTuple:
        """MindSpore's `clone`: new Parameters named `prefix.<name>`, holding
        a copy of each value (`init="same"`), or zeros or ones of its shape
        and dtype (an optimizer's moments)."""
        fill = {"same": lambda d: d, "zeros": jnp.zeros_like, "ones": jnp.ones_like}
        if init not in fill:
            raise ValueError(
                f"ParameterTuple.clone: init must be one of {list(fill)}, not {init!r}"
            )
        return ParameterTuple(
            Parameter(
                fill[init](p.stored), name=f"{prefix}.{p.name}", requires_grad=p.requires_grad
            )
            for p in self
        )


class Cell:
    """Base class of networks: subclass it and write `construct`."""

    def __init__(self, auto_prefix: bool = True):
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_cells", {})
        object.__setattr__(self, "training", False)
        # MindSpore's: sub-Cells' Parameters take the attribute path as a prefix
        # ("inner.w"); wrappers such as WithLossCell pass False to keep names.
        object.__setattr__(self, "_auto_prefix", auto_prefix)

    def __setattr__(self, name, value):
        if "_params" not in self.__dict__:
            Cell.__init__(self)
        if isinstance(value, Parameter):
            if value.name == f"param{value.uid}":
                value.name = name  # unnamed: take the attribute's name
                value.auto_named = True
            self._params[name] = value
        elif name in self._params and name in self.__dict__ and value is not None:
            # `self.p = self.p + 1` run as Python: MindSpore sets the Parameter's
            # value, the attribute stays the Parameter (under a transform the
            # parser makes it an ops.Assign: `frontend.cell_state`)
            self._params[name].set_data(value)
            return
        elif isinstance(value, Cell):
            for path, p in value.parameters_and_names() if self._auto_prefix else ():
                p.name = f"{name}.{path}"  # MindSpore's names: "l1.weight", "inner.dense.w"
            self._cells[name] = value
        object.__setattr__(self, name, value)

    def construct(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define construct")

    def __call__(self, *args, **kwargs):
        """`construct` run as Python (PyNative), its method calls on arrays
        those of a MindSpore Tensor (`eager`)."""
        rt.refuse_lost_bprop(self)  # (inside a user function traced by JAX)
        return eager.call_method(self, "construct", args, kwargs)

    def parameters_and_names(self, prefix: str = ""):
        seen: set[int] = set()
        for name, p in self.__dict__.get("_params", {}).items():
            if id(p) not in seen:
                seen.add(id(p))
                yield prefix + name, p
        for cname, cell in self.__dict__.get("_cells", {}).items():
            for name, p in cell.parameters_and_names(f"{prefix}{cname}."):
                if id(p) not in seen:
                    seen.add(id(p))
                    yield name, p

    def get_parameters(self) -> list[Parameter]:
        return [p for _, p in self.parameters_and_names()]

    def trainable_params(self) -> list[Parameter]:
        return [p for p in self.get_parameters() if p.requires_grad]

    def untrainable_params(self) -> list[Parameter]:
        return [p for p in self.get_parameters() if not p.requires_grad]

    def _structure_reads(self):
        """(object, attribute) pairs `trainable_params` and its kin read: each Cell's
        Parameters and sub-Cells, and each Parameter's `requires_grad`."""
        for _, cell in self.cells_and_names():
            yield cell, "_params"
            yield cell, "_cells"
        for p in self.get_parameters():
            yield p, "requires_grad"

    def cells(self) -> list[Cell]:
        return list(self.__dict__.get("_cells", {}).values())

    def name_cells(self) -> dict[str, Cell]:
        return dict(self.__dict__.get("_cells", {}))

    def cells_and_names(self, prefix: str = ""):
        """(name, Cell) for this Cell (named `prefix`, "" at the top) and every
        sub-Cell below it, each once, depth first: MindSpore's order and names
        (`"layers.0"`)."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, cell = stack.pop()
            if id(cell) in seen:
                continue
            seen.add(id(cell))
            yield name, cell
            children = cell.__dict__.get("_cells", {}).items()
            stack.extend(reversed([(f"{name}.{n}" if name else n, c) for n, c in children]))

    # Called by a Cell's method (an L2 penalty over them, a loop over the
    # sub-Cells): read while parsing, so that each Parameter and sub-Cell is
    # the constant the program reads and differentiates (run as Python, they
    # would be values with no gradient); the graph is guarded by what it read
    # (`frontend.guards`). A generator's items are read as a tuple.
    for _listing in (
        get_parameters,
        trainable_params,
        untrainable_params,
        parameters_and_names,
        cells,
        name_cells,
        cells_and_names,
    ):
        _listing.__kt_static__ = True
        _listing.__kt_reads__ = _structure_reads
    del _listing

    def set_train(self, mode: bool = True) -> Cell:
        object.__setattr__(self, "training", mode)
        for cell in self.cells():
            cell.set_train(mode)
        return self

    def set_grad(self, requires_grad: bool = True) -> Cell:
        return self
