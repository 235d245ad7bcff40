"""Golden text: the IR printer and codegen output for a few programs are pinned.

Run with KT_UPDATE_GOLDEN=1 to rewrite the files after an intended change,
then review the diff. Absolute paths are replaced by `<root>` so the text is
the same on every checkout.
"""

import os
import pathlib

import pytest

import k_transform as kt
from tests import golden_programs as gp

GOLDEN = pathlib.Path(__file__).parent / "golden"
ROOT = str(pathlib.Path(__file__).resolve().parent.parent)
PROGRAMS = [gp.straight_line, gp.branches_and_loops, gp.closures, gp.early_return]


def normalise(text: str) -> str:
    return text.replace(ROOT, "<root>")


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    text = normalise(text)
    if os.environ.get("KT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with KT_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_ir_golden(fn):
    check(f"{fn.__name__}.ir.txt", kt.get_ir(fn))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_source_golden(fn):
    check(f"{fn.__name__}.py.txt", kt.get_source(fn))


def test_grad_source_golden():
    check("straight_line.grad.py.txt", kt.get_source(kt.GradOperation()(gp.straight_line)))


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_output_is_deterministic(fn):
    assert kt.get_source(fn) == kt.get_source(fn)
