"""`mindspore.common.api`: `jit`, and `_pynative_executor`, whose `sync()`
MindSpore's tests call to wait for queued work (here: JAX's effects barrier)."""

import jax

from k_transform.jit_api import jit
from k_transform.mindspore.absent import missing


class _PyNativeExecutor:
    """The part of MindSpore's executor its tests call."""

    def sync(self) -> None:
        jax.effects_barrier()


_pynative_executor = _PyNativeExecutor()
__all__ = ["jit"]
__getattr__ = missing("mindspore.common.api")
