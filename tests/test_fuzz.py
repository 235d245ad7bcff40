"""Differential fuzzing: random programs, k_transform vs `jax.grad`.

`tests/fuzz/generator.py` draws small programs as source text (nested
`if`/`while`/`for`, `break`, `continue`, early `return`, closures, helper
calls; data-dependent conditions; loops always terminate). Each is written to
a file, imported, and its k_transform gradient compared with eager `jax.grad`
at two inputs: in eager mode for every program, and also in graph (jit) mode
for one program in `GRAPH_EVERY` (compiling dominates the run time).

`make test` runs 300 deterministic examples. For a long random run:

    KT_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_fuzz.py

A failing program is printed in full (hypothesis shrinks it first); turn it
into a named regression test in tests/test_grad_control.py.
"""

import os
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import generator

EXAMPLES = int(os.environ.get("KT_FUZZ_EXAMPLES", "300"))
GRAPH_EVERY = int(os.environ.get("KT_FUZZ_GRAPH_EVERY", "5"))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_programs")


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    derandomize="KT_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=generator.programs(), args=st.lists(generator.inputs(), min_size=2, max_size=2))
def test_fuzz_grad_matches_jax(program, args, fuzz_dir):
    graph = zlib.crc32(program.source.encode()) % GRAPH_EVERY == 0
    modes = ("eager", "graph") if graph else ("eager",)
    generator.check(program, args, fuzz_dir, modes)
