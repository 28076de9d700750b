"""A training run's curves are readable by a real TensorBoard.

One tiny mixed_float16 GAN run is trained into a temporary logdir. The real
`tensorboard` server is started on 127.0.0.1 over that logdir, once with the
Rust data server (`--load_fast=true`, what TensorBoard uses by default when it
is installed) and once with the legacy Python loader (`--load_fast=false`).
Everything is read back through TensorBoard's HTTP data API (the routes of
`tensorboard/plugins/core/core_plugin.py`, `backend/application.py` and the
scalars, images and hparams plugins): the runs, the scalar tags (Keras's
`batch_`/`epoch_` scheme, each with a description), one point per logged
global step and one per epoch of the generator and discriminator losses, the
loss scales and skipped steps, the throughput, the image grid and the HParams
session.

No network is used besides 127.0.0.1 (urllib's proxies are bypassed). The
tests that start TensorBoard are slow (two servers and a run on each test
process); in the default set, `test_event_files_hold_the_gan_losses_at_each_global_step`
reads the same run's event files.
"""

import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

EPOCHS = 2
STEPS = 2
BATCH_SIZE = 32
RUN = "tb_run"
GENERATOR = f"{RUN}/generator"
DISCRIMINATOR = f"{RUN}/discriminator"
STARTUP_TIMEOUT = 60.0
# TensorBoard loads event files in the background; data may appear a little
# after the server first answers.
SETTLE_TIMEOUT = 10.0

# A test that starts TensorBoard is slow: two servers, and a run on each test process.
starts_tensorboard = pytest.mark.slow

# No proxy: a configured http_proxy must not see (or break) 127.0.0.1 requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Trains the tiny GAN once; returns `(logdir, RunResult)`."""
    import keras

    from tfmp.run import training

    # conftest's leak check wraps each test, not this module-scoped set-up.
    policy = keras.config.dtype_policy().name
    logdir = tmp_path_factory.mktemp("tensorboard_logs")
    result = training.train_gan(
        training.GANConfig(
            dataset="digits",
            batch_size=BATCH_SIZE,
            epochs=EPOCHS,
            steps_per_epoch=STEPS,
            precision="mixed_float16",
            loss_scale="dynamic",
            xla="false",
            logdir=str(logdir),
            run_name=RUN,
            warmup_steps=0,
            num_samples=4,
            generator_widths=(8, 8, 8),
            discriminator_widths=(8, 8, 8),
        ),
        print_fn=lambda s: None,
    )
    assert keras.config.dtype_policy().name == policy, "train_gan leaked its dtype policy"
    return logdir, result


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data_server_available() -> bool:
    try:
        import tensorboard_data_server
    except ImportError:
        return False
    return tensorboard_data_server.server_binary() is not None


class TensorBoard:
    """A running `tensorboard` subprocess and a small client of its data API."""

    def __init__(self, process: subprocess.Popen, port: int, output_dir):
        self.process = process
        self.base = f"http://127.0.0.1:{port}"
        self.output_dir = output_dir

    def output(self) -> str:
        """The server's captured stdout and stderr (tail), for failure messages."""
        text = ""
        for name in ("stdout", "stderr"):
            path = os.path.join(self.output_dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += f"--- tensorboard {name} ---\n{f.read()[-4000:]}\n"
        return text

    def request(self, path: str, params=None, body=None):
        """GETs (or POSTs a JSON `body` to) `path`; returns the parsed JSON or raw bytes."""
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with _OPENER.open(request, timeout=10) as response:
            payload = response.read()
            if response.headers.get_content_type() == "application/json":
                return json.loads(payload)
            return payload

    def poll(self, path, ready, params=None, body=None, timeout=SETTLE_TIMEOUT):
        """Requests `path` until `ready(result)` or `timeout`; returns the last result.

        The caller asserts on the result, so a timeout fails with the data seen.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self.request(path, params, body)
            if ready(result) or time.monotonic() > deadline:
                return result
            time.sleep(0.25)


@pytest.fixture(scope="module", params=["true", "false"], ids=["load_fast", "python_loader"])
def tensorboard(request, run, tmp_path_factory):
    """Starts `tensorboard` over the run's logdir; stops it at teardown."""
    load_fast = request.param
    if load_fast == "true" and not _data_server_available():
        pytest.skip("the TensorBoard data server (tensorboard_data_server) is not available")
    logdir, _ = run
    output_dir = tmp_path_factory.mktemp(f"tensorboard_{'fast' if load_fast == 'true' else 'python'}")
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        f"--load_fast={load_fast}",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    with open(output_dir / "stdout", "wb") as stdout, open(output_dir / "stderr", "wb") as stderr:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=env)
    server = TensorBoard(process, port, str(output_dir))
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        runs = None
        while True:
            if process.poll() is not None:
                pytest.fail(f"tensorboard exited with code {process.returncode}\n{server.output()}")
            try:
                runs = server.request("/data/runs")
            except (TimeoutError, urllib.error.URLError, ConnectionError):
                runs = None
            if runs is not None and {RUN, GENERATOR, DISCRIMINATOR} <= set(runs):
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"tensorboard did not list the runs within {STARTUP_TIMEOUT:.0f} s "
                    f"(last /data/runs: {runs!r})\n{server.output()}"
                )
            time.sleep(0.25)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _steps_and_values(points):
    """`[[wall_time, step, value], ...]` -> `([step, ...], [value, ...])`."""
    return [p[1] for p in points], [p[2] for p in points]


@starts_tensorboard
def test_runs_are_the_run_and_its_two_networks(tensorboard):
    runs = tensorboard.request("/data/runs")
    assert sorted(runs) == sorted([RUN, GENERATOR, DISCRIMINATOR]), tensorboard.output()


@starts_tensorboard
def test_plugins_listing_has_scalars_images_and_hparams_active(tensorboard):
    listing = tensorboard.poll(
        "/data/plugins_listing",
        lambda d: all(d.get(p, {}).get("enabled") for p in ("scalars", "images", "hparams")),
    )
    for plugin in ("scalars", "images", "hparams"):
        assert listing[plugin]["enabled"], f"{plugin} is not active: {listing[plugin]}"


@starts_tensorboard
def test_scalar_tags_follow_the_gan_layout(tensorboard):
    per_network = {f"{kind}_{name}" for kind in ("batch", "epoch") for name in ("loss", "loss_scale", "skipped_steps")}
    expected = {
        GENERATOR: per_network,
        DISCRIMINATOR: per_network,
        RUN: {"batch_images_per_sec", "epoch_images_per_sec"},
    }
    tags = tensorboard.poll(
        "/data/plugin/scalars/tags", lambda t: all(v <= set(t.get(r, {})) for r, v in expected.items())
    )
    for run_name, run_tags in expected.items():
        assert run_tags <= set(tags.get(run_name, {})), f"{run_name}: {tags}"
    # The log keys' g_/d_ prefixes become the sub-runs, not tag names.
    all_tags = {tag for run_tags in tags.values() for tag in run_tags}
    assert not {t for t in all_tags if t.startswith(("g_", "d_"))}, tags
    assert not {t for t in tags[RUN] if "loss" in t}, tags
    # Every tag says what it is (rendered as HTML by the scalars plugin).
    for run_name, run_tags in expected.items():
        for tag in run_tags:
            assert tags[run_name][tag]["description"], (run_name, tag, tags[run_name][tag])
    assert "Cumulative" in tags[GENERATOR]["batch_skipped_steps"]["description"]
    assert "warm-up" in tags[RUN]["batch_images_per_sec"]["description"]


@starts_tensorboard
@pytest.mark.parametrize("sub_run, prefix", [(GENERATOR, "g_"), (DISCRIMINATOR, "d_")])
@pytest.mark.parametrize("tag", ["loss", "loss_scale", "skipped_steps"])
def test_one_point_per_epoch_equal_to_the_epoch_logs(tensorboard, run, sub_run, prefix, tag):
    _, result = run
    points = tensorboard.poll(
        "/data/plugin/scalars/scalars", lambda p: len(p) >= EPOCHS, params={"run": sub_run, "tag": "epoch_" + tag}
    )
    steps, values = _steps_and_values(points)
    assert steps == list(range(EPOCHS)), points
    assert all(math.isfinite(v) for v in values), points
    # Keras's History (set on the model by fit) holds every epoch's logs.
    history = result.trainer.history.history[prefix + tag]
    assert values == pytest.approx(history, rel=1e-6), (values, history)
    assert values[-1] == pytest.approx(result.logs[prefix + tag], rel=1e-6)
    if tag == "loss_scale":
        assert all(v >= 1 for v in values), points  # a dynamic scale under mixed_float16
    if tag == "skipped_steps":
        assert all(v == int(v) >= 0 for v in values), points


@starts_tensorboard
def test_throughput_is_on_the_root_run(tensorboard, run):
    _, result = run
    points = tensorboard.poll(
        "/data/plugin/scalars/scalars", lambda p: len(p) >= EPOCHS, params={"run": RUN, "tag": "epoch_images_per_sec"}
    )
    steps, values = _steps_and_values(points)
    assert steps == list(range(EPOCHS)), points
    assert all(math.isfinite(v) and v > 0 for v in values), points
    assert values[-1] == pytest.approx(result.logs["images_per_sec"], rel=1e-6)


# log_every=1 (the default): a point after each of the EPOCHS * STEPS global steps, at steps 1..4.
GLOBAL_STEPS = list(range(1, EPOCHS * STEPS + 1))


@starts_tensorboard
@pytest.mark.parametrize("sub_run, prefix", [(GENERATOR, "g_"), (DISCRIMINATOR, "d_")])
@pytest.mark.parametrize("tag", ["loss", "loss_scale", "skipped_steps"])
def test_one_point_per_logged_global_step(tensorboard, run, sub_run, prefix, tag):
    _, result = run
    points = tensorboard.poll(
        "/data/plugin/scalars/scalars",
        lambda p: len(p) >= len(GLOBAL_STEPS),
        params={"run": sub_run, "tag": "batch_" + tag},
    )
    steps, values = _steps_and_values(points)
    assert steps == GLOBAL_STEPS, points
    # An epoch's training logs are its last step's: the points at steps 2 and 4 are the epoch values.
    history = result.trainer.history.history[prefix + tag]
    assert values[STEPS - 1 :: STEPS] == pytest.approx(history, rel=1e-6), (values, history)


@starts_tensorboard
def test_per_step_throughput_is_on_the_root_run(tensorboard):
    points = tensorboard.poll(
        "/data/plugin/scalars/scalars",
        lambda p: len(p) >= len(GLOBAL_STEPS),
        params={"run": RUN, "tag": "batch_images_per_sec"},
    )
    steps, values = _steps_and_values(points)
    assert steps == GLOBAL_STEPS, points  # warmup_steps=0: every step is measured
    assert all(math.isfinite(v) and v > 0 for v in values), points


def _event_scalars(directory):
    """`{tag: [step, ...]}` of the scalars in a directory's event files."""
    import tensorflow as tf

    found = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                for value in event.summary.value:
                    if value.metadata.plugin_data.plugin_name == "scalars":
                        found.setdefault(value.tag, []).append(event.step)
    return found


def test_event_files_hold_the_gan_losses_at_each_global_step(run):
    logdir, _ = run
    for network in ("generator", "discriminator"):
        scalars = _event_scalars(os.path.join(logdir, RUN, network))
        assert scalars["batch_loss"] == GLOBAL_STEPS, scalars
        assert scalars["epoch_loss"] == list(range(EPOCHS)), scalars


@starts_tensorboard
def test_generator_samples_are_one_png_grid_per_epoch(tensorboard):
    tags = tensorboard.poll("/data/plugin/images/tags", lambda t: "samples" in t.get(GENERATOR, {}))
    assert "samples" in tags.get(GENERATOR, {}), tags
    assert set(tags) == {GENERATOR}, tags
    entries = tensorboard.poll(
        "/data/plugin/images/images", lambda e: len(e) >= EPOCHS, params={"run": GENERATOR, "tag": "samples"}
    )
    assert [e["step"] for e in entries] == list(range(EPOCHS)), entries
    # The query is opaque (a blob key); it is passed back as TensorBoard's frontend does.
    png = tensorboard.request("/data/plugin/images/individualImage?" + entries[-1]["query"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    # 4 samples of 28x28 tile a 2x2 grid with a 2-pixel gap between tiles: IHDR width and height at bytes 16..24.
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (58, 58)


# The request the HParams dashboard sends (api.proto's ListSessionGroupsRequest
# as JSON); sessions without an end summary have status STATUS_UNKNOWN.
SESSION_GROUPS_REQUEST = {
    "experimentName": "",
    "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
    "colParams": [],
    "startIndex": 0,
    "sliceSize": 100,
}


@starts_tensorboard
def test_hparams_session_reports_the_run_settings(tensorboard, run):
    _, result = run
    response = tensorboard.poll(
        "/data/plugin/hparams/session_groups",
        lambda r: r.get("sessionGroups"),
        body=SESSION_GROUPS_REQUEST,
    )
    groups = {g["name"]: g for g in response.get("sessionGroups", [])}
    assert set(groups) == {RUN}, response
    group = groups[RUN]
    assert [s["name"] for s in group["sessions"]] == [RUN]
    hparams = group["hparams"]
    assert hparams["precision"] == "mixed_float16"
    assert hparams["loss_scale"] == "dynamic"
    assert hparams["batch_size"] == BATCH_SIZE
    assert hparams["epochs"] == EPOCHS
    assert hparams["dataset"] == "digits"
    assert hparams["xla"] is False
    # The metrics are the sub-runs' last scalars.
    metrics = {(m["name"].get("group", ""), m["name"]["tag"]): m for m in group["metricValues"]}
    for group_name, prefix in (("generator", "g_"), ("discriminator", "d_")):
        loss = metrics[(group_name, "epoch_loss")]
        assert loss["trainingStep"] == EPOCHS - 1
        assert loss["value"] == pytest.approx(result.logs[prefix + "loss"], rel=1e-6)


@starts_tensorboard
def test_hparams_experiment_lists_the_precision(tensorboard):
    experiment = tensorboard.poll(
        "/data/plugin/hparams/experiment",
        lambda e: e.get("hparamInfos"),
        params={"request": json.dumps({"experimentName": ""})},
    )
    infos = {info["name"]: info for info in experiment.get("hparamInfos", [])}
    assert {"precision", "loss_scale", "xla", "batch_size"} <= set(infos), experiment
    assert infos["precision"]["domainDiscrete"] == ["mixed_float16"]
    metric_tags = {(m["name"].get("group", ""), m["name"]["tag"]) for m in experiment.get("metricInfos", [])}
    assert {("generator", "epoch_loss"), ("discriminator", "epoch_loss")} <= metric_tags, experiment


# ~30 s on 2 busy cores; its fast twin is tests/run/callbacks/test_tensorboard_callbacks.py's
# test_summaries_write_batch_scalars_at_the_global_step_without_warmup (a restored step of 4).
@pytest.mark.slow
def test_a_resumed_run_continues_its_per_step_curves_at_the_global_step(tmp_path):
    import dataclasses

    import keras

    from tfmp.run import training

    policy = keras.config.dtype_policy().name
    config = training.GANConfig(
        dataset="digits",
        batch_size=16,
        epochs=1,
        steps_per_epoch=2,
        precision="float32",
        xla="false",
        logdir=str(tmp_path),
        run_name="resumed",
        warmup_steps=0,
        num_samples=1,
        generator_widths=(4, 4, 4),
        discriminator_widths=(4, 4, 4),
    )
    training.train_gan(config, print_fn=lambda s: None)
    training.train_gan(dataclasses.replace(config, epochs=2, resume=True), print_fn=lambda s: None)
    assert keras.config.dtype_policy().name == policy
    scalars = _event_scalars(os.path.join(tmp_path, "resumed", "generator"))
    # The second run restored step 2 and goes on at 3, 4 (not 1, 2 again).
    assert sorted(scalars["batch_loss"]) == [1, 2, 3, 4], scalars
    assert sorted(scalars["epoch_loss"]) == [0, 1], scalars
