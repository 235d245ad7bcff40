"""The one numpy generator random initial values and dataset shuffles draw
from; `set_seed(seed)` (MindSpore's `ms.set_seed`) reseeds it, so a script that
seeds builds the same network and batches each run."""

from __future__ import annotations

import numpy as np

_STATE = {"rng": np.random.RandomState(0)}
# Functions `set_seed(seed)` also calls: the random streams kept elsewhere
# (`ops.dropout`'s key), registered once, when their module is imported.
RESEED_HOOKS: list = []


def set_seed(seed: int) -> None:
    """Reseed our generator and, as MindSpore's `set_seed` does, numpy's
    global one (`np.random.randn` after `ms.set_seed(1)` draws the same)."""
    _STATE["rng"] = np.random.RandomState(seed)
    _STATE["seed"] = seed
    np.random.seed(seed)
    for hook in RESEED_HOOKS:
        hook(seed)


def on_set_seed(hook) -> None:
    """Call `hook(seed)` at each `set_seed`."""
    RESEED_HOOKS.append(hook)


def last_seed() -> int:
    """The seed `set_seed` was last given (0 before any)."""
    return _STATE.get("seed", 0)


def generator() -> np.random.RandomState:
    return _STATE["rng"]
