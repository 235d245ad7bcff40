"""Pictures of the IR (`k_transform.ir.dot`, `kt.draw`, `get_ir(format="dot")`)
and the command line (`python -m k_transform`).

The DOT text must be deterministic (the same in another process, where every
uid and id() differs), name every parameter and primitive, and render with
the `graphviz-pure` dependency. The command line prints exactly what the API
returns, and bad input exits with status 2 and one line, no traceback.
"""

import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

import k_transform as kt
from k_transform.api import graph_of
from k_transform.ir.dot import to_dot
from k_transform.ir.nodes import Constant
from k_transform.ir.primitive import Primitive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)


def program(x, y):
    scale = jnp.sum(y)

    def scaled(z):
        return z * scale

    if jnp.sum(x) > 0:
        x = jnp.sin(x)
    else:
        x = jnp.cos(x)
    i = 0
    while i < 3:
        x = x * y
        i = i + 1
    return jnp.sum(scaled(x))


def other(a):
    return jnp.tanh(a) * a


class Doubler(kt.Cell):
    def construct(self, x):
        return jnp.tanh(x) * 2.0


net = Doubler()


# -- the DOT text ---------------------------------------------------------------


def _check_well_formed(text: str) -> None:
    assert text.startswith("digraph k_transform {\n")
    assert text.endswith("}\n")
    depth = 0
    for ch in text.replace('\\"', "").split('"')[::2]:  # outside string literals
        for c in ch:
            depth += {"{": 1, "}": -1}.get(c, 0)
            assert depth >= 0
    assert depth == 0
    assert " at 0x" not in text and "object at" not in text


def _graphs(graph):
    return list(graph.reachable())


@pytest.mark.parametrize("what", ["ir", "grad"])
def test_dot_names_every_graph_parameter_and_primitive(what):
    graph = graph_of(kt.grad(program) if what == "grad" else program)
    text = to_dot(graph)
    _check_well_formed(text)
    graphs = _graphs(graph)
    assert text.count("subgraph cluster_") == len(graphs)
    for g in graphs:
        assert f'label="{g.name}' in text
        for param in g.parameters:
            assert f'label="{param.name}"' in text
        for node in g.nodes:
            fn = node.fn
            if isinstance(fn, Constant) and isinstance(fn.value, Primitive):
                assert fn.value.name in text


def test_dot_draws_control_flow_closures_and_free_variables():
    text = kt.get_ir(program, format="dot")
    for name in ("program_if33_true", "program_if33_false", "program_while38_body", "scaled"):
        assert f'label="{name}"' in text
    assert 'label="x = Sin\\nline 34"' in text  # the user's name and line
    assert "style=dashed" in text  # `scale`, a free variable of `scaled`
    assert "lhead=cluster_" in text  # links to branch, loop and closure graphs
    grad_text = kt.get_ir(kt.grad(program), format="dot")
    assert "program_fprop" in grad_text and "program_bprop" in grad_text
    assert grad_text.count("style=dashed") > text.count("style=dashed")  # bprop closures


def test_dot_of_a_closure_alone_draws_its_free_variables():
    graphs = _graphs(graph_of(kt.grad(program)))
    bprop = next(g for g in graphs if g.name == "program_bprop")
    text = to_dot(bprop)
    _check_well_formed(text)
    assert text.count('label="free: ') == len(bprop.free_variables()) > 0


def test_dot_is_deterministic():
    first = kt.get_ir(program, format="dot")
    first_grad = kt.get_ir(kt.grad(program), format="dot")
    kt.grad(other)(jnp.ones(2))  # transform and run other functions in between
    kt.get_source(kt.grad(kt.grad(other)))
    assert kt.get_ir(program, format="dot") == first
    assert kt.get_ir(kt.grad(program), format="dot") == first_grad
    # another process: every uid and id() differs there
    assert _cli("tests.test_dot_cli:program", "--dot").stdout == first
    assert _cli("tests.test_dot_cli:program", "--dot", "--of", "grad").stdout == first_grad


# -- rendering ------------------------------------------------------------------


def test_draw_renders_svg_png_and_dot(tmp_path):
    svg = kt.draw(program, tmp_path / "program.svg")
    with open(svg, encoding="utf-8") as f:
        content = f.read()
    assert "<svg" in content and "program_while38_body" in content
    png = kt.draw(program, tmp_path / "grad.png", what="grad")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    kt.draw(program, tmp_path / "program.dot")
    assert (tmp_path / "program.dot").read_text() == kt.get_ir(program, format="dot")


def test_draw_and_get_ir_refuse_bad_arguments(tmp_path):
    with pytest.raises(kt.KTransformError, match="svg"):
        kt.draw(program, tmp_path / "program.pdf")
    with pytest.raises(kt.KTransformError, match="what"):
        kt.draw(program, tmp_path / "program.svg", what="jvp")
    with pytest.raises(kt.KTransformError, match="format"):
        kt.get_ir(program, format="png")


# -- the command line -----------------------------------------------------------


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "k_transform", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(
    "flags, expected",
    [
        ((), lambda: kt.get_ir(program)),
        (("--ir",), lambda: kt.get_ir(program)),
        (("--source",), lambda: kt.get_source(program)),
        (("--grad-ir",), lambda: kt.get_ir(kt.grad(program))),
        (("--grad-source",), lambda: kt.get_source(kt.grad(program))),
    ],
)
def test_cli_prints_what_the_api_returns(flags, expected):
    assert _cli("tests.test_dot_cli:program", *flags).stdout == expected()


def test_cli_takes_a_file_path_and_a_dotted_name():
    assert _cli(f"{HERE}:program", "--ir").stdout == kt.get_ir(program)
    assert _cli(f"{HERE}:net").stdout == kt.get_ir(net)  # a Cell: its construct
    assert _cli(f"{HERE}:net.construct", "--source").stdout == kt.get_source(net.construct)


@pytest.mark.parametrize("of, suffix", [("ir", "svg"), ("grad", "png")])
def test_cli_writes_a_picture(tmp_path, of, suffix):
    path = tmp_path / f"program.{suffix}"
    done = _cli("tests.test_dot_cli:program", "--picture", str(path), "--of", of)
    assert done.stdout == f"wrote {path}\n"
    assert path.stat().st_size > 1000


UNSUPPORTED = """
def f(x):
    try:
        return x
    except ValueError:
        return x
"""


@pytest.mark.parametrize(
    "target, message",
    [
        ("tests.test_dot_cli", "expected MODULE:FUNCTION"),
        ("no_such_module_anywhere:f", "cannot import no_such_module_anywhere"),
        ("tests.test_dot_cli:no_such_function", "has no 'no_such_function'"),
        ("tests.test_dot_cli:ROOT", "not a function"),
        ("missing/file.py:f", "no such file"),
        ("{unsupported}:f", "`try/except` is not supported"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(tmp_path, target, message):
    bad = tmp_path / "unsupported.py"
    bad.write_text(UNSUPPORTED)
    done = _cli(target.format(unsupported=bad), check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    if "unsupported" in target:
        assert f"{bad}:3: try:" in lines[0]  # file, line and the source line


def test_cli_refuses_of_grad_without_a_picture():
    done = _cli("tests.test_dot_cli:program", "--source", "--of", "grad", check=False)
    assert done.returncode == 2
    assert "--of grad goes with --dot or --picture" in done.stderr
