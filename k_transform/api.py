"""Public entry points of the round trip: `get_ir`, `get_source`, `compile`."""

from __future__ import annotations

import functools

from k_transform import runtime as rt
from k_transform.cell import Cell
from k_transform.codegen.compile import compile_graph, emit_source
from k_transform.frontend.parser import parse
from k_transform.ir.nodes import FuncGraph
from k_transform.ir.printer import print_graph
from k_transform.ir.verify import verify


def graph_of(fn) -> FuncGraph:
    """The verified FuncGraph of a function, bound method, Cell (its
    `construct`), graph, or compiled/gradient function (its graph, so
    gradients of gradients compose)."""
    if isinstance(fn, FuncGraph):
        return fn
    if isinstance(getattr(fn, "__kt_graph__", None), FuncGraph):
        return fn.__kt_graph__
    graph = parse(fn.construct if isinstance(fn, Cell) else fn)
    verify(graph)
    return graph


def get_ir(fn) -> str:
    """The printed FuncGraph IR of `fn` (a function, bound method or Cell)."""
    return print_graph(graph_of(fn))


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
