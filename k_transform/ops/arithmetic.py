"""Arithmetic and comparison primitives: the Python operators.

The parser maps `a + b` to `Add()`, `a @ b` to `NumpyMatMul()`, `a < b` to
`Less()`, `-a` to `Neg()`, and so on; `ops.Add()(a, b)` is the same primitive.
Arrays broadcast as in numpy.
"""

from __future__ import annotations

import operator

import jax.numpy as jnp

from k_transform.bprop_registry.helpers import rule, zero_gradient
from k_transform.ops.base import RuntimeCall, elementwise, operator_primitive
from k_transform.ops.structural import SumTo

Add = operator_primitive("Add", operator.add, "+")
TensorAdd = Add  # MindSpore's deprecated name
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
Is.static_when = IsNot.static_when = "always"  # identity is never traced

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


def add_n(xs):
    """The sum of a tuple or list of arrays (MindSpore's `AddN`)."""
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


AddN = elementwise("AddN", add_n, "add_n", doc="`AddN()(xs)`: the sum of a tuple or list.")


# == gradient rules ==============================================================
# Rules for the arithmetic operators (`a + b`, `a * b`, `a @ b`, ...).
#
# Binary operators broadcast, so each gradient is summed back to its input's
# shape with `sum_to`.

sum_to = SumTo()
sum_to_tail = SumTo(tail=True)


@rule(Add)
def bprop_add(x, y, out, dout):
    return sum_to(dout, x), sum_to_tail(dout, y)  # tail: `t1 + t2` of tuples


@rule(Sub)
def bprop_sub(x, y, out, dout):
    return sum_to(dout, x), sum_to(-dout, y)


class MulGrad(RuntimeCall):
    """`d * factor` in the gradient of a product (`rt.mul_grad`): arrays
    multiply; the gradient of a repeated sequence (`[x] * 3`) goes to each
    copy's items, not repeated again."""

    n_inputs = 2
    rt_name = "mul_grad"

    def __init__(self):
        super().__init__("mul_grad")


mul_grad = MulGrad()


@rule(MulGrad)  # a gradient's factor is a product too: one rule for both
@rule(Mul)
def bprop_mul(x, y, out, dout):
    return sum_to(mul_grad(dout, y), x), sum_to(mul_grad(dout, x), y)


@rule(Div)
def bprop_div(x, y, out, dout):
    dx = dout / y
    return sum_to(dx, x), sum_to(-dx * out, y)


@rule(Pow)
def bprop_pow(x, y, out, dout):
    # `x ** 0` has no slope: y * x ** -1 would be NaN at x = 0 (JAX's rule
    # selects 0 there too); `(y == 0)` makes that 0 * x ** 0, static for a
    # Python exponent, and has no gradient of its own
    dx = dout * y * x ** (y - 1 + (y == 0))
    safe_x = jnp.where(x > 0, x, 1.0)
    dy = dout * out * jnp.where(x > 0, jnp.log(safe_x), 0.0)
    return sum_to(dx, x), sum_to(dy, y)


@rule(AddN)
def bprop_add_n(xs, out, dout):
    # the outer `sum_to` gives the tuple `xs`'s container (a list, a NamedTuple)
    return (sum_to(tuple(sum_to(dout, x) for x in xs), xs),)


@rule(Neg)
def bprop_neg(x, out, dout):
    return (-dout,)


@rule(Pos)
def bprop_pos(x, out, dout):
    return (dout,)


@rule(NumpyMatMul)
def bprop_numpy_matmul(x, y, out, dout):
    # Ranks are static: codegen writes these `if`s as Python `if`s, decided
    # when the code runs (codegen.static).
    if y.ndim == 2:  # x @ a matrix, x of any rank (a Dense layer): one contraction for dy
        # (sum_to of equal shapes: only a real operand's real part, JAX's convention)
        n, m = jnp.shape(y)
        dy = jnp.reshape(x, (-1, n)).T @ jnp.reshape(dout, (-1, m))
        return sum_to(dout @ y.T, x), sum_to(dy, y)
    if y.ndim == 1:  # x @ a vector: an outer product for dx, one contraction for dy
        n = jnp.shape(y)[0]
        dy = jnp.reshape(dout, (-1,)) @ jnp.reshape(x, (-1, n))
        return sum_to(jnp.expand_dims(dout, -1) * y, x), sum_to(dy, y)
    if x.ndim == 1:  # a vector @ a batch of matrices: dout (..., k) -> (..., 1, k)
        g = jnp.expand_dims(dout, -2)
        dx = jnp.squeeze(g @ jnp.swapaxes(y, -1, -2), -2)
        return sum_to(dx, x), sum_to(jnp.expand_dims(x, -1) * g, y)
    dx = dout @ jnp.swapaxes(y, -1, -2)
    dy = jnp.swapaxes(x, -1, -2) @ dout
    return sum_to(dx, x), sum_to(dy, y)


@rule(Mod)
def bprop_mod(x, y, out, dout):
    return sum_to(dout, x), sum_to(-dout * jnp.floor_divide(x, y), y)


zero_gradient(
    FloorDiv,
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Is,
    IsNot,
    LeftShift,
    RightShift,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    Invert,
)
