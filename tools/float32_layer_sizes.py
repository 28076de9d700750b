"""Prints the bfloat16 tensors around the layers a CPU run keeps in float32, computed from the models' shapes.

    PYTHONPATH=. python3 tools/float32_layer_sizes.py

No training and no timing: the sizes follow from the layers' input and output shapes at the benchmark's
batch sizes (MobileNetV2 at 32x32 and batch 128, the GAN at 512), 2 bytes an element. They are what
keeping those layers in float32 can add to a bfloat16 step's memory (docs/measured-before.md quotes
them from the record `computed-float32-layer-sizes`).
"""

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

from models import gan, mobilenet_v2  # noqa: E402

MIB = 2**20
BYTES = 2  # bfloat16


def _layers(model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _layers(layer)


def _mib(shape, batch):
    elements = batch
    for dim in shape[1:]:
        elements *= dim
    return elements * BYTES / MIB


def _odd_batch_norms(layers):
    """BatchNorm layers whose channel count is not a multiple of 16 (normalised in float32 on a CPU)."""
    return [layer for layer in layers if "Normalization" in type(layer).__name__ and layer.input.shape[-1] % 16]


def main() -> None:
    pattern = mobilenet_v2.cpu_bfloat16_float32_layers((32, 32, 3))
    layers = list(_layers(mobilenet_v2.build_mobilenet_v2_classifier(input_shape=(32, 32, 3), num_classes=10)))
    kept = [layer for layer in layers if re.search(pattern, "/" + layer.name)]
    inout = sum(_mib(layer.input.shape, 128) + _mib(layer.output.shape, 128) for layer in kept)
    print(f"MobileNetV2 32x32 batch 128: {len(kept)} depthwise layers kept in float32, bfloat16 in+out {inout:.2f} MiB")
    odd = _odd_batch_norms(layers)
    inout = sum(_mib(layer.input.shape, 128) + _mib(layer.output.shape, 128) for layer in odd)
    names = ", ".join(f"{layer.name} ({layer.input.shape[-1]})" for layer in odd)
    print(f"MobileNetV2 32x32 batch 128: BatchNorm not a multiple of 16: {names}; bfloat16 in+out {inout:.2f} MiB")
    odd = _odd_batch_norms(list(_layers(gan.build_generator())) + list(_layers(gan.build_discriminator())))
    names = ", ".join(f"{layer.name} ({layer.input.shape[-1]})" for layer in odd)
    size = sum(_mib(layer.input.shape, 512) for layer in odd)
    print(f"GAN batch 512: BatchNorm not a multiple of 16: {names}; bfloat16 input {size:.2f} MiB")


if __name__ == "__main__":
    main()
