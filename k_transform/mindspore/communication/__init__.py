"""`mindspore.communication`: the processes of a data-parallel job, over `jax.distributed`.

MindSpore's ranks are k_transform's processes: `init()` joins this process
to the job (`jax.distributed.initialize`, CPU collectives through gloo),
`get_rank()` is `jax.process_index()`, `get_group_size()` is
`jax.process_count()` (0 and 1 before `init()`, as MindSpore answers).
Only the world group exists (`GlobalComm.WORLD_COMM_GROUP`).

`init()` reads the job from the environment, MindSpore's dynamic-cluster
variables first, then JAX's:

- `MS_SCHED_HOST` (default 127.0.0.1), `MS_SCHED_PORT`, `MS_WORKER_NUM`,
  `MS_NODE_ID` (or `RANK_ID`): the scheduler's address is JAX's coordinator,
  which process 0 serves (no separate scheduler process: one started with
  `MS_ROLE=MS_SCHED` is refused);
- `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`;
- neither: `jax.distributed.initialize()` finds the cluster itself (SLURM,
  Cloud TPU, ...).

`init()` must come before anything computes (before the first array), as
`jax.distributed.initialize` requires; MindSpore asks the same on Ascend.
"""

from __future__ import annotations

import os

import jax

from k_transform.mindspore.absent import missing

HCCL_WORLD_COMM_GROUP = "hccl_world_group"
NCCL_WORLD_COMM_GROUP = "nccl_world_group"
MCCL_WORLD_COMM_GROUP = "mccl_world_group"
BACKENDS = ("hccl", "nccl", "mccl")
INIT_TIMEOUT_S = 300  # jax.distributed's wait for every process to join


class GlobalComm:
    """MindSpore's `GlobalComm`: the backend and the world group's name."""

    BACKEND = "mccl"
    WORLD_COMM_GROUP = HCCL_WORLD_COMM_GROUP
    INITED = False


def _env_int(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(
            f"init: the environment variable {name}={value!r} is not an integer"
        ) from None


def cluster_from_env() -> dict:
    """`jax.distributed.initialize`'s arguments from the environment ({} if
    the environment names no job: JAX then looks for a cluster itself)."""
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        raise RuntimeError(
            "init: MS_ROLE=MS_SCHED: k_transform needs no scheduler process "
            "(worker 0 serves JAX's coordinator at MS_SCHED_HOST:MS_SCHED_PORT); "
            "start only the workers"
        )
    if "MS_WORKER_NUM" in os.environ:
        rank_var = "MS_NODE_ID" if "MS_NODE_ID" in os.environ else "RANK_ID"
        for name in ("MS_SCHED_PORT", rank_var):
            if name not in os.environ:
                raise RuntimeError(f"init: MS_WORKER_NUM is set but {name} is not")
        host = os.environ.get("MS_SCHED_HOST", "127.0.0.1")
        return {
            "coordinator_address": f"{host}:{_env_int('MS_SCHED_PORT')}",
            "num_processes": _env_int("MS_WORKER_NUM"),
            "process_id": _env_int(rank_var),
        }
    if "JAX_NUM_PROCESSES" in os.environ:
        for name in ("JAX_COORDINATOR_ADDRESS", "JAX_PROCESS_ID"):
            if name not in os.environ:
                raise RuntimeError(f"init: JAX_NUM_PROCESSES is set but {name} is not")
        return {
            "coordinator_address": os.environ["JAX_COORDINATOR_ADDRESS"],
            "num_processes": _env_int("JAX_NUM_PROCESSES"),
            "process_id": _env_int("JAX_PROCESS_ID"),
        }
    return {}


def init(backend_name=None) -> None:
    """MindSpore's `init(backend_name=None)`: join this process to the job
    (see the module docstring). A second call does nothing."""
    if backend_name is not None and not isinstance(backend_name, str):
        raise TypeError(
            "For 'init', the argument 'backend_name' must be a string, "
            f"but got the type : {type(backend_name)}"
        )
    if backend_name is not None and backend_name not in BACKENDS:
        raise RuntimeError(
            "For 'init', the argument 'backend_name' must be one of 'hccl', 'nccl' and "
            f"'mccl', but got 'backend_name' : {backend_name}"
        )
    if jax.distributed.is_initialized():
        return
    cluster = cluster_from_env()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(**cluster, initialization_timeout=INIT_TIMEOUT_S)
    except (RuntimeError, ValueError) as exc:
        raise RuntimeError(
            f"init: jax.distributed.initialize({cluster}) failed: {exc} "
            "(set MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM and MS_NODE_ID, and call "
            "init() before anything computes)"
        ) from exc
    GlobalComm.BACKEND = backend_name or "mccl"
    GlobalComm.INITED = True


def release() -> None:
    """MindSpore's `release()`: leave the job (`jax.distributed.shutdown`)."""
    jax.distributed.shutdown()
    GlobalComm.INITED = False


def _check_group(api: str, group) -> None:
    if group not in (HCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP):
        raise ValueError(f"{api}: group {group!r} is not the world group; k_transform has no other")


def get_rank(group=GlobalComm.WORLD_COMM_GROUP) -> int:
    """MindSpore's `get_rank()`: this process's rank, `jax.process_index()`."""
    _check_group("get_rank", group)
    return jax.process_index()


def get_group_size(group=GlobalComm.WORLD_COMM_GROUP) -> int:
    """MindSpore's `get_group_size()`: the number of processes, `jax.process_count()`."""
    _check_group("get_group_size", group)
    return jax.process_count()


__all__ = [
    "GlobalComm",
    "HCCL_WORLD_COMM_GROUP",
    "MCCL_WORLD_COMM_GROUP",
    "NCCL_WORLD_COMM_GROUP",
    "get_group_size",
    "get_rank",
    "init",
    "release",
]
__getattr__ = missing("mindspore.communication")
