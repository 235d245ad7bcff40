"""`mindspore.context`: the run mode, the settings that change no result, and the
auto-parallel context (data parallelism).

`set_context(mode=GRAPH_MODE)` compiles (jit) gradient and jit functions,
`set_context(mode=PYNATIVE_MODE)` runs their generated code op by op: they
are `kt.set_mode("graph")` and `kt.set_mode("eager")`. The keys in
`NO_EFFECT` (device and debugging settings) are accepted and change
nothing: JAX picks the device. Any other key raises `ValueError` naming it.
`get_context` answers "mode" and "device_target" (JAX's backend).

The auto-parallel context (`set_auto_parallel_context`,
`get_auto_parallel_context`, `reset_auto_parallel_context`, `ParallelMode`)
knows MindSpore's STAND_ALONE and DATA_PARALLEL: under DATA_PARALLEL a
`TrainOneStepCell` built afterwards sums its gradients over the processes
(`nn.wrap.DistributedGradReducer`, the mean with `gradients_mean=True`);
the processes are `jax.distributed`'s (`mindspore.communication.init`).
The other parallel modes, and the settings that would change what a step
computes, raise `ValueError`; `all_reduce_fusion_config` is accepted and
changes nothing.
"""

from __future__ import annotations

import jax

from k_transform import compiled
from k_transform.mindspore.absent import missing
from k_transform.nn.wrap import data_parallel

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
        "jit_config",  # {"jit_level": "O0"}: how hard the compiler optimizes, speed only
        "jit_level",
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


class ParallelMode:
    """MindSpore's parallel modes (k_transform runs the first two)."""

    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    MODE_LIST = [
        "stand_alone",
        "data_parallel",
        "hybrid_parallel",
        "semi_auto_parallel",
        "auto_parallel",
    ]


PARALLEL_DEFAULTS = {
    "parallel_mode": ParallelMode.STAND_ALONE,
    "gradients_mean": False,
    "device_num": 1,
    "global_rank": 0,
    "all_reduce_fusion_config": [],  # how gradients are fused: speed only, no effect
}
PARALLEL_KEYS_ABSENT = frozenset(
    {
        "auto_parallel_search_mode",
        "auto_pipeline",
        "comm_fusion",
        "dataset_strategy",
        "dump_device_local_norm",
        "dump_local_norm",
        "dump_local_norm_path",
        "enable_alltoall",
        "enable_parallel_optimizer",
        "force_fp32_communication",
        "full_batch",
        "gradient_fp32_sync",
        "group_ckpt_save_file",
        "loss_repeated_mean",
        "parallel_optimizer_config",
        "parameter_broadcast",
        "pipeline_config",
        "pipeline_result_broadcast",
        "pipeline_stages",
        "search_mode",
        "strategy_ckpt_config",
        "strategy_ckpt_load_file",
        "strategy_ckpt_save_file",
    }
)  # MindSpore's other keys: each changes what a parallel step computes or saves


class AutoParallelContext:
    """The settings of `set_auto_parallel_context`; each change is passed on
    to `nn.wrap.data_parallel`, which `TrainOneStepCell` reads when built."""

    def __init__(self):
        self.values = dict(PARALLEL_DEFAULTS)
        self.device_num_set = False

    def reset(self) -> None:
        self.values = dict(PARALLEL_DEFAULTS)
        self.device_num_set = False
        self.publish()

    def publish(self) -> None:
        data_parallel.on = self.values["parallel_mode"] == ParallelMode.DATA_PARALLEL
        data_parallel.mean = self.values["gradients_mean"]
        data_parallel.degree = self.values["device_num"] if self.device_num_set else None


auto_parallel = AutoParallelContext()


def _checked(key: str, value):
    """`value` for the auto-parallel setting `key`, or MindSpore's error."""
    if key == "parallel_mode":
        if value not in ParallelMode.MODE_LIST:
            raise ValueError(
                "The context configuration parameter 'parallel_mode' only support 'stand_alone', "
                "'data_parallel', 'hybrid_parallel', 'semi_auto_parallel' and 'auto_parallel', "
                f"but got the value : {value}."
            )
        if value not in (ParallelMode.STAND_ALONE, ParallelMode.DATA_PARALLEL):
            raise ValueError(
                f"set_auto_parallel_context: k_transform runs parallel_mode 'stand_alone' and "
                f"'data_parallel', not {value!r} yet"
            )
    elif key == "gradients_mean":
        if not isinstance(value, bool):
            raise TypeError(f"The parameter 'gradients_mean' must be {bool}, but got {type(value)}")
    elif key in ("device_num", "global_rank"):
        low = 1 if key == "device_num" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            kind = "positive" if low else "non-negative"
            raise ValueError(
                f"The context configuration parameter '{key}' must be a {kind} integer, "
                f"but got the value of {key} : {value}."
            )
    return value


def set_auto_parallel_context(**kwargs) -> None:
    """MindSpore's `set_auto_parallel_context(parallel_mode=..., gradients_mean=...,
    device_num=..., ...)`."""
    for key in kwargs:
        if key in PARALLEL_KEYS_ABSENT:
            raise ValueError(f"set_auto_parallel_context: k_transform has no setting {key!r} yet")
        if key not in PARALLEL_DEFAULTS:
            raise ValueError(f"Set context keyword {key} is not recognized!")
    checked = {key: _checked(key, value) for key, value in kwargs.items()}
    auto_parallel.values.update(checked)
    auto_parallel.device_num_set |= "device_num" in checked
    auto_parallel.publish()


def get_auto_parallel_context(attr_key: str):
    """MindSpore's `get_auto_parallel_context("parallel_mode")` (and
    "gradients_mean", "device_num", "global_rank", "all_reduce_fusion_config")."""
    if attr_key not in auto_parallel.values:
        raise ValueError(f"Get context keyword {attr_key} is not recognized!")
    return auto_parallel.values[attr_key]


def reset_auto_parallel_context() -> None:
    """MindSpore's `reset_auto_parallel_context()`: STAND_ALONE, the defaults."""
    auto_parallel.reset()


__all__ = [
    "GRAPH_MODE",
    "PYNATIVE_MODE",
    "ParallelMode",
    "get_auto_parallel_context",
    "get_context",
    "reset_auto_parallel_context",
    "set_auto_parallel_context",
    "set_context",
]
__getattr__ = missing("mindspore.context")
