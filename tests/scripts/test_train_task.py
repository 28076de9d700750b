"""`--task=MODULE:NAME` through the scripts, as a user with a model of their own runs them."""

import os
import re
import signal
import subprocess
import sys

import families
import numpy as np
import pytest
import script_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAMILIES = os.path.join(ROOT, "tests", "families.py")
CNN = f"--task={FAMILIES}:CNN_TASK"
OWN_TRAINER = f"--task={os.path.join(ROOT, 'examples', 'own_trainer.py')}:TASK"
STEP_LINE = re.compile(r"^\((\d+), (\d+)\), Loss: (\S+), Accuracy: (\S+), loss_scale: ")


def _command(script, *flags):
    return [sys.executable, os.path.join(ROOT, "scripts", script), *flags]


def _env():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the scripts' own quiet start-up, as a user gets it
    return env


def _run(script, *flags, timeout=600):
    return script_server.run(_command(script, *flags), timeout=timeout, env=_env(), cwd=ROOT)


def _final(run_dir, step):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(run_dir, "checkpoints", f"ckpt-{step}"))
    names = reader.get_variable_to_shape_map()
    return {k: reader.get_tensor(k) for k in names if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and "save_counter" not in k}


@pytest.mark.parametrize(
    "task, expected",
    [
        # Every kind of bad value is tested in process (tests/run/test_tasks.py); here, what the user sees.
        (f"{FAMILIES}:NO_SUCH_TASK", "has no attribute 'NO_SUCH_TASK'. It defines these tasks: CNN_TASK, GRU_TASK"),
        pytest.param("families", "--task: must be MODULE:NAME", marks=pytest.mark.slow),
        pytest.param(
            "no_such_module_xyz:TASK", "no module 'no_such_module_xyz' on the Python path", marks=pytest.mark.slow
        ),
        pytest.param(
            f"{FAMILIES}:NUM_CLASSES", "NUM_CLASSES is an int (10), not a Task; NAME must be", marks=pytest.mark.slow
        ),
    ],
)
def test_a_bad_task_is_a_one_line_usage_error_naming_it(task, expected):
    proc = _run("train.py", f"--task={task}")
    assert proc.returncode == 1, proc.stderr[-2000:]
    (first,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert expected in first and first.endswith(f"Received: --task={task!r}"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_task_file_with_a_syntax_error_is_a_one_line_usage_error_naming_the_file_and_line(tmp_path):
    broken = tmp_path / "broken_task_file.py"
    broken.write_text("import keras\n\nTASK = keras.Model(\n")
    proc = _run("train.py", f"--task={broken}:TASK")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    (first,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert first == (
        f"error: --task: {broken} line 3: SyntaxError: '(' was never closed. Received: --task='{broken}:TASK'"
    )


def test_a_flag_the_tasks_config_does_not_have_is_refused():
    proc = _run("diagnose.py", CNN, "--dataset=mnist")
    assert proc.returncode == 1 and "--dataset is not a setting of the task's config (TrainConfig)" in proc.stderr


def test_train_runs_a_task_of_your_own_and_resume_continues_it(tmp_path):
    """The fast twin of the SIGTERM test below: one epoch, then --resume with --epochs=2."""
    flags = [CNN, "--precision=mixed_float16", f"--logdir={tmp_path}", "--run_name=run", "--console=lines"]
    first = _run("train.py", *flags, "--epochs=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "training bn_cnn: precision=mixed_float16 loss_scale=dynamic" in first.stdout
    assert "ex/s" in first.stdout and "img/s" not in first.stdout  # examples, not images, of a task of your own
    assert [STEP_LINE.match(line).groups()[:2] for line in first.stdout.splitlines() if STEP_LINE.match(line)] == [
        ("0", "0"),
        ("0", "1"),
        ("0", "2"),
    ]
    resumed = _run("train.py", *flags, "--epochs=2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 3" in resumed.stdout and "(1, 2)" in resumed.stdout
    assert os.path.exists(tmp_path / "run" / "checkpoints" / "ckpt-6.index")


@pytest.mark.slow  # the fast twin: tests/examples/test_examples.py trains the same task in process
def test_train_runs_a_trainer_of_your_own_and_resume_continues_it(tmp_path):
    flags = [OWN_TRAINER, "--steps_per_epoch=3", "--batch_size=16", f"--logdir={tmp_path}", "--run_name=points"]
    flags.append("--console=lines")
    first = _run("train.py", *flags, "--epochs=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "training point_gan: precision=mixed_float16 loss_scale=dynamic" in first.stdout
    assert re.search(r"^\(0, 2\), D Loss: \S+, G Loss: \S+, loss_scale: \d+/\d+, ", first.stdout, re.M), first.stdout
    assert re.search(r"final D Loss \S+, G Loss \S+$", first.stdout, re.M), first.stdout
    assert os.listdir(tmp_path / "points" / "train")
    resumed = _run("train.py", *flags, "--epochs=2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 3" in resumed.stdout and "(1, 2), D Loss: " in resumed.stdout
    assert os.path.exists(tmp_path / "points" / "checkpoints" / "ckpt-6.index")


def test_a_trainer_of_your_own_lacking_a_piece_is_a_one_line_error_naming_it_and_the_guide(tmp_path):
    module = tmp_path / "incomplete_trainer.py"
    module.write_text(
        "import sys\n"
        f"sys.path.insert(0, {os.path.join(ROOT, 'examples')!r})\n"
        "import own_trainer\n\n"
        "class NoNetworks(own_trainer.PointGAN):\n"
        "    networks = own_trainer.MixedPrecisionTrainer.networks\n\n"
        "class Task(own_trainer.PointGANTask):\n"
        "    def build_trainer(self, loss_scale, xla, steps_per_epoch, data):\n"
        "        gan = NoNetworks(own_trainer.mlp(own_trainer.LATENT, 2), own_trainer.mlp(2, 1))\n"
        "        gan.compile(*self.optimizers(steps_per_epoch), loss_scale=loss_scale)\n"
        "        return gan\n\n"
        "TASK = Task(own_trainer.TASK.config)\n"
    )
    proc = _run("train.py", f"--task={module}:TASK", f"--logdir={tmp_path}", "--precision=float32")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: NoNetworks does not define networks, the property giving its trained models")
    assert line.endswith("See docs/guides/own-model.md, 'A trainer of your own'.")


@pytest.mark.slow
def test_sigterm_stops_a_task_of_your_own_and_resume_is_bit_exact(tmp_path):
    flags = [CNN, "--precision=mixed_float16", f"--logdir={tmp_path}", "--console=lines", "--deterministic"]
    flags += ["--epochs=4", "--checkpoint_every=1"]
    reference = _run("train.py", *flags, "--run_name=ref")
    assert reference.returncode == 0, reference.stderr[-3000:]
    proc = subprocess.Popen(
        _command("train.py", *flags, "--run_name=cut"), env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = 0
    for line in proc.stdout:
        seen += STEP_LINE.match(line) is not None
        if seen == 4:
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    stopped = int(re.search(r"after step (\d+)", err).group(1))
    assert 4 <= stopped < 12 and "--resume" in err
    resumed = _run("train.py", *flags, "--run_name=cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {stopped}" in resumed.stdout
    ours, theirs = _final(str(tmp_path / "cut"), 12), _final(str(tmp_path / "ref"), 12)
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


@pytest.mark.slow  # the fast twin: tests/run/test_training.py diagnoses each family in process
def test_diagnose_takes_the_task(tmp_path):
    proc = _run("diagnose.py", f"--task={FAMILIES}:TRANSFORMER_TASK", "--batch_size=16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "diagnosing transformer: precision=mixed_float16" in proc.stdout
    assert "suggested static loss scale" in proc.stdout
    refused = _run("diagnose.py", f"--task={FAMILIES}:GRU_TASK", "--model=gan")
    assert refused.returncode == 1 and "--model is for the shipped models, not --task" in refused.stderr


@pytest.mark.slow
def test_benchmark_and_parity_take_the_task(tmp_path):
    bench = _run(
        "benchmark.py", f"--task={FAMILIES}:GRU_TASK", "--precisions=fp32,bf16", "--xla=false", "--batch_sizes=16",
        "--warmup_steps=1", "--steps=2", "--repeats=2",
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    rows = [line for line in bench.stdout.splitlines() if line.startswith("| gru |")]
    assert [row.split(" | ")[1] for row in rows] == ["float32", "mixed_bfloat16"]
    parity = _run(
        "parity.py", CNN, "--seeds=0", "--precisions=fp32,bf16", f"--logdir={tmp_path}", "--average_last=1",
    )  # fmt: skip
    assert parity.returncode == 0, parity.stderr[-3000:]
    assert "every arm starts from the same weights and batch order" in parity.stdout
    assert "| mixed_bfloat16 | 1 |" in parity.stdout
    folds = _run("parity.py", CNN, "--folds=3")
    assert folds.returncode == 1 and "folds belongs to the MobileNetV2 classifier's design" in folds.stderr


# --- the strategy before the task's module (scripts/common.py load_task_and_strategy) ------------


def _task_module(tmp_path, monkeypatch, name, settings="precision='float32', batch_size=16, warmup_steps=0"):
    """Writes task module `name` (`families.optimizer_at_import`) and its event log beside it.

    Returns (its --task, the log's EVENTS).
    """
    log = f"{name}_log"
    (tmp_path / f"{log}.py").write_text("EVENTS = []\n")
    (tmp_path / f"{name}.py").write_text(families.optimizer_at_import(settings, event_log=log))
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in (name, log):  # imported afresh here, and forgotten after the test
        monkeypatch.delitem(sys.modules, module, raising=False)
    events = __import__(log).EVENTS
    return f"{tmp_path / name}.py:TASK", events


def _holders(*argv):
    """train.py's strategy settings (and a few others) as flag holders, parsed from `argv`."""
    from absl import flags

    from tfmp.run import config

    defaults, flag_values = config.TrainConfig(), flags.FlagValues()
    define = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float}
    names = ("strategy", "cluster", "slurm_port_base", "worker_timeout", "epochs", "logdir", "run_name")
    holders = {
        name: define[type(getattr(defaults, name))](name, getattr(defaults, name), "", flag_values=flag_values)
        for name in names
    }
    holders["steps_per_epoch"] = flags.DEFINE_integer("steps_per_epoch", None, "", flag_values=flag_values)
    flag_values(["train.py", *argv])
    return holders


def _recording(events, make=None):
    """A make_strategy that logs its call in `events` and returns `make`'s strategy (default: a stand-in)."""

    def make_strategy(name, **settings):
        events.append(("make_strategy", name, settings))
        return make(name, **settings) if make else f"<{name} strategy>"

    return make_strategy


def test_multi_worker_is_made_before_the_task_module_that_builds_its_optimizer_at_import(tmp_path, monkeypatch):
    from scripts import common

    task_spec, events = _task_module(tmp_path, monkeypatch, "mw_first_task")
    holders = _holders("--strategy=multi_worker", "--epochs=1", "--steps_per_epoch=2")
    task, strategy = common.load_task_and_strategy(task_spec, holders, make_strategy=_recording(events))
    settings = {"cluster": "tf_config", "slurm_port_base": 8888, "worker_timeout": 30.0}
    assert events == [("make_strategy", "multi_worker", settings), "module"]
    assert strategy == "<multi_worker strategy>"
    assert (task.config.strategy, task.config.epochs, task.config.steps_per_epoch) == ("multi_worker", 1, 2)
    # Other strategies need not come first: the run makes them, after the task (as before).
    task_spec, events = _task_module(tmp_path, monkeypatch, "mirrored_later_task")
    task, strategy = common.load_task_and_strategy(
        task_spec, _holders("--strategy=mirrored"), make_strategy=_recording(events)
    )
    assert (events, strategy, task.config.strategy) == (["module"], None, "mirrored")


def test_a_strategy_made_first_trains_the_task_whose_optimizer_was_built_at_import(tmp_path, monkeypatch):
    """In process: mirrored (conftest's two CPUs) stands in for multi_worker, which must be a process's first op."""
    from scripts import common
    from tfmp.run import distribute, training

    monkeypatch.setattr(distribute, "FIRST", distribute.FIRST | {"mirrored"})
    task_spec, events = _task_module(tmp_path, monkeypatch, "made_first_task")
    flags = ("--strategy=mirrored", "--epochs=1", "--steps_per_epoch=2", f"--logdir={tmp_path}", "--run_name=r")
    make_strategy = _recording(events, distribute.make_strategy)
    task, strategy = common.load_task_and_strategy(task_spec, _holders(*flags), make_strategy=make_strategy)
    assert [event if event == "module" else event[0] for event in events] == ["make_strategy", "module"]
    assert strategy is distribute.make_strategy("mirrored")  # the process's one, handed on
    lines = []
    result = training.train(task, print_fn=lines.append, strategy=strategy)
    assert result.steps == 2 and any("strategy=mirrored replicas=2" in line for line in lines)
    assert result.trainer.distribute_strategy is strategy
    assert os.path.exists(tmp_path / "r" / "checkpoints" / "ckpt-2.index")


def test_a_strategy_that_must_come_first_named_only_by_the_tasks_config_says_to_pass_it_as_a_flag(
    tmp_path, monkeypatch
):
    from absl import app

    from scripts import common

    task_spec, events = _task_module(tmp_path, monkeypatch, "mw_in_config_task", "strategy='multi_worker'")

    def too_late(name, **settings):  # as make_strategy after the module built its optimizer
        raise RuntimeError("MultiWorkerMirroredStrategy must be created before any other TensorFlow operation")

    with pytest.raises(app.UsageError) as error:
        common.load_task_and_strategy(task_spec, _holders(), make_strategy=too_late)
    assert "pass --strategy=multi_worker on the command line, so that the strategy is made before" in str(error.value)
    # Made first from the command line, the strategy's settings must be the task's.
    task_spec, events = _task_module(
        tmp_path, monkeypatch, "slurm_in_config_task", "strategy='multi_worker', cluster='slurm'"
    )
    with pytest.raises(app.UsageError, match="the task's config says otherwise: pass --cluster=slurm too"):
        common.load_task_and_strategy(task_spec, _holders("--strategy=multi_worker"), make_strategy=_recording(events))


def _help_note(text):
    """The paragraph that opens the flags of a script's --help (between `flags:` and the first section)."""
    return " ".join(text.split("\nflags:\n", 1)[1].split("\n\n", 1)[0].split())


def test_train_help_under_a_task_says_the_tasks_config_supplies_the_defaults():
    proc = _run("train.py", CNN, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _help_note(proc.stdout) == (
        "Defaults: the task's own config supplies them, and a flag you pass overrides that one setting. The "
        "defaults shown below are TrainConfig()'s, not your task's."
    )


def test_parity_help_says_which_flags_are_the_classifiers_only():
    proc = _run("parity.py", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    note = _help_note(proc.stdout)
    assert note.startswith("With --task: the task's own config supplies the defaults")
    named = set(re.findall(r"--(\w+)", note.split("only:", 1)[1]))
    listed = set(re.findall(r"^  --(?:\[no\])?(\w+)", proc.stdout, re.MULTILINE))
    assert {"alpha", "dataset", "lr_schedule", "folds", "lr_warmup_steps", "control", "fp16_initial_scales"} <= named
    assert named <= listed and not named & {"task", "seeds", "precisions", "epochs", "batch_size", "average_last"}
