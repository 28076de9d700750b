"""Why is my mixed-precision run slow or wrong? Four reports, no training.

    python3 scripts/diagnose.py --model=gan --precision=mixed_float16 --batch_size=256
    python3 scripts/diagnose.py --model=gan --generator_widths=63,31,7 --batch_size=4090
    python3 scripts/diagnose.py --model=mobilenet_v2 --precision=mixed_bfloat16 --alpha=0.35
    python3 scripts/diagnose.py --tutorial_variants
    python3 scripts/diagnose.py --task=my_tasks:TASK --precision=mixed_float16

Builds the model and trainer exactly as the training scripts do and prints,
for the first batch of the dataset: the Tensor Core alignment report, the
float32-output check, the gradient numerics in float16 (with a suggested
static loss scale), and the first non-finite layer, if any. With
--run_name, log2|g| histograms go to <logdir>/<run_name> for TensorBoard.
--generator_widths is for --model=gan, --alpha for --model=mobilenet_v2.
--tutorial_variants prints the alignment report of the GAN tutorial's generator and of
its "bad sizes" variant (widths 63/31/7, batch 4090) side by side.
"""

from absl import app, flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

import tfmp
from tfmp.models.gan import build_generator
from tfmp.run import diagnostics, training

_CONFIGS = {"gan": training.GANConfig, "mobilenet_v2": training.ClassifierConfig}
_DEFAULTS = training.ImageConfig(precision="mixed_float16", batch_size=256, dataset="digits")
_MODEL = flags.DEFINE_enum("model", "gan", list(_CONFIGS), "The shipped model to diagnose.")
_TASK = flags.DEFINE_string(
    "task",
    None,
    "A model of your own instead of --model: MODULE:NAME (a module on the Python path, or path/to/file.py:NAME) "
    "of a tfmp.run.tasks.Task; diagnosed on the first batch of its training data.",
)
_FLAGS = common.define_flags(
    _DEFAULTS,
    exclude=(
        "xla",
        "tf32",
        "epochs",
        "steps_per_epoch",
        "log_every",
        "warmup_steps",
        "diagnose_every",
        "profile_steps",
        "strategy",
    ),
)
# Each model's own: the flag of the other model is refused.
_MODEL_FLAGS = {
    "gan": common.define_flags(training.GANConfig(), only=("generator_widths",)),
    "mobilenet_v2": common.define_flags(training.ClassifierConfig(), only=("alpha",)),
}
_TUTORIAL_VARIANTS = flags.DEFINE_bool(
    "tutorial_variants",
    False,
    "Only print the alignment of the GAN tutorial's generator and of its bad-sizes variant.",
)
flags.DEFINE_alias("seed_variants", "tutorial_variants")  # its name in tfmp 0.1
flags.adopt_module_key_flags(common)  # --help lists common's flags too


def _model_flags() -> dict:
    """The flags of --model's config, refusing those of the other model."""
    for model, holders in _MODEL_FLAGS.items():
        for holder in holders.values():
            if model != _MODEL.value and holder.present:
                raise app.UsageError(f"--{holder.name} applies to --model={model}. Received: --model={_MODEL.value}")
    return {**_FLAGS, **_MODEL_FLAGS[_MODEL.value]}


def _tutorial_variants(precision: str) -> None:
    # The GAN tutorial's widths and batch; its "bad sizes" variant: widths one below, batch 4090.
    tutorial = training.GANConfig()
    for title, widths, batch_size in (
        ("the tutorial's generator", tutorial.generator_widths, tutorial.batch_size),
        ("the tutorial's bad sizes", tuple(w - 1 for w in tutorial.generator_widths), 4090),
    ):
        print(f"== {title}: widths {widths}, batch {batch_size}, {precision} ==")
        with tfmp.precision_scope(precision):
            print(diagnostics.tensor_core_report(build_generator(widths=widths), batch_size))
        print()


def _task():
    """The --task, with the flags given (and this command's precision) over its own config."""
    model_flags = [holder for holders in _MODEL_FLAGS.values() for holder in holders.values()]
    for holder in (_MODEL, *model_flags, _TUTORIAL_VARIANTS):
        if holder.present:
            raise app.UsageError(
                f"--{holder.name} is for the shipped models, not --task. Received: --task={_TASK.value}"
            )
    task = common.load_task(_TASK.value, _FLAGS)
    return task if _FLAGS["precision"].present else task.with_config(precision=_FLAGS["precision"].value)


def main(argv):
    common.check_no_arguments(argv)
    if _TASK.value is not None:
        common.run(training.diagnose, _task())
        return
    if _TUTORIAL_VARIANTS.value:
        _tutorial_variants(tfmp.precision.canonical_precision(_FLAGS["precision"].value))
        return
    config = common.config_from_flags(_CONFIGS[_MODEL.value], _model_flags())
    common.run(training.diagnose_run, config)


run = common.entry_point(main, __name__)  # the console command `tfmp-diagnose`


if __name__ == "__main__":
    run()
