"""What a run needs of the trainer a task builds, checked when the task builds it: `check_trainer`.

A trainer of your own (a `tfmp.trainers.MixedPrecisionTrainer` subclass)
learns its contract from the class's docstring and the guide's section
(`GUIDE`); a run checks it once, before anything is trained or written, and
names every piece that is missing in one error, rather than failing deep in
checkpointing or at the first non-finite step, one piece at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from tfmp import trainers
from tfmp.run.config import TrainConfig

__all__ = ["GUIDE", "TrainerContractError", "check_trainer", "needed_for"]

#: Where the contract is explained, as every message here names it.
GUIDE = "docs/guides/own-model.md, 'A trainer of your own'"


class TrainerContractError(TypeError):
    """The trainer a task built lacks a piece of the contract a run needs; the message names it and `GUIDE`."""


def needed_for(config: TrainConfig) -> dict[str, str]:
    """The optional methods `config`'s settings call on the trainer, each with the setting that calls it.

    `objectives` for `diagnose_every` and `on_nonfinite="stop"` (the first
    non-finite layer), `float32_copy` for `diagnose_every` (float32 reference
    gradients).
    """
    needed = {}
    if config.diagnose_every:
        needed["objectives"] = needed["float32_copy"] = f"diagnose_every={config.diagnose_every}"
    if config.on_nonfinite == "stop":
        needed.setdefault("objectives", "on_nonfinite='stop'")
    return needed


def _defines(trainer: trainers.MixedPrecisionTrainer, name: str) -> bool:
    """Whether `trainer`'s class defines `name` itself rather than inheriting `MixedPrecisionTrainer`'s."""
    return getattr(type(trainer), name) is not getattr(trainers.MixedPrecisionTrainer, name)


def _models_by_name(trainer: trainers.MixedPrecisionTrainer, name: str, value: Any) -> list[str]:
    """The problem of a `networks` or `loss_networks` that is not a non-empty dict of `keras.Model`s by name."""
    if not isinstance(value, Mapping) or not value or not all(isinstance(m, keras.Model) for m in value.values()):
        return [
            f"{type(trainer).__name__}.{name} must be a non-empty dict of keras.Model by name. "
            f"Received: {name}={value!r}."
        ]
    return []


def _optimizer_problems(trainer: trainers.MixedPrecisionTrainer) -> list[str]:
    """What is wrong with `trainer.optimizers`: not a dict of optimizers, empty, or some unbuilt."""
    kind, optimizers = type(trainer).__name__, trainer.optimizers
    if not isinstance(optimizers, Mapping) or not all(
        isinstance(o, keras.optimizers.Optimizer) for o in optimizers.values()
    ):
        return [f"{kind}.optimizers must be a dict of Keras optimizers by name. Received: optimizers={optimizers!r}."]
    if not optimizers:
        return [
            f"{kind} holds no optimizer after compile(), so a run would checkpoint none of its updates' state: "
            "keep each optimizer in an attribute in compile() (self.g_optimizer = ...), or define the optimizers "
            "property. Received: optimizers={}."
        ]
    unbuilt = [f"{name!r} ({type(o).__name__})" for name, o in optimizers.items() if not o.built]
    if not unbuilt:
        return []
    problem = (
        f"{kind} holds optimizer{'s' if len(unbuilt) > 1 else ''} {', '.join(unbuilt)} unbuilt after compile(), "
        "so a run can neither checkpoint their state nor restore it before the first step: build each optimizer "
        "in compile() on the variables it updates (self.g_optimizer.build(self.generator.trainable_variables), "
        "say)."
    )
    if "optimizer" in optimizers and not optimizers["optimizer"].built and len(optimizers) > 1:
        problem += (
            " keras.Model.compile() holds an optimizer of its own as `optimizer` (an RMSprop by default) unless "
            "given optimizer=None; pass it if the trainer does not train with that one."
        )
    return [problem]


def check_trainer(trainer: Any, needed: Mapping[str, str] | None = None) -> None:
    """Raises `TrainerContractError` naming every piece of the contract that `trainer` lacks, at once.

    What every run needs: a `tfmp.trainers.MixedPrecisionTrainer` with a
    `train_step` of its own; `networks`, its models by name; `optimizers`, by
    name, at least one, each built by `compile()` (a checkpoint holds and
    restores its state before the first step); `loss_networks`, some of
    `networks`. The defaults of `optimizers` (the trainer's attributes
    holding one) and `loss_networks` (`networks`) count as defined.

    Args:
        trainer: What the task's `build_trainer` returned, compiled.
        needed: The optional methods the run calls, each with the setting
            that calls it (`needed_for`): `{"objectives": "on_nonfinite='stop'"}`.

    Raises:
        TrainerContractError: naming each missing piece, the value received
            where there is one, and what to do.
    """
    if not isinstance(trainer, trainers.MixedPrecisionTrainer):
        raise TrainerContractError(
            "A task's build_trainer must return a tfmp.trainers.MixedPrecisionTrainer (tfmp.Trainer, "
            f"tfmp.GANTrainer, or a subclass of your own). Received: {type(trainer).__name__} {trainer!r}. "
            f"See {GUIDE}."
        )
    kind, problems = type(trainer).__name__, []
    if not _defines(trainer, "train_step"):
        problems.append(
            f"{kind} does not define train_step: write the step as model math, calling optimize() once per "
            "optimizer, and return the logs."
        )
    if _defines(trainer, "networks"):
        networks = trainer.networks
        wrong = _models_by_name(trainer, "networks", networks)
        if not wrong:
            loss_networks = trainer.loss_networks
            wrong = _models_by_name(trainer, "loss_networks", loss_networks)
            if not wrong and not set(loss_networks) <= set(networks):
                wrong.append(
                    f"{kind}.loss_networks must be some of its networks ({sorted(networks)}), by the same names. "
                    f"Received: loss_networks={sorted(loss_networks)}."
                )
        problems += wrong
    else:
        problems.append(
            f"{kind} does not define networks, the property giving its trained models by name "
            "(return {'generator': self.generator, ...}): a run signs, checkpoints and diagnoses them."
        )
    problems += _optimizer_problems(trainer)
    problems += [
        f"{kind} does not define {method}(), which {setting} calls: define it to use {setting}."
        for method, setting in (needed or {}).items()
        if not _defines(trainer, method)
    ]
    if problems:
        raise TrainerContractError(" ".join(problems) + f" See {GUIDE}.")
