"""Counts the op types of the trainer's traced step and of the benchmark's hand-written step, and prints the difference.

Each function body (the step, a cond's branches) is counted once. Issue 23:
what the trainer's step adds over the hand-written one for MobileNetV2.

    python3 docs/investigations/skip_gate/op_census.py [float32|mixed_bfloat16]
"""

import collections
import inspect
import sys

import keras
import tensorflow as tf

from tfmp.run.benchmark import settings
from tfmp.run.benchmark import workload as workload_lib


def _tf_function(fn, depth=0):
    """The tf.function behind Keras's `train_function` wrapper (found in its closure)."""
    if hasattr(fn, "get_concrete_function"):
        return fn
    closure = inspect.getclosurevars(fn)
    for value in [*closure.nonlocals.values(), *closure.globals.values()]:
        if depth < 3 and (hasattr(value, "get_concrete_function") or inspect.isfunction(value)):
            found = _tf_function(value, depth + 1)
            if found is not None:
                return found
    return None


def census(fn, *args):
    counts, seen = collections.Counter(), set()

    def walk(graph):
        counts.update(op.type for op in graph.get_operations())
        for name, function in graph._functions.items():
            if name not in seen:
                seen.add(name)
                walk(function.graph)

    walk(fn.get_concrete_function(*args).graph)
    return counts


def main():
    precision = sys.argv[1] if len(sys.argv) > 1 else "float32"
    keras.config.set_dtype_policy(precision)
    workload = workload_lib.build_workload(settings.default_specs()["mobilenet_v2"], precision, False, steps=100)
    dataset = tf.data.Dataset.from_tensors(workload.batch).repeat()
    trainer = workload.trainer
    trainer.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    iterator = iter(trainer.distribute_strategy.experimental_distribute_dataset(dataset))
    ours = census(_tf_function(trainer.train_function), iterator)
    theirs = census(workload.hand_written_step, workload.batch)
    print(f"{precision}: trainer {sum(ours.values())} ops, hand-written {sum(theirs.values())}")
    for op in sorted(set(ours) | set(theirs), key=lambda op: -abs(ours[op] - theirs[op])):
        if ours[op] != theirs[op]:
            print(f"  {op:24s} trainer {ours[op]:5d}  hand-written {theirs[op]:5d}  ({ours[op] - theirs[op]:+d})")


if __name__ == "__main__":
    main()
