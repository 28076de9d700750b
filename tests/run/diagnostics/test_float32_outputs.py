"""Tests for tfmp/run/diagnostics/outputs.py: outputs, softmax/sigmoid and losses in float32."""

import keras

import tfmp
from tfmp import trainers
from tfmp.models.gan import build_discriminator, build_generator
from tfmp.run import diagnostics


def _classifier(final_dtype=None, activation="softmax"):
    inputs = keras.Input((4,))
    x = keras.layers.Dense(8, name="hidden")(inputs)
    if final_dtype is None:  # the pitfall: softmax inside the 16-bit Dense
        outputs = keras.layers.Dense(3, activation=activation, name="probs")(x)
    else:
        x = keras.layers.Dense(3, name="logits")(x)
        outputs = keras.layers.Activation(activation, dtype=final_dtype, name="probs")(x)
    return keras.Model(inputs, outputs, name="clf")


def test_low_precision_softmax_output_and_loss_are_flagged():
    with tfmp.precision_scope("mixed_bfloat16"):
        model = _classifier()
    report = diagnostics.float32_output_report(model, loss="sparse_categorical_crossentropy", print_fn=None)
    assert [(f.where, f.what, f.dtype) for f in report.findings] == [
        ("clf/probs", "softmax", "bfloat16"),
        ("clf output 0", "model output", "bfloat16"),
        ("clf output 0", "loss input (logits/probabilities)", "bfloat16"),
    ]
    assert "dtype='float32'" in str(report)


def test_float32_head_passes_and_sigmoid_is_checked_too():
    with tfmp.precision_scope("mixed_float16"):
        good = _classifier(final_dtype="float32")
        sigmoid = _classifier(activation="sigmoid")
    assert diagnostics.float32_output_report(good, loss="mse", print_fn=None).findings == []
    # Without a loss, only the layer and the output are flagged.
    whats = [f.what for f in diagnostics.float32_output_report(sigmoid, print_fn=None).findings]
    assert whats == ["sigmoid", "model output"]


def test_seed_gan_outputs_are_float32_under_every_policy():
    for precision in ("mixed_float16", "mixed_bfloat16"):
        with tfmp.precision_scope(precision):
            trainer = trainers.GANTrainer(build_generator(), build_discriminator())
        assert diagnostics.float32_output_report(trainer, print_fn=None).findings == []


def test_trainer_loss_on_low_precision_logits_is_flagged():
    with tfmp.precision_scope("mixed_float16"):
        images = keras.Input((28, 28, 1))
        logits = keras.layers.Dense(1, name="logits")(keras.layers.Flatten()(images))
        trainer = trainers.GANTrainer(build_generator(), keras.Model(images, logits, name="discriminator"))
    findings = diagnostics.float32_output_report(trainer, print_fn=None).findings
    assert [(f.where, f.what) for f in findings] == [
        ("discriminator output 0", "model output"),
        ("discriminator output 0", "loss input (logits/probabilities)"),
    ]
