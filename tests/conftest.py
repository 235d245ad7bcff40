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
