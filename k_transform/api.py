"""Public entry points of the round trip: `get_ir`, `get_source`, `compile`,
and pictures of the IR: `draw`.

- `get_ir(fn)` is the printed IR (`k_transform.ir.printer`); `get_ir(fn,
  format="dot")` the same graphs as graphviz DOT text (`k_transform.ir.dot`).
- `get_source(fn)` is the Python k_transform generates for `fn`.
- `draw(fn, path, what="ir" | "grad")` writes a picture of `fn`'s IR, or of
  the K-graph of its gradient (`kt.grad(fn)`: the gradient graph, the fprop
  graphs the DFunctor made and their bprop closures). The file's suffix picks
  the format: `.dot`/`.gv` is the DOT text; `.svg`, `.png`, `.jpeg`, `.json`
  are rendered by the `graphviz-pure` command (a dependency, a self-contained
  Graphviz port installed by pip), or by a Graphviz `dot` on PATH.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sysconfig

from k_transform import runtime as rt
from k_transform.codegen.compile import compile_graph, emit_source
from k_transform.errors import KTransformError
from k_transform.frontend import python_code
from k_transform.frontend.parser import parse
from k_transform.frontend.targets import arity, target_of
from k_transform.ir.dot import to_dot
from k_transform.ir.nodes import FuncGraph
from k_transform.ir.printer import print_graph
from k_transform.ir.verify import verify
from k_transform.protocol import kt_attribute
from k_transform.transforms import GradSpec, grad_graph

_RENDERED = ("svg", "png", "jpeg", "jpg", "json", "plain")


def graph_of(fn, star_arity: int | None = None) -> FuncGraph:
    """The verified FuncGraph of a function, bound method, Cell (its
    `construct`), graph, or compiled/gradient function (its graph, so
    gradients of gradients compose); wrappers (`jax.jit`, `functools.wraps`),
    `functools.partial` and callable objects are read as
    `k_transform.frontend.callables` says. `star_arity`: the number of
    values in a `*args` parameter, to specialise the graph to (`parse`)."""
    if isinstance(fn, FuncGraph):
        return fn
    graph_for = kt_attribute(fn, "__kt_graph_for__", None)
    if graph_for is not None and star_arity is not None:
        return graph_for(star_arity)
    if isinstance(kt_attribute(fn, "__kt_graph__", None), FuncGraph):
        return fn.__kt_graph__
    if hasattr(type(fn), "__kt_lower__") and arity(fn) is not None:
        fn = target_of(fn, arity(fn))  # `kt.jacrev(f)`: a function calling it
    # a Cell: its `construct`, through its own `bprop` if it has one
    try:
        graph = parse(fn, star_arity=star_arity)
    except KTransformError as exc:  # a plain function may run as Python (python_code)
        graph = python_code.python_graph(fn, exc)
    verify(graph)
    return graph


def get_ir(fn, format: str = "text") -> str:  # noqa: A002 - the natural name
    """The FuncGraph IR of `fn` (a function, bound method or Cell): printed
    (`format="text"`) or as graphviz DOT text (`format="dot"`)."""
    if format == "text":
        return print_graph(graph_of(fn))
    if format == "dot":
        return to_dot(graph_of(fn))
    raise KTransformError(f"get_ir: format must be 'text' or 'dot', not {format!r}")


def draw(fn, path, what: str = "ir") -> str:
    """Write a picture of `fn`'s IR (`what="ir"`) or of its gradient's K-graph
    (`what="grad"`, the gradient w.r.t. the first argument) to `path`; the
    suffix picks the format (module docstring). Returns `path`."""
    if what == "ir":
        graph = graph_of(fn)
    elif what == "grad":
        graph = grad_graph(graph_of(fn), GradSpec())
    else:
        raise KTransformError(f"draw: what must be 'ir' or 'grad', not {what!r}")
    render(to_dot(graph), path)
    return os.fspath(path)


def render(dot_text: str, path) -> None:
    """Write DOT text to `path`: as it is for `.dot`/`.gv`, else rendered by
    graphviz in the format the suffix names."""
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if suffix in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(dot_text)
        return
    if suffix not in _RENDERED:
        raise KTransformError(
            f"cannot draw to {os.fspath(path)!r}: use a .svg, .png, .jpeg, .json or .dot file"
        )
    fmt = "jpeg" if suffix == "jpg" else suffix
    done = subprocess.run(
        [_dot_program(), f"-T{fmt}", "-o", os.fspath(path)],
        input=dot_text.encode(),
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise KTransformError(f"graphviz could not draw {os.fspath(path)!r}: {message}")


def _dot_program() -> str:
    """The graphviz-pure command beside this Python, on PATH, or a Graphviz `dot`."""
    scripts = sysconfig.get_path("scripts")
    for name in ("graphviz-pure", "graphviz-pure.exe"):
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("graphviz-pure") or shutil.which("dot")
    if found is None:
        raise KTransformError(
            "drawing a picture needs Graphviz: `pip install graphviz-pure` (a k_transform "
            "dependency) or a `dot` command on PATH; a .dot path writes the DOT text"
        )
    return found


def get_source(fn) -> str:
    """The Python source k_transform generates for `fn`."""
    if hasattr(fn, "__kt_source__"):
        return fn.__kt_source__
    return emit_source(graph_of(fn))[0]


def compile(fn):  # noqa: A001 - the natural name for the round trip
    """`fn` parsed to IR and generated back to Python: same results, eagerly
    and under `jax.jit`. The returned function carries `__kt_graph__`."""
    graph = graph_of(fn)
    run = compile_graph(graph)

    @functools.wraps(run)  # keeps the signature (jax.jit's static_argnames)
    def compiled(*args, **kwargs):
        names = tuple(kwargs)
        values = rt.as_jax_inputs((*args, *kwargs.values()))  # NumPy: arrays, as under jit
        return run(*values[: len(args)], **dict(zip(names, values[len(args) :], strict=True)))

    compiled.__kt_graph__ = graph
    return compiled
