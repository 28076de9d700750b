"""Tests for tfmp/run/callbacks/console.py."""

import pytest

from tfmp.run import callbacks, output


def test_console_logger_prints_the_tutorials_line_and_a_summary():
    lines = []
    timer = callbacks.StepTimer(images_per_step=512, warmup_steps=1)
    console = callbacks.ConsoleLogger(
        timer,
        (("G Loss", "g_loss"), ("D Loss", "d_loss")),
        ("g_", "d_"),
        log_every=2,
        run_dir="logs/run1",
    )
    console.set_params({"epochs": 1, "steps": 3})
    logs = {
        "g_loss": 0.6991,
        "d_loss": 0.6123,
        "g_loss_scale": 32768.0,
        "d_loss_scale": 16384.0,
        "g_skipped_steps": 0,
        "d_skipped_steps": 1,
    }
    with output.lines_to(lines.append):
        console.on_epoch_begin(0)
        for step, seconds in enumerate([2.0, 0.25, 0.5]):
            timer.step_times.append(seconds)
            console.on_train_batch_end(step, logs)
    assert lines == [
        "(0, 0), G Loss: 0.699, D Loss: 0.612, loss_scale: 32768/16384, step_time: 2.000, throughput: 256.000 img/s",
        "(0, 2), G Loss: 0.699, D Loss: 0.612, loss_scale: 32768/16384, step_time: 0.500, throughput: 1024.000 img/s",
    ]
    with output.lines_to(lines.append):
        console.on_epoch_end(0, dict(logs, images_per_sec=600.0))
        console.on_train_end()
    summary = "\n".join(lines[3:])
    assert "3 steps; mean throughput 1365.3 img/s over 2 steps (first 1 steps excluded as warm-up)" in summary
    assert "skipped steps: G 0, D 1;" in summary
    assert "final G Loss 0.6991, D Loss 0.6123" in summary
    assert "  logs: logs/run1  (view: tensorboard --logdir logs)" in summary


def test_console_logger_logdir_is_the_deprecated_name_of_run_dir():
    timer = callbacks.StepTimer(images_per_step=8, warmup_steps=0)
    with pytest.warns(
        DeprecationWarning, match=r"`ConsoleLogger\(logdir\)` is deprecated; use `ConsoleLogger\(run_dir\)`"
    ):
        console = callbacks.ConsoleLogger(timer, (("Loss", "loss"),), logdir="logs/run1")
    assert console.run_dir == "logs/run1"


def _one_step_console(logs):
    """A one-optimizer console logger after one 0.5 s step with `logs`."""
    timer = callbacks.StepTimer(images_per_step=8, warmup_steps=0)
    console = callbacks.ConsoleLogger(timer, (("Loss", "loss"),))
    console.set_params({"epochs": 1, "steps": 1})
    console.on_epoch_begin(0)
    timer.step_times.append(0.5)
    console.on_train_batch_end(0, logs)
    return console


def test_console_logger_without_loss_scaling_says_none():
    lines = []
    with output.lines_to(lines.append):
        _one_step_console({"loss": 1.0})
    assert "loss_scale: none" in lines[0]


def test_console_summary_keeps_one_bare_count_for_one_optimizer():
    lines = []
    with output.lines_to(lines.append):
        console = _one_step_console({"loss": 1.0, "skipped_steps": 2})
        console.on_epoch_end(0, {"loss": 1.0, "skipped_steps": 2})
        console.on_train_end()
    assert "  skipped steps: 2; final Loss 1.0000" in lines


def test_the_epoch_line_gives_four_significant_digits_and_a_large_throughput_whole():
    lines = []
    with output.lines_to(lines.append):
        console = _one_step_console({"loss": 1.0})
        console.on_epoch_end(0, {"loss": 0.123456, "examples_per_sec": 12474.6, "learning_rate": 1e-05})
    assert lines[-1] == "epoch 1/1: loss 0.1235, examples_per_sec 12475, learning_rate 1e-05"


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize(
    "mode, stream, expected",
    [
        ("auto", _Stream(True), "progress"),
        ("auto", _Stream(False), "lines"),
        ("auto", object(), "lines"),  # no isatty: not a terminal
        ("auto", None, "lines"),
        ("lines", _Stream(True), "lines"),
        ("progress", _Stream(False), "progress"),
    ],
)
def test_console_mode_is_a_progress_bar_only_on_a_terminal(mode, stream, expected):
    assert callbacks.console_mode(mode, stream) == expected


def test_console_mode_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="'bars'"):
        callbacks.console_mode("bars", None)


def test_console_logger_progress_bar_replaces_the_step_lines(capsys):
    lines = []
    with output.lines_to(lines.append):
        timer = callbacks.StepTimer(images_per_step=512, warmup_steps=0)
        console = callbacks.ConsoleLogger(
            timer, (("G Loss", "g_loss"), ("D Loss", "d_loss")), ("g_", "d_"), progress=True
        )
        console.set_params({"epochs": 1, "steps": 2})
        console.on_epoch_begin(0)
        logs = {
            "g_loss": 0.5,
            "d_loss": 0.25,
            "g_loss_scale": 32768.0,
            "d_loss_scale": 16384.0,
            "g_skipped_steps": 0,
            "d_skipped_steps": 0,
        }
        for step in range(2):
            timer.step_times.append(0.5)
            console.on_train_batch_end(step, logs)
        console.on_epoch_end(0, logs)
        bar = capsys.readouterr().out
        assert (
            "2/2" in bar and "G Loss: 0.5000" in bar and "D loss_scale: 16384.0000" in bar and "img/s: 1024.0000" in bar
        )
        assert lines[0] == "Epoch 1/1"
        assert not [line for line in lines if line.startswith("(")], lines  # no seed step lines
        assert lines[1].startswith("epoch 1/1: ")


def test_console_logger_counts_in_the_timers_unit_unless_told():
    lines = []
    with output.lines_to(lines.append):
        timer = callbacks.StepTimer(images_per_step=8, warmup_steps=0, unit="ex")
        console = callbacks.ConsoleLogger(timer, (("Loss", "loss"),))
        console.set_params({"epochs": 1, "steps": 1})
        console.on_epoch_begin(0)
        timer.step_times.append(0.5)
        console.on_train_batch_end(0, {"loss": 1.0})
        assert lines[0].endswith("throughput: 16.000 ex/s")
        assert callbacks.ConsoleLogger(timer, (), unit="img").unit == "img/s"


def test_every_loss_a_trainer_logs_is_shown_beside_the_tasks_fields_in_the_line_and_the_summary():
    """A GAN of one's own under the default fields (`Loss` only): its `d_loss` and `g_loss` are shown, as the
    shipped GAN's; validation losses and other keys are not."""
    lines = []
    logs = {"d_loss": 0.6123, "d_skipped_steps": 0, "g_loss": 0.6991, "g_skipped_steps": 1}
    with output.lines_to(lines.append):
        console = _one_step_console(logs)
        console.on_epoch_end(0, dict(logs, val_d_loss=0.5))
        console.on_train_end()
    assert lines[0].startswith("(0, 0), D Loss: 0.612, G Loss: 0.699, loss_scale: none, step_time: 0.500")
    assert lines[-1].endswith("; final D Loss 0.6123, G Loss 0.6991")


def test_a_loss_the_fields_name_is_shown_once_under_their_label():
    lines = []
    with output.lines_to(lines.append):
        timer = callbacks.StepTimer(images_per_step=8, warmup_steps=0)
        console = callbacks.ConsoleLogger(timer, (("Loss", "loss"), ("Accuracy", "accuracy")))
        console.set_params({"epochs": 1, "steps": 1})
        console.on_epoch_begin(0)
        timer.step_times.append(0.5)
        console.on_train_batch_end(0, {"accuracy": 0.5, "loss": 1.0, "output_b_loss": 0.25})
    assert lines[0].startswith("(0, 0), Loss: 1.000, Accuracy: 0.500, Output B Loss: 0.250, loss_scale: none")
