"""Tests for tfmp/run/diagnostics/diagnosis.py: the start-up warnings and all four reports together."""

import tfmp
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run import diagnostics


def test_startup_warnings_and_diagnose(float16_gan, digits):
    assert diagnostics.startup_warnings(float16_gan, 4096) == ""
    with tfmp.precision_scope("mixed_float16"):
        bad = trainers.GANTrainer(build_generator(widths=(63, 31, 7)), build_discriminator())
    block = diagnostics.startup_warnings(bad, 4090)
    assert block.startswith("warning:") and "generator/conv_2: filters 31" in block and "use 4088" in block
    assert "(details: tfmp.run.training.diagnose_run)" in block and "scripts/" not in block and "--" not in block
    diagnosis = diagnostics.diagnose(float16_gan, digits.x_train[:16])
    lines = [str(diagnosis)]  # its table, as printed
    text = lines[0]
    for title in ("Tensor Core alignment", "Float32 outputs", "Gradient numerics", "First non-finite layer"):
        assert title in text
    assert not diagnosis.nonfinite.found
