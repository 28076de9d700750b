"""The MobileNetV2 CIFAR-10 classifier of seed 002.

`keras.applications.MobileNetV2` without its top and without pretrained
weights, on 32x32x3 images, followed by global average pooling, a Dense
head, and an output computed in float32 whatever the dtype policy: a
softmax (the seed's choice) or, for a `from_logits=True` loss, the logits
themselves passed through a float32 linear activation. Its BatchNorm layers
run TensorFlow's fused kernel (`tfmp.layers.FusedBatchNormalization`).

`CPU_BFLOAT16_FLOAT32_LAYERS` is the model's per-layer precision advice for
bfloat16 on a CPU; `tfmp.training` applies it by default there.
"""

from __future__ import annotations

import keras

from models.heads import classifier_on_backbone
from tfmp.layers import fuse_batch_norms

__all__ = ["CPU_BFLOAT16_FLOAT32_LAYERS", "build_mobilenet_v2_classifier"]

# Layers that should compute in float32 under mixed_bfloat16 on a CPU (a
# `tfmp.precision.keep_float32` pattern): the depthwise convolutions. Their
# bfloat16 backward passes miss oneDNN for stride 2 and for small spatial
# sizes and run in a fallback kernel 5-10x slower than float32's, which made
# MobileNetV2 train at 0.55x of float32; with them in float32 (and fused
# BatchNorm) it trains at about 1.4x (docs/investigations/mbv2_bf16/FINDINGS.md).
CPU_BFLOAT16_FLOAT32_LAYERS = r"_depthwise$"


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
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0. Received: alpha={alpha!r}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2. Received: num_classes={num_classes!r}")
    if len(input_shape) != 3 or input_shape[-1] != 3:
        raise ValueError(f"input_shape must be (height, width, 3). Received: input_shape={input_shape!r}")
    inputs = keras.Input(input_shape, name="images")
    backbone = keras.applications.MobileNetV2(
        input_shape=input_shape, alpha=alpha, include_top=False, weights=None
    )
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
