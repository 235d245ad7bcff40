"""MindSpore's data-parallel training on JAX's multi-process runtime.

The main test starts two processes on this machine (tests/dp_worker.py, the
job in MindSpore's dynamic-cluster variables, `jax.distributed` on a free
localhost port, CPU collectives through gloo). Each trains the same Cell on
its half of the batch with MindSpore code: `init()`, DATA_PARALLEL with
`gradients_mean=True`, `TrainOneStepCell(WithLossCell(net, loss), opt)`
under `ms.jit`. Both must end with the Parameters of one process trained on
the whole batch (the same `dp_worker.train`, run here), whose losses and
Parameters are checked against `jax.value_and_grad` of the same network and
the same Momentum update. The rest checks the parallel context, the
communication names and their errors in this process (MindSpore 2.10's
messages and values, printed by it on CPU, are quoted where they are used).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform.mindspore as ms
from k_transform.mindspore import communication, nn
from tests import dp_worker

WORKER = Path(dp_worker.__file__)
ROOT = WORKER.parent.parent
N_PROCESSES = 2
TIMEOUT_S = 240
TOL = {"rtol": 1e-5, "atol": 1e-6}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers() -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(N_PROCESSES):
        env = dict(os.environ)
        env.pop("XLA_FLAGS", None)
        env.update(
            JAX_PLATFORMS="cpu",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
            MS_SCHED_HOST="127.0.0.1",
            MS_SCHED_PORT=str(port),
            MS_WORKER_NUM=str(N_PROCESSES),
            MS_NODE_ID=str(rank),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def results_of(procs: list[subprocess.Popen]) -> list[dict]:
    """Each worker's RESULT; all their output in the failure message otherwise."""
    outputs = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        outputs = [proc.communicate() for proc in procs]
    report = "\n".join(
        f"--- worker {k} (exit {p.returncode}) stdout:\n{out}\n--- stderr:\n{err[-4000:]}"
        for k, (p, (out, err)) in enumerate(zip(procs, outputs, strict=True))
    )
    results = []
    for proc, (out, _) in zip(procs, outputs, strict=True):
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and len(lines) == 1, report
        results.append(json.loads(lines[0].removeprefix("RESULT ")))
    return results


def jax_training(x, y):
    """The oracle: the same network, MSE and Momentum, with `jax.value_and_grad`."""
    names = list(dp_worker.initial_weights())
    params = [jnp.asarray(v) for v in dp_worker.initial_weights().values()]

    def loss(p, x, y):
        h = jax.nn.relu(x @ p[0].T + p[1])
        return jnp.mean((h @ p[2].T + p[3] - y) ** 2)

    moments = [jnp.zeros_like(p) for p in params]
    losses = []
    for _ in range(dp_worker.STEPS):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        moments = [dp_worker.MOMENTUM * v + g for v, g in zip(moments, grads, strict=True)]
        params = [p - dp_worker.LR * v for p, v in zip(params, moments, strict=True)]
        losses.append(float(value))
    return losses, dict(zip(names, params, strict=True))


def assert_params_close(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for name in want:
        np.testing.assert_allclose(
            np.asarray(got[name]), np.asarray(want[name]), **TOL, err_msg=f"{what}: {name}"
        )


def test_two_processes_train_data_parallel_as_one_on_the_whole_batch():
    procs = start_workers()
    try:  # the oracle is computed here while the workers run
        ms.reset_auto_parallel_context()
        x, y = dp_worker.batch()
        single_losses, single_params = dp_worker.train(x, y, jitted=True)
        jax_losses, jax_params = jax_training(jnp.asarray(x), jnp.asarray(y))
    finally:
        results = results_of(procs)

    np.testing.assert_allclose(single_losses, jax_losses, **TOL)
    assert_params_close(single_params, jax_params, "one process vs jax.value_and_grad")
    assert single_losses[-1] < single_losses[0]

    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["size"] == N_PROCESSES for r in results)
    for r in results:
        assert_params_close(r["params"], single_params, f"rank {r['rank']} vs one process")
    # Each process returns its own half's loss; equal halves: their mean is the batch's.
    mean_losses = np.mean([r["losses"] for r in results], axis=0)
    np.testing.assert_allclose(mean_losses, single_losses, **TOL)
    assert not np.allclose(results[0]["losses"], results[1]["losses"])

    # DistributedGradReducer in PYNATIVE mode: rank r sent (r + 1) * ones and r.
    for r in results:
        assert r["reduced_mean_True"] == [[[1.5] * 3] * 2, 0.5]
        assert r["reduced_mean_False"] == [[[3.0] * 3] * 2, 1.0]


# -- the parallel context, in this process --------------------------------------------
@pytest.fixture
def parallel_context():
    ms.reset_auto_parallel_context()
    yield
    ms.reset_auto_parallel_context()


def test_auto_parallel_context_as_mindspore(parallel_context):
    # MindSpore 2.10 printed: stand_alone False 1 before, data_parallel True 2 after.
    get = ms.get_auto_parallel_context
    assert (get("parallel_mode"), get("gradients_mean"), get("device_num")) == (
        "stand_alone",
        False,
        1,
    )
    ms.set_auto_parallel_context(
        parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True, device_num=2
    )
    assert (get("parallel_mode"), get("gradients_mean"), get("device_num")) == (
        "data_parallel",
        True,
        2,
    )
    assert ms.context.ParallelMode is ms.ParallelMode
    assert ms.context.get_auto_parallel_context is get
    ms.reset_auto_parallel_context()
    assert (get("parallel_mode"), get("gradients_mean"), get("device_num")) == (
        "stand_alone",
        False,
        1,
    )


def test_auto_parallel_context_refuses_as_mindspore(parallel_context):
    # MindSpore 2.10's errors for the same calls (types and messages).
    with pytest.raises(ValueError, match="only support .* but got the value : bogus"):
        ms.set_auto_parallel_context(parallel_mode="bogus")
    with pytest.raises(ValueError, match="Set context keyword foo is not recognized!"):
        ms.set_auto_parallel_context(foo=1)
    with pytest.raises(ValueError, match="Get context keyword foo is not recognized!"):
        ms.get_auto_parallel_context("foo")
    with pytest.raises(ValueError, match="'device_num' must be a positive integer"):
        ms.set_auto_parallel_context(device_num=0)
    with pytest.raises(TypeError, match="'gradients_mean' must be <class 'bool'>"):
        ms.set_auto_parallel_context(gradients_mean=1)
    # MindSpore's, which k_transform does not run: refused by name.
    with pytest.raises(ValueError, match="not 'semi_auto_parallel' yet"):
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    with pytest.raises(ValueError, match="no setting 'full_batch'"):
        ms.set_auto_parallel_context(full_batch=True)
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"  # nothing was set


def test_train_step_needs_device_num_to_be_the_process_count(parallel_context):
    ms.set_auto_parallel_context(parallel_mode="data_parallel", device_num=2)
    net = nn.Dense(3, 2)
    with pytest.raises(ValueError, match="device_num=2, but there are 1 processes"):
        nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()))


def test_grad_reducer_arguments():
    params = nn.Dense(3, 2).trainable_params()
    with pytest.raises(ValueError, match="degree must be a positive int"):
        nn.DistributedGradReducer(params, degree=0)
    with pytest.raises(ValueError, match="not the world group"):
        nn.DistributedGradReducer(params, group="my_group")


# -- communication -----------------------------------------------------------------
def test_communication_names_and_single_process_answers():
    from k_transform.mindspore.communication.management import get_group_size, get_rank, init

    assert init is communication.init and ms.communication is communication
    # MindSpore 2.10 without init(): get_rank() 0, get_group_size() 1.
    assert (get_rank(), get_group_size()) == (0, 1)
    assert communication.GlobalComm.WORLD_COMM_GROUP == "hccl_world_group"
    with pytest.raises(AttributeError, match="communication.create_group"):
        communication.create_group  # noqa: B018
    with pytest.raises(TypeError, match="'backend_name' must be a string"):
        communication.init(3)
    with pytest.raises(RuntimeError, match="must be one of 'hccl', 'nccl' and 'mccl'"):
        communication.init("gloo")
    with pytest.raises(ValueError, match="not the world group"):
        get_rank("my_group")


@pytest.mark.parametrize(
    "env, want",
    [
        (
            {"MS_SCHED_HOST": "10.0.0.1", "MS_SCHED_PORT": "8118", "MS_WORKER_NUM": "4"}
            | {"MS_NODE_ID": "3"},
            {"coordinator_address": "10.0.0.1:8118", "num_processes": 4, "process_id": 3},
        ),
        (
            {"MS_SCHED_PORT": "8118", "MS_WORKER_NUM": "2", "RANK_ID": "1"},
            {"coordinator_address": "127.0.0.1:8118", "num_processes": 2, "process_id": 1},
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"},
            {"coordinator_address": "h:1", "num_processes": 2, "process_id": 0},
        ),
        ({}, {}),
    ],
)
def test_the_job_is_read_from_the_environment(monkeypatch, env, want):
    for name in ["MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID"]:
        monkeypatch.delenv(name, raising=False)
    for name in ["RANK_ID", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert communication.cluster_from_env() == want


def test_a_job_environment_that_cannot_work_is_refused(monkeypatch):
    monkeypatch.setenv("MS_WORKER_NUM", "2")
    monkeypatch.setenv("MS_NODE_ID", "0")
    monkeypatch.delenv("MS_SCHED_PORT", raising=False)
    with pytest.raises(RuntimeError, match="MS_WORKER_NUM is set but MS_SCHED_PORT is not"):
        communication.cluster_from_env()
    monkeypatch.setenv("MS_SCHED_PORT", "eighty")
    with pytest.raises(RuntimeError, match="MS_SCHED_PORT='eighty' is not an integer"):
        communication.cluster_from_env()
    monkeypatch.setenv("MS_ROLE", "MS_SCHED")
    with pytest.raises(RuntimeError, match="needs no scheduler process"):
        communication.cluster_from_env()
