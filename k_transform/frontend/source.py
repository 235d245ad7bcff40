"""Finding a Python function's source and making debug info from it."""

from __future__ import annotations

import inspect
import io
import linecache
import re
import textwrap
import tokenize
import types

import gast

from k_transform.errors import KTransformError
from k_transform.ir.nodes import DebugInfo
from k_transform.ops.host import IMPURE_MODULES

# Functions from these modules are library code: called, never parsed.
LIBRARY_MODULES = (
    "jax",
    "jaxlib",
    "numpy",
    "scipy",
    "math",
    "builtins",
    "functools",
    "operator",
    "k_transform.runtime",
    "k_transform.ir",
    "k_transform.control",
    "k_transform.frontend",
    "k_transform.codegen",
    "k_transform.dfunctor",
    "k_transform.api",
    *IMPURE_MODULES,  # `random.gauss`, `time.time`: host calls, run as Python (`ops.host`)
)


def is_library_value(value) -> bool:
    """Whether a callable (a function, or an object with `__call__`) is
    library code, by its module or its type's module."""
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        module = getattr(value, "__module__", None) or ""
    else:
        module = type(value).__module__ or ""
    return any(module == m or module.startswith(m + ".") for m in LIBRARY_MODULES)


def is_user_function(value) -> bool:
    """A Python function k_transform should parse rather than call opaquely."""
    if not isinstance(value, types.FunctionType):
        return False
    # Library code by its `__module__` or by the module whose globals it runs
    # in: `functools.wraps` copies the wrapped function's `__module__` onto a
    # library wrapper (`jax.vmap(f)`).
    modules = (getattr(value, "__module__", None) or "", value.__globals__.get("__name__") or "")
    return not any(
        module == m or module.startswith(m + ".") for module in modules for m in LIBRARY_MODULES
    )


_DEFINITION = re.compile(r"^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)")


def _source_lines(code, module_globals) -> tuple[list[str], int]:
    """The lines of the definition that made `code`, and its first line
    number, as `inspect.getsourcelines(code)` gives them. That call first
    maps every loaded module to its file (`inspect.getmodule`: with JAX
    loaded, 30-50 ms and about 7,000 `lstat`s, a sixth of a small gradient's
    first call); a code object names its file and line, so this reads them
    from `linecache` and leaves the rare line that starts no definition to
    inspect."""
    linecache.checkcache(code.co_filename)  # a file edited since it was read
    lines = linecache.getlines(code.co_filename, module_globals)
    start = code.co_firstlineno - 1
    if 0 <= start < len(lines) and _DEFINITION.match(lines[start]):
        return inspect.getblock(lines[start:]), start + 1
    return inspect.getsourcelines(code)


class Source:
    """The parsed definition of one Python function, with its location.

    `tree` is the gast FunctionDef (a lambda is wrapped into one named
    `<lambda>`); its line numbers are relative to `first_line`.
    """

    def __init__(self, fn):
        self.fn = fn
        self.name = getattr(fn, "__name__", repr(fn))
        code = getattr(fn, "__code__", None)
        if code is None:
            raise KTransformError(
                f"{self.name!r} has no Python source (a builtin or C function) and cannot be "
                "transformed; wrap it in a Python function or give it a primitive"
            )
        self.file = code.co_filename
        try:
            # The code object: `getsourcelines(fn)` would follow `fn.__wrapped__`
            # and give another function's source (callers unwrap on purpose).
            lines, first = _source_lines(code, getattr(fn, "__globals__", None))
        except (OSError, TypeError) as exc:
            raise KTransformError(
                f"the source of {self.name!r} is not available (defined in a REPL, eval or "
                f"exec?): {exc}",
                DebugInfo(self.file, code.co_firstlineno),
            ) from None
        self.first_line = max(first, 1)
        if self.name == "<lambda>":
            lines = _through_last_line(lines, self.first_line, code)
        text = textwrap.dedent("".join(lines))
        self.indent = min(
            (len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0
        )
        if self.name == "<lambda>":
            self.tree = self._find_lambda(text, code)
        else:
            module = gast.parse(text)
            self.tree = module.body[0]
            if isinstance(self.tree, gast.AsyncFunctionDef):
                raise KTransformError("`async def` is not supported", self.debug(self.tree))

    def _find_lambda(self, text: str, code) -> gast.FunctionDef:
        want_line = code.co_firstlineno - self.first_line + 1
        names = list(code.co_varnames[: code.co_argcount])
        parsed = False
        for module, shift in _parses(text):
            parsed = True
            # the lambda as far as this reading holds all of its code (a reading
            # that ends the text early cuts a lambda whose body goes on)
            found = [
                n
                for n in gast.walk(module)
                if isinstance(n, gast.Lambda)
                and n.lineno == want_line
                and [a.id for a in n.args.args] == names
                and self._holds(n, code, shift)
            ]
            if found:
                break
        else:
            if not parsed:
                raise KTransformError(
                    "cannot read the source of this lambda (write it as a `def`)",
                    self.debug_at(want_line),
                )
            raise KTransformError("cannot find the source of this lambda", self.debug_at(want_line))
        if len(found) > 1:  # several on the line: the one whose body holds the code's positions
            inside = [self._positions_in(n.body, code, shift) for n in found]
            found = [n for n, k in zip(found, inside, strict=True) if k == max(inside)]
        if len({gast.dump(n) for n in found}) > 1:
            raise KTransformError(
                "cannot tell which of the lambdas on this line is meant (write it as a `def`)",
                self.debug_at(want_line),
            )
        lam = found[0]
        ret = gast.copy_location(gast.Return(value=lam.body), lam.body)
        fdef = gast.FunctionDef(
            name="<lambda>",
            args=lam.args,
            body=[ret],
            decorator_list=[],
            returns=None,
            type_comment=None,
            type_params=[],
        )
        return gast.copy_location(fdef, lam)

    def _span(self, node, shift: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """`node`'s source span in the file's lines and columns (`shift`: the
        characters a reading put before the text's first line)."""

        def at(line: int, col: int) -> tuple[int, int]:
            return line + self.first_line - 1, col + self.indent - (shift if line == 1 else 0)

        return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)

    def _positions_in(self, node, code, shift: int) -> int:
        """How many of `code`'s instruction positions start within `node`."""
        start, end = self._span(node, shift)
        return sum(
            1
            for line, _, col, _ in code.co_positions()
            if line is not None and col is not None and start <= (line, col) <= end
        )

    def _holds(self, lam, code, shift: int) -> bool:
        """Whether each of `code`'s instruction positions lies within `lam`
        (but the empty ones of its entry and exit)."""
        start, end = self._span(lam, shift)
        return all(
            start <= (line, col) and (end_line, end_col) <= end
            for line, end_line, col, end_col in code.co_positions()
            if None not in (line, end_line, col, end_col) and (line, col) != (end_line, end_col)
        )

    def debug_at(self, rel_line: int, col: int = 0, name: str = "") -> DebugInfo:
        line = rel_line + self.first_line - 1
        text = linecache.getline(self.file, line).rstrip("\n")
        return DebugInfo(self.file, line, col + self.indent, text, name)

    def debug(self, node, name: str = "") -> DebugInfo:
        return self.debug_at(getattr(node, "lineno", 1), getattr(node, "col_offset", 0), name)


def _parses(text: str):
    """The readings of `text` that parse, as (module, characters put before
    its first line): the whole, then without trailing lines (a lambda
    mid-call, in a tuple or list, as a dict value or a keyword argument, in
    a statement's header: `for name, f in [("sq", lambda v: v * v)]:`; on a
    line that closes brackets opened on the lines above, those opened)."""
    lines = text.splitlines()
    for end in range(len(lines), 0, -1):
        chunk = "\n".join(lines[:end])
        header = chunk.rstrip().endswith(":")  # `for ...:`, `if ...:`, `with ...:`
        readings = [("", ""), ("(", ""), ("(", ")"), ("{", "}"), ("f(", ")")]
        readings += [("", " pass")] if header else []
        for before, after in readings:
            try:
                yield gast.parse(before + chunk + after), len(before)
            except SyntaxError:
                continue
        if header and chunk.startswith("elif "):  # read as an `if` (two characters fewer)
            try:
                yield gast.parse(chunk.removeprefix("el") + " pass"), -2
            except SyntaxError:
                pass
        opened = _opened_above(chunk)
        if opened:
            body = chunk.rstrip().removesuffix(":") if header else chunk
            try:
                yield gast.parse(opened + body), len(opened)
            except SyntaxError:
                continue


_CLOSERS = {")": "(", "]": "[", "}": "{"}


def _opened_above(chunk: str) -> str:
    """The brackets `chunk` closes without opening them, as the text that
    opens them (`"[("` for a chunk holding `...)]`); "" if none, or if
    `chunk` does not tokenize."""
    depth: list[str] = []
    missing: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(chunk).readline):
            if token.type != tokenize.OP:
                continue
            if token.string in "([{":
                depth.append(token.string)
            elif token.string in _CLOSERS:
                if depth:
                    depth.pop()
                else:
                    missing.append(_CLOSERS[token.string])
    except (tokenize.TokenError, SyntaxError):
        pass  # unclosed brackets at the end: what was seen so far
    return "".join(reversed(missing))


def _through_last_line(lines: list[str], first: int, code) -> list[str]:
    """A lambda's lines on to the last its code spans: `inspect` gives a
    lambda only the line it starts on, while its body may go on (an
    operator leading the next line, inside a call's brackets)."""
    last = max((p[1] for p in code.co_positions() if p[1] is not None), default=first)
    if last < first + len(lines):
        return lines
    more = linecache.getlines(code.co_filename)[first - 1 + len(lines) : last]
    return [*lines, *more]
