"""The construct classes of the fuzzer: one `c_<class>` method each.

`Constructs` is mixed into the generator's writer (`generator._Writer`), which
supplies `vector`, `scalar`, `condition`, `target`, `bounded`, `fresh`,
`choice`, `chance`, `integer`, the control statements `s_*` and `helpers`.
Each `c_<class>(scope, depth, indent)` returns the lines of a few statements
that use the construct and end by assigning some vector of the scope, so the
construct's values reach the program's result. The lines are source text, or
an `Alt` where k_transform's text and the JAX oracle's text differ (item
assignment into an array).

Shapes: every value a statement leaves in the scope is a float64 vector of
shape (3,); matrices, lists and counters stay local to their statements.
Names a construct introduces are fresh (`fresh(prefix)`), so constructs nest.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Alt:
    """One line, spelled differently for k_transform and for the JAX oracle."""

    kt: str
    oracle: str

    def pick(self, oracle: bool) -> str:
        return self.oracle if oracle else self.kt


Line = str | Alt

BASE_STATEMENTS = ("if", "range", "while", "tuple", "rows", "closure", "helper")


class Constructs:
    """Statement generators per construct class (a mixin of the writer)."""

    def inner_scope(self, scope, vectors, scalars=()):
        """A scope for the body of a nested `def`: `vectors` plus the
        enclosing readable names (free variables)."""
        return type(scope)([*vectors, *scope.vectors], [], [*scope.scalars, *scalars])

    def vec(self, scope, depth: int = 1) -> str:
        return self.vector(scope, depth)

    def assign_result(self, scope, indent: str, e: str) -> str:
        return f"{indent}{self.target(scope)} = {self.bounded(scope, e)}"

    # -- control: today's base statements ------------------------------------------
    def c_control(self, scope, depth, indent):
        kinds = BASE_STATEMENTS if depth < self.max_depth else ("closure", "helper")
        return getattr(self, "s_" + self.choice(kinds))(scope, depth, indent)

    # -- closures ------------------------------------------------------------------------
    def c_closure_loop(self, scope, depth, indent):
        """A closure defined in a loop (reading the loop index and scope
        variables rebound later in the body), called in and after the loop."""
        i, g = self.fresh("i"), self.fresh("g")
        inner = scope.child("range")
        inner.scalars.append(f"({i} + 1.0)")
        body = self.inner_scope(inner, ["v"])
        lines = [
            f"{indent}for {i} in range({self.integer(1, 3)}):",
            f"{indent}    def {g}(v):",
            f"{indent}        return {self.vec(body, 2)}",
        ]
        if self.chance(4):
            lines.append(self.assign_result(inner, indent + "    ", self.vec(inner)))
        lines.append(self.assign_result(inner, indent + "    ", f"{g}({self.vec(inner)})"))
        if self.chance(5):
            lines.append(self.assign_result(scope, indent, f"{g}({self.vec(scope)})"))
        return lines

    def c_closure_factory(self, scope, depth, indent):
        """`make(a, b)` returns a closure over its arguments (a module-level
        factory, or one nested in `f` that also reads `f`'s variables); the
        closure is called directly, in a loop, and made in a loop."""
        make, g = self.fresh("make"), self.fresh("g")
        nested = self.chance(4)
        outer = self.inner_scope(scope, ["a", "b"]) if nested else type(scope)(["a", "b"], [], [])
        body = type(outer)(["v", *outer.vectors], [], list(outer.scalars))
        pad = indent if nested else ""
        factory = [
            f"{pad}def {make}(a, b):",
            f"{pad}    def {g}(v):",
            f"{pad}        return {self.vec(body, 2)}",
            f"{pad}    return {g}",
        ]
        lines = factory if nested else []
        if not nested:
            self.helpers.append(factory)
        h = self.fresh("h")
        call = f"{make}({self.vec(scope)}, {self.vec(scope)})"
        kind = self.integer(0, 2)
        if kind == 0:
            return lines + [
                f"{indent}{h} = {call}",
                self.assign_result(scope, indent, f"{h}({self.vec(scope)})"),
            ]
        i = self.fresh("i")
        inner = scope.child("range")
        inner.scalars.append(f"({i} + 1.0)")
        lines.append(f"{indent}for {i} in range({self.integer(1, 3)}):")
        if kind == 1:  # made before the loop, called in it
            lines.insert(len(lines) - 1, f"{indent}{h} = {call}")
        else:  # made in the loop
            lines.append(f"{indent}    {h} = {make}({self.vec(inner)}, {self.vec(inner)})")
        lines.append(self.assign_result(inner, indent + "    ", f"{h}({self.vec(inner)})"))
        return lines

    def c_default_arg(self, scope, depth, indent):
        """`def g(v, c=a)` captures `a`'s value now; `a` is then reassigned."""
        g, a = self.fresh("g"), self.target(scope)
        body = type(scope)(["v", "c"], [], [])
        call = f"{g}({self.vec(scope)})"
        if self.chance(2):
            call = f"{g}({self.vec(scope)}, {self.vec(scope)})"
        return [
            f"{indent}def {g}(v, c={a}):",
            f"{indent}    return ({self.vec(body, 2)}) * c",
            f"{indent}{a} = {self.bounded(scope, self.vec(scope))}",
            self.assign_result(scope, indent, call),
        ]

    def c_late_rebind(self, scope, depth, indent):
        """A closure reads `a`, which is reassigned (maybe in a branch) after
        the `def` and before the call: the call sees the new value."""
        g, a = self.fresh("g"), self.target(scope)
        body = self.inner_scope(scope, ["v"])
        lines = [f"{indent}def {g}(v):", f"{indent}    return ({self.vec(body, 2)}) * {a}"]
        rebind = f"{a} = {self.bounded(scope, self.vec(scope))}"
        if self.chance(4):
            lines += [f"{indent}if {self.condition(scope)}:", f"{indent}    {rebind}"]
        else:
            lines.append(indent + rebind)
        return lines + [self.assign_result(scope, indent, f"{g}({self.vec(scope)})")]

    def c_nonlocal(self, scope, depth, indent):
        """A `nonlocal` accumulator (a vector) or counter (a Python int),
        updated by calls in straight code, loops and branches."""
        acc, fn = self.fresh("acc"), self.fresh("add")
        counter = self.chance(3)
        start, update = ("0", f"{acc} += 1") if counter else ("0.0 * x", f"{acc} = {acc} + v")
        lines = [
            f"{indent}{acc} = {start}",
            f"{indent}def {fn}(v):",
            f"{indent}    nonlocal {acc}",
            f"{indent}    {update}",
            f"{indent}    return v * 0.5",
        ]
        where = self.integer(0, 2)
        call = f"{self.target(scope)} = {fn}({self.vec(scope)})"
        if where == 0:
            lines += [indent + call, f"{indent}{fn}({self.vec(scope)})"]
        elif where == 1:
            i = self.fresh("i")
            lines += [f"{indent}for {i} in range({self.integer(1, 3)}):", f"{indent}    {call}"]
        else:
            lines += [f"{indent}if {self.condition(scope)}:", f"{indent}    {call}"]
        use = (
            f"{self.vec(scope)} * ({acc} + 1.0)"
            if counter
            else f"jnp.tanh({acc}) + {self.vec(scope)}"
        )
        return lines + [self.assign_result(scope, indent, use)]

    # -- lists ------------------------------------------------------------------------------
    def use_list(self, scope, indent: str, lst: str) -> str:
        e = self.choice(
            (
                f"jnp.sum(jnp.stack({lst}), axis=0)",
                f"sum({lst})",
                f"jnp.stack({lst})[{self.integer(-1, 0)}]",
                f"jnp.mean(jnp.stack({lst}), axis=0) * {self.vec(scope, 0)}",
            )
        )
        return self.assign_result(scope, indent, f"0.5 * {e}")

    def c_list_append(self, scope, depth, indent):
        """`lst.append` in straight code, in a `for`, in a data-dependent `if`."""
        lst, i = self.fresh("lst"), self.fresh("i")
        inner = scope.child("range")
        inner.scalars.append(f"({i} + 1.0)")
        lines = [f"{indent}{lst} = [{self.vec(scope)}]"]
        if self.chance(4):
            lines.append(f"{indent}{lst}.append({self.vec(scope)})")
        lines.append(f"{indent}for {i} in range({self.integer(1, 3)}):")
        item = f"jnp.tanh({self.vec(inner)})"
        if self.chance(2):  # the list's length depends on the data
            lines += [
                f"{indent}    if {self.condition(inner)}:",
                f"{indent}        {lst}.append({item})",
            ]
        else:
            lines.append(f"{indent}    {lst}.append({item})")
        return lines + [self.use_list(scope, indent, lst)]

    def c_list_setitem(self, scope, depth, indent):
        """`lst[k] = v` with constant and loop indices, then stack / sum."""
        lst, i = self.fresh("lst"), self.fresh("i")
        items = ", ".join(self.vec(scope, 0) for _ in range(3))
        lines = [f"{indent}{lst} = [{items}]"]
        lines.append(f"{indent}{lst}[{self.integer(-3, 2)}] = {self.vec(scope)}")
        if self.chance(4):
            inner = scope.child("range")
            inner.scalars.append(f"({i} + 1.0)")
            lines += [
                f"{indent}for {i} in range({self.integer(1, 3)}):",
                f"{indent}    {lst}[{i}] = jnp.tanh({lst}[{i}] * {self.vec(inner, 0)})",
            ]
        return lines + [self.use_list(scope, indent, lst)]

    # -- arrays -----------------------------------------------------------------------------
    def setitem(self, indent: str, out: str, index: str, value: str, op: str = "") -> Alt:
        """`out[index] (op)= value`, and the oracle's `.at[index]` spelling."""
        method = {"": "set", "+": "add", "*": "multiply"}[op]
        return Alt(
            f"{indent}{out}[{index}] {op}= {value}",
            f"{indent}{out} = {out}.at[{index}].{method}({value})",
        )

    def c_array_setitem(self, scope, depth, indent):
        """Item and slice assignment into a fresh array, in loops and branches."""
        out, i = self.fresh("out"), self.fresh("i")
        fresh = self.choice(("jnp.zeros(3)", f"1.0 * {self.vec(scope, 0)}", "jnp.ones_like(x)"))
        lines: list[Line] = [f"{indent}{out} = {fresh}"]
        inner = scope.child("range")
        inner.scalars.append(f"({i} + 1.0)")
        lines.append(f"{indent}for {i} in range({self.integer(1, 3)}):")
        value = f"jnp.tanh({self.scalar(inner)} + 0.5 * {out}[{i} - 1])"
        if self.chance(4):
            cond = self.condition(inner)
            lines += [f"{indent}    if {cond}:", self.setitem(indent + "        ", out, i, value)]
            lines += [f"{indent}    else:", self.setitem(indent + "        ", out, i, value, "+")]
        else:
            lines.append(self.setitem(indent + "    ", out, i, value, self.choice(("", "+", "*"))))
        a = self.integer(0, 1)
        b = self.integer(a + 1, 3)
        if self.chance(5):
            lines.append(self.setitem(indent, out, f"{a}:{b}", f"({self.vec(scope)})[{a}:{b}]"))
        if self.chance(3):
            k = self.integer(0, 2)
            lines.append(self.setitem(indent, out, str(k), f"jnp.tanh({self.scalar(scope)})", "*"))
        return lines + [self.assign_result(scope, indent, f"{out} * {self.vec(scope, 0)}")]

    def c_at_update(self, scope, depth, indent):
        """`v.at[i].set/add/multiply(...)` with constant, slice and loop indices."""
        method = self.choice(("set", "add", "multiply"))
        t = self.target(scope)
        if self.chance(4):
            i = self.fresh("i")
            inner = scope.child("range")
            inner.scalars.append(f"({i} + 1.0)")
            value = f"jnp.tanh({self.scalar(inner)})"
            return [
                f"{indent}for {i} in range({self.integer(1, 3)}):",
                f"{indent}    {t} = {t}.at[{i}].{method}({value})",
            ]
        if self.chance(4):
            a = self.integer(0, 1)
            b = self.integer(a + 1, 3)
            index, value = f"{a}:{b}", f"({self.vec(scope)})[{a}:{b}]"
        else:
            index, value = str(self.integer(-3, 2)), self.scalar(scope)
        src = self.vec(scope, 0)
        return [self.assign_result(scope, indent, f"{src}.at[{index}].{method}({value})")]

    def c_slices(self, scope, depth, indent):
        """Basic slices of vectors, with steps and negative bounds."""
        v, w = f"({self.vec(scope)})", f"({self.vec(scope, 0)})"
        e = self.choice(
            (
                f"jnp.concatenate([{v}[1:], {v}[:1]]) * {w}",
                f"{v}[::-1] * {w}",
                f"{w} * jnp.sum({v}[:2]) + {v}[-1]",
                f"jnp.concatenate([{v}[:1] * 2.0, {v}[1:]])",
                f"{w} * jnp.sum({v}[-2:] * {v}[:-1])",
                f"{w} * ({v}[::2] @ {v}[1::-1])",
            )
        )
        return [self.assign_result(scope, indent, e)]

    # -- comprehensions, iteration helpers, starred --------------------------------------
    def c_comprehension(self, scope, depth, indent):
        vs = ", ".join(self.vec(scope, 0) for _ in range(self.integer(1, 3)))
        w, k = self.vec(scope, 0), self.fresh("k")
        body = self.inner_scope(scope, ["r"])
        e = self.choice(
            (
                f"sum(v * {w} for v in ({vs},))",
                f"jnp.sum(jnp.stack([jnp.sin(r) * {w} for r in jnp.stack(({vs},))]), axis=0)",
                f"sum([{w} * ({k} + 1.0) for {k} in range(3) if {k} != 1])",
                f"jnp.mean(jnp.stack([jnp.tanh({self.vec(body)}) for r in ({vs},)]), axis=0)",
            )
        )
        return [self.assign_result(scope, indent, f"0.5 * {e}")]

    def c_enumerate_zip(self, scope, depth, indent):
        t, k = self.target(scope), self.fresh("k")
        a_s = ", ".join(self.vec(scope, 0) for _ in range(2))
        b_s = ", ".join(self.vec(scope, 0) for _ in range(2))
        header = self.choice(
            (
                f"for {k}, (a, b) in enumerate(zip(({a_s}), ({b_s}))):",
                f"for {k}, a in enumerate(jnp.stack(({a_s}))):",
                f"for {k}, (a, b) in enumerate(zip(({a_s}), jnp.stack(({b_s})))):",
            )
        )
        b = "b" if "(a, b)" in header else "a"
        return [
            f"{indent}{header}",
            f"{indent}    {t} = jnp.tanh(a * {b} + ({k} + 0.5) * {t})",
        ]

    def c_starred(self, scope, depth, indent):
        items = ", ".join(self.vec(scope, 0) for _ in range(self.integer(2, 4)))
        h, rest = self.fresh("h"), self.fresh("rest")
        kind = self.integer(0, 3)
        if kind == 0:
            lines = [f"{indent}{h}, *{rest} = ({items})"]
        elif kind == 1:
            lines = [f"{indent}*{rest}, {h} = ({items})"]
        elif kind == 2:
            lines = [f"{indent}{h}, *{rest} = jnp.stack(({items}))"]
        else:
            g = self.fresh("g")
            lines = [
                f"{indent}def {g}(*vs):",
                f"{indent}    return sum(vs) * 0.5",
                f"{indent}{rest} = ({items})",
                f"{indent}{h} = {g}(*{rest}) + {g}({self.vec(scope, 0)})",
            ]
        return lines + [self.assign_result(scope, indent, f"{h} + 0.5 * sum({rest})")]

    # -- recursion, static ints, shapes ---------------------------------------------------
    def c_recursion(self, scope, depth, indent):
        """A recursive helper: a static depth (works) or a traced test
        (k_transform refuses it with an error naming the function)."""
        rec = self.fresh("rec")
        body = type(scope)(["v"], [], [])
        step = f"jnp.tanh({self.vec(body)})"
        if self.chance(4):
            head = ["    if d == 0:", "        return v", f"    return {rec}({step}, d - 1)"]
            call = f"{rec}({self.vec(scope)}, {self.integer(0, 3)})"
        else:
            self.refusal_names.append(rec)
            cond = self.condition(body, False)
            head = [
                f"    if d < 4 and {cond}:",
                f"        return {rec}({step}, d + 1)",
                "    return v",
            ]
            call = f"{rec}({self.vec(scope)}, 0)"
        self.helpers.append([f"def {rec}(v, d):", *head])
        return [self.assign_result(scope, indent, call)]

    def c_int_arg(self, scope, depth, indent):
        """`n`, the entry point's static Python int, in `range`, arithmetic,
        `while` bounds and static branches."""
        t, i = self.target(scope), self.fresh("i")
        kind = self.integer(0, 3)
        if kind == 0:
            return [
                f"{indent}for {i} in range(n):",
                f"{indent}    {t} = jnp.tanh({t} * 0.5 + ({i} + 1.0) * {self.vec(scope)})",
            ]
        if kind == 1:
            return [self.assign_result(scope, indent, f"{self.vec(scope)} * (n + 1) / (n + 2.0)")]
        if kind == 2:
            return [
                f"{indent}{i} = 0",
                f"{indent}while {i} < n + 1:",
                f"{indent}    {i} = {i} + 1",
                f"{indent}    {t} = jnp.tanh({t} * n + {self.vec(scope)})",
            ]
        return [
            f"{indent}if n > 1:",
            self.assign_result(scope, indent + "    ", f"{self.vec(scope)} * n"),
            f"{indent}else:",
            self.assign_result(scope, indent + "    ", f"{self.vec(scope)} - n"),
        ]

    def c_shapes(self, scope, depth, indent):
        """A (2, 3) matrix (the input, or stacked vectors): broadcasting
        against (3,), reductions over either axis, `@`, `.T`, `keepdims`."""
        m = self.fresh("m")
        src = (
            "m"
            if self.input_shape == (2, 3)
            else f"jnp.stack(({self.vec(scope)}, {self.vec(scope)}))"
        )
        lines = [f"{indent}{m} = {src} * {self.vec(scope, 0)}"]
        if self.chance(4):
            lines.append(f"{indent}{m} = {m} / (1.0 + jnp.sum({m} ** 2, axis=1, keepdims=True))")
        w = f"({self.vec(scope, 0)})"
        e = self.choice(
            (
                f"jnp.sum({m}, axis=0) * {w}",
                f"jnp.mean({m}, axis=1) @ {m}",
                f"0.2 * {m}.T @ ({m} @ {w})",
                f"{w} * jnp.tanh(jnp.sum({m} @ {w}))",
                f"{m}[1] + jnp.sum({m}[:, 0]) * {w}",
                f"jnp.tanh(jnp.sum({m} * {m}[0], axis=0))",
            )
        )
        return lines + [self.assign_result(scope, indent, e)]

    # -- host effects ------------------------------------------------------------------
    def c_host_effects(self, scope, depth, indent):
        """Host Python the program must run once per call, in order: draws of
        a numpy and a stdlib generator (one dropped), a counter, a global the
        harness rebinds between calls, `print` to a sink, in a loop too (one
        past the parser's unrolling: its K is a loop, whose reverse at second
        order recomputes iterations and replays their draws), and a method of
        the user's object that draws, called in such a loop."""
        kind = self.integer(0, 6)
        if kind == 0:
            d = self.fresh("d")
            return [
                f"{indent}{d} = rng.randn(3)",
                self.assign_result(scope, indent, f"{self.vec(scope)} * {d}"),
            ]
        if kind == 1:
            k = self.fresh("k")
            return [
                f"{indent}{k} = next(counter)",
                self.assign_result(scope, indent, f"({k} % 3 + 1.0) * {self.vec(scope)}"),
            ]
        if kind == 2:
            u = self.fresh("u")
            return [
                f"{indent}{u} = py_rng.random()",
                self.assign_result(scope, indent, f"{u} * {self.vec(scope)}"),
            ]
        if kind == 3:
            return [
                f"{indent}rng.randn(2)",
                f"{indent}print(next(counter), file=sink)",
                self.assign_result(scope, indent, f"SCALE * {self.vec(scope)}"),
            ]
        i = self.fresh("i")
        inner = scope.child("range")
        trips = self.integer(1, 3) if self.chance(4) else self.integer(9, 12)
        draw = "rng.randn(3)" if kind == 4 else "drawer.draw(3)"
        return [
            f"{indent}for {i} in range({trips}):",
            self.assign_result(inner, indent + "    ", f"{self.vec(inner)} * {draw}"),
        ]

    # -- jax.vmap of closures (batched: frontend/batching.py) ------------------------
    def c_vmap(self, scope, depth, indent):
        """`jax.vmap` of a closure over the scope's values (closure-converted
        and batched), of a module-level helper or of `jnp.sin`, over axis 0
        or 1 (`out_axes=1`), with an argument mapped over no axis."""
        lane, m, t = self.fresh("lane"), self.fresh("m"), self.fresh("t")
        body = self.inner_scope(scope, ["r", "s"])
        lines = [f"{indent}{m} = jnp.stack([{self.vec(scope)}, {self.vec(scope)}])"]
        kind = self.integer(0, 2)
        if kind == 0:
            lines += [
                f"{indent}def {lane}(r, s):",
                f"{indent}    return {self.vec(body)} * s + r",
            ]
        elif kind == 1:
            self.helpers.append([f"def {lane}(r, s):", "    return jnp.sin(r) * s + jnp.tanh(r)"])
        else:
            lines.append(f"{indent}{lane} = lambda r, s: jnp.sin(r) * s")
        s_arg = self.vec(scope)
        if self.chance(4):
            call = f"jax.vmap({lane}, in_axes=(0, None))({m}, {s_arg})"
            total = f"jnp.sum({t}, axis=0)"
        else:
            call = f"jax.vmap({lane}, in_axes=(1, None), out_axes=1)({m}.T, {s_arg})"
            total = f"jnp.sum({t}, axis=1)"
        return [*lines, f"{indent}{t} = {call}", self.assign_result(scope, indent, total)]

    # -- Python idioms the parser may not model (they then run as Python) -----------
    def c_python_idioms(self, scope, depth, indent):
        """Everyday Python: `try`/`except`/`finally`, `raise` in a branch not
        taken, `:=`, `for ... else` with `break`, a user class with a method
        and a property, `functools.partial`, `sorted`/`max(key=)` of Python
        values, `slice(a, b)`, a star call, `dict.get`, `getattr(jnp, name)`;
        a class with a `staticmethod`, a `classmethod` and attribute assignment,
        NamedTuple and dataclass carries in `for`/`while`/`if`, a host random
        generator given as an argument, `zip(*pairs)` and `isinstance`, a
        Python `if` on an array's value inside `try` (JAX's jit refuses it:
        "as_jax"), a generator function, `assert`, a name undefined in a
        branch that never runs, a gradient of a closure over the program's
        values inside the program (`kt.grad` there, `jax.grad` in the oracle),
        a user's gradient wrapper over `*args` nested (`egrad(egrad(f))`), a
        user's thin wrapper given the position, a user class's instance
        carried through `for`, `while` and `if`."""
        kind = self.integer(0, 22)
        v, t = self.vec(scope), self.fresh("t")
        if kind == 0:
            return [
                f"{indent}try:",
                f"{indent}    {t} = {v}",
                f"{indent}except ValueError:",
                f"{indent}    {t} = {self.vec(scope)} * 0.0",
                f"{indent}finally:",
                f"{indent}    pass",
                self.assign_result(scope, indent, f"{t} * {self.vec(scope)}"),
            ]
        if kind == 1:
            return [
                f"{indent}if x.shape[-1] != 3:",
                f"{indent}    raise ValueError('three values expected')",
                self.assign_result(scope, indent, v),
            ]
        if kind == 2:
            return [
                f"{indent}if ({t} := {v}).shape[0] > {self.integer(1, 4)}:",
                self.assign_result(scope, indent + "    ", f"{t} * 0.5"),
                f"{indent}else:",
                self.assign_result(scope, indent + "    ", t),
            ]
        if kind == 3:
            i = self.fresh("i")
            inner = scope.child("range")
            return [
                f"{indent}for {i} in range({self.integer(1, 3)}):",
                f"{indent}    if {i} == {self.integer(0, 3)}:",
                f"{indent}        break",
                self.assign_result(inner, indent + "    ", self.vec(inner)),
                f"{indent}else:",
                self.assign_result(scope, indent + "    ", f"{self.vec(scope)} * 0.5"),
            ]
        if kind == 4:
            cls = self.fresh("Lin")
            self.helpers.append(
                [
                    f"class {cls}:",
                    "    def __init__(self, w):",
                    "        self.w = w",
                    "",
                    "    def __call__(self, v):",
                    "        return jnp.tanh(v * self.w)",
                    "",
                    "    @property",
                    "    def double(self):",
                    "        return self.w * 2.0",
                ]
            )
            m = self.fresh("m")
            return [
                f"{indent}{m} = {cls}({self.choice((0.5, 1.5, -0.5))})",
                self.assign_result(scope, indent, f"{m}({v}) * {m}.double"),
            ]
        if kind == 5:
            g = self.fresh("scale")
            self.helpers.append([f"def {g}(v, c):", "    return v * c + jnp.sin(v)"])
            p = self.fresh("p")
            return [
                f"{indent}{p} = functools.partial({g}, c={self.choice((0.5, 2.0))})",
                self.assign_result(scope, indent, f"{p}({v})"),
            ]
        if kind == 6:
            a, b = self.choice((3.0, 0.5)), self.choice((2.0, -1.5))
            return [
                f"{indent}{t} = sorted([{a}, 1.0, {b}])",
                self.assign_result(scope, indent, f"{v} * {t}[0] + {t}[2]"),
            ]
        if kind == 7:
            return [
                f"{indent}{t} = max([{v}, {self.vec(scope)}[:2]], key=lambda a: a.shape[0])",
                self.assign_result(scope, indent, f"{t} * 0.5"),
            ]
        if kind == 8:
            return [
                f"{indent}{t} = {v}[slice({self.integer(0, 1)}, None)]",
                self.assign_result(scope, indent, f"{self.vec(scope)} * jnp.sum({t})"),
            ]
        if kind == 9:
            d = self.fresh("d")
            return [
                f"{indent}{d} = {{'a': {v}}}",
                self.assign_result(scope, indent, f"{d}.get('a', 0.0) * {d}.get('b', 0.5)"),
            ]
        if kind == 10:
            parts = self.fresh("parts")
            return [
                f"{indent}{parts} = ({v}, {self.vec(scope)})",
                self.assign_result(scope, indent, f"getattr(jnp, 'maximum')(*{parts})"),
            ]
        return getattr(self, f"idiom_{kind}")(scope, indent, v, t)

    def idiom_11(self, scope, indent, v, t):
        """A class with a staticmethod, a classmethod and `self.v = ...`."""
        cls = self.fresh("Acc")
        self.helpers.append(
            [
                f"class {cls}:",
                "    def __init__(self, v):",
                "        self.v = v",
                "",
                "    @staticmethod",
                "    def twice(a):",
                "        return a * 2.0",
                "",
                "    @classmethod",
                "    def make(cls, v):",
                "        return cls(jnp.tanh(v))",
                "",
                "    def add(self, w):",
                "        self.v = self.v + w",
            ]
        )
        return [
            f"{indent}{t} = {cls}.make({v})",
            f"{indent}{t}.add({cls}.twice({self.vec(scope)}))",
            self.assign_result(scope, indent, f"{t}.v"),
        ]

    def idiom_12(self, scope, indent, v, t):
        """A NamedTuple or a dataclass carried through `for`, `while` and `if`."""
        cls = self.fresh("State")
        if self.chance(4):
            self.helpers.append(
                [f"class {cls}(typing.NamedTuple):", "    h: object", "    c: object"]
            )
            step = f"{t}._replace(h=jnp.tanh({t}.h + {t}.c))"
        else:
            self.helpers.append(
                ["@dataclasses.dataclass", f"class {cls}:", "    h: object", "    c: object"]
            )
            step = f"{cls}(jnp.tanh({t}.h + {t}.c), {t}.c)"
        renew = f"{t} = {cls}(jnp.tanh({t}.h * {t}.c), {t}.c * 0.9)"
        return self.carried(scope, indent, v, t, cls, renew, f"{t} = {step}")

    def carried(self, scope, indent, v, t, cls, for_step, while_step):
        """`t = cls(v, ...)` (fields h, c) carried through a `for` running
        `for_step`, a `while` running `while_step` and a traced `if`."""
        k, i = self.fresh("k"), self.fresh("i")
        return [
            f"{indent}{t} = {cls}({v}, {self.vec(scope)})",
            f"{indent}for {i} in range({self.integer(1, 3)}):",
            f"{indent}    {for_step}",
            f"{indent}{k} = 0",
            f"{indent}while {k} < {self.integer(1, 3)}:",
            f"{indent}    {while_step}",
            f"{indent}    {k} = {k} + 1",
            f"{indent}if {self.condition(scope)}:",
            f"{indent}    {t} = {cls}({t}.c, {t}.h)",
            self.assign_result(scope, indent, f"{t}.h * {t}.c"),
        ]

    def idiom_13(self, scope, indent, v, t):
        """A random generator made in the program and given to a helper."""
        g = self.fresh("noisy")
        self.helpers.append([f"def {g}(rs, v):", "    return v * rs.randn(3)"])
        return [
            f"{indent}{t} = np.random.RandomState({self.integer(0, 9)})",
            self.assign_result(scope, indent, f"{g}({t}, {v})"),
        ]

    def idiom_14(self, scope, indent, v, t):
        """`zip(*pairs)` and `isinstance` of a Python number."""
        a, c = self.fresh("vs"), self.fresh("cs")
        return [
            f"{indent}{a}, {c} = zip(*[({v}, 1.5), ({self.vec(scope)}, 0.5)])",
            f"{indent}if isinstance({c}[0], (int, float)):",
            self.assign_result(scope, indent + "    ", f"{a}[0] * {c}[0] + {a}[1] * {c}[1]"),
        ]

    def idiom_15(self, scope, indent, v, t):
        """A Python `if` on an array's value inside `try` (it runs as Python)."""
        return [
            f"{indent}try:",
            f"{indent}    if {self.condition(scope, False)}:",
            f"{indent}        {t} = {v} * 2.0",
            f"{indent}    else:",
            f"{indent}        {t} = -{v}",
            f"{indent}except ValueError:",
            f"{indent}    {t} = {v}",
            self.assign_result(scope, indent, f"jnp.tanh({t})"),
        ]

    def idiom_16(self, scope, indent, v, t):
        """A generator function's rows, summed."""
        g = self.fresh("rows")
        self.helpers.append(
            [
                f"def {g}(v):",
                f"    for k in range({self.integer(1, 3)}):",
                "        yield v * (k + 1.0)",
            ]
        )
        return [self.assign_result(scope, indent, f"jnp.tanh(sum({g}({v})))")]

    def idiom_17(self, scope, indent, v, t):
        """`assert` on values (runs on them without a jit, as under jax.grad)."""
        return [
            f"{indent}assert jnp.all(jnp.isfinite({v}))",
            self.assign_result(scope, indent, f"{v} * 0.5"),
        ]

    def idiom_19(self, scope, indent, v, t):
        """A gradient of a closure over the program's values, in the program."""
        inner = f"lambda w: jnp.sum(jnp.sin(w) * {v})"
        return [
            Alt(f"{indent}{t} = kt.grad({inner})({v})", f"{indent}{t} = jax.grad({inner})({v})"),
            self.assign_result(scope, indent, f"jnp.tanh({t})"),
        ]

    def idiom_18(self, scope, indent, v, t):
        """A name that is not defined, in a branch that never runs."""
        return [
            f"{indent}if x.shape[0] > 5:",
            f"{indent}    {t} = not_defined_anywhere * {v}",
            f"{indent}else:",
            f"{indent}    {t} = {v} * 1.5",
            self.assign_result(scope, indent, t),
        ]

    def idiom_20(self, scope, indent, v, t):
        """A user's elementwise-gradient wrapper over `*args`, nested."""
        egrad, act = self.fresh("egrad"), self.fresh("act")
        self.helpers.append(
            [
                f"def {egrad}(fun):",
                "    def summed(*args):",
                "        return jnp.sum(fun(*args))",
                "",
                Alt("    return kt.grad(summed)", "    return jax.grad(summed)"),
            ]
        )
        self.helpers.append([f"def {act}(v):", "    return jnp.sin(v) * 0.5 + v"])
        inner = self.choice((f"{egrad}({act})", f"{egrad}({egrad}({act}))", f"{egrad}(jnp.tanh)"))
        return [
            f"{indent}{t} = {inner}({v})",
            self.assign_result(scope, indent, f"jnp.tanh({t}) * {self.vec(scope)}"),
        ]

    def idiom_21(self, scope, indent, v, t):
        """A user's thin wrapper over the gradient API, given the position and
        a lambda (reading the program's values, or not)."""
        grad = self.fresh("grad")
        self.helpers.append(
            [
                f"def {grad}(f, argnum=0):",
                Alt(
                    "    return kt.grad(f, grad_position=argnum)",
                    "    return jax.grad(f, argnums=argnum)",
                ),
            ]
        )
        w = self.vec(scope)
        if self.chance(2):
            call = f"{grad}(lambda a, b: jnp.sum(jnp.sin(a) * b), 1)({v}, {w})"
        else:
            call = f"{grad}(lambda a: jnp.sum(jnp.sin(a) * {w}))({v})"
        return [f"{indent}{t} = {call}", self.assign_result(scope, indent, f"jnp.tanh({t})")]

    def idiom_22(self, scope, indent, v, t):
        """A user class's instance carried through `for`, `while` and `if`."""
        cls = self.fresh("Carry")
        self.helpers.append(
            [
                f"class {cls}:",
                "    def __init__(self, h, c):",
                "        self.h = h",
                "        self.c = c",
                "",
                "    def step(self):",
                f"        return {cls}(jnp.tanh(self.h * self.c), self.c * 0.9)",
            ]
        )
        return self.carried(
            scope, indent, v, t, cls, f"{t} = {t}.step()", f"{t}.h = jnp.tanh({t}.h + {t}.c)"
        )

    # -- names sharing one list, dict or object (frontend/mutation.py, effects.py) --
    def c_walrus(self, scope, depth, indent):
        """Assignment expressions: in an `if` test (traced or on a shape), in
        an expression that reads the name again, as a call's argument, in a
        `while` test counting (static) or halving a traced scalar, in a
        comprehension or a branch of `x if c else y` (the name leaks to the
        function: run as Python), and the name read after the statement."""
        w, k = self.fresh("w"), self.fresh("k")
        v1, v2 = self.vec(scope), self.vec(scope)
        kind = self.integer(0, 6)
        if kind == 0:
            op = self.choice((">", "<"))
            lines = [
                f"{indent}if ({w} := {self.scalar(scope)}) {op} {self.choice((0.0, 0.3, -0.5))}:",
                self.assign_result(scope, indent + "    ", f"{w} * {v1}"),
                f"{indent}else:",
                self.assign_result(scope, indent + "    ", f"{v2} - {w}"),
            ]
            return lines + [self.assign_result(scope, indent, f"{v1} * jnp.tanh({w})")]
        if kind == 1:
            return [self.assign_result(scope, indent, f"({w} := {v1}) * {w} + {v2}")]
        if kind == 2:
            use = f"jnp.maximum({w} := jnp.tanh({v1}), {w} * {w}) + {v2}"
            return [self.assign_result(scope, indent, use)]
        if kind == 3:
            n = self.integer(1, 4)
            return [
                f"{indent}{k} = 0",
                f"{indent}while ({k} := {k} + 1) < {n}:",
                self.assign_result(scope, indent + "    ", f"jnp.tanh({v1}) * {k} + {v2}"),
                self.assign_result(scope, indent, f"{v2} * {k}"),
            ]
        if kind == 4:
            # halving a positive scalar: a traced test, a few trips
            return [
                f"{indent}{w} = 1.0 + jnp.sum(({v1}) ** 2)",
                f"{indent}{k} = 0",
                f"{indent}while ({w} := {w} * 0.5) > 0.2 and {k} < 6:",
                f"{indent}    {k} = {k} + 1",
                self.assign_result(scope, indent + "    ", f"jnp.tanh({v2} + {w})"),
                self.assign_result(scope, indent, f"{v1} * {w}"),
            ]
        if kind == 5:
            use = f"sum([({w} := {v1} * (i + 1)) * 0.5 for i in range(2)]) + {w}"
            return [self.assign_result(scope, indent, use)]
        cond = self.condition(scope, False)
        use = f"({v1} if {cond} else ({w} := {v2}) * {w})"
        return [self.assign_result(scope, indent, use)]

    def c_aliasing(self, scope, depth, indent):
        """Two names for one list or dict: `a = b = []`, `b = a` then `+=`,
        `*=` or `extend` through one name, rows repeated by `*`, a helper
        that appends to its argument, a row taken out of a nested list and
        written; and shallow copies (`list(a)`, `a[:]`, `a.copy()`), which
        share nothing at the top. A change through one name is seen through
        the other, and only there: the result reads both names."""
        a, b = self.fresh("a"), self.fresh("b")
        v1, v2 = self.vec(scope), self.vec(scope)
        kind = self.integer(0, 6)
        if kind == 0:
            lines = [f"{indent}{a} = {b} = []", f"{indent}{a}.append({v1})"]
            lines.append(f"{indent}{b}.append({v2})")
            use = f"{b}[0] - 0.5 * {a}[-1] * len({a})"
        elif kind == 1:
            op = self.choice((f" += [{v2}]", " *= 2", f".extend([{v2}])"))
            lines = [f"{indent}{a} = [{v1}]", f"{indent}{b} = {a}", f"{indent}{b}{op}"]
            use = f"jnp.sum(jnp.stack({a}), axis=0) * 0.5 + {b}[-1]"
        elif kind == 2:
            lines = [f"{indent}{a} = [[{v1}]] * 2", f"{indent}{a}[0].append({v2})"]
            use = f"{a}[1][-1] * len({a}[1]) + {a}[0][0]"
        elif kind == 3:
            push = self.fresh("push")
            self.helpers.append(
                [f"def {push}(lst, v):", "    lst.append(jnp.tanh(v))", "    return len(lst)"]
            )
            lines = [f"{indent}{a} = [{v1}]", f"{indent}{b} = {push}({a}, {v2})"]
            use = f"{a}[-1] * {b} + {a}[0]"
        elif kind == 4:
            lines = [f"{indent}{a} = {{'w': {v1}}}", f"{indent}{b} = {a}"]
            lines.append(f"{indent}{b}['w'] = {b}['w'] * 0.5 + {v2}")
            use = f"{a}['w']"
        elif kind == 5:
            copy = self.choice((f"list({a})", f"{a}[:]", f"{a}.copy()"))
            lines = [f"{indent}{a} = [{v1}]", f"{indent}{b} = {copy}"]
            lines += [f"{indent}{a}.append({v2})", f"{indent}{a}[0] = {a}[0] * 2.0"]
            use = f"{b}[-1] * len({b}) + {a}[-1]"
        else:
            row = self.fresh("row")
            lines = [f"{indent}{a} = [[{v1}, {v2}], [{v2}, {v1}]]", f"{indent}{row} = {a}[0]"]
            lines.append(f"{indent}{row}[1] = jnp.tanh({row}[1]) * 0.5")
            use = f"{a}[0][1] + {a}[1][0] * 0.5"
        return lines + [self.assign_result(scope, indent, use)]

    def c_dicts(self, scope, depth, indent):
        """A dict of vectors changed in place: `update` (keywords or a dict),
        `setdefault`, `|=`, writing every key in a loop over the dict, a
        dict comprehension over `items()`, `get` with a default, `pop`,
        `del` then a new key (its order: `values()` reads in insertion
        order)."""
        d, e = self.fresh("d"), self.fresh("e")
        v3 = self.vec(scope)
        lines = [f"{indent}{d} = {{'p': {self.vec(scope)}, 'q': {self.vec(scope)}}}"]
        kind = self.integer(0, 6)
        if kind == 0:
            update = self.choice((f"q={v3}", f"{{'r': {v3}}}", f"{{'p': {v3}, 'r': {v3}}}"))
            lines.append(f"{indent}{d}.update({update})")
            use = f"0.5 * sum({d}.values()) * len({d})"
        elif kind == 1:
            lines += [f"{indent}{e} = {d}.setdefault('r', {v3})", f"{indent}{d}.setdefault('p', x)"]
            use = f"{d}['r'] * {d}['p'] + {e}"
        elif kind == 2:
            lines.append(f"{indent}{d} |= {{'q': {v3}}}")
            use = f"{d}['q'] + {d}['p']"
        elif kind == 3:
            k = self.fresh("k")
            lines += [f"{indent}for {k} in {d}:", f"{indent}    {d}[{k}] = jnp.tanh({d}[{k}])"]
            use = f"{d}['p'] - 0.5 * {d}['q']"
        elif kind == 4:
            k, w = self.fresh("k"), self.fresh("w")
            lines.append(f"{indent}{e} = {{{k}: {w} * 0.5 for {k}, {w} in {d}.items()}}")
            use = f"{e}['q'] + sum(list({e}.values())) + {d}['p']"
        elif kind == 5:
            lines.append(f"{indent}{e} = {d}.get('r', {v3}) + {d}.pop('q')")
            use = f"{e} * len({d}) + {d}['p']"
        else:
            lines += [f"{indent}del {d}['p']", f"{indent}{d}['s'] = {v3}"]
            use = f"list({d}.values())[0] + 0.5 * list({d}.values())[-1] * len({d})"
        return lines + [self.assign_result(scope, indent, use)]

    def c_objects(self, scope, depth, indent):
        """A user object whose methods change it (`self.total = ...`,
        `self.items.append`, `return self` for chaining), called in straight
        code, in a loop, in a traced branch with the result unused, through
        a second name, after its attribute is set from outside; a property
        reading its state."""
        cls, o = self.fresh("Acc"), self.fresh("o")
        self.helpers.append(
            [
                f"class {cls}:",
                "    def __init__(self, scale):",
                "        self.scale = scale",
                "        self.total = 0.0",
                "        self.items = []",
                "",
                "    def add(self, v):",
                "        self.total = self.total + v * self.scale",
                "        self.items.append(v)",
                "        return self",
                "",
                "    @property",
                "    def count(self):",
                "        return len(self.items)",
            ]
        )
        v1, v2 = self.vec(scope), self.vec(scope)
        lines = [f"{indent}{o} = {cls}({self.choice((-1.5, 0.3, 0.5, 2.0))})"]
        kind = self.integer(0, 5)
        if kind == 0:
            lines += [f"{indent}{o}.add({v1})", f"{indent}{o}.add({v2})"]
        elif kind == 1:
            i = self.fresh("i")
            inner = scope.child("range")
            inner.scalars.append(f"({i} + 1.0)")
            lines += [
                f"{indent}for {i} in range({self.integer(1, 3)}):",
                f"{indent}    {o}.add(jnp.tanh({self.vec(inner)}))",
            ]
        elif kind == 2:
            p = self.fresh("p")
            lines += [f"{indent}{p} = {o}", f"{indent}{p}.add({v1})"]
        elif kind == 3:
            lines += [f"{indent}{o}.scale = 0.25", f"{indent}{o}.add({v1})"]
        elif kind == 4:
            lines += [f"{indent}if {self.condition(scope)}:", f"{indent}    {o}.add({v1})"]
        else:
            lines[0] = f"{indent}{o} = {cls}(0.3).add({v1}).add({v2})"
        use = f"{o}.total * {o}.count + {v2}"
        return lines + [self.assign_result(scope, indent, use)]
