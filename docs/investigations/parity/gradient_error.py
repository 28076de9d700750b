"""How far are mixed precision's gradients from float32's, from the same weights? (docs/NUMERICS.md)

    python3 docs/investigations/parity/gradient_error.py

MobileNetV2 (alpha 0.35) as `tfmp-parity` trains it. A float32 model is trained
with plain Keras Adam(2e-3) on the embedded digits; at three points (initial
weights, after 1 epoch, after 4) its weights are copied into the variants
below, and each variant's loss gradient on 8 fixed batches of 32 (training-mode
BatchNorm) is compared with float32's: relative L2 error of the whole gradient
vector, mean over the batches. float16 variants use a loss scale of 256 (the
scale the parity runs settle at), unscaled in float64.

Variants: float32 with Keras's unfused BatchNormalization (rounding-level
reference), mixed_float16 with the fused layer (the default) and with Keras's
layer, mixed_float16 with every convolution and the Dense head computing in
float32 (activations and gradients still stored in float16 between layers, as
on a GPU whose half convolutions accumulate in float32), and mixed_bfloat16 as
the runs train it (13 depthwise convolutions in float32 on a CPU).
Deterministic on a given machine; about 3 minutes on 2 cores.
"""

import numpy as np
import keras
import tensorflow as tf

from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.run import data as data_lib
from tfmp import precision as precision_lib

SHAPE = (32, 32, 3)
CONVS = r"/(Conv1|Conv_1|\w+_expand|\w+_depthwise|\w+_project|logits)$"
VARIANTS = {  # name: (precision, fused BatchNorm, float32 layers, loss scale)
    "float32, Keras BN": ("float32", False, "", 1.0),
    "mixed_float16, fused BN": ("mixed_float16", True, "", 256.0),
    "mixed_float16, Keras BN": ("mixed_float16", False, "", 256.0),
    "mixed_float16, convs in float32": ("mixed_float16", True, CONVS, 256.0),
    "mixed_bfloat16, fused BN": ("mixed_bfloat16", True, cpu_bfloat16_float32_layers(SHAPE), 1.0),
}


def build(precision, fused, float32_layers):
    keras.utils.set_random_seed(0)
    with precision_lib.precision_scope(precision):
        model = build_mobilenet_v2_classifier(SHAPE, 10, alpha=0.35, batch_norm_momentum=0.9, fused_batch_norm=fused)
    if float32_layers:
        precision_lib.keep_float32([model], float32_layers)
    return model


def gradient(model, scale, x, y, loss_fn):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True)) * scale
    return np.concatenate([np.asarray(g, np.float64).ravel() / scale
                           for g in tape.gradient(loss, model.trainable_variables)])


def main():
    split = data_lib.load_images("digits", SHAPE, seed=0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    batches = [(tf.constant(split.x_train[i:i + 32]), tf.constant(split.y_train[i:i + 32])) for i in range(0, 256, 32)]
    reference = build("float32", True, "")
    variants = {name: (build(*spec[:3]), spec[3]) for name, spec in VARIANTS.items()}
    reference.compile(keras.optimizers.Adam(2e-3), loss_fn)
    train = data_lib.make_dataset(split.x_train, split.y_train, batch_size=32, seed=0)
    print("| float32 epochs | |g| (float32) | " + " | ".join(VARIANTS) + " |")
    print("|---" * (len(VARIANTS) + 2) + "|")
    for more, done in ((0, 0), (1, 1), (3, 4)):
        if more:
            reference.fit(train, epochs=more, verbose=0)
        weights = reference.get_weights()
        errors = {name: [] for name in VARIANTS}
        norms = []
        for x, y in batches:
            g = gradient(reference, 1.0, x, y, loss_fn)
            norms.append(np.linalg.norm(g))
            for name, (model, scale) in variants.items():
                model.set_weights(weights)
                errors[name].append(np.linalg.norm(gradient(model, scale, x, y, loss_fn) - g) / norms[-1])
        print(f"| {done} | {np.mean(norms):.3g} | " + " | ".join(f"{np.mean(e):.3f}" for e in errors.values()) + " |",
              flush=True)


if __name__ == "__main__":
    main()
