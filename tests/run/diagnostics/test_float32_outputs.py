"""Tests for tfmp/run/diagnostics/outputs.py: outputs, softmax/sigmoid and losses in float32."""

import keras
import numpy as np

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
    report = diagnostics.float32_output_report(model, loss="sparse_categorical_crossentropy")
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
    assert diagnostics.float32_output_report(good, loss="mse").findings == []
    # Without a loss, only the layer and the output are flagged.
    whats = [f.what for f in diagnostics.float32_output_report(sigmoid).findings]
    assert whats == ["sigmoid", "model output"]


def test_seed_gan_outputs_are_float32_under_every_policy():
    for precision in ("mixed_float16", "mixed_bfloat16"):
        with tfmp.precision_scope(precision):
            trainer = trainers.GANTrainer(build_generator(), build_discriminator())
        assert diagnostics.float32_output_report(trainer).findings == []


def test_trainer_loss_on_low_precision_logits_is_flagged():
    with tfmp.precision_scope("mixed_float16"):
        images = keras.Input((28, 28, 1))
        logits = keras.layers.Dense(1, name="logits")(keras.layers.Flatten()(images))
        trainer = trainers.GANTrainer(build_generator(), keras.Model(images, logits, name="discriminator"))
    findings = diagnostics.float32_output_report(trainer).findings
    assert [(f.where, f.what) for f in findings] == [
        ("discriminator output 0", "model output"),
        ("discriminator output 0", "loss input (logits/probabilities)"),
    ]


def _attention_model(**kwargs):
    with tfmp.precision_scope("mixed_float16"):
        tokens = keras.Input((4, 16))
        attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="attention", **kwargs)(tokens, tokens)
        outputs = keras.layers.Activation("linear", dtype="float32", name="out")(attended)
        return keras.Model(tokens, outputs, name="t")


def _softmax_path(model):
    """The attention's own softmax layer: Keras names it `softmax`, `softmax_1`... by creation order."""
    (path,) = [
        path for path, layer in tfmp.float32_layers.layer_paths(model) if isinstance(layer, keras.layers.Softmax)
    ]
    return path


def test_softmax_nested_in_attention_names_the_layer_the_user_created():
    model = _attention_model(dropout=0.1)  # with dropout, Keras computes the softmax in its own layer
    path = _softmax_path(model)
    softmax = path.rsplit("/", 1)[1]
    (finding,) = diagnostics.float32_output_report(model).findings
    assert (finding.where, finding.what, finding.dtype) == (path, "softmax", "float16")
    assert finding.fix == (
        "inside 'attention', the layer you created: "
        f"tfmp.float32_layers.keep_float32([model], '/attention/{softmax}$') "
        "before training, or give 'attention' dtype='float32' (its whole attention then computes in float32)"
    )
    # The advised call works: the softmax computes in float32 and nothing is left to report.
    assert tfmp.float32_layers.keep_float32([model], f"/attention/{softmax}$") == [path]
    assert diagnostics.float32_output_report(model).findings == []
    assert model(np.ones((2, 4, 16), "float32"), training=True).shape == (2, 4, 16)


def test_attention_without_dropout_computes_its_softmax_in_float32():
    # Keras then calls ops.dot_product_attention, which takes the softmax in float32: nothing to fix.
    assert diagnostics.float32_output_report(_attention_model()).findings == []
    # Returning the scores takes the layer's own softmax again.
    with tfmp.precision_scope("mixed_float16"):
        tokens = keras.Input((4, 16))
        attended, scores = keras.layers.MultiHeadAttention(2, 8, name="attention")(
            tokens, tokens, return_attention_scores=True
        )
        model = keras.Model(tokens, keras.layers.Activation("linear", dtype="float32")(attended), name="s")
    findings = diagnostics.float32_output_report(model).findings
    assert [(f.where, f.what) for f in findings] == [(_softmax_path(model), "softmax")]


def test_the_report_takes_outputs_and_layers_from_the_core_check():
    # One finder: the run framework's report and a user's own check see the same outputs and layers.
    assert diagnostics.OutputFinding is tfmp.float32_layers.OutputFinding
    with tfmp.precision_scope("mixed_float16"):
        model = _classifier()
    report = diagnostics.float32_output_report(model, loss="mse")
    core = tfmp.float32_layers.output_findings(model)
    assert [f for f in report.findings if f.what != "loss input (logits/probabilities)"] == core


def test_a_subclassed_models_held_networks_have_their_outputs_checked():
    class Holder(keras.Model):  # a GAN as keras-io writes it: its networks are attributes
        def __init__(self, generator, discriminator):
            super().__init__(name="holder")
            self.generator, self.discriminator = generator, discriminator

        def call(self, noise):
            return self.discriminator(self.generator(noise))

    with tfmp.precision_scope("mixed_float16"):
        generator = keras.Sequential(
            [keras.Input((2,)), keras.layers.Dense(28 * 28), keras.layers.Reshape((28, 28, 1))], name="generator"
        )
        holder = Holder(generator, build_discriminator())
    holder(np.zeros((1, 2), "float32"))
    holder.compile(loss="mse")
    findings = diagnostics.float32_output_report(holder).findings
    # Its compiled loss reads the holder's own outputs, not the generator's: no loss-input row.
    assert [(f.where, f.what, f.dtype) for f in findings] == [("generator output 0", "model output", "float16")]
    assert "generator output 0: model output in float16" in diagnostics.startup_warnings(holder, batch_size=8)
