"""The original tutorial's loss-scaling comparison: three GAN runs side by side.

1. float32; 2. mixed_float16 without loss scaling; 3. mixed_float16 with
dynamic loss scaling. All three go under one parent directory, so
TensorBoard overlays their generator and discriminator loss curves:

    python3 scripts/compare_loss_scaling.py --dataset=digits --batch_size=256 --epochs=3
    tensorboard --logdir logs/compare_loss_scaling

Precision and loss-scale flags are set by the comparison itself.
"""

import dataclasses
import os

from absl import flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

from tfmp.run import training

_DEFAULTS = training.GANConfig(logdir=os.path.join("logs", "compare_loss_scaling"))
# The flags of the run, not of the GAN's model (the tutorial's); precision, loss scale and run name are the
# comparison's.
_FLAGS = common.define_flags(
    _DEFAULTS,
    exclude=("precision", "loss_scale", "run_name"),
    only=[field.name for field in dataclasses.fields(training.ImageConfig)],
)
flags.adopt_module_key_flags(common)  # --help lists common's flags too


def main(argv):
    common.check_no_arguments(argv)
    config = common.config_from_flags(training.GANConfig, _FLAGS)
    results = common.run(
        training.compare_loss_scaling, config, precisions=[precision for _, precision, _ in training.COMPARISON]
    )
    print()
    print(training.comparison_table(results))
    print()
    print(f"Overlay the curves: tensorboard --logdir {config.logdir}")


run = common.entry_point(main, __name__)  # the console command `tfmp-compare-loss-scaling`


if __name__ == "__main__":
    run()
