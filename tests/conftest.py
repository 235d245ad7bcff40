"""Fixtures shared by test modules."""

from __future__ import annotations

import pytest

import k_transform as kt


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
