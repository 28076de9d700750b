"""Every private Keras and TensorFlow API tfmp relies on, in one place.

tfmp works around Keras 3 and TensorFlow where their public API has no
answer: Keras 3.15's model build and step function under a multi-worker
strategy, TensorFlow's op-determinism switch, XLA tracing detection. Each use
is wrapped here with the version it was checked against, why it is needed
and the public alternative, if any; the rest of tfmp imports these wrappers
and touches no private name itself.

`PRIVATE_APIS` lists what this module reaches into, and `check()` raises an
`ImportError` naming each one the installed Keras or TensorFlow no longer
has (`tests/test_compat.py` runs it). One private use is not an attribute
and has nothing to check: `step_trace` passes the profiler's `_r` key, which
`tf.profiler.experimental.Trace` takes through `**kwargs` as trace metadata.
If TensorFlow stops reading it, the key is kept as plain metadata and the
profiler's step view loses its step markers; nothing fails. `setup.cfg` pins `keras>=3.15,<3.16`
for the same reason: a new Keras minor is a reason to re-check this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import keras
import tensorflow as tf
from keras.src.utils import tracking as _keras_tracking  # Keras 3.15
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2 as _coordination_config  # TF 2.21
from tensorflow.python.distribute import values as _tf_distribute_values  # TF 2.21
from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as _tf_slurm  # TF 2.21
from tensorflow.python.eager import context as _tf_context  # TF 2.21
from tensorflow.python.framework import config as _tf_config  # TF 2.21
from tensorflow.python.framework import ops as _tf_ops  # TF 2.21
from tensorflow.python.ops import control_flow_util as _control_flow_util  # TF 2.21
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TF 2.21: the profiler's trace format

__all__ = [
    "PRIVATE_APIS",
    "ModelWorkarounds",
    "check",
    "child_layers",
    "configure_worker_heartbeat",
    "disable_op_determinism",
    "expand_slurm_hostlist",
    "expand_slurm_tasks_per_node",
    "gradient_function",
    "inbound_nodes",
    "is_op_determinism_enabled",
    "model_strategy",
    "no_automatic_dependency_tracking",
    "optimizer_variables",
    "replace_gradient_function",
    "step_trace",
    "strategy_supports_no_merge_call",
    "tracing_for_xla",
    "xplane_pb2",
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
    PrivateAPI("keras.Model", "_flatten_layers", "child layers in creation order (child_layers)"),
    PrivateAPI("keras.Model", "_distribute_strategy", "the strategy a model was made under, or None"),
    PrivateAPI("keras.layers.Layer", "_inbound_nodes", "a functional layer's graph edges (inbound_nodes)"),
    PrivateAPI("keras.optimizers.LossScaleOptimizer", "_trainable_variables", "the built optimizer's variables"),
    PrivateAPI(
        "keras.src.utils.tracking",
        "no_automatic_dependency_tracking",
        "optimizer state variables created outside build()",
    ),
    PrivateAPI(
        "tensorflow.python.framework.config",
        "disable_op_determinism",
        "restore op determinism after a run (no public off switch)",
    ),
    PrivateAPI(
        "tensorflow.python.framework.config",
        "is_op_determinism_enabled",
        "read the op-determinism setting (no public getter)",
    ),
    PrivateAPI(
        "tensorflow.python.ops.control_flow_util",
        "GraphOrParentsInXlaContext",
        "whether a layer is traced for XLA (tracing_for_xla)",
    ),
    PrivateAPI(
        "tensorflow.python.eager.context.Context",
        "configure_coordination_service",
        "the heartbeat timeout after which a lost worker stops the others (configure_worker_heartbeat)",
    ),
    PrivateAPI(
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2",
        "CoordinatedJob",
        "the jobs the coordination service watches (configure_worker_heartbeat)",
    ),
    PrivateAPI(
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
        "expand_hostlist",
        "Slurm's node list without scontrol (expand_slurm_hostlist)",
    ),
    PrivateAPI(
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver",
        "expand_tasks_per_node",
        "Slurm's tasks per node (expand_slurm_tasks_per_node)",
    ),
    PrivateAPI(
        "tensorflow.tsl.profiler.protobuf.xplane_pb2",
        "XSpace",
        "the TensorFlow profiler's trace, read by the benchmark's ceiling mode",
    ),
    PrivateAPI(
        "tensorflow.python.framework.ops",
        "_gradient_registry",
        "an op type's gradient function, replaced by one that can compute float16 gradients in float32 "
        "(gradient_function, replace_gradient_function; tf.RegisterGradient refuses a registered type)",
    ),
    PrivateAPI(
        "tf.__internal__.distribute",
        "strategy_supports_no_merge_call",
        "whether a loss-scaled apply may skip merge_call",
    ),
)


def _owners() -> dict[str, Any]:
    return {
        "keras.Model": keras.Model,
        "keras.layers.Layer": keras.layers.Layer,
        "keras.optimizers.LossScaleOptimizer": keras.optimizers.LossScaleOptimizer,
        "keras.src.utils.tracking": _keras_tracking,
        "tensorflow.python.framework.config": _tf_config,
        "tensorflow.python.framework.ops": _tf_ops,
        "tensorflow.python.ops.control_flow_util": _control_flow_util,
        "tensorflow.python.eager.context.Context": _tf_context.Context,
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2": _coordination_config,
        "tf.__internal__.distribute": tf.__internal__.distribute,
        "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver": _tf_slurm,
        "tensorflow.tsl.profiler.protobuf.xplane_pb2": xplane_pb2,
        "tensorflow.python.distribute.values.PerReplicaSpec": _tf_distribute_values.PerReplicaSpec,
    }


# Attributes set in __init__ rather than on the class: checked on a fresh instance.
_INSTANCE_ATTRIBUTES = {
    ("keras.Model", "_distribute_strategy"),
    ("keras.layers.Layer", "_inbound_nodes"),
    ("keras.optimizers.LossScaleOptimizer", "_trainable_variables"),
    ("tensorflow.python.distribute.values.PerReplicaSpec", "_value_specs"),
}


def check() -> None:
    """Raises `ImportError` naming every private API in `PRIVATE_APIS` that is gone.

    Raises:
        ImportError: listing each missing `owner.name` and what tfmp used it
            for, with the installed and the checked versions.
    """
    owners = _owners()
    instances = {
        "keras.Model": keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)]),
        "keras.layers.Layer": keras.layers.Dense(1),
        "keras.optimizers.LossScaleOptimizer": keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),
        "tensorflow.python.distribute.values.PerReplicaSpec": _tf_distribute_values.PerReplicaSpec(tf.TensorSpec((1,))),
    }
    missing = []
    for api in PRIVATE_APIS:
        if (api.owner, api.name) in _INSTANCE_ATTRIBUTES:
            where = instances[api.owner]
            if isinstance(where, keras.optimizers.Optimizer):
                where.build([keras.Variable(0.0)])
        else:
            where = owners[api.owner]
        if not hasattr(where, api.name):
            missing.append(f"{api.owner}.{api.name} ({api.why})")
    if missing:
        raise ImportError(
            f"tfmp relies on private APIs that Keras {keras.__version__} / TensorFlow {tf.__version__} no longer "
            f"have (checked with {CHECKED_WITH}): "
            + "; ".join(missing)
            + ". Install keras>=3.15,<3.16 (tfmp's pin), or update tfmp/_compat.py."
        )


# -- Keras models -----------------------------------------------------------------------------


def child_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layers directly inside `layer` (or a model), in creation order.

    Public alternative: `model.layers` for models only; a plain layer's
    sub-layers have no public list.
    """
    return list(layer._flatten_layers(include_self=False, recursive=False))


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


def model_strategy(model: keras.Model) -> tf.distribute.Strategy | None:
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
        strategy = model_strategy(self)
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


def configure_worker_heartbeat(cluster: dict[str, list[str]], timeout_seconds: float) -> None:
    """Makes `MultiWorkerMirroredStrategy`'s coordination service declare a worker lost after `timeout_seconds`.

    Call it before creating the strategy, which then keeps this
    configuration instead of its own (the same service, leader and jobs, with
    TensorFlow's default heartbeat timeout). A task that sends no heartbeat
    for that long is reported to every other task, whose collectives then
    fail with `tf.errors.UnavailableError` naming it. No public alternative:
    `tf.distribute.experimental.CommunicationOptions(timeout_seconds=...)`
    bounds each collective instead, which would also stop a healthy run
    whose worker takes longer (validation, a checkpoint write) to reach the
    next collective.

    Args:
        cluster: The `TF_CONFIG` cluster: `chief` and `worker` address lists.
        timeout_seconds: Seconds without a heartbeat before a task is lost.
    """
    jobs = [
        _coordination_config.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
        for job in ("chief", "worker")
        if cluster.get(job)
    ]
    leader = "/job:chief/replica:0/task:0" if cluster.get("chief") else "/job:worker/replica:0/task:0"
    _tf_context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=leader,
        heartbeat_timeout_in_ms=int(timeout_seconds * 1000),
        coordinated_jobs=jobs,
    )


def expand_slurm_hostlist(text: str) -> list[str]:
    """Slurm's compressed node list (`node[1-3],gpu7`) as host names, with TensorFlow's own parser.

    No public alternative without `scontrol show hostnames`, which containers often lack.
    """
    return _tf_slurm.expand_hostlist(text)


def expand_slurm_tasks_per_node(text: str) -> list[int]:
    """Slurm's tasks per node (`2(x3),1`) as one count per node, with TensorFlow's own parser."""
    return _tf_slurm.expand_tasks_per_node(text)


def is_op_determinism_enabled() -> bool:
    """Whether `tf.config.experimental.enable_op_determinism` is on (no public getter)."""
    return _tf_config.is_op_determinism_enabled()


def disable_op_determinism() -> None:
    """Turns op determinism off again (no public off switch)."""
    _tf_config.disable_op_determinism()


def step_trace(name: str, step: int) -> tf.profiler.experimental.Trace:
    """A profiler trace event that marks training step `step` (enter it around the step).

    `_r=1` marks the event as a step's root, so the profile plugin's
    step-time view groups the step's work under it (tf.keras 2's `fit()`
    traced every step this way; the example in `Trace`'s docstring passes it
    too). It is a private metadata key, not a parameter, so `check()` cannot
    see it. Public alternative: `tf.profiler.experimental.Trace(name,
    step_num=step)`, as Keras 3's TensorBoard callback does, which leaves the
    profiler to find the step boundaries by itself.

    Args:
        name: The trace event's name.
        step: The step number shown in the profile.

    Returns:
        The `Trace`, not yet entered.
    """
    return tf.profiler.experimental.Trace(name, step_num=step, _r=1)
