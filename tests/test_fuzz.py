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
exception, or a failure of JAX itself on the program (a generator bug) fails
the class's test, which runs all its examples first and then reports the
smallest failing program. The table of outcomes by class is printed at the end
of the module.

`make test` runs `EXAMPLES` deterministic programs (shared among the classes).
For a long random run (`make fuzz`):

    KT_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_fuzz.py

`KT_FUZZ_CONSTRUCTS=a,b` / `KT_FUZZ_SKIP=a,b` restrict the classes drawn.
Turn a failing program into a named regression test next to the construct's
other tests.
"""

import os
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import check, generator

EXAMPLES = int(os.environ.get("KT_FUZZ_EXAMPLES", "68"))
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

    run()
    assert not mine.failures, mine.failure_report()
