"""Tests for tfmp/run/output.py: where the run's lines go."""

import logging
import threading

import pytest

from tfmp.run import output

LOG = logging.getLogger("tfmp.run.runner")  # a module's logger, as the run framework's modules get theirs


def _state():
    logger = logging.getLogger(output.LOGGER_NAME)
    return logger.level, logger.propagate, list(logger.handlers)


def test_lines_reach_the_sink_in_order_as_they_were_logged():
    lines = []
    with output.lines_to(lines.append):
        LOG.info("training gan: precision=float32")
        LOG.warning("warning: checkpoint ckpt-3 is unreadable")
        logging.getLogger("tfmp.run.callbacks.console").info("(0, 0), G Loss: 0.699")
        LOG.info("100% done (%d)")  # no arguments: the text is not %-formatted
        LOG.debug("below INFO: not a line")
    assert lines == [
        "training gan: precision=float32",
        "warning: checkpoint ckpt-3 is unreadable",
        "(0, 0), G Loss: 0.699",
        "100% done (%d)",
    ]


def test_nested_sinks_print_each_line_once_to_the_innermost():
    outer, inner = [], []
    with output.lines_to(outer.append):
        LOG.info("a")
        with output.lines_to(inner.append):
            LOG.info("b")
        LOG.info("c")
    assert (outer, inner) == (["a", "c"], ["b"])


def test_the_logger_is_restored_after_the_block_and_after_an_exception():
    logger = logging.getLogger(output.LOGGER_NAME)
    mine, level = logging.NullHandler(), logger.level
    logger.addHandler(mine)
    logger.setLevel(logging.ERROR)
    try:
        before = _state()
        with output.lines_to(print):
            assert _state()[:2] == (logging.INFO, False)
        assert _state() == before
        with pytest.raises(RuntimeError, match="stop"), output.lines_to(print):
            raise RuntimeError("stop")
        assert _state() == before
    finally:
        logger.removeHandler(mine)
        logger.setLevel(level)


def test_an_exception_of_the_sink_reaches_the_code_that_logged():
    def stop(line):
        raise KeyboardInterrupt(line)

    with pytest.raises(KeyboardInterrupt, match="resumed from"), output.lines_to(stop):
        LOG.info("resumed from ckpt-4 at step 4")


def test_the_sink_is_called_in_the_thread_that_logs():
    threads = []
    with output.lines_to(lambda line: threads.append(threading.get_ident())):
        worker = threading.Thread(target=LOG.info, args=("from a worker thread",))
        worker.start()
        worker.join()
        LOG.info("from this thread")
    assert threads == [worker.ident, threading.get_ident()]


def test_without_a_sink_records_take_loggings_normal_path(caplog):
    with caplog.at_level(logging.INFO, logger=output.LOGGER_NAME):
        LOG.info("checkpoint: ckpt-4 (step 4)")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("tfmp.run.runner", logging.INFO, "checkpoint: ckpt-4 (step 4)")
    ]


def test_inside_a_sink_nothing_reaches_the_handlers_above(caplog):
    lines = []
    with caplog.at_level(logging.INFO), output.lines_to(lines.append):
        LOG.info("once")
    assert lines == ["once"] and caplog.records == []


def test_none_swallows_the_lines(caplog):
    with caplog.at_level(logging.INFO), output.lines_to(None):
        LOG.info("nowhere")
    assert caplog.records == []


def test_a_sink_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="Received: print_fn='lines'"), output.lines_to("lines"):
        pass


@pytest.mark.parametrize(
    "precisions, gpus, noted",
    [
        (["bf16", "fp32", "mixed_bfloat16"], [], ["mixed_bfloat16"]),  # each type once, by its canonical name
        (["fp16", "bf16"], [], ["mixed_float16", "mixed_bfloat16"]),
        (["float32", "not-a-precision"], [], []),  # nothing to note; the run refuses the unknown one itself
        (["bf16"], ["a GPU"], []),
    ],
)
def test_the_cpu_note_follows_the_first_line_once_per_16_bit_type(precisions, gpus, noted, monkeypatch):
    import tensorflow as tf

    import tfmp

    times = tfmp.cpu_kernels.KernelTimes("a CPU", {}, bfloat16_native=True, float16_native=False)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus)
    lines = []
    print_fn = output.with_cpu_note(lines.append, precisions, times=lambda: times)
    assert (print_fn == lines.append) == (not noted)  # no note: the print_fn itself
    print_fn("first")
    print_fn("second")
    assert lines == ["first", *(tfmp.cpu_kernels.describe(times, name) for name in noted), "second"]
