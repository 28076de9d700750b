"""The MobileNetV2 CIFAR-10 classifier of the Keras mixed-precision tutorial.

`keras.applications.MobileNetV2` without its top and without pretrained
weights, on 32x32x3 images, followed by global average pooling, a Dense
head, and an output computed in float32 whatever the dtype policy: a
softmax (the tutorial's choice) or, for a `from_logits=True` loss, the logits
themselves passed through a float32 linear activation. Its BatchNorm layers
run TensorFlow's fused kernel (`tfmp.layers.FusedBatchNormalization`).

`cpu_bfloat16_float32_layers(input_shape)` is the model's per-layer
precision advice for bfloat16 on a CPU; `tfmp.run.training` applies it by
default there.
"""

from __future__ import annotations

import math

import keras

from tfmp.layers import fuse_batch_norms
from tfmp.models.heads import classifier_on_backbone

__all__ = ["build_mobilenet_v2_classifier", "cpu_bfloat16_float32_layers"]

# MobileNetV2's depthwise convolutions in order, by Keras's block names, with
# their strides (Sandler et al. 2018, Table 2); the stem convolution before
# them has stride 2.
_DEPTHWISE_STRIDES = (
    ("expanded_conv", 1),
    ("block_1", 2),
    ("block_2", 1),
    ("block_3", 2),
    ("block_4", 1),
    ("block_5", 1),
    ("block_6", 2),
    ("block_7", 1),
    ("block_8", 1),
    ("block_9", 1),
    ("block_10", 1),
    ("block_11", 1),
    ("block_12", 1),
    ("block_13", 2),
    ("block_14", 1),
    ("block_15", 1),
    ("block_16", 1),
)
# Below this input side oneDNN has no depthwise backward-filter kernel.
_ONEDNN_MIN_DEPTHWISE_SIDE = 4


def cpu_bfloat16_float32_layers(input_shape: tuple[int, int, int] = (32, 32, 3)) -> str:
    """The layers to keep in float32 under mixed_bfloat16 on a CPU, as a pattern.

    The depthwise convolutions whose bfloat16 backward pass misses oneDNN:
    those with stride 2 (backward-input) and those whose input is smaller
    than 4x4 (backward-filter, in either dtype). TensorFlow then runs its
    fallback kernels, much slower in bfloat16 than in float32, and bfloat16
    trains MobileNetV2 slower than float32. With these layers in float32 (and
    fused BatchNorm) bfloat16 beats float32, and by more than with all 17
    depthwise convolutions in float32. The figures:
    [Performance](../PERFORMANCE.md).

    Args:
        input_shape: The classifier's `(height, width, channels)`.

    Returns:
        A `tfmp.float32_layers.keep_float32` pattern naming those layers, e.g. 13
        of the 17 at 32x32 (blocks 1, 3 and 6 to 16) and the four stride-2
        ones at 224x224.
    """
    side = math.ceil(min(input_shape[:2]) / 2)  # after the stem
    names = []
    for block, stride in _DEPTHWISE_STRIDES:
        if stride > 1 or side < _ONEDNN_MIN_DEPTHWISE_SIDE:
            names.append(f"{block}_depthwise")
        side = math.ceil(side / stride)
    return "/(" + "|".join(names) + ")$"


def build_mobilenet_v2_classifier(
    input_shape: tuple[int, int, int] = (32, 32, 3),
    num_classes: int = 10,
    alpha: float = 1.0,
    from_logits: bool = False,
    batch_norm_momentum: float | None = None,
    fused_batch_norm: bool = True,
    name: str = "mobilenet_v2_classifier",
) -> keras.Model:
    """Builds MobileNetV2 (no top, random init) plus pooling and a Dense head.

    Args:
        input_shape: `(height, width, 3)`; 32x32 is CIFAR-10's size.
        num_classes: Number of classes.
        alpha: MobileNetV2's width multiplier (1.0 is the standard network;
            0.35 is the smallest Keras defines).
        from_logits: Output float32 logits instead of float32 probabilities;
            pair with a `from_logits=True` loss.
        batch_norm_momentum: Momentum of the backbone's BatchNorm moving
            statistics; None keeps Keras's 0.999. That value suits ImageNet's
            thousands of steps per epoch; on a small dataset the moving
            statistics then lag for thousands of steps and inference-mode
            accuracy stays near chance, so small runs want e.g. 0.9.
        fused_batch_norm: Use `tfmp.layers.FusedBatchNormalization` (same
            math, variables and names, one fused op) instead of Keras's
            unfused `BatchNormalization`.
        name: The model's name.

    Returns:
        A functional `keras.Model` whose output is float32, shape
        `(batch, num_classes)`.
    """
    if not 0 < alpha < math.inf:  # inf: Keras cannot turn alpha * 32 into a width (OverflowError)
        raise ValueError(f"alpha must be a finite number > 0. Received: alpha={alpha!r}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2. Received: num_classes={num_classes!r}")
    if len(input_shape) != 3 or input_shape[-1] != 3:
        raise ValueError(f"input_shape must be (height, width, 3). Received: input_shape={input_shape!r}")
    inputs = keras.Input(input_shape, name="images")
    backbone = keras.applications.MobileNetV2(input_shape=input_shape, alpha=alpha, include_top=False, weights=None)
    if fused_batch_norm:
        backbone = fuse_batch_norms(backbone)
    if batch_norm_momentum is not None:
        if not 0 <= batch_norm_momentum < 1:
            raise ValueError(
                f"batch_norm_momentum must be in [0, 1). Received: batch_norm_momentum={batch_norm_momentum!r}"
            )
        for layer in backbone.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = batch_norm_momentum
    return classifier_on_backbone(inputs, backbone, num_classes, from_logits, name)
