"""Every construct k_transform does not handle raises a `KTransformError`.

The error may come from `kt.compile(fn)` or from calling its result. Its
message names the construct, gives this file's path and the line of the
offending statement, and shows that line's source text.
"""

import contextlib
import inspect
import math
import re

import jax.numpy as jnp
import pytest

import k_transform as kt

_COUNTER = 0


def uses_try(x):
    try:
        y = x + 1.0
    except ValueError:
        y = x
    return y


def uses_with(x):
    with contextlib.nullcontext():
        y = x * 2.0
    return y


def uses_yield(x):
    yield x * 2.0


async def uses_async(x):
    return x + 1.0


def uses_global(x):
    global _COUNTER
    _COUNTER = 1
    return x * 2.0


def uses_nonlocal(x):
    total = x

    def bump():
        nonlocal total
        total = total + 1.0

    run = bump  # escapes: `nonlocal` is threaded only through direct calls
    run()
    return total


def uses_del(x):
    y = x + 1.0
    del y
    return x


def uses_starred_call(x):
    xs = tuple(x)  # its length is known only when run, and jnp.maximum is no user function
    return jnp.maximum(*xs)


# (function, words of which the message must contain one, starts of the
#  offending source lines of which the message must name one)
BAD_CONSTRUCTS = [
    (uses_try, ("try",), ("try:",)),
    (uses_with, ("with",), ("with contextlib",)),
    (uses_yield, ("yield", "generator"), ("yield x",)),
    (uses_async, ("async",), ("async def",)),
    (uses_global, ("global",), ("global _COUNTER", "_COUNTER = 1")),
    (uses_nonlocal, ("nonlocal",), ("run = bump",)),
    (uses_del, ("del",), ("del y",)),
    (uses_starred_call, ("starred", "star", "*args", "variadic"), ("return jnp.maximum(*xs)",)),
]


def source_line(fn, start):
    """(line number, stripped text) of the first line of fn that starts with `start`."""
    lines, first = inspect.getsourcelines(fn)
    for offset, text in enumerate(lines):
        if text.strip().startswith(start):
            return first + offset, text.strip()
    raise AssertionError(f"no line starting with {start!r} in {fn.__name__}")


def error_message(fn, *args):
    """The parser's error for `fn` (in strict mode: without it, a plain
    function it cannot parse runs as Python, `tests/test_python_code.py`)."""
    kt.set_strict(True)
    try:
        with pytest.raises(kt.KTransformError) as info:
            kt.compile(fn)(*args)
    finally:
        kt.set_strict(False)
    return str(info.value)


@pytest.mark.parametrize(
    ("fn", "words", "starts"),
    [pytest.param(*case, id=case[0].__name__) for case in BAD_CONSTRUCTS],
)
def test_unsupported_construct(fn, words, starts):
    message = error_message(fn, jnp.ones(4))
    assert any(word in message.lower() for word in words), f"construct not named: {message}"
    assert fn.__code__.co_filename in message, f"file not named: {message}"
    located = [source_line(fn, start) for start in starts]
    assert any(re.search(rf"\b{line}\b", message) and text in message for line, text in located), (
        f"none of the lines {located} shown with its number: {message}"
    )


def test_lambda_without_source():
    fn = eval("lambda x: x")
    message = error_message(fn, jnp.ones(4))
    assert "source" in message.lower()
    assert "lambda" in message


def test_builtin_without_source():
    message = error_message(math.sin, 1.0)
    assert "source" in message.lower()
    assert "sin" in message


class AssignsThroughZip(kt.Cell):
    """`ops.assign` of a Parameter that reached a helper as a value (through `zip`)."""

    def __init__(self):
        super().__init__()
        self.ps = kt.ParameterTuple([kt.Parameter(jnp.ones(3), name="p")])

    def update(self, param, g):
        kt.ops.assign(param, param - 0.1 * g)
        return param

    def construct(self, gs):
        for p, g in zip(self.ps, gs, strict=True):
            self.update(p, g)
        return self.ps[0]


def test_assign_of_a_value_names_the_parameter_rule_and_the_line():
    """It was a bare AttributeError from inside the run time (a tracer has no `.data`)."""
    with pytest.raises(kt.KTransformError) as info:
        kt.jit(AssignsThroughZip())((jnp.ones(3),))
    message = str(info.value)
    assert "must be a Parameter" in message and __file__ in message
    assert "def update(self, param, g):" in message


def test_grad_argument_errors_are_also_mindsporess_builtin_types():
    """MindSpore raises ValueError, IndexError and RuntimeError for these; ours
    are KTransformErrors of those types too (`errors.py`)."""

    def f(x, y):
        return jnp.sum(x * y)

    x = jnp.ones(3)
    with pytest.raises(ValueError, match="both be None") as info:
        kt.grad(f, grad_position=None, weights=None)
    assert isinstance(info.value, kt.KTransformError)
    with pytest.raises(RuntimeError, match="empty tuple") as info:
        kt.grad(f, grad_position=())
    assert isinstance(info.value, kt.KTransformError)
    with pytest.raises(IndexError, match="grad_position 2") as info:
        kt.grad(f, grad_position=2)(x, x)
    assert isinstance(info.value, kt.KTransformError)


def _reads_an_undefined_name(x):
    if x > 0:
        return x * 2.0
    return NOT_DEFINED_ANYWHERE  # noqa: F821 -- the function runs as Python


def test_python_run_code_meeting_a_traced_value_names_the_function():
    """A function k_transform runs as Python (here: it reads a name defined
    nowhere) and a jit traces: its `if` on a traced value was JAX's bare
    TracerBoolConversionError; now a KTransformError naming the function,
    why it runs as Python, and its line. Without a jit it runs as Python
    (the oracle: Python itself)."""
    with pytest.raises(kt.KTransformError) as info:
        kt.jit(_reads_an_undefined_name)(jnp.float32(2.0))
    message = str(info.value)
    assert "_reads_an_undefined_name runs as Python" in message
    assert "NOT_DEFINED_ANYWHERE" in message and "def _reads_an_undefined_name" in message
    assert kt.compile(_reads_an_undefined_name)(2.0) == _reads_an_undefined_name(2.0)


def mismatched(w, x):
    y = w * x
    return jnp.sum(y**2)


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_an_error_of_the_users_operation_names_the_users_line(mode):
    """JAX's own error at an operation of the user's (shapes that do not
    broadcast) keeps its type, as Python would raise it, and gains a note
    with the user's file, line and source line: the traceback shows the
    generated code's frames."""
    kt.set_mode(mode)
    try:
        with pytest.raises(TypeError, match="incompatible shapes") as info:
            kt.grad(mismatched)(jnp.ones(8), jnp.ones(3))
    finally:
        kt.set_mode("graph")
    notes = "\n".join(getattr(info.value, "__notes__", ()))
    line = inspect.getsourcelines(mismatched)[1] + 1
    assert f'File "{__file__}", line {line}' in notes, notes
    assert "y = w * x" in notes
