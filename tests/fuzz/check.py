"""Running one fuzz program through k_transform and JAX, and tallying outcomes.

`check(program, x, v, tmp_dir, plan)` writes both texts of the program to real
files (k_transform reads functions with `inspect.getsource`), imports them,
and, in float64 (`jax.enable_x64`, scoped to the check), compares at `RTOL`:

- `kt.value_and_grad(f)` eager with eager `jax.value_and_grad(f_oracle)`;
- when `plan.higher`: `kt.jvp(f, (x,), (v,))` eager with `jax.jvp`, and
  `kt.hvp(f, (x,), v)` (a second derivative: jvp of the gradient) eager
  with `jax.jvp(jax.grad(f_oracle), ...)`;
- when `plan.jit`: `kt.value_and_grad(f)` in graph mode (kt's own jit) and
  `jax.jit(kt.value_and_grad(f))`.

`int_arg` programs are called as `f(x, n)` (n static); their jvp and hvp
differentiate `f1(x) = f(x, n)`.

`host` programs (random generators, counters, a rebound global, `print`)
run every computation three times, the program's `reset(call)` before each
(it seeds the generators before the first and rebinds a global), and compare
the three results and what was printed with JAX's three calls: host code
runs once per call, in program order. Their `jax.jit` check is left out
(under a jit host code runs at trace: `tests/test_host_python.py`).

Where JAX's result is not finite (a program that overflows), ours must be
non-finite at the same entries; inf, -inf and nan count alike there (which
comes out depends on the order of the arithmetic), the rest is compared.

The first check that does not pass decides the `Outcome`: "refused" (a
`KTransformError`: accepted, the construct is refused), "mismatch",
"internal" (any other exception, or a refusal of recursion that does not
name the function) or "oracle" (JAX itself failed: a generator bug).
A refusal in graph mode where `jax.jit` of the same program fails too (a
Python `if` on a traced value in code that runs as Python) is JAX's limit,
not ours: the other checks still run, and a program passing them is
"as_jax".
A program that runs past `TIME_LIMIT` seconds (`KT_FUZZ_TIME_LIMIT`, all its
checks together) is a "timeout": a hang or a time blow-up is a failure to
report with its program, not a stuck worker. The limit is a SIGALRM, so it
interrupts Python (tracing, our transforms, eager runs) but waits for a
running XLA compilation to return.

`Summary` tallies outcomes by construct class and prints the table.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib.util
import os
import signal
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import k_transform as kt
from k_transform.errors import KTransformError
from tests.fuzz.generator import RTOL, Program

FAILURES = ("mismatch", "internal", "oracle", "timeout")
TIME_LIMIT = float(os.environ.get("KT_FUZZ_TIME_LIMIT", "300"))
KINDS = ("ok", "as_jax", "refused", *FAILURES)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which checks beyond eager `value_and_grad` a program gets."""

    higher: bool = True  # jvp and hvp (eager)
    jit: bool = True  # graph mode and `jax.jit(kt.value_and_grad(f))`


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: str  # one of KINDS
    check: str = ""  # the check that decided it
    message: str = ""


def load(source: str, tmp_dir: Path, tag: str):
    """The module of `source`, imported from a real file under `tmp_dir`."""
    name = f"kt_fuzz_{tag}"
    if name not in sys.modules:
        path = tmp_dir / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _entry(module, program: Program):
    """(f, its arguments' static part, f1 for jvp/hvp)."""
    if program.int_arg is None:
        return module.f, (), module.f
    return module.f, (program.int_arg,), module.f1


def _calls(mod, program: Program, run):
    """`run()`, or for a host program its three calls and what they printed."""
    if not program.host:
        return run()
    results = []
    for call in range(3):
        mod.reset(call)
        results.append(run())
    printed = np.frombuffer(mod.sink.getvalue().encode(), np.uint8).astype(np.float64)
    return results, printed


def _oracles(mod, program: Program, x, v, plan: Plan) -> dict[str, object]:
    f, extra, f1 = _entry(mod, program)
    wants = {"value_and_grad": _calls(mod, program, lambda: jax.value_and_grad(f)(x, *extra))}
    if plan.higher:
        wants["jvp"] = _calls(mod, program, lambda: jax.jvp(f1, (x,), (v,)))
        wants["hvp"] = _calls(mod, program, lambda: jax.jvp(jax.grad(f1), (x,), (v,))[1])
    return wants


def _checks(mod, program: Program, x, v, plan: Plan):
    """(mode, (name, oracle key, thunk)) for each k_transform computation."""
    f, extra, f1 = _entry(mod, program)
    vg = kt.value_and_grad(f)
    eager = [("value_and_grad eager", "value_and_grad", lambda: vg(x, *extra))]
    if plan.higher:
        eager += [
            ("jvp eager", "jvp", lambda: kt.jvp(f1, (x,), (v,))),
            ("hvp eager", "hvp", lambda: kt.hvp(f1, (x,), v)),
        ]
    static = tuple(range(1, 1 + len(extra)))
    graph = [("value_and_grad graph", "value_and_grad", lambda: vg(x, *extra))]
    if not program.host:
        jitted = lambda: jax.jit(vg, static_argnums=static)(x, *extra)  # noqa: E731
        graph.append(("jax.jit(value_and_grad)", "value_and_grad", jitted))
    checks = [("eager", c) for c in eager] + ([("graph", c) for c in graph] if plan.jit else [])
    return [
        (mode, (name, key, functools.partial(_calls, mod, program, run)))
        for mode, (name, key, run) in checks
    ]


def _close(got, want) -> None:
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, f"structure {got_tree} != {want_tree}"
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"dtype {g.dtype} != {w.dtype}"
        if np.issubdtype(w.dtype, np.inexact) and not np.all(np.isfinite(w)):
            # JAX overflowed here: ours must too, at the same entries; which of
            # inf, -inf or nan comes out depends on the order of the arithmetic.
            overflowed = ~np.isfinite(w)
            assert np.array_equal(~np.isfinite(g), overflowed), f"non-finite at {g} != {w}"
            g, w = g[~overflowed], w[~overflowed]
        atol = 1e-9 * max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=atol)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KTransformError):
        return exc.bare_message.splitlines()[0][:160]
    lines = str(exc).strip().splitlines() or [""]
    return f"{type(exc).__name__}: {lines[0][:160]}"


def _refusal(program: Program, name: str, exc: KTransformError) -> Outcome:
    """A refusal of recursion must name the function; a refusal of another
    construct the program also holds (a closure in a loop) is a refusal."""
    about_recursion = "recursion" in str(exc)
    if about_recursion and not any(n in str(exc) for n in program.refusal_names):
        names = ", ".join(program.refusal_names)
        return Outcome("internal", name, f"refusal does not name {names}: {_describe(exc)}")
    return Outcome("refused", name, _describe(exc))


class _TimeLimit(BaseException):
    """Raised by the alarm; a BaseException, so no `except Exception` of the
    code under test can swallow it."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """SIGALRM after `seconds` (main thread only: elsewhere no limit)."""

    def alarm(signum, frame):
        raise _TimeLimit

    try:
        old = signal.signal(signal.SIGALRM, alarm)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check(program: Program, x: np.ndarray, v: np.ndarray, tmp_dir: Path, plan: Plan) -> Outcome:
    """Run every check of `program` at input `x`, tangent `v`; the first
    check that does not pass, or `TIME_LIMIT`, decides the outcome."""
    state = {"check": "load"}
    try:
        with _time_limit(TIME_LIMIT):
            return _check(program, x, v, tmp_dir, plan, state)
    except _TimeLimit:
        return Outcome("timeout", state["check"], f"over {TIME_LIMIT:g} s")


def _check(program, x, v, tmp_dir, plan, state) -> Outcome:
    kt_mod = load(program.kt_source, tmp_dir, program.key)
    oracle_mod = kt_mod
    if program.oracle_source != program.kt_source:
        oracle_mod = load(program.oracle_source, tmp_dir, program.key + "_oracle")
    with jax.enable_x64(True):
        x, v = jnp.asarray(x), jnp.asarray(v)  # jax arrays, as `jax.grad` passes them
        state["check"] = "jax"
        try:
            wants = _oracles(oracle_mod, program, x, v, plan)
        except Exception as exc:  # noqa: BLE001 -- a generator bug, reported as such
            return Outcome("oracle", "jax", _describe(exc))
        try:
            return _run_checks(kt_mod, oracle_mod, program, x, v, plan, wants, state)
        finally:
            kt.set_mode("graph")


def _jax_jit_refuses(oracle_mod, program: Program, x) -> bool:
    """Whether `jax.jit(jax.value_and_grad(f))` fails too (a Python `if` on a
    traced value in code that runs as Python: JAX refuses it under a jit)."""
    f, extra, _ = _entry(oracle_mod, program)
    static = tuple(range(1, 1 + len(extra)))
    try:
        jax.jit(jax.value_and_grad(f), static_argnums=static)(x, *extra)
    except Exception:  # noqa: BLE001 -- JAX's refusal, whatever its type
        return True
    return False


def _run_checks(mod, oracle_mod, program, x, v, plan, wants, state) -> Outcome:
    """The checks in order; a refusal in graph mode of what `jax.jit` refuses
    too is no failure of ours: the checks go on, and an otherwise passing
    program is "as_jax"."""
    state["check"] = "transform"
    as_jax = None
    try:
        checks = _checks(mod, program, x, v, plan)
    except KTransformError as exc:
        return _refusal(program, "transform", exc)
    except Exception as exc:  # noqa: BLE001
        return Outcome("internal", "transform", _describe(exc))
    for mode, (name, key, run) in checks:
        state["check"] = name
        kt.set_mode(mode)
        try:
            got = run()
        except KTransformError as exc:
            if mode == "graph" and _jax_jit_refuses(oracle_mod, program, x):
                as_jax = as_jax or Outcome("as_jax", name, _describe(exc))
                continue
            return _refusal(program, name, exc)
        except Exception as exc:  # noqa: BLE001
            return Outcome("internal", name, _describe(exc))
        try:
            _close(got, wants[key])
        except AssertionError as exc:
            return Outcome("mismatch", name, " ".join(str(exc).split())[:300])
    return as_jax or Outcome("ok")


class Summary:
    """Outcomes by construct class; the smallest failing program of each
    (class, kind) is kept for the report."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self.reasons: collections.Counter = collections.Counter()
        self.examples: dict[tuple[str, str], tuple[Program, Outcome]] = {}

    def record(self, program: Program, outcome: Outcome) -> None:
        key = (program.construct, outcome.kind)
        self.counts[key] += 1
        if outcome.kind != "ok":
            self.reasons[(*key, outcome.check, outcome.message)] += 1
        old = self.examples.get(key)
        if outcome.kind != "ok" and (old is None or len(program.kt_source) < len(old[0].kt_source)):
            self.examples[key] = (program, outcome)

    @property
    def failures(self) -> int:
        return sum(n for (_, kind), n in self.counts.items() if kind in FAILURES)

    def table(self) -> str:
        constructs = sorted({c for c, _ in self.counts})
        rows = [f"{'construct':<16}{'programs':>9}" + "".join(f"{k:>10}" for k in KINDS)]
        for c in constructs:
            n = sum(self.counts[(c, k)] for k in KINDS)
            rows.append(f"{c:<16}{n:>9}" + "".join(f"{self.counts[(c, k)]:>10}" for k in KINDS))
        total = sum(self.counts.values())
        rows.append(
            f"{'total':<16}{total:>9}"
            + "".join(
                f"{sum(n for (_, k2), n in self.counts.items() if k2 == k):>10}" for k in KINDS
            )
        )
        rows.append("")
        rows.append("not ok, by construct / kind / check / first line of the error (count):")
        for (c, kind, name, message), n in sorted(self.reasons.items()):
            rows.append(f"  {c} / {kind} / {name} ({n}): {message}")
        return "\n".join(rows)

    def failure_report(self) -> str:
        parts = [self.table(), "", "smallest failing program per construct and kind:"]
        for (c, kind), (program, outcome) in sorted(self.examples.items()):
            if kind in FAILURES:
                parts.append(f"--- {c} / {kind} / {outcome.check}: {outcome.message}")
                parts.append(repr(program))
        return "\n".join(parts)
