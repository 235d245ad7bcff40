"""What a name MindSpore has and the drop-in lacks does: it raises.

`missing(ms_module, differs)` is a module-level `__getattr__` (PEP 562),
called only for names the module does not define: it raises
`AttributeError` naming MindSpore's name and saying why it is absent:
k_transform has no such name yet, or (`differs`, name -> reason) it has one
of that name that takes other arguments, so it is not mapped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


def missing(ms_module: str, differs: Mapping[str, str] | None = None) -> Callable[[str], object]:
    """The `__getattr__` of `k_transform.<ms_module>` (e.g. "mindspore.ops")."""
    differs = dict(differs or {})

    def __getattr__(name: str):
        if name.startswith("__"):  # dunder probes (copy, pickle, the parser) get Python's message
            raise AttributeError(f"module 'k_transform.{ms_module}' has no attribute {name!r}")
        if name in differs:
            why = f"k_transform has a different `{name}`: {differs[name]}"
        else:
            why = "k_transform has no such name yet"
        raise AttributeError(
            f"`{ms_module}.{name}` is not in k_transform.{ms_module}: {why} "
            "(README, 'MindSpore drop-in')"
        )

    return __getattr__
