"""What a checkpoint must hold of a trainer that its object graph does not give: the seed generators'
states, and the variables the graph cannot reach."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import keras
import tensorflow as tf

__all__ = ["seed_generator_states", "unreachable"]


def seed_generator_states(trainer: Any) -> dict[str, Any]:
    """The states of the `keras.random.SeedGenerator`s the trainer's layers hold, nested by where they are held.

    Keras 3's seed generators are plain Python objects, not TensorFlow
    trackables, so `tf.train.Checkpoint` does not follow a layer's attribute
    to one. This walks the trainer's object graph (`tf.train.TrackableView`,
    breadth first, as the checkpoint does) and names each generator by the
    path of the layer holding it and its attribute: the GAN trainer's
    `noise_seed` is `{"noise_seed": state}`, a Dropout layer's generator
    `{"discriminator": {"_operations": {"3": {"seed_generator": state}}}}`.
    A generator kept in a list or tuple attribute is named by its index in it.

    Returns:
        Nested dicts whose leaves are the generators' state variables.
    """
    states: dict[str, Any] = {}
    seen: set[int] = set()

    def add(path: list[str], state: Any) -> None:
        node = states
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = state

    paths = {id(trainer): []}
    queue = collections.deque([trainer])
    while queue:
        obj = queue.popleft()
        if isinstance(obj, keras.layers.Layer):
            attributes = list(vars(obj).items())
            # Direct attributes first: Keras also lists a layer's generators in a private list.
            found = [([name], value) for name, value in attributes]
            found += [
                ([name, str(i)], item)
                for name, value in attributes
                if isinstance(value, (list, tuple))
                for i, item in enumerate(value)
            ]
            for names, value in found:
                if isinstance(value, keras.random.SeedGenerator) and id(value) not in seen:
                    seen.add(id(value))
                    add(paths[id(obj)] + names, value.state)
        for name, child in tf.train.TrackableView.children(obj).items():
            if id(child) not in paths:
                paths[id(child)] = paths[id(obj)] + [name]
                queue.append(child)
    return states


def unreachable(checkpoint: tf.train.Checkpoint, variables: Iterable[Any]) -> list[Any]:
    """The `variables` that `checkpoint` does not reach, so would neither save nor restore.

    What a save writes is the variables among the checkpoint's descendants
    (`tf.train.TrackableView.descendants`, the object graph it walks): this
    compares identities against them, without writing anything.
    """
    reachable = {id(node) for node in tf.train.TrackableView(checkpoint).descendants()}
    return [v for v in variables if id(v) not in reachable]
