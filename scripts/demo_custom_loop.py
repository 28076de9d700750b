"""Trains a small CNN on the embedded digits with the loss-scaled custom loop.

The tf.keras 2 loop of the seed tutorials, on Keras 3, with no download:

    python scripts/demo_custom_loop.py --precision=mixed_float16 --loss_scale=dynamic
    tensorboard --logdir logs
"""

from absl import app
from absl import flags

import tfmp
from tfmp import demo

_PRECISION = flags.DEFINE_enum(
    "precision", "mixed_float16",
    list(tfmp.PRECISIONS) + ["fp32", "fp16", "bf16"],
    "Compute precision; auto picks from the hardware.")
_LOSS_SCALE = flags.DEFINE_string(
    "loss_scale", "dynamic", "dynamic, none, or a positive fixed scale (float16 only).")
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Passes over the training split.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Images per step.", lower_bound=1)
_STEPS_PER_EPOCH = flags.DEFINE_integer(
    "steps_per_epoch", None, "Optional cap on steps per epoch.", lower_bound=1)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 2e-3, "Adam learning rate.", lower_bound=0.0)
_XLA = flags.DEFINE_enum("xla", "auto", ["auto", "true", "false"], "XLA; auto: on with a GPU only.")
_LOGDIR = flags.DEFINE_string("logdir", "logs", "Parent directory of TensorBoard runs.")
_RUN_NAME = flags.DEFINE_string("run_name", "", "Run sub-directory; default: time and settings.")
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    try:
        tfmp.parse_loss_scale(_LOSS_SCALE.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    config = demo.DemoConfig(
        precision=_PRECISION.value,
        loss_scale=_LOSS_SCALE.value,
        epochs=_EPOCHS.value,
        batch_size=_BATCH_SIZE.value,
        steps_per_epoch=_STEPS_PER_EPOCH.value,
        learning_rate=_LEARNING_RATE.value,
        xla=_XLA.value,
        logdir=_LOGDIR.value,
        run_name=_RUN_NAME.value,
        seed=_SEED.value,
    )
    results = demo.run_demo(config)
    print(f"final: val_accuracy {results['val_accuracy']:.4f}, skipped steps "
          f"{results['skipped_steps']}; TensorBoard: tensorboard --logdir {results['logdir']}")


if __name__ == "__main__":
    app.run(main)
