r"""Does mixed precision keep float32's accuracy? Paired runs of a model over seeds.

    python3 scripts/parity.py --seeds=0,1,2,3,4 --precisions=float32,mixed_float16,mixed_bfloat16 \
        --json_out=parity.json
    python3 scripts/parity.py --task=my_tasks:TASK --seeds=0,1,2 --precisions=fp32,fp16

For each seed, every precision trains MobileNetV2 (alpha 0.35 by default) on
the embedded digits from the same initial weights and on the same batches in
the same order (checked before training), so the differences between the
precisions are numerical, not luck. Prints one progress line per run, then a
markdown table of the per-seed validation accuracies and, per precision, the
mean paired gap to float32 with its spread. With --task, a model of your own
runs instead, one split per seed (its pipeline must be ordered by the seed).
The method is in `tfmp/run/parity/`; the measured figures in
docs/NUMERICS.md.
"""

import dataclasses
import functools
import os

from absl import app, flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

from tfmp.run import parity, reporting, training

_DEFAULTS = parity.ParityConfig()
_CLASSIFIER = _DEFAULTS.classifier
# Set per run by the benchmark, or meaningless for a sweep of fresh runs.
_EXCLUDED = (
    "precision",
    "seed",
    "run_name",
    "strategy",
    "resume",
    "checkpoint_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "on_nonfinite",
    "profile_steps",
    "diagnose_every",
)
_FLAGS = common.define_flags(_CLASSIFIER, exclude=_EXCLUDED)
_SEEDS = flags.DEFINE_list("seeds", [str(s) for s in _DEFAULTS.seeds], "Seeds; every precision runs each one.")
_PRECISIONS = flags.DEFINE_list(
    "precisions",
    list(_DEFAULTS.precisions),
    "Precisions: float32 (the reference, required), mixed_float16, mixed_bfloat16 (or fp32, fp16, bf16).",
)
_FOLDS = flags.DEFINE_integer(
    "folds", _DEFAULTS.folds, "k-fold rotation: each seed runs k times, validating on each fold (1: one split)."
)
_LR_WARMUP = flags.DEFINE_integer(
    "lr_warmup_steps", _DEFAULTS.lr_warmup_steps, "Steps of linear learning-rate warm-up before the cosine decay."
)
_AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", _DEFAULTS.average_last, "A run's result: the mean of the evaluations after its last N epochs."
)
_CONTROL = flags.DEFINE_boolean(
    "control",
    _DEFAULTS.control,
    "Also run float32 with Keras's BatchNormalization: a rounding-only change whose gap is the noise floor.",
)
_FP16_SCALES = flags.DEFINE_list(
    "fp16_initial_scales",
    [],
    "Extra mixed_float16 arms whose dynamic loss scale starts at these values (the default arm: 2**15).",
)
_PARENT = flags.DEFINE_string(
    "run_name", "", "Directory of the runs under --logdir (each <precision>_seed<seed>); default: parity_<time>."
)
_TASK = flags.DEFINE_string(
    "task",
    None,
    "A model of your own instead of the classifier: MODULE:NAME (a module on the Python path, or "
    "path/to/file.py:NAME) of a tfmp.run.tasks.Task with validation data.",
)
# The classifier's levers: with --task, ParityConfig.for_task refuses them.
_LEVERS = {"folds": _FOLDS, "lr_warmup_steps": _LR_WARMUP, "control": _CONTROL, "fp16_initial_scales": _FP16_SCALES}
_JSON_OUT = flags.DEFINE_string(
    "json_out", None, "Also write the records to this JSON file (rewritten after every run)."
)
flags.adopt_module_key_flags(common)  # --help lists common's flags too


def _seeds(values: list[str]) -> tuple[int, ...]:
    seeds = []
    for value in values:
        try:
            seeds.append(int(value))
        except ValueError:
            raise app.UsageError(f"--seeds must be integers >= 0, comma-separated. Received: {value!r}") from None
    return tuple(seeds)


def _scales(values: list[str]) -> tuple[float, ...]:
    scales = []
    for value in values:
        try:
            scales.append(float(value))
        except ValueError:
            raise app.UsageError(
                f"--fp16_initial_scales must be numbers >= 1, comma-separated. Received: {value!r}"
            ) from None
    return tuple(scales)


def main(argv):
    common.check_no_arguments(argv)
    if _JSON_OUT.value is not None:
        directory = os.path.dirname(os.path.abspath(_JSON_OUT.value))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise app.UsageError(f"--json_out must be in a writable directory. Received: --json_out={_JSON_OUT.value}")
    common_settings = {
        "seeds": _seeds(_SEEDS.value),
        "precisions": tuple(_PRECISIONS.value),
        "average_last": _AVERAGE_LAST.value,
        "run_name": _PARENT.value,
    }
    levers = {
        "folds": (_FOLDS, _FOLDS.value),
        "lr_warmup_steps": (_LR_WARMUP, _LR_WARMUP.value),
        "control": (_CONTROL, _CONTROL.value),
        "fp16_initial_scales": (_FP16_SCALES, _scales(_FP16_SCALES.value)),
    }
    if _TASK.value is not None:
        # The classifier's levers only when given: the config then names them as not for a task.
        given = {name: value for name, (holder, value) in levers.items() if holder.present}
        task = common.load_task(_TASK.value, _FLAGS)
        config = parity.ParityConfig.for_task(task, **common_settings, **given)
    else:
        config = parity.ParityConfig(
            classifier=common.config_from_flags(training.ClassifierConfig, _FLAGS),
            **common_settings,
            **{name: value for name, (_, value) in levers.items()},
        )
    save = None
    if _JSON_OUT.value:

        def save(records):  # after every run: a sweep stopped halfway keeps what it measured
            reporting.write_json(records, _JSON_OUT.value)

    records = common.run(functools.partial(parity.run_parity, on_record=save), config)
    print()
    print(parity.parity_table(records))
    if _JSON_OUT.value:
        reporting.write_json(records, _JSON_OUT.value)
        print(f"\nrecords: {_JSON_OUT.value}")


# What --task leaves out: the classifier's own fields (a task's config has them only if it is a ClassifierConfig),
# and the levers of the classifier's design (ParityConfig.for_task refuses them).
_TRAIN_FIELDS = {field.name for field in dataclasses.fields(training.TrainConfig)}
CLASSIFIER_ONLY = sorted([name for name in _FLAGS if name not in _TRAIN_FIELDS] + list(_LEVERS))
HELP_NOTE = (
    "With --task: the task's own config supplies the defaults, and a flag you pass overrides that one setting; "
    f"these flags are the shipped classifier's only: {', '.join('--' + name for name in CLASSIFIER_ONLY)} (the "
    "classifier's fields apply to a task whose config is a ClassifierConfig). Every other flag applies to both."
)
run = common.entry_point(main, __name__, HELP_NOTE)  # the console command `tfmp-parity`


if __name__ == "__main__":
    run()
