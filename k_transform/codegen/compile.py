"""Turning generated source into a live Python function.

The source is compiled under a stable pseudo file name and registered with
`linecache`, so tracebacks, `inspect.getsource` and pdb show generated lines.
"""

from __future__ import annotations

import hashlib
import linecache

from k_transform.codegen.emit import ModuleEmitter
from k_transform.ir.nodes import FuncGraph


def emit_source(graph: FuncGraph, comments: bool = True) -> tuple[str, str, dict]:
    """(source, entry function name, globals) for `graph` and what it calls."""
    emitter = ModuleEmitter(comments=comments)
    source, name = emitter.emit_module(graph)
    return source, name, emitter.globals


def compile_graph(graph: FuncGraph):
    """A Python function running the code generated from `graph`."""
    source, name, namespace = emit_source(graph)
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"<k_transform:{name}:{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    exec(code, namespace)
    fn = namespace[name]
    fn.__kt_source__ = source
    return fn
