"""The state each replica keeps apart, as plain variables a checkpoint can hold.

Under a `tf.distribute` strategy a non-trainable variable (BatchNorm's
moving statistics) has one copy per replica, each updated from that
replica's share of the batch until `tfmp.run.distribute.AverageReplicaStatistics`
averages them at the epoch's end. A checkpoint saves a distributed
variable's first local copy only, so a run resumed mid-epoch would give
every replica that copy and end the epoch with other averages than the run
it continues. `ReplicaState` keeps the other copies in plain variables that
`tfmp.run.checkpoint.RunCheckpoint` saves and restores:

* one process (`MirroredStrategy`): each further local replica's copy, one
  plain variable per copy, under the checkpoint's `replicas` (`replicas/<i>`);
* several workers (`MultiWorkerMirroredStrategy`): every replica of every
  worker, gathered before each save (an all-gather, so every worker must save
  at the same steps, as the checkpointing callback does) into one plain
  variable per state variable holding all the copies (`workers/<i>`, shape
  `[replicas, ...]`). Every worker writes the same values, so the chief's
  checkpoint holds the others' statistics too, and on restore each replica
  takes its own row.

Trainable variables are kept equal by the all-reduced updates and need none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["ReplicaState"]


def _first_replica_of_this_worker(strategy: tf.distribute.Strategy, local_replicas: int) -> int:
    """The global index of this worker's first replica (the chief's replicas come first, then each worker's)."""
    resolver = strategy.cluster_resolver
    chiefs = len(resolver.cluster_spec().as_dict().get("chief", []))
    worker_id = 0 if resolver.task_type == "chief" else resolver.task_id + chiefs
    return worker_id * local_replicas


def _workers(strategy: tf.distribute.Strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return 1
    spec = resolver.cluster_spec().as_dict()
    return sum(len(spec.get(role, [])) for role in ("chief", "worker"))


class ReplicaState:
    """The per-replica copies of a trainer's non-trainable variables, for its checkpoint.

    Args:
        trainer: A `tfmp.trainers` trainer built under its strategy's scope.

    Attributes:
        name: The checkpoint's key for the copies: `"replicas"` or `"workers"`.
        copies: The plain variables to put in the checkpoint under `name`
            (empty when there is nothing to keep: one replica in all).
    """

    def __init__(self, trainer: Any):
        strategy = trainer.distribute_strategy
        self._strategy = strategy
        self._variables = [v for v in trainer.variables if not v.trainable]
        self._local_replicas = strategy.num_replicas_in_sync if _workers(strategy) == 1 else None
        self.replicas = strategy.num_replicas_in_sync
        self.name = "workers" if _workers(strategy) > 1 else "replicas"
        self.copies: list[tf.Variable] = []
        self._pairs: list[tuple[Any, tf.Variable]] = []
        if self.name == "replicas":
            for variable in self._variables:
                for replica in strategy.experimental_local_results(variable.value)[1:]:
                    with tf.init_scope(), tf.device("/cpu:0"):
                        self._pairs.append((replica, tf.Variable(replica.read_value(), trainable=False)))
            self.copies = [copy for _, copy in self._pairs]
            return
        self._local_replicas = len(strategy.extended.worker_devices)
        with tf.init_scope(), tf.device("/cpu:0"):
            self.copies = [
                tf.Variable(tf.zeros([self.replicas, *v.shape], v.dtype), trainable=False) for v in self._variables
            ]
        variables = self._variables

        def replica_fn() -> list[tf.Tensor]:
            context = tf.distribute.get_replica_context()
            # tf.identity reads this replica's copy onto its device, as the collective needs.
            return context.all_gather([tf.expand_dims(tf.identity(v), 0) for v in variables], axis=0)

        self._gather = tf.function(lambda: strategy.run(replica_fn))

    def save(self) -> None:
        """Copies every replica's state into `copies` (under several workers: a collective)."""
        if self.name == "replicas":
            for replica, copy in self._pairs:
                copy.assign(replica.read_value())
            return
        if not self.copies:
            return
        for copy, gathered in zip(self.copies, self._gather()):
            copy.assign(self._strategy.experimental_local_results(gathered)[0])

    def restore(self) -> None:
        """Gives each of this process's replicas its own copy from `copies` (after a checkpoint read)."""
        if self.name == "replicas":
            for replica, copy in self._pairs:
                replica.assign(copy.read_value())
            return
        first = _first_replica_of_this_worker(self._strategy, self._local_replicas)
        for variable, copy in zip(self._variables, self.copies):
            for r, replica in enumerate(self._strategy.experimental_local_results(variable.value)):
                replica.assign(copy[first + r])

    def fits(self, shapes: Mapping[str, Sequence[int]]) -> bool:
        """Whether the copies of a checkpoint with these `shapes` (key: shape) fit `copies`."""
        replicas, workers = _saved_keys(shapes)
        if self.name == "replicas":
            return not workers and len(replicas) == len(self.copies)
        return (
            not replicas and len(workers) == len(self.copies) and all(shapes[k][:1] == [self.replicas] for k in workers)
        )

    @staticmethod
    def saved(shapes: Mapping[str, Sequence[int]]) -> str | None:
        """What per-replica copies a checkpoint with these `shapes` holds (`"2 per-replica copies"`), or None."""
        replicas, workers = _saved_keys(shapes)
        if replicas:
            return f"{len(replicas)} per-replica copies"
        if workers:
            counts = sorted({shapes[k][0] for k in workers if shapes[k]})
            return f"the copies of {'/'.join(map(str, counts))} replicas across workers"
        return None

    def describe(self) -> str:
        """What this run keeps, in the terms of `saved`: the number of copies, or the replicas across workers."""
        return str(len(self.copies)) if self.name == "replicas" else f"{self.replicas} replicas across workers"


def _saved_keys(shapes: Mapping[str, Sequence[int]]) -> tuple[list[str], list[str]]:
    """The checkpoint keys of `replicas` and of `workers` copies."""
    return [
        sorted(k for k in shapes if re.match(rf"^{name}/\d+/\.ATTRIBUTES/VARIABLE_VALUE$", k))
        for name in ("replicas", "workers")
    ]
