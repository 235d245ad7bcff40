"""Deterministic names for generated code.

User names are kept; a clash gets a numeric suffix (`x`, `x_1`, `x_2`);
unnamed intermediate values are numbered temporaries (`_t1`, `_t2`); graphs
made by a transform are `<fn>_fprop` / `<fn>_bprop`; sensitivities are
`d_<name>`, the gradient of exactly the variable named `<name>` (a
sensitivity whose `d_<name>` is taken is a temporary instead, never a
suffixed `d_<name>_1`, which would name the gradient of `<name>_1`). The same
input always gives the same names. No name is a builtin's: generated code
calls `slice(...)`, `tuple(...)`, `zip(...)`, which a variable named after
the user's `slice` (or a jaxpr's `slice` equation) would shadow, so a user's
`slice` is `slice_1`.
"""

from __future__ import annotations

import builtins
import keyword
import re

_IDENT = re.compile(r"[^0-9a-zA-Z_]")
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def sanitize(name: str) -> str:
    name = _IDENT.sub("_", name.replace("<lambda>", "lambda").replace(".", "_"))
    if not name or name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name):
        name += "_"
    return name


class Namer:
    """Hands out unique identifiers in one scope.

    A function's namer has the module's namer as `outer`: local names avoid
    the module's globals, and globals made later avoid every local name.
    """

    def __init__(self, reserved=(), outer: Namer | None = None):
        self.taken: set[str] = set(reserved)
        self.outer = outer
        self.locals_seen: set[str] = set()  # names issued by inner namers
        self.temps = 0
        self.next_suffix: dict[str, int] = {}  # base -> first suffix worth trying

    def _is_free(self, name: str) -> bool:
        if name in _BUILTINS:
            return False
        return name not in self.taken and (self.outer is None or name not in self.outer.taken)

    def _take(self, name: str) -> str:
        self.taken.add(name)
        if self.outer is not None:
            self.outer.locals_seen.add(name)
        return name

    def fresh(self, base: str) -> str:
        base = sanitize(base) if base else ""
        if not base:
            return self.temp()
        k = self.next_suffix.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while not self._is_free(name) or name in self.locals_seen:
            k += 1
            name = f"{base}_{k}"
        self.next_suffix[base] = k + 1
        return self._take(name)

    def exact(self, name: str) -> str | None:
        """`name` itself if it is free here, else None (no suffix: a
        sensitivity `d_x` suffixed to `d_x_1` would read as that of `x_1`)."""
        name = sanitize(name)
        if not self._is_free(name) or name in self.locals_seen:
            return None
        return self._take(name)

    def temp(self) -> str:
        while True:
            self.temps += 1
            name = f"_t{self.temps}"
            if self._is_free(name):
                return self._take(name)
