"""Tests for tfmp/scaling.py: scaling a loss and unscaling gradients in float32, and the one finite check.

The scale's state machine (`next_loss_scale`) is tested with the optimizer built on it, in
tests/test_loss_scale.py.
"""

import numpy as np
import tensorflow as tf

from tfmp import loss_scale, scaling


def test_a_float16_loss_is_scaled_in_float32_so_the_scaled_value_does_not_overflow():
    scaled = scaling.scale_loss(tf.constant(4.0, tf.float16), tf.constant(2.0**15))
    assert scaled.dtype == tf.float32 and float(scaled) == 2.0**17  # 131072: float16's max is 65504
    assert float(scaling.scale_loss(tf.constant(3.0), None)) == 3.0


def test_unscaling_a_float16_gradient_runs_in_float32_and_keeps_sparse_indices_and_kept_entries():
    dense = tf.constant([2.0**-20, 1.0], tf.float16)
    sparse = tf.IndexedSlices(tf.constant([[8.0]]), tf.constant([3]), tf.constant([5, 1]))
    new_value = tf.constant([7.0])
    out = scaling.map_gradients(
        [dense, None, sparse, new_value], lambda x: x * 2.0**20, keep=[False, False, False, True]
    )
    # In float16, the factor 2**20 would be inf and 2**-20 * inf too: in float32, 1.0.
    assert out[0].dtype == tf.float16 and out[0].numpy().tolist() == [1.0, np.inf]
    assert out[1] is None and out[3] is new_value
    assert out[2].indices.numpy().tolist() == [3] and float(out[2].values[0, 0]) == 8.0 * 2.0**20


def test_one_finite_check_over_every_gradient_and_dtype():
    finite = [tf.ones([2, 3]), tf.ones([4], tf.float16), None]
    assert bool(scaling.all_finite(finite))
    assert not bool(scaling.all_finite(finite + [tf.constant([1.0, np.nan], tf.bfloat16)]))
    assert not bool(scaling.all_finite([tf.IndexedSlices(tf.constant([np.inf]), tf.constant([0]))]))
    assert bool(scaling.all_finite([]))


def test_the_loss_scale_module_still_exports_the_state_machine():
    assert loss_scale.next_loss_scale is scaling.next_loss_scale
    assert loss_scale.LossScaleState is scaling.LossScaleState


def test_a_large_gradient_is_checked_where_it_is_and_only_small_ones_are_copied_together():
    large = np.ones(scaling.CHECKED_ALONE, np.float32)
    small = [tf.ones([3]), tf.ones([2, 2])]
    for position in (0, scaling.CHECKED_ALONE - 1):
        bad = large.copy()
        bad[position] = np.nan
        assert not bool(scaling.all_finite([*small, tf.constant(bad)]))
    assert bool(scaling.all_finite([*small, tf.constant(large), tf.constant(large)]))
    graph = (
        tf.function(scaling.all_finite).get_concrete_function([*small, tf.constant(large), tf.constant(large)]).graph
    )
    ops = [op for op in graph.get_operations()]
    assert sum(op.type == "IsFinite" for op in ops) == 3  # the two large ones, and the small ones' one vector
    (concat,) = [op for op in ops if op.type == "ConcatV2"]
    assert [x.shape.num_elements() for x in concat.inputs[:-1]] == [3, 4]  # the axis is its last input
