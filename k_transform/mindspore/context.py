"""`mindspore.context`: the run mode, and the settings that change no result.

`set_context(mode=GRAPH_MODE)` compiles (jit) gradient and jit functions,
`set_context(mode=PYNATIVE_MODE)` runs their generated code op by op: they
are `kt.set_mode("graph")` and `kt.set_mode("eager")`. The keys in
`NO_EFFECT` (device and debugging settings) are accepted and change
nothing: JAX picks the device. Any other key raises `ValueError` naming it.
`get_context` answers "mode" and "device_target" (JAX's backend).
"""

from __future__ import annotations

import jax

from k_transform import compiled
from k_transform.mindspore.absent import missing

GRAPH_MODE = 0
PYNATIVE_MODE = 1
RUN_MODES = {GRAPH_MODE: "graph", PYNATIVE_MODE: "eager"}
NO_EFFECT = frozenset(
    {
        "device_target",
        "device_id",
        "save_graphs",
        "save_graphs_path",
        "max_device_memory",
        "pynative_synchronize",
        "runtime_num_threads",
    }
)


def set_context(**kwargs) -> None:
    """MindSpore's `set_context(mode=..., device_target=..., ...)`."""
    unknown = sorted(set(kwargs) - NO_EFFECT - {"mode"})
    if unknown:
        raise ValueError(f"set_context: k_transform has no setting {unknown} yet")
    if "mode" in kwargs:
        if kwargs["mode"] not in RUN_MODES:
            raise ValueError(
                f"set_context: mode must be GRAPH_MODE (0) or PYNATIVE_MODE (1), "
                f"not {kwargs['mode']!r}"
            )
        compiled.set_mode(RUN_MODES[kwargs["mode"]])


def get_context(attr_key: str):
    """MindSpore's `get_context("mode")` / `get_context("device_target")`."""
    if attr_key == "mode":
        return GRAPH_MODE if compiled._mode["jit"] else PYNATIVE_MODE
    if attr_key == "device_target":
        return jax.default_backend().upper()
    raise ValueError(f"get_context: k_transform has no setting {attr_key!r} yet")


__all__ = ["GRAPH_MODE", "PYNATIVE_MODE", "get_context", "set_context"]
__getattr__ = missing("mindspore.context")
