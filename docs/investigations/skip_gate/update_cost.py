"""What MobileNetV2's Adam update costs on its own, and why it cannot be fused without changing bits (issue 23, 2026-11-26).

Four measurements, float32, MobileNetV2 batch 128 as the benchmark builds it:

1. `update`: Keras's Adam applied alone in a `tf.function` to fixed gradients,
   in five forms (all variables; only the 124 under 5,000 values; only the 34
   others; all, inside the gate's cond; all, with the small ones grouped as
   `update_forms.py` groups them). 40 interleaved rounds of 5 applies: median
   wall and CPU (process) time per apply.
2. `ops`: the number of ops Keras's and the grouped update trace to.
3. `xla`: the update's elementwise arithmetic (Keras's expressions) on 2 M
   random values, plain and under `jit_compile=True`: how many values differ.
4. `step`: wall and CPU time of the bare hand-written training step and of
   the trainer's (10-step rounds, `resource.getrusage`): how busy the two
   cores are.
5. `fused`: TensorFlow's one-op Adam (`tf.raw_ops.ResourceApplyAdam`) against
   Keras's Adam, two steps on 100,003 random values: how many values differ.
6. `profile`: both steps under the TensorFlow profiler (3 steps each): how
   long each step runs after its last gradient op, and the update ops in
   that tail.

    python3 docs/investigations/skip_gate/update_cost.py [update|ops|xla|step|fused|profile ...]
"""

import glob
import math
import os
import resource
import statistics
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf
import update_forms

from tfmp import _compat
from tfmp import loss_scale as loss_scale_lib
from tfmp.run.benchmark import settings, timing
from tfmp.run.benchmark import workload as workload_lib


def _workload():
    keras.config.set_dtype_policy("float32")
    return workload_lib.build_workload(settings.default_specs()["mobilenet_v2"], "float32", False, steps=1000)


def _apply_function(variables, form):
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(variables)

    @tf.function
    def apply(grads):
        if form == "gated":
            finite = loss_scale_lib.all_finite(grads)
            tf.cond(finite, lambda: (optimizer.apply(grads, variables), tf.constant(True))[1], lambda: tf.constant(False))
        elif form == "grouped":
            with update_forms.grouped_adam(optimizer):
                optimizer.apply(grads, variables)
        else:
            optimizer.apply(grads, variables)
        return optimizer.iterations.value

    return apply


def update(workload):
    variables = list(workload.trainer.networks.values())[0].trainable_variables
    small = [v for v in variables if math.prod(v.shape) < 5000]
    large = [v for v in variables if math.prod(v.shape) >= 5000]
    print(f"{len(variables)} variables, {sum(math.prod(v.shape) for v in variables)} values; "
          f"{len(small)} under 5,000 values ({sum(math.prod(v.shape) for v in small)} values)")
    forms = {"keras": (variables, "keras"), "small only": (small, "keras"), "large only": (large, "keras"),
             "gated": (variables, "gated"), "grouped": (variables, "grouped")}
    calls = {}
    for name, (vs, form) in forms.items():
        grads = [tf.random.normal(v.shape) * 1e-3 for v in vs]
        apply = _apply_function(vs, form)
        calls[name] = lambda apply=apply, grads=grads: apply(grads)
    for call in calls.values():
        for _ in range(3):
            call().numpy()
    wall, cpu = {name: [] for name in calls}, {name: [] for name in calls}
    for _ in range(40):
        for name, call in calls.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(5):
                out = call()
            out.numpy()
            wall[name].append((time.perf_counter() - start) / 5e-3)
            cpu[name].append((time.process_time() - start_cpu) / 5e-3)
    for name in calls:
        print(f"update {name:10s}: wall {statistics.median(wall[name]):5.2f} ms, cpu {statistics.median(cpu[name]):5.2f} ms")


def op_counts(workload):
    for name, network in workload.trainer.networks.items():
        variables = network.trainable_variables
        for form in ("keras", "grouped"):
            graph = _apply_function(variables, form).get_concrete_function(
                [tf.TensorSpec(v.shape) for v in variables]
            ).graph
            count = sum(op.type not in ("Placeholder", "Const", "NoOp", "Identity") for op in graph.get_operations())
            print(f"ops {name} {form}: {count} for {len(variables)} variables")


def xla_bits():
    rng = np.random.default_rng(0)
    n = 2_000_003

    adam = keras.optimizers.Adam()

    def arithmetic(g, m, v, value, alpha):
        return update_forms._adam_new_values(adam, g, m, v, value, alpha)

    plain, xla = tf.function(arithmetic), tf.function(arithmetic, jit_compile=True)
    for _ in range(5):
        g = (rng.standard_normal(n) * 10.0 ** rng.uniform(-10, 3, n)).astype(np.float32)
        m = (rng.standard_normal(n) * 10.0 ** rng.uniform(-10, 1, n)).astype(np.float32)
        v = (np.abs(rng.standard_normal(n)) * 10.0 ** rng.uniform(-20, 1, n)).astype(np.float32)
        value = rng.standard_normal(n).astype(np.float32)
        alpha = tf.constant(np.float32(rng.uniform(1e-5, 1e-2)))
        a = [x.numpy() for x in plain(g, m, v, value, alpha)]
        b = [x.numpy() for x in xla(g, m, v, value, alpha)]
        differ = [f"{np.mean(x.view(np.int32) != y.view(np.int32)):.1%}" for x, y in zip(a, b)]
        print("xla: values that differ (first moment, second moment, variable):", ", ".join(differ))
    args = [tf.constant(x) for x in (g, m, v, value)] + [alpha]
    for name, function in (("plain", plain), ("xla", xla)):
        for _ in range(3):
            function(*args)[0].numpy()
        start = time.perf_counter()
        for _ in range(20):
            out = function(*args)
        out[2].numpy()
        print(f"xla: {name} {(time.perf_counter() - start) / 20e-3:.2f} ms for {n} values")


def fused():
    rng = np.random.default_rng(0)
    n = 100_003
    gradient = tf.constant(rng.standard_normal(n).astype(np.float32))
    initial = rng.standard_normal(n).astype(np.float32)
    keras_variable, optimizer = keras.Variable(initial), keras.optimizers.Adam(1e-3)
    optimizer.build([keras_variable])
    variable, m, v = tf.Variable(initial), tf.Variable(np.zeros(n, np.float32)), tf.Variable(np.zeros(n, np.float32))
    for t in (1.0, 2.0):
        optimizer.apply([gradient], [keras_variable])
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(0.9, t), beta2_power=tf.pow(0.999, t),
            lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-7, grad=gradient,
        )
    first_moment = optimizer.variables[1].numpy()
    print(f"fused: ResourceApplyAdam against Keras's Adam after 2 steps: "
          f"{np.mean(first_moment.view(np.int32) != m.numpy().view(np.int32)):.1%} of the first moments and "
          f"{np.mean(keras_variable.numpy().view(np.int32) != variable.numpy().view(np.int32)):.1%} of the values differ")


def step(workload):
    dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
    drivers = {
        "hand-written": timing.hand_written_driver(workload, dataset, 3),
        "trainer": timing.trainer_driver(workload, dataset, (128,), 3, True),
    }
    for _ in range(3):
        for name, driver in drivers.items():
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            driver.run(10)
            after, wall = resource.getrusage(resource.RUSAGE_SELF), (time.perf_counter() - start) / 10
            cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / 10
            print(f"step {name:12s}: wall {1000 * wall:6.1f} ms, cpu {1000 * cpu:6.1f} ms ({cpu / wall:.2f} cores)")


def _op_events(driver, steps=3):
    """(start ms, end ms, op name) of every op the profiler saw while `driver` ran `steps` steps."""
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            driver.run(1)
        tf.profiler.experimental.stop()
        space = _compat.xplane_pb2.XSpace()
        with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    events = []
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    start = line.timestamp_ns * 1000 + event.offset_ps
                    if ":" in name and not name.startswith("$"):
                        events.append((start / 1e9, (start + event.duration_ps) / 1e9, name))
    return sorted(events)


def profile(workload):
    dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
    drivers = {
        "hand-written": timing.hand_written_driver(workload, dataset, 3),
        "trainer": timing.trainer_driver(workload, dataset, (128,), 3, True),
    }
    for name, driver in drivers.items():
        events = _op_events(driver)  # the last step ends last
        step_end = max(e[1] for e in events)
        last_gradient = max(e[1] for e in events if "Grad" in e[2] or "Backprop" in e[2] or "gradient" in e[2])
        tail = [e for e in events if e[0] >= last_gradient]
        updates = [e for e in tail if "adam" in e[2].lower() or "Assign" in e[2]]
        print(f"profile {name:12s}: the last step ends {step_end - last_gradient:5.1f} ms after its last gradient op, "
              f"{len(updates)} update ops in that tail")


def main():
    parts = sys.argv[1:] or ["update", "ops", "xla", "step", "fused", "profile"]
    workload = _workload()
    for part in parts:
        {"update": lambda: update(workload), "ops": lambda: op_counts(workload), "xla": xla_bits, "fused": fused,
         "step": lambda: step(workload), "profile": lambda: profile(workload)}[part]()


if __name__ == "__main__":
    main()
