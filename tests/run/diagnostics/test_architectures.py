"""The diagnostics on common architectures tfmp does not ship: a BatchNorm CNN, a Transformer encoder
block, LSTM, GRU and bidirectional LSTM text models on integer tokens, a model with a dict of named inputs.

Each is tiny: a few examples, a few units. Every model is built under `mixed_float16`, wrapped in a
`ClassifierTrainer` and compiled with a loss, as a user would.
"""

import keras
import numpy as np
import pytest

import tfmp
from tfmp import precision
from tfmp.run import diagnostics

_VOCABULARY = 20
_LABELS = np.array([0, 1, 2, 1])


def _head(x):
    return keras.layers.Dense(3, activation="softmax", dtype="float32", name="probs")(x)


def _bn_cnn():
    images = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False, name="conv")(images)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU()(x)
    return keras.Model(images, _head(keras.layers.GlobalAveragePooling2D()(x)), name="cnn")


def _transformer_block():
    tokens = keras.Input((6, 16))
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1, name="attention")(tokens, tokens)
    x = keras.layers.LayerNormalization(name="norm_1")(keras.layers.Add(name="residual_1")([tokens, attended]))
    feed_forward = keras.layers.Dense(16, name="ffn_out")(keras.layers.Dense(32, activation="relu", name="ffn_in")(x))
    x = keras.layers.LayerNormalization(name="norm_2")(x + feed_forward)
    return keras.Model(tokens, _head(keras.layers.GlobalAveragePooling1D()(x)), name="encoder")


def _text(rnn):
    def build():
        tokens = keras.Input((7,), dtype="int32")
        x = keras.layers.Embedding(_VOCABULARY, 8, name="embedding")(tokens)
        return keras.Model(tokens, _head(rnn(16, name="rnn")(x)), name="text")

    return build


def _dict_inputs():
    numbers = keras.Input((4,), name="numbers")
    flags = keras.Input((3,), name="flags")
    x = keras.layers.Concatenate(name="merge")([keras.layers.Dense(8, name="numbers_dense")(numbers), flags])
    return keras.Model({"numbers": numbers, "flags": flags}, _head(keras.layers.Dense(8, name="hidden")(x)), name="d")


def _batch(name):
    rng = np.random.default_rng(7)
    if name == "bn_cnn":
        return rng.normal(size=(4, 8, 8, 3)).astype("float32")
    if name == "transformer_block":
        return rng.normal(size=(4, 6, 16)).astype("float32")
    if name.endswith("_text"):
        return rng.integers(0, _VOCABULARY, size=(4, 7)).astype("int32")
    return {"numbers": rng.normal(size=(4, 4)).astype("float32"), "flags": rng.normal(size=(4, 3)).astype("float32")}


def _bidirectional_lstm(units, name):
    return keras.layers.Bidirectional(keras.layers.LSTM(units), name=name)


_ARCHITECTURES = {
    "bn_cnn": _bn_cnn,
    "transformer_block": _transformer_block,
    "lstm_text": _text(keras.layers.LSTM),
    "gru_text": _text(keras.layers.GRU),
    "bidirectional_lstm_text": _text(_bidirectional_lstm),
    "dict_inputs": _dict_inputs,
}


def _mixed(name):
    keras.utils.set_random_seed(0)
    with tfmp.precision_scope("mixed_float16"):
        return _ARCHITECTURES[name]()


@pytest.mark.parametrize("name", list(_ARCHITECTURES))
def test_float32_copy_computes_what_a_float32_build_computes(name):
    model = _mixed(name)
    reference = _ARCHITECTURES[name]()  # the same architecture built in float32
    reference.set_weights(model.get_weights())
    copy = precision.float32_copy(model)
    assert {layer.compute_dtype for _, layer in precision.layer_paths(copy)} == {"float32"}
    for original, copied in zip(model.get_weights(), copy.get_weights(), strict=True):
        np.testing.assert_array_equal(original, copied)
    x = _batch(name)
    np.testing.assert_allclose(copy(x, training=False), reference(x, training=False), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(_ARCHITECTURES))
def test_gradient_report_and_the_whole_diagnosis_run(name):
    model = _mixed(name)
    with tfmp.precision_scope("mixed_float16"):
        trainer = tfmp.Trainer(model)
        trainer.compile(loss="sparse_categorical_crossentropy")
    batch = (_batch(name), _LABELS)
    before = [v.numpy() for v in trainer.variables]

    report = diagnostics.gradient_report(trainer, batch)
    (objective,) = report.objectives
    assert [v.name for v in objective.variables] == [v.path for v in model.trainable_variables]
    assert all(v.count > 0 and v.nonfinite == 0 for v in objective.variables)
    assert objective.loss_scale == 2.0**15 and report.batch_size == 4

    diagnosis = diagnostics.diagnose(trainer, batch, batch_size=32)
    lines = [str(diagnosis)]  # its table, as printed
    (text,) = lines
    for title in ("Tensor Core alignment", "Float32 outputs", "Gradient numerics", "First non-finite layer"):
        assert title in text
    assert not diagnosis.nonfinite.found
    assert "seed" not in text  # the tutorials' numbering means nothing to a user
    assert not [f for f in diagnosis.alignment.findings if f.layer.startswith("encoder/attention")]
    fixes = [f.fix.split(":")[0] for f in diagnosis.outputs.findings]
    # With dropout, Keras runs the attention's own softmax in float16; the fix names the layer the user made.
    assert fixes == (["inside 'attention', the layer you created"] if name == "transformer_block" else [])
    # Nothing moved: weights, BatchNorm statistics, dropout seeds.
    for old, new in zip(before, trainer.variables, strict=True):
        np.testing.assert_array_equal(old, new.numpy())


def test_embedding_gradient_counts_every_row():
    # The Embedding's gradient is IndexedSlices; the report reads it as the dense table.
    model = _mixed("lstm_text")
    report = diagnostics.gradient_report(model, (_batch("lstm_text"), _LABELS), loss="sparse_categorical_crossentropy")
    embedding = next(v for v in report.objectives[0].variables if v.name == "embedding/embeddings")
    assert embedding.count == _VOCABULARY * 8 and embedding.max_abs > 0
