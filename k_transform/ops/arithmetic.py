"""Arithmetic and comparison primitives: the Python operators.

The parser maps `a + b` to `Add()`, `a @ b` to `NumpyMatMul()`, `a < b` to
`Less()`, `-a` to `Neg()`, and so on; `ops.Add()(a, b)` is the same primitive.
Arrays broadcast as in numpy.
"""

from __future__ import annotations

import operator

from k_transform.ops.base import operator_primitive

Add = operator_primitive("Add", operator.add, "+")
Sub = operator_primitive("Sub", operator.sub, "-")
Mul = operator_primitive("Mul", operator.mul, "*")
Div = operator_primitive("Div", operator.truediv, "/")
RealDiv = Div
FloorDiv = operator_primitive("FloorDiv", operator.floordiv, "//")
Mod = operator_primitive("Mod", operator.mod, "%")
Pow = operator_primitive("Pow", operator.pow, "**")
NumpyMatMul = operator_primitive("NumpyMatMul", operator.matmul, "@", doc="`a @ b` (numpy.matmul).")
LeftShift = operator_primitive("LeftShift", operator.lshift, "<<")
RightShift = operator_primitive("RightShift", operator.rshift, ">>")
BitwiseOr = operator_primitive("BitwiseOr", operator.or_, "|")
BitwiseXor = operator_primitive("BitwiseXor", operator.xor, "^")
BitwiseAnd = operator_primitive("BitwiseAnd", operator.and_, "&")

Equal = operator_primitive("Equal", operator.eq, "==")
NotEqual = operator_primitive("NotEqual", operator.ne, "!=")
Less = operator_primitive("Less", operator.lt, "<")
LessEqual = operator_primitive("LessEqual", operator.le, "<=")
Greater = operator_primitive("Greater", operator.gt, ">")
GreaterEqual = operator_primitive("GreaterEqual", operator.ge, ">=")
Is = operator_primitive("Is", operator.is_, "is")
IsNot = operator_primitive("IsNot", operator.is_not, "is not")

Neg = operator_primitive("Neg", operator.neg, "-", n_inputs=1)
Pos = operator_primitive("Pos", operator.pos, "+", n_inputs=1)
Invert = operator_primitive("Invert", operator.invert, "~", n_inputs=1)

BINARY = {
    "add": Add,
    "sub": Sub,
    "mul": Mul,
    "truediv": Div,
    "floordiv": FloorDiv,
    "mod": Mod,
    "pow": Pow,
    "matmul": NumpyMatMul,
    "lshift": LeftShift,
    "rshift": RightShift,
    "bitor": BitwiseOr,
    "bitxor": BitwiseXor,
    "bitand": BitwiseAnd,
    "eq": Equal,
    "ne": NotEqual,
    "lt": Less,
    "le": LessEqual,
    "gt": Greater,
    "ge": GreaterEqual,
    "is_": Is,
    "is_not": IsNot,
}
UNARY = {"neg": Neg, "pos": Pos, "invert": Invert}
