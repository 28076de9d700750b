"""Models tfmp does not ship, on real data, for the tests of "your own model".

Three families a user brings, each tiny and fed by the embedded handwritten
digits (no download):

* `bn_cnn`: a Conv2D + BatchNormalization classifier on the 8x8 images;
* `transformer`: a Transformer encoder block (token and position embeddings,
  MultiHeadAttention, residual `+`, LayerNormalization) on the digits read as
  64 integer tokens (pixel intensities 0-16);
* `gru`: an Embedding and a GRU over the same tokens.

Each has a `tfmp.run.tasks.SupervisedTask` built from module-level functions
(so it pickles, and `--task=families:NAME` finds it), with the data in a
different form each: arrays, a function returning batches, a dataset of
examples. `OwnTrainer` is a trainer a user writes on
`tfmp.trainers.MixedPrecisionTrainer`.
"""

import keras
import numpy as np
import tensorflow as tf

import tfmp
from tfmp import trainers
from tfmp.run import config, data, tasks

NUM_CLASSES = 10
VOCABULARY = 17  # pixel intensities 0..16
LENGTH = 64


def digits(n_train=256, n_val=64):
    """`(x_train, y_train, x_val, y_val)`: 8x8x1 float32 images in [0, 1] and int32 labels, a fixed split."""
    split = data.load_digits(image_size=(8, 8), channels=1, validation_fraction=0.2, seed=0)
    return split.x_train[:n_train], split.y_train[:n_train], split.x_val[:n_val], split.y_val[:n_val]


def tokens(images):
    """The images as sequences of 64 int32 tokens, the pixel intensities 0..16."""
    return np.rint(images.reshape(len(images), LENGTH) * 16).astype(np.int32)


def bn_cnn():
    init = keras.initializers.GlorotUniform
    inputs = keras.Input((8, 8, 1), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer=init(1))(inputs)
    x = keras.layers.BatchNormalization(momentum=0.9)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same", kernel_initializer=init(2))(x)
    x = keras.layers.BatchNormalization(momentum=0.9)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(NUM_CLASSES, kernel_initializer=init(3))(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="bn_cnn")


def transformer(dim=16, heads=2):
    inputs = keras.Input((LENGTH,), dtype="int32", name="tokens")
    positions = keras.ops.arange(LENGTH)
    x = keras.layers.Embedding(VOCABULARY, dim)(inputs) + keras.layers.Embedding(LENGTH, dim)(positions)
    attended = keras.layers.MultiHeadAttention(heads, key_dim=dim // heads)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(2 * dim, activation="relu")(x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, keras.layers.Dense(dim)(hidden)]))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(NUM_CLASSES)(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="transformer")


def gru():
    inputs = keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCABULARY, 8)(inputs)
    x = keras.layers.GRU(16)(x)
    x = keras.layers.Dense(NUM_CLASSES)(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="gru")


def token_batches(batch_size, seed):
    """The training tokens as a function of the batch size and seed: the "function returning batches" form."""
    x, y, _, _ = digits()
    examples = tf.data.Dataset.from_tensor_slices((tokens(x), y))
    return examples.shuffle(len(y), seed=seed, reshuffle_each_iteration=True).batch(batch_size)


def _validation_tokens():
    _, _, x, y = digits()
    return tokens(x), y


# A few steps of each, in float32 unless a run asks for more.
SMALL = config.TrainConfig(precision="float32", batch_size=32, epochs=2, steps_per_epoch=3, warmup_steps=1)


def _task(name, model, train_data, validation_data, optimizer):
    return tasks.SupervisedTask(
        name=name,
        model=model,
        train_data=train_data,
        validation_data=validation_data,
        loss="sparse_categorical_crossentropy",
        optimizer=optimizer,
        metrics=["accuracy"],
        config=SMALL,
    )


CNN_TASK = _task("bn_cnn", bn_cnn, digits()[:2], digits()[2:], keras.optimizers.Adam(1e-2))  # arrays
TRANSFORMER_TASK = _task(  # a function returning batches
    "transformer", transformer, token_batches, _validation_tokens(), keras.optimizers.Adam(1e-2)
)
GRU_TASK = _task("gru", gru, token_batches, _validation_tokens(), "adam")

TASKS = {"bn_cnn": CNN_TASK, "transformer": TRANSFORMER_TASK, "gru": GRU_TASK}


# A task module whose optimizer is a TensorFlow object built at import, the "Your own model" guide's way: a module
# that must be imported after the strategy is made (multi-worker) to train on several hosts.
OPTIMIZER_AT_IMPORT = """
import keras
import numpy as np
{imports}
from tfmp.run import config, tasks
{first}
OPTIMIZER = keras.optimizers.Adam(1e-2)


def build_model():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax", dtype="float32")(hidden))


x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
TASK = tasks.SupervisedTask(
    name="optimizer_at_import",
    model=build_model,
    train_data=(x, (x[:, 0] > 0).astype("int32")),
    loss="sparse_categorical_crossentropy",
    optimizer=OPTIMIZER,
    config=config.TrainConfig({settings}),
)
"""


def optimizer_at_import(
    settings: str = "precision='float32', batch_size=16, warmup_steps=0", event_log: str | None = None
) -> str:
    """The source of that task module, with `settings` as its `TrainConfig` arguments.

    With `event_log` (a module name), the module imports it first and appends
    `"module"` to its `EVENTS` at import, so a test sees when it was imported.
    """
    imports = f"\nimport {event_log}" if event_log else ""
    first = f'\n{event_log}.EVENTS.append("module")' if event_log else ""
    return OPTIMIZER_AT_IMPORT.format(imports=imports, first=first, settings=settings)


class OwnTrainer(trainers.MixedPrecisionTrainer):
    """A trainer as a user writes it from the docstrings of `optimize` and `Step.unless_skipped`.

    A `Mean` loss tracker and one metric, both updated inside `forward`
    through the step's `unless_skipped`, with no list of the variables they write.
    """

    def __init__(self, network, loss_fn, metric):
        super().__init__(name="own_trainer")
        self.network, self.loss_fn, self.metric = network, loss_fn, metric
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker, self.metric]

    @property
    def networks(self):
        return {"network": self.network}

    def call(self, x, training=False):
        return self.network(x, training=training)

    def train_step(self, data):
        x, y = data

        def forward(step):
            prediction = tf.cast(self.network(x, training=True), tf.float32)
            loss = self.loss_fn(y, prediction)

            def update():
                self.loss_tracker.update_state(loss)
                self.metric.update_state(y, prediction)

            step.unless_skipped(update)
            return loss, prediction

        self.optimize(self.optimizer, self.network.trainable_variables, forward)
        return {metric.name: metric.result() for metric in self.metrics}


class RunningMean(keras.layers.Layer):
    """An identity layer that keeps the running mean of what it sees in a weight, written in `call`.

    It writes whether or not it is trainable: frozen, its weight is still state a forward pass writes.
    """

    def build(self, input_shape):
        self.mean = self.add_weight(shape=input_shape[-1:], initializer="zeros", trainable=False, name="mean")

    def call(self, x, training=False):
        if training:
            self.mean.assign(0.9 * self.mean + 0.1 * keras.ops.cast(keras.ops.mean(x, axis=0), self.mean.dtype))
        return x


class KerasIoGAN(keras.Model):
    """keras-io's "DCGAN overriding train_step" on tfmp, as its guide writes it, shrunk.

    Two optimizers held as attributes (given to `compile`), `Mean` trackers
    updated after both updates, each update inside `tfmp.undo_if_skipped`
    with its step handed to `apply_gradients`. One more tracker reads the
    discriminator's weights after its update. The data is `(noise, real)`, so
    that a bad batch reaches both updates and a run without it draws the same
    noise for every other batch.
    """

    def __init__(self, discriminator, generator):
        super().__init__(name="keras_io_gan")
        self.discriminator, self.generator = discriminator, generator
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.d_kernel_tracker = keras.metrics.Mean(name="d_kernel")  # reads the weights the update wrote

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker, self.d_kernel_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn, **kwargs):
        super().compile(**kwargs)
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    def call(self, noise, training=False):
        return self.generator(noise, training=training)  # so Keras can build the model under a strategy

    def _update(self, optimizer, network, loss_of):
        """One network's loss-scaled update, as a transaction of both networks' forward-pass state."""
        with tfmp.undo_if_skipped([self.generator, self.discriminator], optimizer) as step:
            with tf.GradientTape() as tape:
                loss = loss_of()
                scaled_loss = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, network.trainable_weights)
            optimizer.apply_gradients(zip(grads, network.trainable_weights), step=step)
        return loss, step

    def train_step(self, data):
        noise, real = data
        batch = tf.shape(real)[0]
        labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], axis=0)

        def d_loss():
            images = tf.concat([tf.cast(self.generator(noise, training=True), real.dtype), real], axis=0)
            return self.loss_fn(labels, self.discriminator(images, training=True))

        d_loss, d_step = self._update(self.d_optimizer, self.discriminator, d_loss)
        misleading = tf.zeros((batch, 1))
        g_loss, g_step = self._update(
            self.g_optimizer,
            self.generator,
            lambda: self.loss_fn(misleading, self.discriminator(self.generator(noise, training=True), training=True)),
        )
        d_step.unless_skipped(lambda: self.d_loss_tracker.update_state(d_loss))
        d_step.unless_skipped(
            lambda: self.d_kernel_tracker.update_state(tf.reduce_sum(self.discriminator.trainable_weights[0]))
        )
        g_step.unless_skipped(lambda: self.g_loss_tracker.update_state(g_loss))
        return {metric.name: metric.result() for metric in self.metrics}
