"""`kt.train`: what MindSpore keeps in `mindspore.train`: checkpoints
(`save_checkpoint`, `load_checkpoint`, `load_param_into_net`), `Model` and its
callbacks (`Callback`, `LossMonitor`)."""

from k_transform.train.callback import Callback, LossMonitor, RunContext
from k_transform.train.model import Model
from k_transform.train.serialization import (
    load_checkpoint,
    load_param_into_net,
    save_checkpoint,
)

__all__ = [
    "Callback",
    "LossMonitor",
    "Model",
    "RunContext",
    "load_checkpoint",
    "load_param_into_net",
    "save_checkpoint",
]
