"""Tests for tfmp/run/replica_state.py.

Under MirroredStrategy (conftest's two logical CPUs) the copies are saved and
restored for real in tests/run/test_checkpoint.py; the two-worker checkpoint
is the slow test in tests/run/test_preemption.py. These check which copies fit
a checkpoint, and which row a worker's replica takes.
"""

import types

import pytest
import tensorflow as tf

from tfmp.run import replica_state

KEY = "{}/{}/.ATTRIBUTES/VARIABLE_VALUE"


def _state(name, copies, replicas=4):
    state = replica_state.ReplicaState.__new__(replica_state.ReplicaState)
    state.name, state.copies, state.replicas = name, [None] * copies, replicas
    return state


@pytest.mark.parametrize(
    "name, shapes, fits, saved",
    [
        ("replicas", {KEY.format("replicas", 0): [3], KEY.format("replicas", 1): [3]}, True, "2 per-replica copies"),
        ("replicas", {KEY.format("replicas", 0): [3]}, False, "1 per-replica copies"),
        ("replicas", {"step/.ATTRIBUTES/VARIABLE_VALUE": []}, False, None),
        ("workers", {KEY.format("workers", 0): [4, 3], KEY.format("workers", 1): [4, 3]}, True, None),
        ("workers", {KEY.format("workers", 0): [2, 3], KEY.format("workers", 1): [2, 3]}, False, "of 2 replicas"),
        ("workers", {KEY.format("replicas", 0): [3], KEY.format("replicas", 1): [3]}, False, "2 per-replica"),
    ],
)
def test_a_checkpoint_fits_when_it_holds_the_same_copies_and_else_says_what_it_holds(name, shapes, fits, saved):
    state = _state(name, 2)
    assert state.fits(shapes) is fits
    described = replica_state.ReplicaState.saved(shapes)
    if saved is None:
        assert described is None or fits
    else:
        assert saved in described
    assert state.describe() == ("2" if name == "replicas" else "4 replicas across workers")


@pytest.mark.parametrize(
    "cluster, task_type, task_id, first",
    [
        ({"worker": ["a:1", "b:1"]}, "worker", 0, 0),
        ({"worker": ["a:1", "b:1"]}, "worker", 1, 2),
        ({"chief": ["c:1"], "worker": ["a:1", "b:1"]}, "chief", 0, 0),
        ({"chief": ["c:1"], "worker": ["a:1", "b:1"]}, "worker", 1, 4),
    ],
)
def test_a_worker_takes_the_rows_of_its_replicas_the_chief_first(cluster, task_type, task_id, first):
    # As MultiWorkerMirroredStrategy numbers replicas: the chief's, then each worker's, two per worker here.
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id
    )
    strategy = types.SimpleNamespace(cluster_resolver=resolver)
    assert replica_state._first_replica_of_this_worker(strategy, 2) == first
    assert replica_state._workers(strategy) == sum(len(v) for v in cluster.values())
