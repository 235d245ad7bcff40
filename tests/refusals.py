"""Refusals in strict mode (`kt.set_strict`): the message, and the line of
the user's code it must name."""

from __future__ import annotations

import inspect

import pytest

import k_transform as kt


def strict_refusal(fn, *args) -> str:
    """The KTransformError message of `kt.value_and_grad(fn)(*args)` with
    strict mode on (a construct the parser has no model of is an error, not
    a function run as Python)."""
    kt.set_strict(True)
    try:
        with pytest.raises(kt.KTransformError) as info:
            kt.value_and_grad(fn)(*args)
    finally:
        kt.set_strict(False)
    return str(info.value)


def line_of(fn, needle: str) -> int:
    """The file line of `fn`'s first source line holding `needle`."""
    lines, first = inspect.getsourcelines(fn)
    return next(first + k for k, text in enumerate(lines) if needle in text)
