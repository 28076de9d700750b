"""Tests for models/gan.py: the original tutorial's architecture, layer for layer."""

import keras
import pytest

import tfmp
from tfmp.models.gan import build_discriminator, build_generator


def _summary(model):
    return [(layer.__class__.__name__, tuple(layer.output.shape[1:])) for layer in model.layers[1:]]


def test_generator_is_the_tutorials_stack():
    generator = build_generator()
    assert generator.input_shape == (None, 100)
    # BatchNorm is tfmp's fused layer: Keras's BatchNormalization computed by one op.
    assert _summary(generator) == [
        ("Dense", (3136,)),
        ("Reshape", (7, 7, 64)),
        ("FusedBatchNormalization", (7, 7, 64)),
        ("Conv2D", (7, 7, 64)),
        ("UpSampling2D", (14, 14, 64)),
        ("FusedBatchNormalization", (14, 14, 64)),
        ("Conv2D", (14, 14, 32)),
        ("UpSampling2D", (28, 28, 32)),
        ("FusedBatchNormalization", (28, 28, 32)),
        ("Conv2D", (28, 28, 8)),
        ("FusedBatchNormalization", (28, 28, 8)),
        ("Conv2D", (28, 28, 1)),
    ]
    assert all(
        isinstance(layer, keras.layers.BatchNormalization)
        for layer in generator.layers
        if "BatchNormalization" in type(layer).__name__
    )
    unfused = build_generator(fused_batch_norm=False)
    assert [type(layer).__name__ for layer in unfused.layers].count("BatchNormalization") == 4
    convs = [layer for layer in generator.layers if isinstance(layer, keras.layers.Conv2D)]
    assert all(c.kernel_size == (5, 5) and c.padding == "same" for c in convs)
    assert [c.activation.__name__ for c in convs] == ["tanh", "tanh", "tanh", "sigmoid"]
    assert generator.count_params() == 477_713


def test_discriminator_is_the_tutorials_stack():
    discriminator = build_discriminator()
    assert _summary(discriminator) == [
        ("Conv2D", (28, 28, 24)),
        ("MaxPooling2D", (14, 14, 24)),
        ("Dropout", (14, 14, 24)),
        ("Conv2D", (14, 14, 64)),
        ("MaxPooling2D", (7, 7, 64)),
        ("Dropout", (7, 7, 64)),
        ("Conv2D", (7, 7, 128)),
        ("MaxPooling2D", (3, 3, 128)),
        ("Dropout", (3, 3, 128)),
        ("Flatten", (1152,)),
        ("Dense", (1,)),
    ]
    assert all(layer.rate == 0.4 for layer in discriminator.layers if isinstance(layer, keras.layers.Dropout))
    assert discriminator.get_layer("logits").activation.__name__ == "linear"


def test_the_tutorials_bad_sizes_variant_can_be_built():
    generator = build_generator(widths=(63, 31, 7))
    assert generator.get_layer("dense").units == 7 * 7 * 63
    assert [generator.get_layer(f"conv_{i}").filters for i in (1, 2, 3)] == [63, 31, 7]


@pytest.mark.parametrize("precision, compute", [("float32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_outputs_compute_in_float32_under_every_policy(precision, compute):
    with tfmp.precision_scope(precision):
        generator, discriminator = build_generator(8, (8, 8, 8)), build_discriminator((8, 8, 8))
    assert generator.get_layer("conv_3").compute_dtype == compute
    assert discriminator.get_layer("conv_1").compute_dtype == compute
    assert generator.get_layer("conv_final").compute_dtype == "float32"
    assert discriminator.get_layer("logits").compute_dtype == "float32"
    images = generator(keras.random.uniform((2, 8), -1, 1))
    assert images.dtype == "float32" and discriminator(images).dtype == "float32"


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"widths=\(8, 8\)"):
        build_generator(widths=(8, 8))
    with pytest.raises(ValueError, match="latent_dim=0"):
        build_generator(latent_dim=0)
    with pytest.raises(ValueError, match="dropout=1.5"):
        build_discriminator(dropout=1.5)
