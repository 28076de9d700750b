"""Tests for tfmp/cpu_kernels.py: 16-bit types on a CPU, measured, and float16 gradients computed in float32.

The routing is decided from an injected measurement (a cache file, or a
`KernelTimes` passed in), so each CPU class's branch is tested on any CPU.
"""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import cpu_kernels, trainers
from tfmp.models.gan import build_discriminator, build_generator

AVX2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma f16c\n"
AVX512_BF16 = "model name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16 f16c\n"
AVX512_FP16 = "model name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_fp16 f16c\n"
ARM_FP16 = "Features\t: fp asimd fphp asimdhp bf16\n"
CONV = ("Conv2D", "Conv2DBackpropInput")
DEPTHWISE = ("DepthwiseConv2dNative",)


def _times(float16_ratios, machine="a test CPU", bfloat16_native=False, float16_native=False):
    """A measurement with float32 at 1 ms per call and float16 at the given ratios (1.0 where none is given)."""
    ms = {kernel: {"float32": 1.0, "float16": float16_ratios.get(kernel, 1.0)} for kernel in cpu_kernels.KERNELS}
    return cpu_kernels.KernelTimes(machine, ms, bfloat16_native, float16_native)


# The three CPU classes measured (ratios to float32, docs/PERFORMANCE.md), and a CPU with fast float16 kernels.
AVX2_TIMES = _times({"conv2d d/input": 3.8, "conv2d d/filter": 5.9, "depthwise d/input": 1.2})
AVX512_FP16_TIMES = _times(
    {"conv2d": 1.6, "conv2d d/filter": 810.1, "depthwise d/input": 14.5, "depthwise d/filter": 133.1},
    bfloat16_native=True,
    float16_native=True,
)
# AVX512-BF16 (avx512bf16-kernels): the conv2d gradients routed, the depthwise ones not.
AVX512_BF16_TIMES = _times(
    {"conv2d d/input": 3.7, "conv2d d/filter": 2.0, "depthwise d/filter": 1.1}, bfloat16_native=True
)
FAST_FLOAT16_TIMES = _times({kernel: 0.5 for kernel in cpu_kernels.KERNELS}, float16_native=True)


@pytest.mark.parametrize(
    "text, bfloat16, float16",
    [(AVX2, False, False), (AVX512_BF16, True, False), (AVX512_FP16, True, True), (ARM_FP16, True, True), ("", 0, 0)],
)
def test_native_16_bit_types_are_read_from_the_cpu_flags(text, bfloat16, float16, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_kernels.cpu_has_bfloat16(str(path)) == bool(bfloat16)
    # F16C (every AVX2 CPU) only converts: it is not float16 arithmetic.
    assert cpu_kernels.cpu_has_float16(str(path)) == bool(float16)


@pytest.mark.parametrize(
    "text, kind",
    [(AVX2, "AVX2 only"), (AVX512_BF16, "AVX512-BF16"), (AVX512_FP16, "AVX512-FP16"), (ARM_FP16, "Arm BF16"), ("", "")],
)
def test_the_cpu_class_the_figures_name_is_read_from_the_flags(text, kind, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_kernels.cpu_class(str(path)) == kind


@pytest.mark.parametrize(
    "times, routed",
    [
        (AVX2_TIMES, {*CONV}),  # a gradient kernel at 1.2x float32's time stays float16's
        (AVX512_FP16_TIMES, {*CONV, *DEPTHWISE}),
        (FAST_FLOAT16_TIMES, set()),
    ],
)
def test_the_ops_routed_follow_the_measured_gradient_kernels(times, routed):
    assert cpu_kernels.float16_gradient_ops(has_gpu=False, times=times) == routed
    assert cpu_kernels.float16_gradient_ops(has_gpu=True, times=times) == frozenset()  # a GPU is untouched


def test_the_measurement_is_made_once_per_cpu_then_read_from_the_cache(tmp_path):
    calls = []

    def measure():
        calls.append(1)
        return AVX512_FP16_TIMES

    path = str(tmp_path / "cpu_kernels.json")
    first = cpu_kernels.kernel_times(path=path, measure=measure)
    again = cpu_kernels.kernel_times(path=path, measure=measure)
    assert first == again == AVX512_FP16_TIMES and calls == [1]
    # Another process (another path, a copy of the file) reads it and measures nothing.
    copy = tmp_path / "copy.json"
    copy.write_text((tmp_path / "cpu_kernels.json").read_text())
    assert cpu_kernels.kernel_times(path=str(copy), measure=_never) == AVX512_FP16_TIMES


def test_a_corrupt_cache_is_measured_again(tmp_path):
    path = tmp_path / "cpu_kernels.json"
    entries = {cpu_kernels.machine_id(): {"ms": "nonsense"}}
    path.write_text(json.dumps({"version": cpu_kernels._CACHE_VERSION, "entries": entries}))
    assert cpu_kernels.kernel_times(path=str(path), measure=lambda: AVX2_TIMES) == AVX2_TIMES


def _never():
    raise AssertionError("measured although the cache holds this CPU")


def test_two_cpus_of_one_model_name_get_two_entries_and_neither_reads_the_other_s(tmp_path):
    # Two virtual machines named "AMD EPYC" sharing a cache directory: one AVX2 only, one with AVX512-BF16.
    avx2, avx512_bf16 = tmp_path / "avx2", tmp_path / "avx512_bf16"
    avx2.write_text(AVX2)
    avx512_bf16.write_text(AVX2.replace("fma f16c", "fma f16c avx512f avx512_bf16"))
    path = str(tmp_path / "cpu_kernels.json")
    measured = {}

    def measure(cpuinfo, times):
        def planted():
            measured[str(cpuinfo)] = measured.get(str(cpuinfo), 0) + 1
            return dataclasses.replace(times, machine=cpu_kernels.machine_id(str(cpuinfo)))

        return planted

    # This AVX2 machine's measurement routes the depthwise gradients too (d/filter at 1.4x float32's time).
    avx2_times = _times({"conv2d d/input": 3.2, "conv2d d/filter": 2.6, "depthwise d/filter": 1.4})
    first = cpu_kernels.kernel_times(cpuinfo=str(avx2), path=path, measure=measure(avx2, avx2_times))
    second = cpu_kernels.kernel_times(
        cpuinfo=str(avx512_bf16), path=path, measure=measure(avx512_bf16, AVX512_BF16_TIMES)
    )
    assert measured == {str(avx2): 1, str(avx512_bf16): 1}  # the second CPU measured, it read nothing
    assert (first.routed_ops(), second.routed_ops()) == ({*CONV, *DEPTHWISE}, {*CONV})
    entries = json.loads(open(path).read())["entries"]
    assert sorted(key.split(" | ")[:2] for key in entries) == [
        ["AMD EPYC", "AVX2 only (avx2 f16c fma)"],
        ["AMD EPYC", "AVX512-BF16 (avx2 avx512_bf16 avx512f f16c fma)"],
    ]
    # A later process (a copy of the file) reads each CPU's own entry and measures nothing.
    copy = tmp_path / "copy.json"
    copy.write_text(open(path).read())
    assert cpu_kernels.kernel_times(cpuinfo=str(avx2), path=str(copy), measure=_never) == first
    assert cpu_kernels.kernel_times(cpuinfo=str(avx512_bf16), path=str(copy), measure=_never) == second


def test_a_cache_file_keyed_by_the_model_name_alone_is_measured_again(tmp_path):
    # tfmp 0.1's file: version 1, keyed by the model name, the core count and the versions only.
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX512_BF16)
    old_key = f"AMD EPYC 9R14 | {os.cpu_count()} cpus | tensorflow {tf.__version__} | keras {keras.__version__}"
    path = tmp_path / "cpu_kernels.json"
    path.write_text(json.dumps({"version": 1, "entries": {old_key: {**AVX2_TIMES.to_json(), "machine": old_key}}}))
    times = cpu_kernels.kernel_times(cpuinfo=str(cpuinfo), path=str(path), measure=lambda: AVX512_BF16_TIMES)
    assert times == AVX512_BF16_TIMES
    cache = json.loads(path.read_text())
    assert cache["version"] == cpu_kernels._CACHE_VERSION and list(cache["entries"]) == [
        cpu_kernels.machine_id(str(cpuinfo))
    ]


def test_a_real_measurement_times_every_kernel_and_round_trips_through_json():
    times = cpu_kernels.measure_kernels(dtypes=("float16",), budget_s=0.0, most=1)
    assert set(times.ms) == set(cpu_kernels.KERNELS)
    casts = {"cast to float32", "cast from float32"}  # a 16-bit type's only
    assert all(set(times.ms[kernel]) == {"float32", "float16"} for kernel in set(times.ms) - casts)
    assert all(set(times.ms[kernel]) == {"float16"} for kernel in casts)
    assert min(v for row in times.ms.values() for v in row.values()) > 0
    assert cpu_kernels.KernelTimes.from_json(json.loads(json.dumps(times.to_json()))) == times
    assert "| conv2d d/filter |" in times.table()


# --- the note ------------------------------------------------------------------------------------


def test_the_note_says_what_this_cpu_does_with_each_type():
    fp16 = cpu_kernels.describe(AVX512_FP16_TIMES, "mixed_float16")
    assert fp16.startswith("note: float16 is native on this CPU; its matmul runs at 1.00x float32's speed; ")
    assert "its slowest kernel, conv2d d/filter, takes 810.1x float32's time" in fp16
    assert "tfmp computes the conv2d and depthwise gradients from the float16 values in float32" in fp16
    avx2 = cpu_kernels.describe(AVX2_TIMES, "mixed_float16")
    assert avx2.startswith("note: float16 is emulated (no float16 arithmetic) on this CPU")
    assert "the conv2d gradients" in avx2 and "depthwise" not in avx2
    fast = cpu_kernels.describe(FAST_FLOAT16_TIMES, "fp16")
    assert "slowest" not in fast and "computes the" not in fast
    bf16 = cpu_kernels.describe(AVX512_FP16_TIMES, "mixed_bfloat16")
    assert bf16.startswith("note: bfloat16 is native on this CPU") and "float32 and rounds" not in bf16


# --- the routing: numerics -----------------------------------------------------------------------


def _ulps(a, b):
    """|a - b| in units of float16's spacing at |b| (at least the smallest normal's)."""
    b16 = np.abs(b.astype(np.float16)).astype(np.float64)
    spacing = np.maximum(np.spacing(b16.astype(np.float16)).astype(np.float64), np.spacing(np.float16(6.1e-5)))
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / spacing


CASES = {
    "conv2d": lambda x, w: tf.nn.conv2d(x, w, 2, "SAME"),
    "depthwise": lambda x, w: tf.nn.depthwise_conv2d(x, w[..., :1], [1, 1, 1, 1], "SAME"),
    "conv2d_transpose": lambda x, w: tf.nn.conv2d_transpose(x, w, [4, 16, 16, 8], 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_routed_gradients_are_float32_gradients_of_the_float16_values_rounded_once(case):
    rng = np.random.default_rng(0)
    x16 = tf.constant(rng.standard_normal((4, 8, 8, 8)), tf.float16)
    w16 = tf.constant(rng.standard_normal((3, 3, 8, 8)) * 0.3, tf.float16)
    op = CASES[case]

    def grads(x, w, routed=()):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = op(x, w)
            # An upstream gradient of float16 values, as a layer's in a float16 network gets.
            upstream = tf.cast(tf.reshape(tf.sin(tf.range(tf.size(y), dtype=tf.float32)), tf.shape(y)), tf.float16)
            loss = tf.reduce_sum(tf.cast(y * tf.cast(upstream, y.dtype), tf.float32))
        with cpu_kernels.float32_gradients(routed):
            return y, tape.gradient(loss, [x, w])

    y_native, native = grads(x16, w16)
    y_routed, routed = grads(x16, w16, {*CONV, *DEPTHWISE})
    _, exact = grads(tf.cast(x16, tf.float32), tf.cast(w16, tf.float32))
    np.testing.assert_array_equal(y_routed.numpy(), y_native.numpy())  # the forward pass is untouched
    for r, n, e in zip(routed, native, exact):
        assert r.dtype == n.dtype == tf.float16
        # Within float16 rounding of the float32 gradient of the same values, and no further off than the
        # CPU's own float16 kernel.
        assert _ulps(r.numpy(), e.numpy()).max() <= 1.0
        assert np.abs(r.numpy() - e.numpy()).sum() <= np.abs(n.numpy() - e.numpy()).sum()


def test_routing_leaves_float32_ops_other_threads_and_unlisted_ops_alone():
    x = tf.constant(np.ones((1, 4, 4, 2)), tf.float32)
    w = tf.constant(np.ones((3, 3, 2, 2)), tf.float32)

    @tf.function
    def grad(routed):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = tf.nn.conv2d(x, w, 1, "SAME")
        with cpu_kernels.float32_gradients(routed):
            return tape.gradient(y, w)

    graph = grad.get_concrete_function(frozenset(CONV)).graph
    assert not [op for op in graph.get_operations() if op.type == "Cast"]  # float32: no casts added


# --- the routing in the trainers -----------------------------------------------------------------


def _inject(monkeypatch, tmp_path, times):
    """Makes `times` this CPU's cached measurement, as a file in a fresh cache directory."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TFMP_CACHE_DIR", str(tmp_path))
    entry = {**times.to_json(), "machine": cpu_kernels.machine_id()}
    cache = {"version": cpu_kernels._CACHE_VERSION, "entries": {entry["machine"]: entry}}
    (tmp_path / "cpu_kernels.json").write_text(json.dumps(cache))


def _filter_gradient_dtypes(trainer, batch):
    """The dtypes of the Conv2D filter gradients in the traced gradient of each of `trainer`'s objectives."""

    @tf.function
    def gradients(batch):
        grads = []
        for objective in trainer.objectives(batch):
            with tf.GradientTape() as tape:
                loss = objective.loss_fn()
            with trainer.gradient_scope():
                grads += tape.gradient(loss, objective.variables)
        return grads

    graph = gradients.get_concrete_function(batch).graph
    return {op.get_attr("T").name for op in graph.get_operations() if op.type == "Conv2DBackpropFilter"}


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is never routed")
@pytest.mark.parametrize(
    "times, precision, dtypes",
    [
        (AVX512_FP16_TIMES, "mixed_float16", {"float32"}),
        (FAST_FLOAT16_TIMES, "mixed_float16", {"float16", "float32"}),
        (AVX512_FP16_TIMES, "mixed_bfloat16", {"bfloat16", "float32"}),
    ],
)
def test_the_gan_trainer_computes_the_measured_slow_gradients_in_float32(
    times, precision, dtypes, monkeypatch, tmp_path
):
    _inject(monkeypatch, tmp_path, times)
    with tfmp.precision_scope(precision):
        trainer = trainers.GANTrainer(
            build_generator(latent_dim=8, widths=(8, 8, 8)), build_discriminator(widths=(8, 8, 8)), seed=0
        )
    trainer.compile()
    expected = times.routed_ops() if precision == "mixed_float16" else frozenset()
    assert trainer.float16_gradient_ops == expected
    assert _filter_gradient_dtypes(trainer, tf.zeros((4, 28, 28, 1))) == dtypes


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is never routed")
def test_a_routed_float16_trainer_trains_with_the_forward_values_and_loss_scale_of_float16(monkeypatch, tmp_path):
    def run(times, directory):
        _inject(monkeypatch, directory, times)
        with tfmp.precision_scope("mixed_float16"):
            inputs = keras.Input((8, 8, 3))
            h = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer=keras.initializers.GlorotUniform(0))(
                inputs
            )
            h = keras.layers.DepthwiseConv2D(
                3, padding="same", depthwise_initializer=keras.initializers.GlorotUniform(1)
            )(h)
            h = keras.layers.GlobalAveragePooling2D()(h)
            outputs = keras.layers.Dense(3, dtype="float32", kernel_initializer=keras.initializers.GlorotUniform(2))(h)
            trainer = tfmp.Trainer(keras.Model(inputs, outputs))
        trainer.compile(
            optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        x = np.random.default_rng(0).standard_normal((16, 8, 8, 3)).astype(np.float32)
        y = np.arange(16) % 3
        before = trainer.predict(x, verbose=0)
        history = trainer.fit(x, y, batch_size=16, epochs=1, verbose=0)  # one step
        return trainer, before, history.history

    routed, before_routed, logs_routed = run(AVX512_FP16_TIMES, tmp_path / "slow")
    native, before_native, logs_native = run(FAST_FLOAT16_TIMES, tmp_path / "fast")
    assert routed.float16_gradient_ops == {*CONV, *DEPTHWISE} and native.float16_gradient_ops == frozenset()
    np.testing.assert_array_equal(before_routed, before_native)
    # The step's forward pass is float16's (its loss to float32's last bit: the two step graphs are
    # optimised apart), and so is the loss scale's course.
    np.testing.assert_allclose(logs_routed["loss"], logs_native["loss"], rtol=3e-7)
    assert logs_routed["loss_scale"] == logs_native["loss_scale"] == [32768.0]
    assert logs_routed["skipped_steps"] == logs_native["skipped_steps"] == [0.0]
    # The update differs by the gradients' rounding only.
    for a, b in zip(routed.get_weights(), native.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-3)


# --- bfloat16: the ops computed in float32 where that is faster -----------------------------------

# A CPU with native bfloat16 at the ratios measured on a 2-core AVX512-BF16 EPYC's models (bfloat16's time over
# float32's: 1 / its speed), float32 at 1 ms per call, and casts of 0.2 ms per elementwise tensor each way.
EPYC_BFLOAT16 = {
    "matmul": 0.6,
    "conv2d": 0.6,
    "conv2d d/input": 0.6,
    "tanh": 1 / 0.95,  # 1.05 ms: under float32's 1 ms plus the 0.4 ms of casts
    "tanh d/input": 1 / 0.39,  # 2.56 ms: over 1 ms plus 0.6 ms (two casts in, one out)
    "relu6": 1 / 0.32,
    "relu6 d/input": 1 / 0.54,  # 1.85 ms: over 1.6 ms
    "sub": 1 / 0.58,  # 1.72 ms: over 1.6 ms
    "random uniform": 1 / 0.90,  # 1.11 ms: under 1 ms plus one cast out
    "conv2d d/filter": 1 / 0.86,  # 1.16 ms: its casts are of small tensors (0.007 ms)
    "depthwise d/filter": 0.9,
}


def _bfloat16_times(ratios, cast_ms=0.2, native=True):
    """float32 at 1 ms per call; bfloat16 at the given ratios (1.0 where none is given); each cast at `cast_ms`."""
    ms = {kernel: {"float32": 1.0, "bfloat16": ratios.get(kernel, 1.0)} for kernel in cpu_kernels.KERNELS}
    ms["cast to float32"] = ms["cast from float32"] = {"bfloat16": cast_ms}
    return cpu_kernels.KernelTimes("a test CPU", ms, bfloat16_native=native)


def _bf16(route_op, inputs):
    return cpu_kernels.GradientRoute(route_op, "bfloat16", inputs)


def test_slow_bfloat16_ops_are_computed_in_float32_and_fast_ones_left_alone():
    routed = cpu_kernels.routing({"bfloat16", "float32"}, has_gpu=False, times=_bfloat16_times(EPYC_BFLOAT16))
    assert routed.forward == {("Relu6", "bfloat16"), ("Sub", "bfloat16")}
    # Only the filter gradient (input 1) of the convolutions: their input gradients are fast in bfloat16.
    assert routed.gradients == {
        _bf16("Tanh", (0,)),
        _bf16("Relu6", (0,)),
        _bf16("Conv2D", (1,)),
        _bf16("Conv2DBackpropInput", (1,)),
    }
    assert routed.float16_gradient_ops() == frozenset()
    # The casts decide Tanh and the random draw: measured cheaper, they are worth them.
    cheap_casts = cpu_kernels.routing({"bfloat16"}, has_gpu=False, times=_bfloat16_times(EPYC_BFLOAT16, 0.01))
    assert cheap_casts.forward - routed.forward == {("Tanh", "bfloat16"), ("StatelessRandomUniformV2", "bfloat16")}
    # A table without the casts (or without the kernel) routes nothing: they are measured, not assumed.
    no_casts = _bfloat16_times(EPYC_BFLOAT16)
    no_casts = dataclasses.replace(no_casts, ms={k: v for k, v in no_casts.ms.items() if not k.startswith("cast")})
    assert not cpu_kernels.routing({"bfloat16"}, has_gpu=False, times=no_casts)


@pytest.mark.parametrize("text, native", [(AVX2, False), (AVX512_BF16, True)])
def test_emulated_bfloat16_and_a_gpu_are_left_untouched(text, native, tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    measured = []

    def kernel_times(cpuinfo):
        measured.append(cpuinfo)
        return _bfloat16_times(EPYC_BFLOAT16, native=cpu_kernels.cpu_has_bfloat16(cpuinfo))

    monkeypatch.setattr(cpu_kernels, "kernel_times", kernel_times)
    routed = cpu_kernels.routing({"bfloat16"}, has_gpu=False, cpuinfo=str(cpuinfo))
    assert bool(routed) == native and measured == ([str(cpuinfo)] if native else [])  # emulated: nothing measured
    # The table's own word on the CPU decides too, and a GPU is never routed.
    assert not cpu_kernels.routing({"bfloat16"}, has_gpu=False, times=_bfloat16_times(EPYC_BFLOAT16, native=False))
    assert not cpu_kernels.routing({"bfloat16"}, has_gpu=True, times=_bfloat16_times(EPYC_BFLOAT16))
    assert not cpu_kernels.routing({"float32"}, has_gpu=False, times=_bfloat16_times(EPYC_BFLOAT16))


def test_the_bfloat16_note_names_the_ops_computed_in_float32():
    note = cpu_kernels.describe(_bfloat16_times(EPYC_BFLOAT16), "mixed_bfloat16")
    assert note.startswith("note: bfloat16 is native on this CPU; its matmul runs at 1.67x float32's speed; ")
    assert (
        ". tfmp computes tanh d/input, relu6, relu6 d/input, sub, conv2d d/filter in float32 from the bfloat16 "
        "values and rounds the results to bfloat16: their bfloat16 kernels took longer here than float32's with "
        "the casts (figures: "
    ) in note
    emulated = cpu_kernels.describe(_bfloat16_times(EPYC_BFLOAT16, native=False), "mixed_bfloat16")
    assert "emulated" in emulated and "tfmp computes" not in emulated
    assert "tfmp computes" not in cpu_kernels.describe(_bfloat16_times(EPYC_BFLOAT16), "mixed_float16")


FORWARD = frozenset({("Tanh", "bfloat16"), ("Relu6", "bfloat16"), ("Sub", "bfloat16")})


def _types(function, *args):
    """{(op type, its dtype attribute)} of the ops in `function`'s traced graph."""
    graph = function.get_concrete_function(*args).graph
    return {(op.type, op.get_attr("T").name) for op in graph.get_operations() if "T" in op.node_def.attr}


def test_routed_forward_ops_are_float32_results_rounded_to_bfloat16():
    x = tf.constant([0.5, 1.5, -0.75, 8.0], tf.bfloat16)
    a, b = tf.constant([1.0, 3.0], tf.bfloat16), tf.constant([2.0**-8, 2.0**-7], tf.bfloat16)

    @tf.function
    def forward(x, a, b, ops):
        with cpu_kernels.float32_forward(ops):
            return tf.math.tanh(x), tf.nn.relu6(x), a - b

    tanh, relu6, sub = forward(x, a, b, FORWARD)
    assert tanh.dtype == relu6.dtype == sub.dtype == tf.bfloat16
    # tanh(0.5) = 0.46212 and tanh(1.5) = 0.90515 in float32, to the nearest bfloat16 (8 significant bits):
    # 237 / 512 and 232 / 256.
    np.testing.assert_array_equal(tanh.numpy().astype(np.float32), [237 / 512, 232 / 256, -163 / 256, 1.0])
    np.testing.assert_array_equal(relu6.numpy().astype(np.float32), [0.5, 1.5, 0.0, 6.0])
    # 3 - 1/128 = 2.9921875 exactly in float32 is halfway between two bfloat16s: it rounds to the even one, 3.
    np.testing.assert_array_equal(sub.numpy().astype(np.float32), [255 / 256, 3.0])
    assert {("Tanh", "float32"), ("Relu6", "float32"), ("Sub", "float32")} <= _types(forward, x, a, b, FORWARD)
    unrouted = _types(forward, x, a, b, frozenset())
    assert {("Tanh", "bfloat16"), ("Sub", "bfloat16")} <= unrouted and ("Tanh", "float32") not in unrouted
    # (A routed op's bfloat16 original stays in the traced graph, unused: it is pruned when the graph runs.)
    with pytest.raises(ValueError, match=r"Received: \['MatMul'\]"):
        with cpu_kernels.float32_forward({("MatMul", "bfloat16")}):
            pass


def test_a_routed_random_draw_is_the_float32_draw_rounded_and_dropout_uses_it():
    seed = tf.constant([3, 4])
    ops = frozenset({("StatelessRandomUniformV2", "bfloat16")})

    @tf.function
    def draws(ops):
        with cpu_kernels.float32_forward(ops):
            uniform = tf.random.stateless_uniform([64], seed, dtype=tf.bfloat16)
            kept = tf.nn.experimental.stateless_dropout(tf.ones([64], tf.bfloat16), 0.5, seed)
        return uniform, kept

    uniform, kept = draws(ops)
    float32 = tf.random.stateless_uniform([64], seed, dtype=tf.float32)
    np.testing.assert_array_equal(uniform.numpy(), tf.cast(float32, tf.bfloat16).numpy())
    # Dropout keeps an element where its draw is at least the rate: the float32 draws, rounded, decide.
    expected = np.where(tf.cast(float32, tf.bfloat16).numpy().astype(np.float32) >= 0.5, 2.0, 0.0)
    np.testing.assert_array_equal(kept.numpy().astype(np.float32), expected)
    assert ("StatelessRandomUniformV2", "float32") in {
        (op.type, op.get_attr("dtype").name)
        for op in draws.get_concrete_function(ops).graph.get_operations()
        if op.type == "StatelessRandomUniformV2"
    }


def test_routed_bfloat16_gradients_are_float32_gradients_rounded_once():
    # y = tanh(1.5) = 232/256 in bfloat16; with dy = 0.2265625 its gradient dy (1 - y^2) is 0.04048920 exactly in
    # float32 and 166/4096 = 0.04052734 in bfloat16. bfloat16 arithmetic, rounding y^2, 1 - y^2 and the product
    # each, gets 167/4096.
    x = tf.constant([1.5, -1.0, 3.0, 8.0], tf.bfloat16)
    dy = tf.constant([0.2265625, 0.5, 0.5, 0.5], tf.bfloat16)
    routes = frozenset({_bf16("Tanh", (0,)), _bf16("Relu6", (0,))})

    @tf.function
    def grads(x, routes):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            with cpu_kernels.float32_forward(FORWARD):
                tanh, relu6 = tf.math.tanh(x), tf.nn.relu6(x)
        with cpu_kernels.float32_gradients(routes):
            return tape.gradient(tanh, x, output_gradients=dy), tape.gradient(relu6, x, output_gradients=dy)

    dtanh, drelu6 = grads(x, routes)
    assert dtanh.dtype == drelu6.dtype == tf.bfloat16
    assert dtanh.numpy().astype(np.float32)[0] == 166 / 4096
    np.testing.assert_array_equal(drelu6.numpy().astype(np.float32), [0.2265625, 0.0, 0.5, 0.0])  # 0 < x < 6
    assert {("TanhGrad", "float32"), ("Relu6Grad", "float32")} <= _types(grads, x, routes)
    assert ("TanhGrad", "float32") not in _types(grads, x, frozenset())


def test_a_routed_filter_gradient_is_float32_rounded_and_the_input_gradient_stays_bfloat16():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((2, 6, 6, 4)), tf.bfloat16)
    w = tf.constant(rng.standard_normal((3, 3, 4, 4)) * 0.3, tf.bfloat16)
    dy = tf.constant(rng.standard_normal((2, 6, 6, 4)), tf.bfloat16)

    @tf.function
    def grads(routes):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, 1, "SAME")
        with cpu_kernels.float32_gradients(routes):
            return tape.gradient(y, [x, w], output_gradients=dy)

    routes = frozenset({_bf16("Conv2D", (1,))})
    (dx, dw), (dx_own, _) = grads(routes), grads(frozenset())
    float32 = tf.raw_ops.Conv2DBackpropFilter(
        input=tf.cast(x, tf.float32),
        filter_sizes=[3, 3, 4, 4],
        out_backprop=tf.cast(dy, tf.float32),
        strides=[1, 1, 1, 1],
        padding="SAME",
    )
    assert dw.dtype == dx.dtype == tf.bfloat16
    np.testing.assert_array_equal(dw.numpy(), tf.cast(float32, tf.bfloat16).numpy())
    np.testing.assert_array_equal(dx.numpy(), dx_own.numpy())  # the input gradient is bfloat16's own kernel's
    types = _types(grads, routes)
    assert {("Conv2DBackpropFilter", "float32"), ("Conv2DBackpropInput", "bfloat16")} <= types


ROUTES_EVERYTHING = _bfloat16_times({kernel: 100.0 for kernel in cpu_kernels.KERNELS}, cast_ms=0.001)


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="a GPU is never routed")
def test_a_routed_bfloat16_trainer_computes_each_routed_op_in_float32_rounded_once(monkeypatch, tmp_path):
    # x = [4, 1.5] -> Conv2D(w1 = 2) -> [8, 3] -> ReLU(6) -> [6, 3] -> Conv2D(w2 = 1/4, tanh): tanh([1.5, 0.75])
    # in float32, rounded: t = [232, 163] / 256 -> Dense(w3 = 1/2, float32) -> p = t / 2; MSE against 0, SGD(1/2).
    # Every product and sum of bfloat16 values here is exact, so each routed op rounds once, and so does
    # the cast of the Dense layer's input gradient:
    #   dp = p; w3 -= (p . t) / 2 = (t . t) / 4                                      -> w3 = 0.19332504
    #   dt = t / 4; dz2 = bfloat16(dt (1 - t^2)) = [166 / 4096, 388 / 4096]          (TanhGrad in float32)
    #   dw2 = bfloat16(6 dz2[0] + 3 dz2[1]) = 135 / 256                             -> w2 = 1/4 - 135/512
    #   dz1 = [0, dz2[1] / 4] (Relu6Grad: 8 was clipped); dw1 = bfloat16(1.5 dz1[1]) = 146 / 4096 (a tie, to even)
    #                                                                                -> w1 = 2 - 73/4096
    # (bfloat16's own TanhGrad rounds three times: dz2[0] = 167 / 4096, and w2 = -1/64 on an AVX2 CPU.)
    _inject(monkeypatch, tmp_path, ROUTES_EVERYTHING)
    monkeypatch.setattr(cpu_kernels, "cpu_has_bfloat16", lambda cpuinfo="/proc/cpuinfo": True)
    with tfmp.precision_scope("mixed_bfloat16"):
        inputs = keras.Input((1, 1, 1))
        h = keras.layers.Conv2D(1, 1, use_bias=False, kernel_initializer=keras.initializers.Constant(2.0))(inputs)
        h = keras.layers.ReLU(6.0)(h)
        h = keras.layers.Conv2D(
            1, 1, use_bias=False, activation="tanh", kernel_initializer=keras.initializers.Constant(0.25)
        )(h)
        h = keras.layers.Flatten()(h)
        outputs = keras.layers.Dense(
            1, use_bias=False, dtype="float32", kernel_initializer=keras.initializers.Constant(0.5)
        )(h)
        trainer = tfmp.Trainer(keras.Model(inputs, outputs))
    trainer.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    assert trainer.routing == cpu_kernels.routing({"bfloat16"}, has_gpu=False, times=ROUTES_EVERYTHING)
    assert {("Tanh", "bfloat16"), ("Relu6", "bfloat16")} <= trainer.routing.forward
    entered, float32_forward = [], cpu_kernels.float32_forward

    def traced_with(ops):  # the forward ops the step is traced with in float32
        entered.append(ops)
        return float32_forward(ops)

    monkeypatch.setattr(cpu_kernels, "float32_forward", traced_with)
    x, y = np.array([4.0, 1.5], np.float32).reshape(2, 1, 1, 1), np.zeros((2, 1), np.float32)
    history = trainer.fit(x, y, batch_size=2, epochs=1, verbose=0)  # one step
    assert entered == [trainer.routing.forward]
    assert history.history["loss"] == [np.float32((116**2 + (163 / 2) ** 2) / 2 / 256**2)]
    w1, w2, w3 = (float(w.numpy().ravel()[0]) for w in trainer.network.weights)
    assert (w1, w2) == (2 - 73 / 4096, 0.25 - 135 / 512)
    assert w3 == np.float32(0.5 - (232**2 + 163**2) / 256**2 / 4)
