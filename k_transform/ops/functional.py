"""MindSpore's functional ops API: `ops.sin(x)`, `ops.reduce_sum(x, axis)`,
`ops.matmul(a, b)`, `F.assign(param, value)`, ... onto our primitives.

One table, `FUNCTIONAL`, maps each MindSpore functional name to the
primitive it is and to MindSpore 2.10's parameters (names and defaults, as
`inspect.signature` shows them there). A parameter named in the entry's
attribute map becomes an attribute of the primitive (`keep_dims`, `axis` of
a softmax) and must be a constant where the call is parsed; the others are
the primitive's inputs, in order. Each name becomes a `Functional`: called as
Python (a Cell run eagerly) it builds the primitive and runs it; in parsed
code it is lowered where it is called (`__kt_lower__`), so the primitive,
with its gradient rule, stands in the user's graph at the user's line.
"""

from __future__ import annotations

import ast
import inspect

from k_transform.ir.nodes import Constant, Node
from k_transform.ops import arithmetic as ar
from k_transform.ops import gather, nn, reduce, shape, state, structural
from k_transform.ops import math as mt

# name: (primitive class, MindSpore's parameters, {parameter: primitive attribute})
FUNCTIONAL: dict[str, tuple] = {
    # -- elementwise, one input
    **{
        name: (prim, "input")
        for name, prim in {
            "sin": mt.Sin,
            "cos": mt.Cos,
            "tan": mt.Tan,
            "exp": mt.Exp,
            "log": mt.Log,
            "tanh": mt.Tanh,
            "sigmoid": mt.Sigmoid,
            "relu": mt.ReLU,
            "abs": mt.Abs,
            "square": mt.Square,
            "neg": ar.Neg,
            "reciprocal": mt.Reciprocal,
            "log1p": mt.Log1p,
            "expm1": mt.Expm1,
            "rsqrt": mt.Rsqrt,
            "erf": mt.Erf,
            "sinh": mt.Sinh,
            "cosh": mt.Cosh,
            "atan": mt.Atan,
            "asinh": mt.Asinh,
            "sign": mt.Sign,
            "floor": mt.Floor,
            "ceil": mt.Ceil,
            "real": mt.Real,
            "imag": mt.Imag,
            "zeros_like": structural.ZerosLike,
            "ones_like": structural.OnesLike,
        }.items()
    },
    "sqrt": (mt.Sqrt, "x"),
    "stop_gradient": (structural.StopGradient, "value"),
    # -- elementwise, two or three inputs
    **{
        name: (prim, "input, other")
        for name, prim in {
            "add": ar.Add,
            "tensor_add": ar.Add,
            "sub": ar.Sub,
            "mul": ar.Mul,
            "div": ar.Div,
            "maximum": mt.Maximum,
            "minimum": mt.Minimum,
            "atan2": mt.Atan2,
            "matmul": ar.NumpyMatMul,
            "dot": reduce.Dot,
            "equal": ar.Equal,
            "not_equal": ar.NotEqual,
            "greater": ar.Greater,
            "greater_equal": ar.GreaterEqual,
            "less_equal": ar.LessEqual,
        }.items()
    },
    "pow": (ar.Pow, "input, exponent"),
    "outer": (reduce.Outer, "input, vec2"),
    "bmm": (reduce.BatchMatMul, "input_x, mat2"),
    "select": (mt.Select, "condition, input, other"),
    "where": (mt.Select, "condition, input, other"),
    "clamp": (mt.Clip, "input, min=None, max=None"),
    "clip": (mt.Clip, "input, min=None, max=None"),
    "addn": (ar.AddN, "x"),
    # -- reductions (`axis=()`: all axes)
    "reduce_sum": (reduce.ReduceSum, "x, axis=()"),
    "reduce_mean": (reduce.ReduceMean, "x, axis=()"),
    "reduce_max": (reduce.ReduceMax, "x, axis=()"),
    "reduce_min": (reduce.ReduceMin, "x, axis=()"),
    "sum": (reduce.ReduceSum, "input, dim=None, keepdim=False", {"keepdim": "keep_dims"}),
    "mean": (reduce.ReduceMean, "x, axis=None, keep_dims=False", {"keep_dims": "keep_dims"}),
    "prod": (reduce.ReduceProd, "input, axis=None, keep_dims=False", {"keep_dims": "keep_dims"}),
    "amax": (reduce.ReduceMax, "input, axis=None, keepdims=False", {"keepdims": "keep_dims"}),
    "amin": (reduce.ReduceMin, "input, axis=None, keepdims=False", {"keepdims": "keep_dims"}),
    "logsumexp": (reduce.LogSumExp, "input, dim, keepdim=False", {"keepdim": "keep_dims"}),
    "cumsum": (reduce.Cumsum, "x, axis", {"axis": "axis"}),
    "argmax": (
        reduce.Argmax,
        "input, dim=None, keepdim=False",
        {"dim": "axis", "keepdim": "keep_dims"},
    ),
    "argmin": (
        reduce.Argmin,
        "input, axis=None, keepdims=False",
        {"axis": "axis", "keepdims": "keep_dims"},
    ),
    # -- shapes
    "transpose": (shape.Transpose, "input, dims"),
    "reshape": (shape.Reshape, "input, shape"),
    "expand_dims": (shape.ExpandDims, "input_x, axis"),
    "broadcast_to": (shape.BroadcastTo, "input, shape"),
    "cast": (shape.MsCast, "input, dtype"),
    "squeeze": (shape.Squeeze, "input, axis=None", {"axis": "axis"}),
    "concat": (shape.Concat, "tensors, axis=0", {"axis": "axis"}),
    "stack": (shape.Stack, "tensors, axis=0", {"axis": "axis"}),
    "tile": (shape.Tile, "input, dims", {"dims": "reps"}),
    "tril": (mt.Tril, "input, diagonal=0", {"diagonal": "k"}),
    "triu": (mt.Triu, "input, diagonal=0", {"diagonal": "k"}),
    "gather": (gather.Gather, "input_params, input_indices, axis", {"axis": "axis"}),
    # -- nn
    "softmax": (nn.Softmax, "input, axis=-1", {"axis": "axis"}),
    "log_softmax": (nn.LogSoftmax, "logits, axis=-1", {"axis": "axis"}),
    # -- state
    "assign": (state.Assign, "variable, value"),
}


def _signature(params: str) -> inspect.Signature:
    """`"x, axis=()"` as a signature (defaults are Python literals)."""
    made = []
    for item in params.split(","):
        name, _, default = item.strip().partition("=")
        value = ast.literal_eval(default) if default else inspect.Parameter.empty
        made.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=value))
    return inspect.Signature(made)


class Functional:
    """One of MindSpore's functional ops: `prim_cls(**attributes)(*inputs)`,
    its arguments bound by MindSpore's `__signature__`."""

    def __init__(self, name: str, prim_cls: type, params: str, attributes: dict | None = None):
        self.__name__ = self.__qualname__ = name
        self.__doc__ = f"MindSpore's `ops.{name}({params})`: the primitive `{prim_cls.__name__}`."
        self.__signature__ = _signature(params)
        self.prim_cls = prim_cls
        self.attributes = dict(attributes or {})

    def __repr__(self) -> str:
        return f"<functional ops.{self.__name__}>"

    def split(self, args: tuple, kwargs: dict) -> tuple[dict, list]:
        """The primitive's attributes and its inputs, from a call's arguments
        (TypeError, as Python's, for arguments the signature does not bind)."""
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"ops.{self.__name__}{self.__signature__}: {exc}") from None
        bound.apply_defaults()
        attrs, inputs = {}, []
        for name, value in bound.arguments.items():
            if name in self.attributes:
                attrs[self.attributes[name]] = value
            else:
                inputs.append(value)
        return attrs, inputs

    def __call__(self, *args, **kwargs):
        attrs, inputs = self.split(args, kwargs)
        return self.prim_cls(**attrs)(*inputs)

    def __kt_lower__(self, builder, args: list, kwargs: dict, e):
        """In parsed code: the primitive applied to the argument nodes."""
        try:
            attrs, inputs = self.split(tuple(args), kwargs)
        except TypeError as exc:
            raise builder.fp.error(str(exc), e) from None
        values = {}
        for attr, node in attrs.items():  # a default is a value, an argument a node
            if isinstance(node, Node) and not isinstance(node, Constant):
                raise builder.fp.error(
                    f"ops.{self.__name__}: `{attr}` must be a constant (a primitive attribute)", e
                )
            values[attr] = node.value if isinstance(node, Node) else node
        inputs = [x if isinstance(x, Node) else Constant(x, hint=repr(x)) for x in inputs]
        prim, inputs = self.prim_cls(**values).specialize(inputs)
        return builder.apply(prim, *inputs, node=e)


def _build() -> dict[str, Functional]:
    made = {}
    for name, (prim_cls, params, *attributes) in FUNCTIONAL.items():
        made[name] = Functional(name, prim_cls, params, *attributes)
    return made


FUNCTIONS = _build()
globals().update(FUNCTIONS)
__all__ = sorted(FUNCTIONS)
