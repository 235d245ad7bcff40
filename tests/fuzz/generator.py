"""Random small programs as Python source, for differential testing.

`programs()` is a hypothesis strategy of `Program`s: module source text with
one entry point `f(x)` (x: a float32 vector of shape (3,)) and some helper
functions. Programs use arithmetic, `jnp.sin/cos/tanh`, `jnp.exp` of bounded
arguments, `if`/`elif`/`else`, `while` (always bounded by a counter),
`for` over ranges (short ones are unrolled under jit, `range(10)` is scanned),
over tuples of floats and over the rows of a stacked array, `break`,
`continue`, early `return`, closures (defined inside loops and branches and
called there) and calls to module-level helpers. Conditions are data
dependent. Every value a program assigns is a vector of shape (3,), so that
both branches of a traced `if` and every loop carry keep one shape.

`check(program, args, tmp_dir, modes)` writes the source to a real file
(k_transform reads functions with `inspect.getsource`), imports it, and
compares `kt.GradOperation()(f)` in each mode with `jax.grad(f)` run eagerly.

Constructs k_transform is known to mishandle are not generated while the
matching `KNOWN_BUG_*` flag is set (see the flag's comment for the repro).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
from hypothesis import strategies as st

import k_transform as kt

# `break` / early `return` inside `for v in <tuple>` or `for row in <array>`:
# eager and graph fail with "no bprop is registered for len" (array rows), and
# graph mode indexes the tuple with a traced counter (TracerIntegerConversionError).
KNOWN_BUG_EXIT_IN_FOR_EACH = True
# `break` / `continue` in a loop that sits inside an `if` (at any depth):
# "the statement `Break` is not supported by k_transform" (eager and graph).
KNOWN_BUG_EXIT_IN_LOOP_IN_IF = True

RTOL = 1e-4
ATOL = 1e-5
MAX_STATEMENTS = 7
MAX_DEPTH = 3
CONSTANTS = (-1.5, -0.5, -0.25, 0.0, 0.3, 0.5, 1.0, 2.0)  # thresholds, tuple items
MULTIPLIERS = (-1.5, -0.5, 0.3, 0.5, 1.5, 2.0)
UNARY = ("jnp.sin({})", "jnp.cos({})", "jnp.tanh({})", "jnp.exp(jnp.tanh({}))")
BINARY = ("({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + ({}) ** 2))")


@dataclasses.dataclass(frozen=True)
class Program:
    source: str

    @property
    def key(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()[:12]

    def __repr__(self) -> str:  # hypothesis prints this for a failing example
        return f"Program(source=\n{self.source})"


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


class _Writer:
    """Draws one program, statement by statement."""

    def __init__(self, draw):
        self.draw = draw
        self.helpers: list[str] = []
        self.budget = MAX_STATEMENTS
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    def chance(self, p_in_8: int) -> bool:
        return self.draw(st.integers(0, 7)) < p_in_8

    # -- expressions -----------------------------------------------------------
    def leaf(self, scope: _Scope) -> str:
        name = self.choice(scope.vectors)
        kind = self.draw(st.integers(0, 3))
        if kind == 0 and scope.scalars:
            return f"{self.choice(scope.scalars)} * {name}"
        if kind == 1:
            return f"{self.choice(MULTIPLIERS)} * {name}"
        if kind == 2 and "x" in scope.vectors:
            return f"x[{self.draw(st.integers(0, 2))}] * {name}"
        return name

    def vector(self, scope: _Scope, depth: int = 2) -> str:
        kind = self.draw(st.integers(0, 3)) if depth > 0 else 0
        if kind == 0:
            return self.leaf(scope)
        if kind == 1:
            return self.choice(UNARY).format(self.vector(scope, depth - 1))
        if kind == 2:
            a, b = self.vector(scope, depth - 1), self.vector(scope, depth - 1)
            return self.choice(BINARY).format(a, b)
        return f"0.2 * jnp.sum({self.vector(scope, depth - 1)}) * {self.leaf(scope)}"

    def condition(self, scope: _Scope, conjunction: bool = True) -> str:
        kind = self.draw(st.integers(0, 2))
        e = self.vector(scope, 1)
        scalar = (f"jnp.sum({e})", f"({e})[{self.draw(st.integers(0, 2))}]", f"jnp.mean({e})")[kind]
        cond = f"{scalar} {self.choice(('>', '<'))} {self.choice(CONSTANTS)}"
        if conjunction and self.chance(1):
            return f"{cond} and {self.condition(scope, False)}"
        return cond

    # -- statements --------------------------------------------------------------
    def block(self, scope: _Scope, depth: int, indent: str, min_len: int = 1) -> list[str]:
        lines: list[str] = []
        n = self.draw(st.integers(min_len, 3))
        for _ in range(n):
            if self.budget <= 0 and len(lines) >= min_len:
                break
            self.budget -= 1
            lines += self.statement(scope, depth, indent)
        return lines

    def statement(self, scope: _Scope, depth: int, indent: str) -> list[str]:
        kinds = ["assign", "assign", "local", "closure", "helper"]
        if depth < MAX_DEPTH:
            kinds += ["if", "if", "range", "while", "tuple", "rows"]
        loop_exits = scope.loop and not (scope.loop_in_if and KNOWN_BUG_EXIT_IN_LOOP_IN_IF)
        if loop_exits:
            kinds += ["continue"]
        if loop_exits and (scope.loop != "each" or not KNOWN_BUG_EXIT_IN_FOR_EACH):
            kinds += ["break"]
        if not (scope.in_each and KNOWN_BUG_EXIT_IN_FOR_EACH):
            kinds += ["return"]
        return getattr(self, "s_" + self.choice(kinds))(scope, depth, indent)

    def target(self, scope: _Scope) -> str:
        return self.choice(scope.assignable)

    def rhs(self, scope: _Scope) -> str:
        e = self.vector(scope)
        return f"jnp.tanh({e})" if scope.loop else e

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
            n = self.draw(st.integers(1, 3))
            body += [f"    for j in range({n}):", f"        v = jnp.tanh({self.vector(inner)})"]
        body.append(f"    return {self.vector(inner)}")
        self.helpers.append("\n".join(body))
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
        rows = ", ".join(self.vector(scope, 1) for _ in range(self.draw(st.integers(1, 3))))
        inner = scope.child("each")
        inner.vectors.append(r)
        header = f"{indent}for {r} in jnp.stack(({rows},)):"
        return [header] + self.block(inner, depth + 1, indent + "    ")

    def s_while(self, scope, depth, indent):
        k = self.fresh("k")
        bound = self.draw(st.integers(1, 6))
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


@st.composite
def programs(draw) -> Program:
    w = _Writer(draw)
    scope = _Scope(["x", "y", "z"], ["y", "z"], [])
    body = ["    y = x * 0.5 + 0.1", "    z = jnp.sin(x)"]
    body += w.block(scope, 0, "    ")
    body.append(f"    return jnp.sum({w.vector(scope)}) + jnp.sum(y * z)")
    parts = ["import jax.numpy as jnp", *w.helpers, "def f(x):\n" + "\n".join(body)]
    return Program("\n\n\n".join(parts) + "\n")


def inputs() -> st.SearchStrategy:
    """A float32 vector of shape (3,), entries in [-2, 2]."""
    value = st.floats(-2.0, 2.0, allow_nan=False, width=32)
    return st.lists(value, min_size=3, max_size=3).map(lambda v: np.asarray(v, np.float32))


def load(program: Program, tmp_dir: Path):
    """`f` of the program, imported from a real file under `tmp_dir`."""
    name = f"kt_fuzz_{program.key}"
    if name in sys.modules:
        return sys.modules[name].f
    path = tmp_dir / f"{name}.py"
    path.write_text(program.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.f


def check(program: Program, args: list[np.ndarray], tmp_dir: Path, modes: tuple[str, ...]):
    """Assert kt's gradient equals eager `jax.grad` for each input and mode."""
    f = load(program, tmp_dir)
    wants = [np.asarray(jax.grad(f)(a)) for a in args]
    try:
        for mode in modes:
            kt.set_mode(mode)
            grad_f = kt.GradOperation()(f)
            for a, want in zip(args, wants, strict=True):
                got = np.asarray(grad_f(a))
                atol = ATOL * max(1.0, float(np.max(np.abs(want), initial=0.0)))
                np.testing.assert_allclose(
                    got, want, rtol=RTOL, atol=atol, err_msg=f"mode={mode} x={a!r}"
                )
    finally:
        kt.set_mode("graph")
