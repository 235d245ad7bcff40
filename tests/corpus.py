"""A corpus of small Python programs that k_transform must handle.

Each program is an ordinary Python function, written at module level (or
nested where closures are the point), in the subset k_transform parses:
`jax.numpy as jnp`, `numpy as np` (constants only: never on traced values),
`math` (constants only), `jax.nn`, and MindSpore-style `ops` primitives (the
section marked `# needs kt.ops`). Every program runs eagerly as plain Python on
concrete arrays; that run is the oracle the tests compare against.

Registration:

    @program(tags=("control",), seeds=(0, 1, 2))
    def if_traced(x): ...

or `add(fn, name=..., tags=..., seeds=...)` for callables that are not
module-level functions (a bound method, a closure returned by a factory).
`PROGRAMS` maps each name to its `Program`.

Argument NAMES drive the inputs (`Program.args(seed)` builds them):

    x, y, z, w   float32 vectors, shape (4,)
    a, b, c      Python floats (traced under jax.jit)
    m            float32 matrix, shape (3, 4)
    m2           float32 matrix, shape (4, 3)
    v3           float32 vector, shape (3,)
    n            Python int, static: 2 + seed % 4   (2, 3, 4, 5)
    k            Python int, static: 1 + seed % 3   (1, 2, 3)
    i            traced int32 scalar (a jnp array) in [-4, 3]
    flag         Python bool, static: seed % 2 == 0
    t            tuple of two float32 vectors, shape (4,)

Values come from `numpy.random.RandomState(seed).randn(...)`, shifted by
`SHIFTS[seed % 3]`: seed 0 mixed signs, seed 1 mostly positive, seed 2 mostly
negative, so that data-dependent branches and loops take different paths
across a program's seeds. Python floats are rounded to float32 so eager and
jitted runs see the same number. `STATIC_NAMES` (n, k, flag) are the arguments
to mark static under jax.jit.

Programs tagged "ops" (the `# needs kt.ops` section) are registered only when
`k_transform.ops` imports; otherwise their names go to `LEFT_OUT_NEEDS_OPS`,
which a test reports as a failure.
"""

import dataclasses
import inspect
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

try:
    from k_transform import ops
except ImportError:  # not written yet: the `# needs kt.ops` section is then left out,
    ops = None  # and test_roundtrip.test_corpus_needs_kt_ops fails saying so.

# ---------------------------------------------------------------------------
# Registry and inputs
# ---------------------------------------------------------------------------

SHIFTS = (0.0, 1.5, -1.5)
DEFAULT_SEEDS = (0, 1, 2)
STATIC_NAMES = ("n", "k", "flag")


def _vector(size):
    return lambda rng, seed: _array(rng, seed, (size,))


def _matrix(rows, cols):
    return lambda rng, seed: _array(rng, seed, (rows, cols))


def _array(rng, seed, shape):
    values = rng.randn(*shape) + SHIFTS[seed % 3]
    return jnp.asarray(values.astype(np.float32))


def _float(rng, seed):
    return float(np.float32(rng.randn() + SHIFTS[seed % 3]))


INPUTS = {
    "x": _vector(4),
    "y": _vector(4),
    "z": _vector(4),
    "w": _vector(4),
    "a": _float,
    "b": _float,
    "c": _float,
    "m": _matrix(3, 4),
    "m2": _matrix(4, 3),
    "v3": _vector(3),
    "n": lambda rng, seed: 2 + seed % 4,
    "k": lambda rng, seed: 1 + seed % 3,
    "i": lambda rng, seed: jnp.asarray(rng.randint(-4, 4), dtype=jnp.int32),
    "flag": lambda rng, seed: seed % 2 == 0,
    "t": lambda rng, seed: (_array(rng, seed, (4,)), _array(rng, seed, (4,))),
}


@dataclasses.dataclass(frozen=True)
class Program:
    """One corpus entry: a callable, its tags, and the seeds of its inputs."""

    name: str
    fn: Callable
    tags: tuple[str, ...]
    seeds: tuple[int, ...]

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)

    @property
    def static_argnames(self) -> tuple[str, ...]:
        return tuple(name for name in self.arg_names if name in STATIC_NAMES)

    def args(self, seed: int) -> tuple:
        rng = np.random.RandomState(seed)
        return tuple(INPUTS[name](rng, seed) for name in self.arg_names)


PROGRAMS: dict[str, Program] = {}
LEFT_OUT_NEEDS_OPS: list[str] = []


def add(fn: Callable, *, name: str, tags=(), seeds=DEFAULT_SEEDS) -> Callable:
    """Register `fn` as program `name`; its parameter names must be in INPUTS."""
    if name in PROGRAMS:
        raise ValueError(f"corpus program {name!r} registered twice")
    unknown = [p for p in inspect.signature(fn).parameters if p not in INPUTS]
    if unknown:
        raise ValueError(f"corpus program {name!r}: no input for parameters {unknown}")
    PROGRAMS[name] = Program(name, fn, tuple(tags), tuple(seeds))
    return fn


def program(*, tags=(), seeds=DEFAULT_SEEDS, name=None):
    """Decorator form of `add`; the name defaults to the function's name."""

    def register(fn):
        if "ops" in tags and ops is None:
            LEFT_OUT_NEEDS_OPS.append(name or fn.__name__)
            return fn
        return add(fn, name=name or fn.__name__, tags=tags, seeds=seeds)

    return register


# ---------------------------------------------------------------------------
# Globals and helpers used by the programs
# ---------------------------------------------------------------------------

W_GLOBAL = jnp.array([0.5, -1.0, 1.5, 2.0], dtype=jnp.float32)
SCALE_GLOBAL = 0.75
OFFSET_GLOBAL = np.float32(0.25)
NP_CONST = np.array([1.0, 2.0, 3.0], dtype=np.float32)


def _halves(v):
    return v[:2], v[2:]


def _square_plus(v, c=1.0):
    return v * v + c


def _norm2(v):
    return jnp.sum(_square_plus(v, c=0.0))


def _affine(v, scale=1.0, shift=0.0):
    return v * scale + shift


def _power(x, n):
    return 1.0 if n == 0 else x * _power(x, n - 1)


def _sum_powers(x, n):
    if n == 0:
        return jnp.ones_like(x)
    return x**n + _sum_powers(x, n - 1)


def _even_steps(x, n):
    if n == 0:
        return x
    return _odd_steps(x * 0.5, n - 1)


def _odd_steps(x, n):
    if n == 0:
        return -x
    return _even_steps(x + 1.0, n - 1)


def _apply_twice(f, v):
    return f(f(v))


def _make_scaler(s):
    def scale(v):
        return v * s

    return scale


def _uses_global(v):
    return v - W_GLOBAL


def _clipped_step(v):
    if jnp.max(v) > 2.0:
        return v * 0.5
    return v + 0.25


# ---------------------------------------------------------------------------
# Assignment, unpacking, augmented assignment
# ---------------------------------------------------------------------------


@program(tags=("assign",))
def assign_rebind(x, y):
    u = x + y
    v = u * 2.0
    u = v - x
    p = q = u * 0.5
    return u, v, p + q


@program(tags=("assign", "unpack"))
def tuple_unpack_swap(x, y):
    p, q = x + y, x - y
    p, q = q, p
    return p * q, p


@program(tags=("assign", "unpack"))
def nested_unpack(x, y, z):
    p, (q, r) = x, (y, z)
    [s, (u, v)] = [p + q, (r, q * r)]
    return s * u - v, u


@program(tags=("assign", "unpack"))
def unpack_tuple_argument(t):
    u, v = t
    return u * v, u - v


@program(tags=("assign", "unpack", "call"))
def unpack_from_helper(x):
    first, second = _halves(x)
    (p, q), r = (first[0], first[1]), second
    return second - first, p * q + r


@program(tags=("augassign",))
def augassign_float_ops(x, y):
    s = x + 0.0
    s += y
    s -= 0.5
    s *= y
    s /= 2.0
    s **= 2
    p = jnp.abs(x) + 1.0
    p //= 0.7
    q = x * 3.0
    q %= 1.3
    return s, p, q


@program(tags=("augassign", "static"), seeds=(0, 1, 2, 3))
def augassign_int_ops(x, n):
    j = n
    j += 3
    j -= 1
    j *= 2
    j //= 3
    j %= 5
    j **= 2
    j |= 8
    j &= 13
    j ^= 6
    j <<= 2
    j >>= 1
    return x * j


@program(tags=("augassign", "matmul"))
def augassign_matmul(m, m2, v3):
    p = m
    p @= m2
    p += 1.0
    r = v3
    r @= p
    return p, r


# ---------------------------------------------------------------------------
# Operators: arithmetic, comparison, boolean, unary, conditional expressions
# ---------------------------------------------------------------------------


@program(tags=("arith",))
def arith_binary(x, y):
    d = y * y + 1.0
    return x + y, x - y, x * y, x / d, x**2, jnp.abs(y) ** 1.5, x // 0.6, x % 0.9, 2.0**x


@program(tags=("arith", "static"), seeds=(0, 1, 2, 3))
def arith_unary(x, y, n, flag):
    neg = -x
    pos = +y
    inv = ~n
    mask = ~(x > y)
    off = not flag
    return neg, pos, x * inv, jnp.where(mask, x, y), x + off


@program(tags=("arith", "matmul"))
def matmul_operator(m, m2, x, v3):
    return m @ x, v3 @ m, x @ x, m @ m2, m2 @ (m @ x)


@program(tags=("arith", "float"), seeds=(0, 1, 2, 3))
def python_float_arith(x, a, b):
    c = a * b + a / (b * b + 1.0) - b**2
    d = -a + abs(b)
    e = a // 0.5 + b % 0.75
    return x * c + d, (a - b) * x, x + e


@program(tags=("compare",))
def comparison_operators(x, y):
    rx = jnp.round(x)
    ry = jnp.round(y)
    return (
        (x < y).astype(jnp.float32),
        (x <= y).astype(jnp.float32),
        (x > 0.5).astype(jnp.float32),
        (x >= y).astype(jnp.float32),
        (rx == ry).astype(jnp.float32),
        (rx != ry).astype(jnp.float32),
    )


@program(tags=("compare", "control", "static", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def chained_comparison(x, n):
    if 1 < n <= 3:
        x = x * 2.0
    s = jnp.sum(x)
    if -1.0 < s < 3.0:
        return x + 1.0
    return x - 1.0


@program(tags=("boolop", "static"), seeds=(0, 1, 2, 3))
def boolop_concrete(x, n, flag):
    if flag and n > 2:
        x = x * 2.0
    if not flag or n == 3:
        x = x + 1.0
    j = (flag and n) or 7
    return x * j


@program(tags=("boolop", "control", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def boolop_traced_and(x):
    if jnp.sum(x) > 0 and jnp.max(x) < 2:
        return x * 2.0
    return x - 1.0


@program(tags=("boolop", "control", "traced"), seeds=(0, 1, 2, 3))
def boolop_traced_or_not(x, y):
    if not (jnp.min(x) > 0.0) or jnp.sum(y) > 8.0:
        r = x + y
    else:
        r = x - y
    return r


@program(tags=("boolop", "control", "traced", "static"), seeds=(0, 1, 2, 3))
def boolop_static_then_traced(x, flag):
    if flag and jnp.sum(x) > 0.0:
        x = x * 3.0
    if flag or jnp.sum(x) < 0.0:
        x = x - 1.0
    return x


@program(tags=("boolop", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def boolop_traced_value(x):
    ok = jnp.sum(x) > 0.0 and jnp.min(x) > -1.0
    either = jnp.max(x) > 2.0 or jnp.min(x) < -2.0
    return jnp.where(ok, x, 2.0 * x), jnp.where(either, x, -x)


@program(tags=("ifexp", "traced"))
def ifexp_traced(x, y):
    r = x if jnp.sum(x) > jnp.sum(y) else y * 2.0
    return r


@program(tags=("ifexp", "static"), seeds=(0, 1, 2, 3))
def ifexp_static(x, n, flag):
    s = 2.0 if flag else 3.0
    j = n if n > 2 else -n
    return x * s + j


@program(tags=("ifexp", "float", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def ifexp_nested_float(x, a):
    return x * a if a > 0.0 else (-x if a < -1.0 else x * x)


# ---------------------------------------------------------------------------
# Subscripts and slices
# ---------------------------------------------------------------------------


@program(tags=("subscript",))
def slicing_basic(x, m):
    return x[1:3], m[1:3, ::2], x[::-1], x[-1], m[-1, -2], m[:, 0], x[:-1], m[1], m[::2, 1:]


@program(tags=("subscript",))
def slicing_newaxis(x, m):
    return x[..., None], m[None, :, 1], m[..., 0], x[None], m[:, None, :]


@program(tags=("subscript", "traced"), seeds=(0, 1, 2, 3, 4))
def traced_index(x, m, i):
    return x[i], x[i] * 2.0 + x[0], m[i % 3], m[:, i]


@program(tags=("subscript", "static"), seeds=(0, 1, 2, 3))
def static_index(x, n):
    return x[n - 2], x[: n - 1], x[n - 5]


@program(tags=("subscript", "method"), seeds=(0, 1, 2, 3))
def at_updates(x, y, i):
    a1 = x.at[0].set(1.0)
    a2 = x.at[1:3].add(y[1:3])
    a3 = x.at[i].multiply(2.0)
    a4 = x.at[-1].set(y[0])
    return a1, a2, a3, a4


# ---------------------------------------------------------------------------
# Tuple, list and dict literals
# ---------------------------------------------------------------------------


@program(tags=("container",))
def tuple_literal_index(x, y):
    tup = (x, y, x + y)
    head = tup[0] * tup[-1]
    tail = tup[1:]
    return head, tail, len(tup) * x


@program(tags=("container",))
def list_literal_index(x, y):
    lst = [x, y, x * y]
    return lst[2] - lst[0], lst[-2] * len(lst)


@program(tags=("container",))
def dict_literal(x, y):
    d = {"a": x, "b": y * 2.0}
    return d["a"] + d["b"], d["b"]


@program(tags=("container", "unpack"))
def nested_containers(x, y):
    d = {"pair": (x, y), "items": [x, y, 1.0]}
    p, q = d["pair"]
    return p * q + d["items"][1], d["items"][2] * x


@program(tags=("container",))
def return_list(x, y):
    return [x + y, x - y]


# ---------------------------------------------------------------------------
# Module attributes and library calls
# ---------------------------------------------------------------------------


@program(tags=("library",))
def jnp_elementwise(x):
    return (
        jnp.sin(x),
        jnp.cos(x),
        jnp.exp(x),
        jnp.tanh(x),
        jnp.log1p(x * x),
        jnp.sqrt(jnp.abs(x)),
        jnp.maximum(x, 0.1),
        jnp.square(x),
    )


@program(tags=("library",))
def jnp_reductions(m):
    return (
        jnp.sum(m, axis=0),
        jnp.mean(m, axis=1),
        jnp.max(m),
        jnp.min(m, axis=0),
        jnp.sum(m),
        jnp.prod(m[0]),
    )


@program(tags=("library",))
def jnp_constructors(x):
    z = jnp.zeros_like(x)
    o = jnp.ones((2, 3))
    r = jnp.arange(4.0)
    return (
        z + x,
        o * 2.0,
        r * x,
        jnp.stack([x, r]),
        jnp.concatenate([x, r]),
        jnp.where(x > 0, x, r),
        jnp.dot(x, r),
        jnp.outer(x, r),
    )


@program(tags=("library", "global"))
def numpy_constants(x):
    return (
        x * np.pi + np.float32(2.0) * np.e,
        x + np.sqrt(2.0),
        x * np.float32(0.5) + np.sum(NP_CONST),
    )


@program(tags=("library",))
def jax_nn_calls(x):
    return jax.nn.relu(x), jax.nn.sigmoid(x), jax.nn.softplus(x), jax.nn.softmax(x)


@program(tags=("library",))
def math_module(x):
    return x * math.pi + math.sqrt(2.0), x * math.e - math.exp(1.0), x * math.cos(0.0)


# ---------------------------------------------------------------------------
# Array methods and properties
# ---------------------------------------------------------------------------


@program(tags=("method",))
def array_methods(x, m):
    return (
        x.sum(axis=0),
        m.T,
        x.reshape((2, 2)),
        x * x.shape[0],
        m.mean(),
        x.astype(jnp.float32),
        x.at[0].set(1.0),
    )


@program(tags=("method",))
def array_methods_more(x, m, m2):
    return (
        m.sum(axis=1),
        m.max(),
        x.min(),
        m.reshape(-1),
        x.dot(x),
        m.T @ m2.T,
        x * m.ndim,
        x * x.size,
        m.transpose(),
        x.mean(),
        x.clip(min=-0.5, max=0.5),
    )


# ---------------------------------------------------------------------------
# Calls to user functions: helpers, keywords, defaults, recursion, higher order
# ---------------------------------------------------------------------------


@program(tags=("call",))
def call_helper(x):
    return _square_plus(x)


@program(tags=("call",))
def call_helper_chain(x, y):
    return _norm2(x) * y + _square_plus(y, 2.0)


@program(tags=("call", "float"))
def call_keywords(x, y, a):
    return _affine(x, shift=y, scale=a), _affine(shift=a, v=y)


@program(tags=("call",))
def call_defaults(x):
    return _affine(x), _affine(x, 3.0), _square_plus(x, c=-1.0)


@program(tags=("call", "recursion", "static"), seeds=(0, 1, 2, 3))
def recursion_power(x, n):
    return _power(x, n)


@program(tags=("call", "recursion", "static"), seeds=(0, 1, 2, 3))
def recursion_sum_powers(x, n):
    return _sum_powers(x * 0.5, n)


@program(tags=("call", "recursion", "static"), seeds=(0, 1, 2, 3))
def recursion_mutual(x, n):
    return _even_steps(x, n)


@program(tags=("call", "closure", "float"))
def call_higher_order(x, a):
    return (
        _apply_twice(jnp.sin, x),
        _apply_twice(_square_plus, x * 0.5),
        _apply_twice(lambda v: v * a, x),
    )


@program(tags=("call", "control", "traced"), seeds=(0, 1, 2, 3))
def call_helper_with_control(x):
    return _clipped_step(x), _clipped_step(x * 3.0)


# ---------------------------------------------------------------------------
# Closures: nested def, lambda, returned closures, closures over closures
# ---------------------------------------------------------------------------


@program(tags=("closure",))
def closure_nested_def(x, y):
    def f(v):
        return v * y + x

    return f(x) + f(y)


@program(tags=("closure", "float"))
def closure_lambda(x, y, a):
    g = lambda v: v * a + x
    return g(y), g(x)


@program(tags=("closure", "float"))
def closure_returned(x, a):
    f = _make_scaler(a)
    g = _make_scaler(2.0)
    return f(x) + g(x)


@program(tags=("closure",))
def closure_of_closure(x, y):
    def f(v):
        return v + x

    def g(v):
        return f(v) * y

    return g(x), g(y)


@program(tags=("closure", "float"))
def closure_three_levels(x, a):
    def outer(u):
        def inner(v):
            return v * u + a

        return inner(x) + inner(u)

    return outer(x * 2.0)


@program(tags=("closure",))
def closure_late_binding(x, y):
    s = x
    f = lambda v: v * s
    s = y
    return f(x)


@program(tags=("closure",))
def closure_made_locally(x, y):
    def make(c):
        return lambda v: v * c + y

    h = make(x)
    return h(y), make(2.0)(x)


@program(tags=("closure",))
def closure_default_argument(x, y):
    f = lambda v, s=x: v * s
    return f(y), f(y, 3.0)


def _make_affine(scale, bias):
    def affine_closure(x):
        return x * scale + bias

    return affine_closure


def _make_composed(f, g):
    return lambda x: f(g(x))


add(_make_affine(2.5, W_GLOBAL), name="closure_toplevel_cells", tags=("closure", "global"))
add(_make_composed(jnp.tanh, _square_plus), name="closure_toplevel_lambda", tags=("closure",))


# ---------------------------------------------------------------------------
# Globals
# ---------------------------------------------------------------------------


@program(tags=("global",))
def global_constants(x):
    return x * W_GLOBAL + SCALE_GLOBAL, x + OFFSET_GLOBAL


@program(tags=("global", "call"))
def global_in_helper(x):
    return _uses_global(x) * SCALE_GLOBAL


# ---------------------------------------------------------------------------
# A class with `construct`, attributes and a helper method (bound method)
# ---------------------------------------------------------------------------


class Net:
    def __init__(self):
        self.scale = 0.5
        self.w = jnp.array([1.0, -2.0, 0.5, 3.0], dtype=jnp.float32)

    def helper(self, x):
        return jnp.tanh(x) * self.w

    def construct(self, x):
        h = self.helper(x)
        if jnp.sum(h) > 0.0:
            h = h * self.scale
        return h + x


add(Net().construct, name="method_construct", tags=("class", "control"), seeds=(0, 1, 2, 3))


# ---------------------------------------------------------------------------
# if / elif / else
# ---------------------------------------------------------------------------


@program(tags=("control", "traced"))
def if_traced(x):
    if jnp.sum(x) > 0:
        y = x * 2.0
    else:
        y = -x
    return y


@program(tags=("control", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def if_elif_else_traced(x):
    s = jnp.mean(x)
    if s > 1.0:
        r = x - 1.0
    elif s > -1.0:
        r = x * x
    else:
        r = jnp.exp(x)
    return r, s


@program(tags=("control", "static"), seeds=(0, 1, 2, 3))
def if_elif_else_static(x, n):
    if n > 3:
        r = x * n
    elif n == 3:
        r = x + n
    else:
        r = x - n
    return r


@program(tags=("control", "static"), seeds=(0, 1))
def if_flag(x, y, flag):
    if flag:
        out = x + y
    else:
        out = x * y
    return out


@program(tags=("control", "traced"), seeds=(0, 1, 2, 3))
def if_without_else_traced(x):
    y = x
    if jnp.max(x) > 1.0:
        y = y - 1.0
    return y


@program(tags=("control", "traced"), seeds=(0, 1, 2, 3))
def if_new_vars_both_branches(x, y):
    if jnp.sum(x) < jnp.sum(y):
        lo = x
        hi = y
    else:
        lo = y
        hi = x
    return hi - lo, lo


@program(tags=("control", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def if_nested_traced(x, y):
    if jnp.sum(x) > 0.0:
        if jnp.sum(y) > 0.0:
            r = x + y
        else:
            r = x - y
    else:
        if jnp.max(y) > 0.0:
            r = x * y
        else:
            r = -x
    return r


@program(tags=("control", "traced", "static"), seeds=(0, 1, 2, 3))
def if_traced_inside_static(x, flag):
    if flag:
        if jnp.sum(x) > 0.0:
            x = x * 0.5
        else:
            x = x * 4.0
    else:
        x = x + 2.0
    return x


@program(tags=("control", "traced", "float"), seeds=(0, 1, 2, 3))
def if_float_condition(x, a):
    if a > 0.0:
        r = x * a
    else:
        r = x - a
    return r


@program(tags=("control", "traced"), seeds=(0, 1, 2, 3))
def if_some_vars_one_branch(x, y):
    p = x
    q = y
    if jnp.sum(x + y) > 0.0:
        p = p * 2.0
        q = q + p
    else:
        q = q - 1.0
    return p, q


@program(tags=("control", "traced", "subscript"), seeds=(0, 1, 2, 3, 4))
def if_traced_index_condition(x, i):
    if x[i] > 0.0:
        return x.at[i].set(0.0)
    return x


# ---------------------------------------------------------------------------
# while
# ---------------------------------------------------------------------------


@program(tags=("loop", "while", "traced"), seeds=(0, 1, 2, 3))
def while_traced(x):
    while jnp.sum(x) < 10.0:
        x = jnp.abs(x) * 1.5 + 0.1
    return x


@program(tags=("loop", "while", "static"), seeds=(0, 1, 2, 3))
def while_static_counter(x, n):
    j = 0
    while j < n:
        x = x * 0.9 + 0.1
        j += 1
    return x, x * j


@program(tags=("loop", "while", "traced"), seeds=(0, 1, 2, 3))
def while_traced_with_counter(x):
    j = 0
    while j < 5 and jnp.sum(x) < 4.0:
        x = x + 1.0
        j = j + 1
    return x, j


@program(tags=("loop", "while", "traced", "break"), seeds=(0, 1, 2, 3))
def while_break_traced(x):
    j = 0
    while j < 10:
        x = x * 1.2 + 0.1
        if jnp.max(x) > 3.0:
            break
        j += 1
    return x, j


@program(tags=("loop", "while", "traced", "continue"), seeds=(0, 1, 2, 3))
def while_continue_traced(x):
    j = 0
    acc = jnp.zeros_like(x)
    while j < 6:
        j += 1
        x = jnp.sin(x) + 0.4
        if jnp.sum(x) < 1.5:
            continue
        acc = acc + x
    return acc, x


@program(tags=("loop", "while", "traced", "break"), seeds=(0, 1, 2, 3))
def while_true_break_traced(x):
    while True:
        x = jnp.abs(x) + 0.5
        if jnp.sum(x) > 12.0:
            break
    return x


@program(tags=("loop", "while", "static", "break"), seeds=(0, 1, 2, 3))
def while_true_break_static(x, n):
    j = 0
    while True:
        if j >= n:
            break
        x = x * 1.1
        j += 1
    return x


@program(tags=("loop", "while", "traced", "float"), seeds=(0, 1, 2, 3))
def while_float_condition(x, a):
    s = a
    while s < 3.0:
        s = abs(s) * 1.5 + 0.5
        x = x + s
    return x, s


@program(tags=("loop", "while", "for", "traced", "static"), seeds=(0, 1, 2, 3))
def loop_for_around_while(x, n):
    for j in range(n):
        while jnp.sum(x) < j * 2.0:
            x = x + 0.5
        x = x * 0.9
    return x


@program(tags=("loop", "while", "traced"), seeds=(0, 1, 2, 3))
def while_with_if_inside(x, y):
    j = 0
    while jnp.sum(x * x) < 40.0:
        if jnp.sum(x) > 0.0:
            x = x + jnp.abs(y) * 0.25 + 0.5
        else:
            x = x - 0.5
        j = j + 1
    return x, j


# ---------------------------------------------------------------------------
# for
# ---------------------------------------------------------------------------


@program(tags=("loop", "for", "static"), seeds=(0, 1, 2, 3))
def for_range(x, n):
    acc = jnp.zeros_like(x)
    for j in range(n):
        acc = acc + x * j
    return acc


@program(tags=("loop", "for", "static"), seeds=(0, 1, 2, 3))
def for_range_step(x, n):
    acc = x
    for j in range(2, n, 2):
        acc = acc * 0.5 + x**j
    return acc


@program(tags=("loop", "for", "static"), seeds=(0, 1, 2, 3))
def for_range_reverse(x, n):
    acc = jnp.ones_like(x)
    for j in range(n - 1, -1, -1):
        acc = acc * x + j
    return acc


@program(tags=("loop", "for", "container"))
def for_over_tuple(t):
    s = jnp.zeros(4)
    for v in t:
        s = s + v * v
    return s


@program(tags=("loop", "for", "container", "unpack"))
def for_over_tuple_pairs(x, y, z):
    s = x
    for p, q in ((x, y), (y, z)):
        s = s + p * q
    return s


@program(tags=("loop", "for", "container"))
def for_over_list(x, y):
    s = 0.0
    for v in [x, y, x * y]:
        s = s + jnp.sum(v)
    return s


@program(tags=("loop", "for"))
def for_over_rows(m):
    acc = jnp.zeros(4)
    for row in m:
        acc = acc + row * row
    return acc


@program(tags=("loop", "for"))
def for_over_vector(x):
    acc = 0.0
    for v in x:
        acc = acc * 0.5 + v
    return acc


@program(tags=("loop", "for", "static"), seeds=(0, 1, 2, 3, 4))
def for_nested(x, n, k):
    acc = x
    for j in range(n):
        for h in range(k):
            acc = acc * 0.5 + x * (j - h)
    return acc


@program(tags=("loop", "for", "static", "break"), seeds=(0, 1, 2, 3))
def for_break_static(x, n):
    acc = x
    for j in range(n):
        if j == 2:
            break
        acc = acc + x * j
    return acc


@program(tags=("loop", "for", "traced", "break"), seeds=(0, 1, 2, 3))
def for_break_traced(x, n):
    acc = jnp.zeros_like(x)
    for _ in range(n):
        acc = acc + jnp.abs(x)
        if jnp.sum(acc) > 6.0:
            break
    return acc


@program(tags=("loop", "for", "static", "continue"), seeds=(0, 1, 2, 3))
def for_continue_static(x, n):
    acc = x
    for j in range(n):
        if j % 2 == 0:
            continue
        acc = acc + x * j
    return acc


@program(tags=("loop", "for", "traced", "continue"), seeds=(0, 1, 2, 3))
def for_continue_traced(x, n):
    acc = jnp.zeros_like(x)
    for _j in range(n):
        x = jnp.cos(x) * 1.5
        if jnp.min(x) < -0.5:
            continue
        acc = acc + x
    return acc, x


@program(tags=("loop", "for", "static"), seeds=(0, 1, 2, 3))
def for_variable_after_loop(x, n):
    for j in range(n):
        last = x * j
    return last, x * j


@program(tags=("loop", "for"))
def for_rows_variable_after_loop(m):
    for row in m:
        last = row * 2.0
    return last, row


@program(tags=("loop", "for", "traced", "break", "static"), seeds=(0, 1, 2, 3, 4))
def for_nested_break_inner_traced(x, n, k):
    acc = jnp.zeros_like(x)
    for _j in range(n):
        for _h in range(k + 1):
            acc = acc + x * 0.5
            if jnp.max(acc) > 1.5:
                break
        acc = acc - 0.25
    return acc


@program(tags=("loop", "for", "control", "traced"), seeds=(0, 1, 2, 3))
def for_with_if_inside(x, n):
    for j in range(n):
        if jnp.sum(x) > 0.0:
            x = x - 0.5 * j
        else:
            x = x + 1.0
    return x


@program(tags=("loop", "for", "control", "traced"), seeds=(0, 1, 2, 3))
def for_inside_traced_if(x, n):
    if jnp.sum(x) > 0.0:
        for j in range(n):
            x = x * 0.5 + j
    else:
        x = -x
    return x


# ---------------------------------------------------------------------------
# Early return
# ---------------------------------------------------------------------------


@program(tags=("return", "traced"), seeds=(0, 1, 2, 3))
def return_in_if_traced(x):
    if jnp.sum(x) > 0:
        return x * 2.0
    return -x


@program(tags=("return", "traced"), seeds=(0, 1, 2, 3, 4, 5))
def return_in_elif_traced(x):
    s = jnp.max(x)
    if s > 2.0:
        return x - 2.0
    elif s > 0.5:
        y = x * 2.0
        return y
    x = x + 1.0
    return x * x


@program(tags=("return", "static"), seeds=(0, 1, 2, 3))
def return_in_if_static(x, flag):
    if flag:
        return x + 1.0
    return x - 1.0


@program(tags=("return", "loop", "for", "traced"), seeds=(0, 1, 2, 3))
def return_in_loop_traced(x, n):
    for j in range(n):
        x = x * 1.5
        if jnp.max(x) > 2.0:
            return x * j
    return x


@program(tags=("return", "loop", "for", "static"), seeds=(0, 1, 2, 3))
def return_in_loop_static(x, n):
    for j in range(n):
        x = x + 1.0
        if j == 3:
            return x * 10.0
    return x


@program(tags=("return", "loop", "while", "traced"), seeds=(0, 1, 2, 3))
def return_in_while_traced(x):
    while jnp.sum(x) < 10.0:
        x = jnp.abs(x) * 1.5 + 0.1
        if jnp.max(x) > 5.0:
            return x - 1.0
    return x


@program(tags=("return", "loop", "for", "traced", "static"), seeds=(0, 1, 2, 3, 4))
def return_in_nested_loops_traced(x, n, k):
    for _j in range(n):
        for h in range(k):
            x = x + 0.5
            if jnp.sum(x) > 12.0:
                return x, x * h
        x = x * 1.1
    return x, -x


@program(tags=("return", "loop", "for", "static"), seeds=(0, 1, 2, 3, 4))
def return_in_nested_loops_static(x, n, k):
    for j in range(n):
        for h in range(k):
            if j + h == 3:
                return x * j
            x = x + h
    return x


# ---------------------------------------------------------------------------
# print and assert
# ---------------------------------------------------------------------------


@program(tags=("print",), seeds=(0, 1))
def print_values(x, n):
    print("x =", x, "n =", n)
    y = x * 2.0
    print(y)
    return y


@program(tags=("assert", "static"), seeds=(0, 1))
def assert_concrete(x, n, flag):
    assert n > 0, "n must be positive"
    assert x.shape == (4,)
    assert flag or not flag
    return x * n


@program(tags=("assert", "traced"), seeds=(0, 1))
def assert_traced(x):
    assert jnp.all(jnp.isfinite(x)), "x must be finite"
    assert jnp.sum(x * x) >= 0.0
    return x + 1.0


# ---------------------------------------------------------------------------
# needs kt.ops: MindSpore-style primitives
# ---------------------------------------------------------------------------

_SIN = ops.Sin() if ops is not None else None


@program(tags=("ops",))
def ops_sin(x):
    return ops.Sin()(x), _SIN(x * 2.0)


@program(tags=("ops", "matmul"))
def ops_mul_matmul(x, y, m, m2):
    mul = ops.Mul()
    matmul = ops.MatMul()
    return mul(x, y), matmul(m, m2)


@program(tags=("ops",))
def ops_reduce_sum(m):
    reduce_sum = ops.ReduceSum(keep_dims=False)
    return reduce_sum(m, 1), reduce_sum(m, 0)


@program(tags=("ops", "control", "traced"), seeds=(0, 1, 2, 3))
def ops_in_control_flow(x, n):
    sin = ops.Sin()
    mul = ops.Mul()
    for _j in range(n):
        if jnp.sum(x) > 0.0:
            x = sin(x)
        else:
            x = mul(x, x)
    return x


class OpsNet:
    def __init__(self):
        self.matmul = ops.MatMul()
        self.mul = ops.Mul()
        self.w = jnp.array([[1.0, 0.5, -1.0], [0.0, 2.0, 1.0], [1.5, -0.5, 0.25], [1.0, 1.0, 1.0]])

    def construct(self, m):
        return self.mul(self.matmul(m, self.w), 0.5)


if ops is not None:
    add(OpsNet().construct, name="ops_method_construct", tags=("ops", "class"))
else:
    LEFT_OUT_NEEDS_OPS.append("ops_method_construct")
