"""Tests for tfmp/mixed_precision.py: tf.keras 2's `tf.keras.mixed_precision`.

Two parts: the namespace itself (names, policies, the tf.keras 2 rules of
`set_global_policy`, compared with tf_keras 2.21 where it is installed), and
two real tf.keras 2 clients run on it with their code as written, after
changing the one import line:

    from tensorflow.keras import mixed_precision   ->   from tfmp import mixed_precision

The client code is kept verbatim in `GUIDE_CODE` and `KERAS_TUTORIAL_CODE`. Every
other change is applied by `_edit` from a listed (old, new, count) edit, in
one of two kinds: `HARNESS` edits make the code run offline and small, and
`KERAS_3` edits are what Keras 3 itself needs, whatever the
`mixed_precision` namespace; the latter are the ones README's "Migrating from
tf.keras 2" lists.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
import traceback
from collections.abc import Iterator

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfmp
from tfmp import mixed_precision
from tfmp.run import data as data_lib

TF_KERAS_2_EXPORTS = ("LossScaleOptimizer", "Policy", "global_policy", "set_global_policy")
ORIGINAL_IMPORT = "from tensorflow.keras import mixed_precision"
TFMP_IMPORT = "from tfmp import mixed_precision"
INITIAL_SCALE = 2.0**15


@contextlib.contextmanager
def _restored_dtype_policy() -> Iterator[None]:
    """Restores the global dtype policy, which the client code sets and leaves."""
    previous = keras.config.dtype_policy()
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _policy_name() -> str:
    return keras.config.dtype_policy().name


# -- the namespace -------------------------------------------------------------


def test_the_namespace_holds_tf_keras_2s_four_names():
    assert tfmp.mixed_precision is mixed_precision
    assert tuple(sorted(mixed_precision.__all__)) == TF_KERAS_2_EXPORTS
    for name in TF_KERAS_2_EXPORTS:
        assert getattr(mixed_precision, name) is not None
    # Decided against (see the module docstring): removed in TF 2.9, internal.
    assert not hasattr(mixed_precision, "experimental")
    assert not hasattr(mixed_precision, "LossScaleOptimizerV3")


def test_the_names_are_tf_keras_2_21s():
    tf_keras = pytest.importorskip("tf_keras")
    public = tuple(sorted(n for n in dir(tf_keras.mixed_precision) if not n.startswith("_")))
    assert public == TF_KERAS_2_EXPORTS


@pytest.mark.parametrize(
    "name, compute, variable",
    [
        ("mixed_float16", "float16", "float32"),
        ("mixed_bfloat16", "bfloat16", "float32"),
        ("float32", "float32", "float32"),
        ("float16", "float16", "float16"),
        ("float64", "float64", "float64"),
    ],
)
def test_policy_has_tf_keras_2s_name_dtypes_and_config(name, compute, variable):
    policy = mixed_precision.Policy(name)
    assert (policy.name, policy.compute_dtype, policy.variable_dtype) == (name, compute, variable)
    assert policy.get_config() == {"name": name}
    assert mixed_precision.Policy.from_config(policy.get_config()).name == name


def test_a_policy_is_what_layers_take_and_hold():
    assert mixed_precision.Policy is keras.DTypePolicy
    layer = keras.layers.Dense(2, dtype=mixed_precision.Policy("mixed_float16"))
    assert isinstance(layer.dtype_policy, mixed_precision.Policy)
    assert (layer.compute_dtype, layer.variable_dtype) == ("float16", "float32")


def test_set_global_policy_takes_a_policy_or_a_name_and_global_policy_returns_it():
    with _restored_dtype_policy():
        mixed_precision.set_global_policy(mixed_precision.Policy("mixed_float16"))
        assert mixed_precision.global_policy().name == "mixed_float16"
        assert keras.layers.Dense(2).dtype_policy.name == "mixed_float16"
        assert mixed_precision.set_global_policy("mixed_bfloat16") is None
        policy = mixed_precision.global_policy()
        assert isinstance(policy, mixed_precision.Policy)
        assert (policy.name, policy.compute_dtype) == ("mixed_bfloat16", "bfloat16")


def test_set_global_policy_none_resets_to_the_floatx_policy():
    # Keras 3's own set_dtype_policy(None) raises; tf.keras 2 reset to floatx().
    floatx = keras.config.floatx()
    with _restored_dtype_policy():
        try:
            mixed_precision.set_global_policy("mixed_float16")
            mixed_precision.set_global_policy(None)
            assert mixed_precision.global_policy().name == "float32"
            keras.config.set_floatx("float64")
            mixed_precision.set_global_policy(None)
            assert mixed_precision.global_policy().name == "float64"
        finally:
            keras.config.set_floatx(floatx)


@pytest.mark.parametrize(
    "policy, error, match",
    [
        ("int32", ValueError, "floating-point policies.*Received: policy='int32'"),
        (keras.DTypePolicy("int32"), ValueError, "Received: policy='int32'"),
        ("float17", ValueError, "float17"),
        ("fp16", ValueError, r"tfmp.set_precision\('fp16'\).*Received: policy='fp16'"),
        ("bf16", ValueError, "mixed_bfloat16"),
        ("auto", ValueError, "tfmp precision name"),
        ("hardware", ValueError, "tfmp precision name"),
        (tf.float16, TypeError, "float16"),
    ],
)
def test_set_global_policy_rejects_what_tf_keras_2_rejected_and_keeps_the_policy(policy, error, match):
    with _restored_dtype_policy():
        mixed_precision.set_global_policy("mixed_float16")
        with pytest.raises(error, match=match):
            mixed_precision.set_global_policy(policy)
        assert _policy_name() == "mixed_float16"


def _outcome(module, policy):
    """What `module.set_global_policy(policy)` does: the global policy, or the error type."""
    try:
        module.set_global_policy(policy)
    except (TypeError, ValueError) as e:
        return type(e).__name__
    result = module.global_policy()
    return result.name, result.compute_dtype, result.variable_dtype


def test_set_global_policy_behaves_as_tf_keras_2_21():
    tf_keras = pytest.importorskip("tf_keras")
    policy_module = importlib.import_module("tf_keras.src.mixed_precision.policy")
    cases = [
        "mixed_float16",
        "float32",
        "mixed_bfloat16",
        None,
        "float64",
        "int32",
        "fp16",
        "float16_with_float32_vars",
        tf.float16,
        16,
    ]
    saved = policy_module._global_policy
    try:
        with _restored_dtype_policy():
            expected = [_outcome(tf_keras.mixed_precision, case) for case in cases]
            got = [_outcome(mixed_precision, case) for case in cases]
            objects = [
                _outcome(mixed_precision, mixed_precision.Policy("mixed_float16")),
                _outcome(tf_keras.mixed_precision, tf_keras.mixed_precision.Policy("mixed_float16")),
            ]
    finally:
        tf_keras.mixed_precision.set_global_policy(saved)
    assert got == expected
    assert objects[0] == objects[1]


def test_loss_scale_optimizer_is_tfmps_with_tf_keras_2s_api():
    assert issubclass(mixed_precision.LossScaleOptimizer, tfmp.LossScaleOptimizer)
    opt = mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
    assert float(opt.loss_scale) == INITIAL_SCALE
    assert float(opt.get_scaled_loss(tf.constant(2.0))) == 2.0 * INITIAL_SCALE
    (grad,) = opt.get_unscaled_gradients([tf.constant([INITIAL_SCALE * 3.0])])
    assert grad.numpy().tolist() == [3.0]
    fixed = mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), False, 128)
    assert float(fixed.loss_scale) == 128.0
    assert float(fixed.get_scaled_loss(tf.constant(0.5))) == 64.0


# -- real clients: the harness -------------------------------------------------


def _edit(code: str, edits: list[tuple[str, str, int]]) -> str:
    """Applies (old, new, count) edits, each required to match exactly `count` times."""
    for old, new, count in edits:
        assert code.count(old) == count, f"expected {count} x {old!r} in the client code"
        code = code.replace(old, new)
    return code


def _on_tfmp(code: str) -> str:
    """The one change this project asks of tf.keras 2 code."""
    return _edit(code, [(ORIGINAL_IMPORT, TFMP_IMPORT, 1)])


def _run(code: str, filename: str, namespace: dict | None = None) -> dict:
    """Executes client code as a script would, in a fresh namespace; returns it."""
    namespace = {"__name__": "__main__", **(namespace or {})}
    exec(compile(code, filename, "exec"), namespace)
    return namespace


def _uint8(images: np.ndarray) -> np.ndarray:
    """[0, 1] float images as the uint8 [0, 255] pixels keras.datasets returns."""
    return np.round(images * 255.0).astype(np.uint8)


def _check_loss_scaling(optimizer, steps: int) -> None:
    """`steps` calls of the tf.keras 2 flow went through a dynamic tfmp optimizer.

    Each step either applied (the inner optimizer counts it) or was skipped
    on non-finite gradients and halved the scale; no growth happens before
    2000 good steps. So the scale is 2**15 / 2**skipped, exactly, and
    get_scaled_loss multiplies by that scale.
    """
    assert isinstance(optimizer, mixed_precision.LossScaleOptimizer)
    applied = int(optimizer.inner_optimizer.iterations)
    skipped = steps - applied
    assert 0 <= skipped < steps, f"{skipped} of {steps} steps skipped"
    scale = float(optimizer.loss_scale)
    assert scale == INITIAL_SCALE / 2**skipped
    assert float(optimizer.get_scaled_loss(tf.constant(3.0))) == 3.0 * scale


# -- real clients: the TensorFlow guide ----------------------------------------

# The TensorFlow guide "Mixed precision" (https://www.tensorflow.org/guide/mixed_precision;
# tensorflow/docs, site/en/guide/mixed_precision.ipynb at fd8ac776): its code cells in
# order, verbatim, except the shell cell `!nvidia-smi -L`.
GUIDE_CODE = """\
import tensorflow as tf

from tensorflow import keras
from tensorflow.keras import layers
from tensorflow.keras import mixed_precision

policy = mixed_precision.Policy('mixed_float16')
mixed_precision.set_global_policy(policy)

# Equivalent to the two lines above
mixed_precision.set_global_policy('mixed_float16')

print('Compute dtype: %s' % policy.compute_dtype)
print('Variable dtype: %s' % policy.variable_dtype)

inputs = keras.Input(shape=(784,), name='digits')
if tf.config.list_physical_devices('GPU'):
  print('The model will run with 4096 units on a GPU')
  num_units = 4096
else:
  # Use fewer units on CPUs so the model finishes in a reasonable amount of time
  print('The model will run with 64 units on a CPU')
  num_units = 64
dense1 = layers.Dense(num_units, activation='relu', name='dense_1')
x = dense1(inputs)
dense2 = layers.Dense(num_units, activation='relu', name='dense_2')
x = dense2(x)

print(dense1.dtype_policy)
print('x.dtype: %s' % x.dtype.name)
# 'kernel' is dense1's variable
print('dense1.kernel.dtype: %s' % dense1.kernel.dtype.name)

# INCORRECT: softmax and model output will be float16, when it should be float32
outputs = layers.Dense(10, activation='softmax', name='predictions')(x)
print('Outputs dtype: %s' % outputs.dtype.name)

# CORRECT: softmax and model output are float32
x = layers.Dense(10, name='dense_logits')(x)
outputs = layers.Activation('softmax', dtype='float32', name='predictions')(x)
print('Outputs dtype: %s' % outputs.dtype.name)

# The linear activation is an identity function. So this simply casts 'outputs'
# to float32. In this particular case, 'outputs' is already float32 so this is a
# no-op.
outputs = layers.Activation('linear', dtype='float32')(outputs)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(loss='sparse_categorical_crossentropy',
              optimizer=keras.optimizers.RMSprop(),
              metrics=['accuracy'])

(x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
x_train = x_train.reshape(60000, 784).astype('float32') / 255
x_test = x_test.reshape(10000, 784).astype('float32') / 255

initial_weights = model.get_weights()

history = model.fit(x_train, y_train,
                    batch_size=8192,
                    epochs=5,
                    validation_split=0.2)
test_scores = model.evaluate(x_test, y_test, verbose=2)
print('Test loss:', test_scores[0])
print('Test accuracy:', test_scores[1])

x = tf.constant(256, dtype='float16')
(x ** 2).numpy()  # Overflow

x = tf.constant(1e-5, dtype='float16')
(x ** 2).numpy()  # Underflow

optimizer = keras.optimizers.RMSprop()
optimizer = mixed_precision.LossScaleOptimizer(optimizer)

loss_object = tf.keras.losses.SparseCategoricalCrossentropy()
train_dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                 .shuffle(10000).batch(8192))
test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(8192)

@tf.function
def train_step(x, y):
  with tf.GradientTape() as tape:
    predictions = model(x)
    loss = loss_object(y, predictions)
    scaled_loss = optimizer.get_scaled_loss(loss)
  scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
  gradients = optimizer.get_unscaled_gradients(scaled_gradients)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))
  return loss

@tf.function
def test_step(x):
  return model(x, training=False)

model.set_weights(initial_weights)

for epoch in range(5):
  epoch_loss_avg = tf.keras.metrics.Mean()
  test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      name='test_accuracy')
  for x, y in train_dataset:
    loss = train_step(x, y)
    epoch_loss_avg(loss)
  for x, y in test_dataset:
    predictions = test_step(x)
    test_accuracy.update_state(y, predictions)
  print('Epoch {}: loss={}, test accuracy={}'.format(epoch, epoch_loss_avg.result(), test_accuracy.result()))
"""

GUIDE_HARNESS_EDITS = [
    # The embedded digits stand in for MNIST (see _offline_mnist): 1,437 + 360 images.
    ("reshape(60000, 784)", "reshape(-1, 784)", 1),
    ("reshape(10000, 784)", "reshape(-1, 784)", 1),
]
GUIDE_KERAS_3_EDITS = [
    # Keras 3 dtypes are strings ('float16'), not tf.DType: `.name` raises AttributeError.
    (".dtype.name", ".dtype", 4),
]
GUIDE_EPOCHS = 5  # as written; batch 8192 holds all 1,437 digits: one step an epoch


@pytest.fixture
def _offline_mnist(monkeypatch, digits):
    """keras.datasets.mnist.load_data() gives the embedded digits, shaped and typed as MNIST."""

    def load_data():
        return (
            (_uint8(digits.x_train[..., 0]), digits.y_train.astype(np.uint8)),
            (_uint8(digits.x_val[..., 0]), digits.y_val.astype(np.uint8)),
        )

    monkeypatch.setattr(tf.keras.datasets.mnist, "load_data", load_data)
    return digits


def test_the_guide_as_written_stops_only_at_keras_3s_string_dtypes(_offline_mnist):
    """With only the import changed, the guide runs up to its first `.dtype.name`.

    That line fails on Keras 3 whichever `mixed_precision` is imported:
    `x.dtype` is the string 'float16'. Everything before it (the Policy,
    set_global_policy with a Policy and a name, the model) ran on tfmp.
    """
    code = _on_tfmp(_edit(GUIDE_CODE, GUIDE_HARNESS_EDITS))
    with _restored_dtype_policy(), pytest.raises(AttributeError, match="'str' object has no attribute 'name'") as info:
        _run(code, "<guide>")
    frame = [f for f in traceback.extract_tb(info.tb) if f.filename == "<guide>"][-1]
    assert code.splitlines()[frame.lineno - 1] == "print('x.dtype: %s' % x.dtype.name)"


def test_the_tensorflow_guides_custom_loop_runs_on_the_tfmp_namespace(_offline_mnist, capsys):
    """The TensorFlow mixed-precision guide, its code as written (GUIDE_CODE).

    Changed: the import line (`_on_tfmp`), and `.dtype.name` -> `.dtype` four
    times, which Keras 3 needs (GUIDE_KERAS_3_EDITS).
    Harness substitutions, to run offline: `keras.datasets.mnist.load_data`
    returns the embedded digits at 28x28 as uint8 (`_offline_mnist`), so the
    `reshape(60000, 784)` / `reshape(10000, 784)` become `reshape(-1, 784)`.
    Sizes are the guide's: 5 epochs of batch 8192, which is one full batch of
    the 1,437 training digits, so 5 steps each for fit() and the custom loop.
    """
    code = _on_tfmp(_edit(_edit(GUIDE_CODE, GUIDE_HARNESS_EDITS), GUIDE_KERAS_3_EDITS))
    before = _policy_name()
    with _restored_dtype_policy():
        ns = _run(code, "<guide>")
        assert _policy_name() == "mixed_float16"
    assert _policy_name() == before

    printed = capsys.readouterr().out
    for line in [
        "Compute dtype: float16",
        "Variable dtype: float32",
        "x.dtype: float16",
        "dense1.kernel.dtype: float32",
        "Outputs dtype: float16",
        "Outputs dtype: float32",
    ]:
        assert f"\n{line}\n" in f"\n{printed}", line
    assert isinstance(ns["policy"], mixed_precision.Policy)
    assert ns["model"].outputs[0].dtype == "float32"

    fit_losses = ns["history"].history["loss"]
    assert len(fit_losses) == GUIDE_EPOCHS and all(map(math.isfinite, fit_losses))
    assert fit_losses[-1] < fit_losses[0]

    # The custom loop: its own printed per-epoch loss (Keras 3 prints the tensor).
    number = r"(?:tf\.Tensor\()?([-+0-9.eE]+|nan|inf)"
    loop_losses = [float(v) for v in re.findall(rf"^Epoch \d+: loss={number}", printed, re.MULTILINE)]
    assert len(loop_losses) == GUIDE_EPOCHS and all(map(math.isfinite, loop_losses))
    assert loop_losses[-1] < loop_losses[0]
    _check_loss_scaling(ns["optimizer"], steps=GUIDE_EPOCHS)


# -- real clients: the Keras tutorial's Fp16Training --------------------------------------

# The Keras tutorial ("Keras & TF 2.X"): its cells up to the data,
# then the "Custom Training Loop" cells, verbatim. Line breaks and indentation are
# restored from the tutorial's flattened text; the two built-in fit() cells in between
# (`model.compile(..., optimizer='adam')`, `def train(...)`) are left out.
KERAS_TUTORIAL_CODE = """\
import tensorflow as tf
from tensorflow.keras.applications import MobileNetV2
from tensorflow.keras.layers import Dense, Activation

# for mixed precision training
from tensorflow.keras import mixed_precision
# set global dtype for all keras.layers
mixed_precision.set_global_policy('mixed_float16') # default is float32, if you use TPUs change it to mixed_bfloat16

print('Compute dtype: ', mixed_precision.global_policy().compute_dtype)
print('Variable dtype: ', mixed_precision.global_policy().variable_dtype)

(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
x_train = x_train.astype('float32') / 255
x_test = x_test.astype('float32') / 255

class Fp16Training(tf.keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
            # scale loss with optimizer
            scaled_loss = optimizer.get_scaled_loss(loss)
        # used scaled loss for compute gradient
        scaled_gradients = tape.gradient(scaled_loss, self.trainable_variables)
        # unscaled gradients to default value for stable training
        grads = optimizer.get_unscaled_gradients(scaled_gradients)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        # as usual
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    # write it as usally
    def test_step(self, data):
        pass

model = tf.keras.Sequential()
model.add(MobileNetV2(include_top=False, input_shape=(32, 32, 3)))
model.add(Dense(10))
# last layer or outputs must be float32 if use from_logits=True set dtype in last Dense
model.add(Activation('softmax', dtype='float32'))
# use custom trainig loop
cuistom_model = Fp16Training(model.inputs, model.outputs)

# optimizer with loss-scaler & and gradient unscaler
optimizer = keras.optimizers.Adam()
optimizer = mixed_precision.LossScaleOptimizer(optimizer)
# compile model
cuistom_model.compile(loss='sparse_categorical_crossentropy', optimizer=optimizer)

cuistom_model.fit(x_train, y_train, batch_size=32, epochs=1)
"""

KERAS_TUTORIAL_KERAS_3_EDITS = [
    # MobileNetV2 without top at 32x32 outputs (batch, 1, 1, 1280), so the model outputs
    # (batch, 1, 1, 10). tf.keras 2's sparse_categorical_crossentropy flattened that against
    # (batch, 1) labels; Keras 3 raises "Argument `output` must have rank (ndim)
    # `target.ndim - 1`". Averaging a 1x1 map is the identity, so this is the same model.
    (
        "MobileNetV2(include_top=False, input_shape=(32, 32, 3))",
        "MobileNetV2(include_top=False, input_shape=(32, 32, 3), pooling='avg')",
        1,
    ),
]
KERAS_TUTORIAL_BATCH = 32  # as written


def _offline_cifar10(monkeypatch, split: data_lib.Split, count: int) -> None:
    """keras.datasets.cifar10.load_data() gives `count` digits at 32x32x3, shaped and typed as CIFAR-10."""

    def load_data():
        return (
            (_uint8(split.x_train[:count]), split.y_train[:count, None].astype(np.uint8)),
            (_uint8(split.x_val), split.y_val[:, None].astype(np.uint8)),
        )

    monkeypatch.setattr(tf.keras.datasets.cifar10, "load_data", load_data)


def _tiny_mobilenet_v2(include_top=True, weights="imagenet", input_shape=None, pooling=None, **kwargs):
    """Stands in for `MobileNetV2(include_top=False, input_shape=..., pooling=...)`.

    MobileNetV2's layer kinds (a stride-2 convolution, a depthwise
    convolution, a 1x1 expansion, BatchNorm, ReLU6) at a few thousand
    weights, so the fast test traces in seconds.
    """
    assert not include_top and not kwargs, (include_top, kwargs)
    inputs = keras.Input(input_shape)
    x = inputs
    for layer in [
        keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False),
        keras.layers.DepthwiseConv2D(3, strides=2, padding="same", use_bias=False),
        keras.layers.Conv2D(64, 1, use_bias=False),
    ]:
        x = keras.layers.ReLU(6.0)(keras.layers.BatchNormalization()(layer(x)))
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, x, name="tiny_mobilenet_v2")


def _training_loss(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    """Mean sparse cross-entropy of the model on (x, y), BatchNorm on batch statistics as in training."""
    probabilities = model(x, training=True)
    return float(tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, probabilities)))


def _run_keras_tutorial(monkeypatch, mobilenet_v2, train_count: int) -> None:
    applications = importlib.import_module("tensorflow.keras.applications")
    monkeypatch.setattr(applications, "MobileNetV2", mobilenet_v2)
    split = data_lib.load_digits(image_size=(32, 32), channels=3, seed=0)
    _offline_cifar10(monkeypatch, split, train_count)
    code = _on_tfmp(_edit(KERAS_TUTORIAL_CODE, KERAS_TUTORIAL_KERAS_3_EDITS))

    before = _policy_name()
    losses = {}

    class MeasureLoss(keras.callbacks.Callback):
        """The real training loss before and after fit() (fit's own is wrong, see below)."""

        def on_train_begin(self, logs=None):
            losses["before"] = _training_loss(self.model, x_train, y_train)

        def on_train_end(self, logs=None):
            losses["after"] = _training_loss(self.model, x_train, y_train)

    x_train = split.x_train[:train_count]
    y_train = split.y_train[:train_count]
    fit = keras.Model.fit
    # fit() as written, with one harness callback added to measure the loss.
    monkeypatch.setattr(keras.Model, "fit", lambda self, *a, **k: fit(self, *a, callbacks=[MeasureLoss()], **k))
    with _restored_dtype_policy():
        ns = _run(code, "<keras tutorial>", {"keras": tf.keras})
        assert _policy_name() == "mixed_float16"
    assert _policy_name() == before

    model = ns["cuistom_model"]
    assert model.optimizer is ns["optimizer"], "compile() must not wrap the LossScaleOptimizer again"
    assert model.outputs[0].dtype == "float32"
    steps = math.ceil(train_count / KERAS_TUTORIAL_BATCH)
    assert math.isfinite(losses["before"]) and math.isfinite(losses["after"])
    assert losses["after"] < losses["before"], losses
    _check_loss_scaling(ns["optimizer"], steps=steps)
    # Keras 3's compiled_metrics shim feeds y_pred into the `loss` tracker (a Mean): fit()
    # logs mean(softmax) = 1/10, not the loss. README lists this; if it fails, Keras fixed it.
    (logged,) = model.history.history["loss"]
    assert logged == pytest.approx(0.1, abs=1e-6)


def test_the_keras_tutorials_fp16_training_runs_on_the_tfmp_namespace(monkeypatch):
    """The Keras tutorial's `Fp16Training` custom loop, its code as written (KERAS_TUTORIAL_CODE).

    Changed: the import line (`_on_tfmp`), and `pooling='avg'` added to
    MobileNetV2, which Keras 3's loss needs (KERAS_TUTORIAL_KERAS_3_EDITS).
    Harness substitutions: `keras` is given to the code (the tutorial uses it
    without importing it); `keras.datasets.cifar10.load_data` returns 256
    embedded digits at 32x32x3 as uint8 with (n, 1) labels; fit() gets one
    callback that measures the loss (fit's logged loss is Keras 3's artefact);
    and, to trace in seconds, `MobileNetV2` is a tiny stand-in with the same
    call (`_tiny_mobilenet_v2`). The full network runs in the slow twin.
    8 steps of batch 32, as written (epochs=1).
    """
    _run_keras_tutorial(monkeypatch, _tiny_mobilenet_v2, train_count=8 * KERAS_TUTORIAL_BATCH)


@pytest.mark.slow
def test_the_keras_tutorials_fp16_training_with_the_full_mobilenet_v2(monkeypatch):
    """As the fast test, with Keras's full-width MobileNetV2 (weights=None: no download).

    With 2**15 the float16 gradients of the full network overflow at first,
    so the first steps are skipped and the scale halves; 16 steps leave
    enough applied ones for the loss to fall.
    """
    real = keras.applications.MobileNetV2

    def mobilenet_v2_without_download(*args, weights=None, **kwargs):
        return real(*args, weights=weights, **kwargs)

    _run_keras_tutorial(monkeypatch, mobilenet_v2_without_download, train_count=16 * KERAS_TUTORIAL_BATCH)
