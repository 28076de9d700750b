"""Tests for tfmp/run/trainer_contract.py: a trainer of one's own that lacks a piece is refused when the task
builds it, naming the piece and the guide."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfmp import trainers
from tfmp.run import config as config_lib
from tfmp.run import tasks, trainer_contract


def _net():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)], name="net")


class Tiny(trainers.MixedPrecisionTrainer):
    """The smallest trainer of one's own that keeps the whole contract: one network, one optimizer."""

    def __init__(self, build=True, keras_optimizer=False, **kwargs):
        super().__init__(**kwargs)
        self.net = _net()
        self.build_optimizer = build
        self.keras_optimizer = keras_optimizer  # leave Keras's default optimizer in `optimizer`

    @property
    def networks(self):
        return {"net": self.net}

    def compile(self, loss_scale="dynamic", skip_nonfinite=False, **kwargs):
        super().compile(**({} if self.keras_optimizer else {"optimizer": None}), **kwargs)
        self.sgd = trainers.prepare_optimizer(keras.optimizers.SGD(0.1), self.net, loss_scale, skip_nonfinite)
        if self.build_optimizer:
            self.sgd.build(self.net.trainable_variables)

    def train_step(self, data):
        loss, _ = self.optimize(
            self.sgd, self.net.trainable_variables, lambda: (tf.reduce_mean(self.net(data, training=True) ** 2), None)
        )
        return {"loss": loss}

    def objectives(self, data):
        loss_fn = lambda: tf.reduce_mean(self.net(data, training=True) ** 2)  # noqa: E731
        return [trainers.Objective("net", self.sgd, self.net.trainable_variables, loss_fn)]

    def float32_copy(self):
        copy = Tiny()
        copy.net.set_weights(self.net.get_weights())
        copy.compile(loss_scale="none")
        return copy


def _without(name):
    """A `Tiny` whose class lacks `name` (inherits `MixedPrecisionTrainer`'s), named `Tiny` in messages."""
    return type("Tiny", (Tiny,), {name: getattr(trainers.MixedPrecisionTrainer, name)})


class WrongLossNetworks(Tiny):
    @property
    def loss_networks(self):
        return {"discriminator": self.net}


class OptimizerInAList(Tiny):
    def compile(self, **kwargs):
        super().compile(**kwargs)
        self.held = [self.sgd]
        del self.sgd


class KerasGAN(keras.Model):
    """A keras.Model of one's own, not a MixedPrecisionTrainer (keras-io's GAN, say)."""

    def compile(self, **kwargs):
        super().compile(optimizer="sgd")


class TinyTask(tasks.Task):
    name = "tiny"

    def __init__(self, make=Tiny, config=None):
        super().__init__(config or config_lib.TrainConfig(batch_size=4, epochs=1))
        self.make = make

    def train_data(self, data):
        points = np.random.default_rng(0).normal(size=(8, 2)).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices(points).batch(self.config.batch_size)

    def build_trainer(self, loss_scale, xla, steps_per_epoch, data):
        trainer = self.make()
        trainer.compile(loss_scale=loss_scale, skip_nonfinite=True, jit_compile=xla)
        return trainer


def test_a_trainer_keeping_the_contract_is_built_and_trains_with_the_defaults():
    task = TinyTask()
    built = task.build("float32", "none", False)
    trainer = built.trainer
    assert list(trainer.optimizers) == ["sgd"] and trainer.loss_networks == trainer.networks
    history = trainer.fit(task.stream(None, 0), steps_per_epoch=2, epochs=1, verbose=0, shuffle=False).history
    assert np.isfinite(history["loss"]).all()


@pytest.mark.parametrize(
    "make, changes, expected",
    [
        (KerasGAN, {}, "tfmp.GANTrainer, or a subclass of your own). Received: KerasGAN <KerasGAN name="),
        (_without("train_step"), {}, "Tiny does not define train_step"),
        (_without("networks"), {}, "Tiny does not define networks, the property giving its trained models"),
        (OptimizerInAList, {}, "OptimizerInAList holds no optimizer after compile(), so a run would checkpoint none"),
        (lambda: Tiny(build=False), {}, "Tiny holds optimizer 'sgd' (LossScaleOptimizer) unbuilt after compile()"),
        (
            lambda: Tiny(keras_optimizer=True),
            {},
            (
                "Tiny holds optimizer 'optimizer' (RMSprop) unbuilt after compile(), so a run can neither checkpoint",
                "keras.Model.compile() holds an optimizer of its own as `optimizer` (an RMSprop by default) unless "
                "given optimizer=None; pass it",
            ),
        ),
        (WrongLossNetworks, {}, "WrongLossNetworks.loss_networks must be some of its networks (['net'])"),
        (_without("objectives"), {"on_nonfinite": "stop"}, "does not define objectives(), which on_nonfinite='stop'"),
        (_without("objectives"), {"diagnose_every": 5}, "does not define objectives(), which diagnose_every=5 calls"),
        (_without("float32_copy"), {"diagnose_every": 5}, "does not define float32_copy(), which diagnose_every=5"),
    ],
)
def test_a_trainer_lacking_a_piece_is_refused_when_the_task_builds_it_naming_the_piece_and_the_guide(
    make, changes, expected
):
    task = TinyTask(make).with_config(**changes)
    with pytest.raises(trainer_contract.TrainerContractError) as raised:
        task.build("float32", "none", False)
    message = str(raised.value)
    assert all(part in message for part in ((expected,) if isinstance(expected, str) else expected)), message
    assert message.endswith("See docs/guides/own-model.md, 'A trainer of your own'."), message


def test_every_missing_piece_is_named_in_one_error():
    class Lacking(_without("networks")):
        objectives = trainers.MixedPrecisionTrainer.objectives

    task = TinyTask(lambda: Lacking(build=False)).with_config(on_nonfinite="stop")
    with pytest.raises(trainer_contract.TrainerContractError) as raised:
        task.build("float32", "none", False)
    assert str(raised.value) == (
        "Lacking does not define networks, the property giving its trained models by name (return {'generator': "
        "self.generator, ...}): a run signs, checkpoints and diagnoses them. Lacking holds optimizer 'sgd' "
        "(LossScaleOptimizer) unbuilt after compile(), so a run can neither checkpoint their state nor restore it "
        "before the first step: build each optimizer in compile() on the variables it updates "
        "(self.g_optimizer.build(self.generator.trainable_variables), say). Lacking does not define objectives(), "
        "which on_nonfinite='stop' calls: define it to use on_nonfinite='stop'. See docs/guides/own-model.md, 'A "
        "trainer of your own'."
    )


def test_the_optional_methods_are_needed_only_by_the_settings_that_call_them():
    needed_for = trainer_contract.needed_for
    assert needed_for(config_lib.TrainConfig()) == {}
    assert needed_for(config_lib.TrainConfig(on_nonfinite="stop")) == {"objectives": "on_nonfinite='stop'"}
    assert needed_for(config_lib.TrainConfig(diagnose_every=3, on_nonfinite="stop")) == {
        "objectives": "diagnose_every=3",
        "float32_copy": "diagnose_every=3",
    }
    TinyTask(_without("objectives")).build("float32", "none", False)  # on_nonfinite="skip" calls neither


def test_optimizers_must_be_a_dict_of_optimizers_and_networks_of_models():
    class Listed(Tiny):
        @property
        def optimizers(self):
            return [self.sgd]

    class Layered(Tiny):
        @property
        def networks(self):
            return {"net": self.net.layers[0]}

    with pytest.raises(trainer_contract.TrainerContractError, match=r"optimizers must be a dict .* Received: opt"):
        TinyTask(Listed).build("float32", "none", False)
    with pytest.raises(trainer_contract.TrainerContractError, match=r"networks must be a non-empty dict of keras"):
        TinyTask(Layered).build("float32", "none", False)


def test_the_guide_the_messages_name_has_a_section_listing_every_piece_the_docstring_lists():
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page, heading = re.fullmatch(r"(\S+), '(.+)'", trainer_contract.GUIDE).groups()
    guide = open(os.path.join(root, page)).read()
    section = guide.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {name for row in re.findall(r"^\| (.+?) \|", section, re.M) for name in re.findall(r"`(\w+)", row)}
    pieces = {"train_step", "networks", "compile", "optimizers", "loss_networks", "loss_scale_prefixes"}
    pieces |= {"images_per_example", "objectives", "float32_copy"}
    assert rows == pieces
    listed = trainers.MixedPrecisionTrainer.__doc__.split("contract", 1)[1]
    assert {name for name in pieces if f"`{name}" in listed} == pieces


def test_the_diagnosis_needs_objectives_and_float32_copy_whatever_the_settings(tmp_path):
    from tfmp.run import training

    task = TinyTask(_without("float32_copy")).with_config(precision="float32", logdir=str(tmp_path))
    with pytest.raises(
        trainer_contract.TrainerContractError,
        match=r"^Tiny does not define float32_copy\(\), which tfmp.run.training.diagnose calls: define it to use",
    ):
        training.diagnose(task, print_fn=None)
    assert "suggested static loss scale" in str(training.diagnose(TinyTask().with_config(precision="float32"), None))
