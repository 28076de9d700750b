"""A small convolutional classifier for the embedded digits.

It is the model of tfmp's loss-scaling numerics tests: small enough
to train in seconds on a CPU, with Tensor-Core-friendly widths (multiples of
8), and its softmax computed in float32 whatever the dtype policy, as mixed
precision requires.
"""

from __future__ import annotations

import keras

__all__ = ["build_small_cnn"]


def build_small_cnn(
    input_shape: tuple[int, int, int] = (28, 28, 1),
    num_classes: int = 10,
    width: int = 16,
    name: str = "small_cnn",
) -> keras.Model:
    """Builds Conv-Pool-Conv-Pool-Dense-softmax under the current dtype policy.

    Args:
        input_shape: `(height, width, channels)` of the images.
        num_classes: Size of the softmax.
        width: Filters of the first conv; the second has `2 * width` and the
            hidden Dense layer `4 * width` units.
        name: The model's name.

    Returns:
        A functional `keras.Model` whose output is a float32 probability vector.
    """
    if width < 1 or num_classes < 2:
        raise ValueError(
            f"width must be >= 1 and num_classes >= 2. Received: width={width!r}, num_classes={num_classes!r}"
        )
    inputs = keras.Input(input_shape, name="images")
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D(name="pool1")(x)
    x = keras.layers.Conv2D(2 * width, 3, padding="same", activation="relu", name="conv2")(x)
    x = keras.layers.MaxPooling2D(name="pool2")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(4 * width, activation="relu", name="hidden")(x)
    x = keras.layers.Dense(num_classes, name="logits")(x)
    # The softmax (and so the loss) must be float32 under a mixed policy.
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probs")(x)
    return keras.Model(inputs, outputs, name=name)
