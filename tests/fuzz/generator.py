"""Random small programs as Python source, for differential testing.

`programs()` is a hypothesis strategy of `Program`s. A program is module
source text with one entry point `f(x)` (x: float64, shape (3,), or (2, 3) for
some `shapes` programs; `f(x, n)` with `n` a static Python int for `int_arg`
programs) and some helper functions. Each program exercises one *construct
class* (`Program.construct`) on top of the control-flow base: arithmetic,
`jnp.sin/cos/tanh`, `jnp.exp` of bounded arguments, `if`/`elif`/`else`,
`while` (always bounded by a counter), `for` over ranges, tuples and rows,
`break`, `continue`, early `return`, closures and module-level helpers.
Conditions are data dependent. Every variable the base statements assign is a
vector of shape (3,), so both branches of a traced `if` and every loop carry
keep one shape.

`CONSTRUCTS` is the table of construct classes (see `constructs.py` for what
each generates); a class set to False is never drawn. `KT_FUZZ_CONSTRUCTS`
(comma separated) restricts a run to some classes, `KT_FUZZ_SKIP` drops some.

One program description renders two texts: `kt_source`, what k_transform is
given, and `oracle_source`, the same program for `jax.grad` (they differ only
where JAX arrays are immutable: `out[i] = v` is spelled `out = out.at[i].set(v)`).

Constructs k_transform is known to mishandle inside the base are not generated
while the matching `KNOWN_BUG_*` flag is set (see the flag's comment).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
from hypothesis import strategies as st

from tests.fuzz.constructs import Alt, Constructs, Line

# `break` / early `return` inside `for v in <tuple>` or `for row in <array>`:
# eager and graph fail with "no bprop is registered for len" (array rows), and
# graph mode indexes the tuple with a traced counter (TracerIntegerConversionError).
KNOWN_BUG_EXIT_IN_FOR_EACH = True
# `break` / `continue` in a loop that sits inside an `if` (at any depth):
# "the statement `Break` is not supported by k_transform" (eager and graph).
KNOWN_BUG_EXIT_IN_LOOP_IN_IF = True

# Construct classes: name -> generated (True) or not. Every class is on by
# default; the integrator turns one off only with a comment naming the bug.
CONSTRUCTS: dict[str, bool] = {
    "control": True,  # if/while/for/break/continue/return, closures, helpers (the base)
    "closure_loop": True,  # closures made in loops, called in and after the loop
    "closure_factory": True,  # closures returned by factory functions
    "default_arg": True,  # `def g(v, c=a)` then `a` reassigned
    "late_rebind": True,  # a closure reads a variable reassigned after its `def`
    "nonlocal": True,  # `nonlocal` counters and accumulators
    "list_append": True,  # `lst.append` in straight code and loops, stack/sum
    "list_setitem": True,  # `lst[k] = v`, then stack/sum
    "array_setitem": True,  # `out[i] = v`, `out[a:b] = v`, `out[i] *= v` in loops/branches
    "at_update": True,  # `x.at[i].set/add/multiply`
    "slices": True,  # `y[1:]`, `y[::-1]`, `y[:2]`
    "comprehension": True,  # list / generator comprehensions, `sum(...)`
    "enumerate_zip": True,  # `enumerate`, `zip`
    "starred": True,  # `h, *rest = xs`, `g(*vs)`, `def g(*vs)`
    "recursion": True,  # recursion, static depth (works) or traced test (refused)
    "int_arg": True,  # `f(x, n)`, `n` a static Python int
    "shapes": True,  # (3,) and (2, 3): broadcasting, axis reductions, `@`
    "host_effects": True,  # random generators, counters, a rebound global, print
    "python_idioms": True,  # try/raise, walrus, for-else, classes, partial, sorted, key=, ...
    "vmap": True,  # `jax.vmap` of closures, helpers, lambdas over axis 0 or 1 (batched)
    "walrus": True,  # `:=` in if/while tests, expressions, call arguments, comprehensions
    "aliasing": True,  # two names for one list or dict, rows shared by `*`, shallow copies
    "dicts": True,  # update, setdefault, |=, pop, del, loops and comprehensions over a dict
    "objects": True,  # a user object's methods changing it: attributes, appends, chaining
}

RTOL = 1e-6
MAX_STATEMENTS = int(os.environ.get("KT_FUZZ_MAX_STATEMENTS", "4"))  # base statements
MAX_DEPTH = 2
CONSTANTS = (-1.5, -0.5, -0.25, 0.0, 0.3, 0.5, 1.0, 2.0)  # thresholds, tuple items
MULTIPLIERS = (-1.5, -0.5, 0.3, 0.5, 1.5, 2.0)
UNARY = ("jnp.sin({})", "jnp.cos({})", "jnp.tanh({})", "jnp.exp(jnp.tanh({}))")
BINARY = ("({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + ({}) ** 2))")


def enabled_constructs() -> list[str]:
    """The classes this run draws from: `CONSTRUCTS`, narrowed by the environment."""
    only = [c for c in os.environ.get("KT_FUZZ_CONSTRUCTS", "").split(",") if c]
    skip = {c for c in os.environ.get("KT_FUZZ_SKIP", "").split(",") if c}
    for name in [*only, *skip]:
        if name not in CONSTRUCTS:
            raise ValueError(f"unknown construct class {name!r}; known: {sorted(CONSTRUCTS)}")
    names = [c for c, on in CONSTRUCTS.items() if on and (not only or c in only)]
    return [c for c in names if c not in skip]


@dataclasses.dataclass(frozen=True)
class Program:
    construct: str
    kt_source: str
    oracle_source: str
    int_arg: int | None = None  # `f(x, n)` is called with this n
    input_shape: tuple[int, ...] = (3,)
    refusal_names: tuple[str, ...] = ()  # a KTransformError must name one of these
    host: bool = False  # host state: checked over three calls (`check.py`)

    @property
    def key(self) -> str:
        return hashlib.sha1(self.kt_source.encode()).hexdigest()[:12]

    def __repr__(self) -> str:
        text = f"Program[{self.construct}](kt_source=\n{self.kt_source}"
        if self.oracle_source != self.kt_source:
            text += f"\noracle_source=\n{self.oracle_source}"
        return text + ")"


def render(lines: list[Line], oracle: bool) -> str:
    return "\n".join(line.pick(oracle) if isinstance(line, Alt) else line for line in lines)


@dataclasses.dataclass
class _Scope:
    vectors: list[str]  # readable vector names
    assignable: list[str]  # vector names a statement may rebind
    scalars: list[str]  # readable scalar expressions (loop indices, tuple items)
    loop: str | None = None  # the innermost loop: "while", "range" or "each"
    in_each: bool = False  # inside some `for` over a tuple or rows
    in_if: bool = False  # inside some `if`
    loop_in_if: bool = False  # the innermost loop is inside some `if`

    def child(self, loop: str | None = None, in_if: bool = False) -> _Scope:
        return _Scope(
            list(self.vectors),
            list(self.assignable),
            list(self.scalars),
            loop or self.loop,
            self.in_each or loop == "each",
            self.in_if or in_if,
            self.in_if if loop else self.loop_in_if,
        )


class _Writer(Constructs):
    """Draws one program, statement by statement; `construct` picks the class
    whose statements (`c_<construct>` in `Constructs`) are mixed in."""

    def __init__(self, draw, construct: str):
        self.draw = draw
        self.construct = construct
        self.control = construct == "control" or CONSTRUCTS["control"]
        self.helpers: list[list[Line]] = []
        self.budget = MAX_STATEMENTS
        self.max_depth = MAX_DEPTH
        self.counter = 0
        self.int_arg: int | None = None
        self.input_shape: tuple[int, ...] = (3,)
        self.refusal_names: list[str] = []  # functions a KTransformError must name

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    def chance(self, p_in_8: int) -> bool:
        return self.draw(st.integers(0, 7)) < p_in_8

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    # -- expressions -----------------------------------------------------------
    def leaf(self, scope: _Scope) -> str:
        name = self.choice(scope.vectors)
        kind = self.integer(0, 3)
        if kind == 0 and scope.scalars:
            return f"{self.choice(scope.scalars)} * {name}"
        if kind == 1:
            return f"{self.choice(MULTIPLIERS)} * {name}"
        if kind == 2 and "x" in scope.vectors:
            return f"x[{self.integer(0, 2)}] * {name}"
        return name

    def vector(self, scope: _Scope, depth: int = 2) -> str:
        kind = self.integer(0, 3) if depth > 0 else 0
        if kind == 0:
            return self.leaf(scope)
        if kind == 1:
            return self.choice(UNARY).format(self.vector(scope, depth - 1))
        if kind == 2:
            a, b = self.vector(scope, depth - 1), self.vector(scope, depth - 1)
            return self.choice(BINARY).format(a, b)
        return f"0.2 * jnp.sum({self.vector(scope, depth - 1)}) * {self.leaf(scope)}"

    def scalar(self, scope: _Scope, depth: int = 1) -> str:
        """A float64 scalar expression."""
        e = self.vector(scope, depth)
        return self.choice((f"jnp.sum({e})", f"({e})[{self.integer(0, 2)}]", f"jnp.mean({e})"))

    def condition(self, scope: _Scope, conjunction: bool = True) -> str:
        cond = f"{self.scalar(scope)} {self.choice(('>', '<'))} {self.choice(CONSTANTS)}"
        if conjunction and self.chance(1):
            return f"{cond} and {self.condition(scope, False)}"
        return cond

    # -- statements --------------------------------------------------------------
    def block(self, scope: _Scope, depth: int, indent: str, min_len: int = 1) -> list[Line]:
        lines: list[Line] = []
        n = self.integer(min_len, 3)
        for _ in range(n):
            if self.budget <= 0 and len(lines) >= min_len:
                break
            self.budget -= 1
            lines += self.statement(scope, depth, indent)
        return lines

    def statement(self, scope: _Scope, depth: int, indent: str) -> list[Line]:
        kinds = ["assign", "assign", "local", "construct"]
        if self.control:
            kinds += ["closure", "helper"]
        if self.control and depth < MAX_DEPTH:
            kinds += ["if", "if", "range", "while", "tuple", "rows"]
        loop_exits = scope.loop and not (scope.loop_in_if and KNOWN_BUG_EXIT_IN_LOOP_IN_IF)
        if self.control and loop_exits:
            kinds += ["continue"]
        if loop_exits and self.control and (scope.loop != "each" or not KNOWN_BUG_EXIT_IN_FOR_EACH):
            kinds += ["break"]
        if self.control and not (scope.in_each and KNOWN_BUG_EXIT_IN_FOR_EACH):
            kinds += ["return"]
        return getattr(self, "s_" + self.choice(kinds))(scope, depth, indent)

    def target(self, scope: _Scope) -> str:
        return self.choice(scope.assignable)

    def rhs(self, scope: _Scope) -> str:
        e = self.vector(scope)
        return f"jnp.tanh({e})" if scope.loop else e

    def bounded(self, scope: _Scope, e: str) -> str:
        """`e`, squashed when it is assigned inside a loop."""
        return f"jnp.tanh({e})" if scope.loop else e

    def s_construct(self, scope, depth, indent):
        return getattr(self, "c_" + self.construct)(scope, depth, indent)

    def s_assign(self, scope, depth, indent):
        return [f"{indent}{self.target(scope)} = {self.rhs(scope)}"]

    def s_local(self, scope, depth, indent):
        """A variable first assigned here, used only later in this block."""
        name = self.fresh("t")
        line = f"{indent}{name} = {self.rhs(scope)}"
        scope.vectors.append(name)
        scope.assignable.append(name)
        return [line]

    def s_closure(self, scope, depth, indent):
        name = self.fresh("g")
        inner = _Scope(["v", *scope.vectors], [], list(scope.scalars))
        lines = [f"{indent}def {name}(v):"]
        if self.chance(4):
            lines += [
                f"{indent}    if {self.condition(inner)}:",
                f"{indent}        return {self.vector(inner)}",
            ]
        lines.append(f"{indent}    return {self.vector(inner)}")
        lines.append(f"{indent}{self.target(scope)} = {name}({self.vector(scope, 1)})")
        return lines

    def s_helper(self, scope, depth, indent):
        name = self.fresh("helper")
        inner = _Scope(["v", "w"], ["v"], [])
        body = [f"def {name}(v, w):"]
        if self.chance(4):
            body += [
                f"    if {self.condition(inner)}:",
                f"        v = {self.vector(inner)}",
                "    else:",
                f"        v = {self.vector(inner)}",
            ]
        else:
            n = self.integer(1, 3)
            body += [f"    for j in range({n}):", f"        v = jnp.tanh({self.vector(inner)})"]
        body.append(f"    return {self.vector(inner)}")
        self.helpers.append(body)
        a, b = self.vector(scope, 1), self.choice(scope.vectors)
        return [f"{indent}{self.target(scope)} = {name}({a}, {b})"]

    def s_if(self, scope, depth, indent):
        lines = [f"{indent}if {self.condition(scope)}:"]
        lines += self.block(scope.child(in_if=True), depth + 1, indent + "    ")
        if self.chance(3):
            lines.append(f"{indent}elif {self.condition(scope)}:")
            lines += self.block(scope.child(in_if=True), depth + 1, indent + "    ")
        if self.chance(4):
            lines.append(f"{indent}else:")
            lines += self.block(scope.child(in_if=True), depth + 1, indent + "    ")
        return lines

    def s_range(self, scope, depth, indent):
        i = self.fresh("i")
        n = self.choice((1, 2, 3, 4, 10))
        inner = scope.child("range")
        inner.scalars.append(f"({i} + 1.0)")
        return [f"{indent}for {i} in range({n}):"] + self.block(inner, depth + 1, indent + "    ")

    def s_tuple(self, scope, depth, indent):
        c = self.fresh("c")
        items = self.draw(st.lists(st.sampled_from(CONSTANTS), min_size=1, max_size=3))
        inner = scope.child("each")
        inner.scalars.append(c)
        header = f"{indent}for {c} in ({', '.join(map(str, items))},):"
        return [header] + self.block(inner, depth + 1, indent + "    ")

    def s_rows(self, scope, depth, indent):
        r = self.fresh("r")
        rows = ", ".join(self.vector(scope, 1) for _ in range(self.integer(1, 3)))
        inner = scope.child("each")
        inner.vectors.append(r)
        header = f"{indent}for {r} in jnp.stack(({rows},)):"
        return [header] + self.block(inner, depth + 1, indent + "    ")

    def s_while(self, scope, depth, indent):
        k = self.fresh("k")
        bound = self.integer(1, 6)
        cond = f"{k} < {bound}"
        if self.chance(6):
            cond = f"{self.condition(scope)} and {cond}"
        lines = [f"{indent}{k} = 0", f"{indent}while {cond}:", f"{indent}    {k} = {k} + 1"]
        return lines + self.block(scope.child("while"), depth + 1, indent + "    ")

    def s_break(self, scope, depth, indent):
        return [f"{indent}if {self.condition(scope)}:", f"{indent}    break"]

    def s_continue(self, scope, depth, indent):
        return [f"{indent}if {self.condition(scope)}:", f"{indent}    continue"]

    def s_return(self, scope, depth, indent):
        return [
            f"{indent}if {self.condition(scope)}:",
            f"{indent}    return jnp.sum({self.vector(scope)})",
        ]

    # -- the entry point -----------------------------------------------------------
    def entry(self) -> list[Line]:
        """`def f(...)`: a prologue, a block with at least one statement of the
        class at top level, and `return <scalar>`."""
        scope = _Scope(["x", "y", "z"], ["y", "z"], [])
        body = self.prologue(scope)
        body += self.block(scope, 0, "    ", min_len=0)
        body += self.s_construct(scope, 0, "    ")
        body += self.block(scope, 0, "    ", min_len=0)
        body.append(f"    return jnp.sum({self.vector(scope)}) + jnp.sum(y * z)")
        params = "x" if self.int_arg is None else "x, n"
        return [f"def f({params}):", *body]

    def prologue(self, scope: _Scope) -> list[Line]:
        lines: list[Line] = []
        if self.construct == "int_arg":
            self.int_arg = self.integer(0, 3)
            scope.scalars.append("(n + 0.5)")
        if self.construct == "shapes" and self.chance(4):  # the input is a (2, 3) matrix
            self.input_shape = (2, 3)
            lines = ["    m = x", "    x = x[0] * 0.5 + jnp.sum(x, axis=0) * 0.25"]
        return lines + ["    y = x * 0.5 + 0.1", "    z = jnp.sin(x)"]


@st.composite
def programs(draw, constructs: tuple[str, ...] | None = None) -> Program:
    names = list(constructs) if constructs is not None else enabled_constructs()
    w = _Writer(draw, draw(st.sampled_from(names)))
    entry = w.entry()
    if w.int_arg is not None:  # jvp and hvp differentiate `f1(x)`, n fixed
        entry += ["", "", "def f1(x):", f"    return f(x, {w.int_arg})"]
    host = w.construct == "host_effects"
    head = [
        "import dataclasses",
        "import functools",
        "import typing",
        "",
        "import jax",
        "import jax.numpy as jnp",
    ]
    if w.construct == "python_idioms":
        head = ["import dataclasses", "import functools", "import typing", ""]
        head += ["import jax", "import jax.numpy as jnp", "import numpy as np", ""]
        head += ["import k_transform as kt"]
    parts = [HOST_HEADER if host else head, *w.helpers, entry]
    texts = ["\n\n\n".join(render(p, oracle) for p in parts) + "\n" for oracle in (False, True)]
    return Program(
        w.construct, texts[0], texts[1], w.int_arg, w.input_shape, tuple(w.refusal_names), host
    )


# The module head of a `host_effects` program: host state the program reads
# and changes. `reset(call)` is the harness's: before the first of three calls
# it seeds the generators and empties the sink; before each call it rebinds
# the global SCALE (Python reads it anew each call).
HOST_HEADER = [
    "import io",
    "import itertools",
    "import random",
    "",
    "import jax.numpy as jnp",
    "import numpy as np",
    "",
    "sink = io.StringIO()",
    "",
    "",
    "class Drawer:",
    "    def __init__(self, gen):",
    "        self.gen = gen",
    "",
    "    def draw(self, n):",
    "        return self.gen.randn(n) * 0.5 + 1.0",
    "",
    "",
    "def reset(call):",
    "    global rng, counter, py_rng, SCALE, drawer",
    "    if call == 0:",
    "        rng = np.random.RandomState(7)",
    "        drawer = Drawer(np.random.RandomState(11))",
    "        counter = itertools.count()",
    "        py_rng = random.Random(7)",
    "        sink.seek(0)",
    "        sink.truncate()",
    "    SCALE = 1.0 + 0.5 * call",
    "",
    "",
    "reset(0)",
]


def inputs(shape: tuple[int, ...]) -> st.SearchStrategy:
    """A float64 array of `shape`, entries in [-2, 2]."""
    size = int(np.prod(shape))
    value = st.floats(-2.0, 2.0, allow_nan=False)
    return st.lists(value, min_size=size, max_size=size).map(
        lambda v: np.asarray(v, np.float64).reshape(shape)
    )
