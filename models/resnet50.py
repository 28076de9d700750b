"""A ResNet-50 classifier, the mixed-precision anchor model of the benchmarks.

`keras.applications.ResNet50` without its top and without pretrained
weights, at a configurable input size, followed by global average pooling,
a Dense head, and an output computed in float32 whatever the dtype policy:
a softmax or, for a `from_logits=True` loss, the logits themselves passed
through a float32 linear activation. ResNet-50 is the network of the
published mixed-precision speed-ups (NVIDIA's DeepLearningExamples and the
PyTorch AMP tutorial, quoted in the Performance report), at 224x224; on a
CPU a smaller input (64x64 by default) keeps a step within a second. Its BatchNorm layers run TensorFlow's fused kernel
(`tfmp.layers.FusedBatchNormalization`).
"""

from __future__ import annotations

import keras

from tfmp.layers import fuse_batch_norms
from tfmp.models.heads import classifier_on_backbone

__all__ = ["MIN_INPUT_SIZE", "build_resnet50_classifier"]

# Five stride-2 stages: Keras refuses inputs smaller than 32x32 without a top.
MIN_INPUT_SIZE = 32


def build_resnet50_classifier(
    input_shape: tuple[int, int, int] = (64, 64, 3),
    num_classes: int = 10,
    from_logits: bool = False,
    fused_batch_norm: bool = True,
    name: str = "resnet50_classifier",
) -> keras.Model:
    """Builds ResNet-50 (no top, random init) plus pooling and a Dense head.

    Args:
        input_shape: `(height, width, 3)`, both sides at least 32
            (`MIN_INPUT_SIZE`); ImageNet's is 224x224.
        num_classes: Number of classes.
        from_logits: Output float32 logits instead of float32 probabilities;
            pair with a `from_logits=True` loss.
        fused_batch_norm: Use `tfmp.layers.FusedBatchNormalization` instead of
            Keras's unfused `BatchNormalization` (same math and variables).
        name: The model's name.

    Returns:
        A functional `keras.Model` whose output is float32, shape
        `(batch, num_classes)`.

    Raises:
        ValueError: for an input shape or class count ResNet-50 cannot take,
            naming the value received.
    """
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2. Received: num_classes={num_classes!r}")
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else ()
    if (
        len(shape) != 3
        or shape[-1] != 3
        or not all(isinstance(d, int) for d in shape)
        or min(shape[:2]) < MIN_INPUT_SIZE
    ):
        raise ValueError(
            f"input_shape must be (height, width, 3) with height and width >= {MIN_INPUT_SIZE}. "
            f"Received: input_shape={input_shape!r}"
        )
    inputs = keras.Input(shape, name="images")
    backbone = keras.applications.ResNet50(weights=None, include_top=False, input_shape=shape)
    if fused_batch_norm:
        backbone = fuse_batch_norms(backbone)
    return classifier_on_backbone(inputs, backbone, num_classes, from_logits, name)
