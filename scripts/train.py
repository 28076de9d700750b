r"""Trains a model of your own with mixed precision: any `tfmp.run.tasks.Task`.

    tfmp-train --task=my_tasks:TASK --precision=mixed_float16 --epochs=3 --run_name=first
    tfmp-train --task=my_tasks:TASK --run_name=first --resume
    tfmp-train --task=path/to/my_tasks.py:TASK --strategy=mirrored
    tensorboard --logdir logs

--task is MODULE:NAME: a module on the Python path (or a path to a .py file)
and the name in it of a Task (see the "Your own model" guide), a Task
subclass, or a function returning a Task. The task's own config gives the
defaults; the flags below override only what you pass. Everything a run of
the shipped models has, the task's run has: console and TensorBoard,
checkpoints and --resume, SIGTERM/SIGINT, several GPUs and hosts.
"""

import functools

from absl import flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

from tfmp.run import training

_TASK = flags.DEFINE_string(
    "task",
    None,
    "MODULE:NAME of the task to train (a module on the Python path, or path/to/file.py:NAME).",
    required=True,
)
_FLAGS = common.define_flags(training.TrainConfig())
flags.adopt_module_key_flags(common)  # --help lists common's flags too


def main(argv):
    common.check_no_arguments(argv)
    # The strategy before the task: its module may build TensorFlow objects (its optimizer) when imported.
    task, strategy = common.load_task_and_strategy(_TASK.value, _FLAGS)
    common.run(functools.partial(training.train, strategy=strategy), task)


# --help cannot know the task's config before --task is loaded: it says whose defaults it lists.
HELP_NOTE = (
    "Defaults: the task's own config supplies them, and a flag you pass overrides that one setting. The defaults "
    "shown below are TrainConfig()'s, not your task's."
)
run = common.entry_point(main, __name__, HELP_NOTE)  # the console command `tfmp-train`


if __name__ == "__main__":
    run()
