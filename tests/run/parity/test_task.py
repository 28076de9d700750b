"""Tests for tfmp/run/parity/task.py: the classifier task of one parity run."""

import pytest
from tiny_parity import TINY, tiny_config

from tfmp import loss_scale
from tfmp.run import parity


def test_the_schedule_warms_up_then_decays_and_the_scale_arm_starts_where_asked(tmp_path):
    config = tiny_config(tmp_path, lr_warmup_steps=4, fp16_initial_scales=(256,))
    float32, _, _, scaled = config.arms()
    (optimizer,) = parity.parity_task(config, 0, 0, float32).optimizers(steps_per_epoch=10)  # 2 epochs: 20 steps
    peak = TINY.learning_rate
    rates = []
    for step in (0, 2, 4, 12, 20):
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    assert rates[:3] == pytest.approx([0.0, peak / 2, peak])
    assert rates[3] == pytest.approx(peak / 2, rel=1e-5) and rates[4] == pytest.approx(0.0, abs=1e-12)
    (wrapped,) = parity.parity_task(config, 0, 0, scaled).optimizers(steps_per_epoch=10)
    assert isinstance(wrapped, loss_scale.LossScaleOptimizer) and wrapped.dynamic
    assert float(wrapped.initial_scale) == 256.0
