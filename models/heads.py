"""The classification head shared by the `keras.applications` classifiers."""

from __future__ import annotations

import keras

__all__ = ["classifier_on_backbone"]


def classifier_on_backbone(
    inputs: keras.KerasTensor, backbone: keras.Model, num_classes: int, from_logits: bool, name: str
) -> keras.Model:
    """`backbone` -> global average pooling -> Dense -> a float32 output.

    The output is computed in float32 whatever the dtype policy: a softmax,
    or with `from_logits` the logits passed through a float32 linear
    activation (the Keras tutorial's `Activation('linear', dtype='float32')`).
    """
    x = backbone(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(num_classes, name="logits")(x)
    # Outputs must be float32 under a mixed policy: the softmax, and the loss
    # computed from it, lose too much in 16 bits.
    outputs = keras.layers.Activation("linear" if from_logits else "softmax", dtype="float32", name="outputs")(x)
    return keras.Model(inputs, outputs, name=name)
