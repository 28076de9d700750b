"""What a training step costs a GPU besides its arithmetic: conditionals, executed ops and host reads.

A GPU step of small kernels is bound by the host that launches them. Each
op executed is a launch (about 10 µs of host time, whatever its size); each
conditional copies its predicate to the host, which waits for all queued work
before it launches the branch; each read of a value (a log printed, `bool()`
of a tensor) waits too. None of this needs a GPU to count, so these
functions give, on any machine, what a step will suffer on one:

* `conditionals(fn, *args)`: the `tf.cond`s in the graph `fn` traces to;
* `xla_conditionals(fn, *args)`: the HLO `conditional`s when XLA compiles it;
* `executed_ops(run_steps, steps)`: ops executed per step, from the
  TensorFlow profiler (on a GPU, the kernels on its device plane);
* `host_reads(run_steps, steps)`: copies of tensor values to the host per
  step, and `fit_host_reads(model, dataset, steps)` those of `model.fit()`.

The benchmark's rows show the last two for each path; `kernel_ceiling` reads
the same profiles for op times.
"""

from __future__ import annotations

import collections
import glob
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from tfmp.run import _private_apis

__all__ = [
    "CONTAINERS",
    "conditionals",
    "executed_ops",
    "fit_host_reads",
    "host_reads",
    "op_events",
    "op_type",
    "profile",
    "xla_conditionals",
]

# Ops that run other ops (their cost is their callees'), not kernels.
CONTAINERS = frozenset(
    {"StatefulPartitionedCall", "PartitionedCall", "If", "StatelessIf", "While", "StatelessWhile", "Case"}
)
_CONDITIONALS = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})


def _graph_op_types(fn: Callable[..., Any], *args: Any) -> collections.Counter[str]:
    graph = tf.function(fn).get_concrete_function(*args).graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph.node)
    for function in graph.library.function:
        counts.update(node.op for node in function.node_def)
    return counts


def conditionals(fn: Callable[..., Any], *args: Any) -> int:
    """The conditionals (`tf.cond`, `tf.switch_case`) in the graph `tf.function(fn)` traces to on `args`.

    Nested functions and branches are counted too. Without XLA, each one
    executed on a GPU copies its predicate to the host and waits for it.
    """
    return sum(count for op, count in _graph_op_types(fn, *args).items() if op in _CONDITIONALS)


def xla_conditionals(fn: Callable[..., Any], *args: Any) -> int:
    """The HLO `conditional` instructions when XLA compiles `fn` on `args` (`tf.function(jit_compile=True)`).

    XLA on a GPU copies each one's predicate to the host as well.
    """
    hlo = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")
    return hlo.count(" conditional(")


def op_type(event_name: str) -> str | None:
    """The op type of a host-plane profiler event named `<node name>:<op type>`; None for other events."""
    if "::" in event_name or ":" not in event_name:
        return None
    name = event_name.rsplit(":", 1)[1]
    if not name or not (name[0].isupper() or name[0] == "_") or name in CONTAINERS:
        return None
    return name


def _device_op_type(plane: Any, event: Any) -> str:
    """The TensorFlow op type that launched a device-plane event (its `tf_op` stat), else the kernel's name."""
    for stat in event.stats:
        if plane.stat_metadata[stat.metadata_id].name != "tf_op":
            continue
        value = stat.str_value or plane.stat_metadata[stat.ref_value].name
        return value.rsplit(":", 1)[-1] if ":" in value else value
    return plane.event_metadata[event.metadata_id].name


def op_events(space: Any) -> Iterator[tuple[str, float]]:
    """`(op type, milliseconds)` for each kernel in a profile.

    On a GPU, the kernels on the device planes' streams, each named by the
    TensorFlow op that launched it (what the device executed, not the
    launch's host time); without one, the ops on the host plane (a CPU
    executes its kernels there). Ops that only call others are left out.
    """
    devices = [plane for plane in space.planes if plane.name.startswith("/device:GPU:")]
    kernels = [
        (plane, line)
        for plane in devices
        for line in plane.lines
        if line.name.startswith("Stream") and "Memcpy" not in line.name
    ]
    if any(line.events for _, line in kernels):
        for plane, line in kernels:
            for event in line.events:
                yield _device_op_type(plane, event), event.duration_ps / 1e9
        return
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            for event in line.events:
                name = op_type(plane.event_metadata[event.metadata_id].name)
                if name is not None:
                    yield name, event.duration_ps / 1e9


def profile(run_steps: Callable[[int], Any], steps: int) -> Any:
    """The TensorFlow profiler's trace (an `XSpace`) of `run_steps(steps)`.

    Args:
        run_steps: Runs the given number of (warmed-up) steps and waits for them.
        steps: Steps to profile.
    """
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        try:
            run_steps(steps)
        finally:
            tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
        if not paths:
            raise RuntimeError(f"The TensorFlow profiler wrote no trace. Received: files under {trace_dir}: none")
        space = _private_apis.xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
    return space


def executed_ops(run_steps: Callable[[int], Any], steps: int) -> float:
    """Ops executed per step (kernels, on a GPU) while `run_steps(steps)` runs under the profiler.

    Args:
        run_steps: Runs the given number of (warmed-up) steps and waits for them.
        steps: Steps to count over.
    """
    return sum(1 for _ in op_events(profile(run_steps, steps))) / steps


def fit_host_reads(model: Any, dataset: Any, steps: int) -> float:
    """Host reads per step of `model.fit(dataset)` in steady state, with Keras's own callbacks (`verbose=0`).

    Keras reads each log value of each step inside `fit()` (its callbacks'
    `pythonify_logs`), outside the step function, so the count is of whole
    `fit()` calls: the difference between one of `2 * steps` steps and one of
    `steps`, per step, which leaves out what a `fit()` reads once.

    Args:
        model: A compiled Keras model, already fitted once (traced).
        dataset: Repeated data it is fed.
        steps: Steps of the shorter fit.
    """

    def reads(n: int) -> int:
        with _private_apis.count_host_reads() as count:
            model.fit(dataset, epochs=1, steps_per_epoch=n, shuffle=False, verbose=0)
        return count[0]

    return (reads(2 * steps) - reads(steps)) / steps


def host_reads(run_steps: Callable[[int], Any], steps: int) -> float:
    """Copies of tensor values to the host per step while `run_steps(steps)` runs (`.numpy()`, `float()`, ...).

    Each waits for the device's queued work on a GPU.

    Args:
        run_steps: Runs the given number of (warmed-up) steps and waits for them.
        steps: Steps to count over.
    """
    with _private_apis.count_host_reads() as count:
        run_steps(steps)
    return count[0] / steps
