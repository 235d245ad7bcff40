"""Fixtures shared by test modules."""

from __future__ import annotations

import os
from importlib.metadata import version

# The tests' programs are tiny and run once or twice: XLA's compile is most of
# their time, and its backend optimizations (LLVM's) buy nothing here. Without
# them the tests take about 20% less CPU (two compile-heavy files: 83 -> 67 s);
# XLA's results are the same computation, and k_transform's programs and JAX's
# oracles are compiled alike. Benchmarks and users keep XLA's default. Set
# before JAX starts its backend (the first array); a caller's XLA_FLAGS stay.
_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
# XLA's classic CPU emitters compile the tests' small programs in about half the
# CPU time of its fusion emitters (the api sweep's first 120 cases: 28 -> 15 s;
# the suite: see the README). The XLA of jaxlib 0.11 has no such flag, and an
# unknown flag in XLA_FLAGS aborts the process, so it is set for older ones only.
if tuple(int(p) for p in version("jaxlib").split(".")[:2]) < (0, 11):
    _FAST_COMPILE += " --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = f"{_FAST_COMPILE} {os.environ.get('XLA_FLAGS', '')}"

import jax  # noqa: E402
import pytest  # noqa: E402

import k_transform as kt  # noqa: E402


@pytest.fixture(params=["eager", "graph"])
def mode(request):
    """Each test once per execution mode (op by op, and one compiled program)."""
    kt.set_mode(request.param)
    yield request.param
    kt.set_mode("graph")


@pytest.fixture
def scan_loops():
    """Loops longer than `UNROLL_LIMIT` become `lax.scan`s whatever their size
    (unroll budget 0): for the modules that test the scan machinery itself."""
    old = kt.set_unroll_budget(0)
    yield
    kt.set_unroll_budget(old)


@pytest.fixture
def x64():
    """float64 for one test (`pytestmark = pytest.mark.usefixtures("x64")`)."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


@pytest.fixture
def x64_eager():
    """float64 and eager mode (faster for programs run once) for one test."""
    kt.set_mode("eager")
    with jax.enable_x64(True):
        yield
    kt.set_mode("graph")
