"""tf.distribute for training runs: which strategy, who writes, how big a batch.

A run names its strategy (`TrainConfig.strategy`, the scripts' `--strategy`):

* `default`: TensorFlow's default strategy, one device (or the strategy
  whose scope is active when the run starts);
* `mirrored`: `tf.distribute.MirroredStrategy`, one replica per local GPU
  (without GPUs, one per logical CPU device);
* `multi_worker`: `tf.distribute.MultiWorkerMirroredStrategy` across hosts,
  each host reading its role from the `TF_CONFIG` environment variable
  (`tf_config_example` shows one) or, with `cluster="slurm"`, from the
  environment `srun` gives its tasks (`tfmp.run.cluster`).

Everything that touches the strategy's variables (models, optimizers with
their loss scaling, metrics, `compile()`) is built under `strategy.scope()`;
`fit()` then splits each global batch across the replicas
(`per_replica_batch`). Only the chief writes the run's files (TensorBoard
logs, checkpoints): `is_chief` says who that is, and `writable_dir` gives
every other worker a private directory for the same writes, since some
saves (checkpoints) need every worker to take part. `AverageReplicaStatistics`
keeps BatchNorm's moving statistics equal on all replicas, which Keras 3
leaves to drift apart.

```python
strategy = distribute.make_strategy("multi_worker")   # first: before other TF ops
with strategy.scope():
    model = build_model()
    model.compile(...)
model.fit(dataset_of_global_batches, callbacks=[
    distribute.AverageReplicaStatistics(),
    keras.callbacks.TensorBoard(distribute.writable_dir("logs/run", strategy))])
```
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfmp.run import _private_apis
from tfmp.run import cluster as cluster_lib
from tfmp.run.cluster import tf_config_example  # still importable from here

# Defined with the settings they check; importable from here.
from tfmp.run.config import CLUSTERS, SLURM_PORT_BASE, STRATEGIES

__all__ = [
    "CLUSTERS",
    "FIRST",
    "STRATEGIES",
    "AverageReplicaStatistics",
    "average_across_replicas",
    "is_chief",
    "STRATEGY_SETTINGS",
    "make_strategy",
    "make_strategy_for",
    "name_of",
    "per_replica_batch",
    "replica_averager",
    "task",
    "tf_config_example",
    "writable_dir",
]

# One strategy object per process and setting. Two MirroredStrategy objects
# over the same devices hand out the same collective instance keys (eager
# collectives of one then clash with the other's: "Shape mismatch in the
# collective instance"), and a second MultiWorkerMirroredStrategy would start
# a second server on the task's port; so `make_strategy` returns the one it
# made before.
_STRATEGIES: dict[tuple[Any, ...], tf.distribute.Strategy] = {}

# The strategies TensorFlow lets a process create only before its first
# operation: whoever runs user code that may build TensorFlow objects (a task
# module building its optimizer at import) makes these first, then hands
# the strategy on (`tfmp.run.training.train(task, strategy=...)`).
FIRST = frozenset({"multi_worker"})

# The settings of a config that make its run's strategy (`make_strategy_for`).
STRATEGY_SETTINGS = ("strategy", "cluster", "slurm_port_base", "worker_timeout")


def make_strategy(
    name: str,
    devices: Sequence[str] | None = None,
    *,
    cluster: str = "tf_config",
    slurm_port_base: int = SLURM_PORT_BASE,
    worker_timeout: float | None = None,
) -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` a run names.

    Calling it again with the same arguments in the same environment
    returns the same object (see the module's note on collective keys).
    `multi_worker` reads its cluster (`TF_CONFIG`, or Slurm's environment:
    `tfmp.run.cluster.resolver`) and must run before any other TensorFlow
    operation in the process: it
    configures the process's collective ops, which TensorFlow allows only
    at start-up. It blocks until every worker of the cluster has started.

    Args:
        name: One of `STRATEGIES`.
        devices: For `mirrored` only: the devices to mirror over, e.g.
            `["/gpu:0", "/gpu:1"]`; by default every local GPU, or every
            logical CPU device when there is no GPU.
        cluster: For `multi_worker` only: where the hosts come from,
            `"tf_config"` or `"slurm"` (`tfmp.run.cluster`).
        slurm_port_base: For `cluster="slurm"`: the port of each node's
            first task; its k-th task listens on `slurm_port_base + k`.
        worker_timeout: For `multi_worker`: seconds without a heartbeat
            after which a worker counts as lost and the others' collectives
            fail naming it (`tfmp.run.preemption.worker_lost`); None keeps
            TensorFlow's default.

    Returns:
        The strategy.

    Raises:
        ValueError: for an unknown name, `devices` with another strategy
            than `mirrored`, a `cluster` with another strategy than
            `multi_worker`, or (`multi_worker`) a missing or malformed
            `TF_CONFIG` or Slurm environment.
        RuntimeError: `multi_worker` requested after TensorFlow started.
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy. Valid: {', '.join(STRATEGIES)}. Received: strategy={name!r}")
    if devices is not None and name != "mirrored":
        raise ValueError(
            f"devices can only be given to the mirrored strategy. Received: strategy={name!r}, devices={devices!r}"
        )
    if cluster != "tf_config" and name != "multi_worker":
        raise ValueError(
            f"cluster only applies to the multi_worker strategy. Received: strategy={name!r}, cluster={cluster!r}"
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(None if devices is None else list(devices))
        # Keyed by the devices it resolved, however they were named.
        return _STRATEGIES.setdefault((name, tuple(strategy.extended.worker_devices)), strategy)
    resolver = cluster_lib.resolver(cluster, slurm_port_base)
    spec = json.dumps(resolver.cluster_spec().as_dict(), sort_keys=True)
    key: tuple[Any, ...] = (name, spec, resolver.task_type, resolver.task_id, resolver.rpc_layer)
    if key not in _STRATEGIES:
        try:
            if worker_timeout is not None:
                _private_apis.configure_worker_heartbeat(resolver.cluster_spec().as_dict(), worker_timeout)
            _STRATEGIES[key] = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        except RuntimeError as e:
            raise RuntimeError(
                "MultiWorkerMirroredStrategy must be created before any other TensorFlow operation runs in "
                "this process (it configures collective ops, which TensorFlow allows only at start-up): call "
                f"make_strategy('multi_worker') first. Received: {e}"
            ) from None
    return _STRATEGIES[key]


def make_strategy_for(
    settings: Any, make: Callable[..., tf.distribute.Strategy] | None = None
) -> tf.distribute.Strategy:
    """The strategy `settings` name: `make_strategy` of their `STRATEGY_SETTINGS`.

    Args:
        settings: A config (`tfmp.run.config.TrainConfig`), or a mapping
            with a value for each of `STRATEGY_SETTINGS`.
        make: Makes the strategy, called as `make_strategy` is; None: `make_strategy`.
    """
    if not isinstance(settings, Mapping):
        settings = {name: getattr(settings, name) for name in STRATEGY_SETTINGS}
    return (make or make_strategy)(
        settings["strategy"],
        cluster=settings["cluster"],
        slurm_port_base=settings["slurm_port_base"],
        worker_timeout=settings["worker_timeout"],
    )


def name_of(strategy: tf.distribute.Strategy) -> str:
    """The name in `STRATEGIES` of the kind of strategy `strategy` is.

    `multi_worker` for a `MultiWorkerMirroredStrategy`, `mirrored` for a
    `MirroredStrategy`, and `default` for any other (TensorFlow's default
    strategy, or one a caller made itself such as `OneDeviceStrategy`).
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "mirrored"
    return "default"


def task(strategy: tf.distribute.Strategy) -> tuple[str | None, int | None]:
    """This process's `(task type, task id)` in a multi-worker cluster.

    `(None, None)` for a single-process strategy (default, mirrored, or
    multi-worker without a cluster).
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return None, None
    return resolver.task_type, resolver.task_id


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files (logs, checkpoints, model).

    The chief is the `chief` task, or worker 0 when the cluster has no
    chief (TensorFlow's and Keras's convention). A single-process strategy
    is always its own chief.
    """
    task_type, task_id = task(strategy)
    if task_type is None:
        return True
    if "chief" in strategy.cluster_resolver.cluster_spec().as_dict():
        return task_type == "chief"
    return task_type == "worker" and task_id == 0


def _worker_root(strategy: tf.distribute.Strategy) -> str:
    task_type, task_id = task(strategy)
    return os.path.join(tempfile.gettempdir(), f"tfmp_workertemp_{task_type}_{task_id}")


def writable_dir(path: str, strategy: tf.distribute.Strategy) -> str:
    """Where this process writes what belongs in `path`.

    On the chief, `path` itself. On another worker, a private directory
    under the system's temporary directory (`tempfile.gettempdir()`, so
    `TMPDIR` moves it), named after the task as in Keras's `workertemp_<id>`
    convention but kept out of `path`, so that a shared file system never
    shows TensorBoard a worker's copy. Every worker runs the same writes,
    since saving a distributed model's variables needs them all; only the
    chief's files are the run's. A worker's copy stays until a later run
    writing to the same `path` overwrites it. The directory is not created.

    Args:
        path: The directory the chief writes.
        strategy: The run's strategy.

    Returns:
        `path` on the chief, else `<tmp>/tfmp_workertemp_<type>_<id>/<absolute path>`.
    """
    if is_chief(strategy):
        return path
    return os.path.join(_worker_root(strategy), os.path.abspath(path).lstrip(os.sep))


def per_replica_batch(global_batch: int, strategy: tf.distribute.Strategy) -> int:
    """The batch each replica computes on, given the global batch of a step.

    `fit()` under a strategy splits each global batch across all replicas
    of all workers, so each replica gets `global_batch / num_replicas`.

    Raises:
        ValueError: when the global batch does not split evenly, naming
            both numbers.
    """
    replicas = strategy.num_replicas_in_sync
    if global_batch < replicas or global_batch % replicas:
        raise ValueError(
            f"The global batch size must be a positive multiple of the {replicas} replicas, so every replica "
            f"gets the same share; use e.g. {max(replicas, global_batch // replicas * replicas)}. "
            f"Received: batch_size={global_batch} with {replicas} replicas"
        )
    return global_batch // replicas


def average_across_replicas(variables: Sequence[keras.Variable], strategy: tf.distribute.Strategy) -> None:
    """Sets each variable, on every replica of every worker, to the mean of its replicas' copies.

    For state a replica updates from its own share of the batch, such as
    BatchNorm's moving statistics: Keras 3 creates them with no cross-replica
    aggregation, so each replica keeps its own copy and the copies drift
    apart (tf.keras 2 averaged them whenever they were read). The moving
    averages are linear in the batch statistics, so averaging the copies
    gives what one copy updated with the replicas' mean statistics holds.
    Every worker must call this at the same point: it is a collective.

    Args:
        variables: Variables created under `strategy.scope()`.
        strategy: Their strategy; with one replica nothing happens.
    """
    replica_averager(variables, strategy)()


def replica_averager(variables: Sequence[keras.Variable], strategy: tf.distribute.Strategy) -> Callable[[], None]:
    """`average_across_replicas(variables, strategy)` as one function, traced once however often it is called.

    Args:
        variables: Variables created under `strategy.scope()`.
        strategy: Their strategy; with one replica the function does nothing.

    Returns:
        A function of no arguments that averages the copies (a collective:
        every worker must call it at the same point).
    """
    variables = list(variables)
    if strategy.num_replicas_in_sync == 1 or not variables:
        return lambda: None

    def replica_fn():
        context = tf.distribute.get_replica_context()
        # This replica's copies; tf.identity places each on the replica's device,
        # which the all-reduce needs (a bare variable read has none).
        local = [tf.identity(v) for v in variables]
        means = context.all_reduce(tf.distribute.ReduceOp.MEAN, local)
        for variable, mean in zip(variables, means):
            variable.assign(mean)

    # In a graph: replicas run concurrently there, as collectives require.
    return tf.function(lambda: strategy.run(replica_fn))


class AverageReplicaStatistics(keras.callbacks.Callback):
    """Keeps the model's non-trainable float state the same on every replica.

    Before each validation pass and at each epoch's end (before later
    callbacks save or log the model), it calls
    `average_across_replicas` on the model's non-trainable floating-point
    variables (BatchNorm moving statistics). Put it first in the callback
    list. Does nothing with one replica.
    """

    def __init__(self):
        super().__init__()
        self._averager: Callable[[], None] | None = None
        self._averaged: tuple[int, ...] = ()

    def _average(self) -> None:
        strategy = self.model.distribute_strategy
        if strategy.num_replicas_in_sync > 1:
            variables = [v for v in self.model.non_trainable_variables if "float" in str(v.dtype)]
            # One traced function for the run (a new one per call would be traced at every epoch's end).
            if self._averager is None or self._averaged != tuple(map(id, variables)):
                self._averager = replica_averager(variables, strategy)
                self._averaged = tuple(map(id, variables))
            self._averager()

    def on_test_begin(self, logs=None):
        self._average()

    def on_epoch_end(self, epoch, logs=None):
        self._average()
