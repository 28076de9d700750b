"""Tests for tfmp/run/_private_apis.py: the private TensorFlow and Keras APIs the run framework uses are all there."""

import keras
import pytest
import tensorflow as tf
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver

from tfmp.run import _private_apis


def test_the_installed_keras_and_tensorflow_have_every_private_api_the_run_framework_uses():
    _private_apis.check()  # raises ImportError naming what is missing


def test_a_missing_private_api_is_named_with_what_it_was_for(monkeypatch):
    monkeypatch.delattr(slurm_cluster_resolver, "expand_tasks_per_node")
    with pytest.raises(ImportError) as error:
        _private_apis.check()
    message = str(error.value)
    assert (
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver.expand_tasks_per_node "
        "(Slurm's tasks per node (expand_slurm_tasks_per_node))" in message
    )
    assert f"Keras {keras.__version__} / TensorFlow {tf.__version__}" in message
    assert "update tfmp/run/_private_apis.py" in message
    assert "expand_hostlist" not in message  # only what is gone


def test_slurms_lists_expand_with_tensorflows_parser():
    assert _private_apis.expand_slurm_hostlist("node[1-3],gpu7") == ["node1", "node2", "node3", "gpu7"]
    assert _private_apis.expand_slurm_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
