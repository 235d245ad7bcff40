"""Transform state: the caches transforms keep between calls, in one object.

Parsing, K, J, lowering and compiling memoize what they build (a function's
graph, K of a graph, K of a loop, an imported jaxpr, a compiled program), so
transforming the same code again costs nothing and a recursive function
finds the graph being built. Every such cache is a named table of
`TRANSFORM`, asked for where it is used (`TRANSFORM.cache("dfunctor.functors")`),
never a module global (`tests/test_layout.py` checks): what transforms
remember is in one place, listed by `TRANSFORM.names()`, and
`kt.clear_caches()` forgets it.

Two kinds of tables, with the lifetimes the module globals they replace had:

- `cache(name)`: a dict (keys are ids held alive by the entry, never-reused
  uids, or values); it lives as long as the process, until `clear()`.
- `weak_keys(name)` / `weak_values(name)`: facts about live objects (a
  graph's env-key label, whether it assigns a Parameter) that die with
  them. `clear()` keeps these: a graph's label must not change while the
  graph lives, since the env keys built from it are baked into K-graphs.
"""

from __future__ import annotations

import functools
import weakref


class TransformContext:
    """Named caches of transform state (see the module docstring)."""

    def __init__(self):
        self._caches: dict[str, dict] = {}
        self._weak: dict[str, weakref.WeakKeyDictionary | weakref.WeakValueDictionary] = {}

    def cache(self, name: str) -> dict:
        """The cache called `name` (`"<module>.<what>"`), empty on first use."""
        table = self._caches.get(name)
        if table is None:
            table = self._caches[name] = {}
        return table

    def memoize(self, name: str):
        """A decorator: the function's results by its (positional, hashable)
        arguments, kept in the cache `name` (for `functools.cache`)."""

        def decorate(fn):
            @functools.wraps(fn)
            def memoized(*args):
                table = self.cache(name)
                if args not in table:
                    table[args] = fn(*args)
                return table[args]

            return memoized

        return decorate

    def weak_keys(self, name: str) -> weakref.WeakKeyDictionary:
        """A table keyed by live objects, each entry gone with its key."""
        return self._weak_table(name, weakref.WeakKeyDictionary)

    def weak_values(self, name: str) -> weakref.WeakValueDictionary:
        """A table of live objects, each entry gone with its value."""
        return self._weak_table(name, weakref.WeakValueDictionary)

    def _weak_table(self, name: str, kind: type):
        table = self._weak.get(name)
        if table is None:
            table = self._weak[name] = kind()
        if not isinstance(table, kind):
            raise TypeError(f"the table {name!r} is a {type(table).__name__}, not a {kind}")
        return table

    def names(self) -> list[str]:
        """Every table asked for so far."""
        return sorted([*self._caches, *self._weak])

    def clear(self) -> None:
        """Empty every cache (in place); weak tables keep their live entries."""
        for table in self._caches.values():
            table.clear()


TRANSFORM = TransformContext()


def clear_caches() -> None:
    """Forget every graph, K-graph and compiled program transforms have cached
    (`kt.clear_caches()`): code transformed anew is parsed, transformed and
    compiled again (a gradient function object keeps the programs it has
    compiled). Call it between transforms, not inside one."""
    TRANSFORM.clear()
