"""The one numpy generator random initial values and dataset shuffles draw
from; `set_seed(seed)` (MindSpore's `ms.set_seed`) reseeds it, so a script that
seeds builds the same network and batches each run."""

from __future__ import annotations

import numpy as np

_STATE = {"rng": np.random.RandomState(0)}


def set_seed(seed: int) -> None:
    _STATE["rng"] = np.random.RandomState(seed)


def generator() -> np.random.RandomState:
    return _STATE["rng"]
