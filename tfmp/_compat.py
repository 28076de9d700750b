"""Every private Keras and TensorFlow API the core of tfmp relies on, in one place.

The core (`tfmp/*.py`, `tfmp/trainers/`) works around Keras 3 and TensorFlow
where their public API has no answer: Keras 3.15's model build and step
function under a multi-worker strategy, an optimizer's variables, XLA tracing
detection, an op type's gradient function, the ops a traced step creates, a
functional layer's graph edges.
Each use is wrapped here with the version it was checked against, why it is
needed and the public alternative, if any; the rest of the core imports these
wrappers and touches no private name itself. The run framework's own private
APIs (Slurm, the coordination service, the profiler, op determinism) are in
`tfmp.run._private_apis`, which checks them with `missing` from here.

`PRIVATE_APIS` lists what this module reaches into, and `check()` raises an
`ImportError` naming each one the installed Keras or TensorFlow no longer
has (`tests/test_compat.py` runs it). `setup.cfg` pins `keras>=3.15,<3.16`
for the same reason: a new Keras minor is a reason to re-check this file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf
from keras.src.utils import tracking as _keras_tracking  # Keras 3.15
from tensorflow.python.distribute import values as _tf_distribute_values  # TF 2.21
from tensorflow.python.framework import op_callbacks as _tf_op_callbacks  # TF 2.21
from tensorflow.python.framework import ops as _tf_ops  # TF 2.21
from tensorflow.python.ops import control_flow_util as _control_flow_util  # TF 2.21

__all__ = [
    "PRIVATE_APIS",
    "ModelWorkarounds",
    "PrivateAPI",
    "add_op_callback",
    "all_layers",
    "check",
    "child_layers",
    "gradient_function",
    "inbound_nodes",
    "missing",
    "missing_error",
    "no_automatic_dependency_tracking",
    "optimizer_variables",
    "remove_op_callback",
    "replace_gradient_function",
    "state_weights",
    "strategy_supports_no_merge_call",
    "tracing_for_xla",
]

CHECKED_WITH = "Keras 3.15.1, TensorFlow 2.21.0"


class PrivateAPI(NamedTuple):
    """One private name tfmp uses: where it lives, and why."""

    owner: str
    name: str
    why: str


PRIVATE_APIS = (
    PrivateAPI(
        "keras.Model",
        "_maybe_symbolic_build",
        "overridden: build from the epoch iterator's dataset spec under a strategy, drawing no batch "
        "(ModelWorkarounds)",
    ),
    PrivateAPI("keras.Model", "_symbolic_build", "called by the override above"),
    PrivateAPI(
        "tensorflow.python.distribute.values.PerReplicaSpec",
        "_value_specs",
        "one replica's batch spec of a distributed dataset, for the override above",
    ),
    PrivateAPI(
        "keras.Model", "_make_function", "overridden: shape scalar step logs (1,) across workers (ModelWorkarounds)"
    ),
    PrivateAPI("keras.Model", "_flatten_layers", "the layers inside a layer (child_layers, all_layers)"),
    PrivateAPI("keras.Model", "_non_trainable_variables", "the weights a layer made non-trainable (state_weights)"),
    PrivateAPI("keras.Model", "_distribute_strategy", "the strategy a model was made under, or None"),
    PrivateAPI("keras.layers.Layer", "_inbound_nodes", "a functional layer's graph edges (inbound_nodes)"),
    PrivateAPI("keras.optimizers.LossScaleOptimizer", "_trainable_variables", "the built optimizer's variables"),
    PrivateAPI(
        "keras.src.utils.tracking",
        "no_automatic_dependency_tracking",
        "optimizer state variables created outside build()",
    ),
    PrivateAPI(
        "tensorflow.python.ops.control_flow_util",
        "GraphOrParentsInXlaContext",
        "whether a layer is traced for XLA (tracing_for_xla)",
    ),
    PrivateAPI(
        "tensorflow.python.framework.ops",
        "_gradient_registry",
        "an op type's gradient function, replaced by one that can compute float16 gradients in float32 "
        "(gradient_function, replace_gradient_function; tf.RegisterGradient refuses a registered type)",
    ),
    PrivateAPI(
        "tensorflow.python.framework.op_callbacks",
        "add_op_callback",
        "replaces a bfloat16 op, as a step is traced, by its float32 computation rounded to bfloat16 "
        "(add_op_callback; tf.debugging.enable_check_numerics is built on it)",
    ),
    PrivateAPI("tensorflow.python.framework.op_callbacks", "remove_op_callback", "ends the above (remove_op_callback)"),
    PrivateAPI(
        "tf.__internal__.distribute",
        "strategy_supports_no_merge_call",
        "whether a loss-scaled apply may skip merge_call",
    ),
)


def missing(apis: tuple[PrivateAPI, ...], owners: Mapping[str, Any], instances: Mapping[str, Any]) -> list[str]:
    """The APIs of `apis` that the installed Keras or TensorFlow no longer has, each as `owner.name (why)`.

    Args:
        apis: The private names to look for.
        owners: Each API's owner (a class or module) by its `owner` string.
        instances: For attributes set in `__init__` rather than on the class,
            a fresh instance of the owner, by its `owner` string; an optimizer
            is built first. An API whose owner is here is looked up on it.

    Returns:
        One `owner.name (why)` line per missing API, in the order of `apis`.
    """
    gone = []
    for api in apis:
        where = instances.get(api.owner, owners.get(api.owner))
        if isinstance(where, keras.optimizers.Optimizer) and not where.built:
            where.build([keras.Variable(0.0)])
        if not hasattr(where, api.name):
            gone.append(f"{api.owner}.{api.name} ({api.why})")
    return gone


def missing_error(gone: list[str], module: str) -> ImportError:
    """The `ImportError` for the missing APIs `gone` (from `missing`) of the compatibility layer `module`."""
    return ImportError(
        f"tfmp relies on private APIs that Keras {keras.__version__} / TensorFlow {tf.__version__} no longer "
        f"have (checked with {CHECKED_WITH}): "
        + "; ".join(gone)
        + f". Install keras>=3.15,<3.16 (tfmp's pin), or update {module}."
    )


def check() -> None:
    """Raises `ImportError` naming every private API in `PRIVATE_APIS` that is gone.

    Raises:
        ImportError: listing each missing `owner.name` and what tfmp used it
            for, with the installed and the checked versions.
    """
    owners = {
        "keras.Model": keras.Model,
        "keras.src.utils.tracking": _keras_tracking,
        "tensorflow.python.framework.ops": _tf_ops,
        "tensorflow.python.framework.op_callbacks": _tf_op_callbacks,
        "tensorflow.python.ops.control_flow_util": _control_flow_util,
        "tf.__internal__.distribute": tf.__internal__.distribute,
    }
    # Attributes set in __init__ rather than on the class: checked on a fresh instance.
    instances = {
        "keras.Model": keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]),
        "keras.layers.Layer": keras.layers.Dense(1),
        "keras.optimizers.LossScaleOptimizer": keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),
        "tensorflow.python.distribute.values.PerReplicaSpec": _tf_distribute_values.PerReplicaSpec(tf.TensorSpec((1,))),
    }
    gone = missing(PRIVATE_APIS, owners, instances)
    if gone:
        raise missing_error(gone, "tfmp/_compat.py")


# -- Keras models -----------------------------------------------------------------------------


def child_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layers directly inside `layer` (or a model), in creation order.

    Public alternative: `model.layers` for models only; a plain layer's
    sub-layers have no public list.
    """
    return list(layer._flatten_layers(include_self=False, recursive=False))


def all_layers(*layers: keras.layers.Layer) -> list[keras.layers.Layer]:
    """`layers` and every layer nested in them, at any depth.

    Public alternative: `model.layers` lists a model's own layers only, and
    a plain layer's sub-layers have no public list.
    """
    return [nested for layer in layers for nested in layer._flatten_layers(include_self=True, recursive=True)]


def state_weights(*layers: keras.layers.Layer) -> list[keras.Variable]:
    """The weights `layers`, and every layer nested in them, made non-trainable: the state a forward pass writes.

    BatchNormalization's moving statistics and a custom layer's running
    state, whether its layer is trainable or frozen; not a frozen layer's
    kernels. Public alternative: none; `non_trainable_weights` also lists a
    frozen layer's trainable weights, with nothing to tell them apart.
    """
    return [weight for layer in all_layers(*layers) for weight in layer._non_trainable_variables]


def inbound_nodes(layer: keras.layers.Layer) -> list[Any]:
    """The functional-graph nodes that call `layer` (each has `input_tensors`, `output_tensors`).

    No public alternative in Keras 3.
    """
    return list(layer._inbound_nodes)


def gradient_function(op_type: str) -> Callable[..., Any]:
    """The gradient function TensorFlow registered for `op_type`.

    Public alternative: none that returns it (`tf.RegisterGradient` only adds).
    """
    return _tf_ops._gradient_registry.lookup(op_type)


def replace_gradient_function(op_type: str, function: Callable[..., Any]) -> None:
    """Makes `function` the gradient function of `op_type`, for every gradient built from now on.

    The tape looks the function up by op type each time it builds a
    gradient (`tensorflow.python.eager.backprop`), so the replacement holds
    for every later `tape.gradient`. No public alternative: registering a
    type twice raises.
    """
    entry = _tf_ops._gradient_registry._registry[op_type]  # {"type": function, "location": frame}
    entry["type"] = function


def add_op_callback(callback: Callable[..., Any]) -> None:
    """Calls `callback(op_type, inputs, attrs, outputs, op_name=None, graph=None)` for each op this thread makes.

    For an op created in a graph (a `tf.function` being traced), a list of
    tensors `callback` returns replaces the op's outputs for every later use,
    the tape's record of the op included; None leaves them. Ops created in
    the callback are not passed to it. Executed eagerly, an op's outputs
    cannot be replaced. Public alternative: none; `tf.debugging.enable_check_numerics`
    is built on it, with a callback of its own.
    """
    _tf_op_callbacks.add_op_callback(callback)


def remove_op_callback(callback: Callable[..., Any]) -> None:
    """Stops calling `callback` (added by `add_op_callback`) in this thread."""
    _tf_op_callbacks.remove_op_callback(callback)


def _model_strategy(model: keras.Model) -> tf.distribute.Strategy | None:
    """The strategy `model` was created under, or None.

    `model.distribute_strategy` (public) falls back to the current default
    strategy, so it cannot say whether the model was made under one.
    """
    return model._distribute_strategy


def _element_spec(iterator: Any) -> Any:
    """The shapes and dtypes of a Keras epoch iterator's batches (`tf.TensorSpec`s), without drawing one."""
    dataset = iterator.data_adapter.get_tf_dataset()
    spec = dataset.element_spec
    if isinstance(dataset, tf.distribute.DistributedDataset):
        # One replica's share: the shapes the build needs, batch dimension aside.
        spec = tf.nest.map_structure(lambda s: s._value_specs[0] if hasattr(s, "_value_specs") else s, spec)
    return spec


class ModelWorkarounds:
    """Overrides of two private `keras.Model` hooks, for Keras 3.15 under a strategy.

    Mix in before `keras.Model`: `class Trainer(_compat.ModelWorkarounds, keras.Model)`.
    """

    def _maybe_symbolic_build(self, iterator: Any = None, data_batch: Any = None) -> None:
        # Keras 3.15, for a model made under a strategy, draws the first batch
        # of every fit()/evaluate() from an extra iterator over the dataset
        # and averages it over the replicas, to build with its shapes. Three
        # faults: the extra iterator advances the dataset's reshuffle seed,
        # so training then reads the pipeline's second shuffle order, and a
        # later fit() of a model already built (a resumed run's second
        # segment) reads the first, other batches than the uninterrupted
        # run; the average fails under MultiWorkerMirroredStrategy (a
        # PerReplica "cannot be converted to a Tensor") and for a first batch
        # that does not split evenly (a validation set of 359 images on 2
        # replicas: "Inputs to operation AddN must have the same size"); and
        # it costs every validation pass a cross-replica reduce of a whole
        # batch. Building needs only the shapes and dtypes, which the
        # dataset's element spec has: no batch is drawn.
        strategy = _model_strategy(self)
        if strategy is None:
            super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
            return
        built = (
            all(layer.built for layer in self._flatten_layers())
            and getattr(getattr(self, "_compile_metrics", None), "built", True)
            and getattr(getattr(self, "_compile_loss", None), "built", True)
            and getattr(getattr(self, "optimizer", None), "built", True)
        )
        if built:
            return
        if data_batch is None and iterator is not None:
            data_batch = _element_spec(iterator)
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def _make_function(self, step_function: Callable[[Any], Any]) -> Callable[[Any], Any]:
        # Across workers, Keras 3.15 averages each step's logs with
        # strategy.reduce(MEAN, axis=0), which fails for the scalar logs every
        # step returns ("Invalid reduction dimension 0 for input with 0
        # dimensions", tensorflow/tensorflow#72388). Shaped (1,), they reduce
        # to the scalar mean over all replicas. Only then: a cluster of one
        # worker is not multi-worker to Keras, which would hand the (1,) on.
        resolver = getattr(self.distribute_strategy, "cluster_resolver", None)
        spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
        if len(spec.get("chief", [])) + len(spec.get("worker", [])) > 1:  # TensorFlow's worker_count
            step = step_function

            def step_function(data: Any) -> Any:
                return tf.nest.map_structure(
                    lambda v: tf.reshape(v, [1]) if tf.is_tensor(v) and v.shape.rank == 0 else v, step(data)
                )

            return super()._make_function(step_function)
        if self.distribute_strategy.num_replicas_in_sync > 1:
            return super()._make_function(step_function)
        # Keras reads each log value to the host on its own at every step
        # (`pythonify_logs`); on a GPU each read waits for the device. The
        # step returns its logs packed instead, one vector per dtype (the
        # float logs in one, the counts in another), each read once and
        # unpacked into the same keys, shapes and dtypes.
        layout: list[tuple[str, tf.TensorShape, tf.DType]] = []

        def packed_step(data: Any) -> Any:
            logs = step_function(data)
            if not _packable(logs):
                layout.clear()
                return logs
            values = {key: tf.convert_to_tensor(value) for key, value in logs.items()}
            layout[:] = [(key, value.shape, value.dtype) for key, value in values.items()]
            groups: dict[tf.DType, list[tf.Tensor]] = {}
            for value in values.values():
                groups.setdefault(value.dtype, []).append(value)
            return tuple(_pack(group) for group in groups.values())

        function = super()._make_function(packed_step)

        def unpacked(iterator: Any) -> Any:
            outputs = function(iterator)
            if not layout or not isinstance(outputs, tuple):
                return outputs
            flat = {value.dtype: iter(np.reshape(value.numpy(), [-1])) for value in outputs}
            logs = {}
            for key, shape, dtype in layout:
                items = [next(flat[dtype]) for _ in range(shape.num_elements())]
                logs[key] = np.asarray(items, dtype.as_numpy_dtype).reshape(shape)
            return logs

        return unpacked


def _pack(values: list[tf.Tensor]) -> tf.Tensor:
    """Values of one dtype in one tensor, in order: as they are for one, stacked for scalars, else flattened."""
    if len(values) == 1:
        return values[0]
    if all(value.shape.rank == 0 for value in values):
        return tf.stack(values)
    return tf.concat([tf.reshape(value, [-1]) for value in values], axis=0)


def _packable(logs: Any) -> bool:
    """Whether a step's logs are a flat dict of numeric tensors of static shapes, which `_make_function` packs."""
    if not isinstance(logs, dict) or not logs:
        return False
    for value in logs.values():
        if not tf.is_tensor(value) or not value.shape.is_fully_defined():
            return False
        if not (value.dtype.is_floating or value.dtype.is_integer or value.dtype == tf.bool):
            return False
    return True


# -- Keras optimizers -------------------------------------------------------------------------


def optimizer_variables(optimizer: keras.optimizers.Optimizer) -> list[keras.Variable]:
    """The trainable variables a built optimizer was built for (no public accessor in Keras 3)."""
    return optimizer._trainable_variables


# A decorator: variables created inside are not tracked as attributes (Keras's own optimizers use it in build()).
no_automatic_dependency_tracking = _keras_tracking.no_automatic_dependency_tracking


def strategy_supports_no_merge_call() -> bool:
    """Whether the current strategy runs an optimizer's update without `merge_call` (as Keras 3's LSO asks)."""
    return tf.__internal__.distribute.strategy_supports_no_merge_call()


# -- TensorFlow -------------------------------------------------------------------------------


def tracing_for_xla() -> bool:
    """Whether the current trace is being compiled by XLA (`tf.function(jit_compile=True)`).

    tf.keras 2's BatchNormalization asked the same; TensorFlow has no public call.
    """
    return _control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
