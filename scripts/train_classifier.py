"""Trains the MobileNetV2 classifier (seed 002) with mixed precision.

    python3 scripts/train_classifier.py --dataset=digits --alpha=0.35 --epochs=5 \
        --precision=mixed_bfloat16
    tensorboard --logdir logs

Defaults: CIFAR-10, batch 128, Adam(1e-3), a float32 softmax.
"""

from absl import app
from absl import flags

from tfmp import training

try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

_DEFAULTS = training.ClassifierConfig()
_FLAGS = {
    **common.define_training_flags(_DEFAULTS),
    "alpha": flags.DEFINE_float("alpha", _DEFAULTS.alpha, "MobileNetV2 width multiplier."),
    "learning_rate": flags.DEFINE_float("learning_rate", _DEFAULTS.learning_rate, "Adam learning rate."),
    "lr_schedule": flags.DEFINE_enum(
        "lr_schedule", _DEFAULTS.lr_schedule, list(training.LR_SCHEDULES),
        "cosine: decay the learning rate to zero over the run; constant: keep it."),
    "from_logits": flags.DEFINE_bool(
        "from_logits", _DEFAULTS.from_logits, "Output float32 logits with a from-logits loss instead of a softmax."),
    "batch_norm_momentum": flags.DEFINE_float(
        "batch_norm_momentum", _DEFAULTS.batch_norm_momentum,
        "BatchNorm moving-statistics momentum (Keras's MobileNetV2: 0.999, too slow for small data)."),
}
main = common.make_main(training.ClassifierConfig, training.train_classifier, _FLAGS)


def run():
    """Console entry point (`tfmp-train-classifier`)."""
    app.run(main)


if __name__ == "__main__":
    run()
