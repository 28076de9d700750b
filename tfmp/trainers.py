"""Trainers: `keras.Model`s whose `train_step` is the mixed-precision step.

`ClassifierTrainer` and `GANTrainer` override `train_step` with the custom
loop of the seed tutorials, so `fit()`, callbacks, the progress bar and
`evaluate()` all work as in Keras. The step is pure model math; everything
precision-specific lives once, in `MixedPrecisionTrainer.optimize`:

```python
with tf.GradientTape() as tape:
    loss = forward()
    scaled_loss = optimizer.get_scaled_loss(loss)    # float16 only
grads = tape.gradient(scaled_loss, variables)
grads = optimizer.get_unscaled_gradients(grads)      # float16 only
optimizer.apply_gradients(zip(grads, variables))
```

With float32, bfloat16 or `loss_scale="none"` the optimizer is a plain Keras
optimizer and the two scaling lines are skipped. `compile()` decides which:
it wraps the optimizer in `tfmp.LossScaleOptimizer` when the model computes
in float16 (as Keras 3's `compile()` does), honouring `loss_scale`.

Compiling the step (graph mode, or XLA with `jit_compile=True`) is left to
Keras's `make_train_function`; side effects (console lines, TensorBoard,
sample images) belong in `tfmp.run.callbacks`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import keras
import tensorflow as tf

from tfmp import _compat
from tfmp import loss_scale as loss_scale_lib
from tfmp import precision as precision_lib

__all__ = [
    "ClassifierTrainer",
    "GANTrainer",
    "MixedPrecisionTrainer",
    "Objective",
    "SEED_GAN",
    "SeedGANTraining",
    "computes_in_float16",
    "discriminator_labels",
    "prepare_optimizer",
]


def _all_layers(model: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The model and every layer nested in it, depth first."""
    layers = [model]
    for layer in getattr(model, "layers", ()):
        layers.extend(_all_layers(layer))
    return layers


def computes_in_float16(model: keras.layers.Layer) -> bool:
    """Whether any layer of `model` computes in float16 (and so needs loss scaling)."""
    return any(layer.compute_dtype == "float16" for layer in _all_layers(model))


def prepare_optimizer(
    optimizer: str | keras.optimizers.Optimizer,
    model: keras.layers.Layer,
    loss_scale: str | float | None = "dynamic",
    skip_nonfinite: bool = False,
) -> keras.optimizers.Optimizer:
    """Returns the optimizer a model should train with.

    * A `tfmp.LossScaleOptimizer` is used as given (`loss_scale` is ignored).
    * Otherwise, when `model` computes in float16, the optimizer is wrapped in
      a `tfmp.LossScaleOptimizer` according to `loss_scale` (`"dynamic"`, a
      fixed positive number, or `"none"` for no scaling). A stock Keras
      `LossScaleOptimizer` is replaced by tfmp's with the same settings.
    * A model that computes in float32 or bfloat16 gets the bare optimizer,
      unless `skip_nonfinite`: then, as any unscaled optimizer, it is wrapped
      in a `tfmp.LossScaleOptimizer` with the fixed scale 1. Multiplying and
      dividing by 1 is exact, so the updates are unchanged, but a step with a
      non-finite gradient (a NaN batch, say) is skipped and counted instead
      of writing NaN into the weights.

    Args:
        optimizer: A Keras optimizer or its name.
        model: The model whose variables the optimizer updates.
        loss_scale: The loss-scale setting for a float16 model.
        skip_nonfinite: Make an optimizer that would not be loss-scaled skip
            non-finite steps too (see above).

    Returns:
        A Keras optimizer.
    """
    optimizer = keras.optimizers.get(optimizer)
    if isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
        return optimizer
    kwargs = {}
    if (isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
            and loss_scale_lib.parse_loss_scale(loss_scale) == "dynamic"):
        # Keep the stock optimizer's dynamic settings.
        kwargs = {
            "initial_scale": optimizer.initial_scale,
            "dynamic_growth_steps": optimizer.dynamic_growth_steps,
        }
    precision = "mixed_float16" if computes_in_float16(model) else "float32"
    optimizer = loss_scale_lib.wrap_optimizer(optimizer, precision, loss_scale, **kwargs)
    if skip_nonfinite and not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
        optimizer = loss_scale_lib.LossScaleOptimizer(optimizer, dynamic=False, initial_scale=1.0)
    return optimizer


def _restore_if(skipped: tf.Tensor, variables: Sequence[keras.Variable], values: Sequence[tf.Tensor]) -> None:
    """Assigns `values` back to `variables` when `skipped` (a bool scalar tensor).

    A cond, so a step that was not skipped only pays for reading the values
    before it. It runs in the replica context, where each replica writes its
    own copy of a variable created with Keras's default aggregation (`"none"`,
    as BatchNorm's statistics are): every replica puts back its own values.
    """

    def restore() -> tf.Tensor:
        for variable, value in zip(variables, values):
            variable.assign(value)
        return tf.constant(True)

    tf.cond(skipped, restore, lambda: tf.constant(False))


def _unscale_for_distribution(loss: tf.Tensor) -> tf.Tensor:
    """Undoes Keras's 1/num_replicas loss scaling, for the loss metrics."""
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss * replicas if replicas > 1 else loss


def _replica_rows(batch_size: int | tf.Tensor) -> tuple[int | tf.Tensor, int | tf.Tensor]:
    """`(offset, global_batch_size)`: where this replica's rows sit in the step's global batch.

    `fit()` under a strategy gives replica `i` rows `i*b .. (i+1)*b - 1` of
    each global batch (`b` rows each: an even split is assumed, as
    `tfmp.run.distribute.per_replica_batch` requires). `(0, batch_size)` outside
    a multi-replica step.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return 0, batch_size
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return replica * batch_size, context.num_replicas_in_sync * batch_size


@dataclasses.dataclass(frozen=True)
class Objective:
    """One loss a trainer minimises, with what minimises it.

    Attributes:
        name: Which part of the trainer this is (e.g. `"generator"`).
        optimizer: The optimizer of `variables`.
        variables: The variables differentiated and updated.
        loss_fn: Computes the loss (a float32 scalar) on the batch the
            objective was made from, in a training-mode forward pass.
    """

    name: str
    optimizer: keras.optimizers.Optimizer | None
    variables: Sequence[keras.Variable]
    loss_fn: Callable[[], tf.Tensor]


class MixedPrecisionTrainer(_compat.ModelWorkarounds, keras.Model):
    """The logic the trainers share: the loss-scaled update and its logs.

    Subclasses write `train_step` as model math and call `optimize` once per
    optimizer. Class attributes describe the logs it returns (how a run
    presents them is `tfmp.run.tasks`'s business):

    Attributes:
        loss_scale_prefixes: One log-key prefix per optimizer; the logs hold
            `<prefix>loss_scale` and `<prefix>skipped_steps` for each
            loss-scaled optimizer.
        images_per_example: Images processed per example of a batch (the GAN
            counts real and fake images, as its seed does).
    """

    loss_scale_prefixes: tuple[str, ...] = ("",)
    images_per_example: int = 1

    def optimize(
        self,
        optimizer: keras.optimizers.Optimizer,
        variables: Sequence[keras.Variable],
        forward: Callable[[], tuple[tf.Tensor, Any]],
    ) -> tuple[tf.Tensor, Any]:
        """Runs `forward` under a tape and applies the gradient of its loss.

        Under a `tfmp.LossScaleOptimizer` this is the tf.keras 2 flow:
        `get_scaled_loss` -> `tape.gradient` -> `get_unscaled_gradients` ->
        `apply_gradients` (which skips the update if any gradient is
        non-finite and adjusts the scale). Otherwise the plain gradient step.

        The update is a transaction. When the optimizer skips it (a NaN batch,
        a float16 overflow), what `forward` wrote into the networks is undone
        too: `step_state_variables` (BatchNorm moving statistics) get their
        values from before `forward` back, so a non-finite batch cannot leak
        into them. Seed-generator states (noise, Dropout masks) keep
        advancing, so the next step draws fresh numbers and a resumed run
        repeats the same stream. A forward pass that belongs to this update
        (the GAN's fakes for its discriminator step) goes inside `forward`.

        Args:
            optimizer: The optimizer of `variables`.
            variables: The variables to differentiate and update.
            forward: Computes `(loss, aux)`; `loss` is a float32 scalar.

        Returns:
            `(loss, aux)` as `forward` returned them (the loss unscaled).
        """
        scaled = isinstance(optimizer, loss_scale_lib.LossScaleOptimizer)
        if not scaled and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise TypeError(
                "A stock keras.optimizers.LossScaleOptimizer has no get_scaled_loss; "
                "compile() the trainer so it uses tfmp.LossScaleOptimizer. "
                f"Received: optimizer={optimizer!r}"
            )
        # Only a tfmp.LossScaleOptimizer can skip a step, so only its steps
        # need the state put back; a plain optimizer's steps pay nothing.
        state = self.step_state_variables() if scaled else []
        snapshot = [tf.identity(v) for v in state]
        with tf.GradientTape() as tape:
            loss, aux = forward()
            # Scaled inside the tape, so the gradient flows through the scale.
            target = optimizer.get_scaled_loss(loss) if scaled else loss
        grads = tape.gradient(target, variables)
        if scaled:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, variables))
        if state:
            _restore_if(optimizer.last_step_skipped, state, snapshot)
        return loss, aux

    def step_state_variables(self) -> list[keras.Variable]:
        """The networks' non-trainable variables a training-mode forward pass may write.

        The non-trainable weights of the networks' trainable layers:
        BatchNorm's moving mean and variance (Keras's layer and
        `tfmp.layers.FusedBatchNormalization`), and any state a custom layer
        keeps in weights. Not the seed-generator states (noise, Dropout),
        which are not weights, and not the weights of frozen layers, which a
        forward pass does not write. `optimize` puts these variables back
        when a step is skipped.
        """
        seen, state = set(), []
        for network in self.networks.values():
            for layer in _all_layers(network):
                if not layer.trainable:
                    seen.update(id(w) for w in layer.weights)
            for weight in network.non_trainable_weights:
                if id(weight) not in seen:
                    seen.add(id(weight))
                    state.append(weight)
        return state

    @staticmethod
    def loss_scale_logs(optimizer: keras.optimizers.Optimizer, prefix: str = "") -> dict[str, tf.Tensor]:
        """The current loss scale and skipped-step count, if `optimizer` is a tfmp one.

        An optimizer that only skips non-finite steps (fixed scale 1, see
        `prepare_optimizer`) logs its skipped steps but no loss scale.
        """
        if not isinstance(optimizer, loss_scale_lib.LossScaleOptimizer):
            return {}
        logs = {f"{prefix}skipped_steps": optimizer.skipped_steps}
        if optimizer.dynamic or optimizer.initial_scale != 1:
            logs[f"{prefix}loss_scale"] = optimizer.loss_scale
        return logs

    @property
    def networks(self) -> dict[str, keras.Model]:
        """The trained models by name."""
        raise NotImplementedError

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        """The optimizers by the name of what they train (after `compile`)."""
        raise NotImplementedError

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        """The networks whose outputs a loss is computed from."""
        raise NotImplementedError

    def objectives(self, data: Any) -> list[Objective]:
        """The losses `train_step` minimises on `data`, without updating anything.

        For diagnostics (`tfmp.run.diagnostics`): each objective's loss can be
        differentiated with respect to its variables as the step would.
        """
        raise NotImplementedError

    def float32_copy(self) -> "MixedPrecisionTrainer":
        """A trainer of the same kind whose networks compute in float32.

        The networks are copies (`tfmp.precision.float32_copy`) holding the
        same weights; the copy is compiled with the same losses but plain
        optimizers. Used to compute float32 reference gradients.
        """
        raise NotImplementedError


class ClassifierTrainer(MixedPrecisionTrainer):
    """Trains a classifier with the loss-scaled custom step.

    Wraps any Keras model (its output should be float32: a float32 softmax,
    or float32 logits with a `from_logits=True` loss). Use it like a Keras
    model; `compile()` takes the usual `loss` and `metrics`:

    ```python
    with tfmp.precision_scope("mixed_float16"):
        trainer = tfmp.trainers.ClassifierTrainer(build_model())
        trainer.compile(keras.optimizers.Adam(1e-3),
                        loss="sparse_categorical_crossentropy",
                        metrics=["accuracy"], loss_scale="dynamic")
    trainer.fit(train_ds, validation_data=val_ds, epochs=3)
    ```

    Args:
        network: The classifier to train.
        **kwargs: Passed to `keras.Model` (e.g. `name`).
    """

    def __init__(self, network: keras.Model, **kwargs: Any):
        kwargs.setdefault("name", f"{network.name}_trainer")
        super().__init__(**kwargs)
        self.network = network
        self.built = network.built

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.network(inputs, training=training)

    def compile(
        self,
        optimizer: str | keras.optimizers.Optimizer = "adam",
        loss: Any = None,
        metrics: Any = None,
        loss_scale: str | float | None = "dynamic",
        skip_nonfinite: bool = False,
        **kwargs: Any,
    ) -> None:
        """Configures training; see `keras.Model.compile`.

        Args:
            optimizer: The optimizer; wrapped for loss scaling by
                `prepare_optimizer` when the network computes in float16.
            loss: The loss, as for `keras.Model.compile`.
            metrics: The metrics, as for `keras.Model.compile`.
            loss_scale: `"dynamic"`, `"none"` or a fixed scale (float16 only).
            skip_nonfinite: Skip (and count) steps with a non-finite gradient
                even without loss scaling; see `prepare_optimizer`.
            **kwargs: Other `keras.Model.compile` arguments, e.g. `jit_compile`.
        """
        kwargs["auto_scale_loss"] = False  # prepare_optimizer decided already
        super().compile(
            optimizer=prepare_optimizer(optimizer, self.network, loss_scale, skip_nonfinite),
            loss=loss,
            metrics=metrics,
            **kwargs,
        )
        # Built now rather than at the first step, so its state can be restored first.
        self.optimizer.build(self.trainable_variables)

    @property
    def networks(self) -> dict[str, keras.Model]:
        return {self.network.name: self.network}

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        return self.networks

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        return {self.network.name: self.optimizer}

    def _forward(self, x: Any, y: Any, sample_weight: Any) -> tuple[tf.Tensor, Any]:
        y_pred = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        return loss, y_pred

    def objectives(self, data: Any) -> list[Objective]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        return [Objective(self.network.name, self.optimizer, self.trainable_variables,
                          lambda: self._forward(x, y, sample_weight)[0])]

    def float32_copy(self) -> "ClassifierTrainer":
        copy = ClassifierTrainer(precision_lib.float32_copy(self.network))
        copy.compile(keras.optimizers.SGD(), loss=self.loss, loss_scale="none")
        return copy

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred = self.optimize(
            self.optimizer, self.trainable_variables, lambda: self._forward(x, y, sample_weight)
        )
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(_unscale_for_distribution(loss), sample_weight=tf.shape(y)[0])
        logs = self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        logs.update(self.loss_scale_logs(self.optimizer))
        return logs


@dataclasses.dataclass(frozen=True)
class SeedGANTraining:
    """How the seed GAN trains (seed 000), defined once.

    `GANTrainer`'s defaults, `tfmp.run.config.GANConfig`'s, and through it the
    training runs, the benchmark and the diagnosis all read these values.
    (The architecture's own defaults are in `tfmp.models.gan`.)

    Attributes:
        generator_learning_rate: The generator's Adam rate.
        discriminator_learning_rate: The discriminator's RMSprop rate.
        label_softening: See `discriminator_labels`.
        label_swap_fraction: See `discriminator_labels`.
    """

    generator_learning_rate: float = 1e-3
    discriminator_learning_rate: float = 1e-4
    label_softening: float = 0.01
    label_swap_fraction: float = 0.1

    def generator_optimizer(self, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
        """A fresh `Adam`, the seed generator's optimizer (at `learning_rate` if given)."""
        return keras.optimizers.Adam(self.generator_learning_rate if learning_rate is None else learning_rate)

    def discriminator_optimizer(self, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
        """A fresh `RMSprop`, the seed discriminator's optimizer (at `learning_rate` if given)."""
        return keras.optimizers.RMSprop(
            self.discriminator_learning_rate if learning_rate is None else learning_rate)


SEED_GAN = SeedGANTraining()


def discriminator_labels(
    batch_size: int | tf.Tensor, softening: float, swap_fraction: float,
    offset: int | tf.Tensor = 0, global_batch_size: int | tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The seed's discriminator targets: softened, with a few rows swapped.

    The seed labels real images 0 and fake images 1, softened towards each
    other by `softening` (real `softening`, fake `1 - softening`). Its stated
    aim is to "invert a few of the discriminator labels" each step: the first
    `floor(batch_size * swap_fraction)` rows of each batch get the other
    class's label. (The published code, with `soften=0.1`, moved those rows to
    the hard labels 0 and 1 instead of inverting them; tfmp inverts them.)

    Args:
        batch_size: Images per batch (may be a scalar tensor).
        softening: Distance of each label from the hard 0/1 target.
        swap_fraction: Share of rows whose real and fake labels are swapped.
        offset: The first row's index in the step's global batch (a
            replica's share of it starts there under a distribution strategy).
        global_batch_size: The global batch, whose first rows are swapped;
            default `batch_size`.

    Returns:
        `(real_labels, fake_labels)`, float32 of shape `(batch_size, 1)`.
    """
    rows = tf.range(batch_size) + offset
    total = batch_size if global_batch_size is None else global_batch_size
    n_swap = tf.cast(tf.floor(tf.cast(total, tf.float32) * swap_fraction), tf.int32)
    swapped = (rows < n_swap)[:, None]
    real, fake = tf.constant(softening, tf.float32), tf.constant(1.0 - softening, tf.float32)
    return tf.where(swapped, fake, real), tf.where(swapped, real, fake)


class GANTrainer(MixedPrecisionTrainer):
    """Trains the seed's GAN: generator step, then discriminator step.

    Each step draws fresh noise uniform in [-1, 1] and updates the generator
    (target: the discriminator calls its images real) and then the
    discriminator (real images against freshly generated ones), each with its
    own forward pass, optimizer and loss scale, as the seed does. The loss is
    the mean sigmoid cross-entropy on float32 logits; labels follow
    `discriminator_labels` (real 0, fake 1, softened, 10% swapped).

    `fit()` takes a dataset of real images (a `(images, labels)` dataset
    works; labels are ignored). Calling the trainer on noise runs the
    generator, so `predict(noise)` makes images.

    Args:
        generator: Maps `(batch, latent_dim)` noise to images.
        discriminator: Maps images to `(batch, 1)` float32 logits.
        label_softening: See `discriminator_labels` (the seed's: `SEED_GAN`).
        label_swap_fraction: See `discriminator_labels` (the seed's: `SEED_GAN`).
        seed: Seed of the noise generator.
        **kwargs: Passed to `keras.Model`.
    """

    loss_scale_prefixes = ("g_", "d_")
    images_per_example = 2

    def __init__(
        self,
        generator: keras.Model,
        discriminator: keras.Model,
        label_softening: float = SEED_GAN.label_softening,
        label_swap_fraction: float = SEED_GAN.label_swap_fraction,
        seed: int | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("name", "gan_trainer")
        super().__init__(**kwargs)
        if not 0 <= label_softening < 0.5:
            raise ValueError(f"label_softening must be in [0, 0.5). Received: label_softening={label_softening!r}")
        if not 0 <= label_swap_fraction <= 1:
            raise ValueError(
                f"label_swap_fraction must be in [0, 1]. Received: label_swap_fraction={label_swap_fraction!r}"
            )
        self.generator = generator
        self.discriminator = discriminator
        self.latent_dim = int(generator.input_shape[-1])
        self.label_softening = float(label_softening)
        self.label_swap_fraction = float(label_swap_fraction)
        self.noise_seed = keras.random.SeedGenerator(seed)
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)
        self.generator_optimizer = None
        self.discriminator_optimizer = None
        self.built = generator.built and discriminator.built

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        # Listed here so fit() and evaluate() reset them every epoch.
        return [self.g_loss_tracker, self.d_loss_tracker]

    def call(self, noise: Any, training: bool = False) -> Any:
        return self.generator(noise, training=training)

    def compile(
        self,
        generator_optimizer: str | keras.optimizers.Optimizer | None = None,
        discriminator_optimizer: str | keras.optimizers.Optimizer | None = None,
        loss_scale: str | float | None = "dynamic",
        skip_nonfinite: bool = False,
        **kwargs: Any,
    ) -> None:
        """Configures training.

        Args:
            generator_optimizer: Defaults to the seed's (`SEED_GAN.generator_optimizer()`).
            discriminator_optimizer: Defaults to the seed's (`SEED_GAN.discriminator_optimizer()`).
            loss_scale: `"dynamic"`, `"none"` or a fixed scale, applied to
                each optimizer separately when its model computes in float16.
            skip_nonfinite: Skip (and count) steps with a non-finite gradient
                even without loss scaling; see `prepare_optimizer`.
            **kwargs: Other `keras.Model.compile` arguments, e.g. `jit_compile`.
        """
        kwargs["auto_scale_loss"] = False
        super().compile(optimizer=None, **kwargs)
        self.generator_optimizer = prepare_optimizer(
            generator_optimizer or SEED_GAN.generator_optimizer(), self.generator, loss_scale, skip_nonfinite
        )
        self.discriminator_optimizer = prepare_optimizer(
            discriminator_optimizer or SEED_GAN.discriminator_optimizer(), self.discriminator, loss_scale,
            skip_nonfinite,
        )
        self.generator_optimizer.build(self.generator.trainable_variables)
        self.discriminator_optimizer.build(self.discriminator.trainable_variables)

    def sample_noise(self, batch_size: int | tf.Tensor) -> tf.Tensor:
        """Noise uniform in [-1, 1], float32 `(batch_size, latent_dim)`.

        In a multi-replica step every replica holds the same seed, so each
        draws the global batch's noise and keeps its own rows: replicas get
        different noise, the noise a single device would draw.
        """
        offset, total = _replica_rows(batch_size)
        noise = keras.random.uniform((total, self.latent_dim), minval=-1.0, maxval=1.0, seed=self.noise_seed)
        return noise if total is batch_size else noise[offset:offset + batch_size]

    def _loss(self, logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        return self.bce(labels, tf.cast(logits, tf.float32))

    def generator_loss(self, batch_size: int | tf.Tensor, training: bool) -> tf.Tensor:
        """The generator's loss on fresh noise: its images should pass as real."""
        fake_logits = self.discriminator(self.generator(self.sample_noise(batch_size), training=training), training=training)
        real_target = tf.fill((batch_size, 1), tf.constant(self.label_softening, tf.float32))
        return self._loss(fake_logits, real_target)

    def discriminator_loss(self, real: tf.Tensor, fake: tf.Tensor, training: bool) -> tf.Tensor:
        """The discriminator's loss: the mean of its real and fake losses."""
        batch_size = tf.shape(real)[0]
        offset, total = _replica_rows(batch_size)
        real_labels, fake_labels = discriminator_labels(
            batch_size, self.label_softening, self.label_swap_fraction, offset, total
        )
        real_loss = self._loss(self.discriminator(real, training=training), real_labels)
        fake_loss = self._loss(self.discriminator(fake, training=training), fake_labels)
        return 0.5 * (real_loss + fake_loss)

    @staticmethod
    def _real_images(data: Any) -> tf.Tensor:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        return x

    @property
    def networks(self) -> dict[str, keras.Model]:
        return {"generator": self.generator, "discriminator": self.discriminator}

    @property
    def loss_networks(self) -> dict[str, keras.Model]:
        return {"discriminator": self.discriminator}

    @property
    def optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        return {"generator": self.generator_optimizer, "discriminator": self.discriminator_optimizer}

    def objectives(self, data: Any) -> list[Objective]:
        """The generator's and the discriminator's losses on one batch.

        The discriminator's fakes are drawn once, from the current generator
        (`train_step` draws them after the generator's update).
        """
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        fake = self.generator(self.sample_noise(batch_size), training=True)
        return [
            Objective("generator", self.generator_optimizer, self.generator.trainable_variables,
                      lambda: self.generator_loss(batch_size, training=True)),
            Objective("discriminator", self.discriminator_optimizer, self.discriminator.trainable_variables,
                      lambda: self.discriminator_loss(real, fake, training=True)),
        ]

    def float32_copy(self) -> "GANTrainer":
        copy = GANTrainer(
            precision_lib.float32_copy(self.generator), precision_lib.float32_copy(self.discriminator),
            self.label_softening, self.label_swap_fraction,
        )
        copy.noise_seed.state.assign(self.noise_seed.state)
        copy.compile(keras.optimizers.SGD(), keras.optimizers.SGD(), loss_scale="none")
        return copy

    def train_step(self, data: Any) -> dict[str, Any]:
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        g_loss, _ = self.optimize(
            self.generator_optimizer,
            self.generator.trainable_variables,
            lambda: (self.generator_loss(batch_size, training=True), None),
        )
        d_loss, _ = self.optimize(
            self.discriminator_optimizer,
            self.discriminator.trainable_variables,
            lambda: (self._discriminator_step_loss(real, batch_size), None),
        )
        return self._logs(g_loss, d_loss)

    def _discriminator_step_loss(self, real: tf.Tensor, batch_size: tf.Tensor) -> tf.Tensor:
        # The fakes come from the freshly updated generator, inside the
        # discriminator's update: a skipped discriminator step also undoes
        # what generating them wrote into the generator's BatchNorm
        # statistics. No gradient flows back into the generator. The noise is
        # drawn after the generator step's, as before, so the stream is the same.
        fake = tf.stop_gradient(self.generator(self.sample_noise(batch_size), training=True))
        return self.discriminator_loss(real, fake, training=True)

    def test_step(self, data: Any) -> dict[str, Any]:
        real = self._real_images(data)
        batch_size = tf.shape(real)[0]
        g_loss = self.generator_loss(batch_size, training=False)
        fake = self.generator(self.sample_noise(batch_size), training=False)
        d_loss = self.discriminator_loss(real, fake, training=False)
        return self._logs(g_loss, d_loss)

    def _logs(self, g_loss: tf.Tensor, d_loss: tf.Tensor) -> dict[str, Any]:
        self.g_loss_tracker.update_state(_unscale_for_distribution(g_loss))
        self.d_loss_tracker.update_state(_unscale_for_distribution(d_loss))
        logs = {m.name: m.result() for m in self.metrics}
        logs.update(self.loss_scale_logs(self.generator_optimizer, "g_"))
        logs.update(self.loss_scale_logs(self.discriminator_optimizer, "d_"))
        return logs
