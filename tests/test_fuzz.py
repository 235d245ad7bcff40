"""Differential fuzzing: random programs, k_transform vs JAX, in float64.

`tests/fuzz/generator.py` draws small programs as source text, each built
around one construct class (`generator.CONSTRUCTS`: control flow, closures,
defaults, `nonlocal`, list and array mutation, `.at` updates, slices,
comprehensions, `enumerate`/`zip`, starred unpacking, recursion, static int
arguments, (2, 3) matrices); there is one test per class. `tests/fuzz/check.py`
compares value and gradient with JAX's eagerly for every program, jvp and a
Hessian-vector product for one program in `HIGHER_EVERY`, and kt's graph mode
and `jax.jit` of kt's gradient for one in `GRAPH_EVERY` (compiling and
transforming again dominate the run time).

A `KTransformError` counts as a refusal (fine); a mismatch, any other
exception, a program past `check.TIME_LIMIT` seconds (`KT_FUZZ_TIME_LIMIT`),
or a failure of JAX itself on the program (a generator bug) fails
the class's test, which runs all its examples first and then reports the
smallest failing program. The table of outcomes by class is printed at the end
of the module.

`make test` runs `EXAMPLES` deterministic programs (shared among the classes).
For a long random run, `make fuzz` runs 5,000 programs (`KT_FUZZ_EXAMPLES`),
the classes spread over the cores (pytest-xdist), each program logged to
`.fuzz/last.jsonl`, then prints the totals and every failing program
(`tests/fuzz/report.py`).

`KT_FUZZ_CONSTRUCTS=a,b` / `KT_FUZZ_SKIP=a,b` restrict the classes drawn.
`KT_FUZZ_LOG=path` appends one JSON line per program as it is checked
(construct, outcome, and the program when it failed), so a long run split
across processes, or stopped early, still counts what it checked.
Turn a failing program into a named regression test next to the construct's
other tests.
"""

import json
import os
import zlib

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import check, generator

EXAMPLES = int(os.environ.get("KT_FUZZ_EXAMPLES", "20"))  # one per class: CI time
GRAPH_EVERY = int(os.environ.get("KT_FUZZ_GRAPH_EVERY", "4"))
HIGHER_EVERY = int(os.environ.get("KT_FUZZ_HIGHER_EVERY", "2"))
CLASSES = generator.enabled_constructs()
PER_CLASS = max(1, -(-EXAMPLES // len(CLASSES)))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_programs")


@pytest.fixture(scope="module")
def summary(pytestconfig):
    """Outcomes of every class; the table is printed past pytest's capture."""
    result = check.Summary()
    yield result
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nfuzz: {PER_CLASS} programs per class\n{result.table()}", flush=True)


def cases(construct: str):
    @st.composite
    def case(draw):
        program = draw(generator.programs((construct,)))
        x = draw(generator.inputs(program.input_shape))
        v = draw(generator.inputs(program.input_shape))
        return program, x, v

    return case()


def plan_for(program: generator.Program) -> check.Plan:
    h = zlib.crc32(program.kt_source.encode())
    return check.Plan(higher=(h // 8) % HIGHER_EVERY == 0, jit=h % GRAPH_EVERY == 0)


def log(program: generator.Program, outcome: check.Outcome) -> None:
    path = os.environ.get("KT_FUZZ_LOG")
    if not path:
        return
    entry = {"construct": program.construct, "kind": outcome.kind, "check": outcome.check}
    if outcome.kind != "ok":
        entry.update(message=outcome.message, source=program.kt_source)
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


@pytest.mark.parametrize("construct", CLASSES)
def test_fuzz_matches_jax(construct, fuzz_dir, summary):
    mine = check.Summary()

    @settings(
        max_examples=PER_CLASS,
        deadline=None,
        database=None,
        derandomize="KT_FUZZ_EXAMPLES" not in os.environ,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(construct))
    def run(case):
        program, x, v = case
        outcome = check.check(program, x, v, fuzz_dir, plan_for(program))
        mine.record(program, outcome)
        summary.record(program, outcome)
        log(program, outcome)

    run()
    assert not mine.failures, mine.failure_report()


# -- the fuzzer itself --------------------------------------------------------------------
@pytest.mark.parametrize("construct", list(generator.CONSTRUCTS))
def test_generator_every_class_renders_python(construct):
    """Both texts of every class compile; they differ only where an array
    is assigned into (the oracle spells it with `.at`) or a gradient is
    taken inside the program (`jax.grad` there)."""

    # (a loaded machine draws a program slowly: no health check, as for the fuzz run)
    @settings(
        max_examples=5, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(program=generator.programs((construct,)))
    def run(program):
        assert program.construct == construct
        compile(program.kt_source, "kt", "exec")
        compile(program.oracle_source, "oracle", "exec")
        if program.oracle_source != program.kt_source:  # `.at[...]`, `jax.grad` there
            assert ".at[" in program.oracle_source or "jax.grad(" in program.oracle_source

    run()


def _program(kt_body: str, oracle_body: str, construct: str = "control") -> generator.Program:
    head = "import jax.numpy as jnp\n\n\ndef f(x):\n"
    return generator.Program(construct, head + kt_body, head + oracle_body)


def test_check_classifies_outcomes(fuzz_dir):
    """A right program passes, a wrong one is a mismatch, an unsupported
    one is a refusal (a list appended through another name); one whose
    refusal under a jit is JAX's too (a `try`: it runs as Python, whose `if`
    on a traced value JAX's jit cannot decide) is "as_jax"; float64 stays
    scoped to the check."""
    x, v = np.array([0.3, -0.2, 0.7]), np.array([1.0, 0.5, -1.0])
    right = _program("    return jnp.sum(jnp.sin(x))\n", "    return jnp.sum(jnp.sin(x))\n")
    wrong = _program("    return jnp.sum(jnp.sin(x))\n", "    return jnp.sum(jnp.cos(x))\n")
    unsupported = (
        "    try:\n        y = x\n    finally:\n        y = x\n"
        "    if jnp.sum(y) > 0:\n        return jnp.sum(y)\n    return -jnp.sum(y)\n"
    )
    as_jax = _program(unsupported, unsupported)
    # (a change of the caller's array: refused; one of the function's own list
    # through a second name runs as Python since session 29)
    aliased = "    x[0] = 1.0\n    return jnp.sum(x)\n"
    refused = _program(aliased, "    x = x.at[0].set(1.0)\n    return jnp.sum(x)\n")
    plan = check.Plan(higher=True, jit=True)
    assert check.check(right, x, v, fuzz_dir, plan).kind == "ok"
    assert check.check(wrong, x, v, fuzz_dir, plan).kind == "mismatch"
    assert check.check(as_jax, x, v, fuzz_dir, plan).kind == "as_jax"
    assert check.check(refused, x, v, fuzz_dir, plan).kind == "refused"
    assert jnp.zeros(1).dtype == jnp.float32


def test_check_reports_a_program_past_the_time_limit(fuzz_dir, monkeypatch):
    """A hang is an outcome with its program, not a stuck worker."""
    monkeypatch.setattr(check, "TIME_LIMIT", 0.5)
    x, v = np.array([0.3, -0.2, 0.7]), np.array([1.0, 0.5, -1.0])
    body = "    time.sleep(30)\n    return jnp.sum(x)\n"
    slow = _program(body, body)
    source = "import time\n" + slow.kt_source
    slow = generator.Program(slow.construct, source, source)
    outcome = check.check(slow, x, v, fuzz_dir, check.Plan(higher=False, jit=False))
    assert (outcome.kind, outcome.check) == ("timeout", "jax")
    assert jnp.zeros(1).dtype == jnp.float32


def test_check_compares_overflowed_entries_by_being_non_finite():
    """Where JAX overflows (seen: a program whose value is -inf, JAX's gradient
    [-inf, -inf, nan], ours [nan, nan, nan]), ours must overflow at the same
    entries, whatever non-finite value; a finite value there, or a non-finite
    one where JAX is finite, is a mismatch."""
    inf, nan = np.inf, np.nan
    check._close(np.array([nan, nan, nan]), np.array([-inf, -inf, nan]))
    check._close(np.array([-inf, 2.0]), np.array([nan, 2.0]))
    with pytest.raises(AssertionError):
        check._close(np.array([1.0, nan]), np.array([-inf, nan]))
    with pytest.raises(AssertionError):
        check._close(np.array([nan, 2.0]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError):
        check._close(np.array([nan, 2.5]), np.array([inf, 2.0]))
