r"""Trains the MobileNetV2 classifier of the original tutorials with mixed precision.

    python3 scripts/train_classifier.py --dataset=digits --alpha=0.35 --epochs=5 \
        --precision=mixed_bfloat16
    tensorboard --logdir logs

Defaults: CIFAR-10, batch 128, Adam(1e-3), a float32 softmax.
"""

from absl import flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

from tfmp.run import training

_FLAGS = common.define_flags(training.ClassifierConfig())
flags.adopt_module_key_flags(common)  # --help lists common's flags too
main = common.make_main(training.ClassifierConfig, training.train_classifier, _FLAGS)


run = common.entry_point(main, __name__)  # the console command `tfmp-train-classifier`


if __name__ == "__main__":
    run()
