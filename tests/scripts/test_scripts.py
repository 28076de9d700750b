"""The absl scripts, run as a user runs them: in a subprocess; and scripts/common.py's errors
named by flag, in process."""

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import script_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP_LINE = re.compile(
    r"^\((\d+), (\d+)\), G Loss: \d+\.\d{3}, D Loss: \d+\.\d{3}, loss_scale: (\S+), "
    r"step_time: \d+\.\d{3}, throughput: \d+\.\d{3} img/s$"
)


def _run(command, *flags, timeout=600):
    if command.endswith(".py"):
        command = [sys.executable, os.path.join(ROOT, "scripts", command)]
    else:
        # The command installed with the Python running the tests first (a venv's bin/ need not be on PATH).
        executable = shutil.which(command, path=os.path.dirname(sys.executable)) or shutil.which(command)
        if executable is None:
            pytest.fail(f"console command {command} is not installed; run pip install -e .")
        command = [executable]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return script_server.run(command + list(flags), timeout=timeout, env=env, cwd=ROOT)


def _event_files(directory):
    return [os.path.join(d, f) for d, _, files in os.walk(directory) for f in files if f.startswith("events")]


def test_train_gan_prints_the_tutorials_lines_and_writes_curves(tmp_path):
    proc = _run(
        "train_gan.py",
        "--dataset=digits",
        "--batch_size=32",
        "--epochs=2",
        "--steps_per_epoch=2",
        "--precision=mixed_float16",
        "--loss_scale=dynamic",
        f"--logdir={tmp_path}",
        "--run_name=gan",
        "--warmup_steps=1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    steps = [STEP_LINE.match(line) for line in lines if line.startswith("(")]
    assert len(steps) == 4 and all(steps), lines
    assert [(m.group(1), m.group(2)) for m in steps] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert all(m.group(3) == "32768/32768" for m in steps)
    summary = "\n".join(lines[lines.index(next(line for line in lines if line.startswith("summary:"))) :])
    assert "over 3 steps (first 1 steps excluded as warm-up)" in summary
    assert "skipped steps: G 0, D 0;" in summary
    assert f"tensorboard --logdir {tmp_path}" in summary
    assert _event_files(tmp_path / "gan" / "generator") and _event_files(tmp_path / "gan" / "discriminator")


def test_an_unset_loss_scale_is_not_noted_and_info_logs_stay_off(tmp_path):
    proc = _run(
        "train_gan.py",
        "--dataset=digits",
        "--batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=1",
        "--precision=bf16",
        f"--logdir={tmp_path}",
        "--run_name=gan",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "precision=mixed_bfloat16 loss_scale=none" in proc.stdout
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    # The one note is what this CPU does with bfloat16 (tfmp.cpu_kernels), none of the loss scale.
    assert [note.split()[1] for note in notes] == ["bfloat16"] and not any("loss" in note for note in notes), notes
    # The epoch's checkpoint makes TensorFlow log an absl INFO line unless the script quiets it.
    assert "checkpoint:" in proc.stdout
    assert "Sharding callback duration" not in proc.stderr, proc.stderr[-3000:]
    assert not re.findall(r"^I\d{4} [^\n]*\.py:\d+\]", proc.stderr, re.M), proc.stderr[-3000:]


@pytest.mark.slow
def test_train_classifier_notes_an_ignored_loss_scale(tmp_path):
    proc = _run(
        "train_classifier.py",
        "--dataset=digits",
        "--alpha=0.35",
        "--batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=2",
        "--precision=bf16",
        "--loss_scale=dynamic",
        f"--logdir={tmp_path}",
        "--run_name=clf",
        "--profile_steps=2,2",
        "--float32_layers=_BN$",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    # Besides the note on what this CPU does with bfloat16 (tfmp.cpu_kernels), the loss scale's.
    cpu = [note for note in notes if note.startswith("note: bfloat16 is ")]
    assert len(cpu) == 1, notes
    assert [note for note in notes if note not in cpu] == [
        "note: loss_scale=dynamic is ignored under mixed_bfloat16; only float16 needs loss scaling."
    ]
    # MobileNetV2 has 52 BatchNorm layers; the stem's is "bn_Conv1" and the last "Conv_1_bn".
    assert "float32 layers: 50 matching '_BN$' (mobilenet_v2_classifier/mobilenetv2_0.35_32/" in proc.stdout
    assert f"profiled steps 2-2: tensorboard --logdir {tmp_path / 'clf'}" in proc.stdout
    assert [f for _, _, files in os.walk(tmp_path / "clf" / "plugins") for f in files if f.endswith(".xplane.pb")]
    assert re.search(
        r"^\(0, 1\), Loss: \d+\.\d{3}, Accuracy: \d\.\d{3}, loss_scale: none, step_time: ", proc.stdout, re.M
    ), proc.stdout
    assert _event_files(tmp_path / "clf" / "train") and _event_files(tmp_path / "clf" / "validation")


@pytest.mark.parametrize(
    "script, flag, expected",
    [
        ("train_gan.py", "--precision=fp8", "fp8"),
        ("train_gan.py", "--batch_size=0", "--batch_size=0"),
        ("train_gan.py", "--loss_scale=-2", "loss_scale='-2'"),
        ("train_gan.py", "--dataset=cifar10", "cifar10"),
        ("train_classifier.py", "--xla=sometimes", "sometimes"),
        ("train_classifier.py", "--epochs=-1", "--epochs=-1"),
        ("train_classifier.py", "--profile_steps=5", "Received: '5'"),
        ("train_classifier.py", "--profile_steps=5,2", "end=2"),
        ("train_classifier.py", "--float32_layers=nosuchlayer", "Received: 'nosuchlayer'"),
        # An infinite rate would write inf/NaN into the weights at the first step (and exit 0).
        (
            "train_classifier.py",
            "--learning_rate=inf",
            "--learning_rate must be a finite number > 0. Received: --learning_rate=inf",
        ),
        ("train_gan.py", "--generator_learning_rate=inf", "generator_learning_rate=inf"),
        ("train_gan.py", "--discriminator_learning_rate=nan", "discriminator_learning_rate=nan"),
        # inf used to reach MobileNetV2 and end in a Keras traceback (OverflowError).
        ("train_classifier.py", "--alpha=inf", "--alpha must be a finite number > 0. Received: --alpha=inf"),
    ],
)
def test_bad_flags_fail_before_training(script, flag, expected, tmp_path):
    proc = _run(script, "--dataset=digits", flag, f"--logdir={tmp_path / 'logs'}")
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert not _event_files(tmp_path)
    assert "Traceback" not in proc.stderr


def test_a_loss_scale_beyond_the_bound_is_a_usage_error_naming_the_range(tmp_path):
    # 1e40 overflows float32; anything above 2**24 (max_scale) is refused.
    proc = _run(
        "train_gan.py", "--dataset=digits", "--precision=mixed_float16", "--loss_scale=1e40", f"--logdir={tmp_path}"
    )
    assert proc.returncode != 0
    assert "(0, 16777216] (2**24)" in proc.stderr and "Received: --loss_scale='1e40'" in proc.stderr
    assert "Traceback" not in proc.stderr and not _event_files(tmp_path)


def test_an_unwritable_logdir_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _run("train_gan.py", "--dataset=digits", "--batch_size=32", f"--logdir={blocker}/logs")
    assert proc.returncode != 0
    assert f"logdir='{blocker}/logs'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_mnist_offline_names_the_file_and_the_embedded_alternative(tmp_path):
    proc = _run("train_gan.py", f"--data_dir={tmp_path}", f"--logdir={tmp_path / 'logs'}")
    assert proc.returncode != 0
    assert os.path.join(str(tmp_path), "mnist.npz") in proc.stderr
    assert "digits" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not _event_files(tmp_path)


@pytest.mark.slow
def test_compare_loss_scaling_console_command_prints_the_table(tmp_path):
    proc = _run(
        "tfmp-compare-loss-scaling",
        "--dataset=digits",
        "--batch_size=16",
        "--epochs=1",
        "--steps_per_epoch=1",
        "--warmup_steps=0",
        f"--logdir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "run",
        "float32",
        "mixed_float16_no_loss_scale",
        "mixed_float16_dynamic_loss_scale",
    ]
    assert f"tensorboard --logdir {tmp_path}" in proc.stdout
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["float32", "mixed_float16_no_loss_scale", "mixed_float16_dynamic_loss_scale"]
    )


@pytest.mark.slow
def test_diagnose_flags_the_tutorials_pitfall_and_writes_histograms(tmp_path):
    proc = _run(
        "diagnose.py",
        "--model=gan",
        "--generator_widths=63,31,7",
        "--batch_size=90",
        "--precision=fp16",
        f"--logdir={tmp_path}",
        "--run_name=diag",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for section in (
        "Tensor Core alignment (multiples of 8, batch size 90)",
        "Float32 outputs",
        "Gradient numerics in float16",
        "suggested static loss scale: 2^",
        "First non-finite layer: none",
    ):
        assert section in out, out
    for layer, dimension, value, aligned in (
        ("generator/dense", "units", 3087, 3088),
        ("generator/conv_1", "filters", 63, 64),
        ("generator/conv_2", "input channels", 63, 64),
        ("(batch)", "batch size", 90, 88),
    ):
        assert re.search(rf"warn\s+{re.escape(layer)}\s+{dimension}\s+{value}\s+{aligned}", out), out
    assert "x32768: zero" in out  # the float16 run's current loss scale
    assert _event_files(tmp_path / "diag" / "diagnostics")


def test_diagnose_tutorial_variants_contrast_the_two_generators():
    proc = _run("diagnose.py", "--tutorial_variants")
    assert proc.returncode == 0, proc.stderr[-3000:]
    good, bad = proc.stdout.split("== the tutorial's bad sizes")
    assert "0 warning(s)" in good and "9 warning(s)" in bad and "4090" in bad


@pytest.mark.parametrize(
    "flags, expected",
    [
        (("--model=gan", "--alpha=0.5"), "--alpha applies to --model=mobilenet_v2"),
        (("--generator_widths=8,x,8",), "Received: 8,x,8"),
        (("--model=vgg",), "vgg"),
    ],
)
def test_diagnose_bad_flags_are_usage_errors(flags, expected):
    proc = _run("diagnose.py", *flags)
    assert proc.returncode != 0 and expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_parity_refuses_a_classifier_lever_for_a_task_naming_it(tmp_path):
    # It used to end in a TypeError traceback (folds given twice to ParityConfig.for_task).
    proc = _run("parity.py", "--task=tfmp.run.shipped:GANTask", "--folds=3", f"--logdir={tmp_path}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "error: folds belongs to the MobileNetV2 classifier's design" in proc.stderr
    assert "Received: folds=3" in proc.stderr and not os.listdir(tmp_path)


# --- preemption, crashes and resume, through the script --------------------------

RESUMABLE_GAN = [
    "--dataset=digits",
    "--batch_size=32",
    "--steps_per_epoch=8",
    "--epochs=5",
    "--precision=mixed_float16",
    "--loss_scale=dynamic",
    "--warmup_steps=0",
    "--checkpoint_every=1",
    "--deterministic",
]
RESUMABLE_STEPS = 40


def _start(script, *flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", script), *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_step(proc, steps=1, timeout=300):
    """Reads the process's stdout until it has printed `steps` step lines; returns what it read."""
    import selectors
    import time

    seen, lines = 0, []
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while seen < steps:
        if time.monotonic() > deadline or not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            pytest.fail(f"no step line within {timeout} s; read: {lines[-5:]}")
        line = proc.stdout.readline()
        if not line:
            return lines  # the process ended
        lines.append(line)
        seen += STEP_LINE.match(line.strip()) is not None
    return lines


def _final_tensors(run_dir, step):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(run_dir, "checkpoints", f"ckpt-{step}"))
    return {
        k: reader.get_tensor(k)
        for k in reader.get_variable_to_shape_map()
        if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and "save_counter" not in k
    }


def _assert_same_tensors(a, b):
    import numpy as np

    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


KILLS = 10


@pytest.fixture(scope="module")
def uninterrupted_gan(tmp_path_factory):
    """The reference: RESUMABLE_GAN run to the end in one go; its final checkpoint's tensors."""
    logdir = tmp_path_factory.mktemp("reference")
    proc = _run("train_gan.py", *RESUMABLE_GAN, f"--logdir={logdir}", "--run_name=ref")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _final_tensors(str(logdir / "ref"), RESUMABLE_STEPS)


@pytest.mark.slow
def test_sigterm_checkpoints_exits_nonzero_and_resume_is_exact(tmp_path, uninterrupted_gan):
    flags = [*RESUMABLE_GAN, f"--logdir={tmp_path}", "--run_name=run"]
    proc = _start("train_gan.py", *flags)
    _wait_for_step(proc, steps=6)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "training stopped by SIGTERM after step" in err and "--resume" in err and "Traceback" not in err
    stopped_at = int(re.search(r"after step (\d+)", err).group(1))
    assert 6 <= stopped_at < RESUMABLE_STEPS
    assert os.path.exists(os.path.join(tmp_path, "run", "checkpoints", f"ckpt-{stopped_at}.index"))

    resumed = _run("train_gan.py", *flags, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {stopped_at}" in resumed.stdout
    _assert_same_tensors(uninterrupted_gan, _final_tensors(str(tmp_path / "run"), RESUMABLE_STEPS))


@pytest.mark.slow
def test_sigkill_at_random_moments_never_breaks_resume(tmp_path, uninterrupted_gan):
    """Fault injection: SIGKILL a real run at random moments (mid-step, mid-checkpoint-write).

    A run that finishes before the kill lands is checked against the
    uninterrupted one and replaced by a fresh run, so the test always sees
    `KILLS` kills however fast the machine is.
    """
    import random
    import time

    rng = random.Random(1234)
    kills, finished = 0, 0

    def flags():
        return [*RESUMABLE_GAN, f"--logdir={tmp_path}", f"--run_name=run{finished}", "--resume"]

    for _ in range(3 * KILLS):
        if kills == KILLS:
            break
        proc = _start("train_gan.py", *flags())
        read = _wait_for_step(proc, steps=1)
        time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the next steps and their checkpoint writes
        proc.kill()
        out, err = proc.communicate(timeout=120)
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            assert "Traceback" not in err, err[-3000:]
            assert read  # it got as far as training
        else:  # it finished before the kill landed: check it, then start a fresh run
            assert proc.returncode == 0, err[-3000:]
            _assert_same_tensors(uninterrupted_gan, _final_tensors(str(tmp_path / f"run{finished}"), RESUMABLE_STEPS))
            finished += 1
    final = _run("train_gan.py", *flags())
    assert final.returncode == 0, final.stderr[-3000:]
    print(f"SIGKILLs survived: {kills} ({finished} runs finished between kills)")
    assert kills == KILLS
    _assert_same_tensors(uninterrupted_gan, _final_tensors(str(tmp_path / f"run{finished}"), RESUMABLE_STEPS))


# Three runs of the script. The fast twin: tests/run/checkpoint/test_run_checkpoint.py's corrupt newest checkpoint.
@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_falls_back_and_a_ruined_run_names_its_files(tmp_path):
    flags = [
        "--dataset=digits",
        "--batch_size=32",
        "--steps_per_epoch=2",
        "--epochs=2",
        "--precision=float32",
        "--warmup_steps=0",
        f"--logdir={tmp_path}",
        "--run_name=run",
    ]
    assert _run("train_gan.py", *flags).returncode == 0
    checkpoints = tmp_path / "run" / "checkpoints"
    newest = checkpoints / "ckpt-4.data-00000-of-00001"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    resumed = _run("train_gan.py", *flags, "--resume", "--epochs=3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"checkpoint {checkpoints / 'ckpt-4'}" in resumed.stdout and "resuming from the previous one" in resumed.stdout
    )
    assert f"resumed from {checkpoints / 'ckpt-2'} at step 2" in resumed.stdout
    for data in checkpoints.glob("*.data-*"):
        data.write_bytes(b"garbage")
    ruined = _run("train_gan.py", *flags, "--resume", "--epochs=4")
    assert ruined.returncode == 1
    assert (
        "No checkpoint in this directory can be read" in ruined.stderr and str(checkpoints / "ckpt-") in ruined.stderr
    )
    assert "Traceback" not in ruined.stderr


def test_a_resume_with_other_settings_names_them_as_flags(tmp_path):
    flags = [
        "--dataset=digits",
        "--steps_per_epoch=1",
        "--epochs=1",
        "--precision=float32",
        "--warmup_steps=0",
        f"--logdir={tmp_path}",
        "--run_name=run",
    ]
    assert _run("train_gan.py", *flags, "--batch_size=32").returncode == 0
    resumed = _run("train_gan.py", *flags, "--batch_size=16", "--seed=1", "--resume", "--epochs=2")
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert "Traceback" not in resumed.stderr
    assert (
        "Differences: --batch_size=32 in the checkpoint, --batch_size=16 in this run; "
        "--seed=0 in the checkpoint, --seed=1 in this run"
    ) in resumed.stderr
    assert "config." not in resumed.stderr


def test_a_state_file_listing_files_elsewhere_is_refused_and_they_stay(tmp_path):
    flags = [
        "--dataset=digits",
        "--batch_size=32",
        "--steps_per_epoch=1",
        "--precision=float32",
        "--warmup_steps=0",
        f"--logdir={tmp_path / 'logs'}",
        "--run_name=sf",
    ]
    assert _run("train_gan.py", *flags, "--epochs=2").returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "notes.txt"):
        (other / name).write_text("not this run's")
    state = tmp_path / "logs" / "sf" / "checkpoints" / "checkpoint"
    lines = state.read_text().splitlines()
    stamps = next(i for i, line in enumerate(lines) if line.startswith("all_model_checkpoint_timestamps"))
    lines[stamps:stamps] = [lines[stamps]]
    lines.insert(1, f'all_model_checkpoint_paths: "{other}/ckpt-1"')  # first in the list: the oldest
    state.write_text("\n".join(lines) + "\n")
    resumed = _run("train_gan.py", *flags, "--epochs=3", "--resume")
    # The third epoch's checkpoint used to make the manager delete the oldest listed one: other/ckpt-1.*.
    assert resumed.returncode == 1, resumed.stdout[-3000:]
    assert f"error: The checkpoint state file {state} lists 1 checkpoint(s) that are not ckpt-N files" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert sorted(os.listdir(other)) == ["ckpt-1.data-00000-of-00001", "ckpt-1.index", "notes.txt"]


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--strategy=multi_worker", "--cluster=pbs"], ["--cluster=pbs: value should be one of <tf_config|slurm>"]),
        (["--cluster=slurm"], ["Received: --cluster='slurm', --strategy='default'"]),
        # Outside an srun step: the variable named, with the srun line to use; before any training.
        (
            ["--strategy=multi_worker", "--cluster=slurm"],
            [
                "srun python3 scripts/train_gan.py --strategy=multi_worker --cluster=slurm",
                "Received: SLURM_PROCID=None",
            ],
        ),
    ],
)
def test_cluster_flags_outside_a_slurm_step_are_refused_naming_them(flags, expected, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "TF_CONFIG"}
    script = [sys.executable, os.path.join(ROOT, "scripts", "train_gan.py")]
    proc = script_server.run(
        script + ["--dataset=digits", f"--logdir={tmp_path / 'logs'}", *flags],
        timeout=600,
        env=dict(env, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
        cwd=ROOT,
    )
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--resume"], "resume needs the run to continue"),
        (["--on_nonfinite=stop", "--precision=mixed_float16", "--loss_scale=dynamic"], "on_nonfinite='stop'"),
        (["--on_nonfinite=maybe"], "maybe"),
        (["--keep_checkpoints=0"], "--keep_checkpoints=0"),
        (["--run_name=../outside"], "run_name='../outside'"),
    ],
)
def test_impossible_resume_and_nonfinite_flags_are_refused(flags, expected, tmp_path):
    proc = _run("train_gan.py", "--dataset=digits", "--batch_size=32", f"--logdir={tmp_path / 'logs'}", *flags)
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert not _event_files(tmp_path)
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(tmp_path / "outside")


# --- the run directory: one run at a time, nothing left by a failed start --------------


def test_a_run_directory_held_by_another_run_is_refused_naming_the_holder(tmp_path):
    import socket

    from tfmp.run import directories

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with directories.RunDirLock(str(run_dir)):  # this test process is the first run
        proc = _run(
            "train_gan.py",
            "--dataset=digits",
            "--batch_size=32",
            "--steps_per_epoch=1",
            "--epochs=1",
            "--precision=float32",
            f"--logdir={tmp_path}",
            "--run_name=run",
        )
        assert directories.holder(str(run_dir)).pid == os.getpid()  # the refused run left the lock alone
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"error: {run_dir} is in use by another run: pid {os.getpid()} on host {socket.gethostname()}" in proc.stderr
    assert "Traceback" not in proc.stderr and not re.search(r"^\(0, 0\)", proc.stdout, re.M)
    assert os.listdir(run_dir) == []


# Runs a script with its model building held up until SIGINT arrives: Ctrl-C during start-up, on cue. It first
# gives SIGINT Python's default handler, as a terminal does: a shell without job control starts background
# commands with SIGINT ignored (`bash -c '... &'`), the pytest run inherits that, and so would the script.
_BLOCKED_START = """
import runpy, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {scripts!r})
from tfmp.run import shipped
def blocked_build(*args, **kwargs):
    print("building the model", flush=True)
    time.sleep(600)
shipped.GANTask.build = blocked_build
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_ctrl_c_during_start_up_exits_130_in_one_line_and_leaves_nothing_behind(tmp_path):
    # PYTHONFAULTHANDLER: if the run ever hangs past the timeout, SIGABRT makes it print every thread's stack,
    # so the failure says where it was.
    env = dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _BLOCKED_START.format(scripts=os.path.join(ROOT, "scripts")),
            os.path.join(ROOT, "scripts", "train_gan.py"),
            "--dataset=digits",
            "--batch_size=32",
            "--precision=float32",
            f"--logdir={tmp_path / 'logs'}",
            "--run_name=sweep/run",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = iter(proc.stdout.readline, "")
        assert "building the model\n" in lines, proc.stderr.read()[-3000:]  # reads up to it
        # Where the run stands now: its directories made, and held.
        assert os.path.exists(tmp_path / "logs" / "sweep" / "run" / "checkpoints")
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # the stacks, from the fault handler
            pytest.fail(f"no exit within 120 s of SIGINT; the run's stderr:\n{proc.communicate(timeout=60)[1][-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "interrupted" in line] == [
        "interrupted by SIGINT (Ctrl-C) during start-up, before the first training step: nothing was trained or "
        "written. Run the same command again to start."
    ]
    assert os.listdir(tmp_path) == []  # logs/, sweep/, run/, checkpoints/ and the lock: all gone


def test_a_corrupt_dataset_file_is_a_clean_error_naming_it(tmp_path):
    (tmp_path / "mnist.npz").write_bytes(b"PK\x03\x04 not really a zip")
    proc = _run("train_gan.py", f"--data_dir={tmp_path}", f"--logdir={tmp_path / 'logs'}", "--precision=float32")
    assert proc.returncode == 1
    assert f"error: Could not read {tmp_path / 'mnist.npz'}: it is corrupt or truncated" in proc.stderr
    assert "Traceback" not in proc.stderr and not os.path.exists(tmp_path / "logs")


# --- errors named by flag (scripts/common.py) -----------------------------------------


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("epochs", 0, "must be an integer >= 1."),
        ("run_name", "../x", "must be a relative path that stays inside logdir."),
        ("resume", True, "needs the run to continue."),
    ],
)
def test_a_config_error_about_a_field_names_its_flag_and_value(field, value, problem):
    from scripts import common
    from tfmp.run import config

    error = config.ConfigError(problem, field, value)
    assert common.in_flag_terms(error) == f"--{field} {problem} Received: --{field}={value!r}"
    # Any other error reads as the library wrote it, setting names and all.
    plain = config.ConfigError("Pass resume=True to continue it, or choose another run_name.")
    assert common.in_flag_terms(plain) == str(plain)
    assert not hasattr(common, "to_flags") and not hasattr(common, "FlagTerms")


def test_run_prints_the_runs_lines_and_keeps_the_console_choice(capsys):
    from scripts import common
    from tfmp.run import training

    received = []

    def train(config, print_fn):
        received.append((config.console, print_fn))
        print_fn("warning: mixed-precision pitfalls found (details: tfmp.run.training.diagnose_run):\n  (batch): ...")
        print_fn("note: loss_scale=dynamic is ignored under float32")
        return "done"

    assert common.run(train, training.GANConfig()) == "done"
    # Captured output is no terminal: the step lines, as the library picks for print.
    assert received == [("lines", common.print_line)]
    assert capsys.readouterr().out.splitlines() == [
        "warning: mixed-precision pitfalls found (details: tfmp.run.training.diagnose_run):",
        "  (batch): ...",
        "note: loss_scale=dynamic is ignored under float32",
    ]
    common.run(train, training.GANConfig(console="progress"))
    assert received[-1][0] == "progress"


@pytest.mark.parametrize(
    "flag, expected",
    [
        (
            "--resume",
            "--resume needs the run to continue: give its run_name (or its checkpoint_dir). Received: --resume=True",
        ),
        # Values absl's flag types accept (bounds and enums are absl's to refuse) but the config does not.
        ("--run_name=../x", "--run_name must be a relative path that stays inside logdir"),
        ("--loss_scale=huge", "--loss_scale is not valid: Unknown loss scale."),
    ],
)
def test_a_bad_setting_names_its_flag_and_value_from_the_script(flag, expected, tmp_path):
    proc = _run("train_gan.py", "--dataset=digits", f"--logdir={tmp_path}", flag)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"error: {expected}" in proc.stderr, proc.stderr[-2000:]


# --- --help, a quiet start-up and the float16-on-CPU note (scripts/common.py) ----------

SCRIPTS = ("train_gan.py", "train_classifier.py", "compare_loss_scaling.py", "diagnose.py", "parity.py", "benchmark.py")
# Flags TensorFlow and absl define, which --help must leave to --helpfull.
FOREIGN_FLAGS = (
    "--op_conversion_fallback_to_while_loop",
    "--hbm_oom_exit",
    "--tt_check_filter",
    "--logtostderr",
    "--flagfile",
    "--verbosity",
)


def _help_flags(text, sections=None):
    """The flags listed in absl-style help text, only under the given section headings if any."""
    found, keep = set(), sections is None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            keep = sections is None or line[:-1] in sections
        elif keep and (match := re.match(r"^  --(?:\[no\])?(\w+)", line)):
            found.add(match.group(1))
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_lists_every_flag_of_the_script_and_none_of_tensorflows(script):
    proc = _run(script, "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    full = _run(script, "--helpfull").stdout
    # --helpfull groups flags by the module defining them: the script's own (by path) and scripts/common.py's.
    own = {line[:-1] for line in full.splitlines() if line.endswith(f"{script}:") or line.endswith("common:")}
    accepted = _help_flags(full, own)
    assert accepted and _help_flags(proc.stdout) == accepted, proc.stdout
    assert not [flag for flag in FOREIGN_FLAGS if flag in proc.stdout], proc.stdout
    assert proc.stdout.rstrip().endswith("Try --helpfull to get a list of all flags, absl's and TensorFlow's included.")


def test_train_gan_help_groups_the_flags_with_their_defaults():
    proc = _run("train_gan.py", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for flag in ("--precision", "--loss_scale", "--xla", "--batch_size", "--resume", "--latent_dim"):
        assert re.search(rf"^  --(?:\[no\])?{flag[2:]}:( |$)", proc.stdout, re.M), flag  # absl wraps long choices
    assert not [flag for flag in FOREIGN_FLAGS if flag in proc.stdout], proc.stdout
    sections = [line[:-1] for line in proc.stdout.splitlines() if re.match(r"^\S.*:$", line)]
    assert sections == ["flags", "train_gan.py", "precision", "training", "data", "logs and console", "checkpoints"]
    assert "  --batch_size: Examples per step" in proc.stdout and "(default: '4096')" in proc.stdout
    assert proc.stdout.startswith("Trains the original tutorial's GAN")


def test_each_flags_help_default_and_section_are_its_config_fields():
    import dataclasses

    from tfmp.run import training

    proc = _run("train_classifier.py", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    entries, sections, section, name = {}, {}, None, None  # each flag's text (help, default), and its section
    for line in proc.stdout.splitlines():
        if re.match(r"^\S.*:$", line):
            section, name = line[:-1], None
        elif match := re.match(r"^  --(?:\[no\])?(\w+):(?: (.*)|$)", line):  # absl may wrap right after the name
            name = match.group(1)
            entries[name], sections[name] = match.group(2) or "", section
        elif name and line.startswith("    "):
            entries[name] += " " + line.strip()
    defaults = training.ClassifierConfig()
    for field in dataclasses.fields(training.ClassifierConfig):
        if not field.metadata["flag"]:
            assert field.name not in entries, field.name
            continue
        assert sections[field.name] == (field.metadata["group"] or "train_classifier.py"), field.name
        # Compared without whitespace: absl wraps the help, also at hyphens.
        assert "".join(field.metadata["help"].split()) in "".join(entries[field.name].split())
        default = getattr(defaults, field.name)
        if default is not None:
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            assert f"(default: '{shown}')" in entries[field.name], (field.name, entries[field.name])


def test_the_console_command_help_has_the_scripts_docstring_and_flags():
    proc = _run("tfmp-train-gan", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("Trains the original tutorial's GAN")
    assert "\ntfmp-train-gan:\n  --discriminator_learning_rate:" in proc.stdout
    assert {"precision", "loss_scale", "resume", "latent_dim"} <= _help_flags(proc.stdout)


def test_a_usage_error_prints_the_message_and_points_to_help_not_the_flag_list(tmp_path):
    proc = _run("train_gan.py", "--dataset=digits", "--run_name=../outside", f"--logdir={tmp_path}")
    assert proc.returncode == 1
    assert re.search(r"^error: .*--run_name='\.\./outside'", proc.stderr, re.M), proc.stderr[-3000:]
    assert proc.stderr.rstrip().endswith("Pass --help to see the flags.")
    assert "--batch_size" not in proc.stderr


def test_a_fresh_start_prints_no_tensorflow_log_line_before_the_runs_first_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # as on a machine without a GPU: TensorFlow then logs cuInit's failure
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "train_gan.py"),
            "--dataset=digits",
            "--epochs=1",
            "--steps_per_epoch=2",
            "--batch_size=32",
            "--precision=float32",
            f"--logdir={tmp_path}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("training gan: precision=float32"))
    before = lines[:first]
    assert not [line for line in before if re.match(r"^[EIW]0000 ", line) or "absl::InitializeLog" in line], before
    assert not [line for line in lines if line.startswith("note: float16")]


@pytest.mark.parametrize(
    "level, kept",
    [(0, {"I", "W", "E", "notice", "other"}), (1, {"W", "E", "other"}), (2, {"E", "other"}), (3, {"other"})],
)
def test_the_quiet_import_keeps_the_lines_the_log_level_allows(level, kept):
    from scripts import quiet_start

    lines = {
        "notice": "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
        "I": "I0000 00:00:1795536065.870533   27039 port.cc:153] oneDNN custom operations are on.\n",
        "W": "W0000 00:00:1795536065.870533   27039 cuda_dnn.cc:8] Unable to register cuDNN factory\n",
        "E": "E0000 00:00:1795536066.024370   27039 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n",
        "other": "/usr/lib/python3/warnings.py:109: UserWarning: a Python warning\n",
    }
    assert {name for name, line in lines.items() if quiet_start._kept(line, level)} == kept


@pytest.mark.parametrize(
    "precisions, gpus, noted",
    [
        (("fp16",), [], ("mixed_float16",)),
        (("float32", "mixed_float16"), [], ("mixed_float16",)),
        (("mixed_float16",), ["GPU:0"], ()),
        (("bf16", "float32"), [], ("mixed_bfloat16",)),
        (("bf16", "fp16", "mixed_float16"), [], ("mixed_bfloat16", "mixed_float16")),
        (("float32",), [], ()),
        (("fp8",), [], ()),
    ],
)
def test_16_bit_types_on_a_cpu_are_noted_from_the_measurement_after_the_runs_first_line(
    precisions, gpus, noted, monkeypatch
):
    import tfmp
    from scripts import common

    # An AVX512-FP16 CPU: float16 native with pathological filter gradients, bfloat16 native.
    ms = {kernel: {"float32": 1.0, "bfloat16": 1.7, "float16": 1.0} for kernel in tfmp.cpu_kernels.KERNELS}
    ms["conv2d d/filter"]["float16"] = 810.0
    times = tfmp.cpu_kernels.KernelTimes("a CPU", ms, bfloat16_native=True, float16_native=True)
    monkeypatch.setattr(common.tf.config, "list_physical_devices", lambda kind=None: gpus)
    lines = []
    record = lines.append
    print_fn = common.with_cpu_note(record, precisions, times=lambda: times)
    print_fn("training gan_trainer: ...")
    print_fn("(0, 0), ...")
    notes = [tfmp.cpu_kernels.describe(times, precision) for precision in noted]
    assert lines == ["training gan_trainer: ...", *notes, "(0, 0), ..."]
    assert (print_fn is record) != bool(noted)
    if "mixed_float16" in noted:
        assert lines[1 + noted.index("mixed_float16")].startswith(
            "note: float16 is native on this CPU; its matmul runs at 1.00x float32's speed; its slowest kernel, "
            "conv2d d/filter, takes 810.0x float32's time. tfmp computes the conv2d gradients from the float16 "
            "values in float32"
        )


@pytest.mark.parametrize(
    "error, code",
    [
        ("preempted", 75),  # a SIGTERM to any worker of a multi-worker run
        ("lost", 69),  # a worker stopped answering
    ],
)
def test_run_exits_with_the_documented_code_of_a_multi_worker_stop(capsys, error, code):
    from scripts import common
    from tfmp.run import preemption, training

    def train(config, print_fn):
        if error == "preempted":
            raise preemption.Preempted(signal.SIGTERM, 3, "/r/ckpt-3", {"worker 1 (h:1)": signal.SIGTERM})
        raise preemption.WorkerLost("lost worker 1 (h:1): ... start every worker again with resume=True", [], 3, None)

    with pytest.raises(SystemExit) as exited:
        common.run(train, training.GANConfig())
    assert exited.value.code == code
    assert "start every worker again with" in capsys.readouterr().err  # (in flag terms once flags are parsed)
