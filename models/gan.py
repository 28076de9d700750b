"""The original tutorial's GAN: generator and discriminator, layer for layer.

The architecture is that of the GAN tutorial's `train_GAN_optimized.py`: a
generator from 100 uniform noise values to a 28x28x1 image,
and a convolutional discriminator that returns one logit per image. The
defaults reproduce the tutorial exactly; widths and the latent size can be
changed, for instance to rebuild the tutorial's Tensor Core "bad sizes" variant
(`generator_widths=(63, 31, 7)`).

Both output layers compute in float32 whatever the global dtype policy, so
the sigmoid and the loss never run in float16 or bfloat16. The generator's
BatchNorm layers run TensorFlow's fused kernel
(`tfmp.layers.FusedBatchNormalization`, the same math as Keras's layer).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from tfmp.layers import FusedBatchNormalization

__all__ = [
    "DISCRIMINATOR_WIDTHS",
    "GENERATOR_WIDTHS",
    "IMAGE_SHAPE",
    "LATENT_DIM",
    "build_discriminator",
    "build_generator",
]

IMAGE_SHAPE = (28, 28, 1)
LATENT_DIM = 100
GENERATOR_WIDTHS = (64, 32, 8)
DISCRIMINATOR_WIDTHS = (24, 64, 128)
_SEED_SIDE = 7  # the generator starts at 7x7 and upsamples twice to 28x28


def _check_widths(name: str, widths: Sequence[int]) -> tuple[int, int, int]:
    widths = tuple(widths)
    if len(widths) != 3 or not all(isinstance(w, int) and w >= 1 for w in widths):
        raise ValueError(f"{name} must be three integers >= 1. Received: {name}={widths!r}")
    return widths


def build_generator(
    latent_dim: int = LATENT_DIM,
    widths: Sequence[int] = GENERATOR_WIDTHS,
    activation: str = "tanh",
    fused_batch_norm: bool = True,
    name: str = "generator",
) -> keras.Model:
    """Builds the original tutorial's generator under the current dtype policy.

    ```
    Dense(7*7*w0) -> reshape to 7x7xw0 -> BatchNorm -> Conv2D(w0, 5x5, tanh)
    -> UpSampling2D(2) -> BatchNorm -> Conv2D(w1, 5x5, tanh) -> UpSampling2D(2)
    -> BatchNorm -> Conv2D(w2, 5x5, tanh) -> BatchNorm
    -> Conv2D(1, 5x5, sigmoid, float32)
    ```

    With the defaults `(64, 32, 8)`.

    Args:
        latent_dim: Size of the noise vector (the tutorial draws it uniform in
            [-1, 1]).
        widths: Channels of the three hidden convolutions; the Dense layer has
            `7 * 7 * widths[0]` units.
        activation: Activation of the hidden convolutions.
        fused_batch_norm: Use `tfmp.layers.FusedBatchNormalization` instead of
            Keras's unfused `BatchNormalization` (same math and variables).
        name: The model's name.

    Returns:
        A functional `keras.Model` mapping `(batch, latent_dim)` noise to
        `(batch, 28, 28, 1)` float32 images in [0, 1].
    """
    w0, w1, w2 = _check_widths("widths", widths)
    if not isinstance(latent_dim, int) or latent_dim < 1:
        raise ValueError(f"latent_dim must be an integer >= 1. Received: latent_dim={latent_dim!r}")
    layers = keras.layers
    batch_norm = FusedBatchNormalization if fused_batch_norm else layers.BatchNormalization
    noise = keras.Input((latent_dim,), name="noise")
    x = layers.Dense(_SEED_SIDE * _SEED_SIDE * w0, name="dense")(noise)
    x = layers.Reshape((_SEED_SIDE, _SEED_SIDE, w0), name="reshape")(x)
    x = batch_norm(name="batch_norm_1")(x)
    x = layers.Conv2D(w0, 5, padding="same", activation=activation, name="conv_1")(x)
    x = layers.UpSampling2D(2, interpolation="nearest", name="upsample_1")(x)
    x = batch_norm(name="batch_norm_2")(x)
    x = layers.Conv2D(w1, 5, padding="same", activation=activation, name="conv_2")(x)
    x = layers.UpSampling2D(2, interpolation="nearest", name="upsample_2")(x)
    x = batch_norm(name="batch_norm_3")(x)
    x = layers.Conv2D(w2, 5, padding="same", activation=activation, name="conv_3")(x)
    x = batch_norm(name="batch_norm_4")(x)
    # The output layer runs in float32 whatever the policy: the sigmoid
    # saturates early in 16 bits, and the images feed a float32 loss.
    images = layers.Conv2D(1, 5, padding="same", activation="sigmoid", dtype="float32", name="conv_final")(x)
    return keras.Model(noise, images, name=name)


def build_discriminator(
    widths: Sequence[int] = DISCRIMINATOR_WIDTHS,
    dropout: float = 0.4,
    activation: str = "tanh",
    image_shape: tuple[int, int, int] = IMAGE_SHAPE,
    name: str = "discriminator",
) -> keras.Model:
    """Builds the tutorial's discriminator under the current dtype policy.

    Three times Conv2D(w, 5x5, tanh) -> MaxPool(2) -> Dropout, with widths
    `(24, 64, 128)` by default, then Flatten -> Dense(1) logits in float32.

    Args:
        widths: Filters of the three convolutions.
        dropout: Dropout rate after each pooling, in [0, 1).
        activation: Activation of the convolutions.
        image_shape: Input image shape.
        name: The model's name.

    Returns:
        A functional `keras.Model` mapping images to `(batch, 1)` float32 logits.
    """
    widths = _check_widths("widths", widths)
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout!r}")
    layers = keras.layers
    images = keras.Input(image_shape, name="images")
    x = images
    for i, width in enumerate(widths, start=1):
        x = layers.Conv2D(width, 5, padding="same", activation=activation, name=f"conv_{i}")(x)
        x = layers.MaxPooling2D(name=f"pool_{i}")(x)
        x = layers.Dropout(dropout, name=f"dropout_{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    # Logits in float32: the sigmoid cross-entropy is computed from them.
    logits = layers.Dense(1, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=name)
