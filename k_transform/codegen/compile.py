"""Turning generated source into a live Python function.

The source is compiled under a stable pseudo file name and registered with
`linecache`, so tracebacks, `inspect.getsource` and pdb show generated lines.
"""

from __future__ import annotations

import hashlib
import linecache
import re

from k_transform.codegen.emit import ModuleEmitter
from k_transform.ir.nodes import FuncGraph
from k_transform.protocol import kt_attribute


def emit_source(graph: FuncGraph, comments: bool = True) -> tuple[str, str, dict]:
    """(source, entry function name, globals) for `graph` and what it calls."""
    source, name, emitter = _emitted(graph, comments)
    return source, name, emitter.globals


def _emitted(graph: FuncGraph, comments: bool = True) -> tuple[str, str, ModuleEmitter]:
    emitter = ModuleEmitter(comments=comments)
    return (*emitter.emit_module(graph), emitter)


def compile_graph(graph: FuncGraph):
    """A Python function running the code generated from `graph`;
    `__kt_files__` maps each generated function's name to the source file
    its `# line N` comments are of (`user_line`); the module's
    `__kt_graphs__` maps each generated def's `__qualname__` to its graph
    (`graph_of`)."""
    source, name, emitter = _emitted(graph)
    namespace = emitter.globals
    namespace["__kt_graphs__"] = emitter.defs
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"<k_transform:{name}:{digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    exec(code, namespace)
    fn = namespace[name]
    fn.__kt_source__, fn.__kt_files__ = source, emitter.files
    return fn


def graph_of(fn) -> FuncGraph | None:
    """The graph a function `compile_graph` generated was emitted from (a
    nested def's too), or None for any other function."""
    graphs = getattr(fn, "__globals__", {}).get("__kt_graphs__")
    return graphs.get(fn.__qualname__) if graphs is not None else None


_COMMENT = re.compile(r"\s*# (?:grad of )?line (\d+): (.*)")


def _is_line_of(file: str, line: int, text: str) -> bool:
    """Whether `text` (a comment's, maybe cut short) is `file`'s line `line`;
    true where the file cannot be read."""
    source = linecache.getline(file, line).strip()
    return not source or source.startswith(text.strip().removesuffix("...").rstrip())


def user_line(exc: BaseException, fn) -> str | None:
    """Where in the user's code the innermost generated line that `exc`
    passed through came from (`fn`: a `compile_graph` function): "File
    ..., line N" and the line, from the nearest `# line N` comment above it
    that is that file's line N (one from a gradient rule inlined there names
    a line of the rule's file: passed over)."""
    frame = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<k_transform:"):
            frame = tb
        tb = tb.tb_next
    files = kt_attribute(fn, "__kt_files__", {})
    if frame is None or frame.tb_frame.f_code.co_name not in files:
        return None
    lines = linecache.getlines(frame.tb_frame.f_code.co_filename)
    file = files[frame.tb_frame.f_code.co_name]
    for text in reversed(lines[: frame.tb_lineno]):
        match = _COMMENT.match(text)
        if match and _is_line_of(file, int(match[1]), match[2]):
            return f'File "{file}", line {match[1]}\n    {match[2]}'
    return None
