"""Trains the MobileNetV2 classifier (seed 002) with mixed precision.

    python3 scripts/train_classifier.py --dataset=digits --alpha=0.35 --epochs=5 \
        --precision=mixed_bfloat16
    tensorboard --logdir logs

Defaults: CIFAR-10, batch 128, Adam(1e-3), a float32 softmax.
"""

from absl import app

from tfmp.run import training

try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

_DEFAULTS = training.ClassifierConfig()
_FLAGS = common.define_classifier_flags(_DEFAULTS)
main = common.make_main(training.ClassifierConfig, training.train_classifier, _FLAGS)


def run():
    """Console entry point (`tfmp-train-classifier`)."""
    app.run(main)


if __name__ == "__main__":
    run()
