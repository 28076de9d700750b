"""Every private Keras and TensorFlow API the run framework relies on, in one place.

The run framework works around TensorFlow and Keras where their public API
has no answer: a lost worker's heartbeat, Slurm's node lists without
`scontrol`, the op-determinism switch, the profiler's step markers and trace
format. Each use is wrapped here with the version it was checked against, why
it is needed and the public alternative, if any; the rest of `tfmp.run`
imports these wrappers (and the core's it needs, re-exported from
`tfmp._compat`: a functional layer's graph edges) and touches no private name
itself.

`PRIVATE_APIS` lists what this module reaches into, and `check()` raises an
`ImportError` naming each one the installed Keras or TensorFlow no longer
has (`tests/run/test_private_apis.py` runs it). One private use is not an attribute
and has nothing to check: `step_trace` passes the profiler's `_r` key, which
`tf.profiler.experimental.Trace` takes through `**kwargs` as trace metadata.
If TensorFlow stops reading it, the key is kept as plain metadata and the
profiler's step view loses its step markers; nothing fails.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2 as _coordination_config  # TF 2.21
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as _tf_slurm  # TF 2.21
from tensorflow.python.eager import context as _tf_context  # TF 2.21
from tensorflow.python.framework import config as _tf_config  # TF 2.21
from tensorflow.python.framework import ops as _tf_ops  # TF 2.21
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TF 2.21: the profiler's trace format

from tfmp._compat import PrivateAPI, inbound_nodes, missing, missing_error

__all__ = [
    "PRIVATE_APIS",
    "check",
    "configure_worker_heartbeat",
    "count_host_reads",
    "on_host",
    "disable_op_determinism",
    "expand_slurm_hostlist",
    "expand_slurm_tasks_per_node",
    "inbound_nodes",
    "is_op_determinism_enabled",
    "step_trace",
    "xplane_pb2",
]

PRIVATE_APIS = (
    PrivateAPI(
        "tensorflow.python.framework.config",
        "disable_op_determinism",
        "restore op determinism after a run (no public off switch)",
    ),
    PrivateAPI(
        "tensorflow.python.framework.config",
        "is_op_determinism_enabled",
        "read the op-determinism setting (no public getter)",
    ),
    PrivateAPI(
        "tensorflow.python.eager.context.Context",
        "configure_coordination_service",
        "the heartbeat timeout after which a lost worker stops the others (configure_worker_heartbeat)",
    ),
    PrivateAPI(
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2",
        "CoordinatedJob",
        "the jobs the coordination service watches (configure_worker_heartbeat)",
    ),
    PrivateAPI(
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
        "expand_hostlist",
        "Slurm's node list without scontrol (expand_slurm_hostlist)",
    ),
    PrivateAPI(
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
        "expand_tasks_per_node",
        "Slurm's tasks per node (expand_slurm_tasks_per_node)",
    ),
    PrivateAPI(
        "tensorflow.python.framework.ops._EagerTensorBase",
        "_numpy",
        "every copy of a tensor's value to the host passes through it; counted by the benchmark (count_host_reads)",
    ),
    PrivateAPI(
        "tensorflow.tsl.profiler.protobuf.xplane_pb2",
        "XSpace",
        "the TensorFlow profiler's trace, read by the benchmark's ceiling mode",
    ),
)


def check() -> None:
    """Raises `ImportError` naming every private API in `PRIVATE_APIS` that is gone.

    Raises:
        ImportError: listing each missing `owner.name` and what the run
            framework used it for, with the installed and the checked versions.
    """
    owners = {
        "tensorflow.python.framework.config": _tf_config,
        "tensorflow.python.eager.context.Context": _tf_context.Context,
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2": _coordination_config,
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver": _tf_slurm,
        "tensorflow.tsl.profiler.protobuf.xplane_pb2": xplane_pb2,
        "tensorflow.python.framework.ops._EagerTensorBase": _tf_ops._EagerTensorBase,
    }
    gone = missing(PRIVATE_APIS, owners, {})
    if gone:
        raise missing_error(gone, "tfmp/run/_private_apis.py")


# -- TensorFlow -------------------------------------------------------------------------------


@contextlib.contextmanager
def count_host_reads() -> Iterator[list[int]]:
    """Counts the copies of eager tensors' values to the host (`.numpy()`, `float()`, `bool()`, `np.array`).

    Yields a one-element list that holds the count so far. A read counts
    when it would wait for an accelerator: with a GPU, a read of a tensor on
    it; without one, any read but those inside `on_host()`, whose tensors
    stay on the host on any machine. TensorFlow has no public hook.
    `.numpy()`, `float()`, `int()` and `bool()` go through
    `_EagerTensorBase._numpy`; `np.array` and `np.asarray` (how Keras turns
    logs into numbers) read an eager tensor through the buffer protocol, in
    C, so those two numpy functions are wrapped instead, counting a call on
    an eager tensor. All three are put back after the block.
    """
    count = [0]
    numpy_read = _tf_ops._EagerTensorBase._numpy
    array, asarray = np.array, np.asarray
    gpu = bool(_tf_config.list_physical_devices("GPU"))

    def counted(tensor: Any) -> Any:
        count[0] += _waits(tensor, gpu)
        return numpy_read(tensor)

    def counting(convert: Callable[..., Any]) -> Callable[..., Any]:
        def convert_counted(value: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(value, _tf_ops._EagerTensorBase):
                count[0] += _waits(value, gpu)
            return convert(value, *args, **kwargs)

        return convert_counted

    _tf_ops._EagerTensorBase._numpy = counted
    np.array, np.asarray = counting(array), counting(asarray)
    try:
        yield count
    finally:
        _tf_ops._EagerTensorBase._numpy = numpy_read
        np.array, np.asarray = array, asarray


_HOST_SIDE = threading.local()


@contextlib.contextmanager
def on_host() -> Iterator[None]:
    """Runs the block's eager ops on the host CPU, whatever the device; its reads are not counted as waits.

    For bookkeeping around a step (a TensorBoard summary's value and its
    recording condition): on a GPU those small eager ops would run there, and
    reading the condition back would wait for the step. `count_host_reads`
    leaves out the reads made inside.
    """
    outer = getattr(_HOST_SIDE, "active", False)
    _HOST_SIDE.active = True
    try:
        with tf.device("/cpu:0"):
            yield
    finally:
        _HOST_SIDE.active = outer


def _waits(tensor: Any, gpu: bool) -> int:
    """1 if reading `tensor` would wait for an accelerator (see `count_host_reads`), else 0."""
    if gpu:
        return 0 if "CPU" in tensor.device.upper() else 1
    return 0 if getattr(_HOST_SIDE, "active", False) else 1


def configure_worker_heartbeat(cluster: dict[str, list[str]], timeout_seconds: float) -> None:
    """Makes `MultiWorkerMirroredStrategy`'s coordination service declare a worker lost after `timeout_seconds`.

    Call it before creating the strategy, which then keeps this
    configuration instead of its own (the same service, leader and jobs, with
    TensorFlow's default heartbeat timeout). A task that sends no heartbeat
    for that long is reported to every other task, whose collectives then
    fail with `tf.errors.UnavailableError` naming it. No public alternative:
    `tf.distribute.experimental.CommunicationOptions(timeout_seconds=...)`
    bounds each collective instead, which would also stop a healthy run
    whose worker takes longer (validation, a checkpoint write) to reach the
    next collective.

    Args:
        cluster: The `TF_CONFIG` cluster: `chief` and `worker` address lists.
        timeout_seconds: Seconds without a heartbeat before a task is lost.
    """
    jobs = [
        _coordination_config.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
        for job in ("chief", "worker")
        if cluster.get(job)
    ]
    leader = "/job:chief/replica:0/task:0" if cluster.get("chief") else "/job:worker/replica:0/task:0"
    _tf_context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=leader,
        heartbeat_timeout_in_ms=int(timeout_seconds * 1000),
        coordinated_jobs=jobs,
    )


def expand_slurm_hostlist(text: str) -> list[str]:
    """Slurm's compressed node list (`node[1-3],gpu7`) as host names, with TensorFlow's own parser.

    No public alternative without `scontrol show hostnames`, which containers often lack.
    """
    return _tf_slurm.expand_hostlist(text)


def expand_slurm_tasks_per_node(text: str) -> list[int]:
    """Slurm's tasks per node (`2(x3),1`) as one count per node, with TensorFlow's own parser."""
    return _tf_slurm.expand_tasks_per_node(text)


def is_op_determinism_enabled() -> bool:
    """Whether `tf.config.experimental.enable_op_determinism` is on (no public getter)."""
    return _tf_config.is_op_determinism_enabled()


def disable_op_determinism() -> None:
    """Turns op determinism off again (no public off switch)."""
    _tf_config.disable_op_determinism()


def step_trace(name: str, step: int) -> tf.profiler.experimental.Trace:
    """A profiler trace event that marks training step `step` (enter it around the step).

    `_r=1` marks the event as a step's root, so the profile plugin's
    step-time view groups the step's work under it (tf.keras 2's `fit()`
    traced every step this way; the example in `Trace`'s docstring passes it
    too). It is a private metadata key, not a parameter, so `check()` cannot
    see it. Public alternative: `tf.profiler.experimental.Trace(name,
    step_num=step)`, as Keras 3's TensorBoard callback does, which leaves the
    profiler to find the step boundaries by itself.

    Args:
        name: The trace event's name.
        step: The step number shown in the profile.

    Returns:
        The `Trace`, not yet entered.
    """
    return tf.profiler.experimental.Trace(name, step_num=step, _r=1)
