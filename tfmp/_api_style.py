"""Which loss-scaling API a step used, for `tfmp.LossScaleOptimizer`, and its warnings.

tf.keras 2's `apply_gradients` applies gradients as given (the caller unscales
them with `get_unscaled_gradients`); Keras 3's `apply` divides them by the
scale itself. The same gradients must not get both treatments, so each update
looks at the scaling calls made since the previous one *in the same context*:
eagerly, or while tracing the same outermost `tf.function` (Python calls, so
the decision is made once per trace). With no scaling call, the method decides:
`apply()` divides, as Keras 3's does; `apply_gradients()` does not, as tf.keras 2's.

The optimizer `note`s each scaling call on an `ApiStyle`, and at each update
asks `end_step`, which names the step's flow (a key of `FLOWS`), warns where
needed and says whether to divide the gradients.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
import tensorflow as tf

SCALE_LOSS = "scale_loss"  # Keras 3
GET_SCALED_LOSS = "get_scaled_loss"  # tf.keras 2
GET_UNSCALED_GRADIENTS = "get_unscaled_gradients"  # tf.keras 2
APPLY, APPLY_GRADIENTS = "apply", "apply_gradients"  # the two ways into an update


class Flow(NamedTuple):
    seen: str  # what the step called, for messages
    unscale: bool  # whether apply_gradients() divides the gradients by the scale


FLOWS = {
    "keras3": Flow("scale_loss()", True),
    "tf_keras2": Flow("get_scaled_loss() and get_unscaled_gradients()", False),
    "tf_keras2_scaled_only": Flow("get_scaled_loss() without get_unscaled_gradients()", False),
    "tf_keras2_unscaled_only": Flow("get_unscaled_gradients() without get_scaled_loss()", False),
    "none": Flow("no scale_loss(), get_scaled_loss() or get_unscaled_gradients() call", False),
    "mixed_unscaled": Flow("scale_loss() (Keras 3) and get_unscaled_gradients() (tf.keras 2)", False),
    "mixed_scaled": Flow(
        "scale_loss() (Keras 3) and get_scaled_loss() (tf.keras 2), without get_unscaled_gradients()", True
    ),
    "scaled_inputs": Flow("the very gradients that went into get_unscaled_gradients()", True),
}
# The two complete, unambiguous flows: switching between them is not a mistake.
CLEAN_FLOWS = ("keras3", "tf_keras2")

# tfmp's warning about a step of each unclear flow, and of any other mixed one ("mixed").
_WARNINGS = {
    "none": "{entry}() saw no scale_loss() (Keras 3), get_scaled_loss() or get_unscaled_gradients() (tf.keras 2) call "
    "in this step, so nothing says whether the gradients are scaled. tfmp {does}{why}. If they are gradients of a "
    "scale_loss() result, call scale_loss() in the same tf.function (or eagerly) as {entry}(); if of an unscaled loss, "
    "scale the loss, or {risk}.",
    "scaled_inputs": "{entry}() received the very gradients that went into get_unscaled_gradients() (still scaled), "
    "not its output. tfmp divides them by the loss scale once, as Keras 3 does (tf.keras 2 would have applied them "
    "scaled). Apply the output of get_unscaled_gradients(), or use scale_loss() without it.",
    "mixed": "this step mixed the Keras 3 and tf.keras 2 loss-scaling APIs: {entry}() saw {seen}. tfmp {does}. Use "
    "one API: Keras 3 (scale_loss(), then apply() or apply_gradients() divides) or tf.keras 2 (get_scaled_loss(), "
    "get_unscaled_gradients(), then apply_gradients()).",
}
# What fills them in, by whether the step divides the gradients: what tfmp does, and for a step with no call, why
# and the risk.
_DOES = {True: "divides {} by the loss scale", False: "applies {} as given, not divided by the loss scale"}
_WHY = {True: ", as Keras 3's apply() does", False: " (tf.keras 2's behaviour; Keras 3 divides)"}
_RISK = {True: "the update is the loss scale times too small", False: "float16 gradients may underflow"}
_DID = {True: "divided them by the loss scale", False: "applied them as given"}


class StepCalls:
    """The scaling calls one context made since its last update."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        # Inputs and outputs of get_unscaled_gradients, by position.
        self.scaled: list[Any] = []
        self.unscaled: list[Any] = []

    def handed_back(self, grads: Sequence[Any], keep: Sequence[bool]) -> list[Any]:
        """`grads`, with each `keep` entry that get_unscaled_gradients returned replaced by its input.

        get_unscaled_gradients divides every gradient, but a variable with
        `overwrite_with_gradient` gets the value it was handed, as in Keras 3.
        """
        originals = {id(u): s for u, s in zip(self.unscaled, self.scaled) if u is not None}
        return [originals.get(id(g), g) if kept and g is not None else g for g, kept in zip(grads, keep)]


class Decision(NamedTuple):
    """What `ApiStyle.end_step` decided about one update."""

    flow: str  # a key of FLOWS
    unscale: bool  # whether the update divides the gradients by the scale
    calls: StepCalls


def flow_of(calls: StepCalls, grads: Sequence[Any]) -> str:
    """Names the flow of a step that made `calls` and applies `grads` (a key of `FLOWS`)."""
    # A gradient get_unscaled_gradients returned as it was given (at the fixed scale 1) is not still scaled.
    scaled_ids = {id(s) for s, u in zip(calls.scaled, calls.unscaled) if s is not None and s is not u}
    if any(id(g) in scaled_ids for g in grads if g is not None):
        return "scaled_inputs"
    if SCALE_LOSS in calls.seen and GET_UNSCALED_GRADIENTS in calls.seen:
        return "mixed_unscaled"
    if SCALE_LOSS in calls.seen:
        return "mixed_scaled" if GET_SCALED_LOSS in calls.seen else "keras3"
    if GET_UNSCALED_GRADIENTS in calls.seen:
        return "tf_keras2" if GET_SCALED_LOSS in calls.seen else "tf_keras2_unscaled_only"
    return "tf_keras2_scaled_only" if GET_SCALED_LOSS in calls.seen else "none"


def _outermost_graph() -> tf.Graph:
    """The outermost graph being traced: nested tf.functions and control-flow branches belong to its step."""
    graph = tf.compat.v1.get_default_graph()
    while getattr(getattr(graph, "outer_graph", None), "building_function", False):
        graph = graph.outer_graph
    return graph


_TF_KERAS2_EXAMPLE = """
    with tf.GradientTape() as tape:
      loss = loss_fn()
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, vars)
    grads = opt.get_unscaled_gradients(scaled_grads)
    opt.apply_gradients([(grads, var)])"""


def tf_keras2_warning(loss_has_been_scaled: bool, gradients_have_been_unscaled: bool) -> str | None:
    """Returns the warning tf.keras 2's `apply_gradients` logged, or None.

    The text of `_maybe_warn_about_scaling` in
    tf_keras/src/mixed_precision/loss_scale_optimizer.py (tf_keras 2.21),
    character for character. As there, the two flags say whether
    `get_scaled_loss` / `get_unscaled_gradients` were *ever* called on the
    optimizer. At least one was: a step that called neither gets tfmp's own
    warning instead.
    """
    if loss_has_been_scaled and gradients_have_been_unscaled:
        return None
    calls = (GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS)
    did, forgot = calls if loss_has_been_scaled else reversed(calls)
    return (
        f"You forgot to call LossScaleOptimizer.{forgot}() before calling LossScaleOptimizer.apply_gradients() "
        f"(you did call {did}() however). This will likely result in worse model quality, so please call "
        f"{forgot}() in the correct place! For example:{_TF_KERAS2_EXAMPLE}\nFor more information, see "
        "https://www.tensorflow.org/api_docs/python/tf/tf_keras/mixed_precision/LossScaleOptimizer"
    )


# tfmp's own frames are skipped along with Keras's and TensorFlow's, so that a warning points at the user's line.
_INTERNAL_FOLDERS = tuple(os.path.dirname(path) + os.sep for path in (keras.__file__, tf.__file__, __file__))


def _warn(message: str) -> None:
    """Issues a `RuntimeWarning` attributed to the first frame outside tfmp, Keras and TensorFlow."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_FOLDERS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RuntimeWarning, stacklevel=level)


class ApiStyle:
    """One optimizer's record of the scaling calls of its steps.

    Calls are kept per thread (tf.distribute runs each replica in a thread of
    its own) and per context (eager, or the outermost graph being traced).
    """

    def __init__(self) -> None:
        self._local = threading.local()
        # tf.keras 2's flags: whether get_scaled_loss / get_unscaled_gradients
        # were ever called. Only its warnings depend on them.
        self.loss_has_been_scaled = self.gradients_have_been_unscaled = False
        self._last: tuple[str, bool, str] | None = None  # the previous update's flow, unscale and entry

    def note(self, call: str, scaled: Sequence[Any] = (), unscaled: Sequence[Any] = ()) -> None:
        """Records a scaling call: `SCALE_LOSS`, `GET_SCALED_LOSS` or `GET_UNSCALED_GRADIENTS`.

        For get_unscaled_gradients, `scaled` are the gradients it was given and
        `unscaled` those it returned: the update tells them apart, and gives
        overwrite_with_gradient variables their inputs.
        """
        self.loss_has_been_scaled |= call == GET_SCALED_LOSS
        self.gradients_have_been_unscaled |= call == GET_UNSCALED_GRADIENTS
        calls = self._calls()
        calls.seen.add(call)
        calls.scaled.extend(scaled)
        calls.unscaled.extend(unscaled)

    def end_step(self, grads: Sequence[Any], optimizer_name: str, entry: str = APPLY_GRADIENTS) -> Decision:
        """Takes the calls noted since the last update in this context and returns the `Decision`.

        `entry` is the method the update came through (`APPLY` or `APPLY_GRADIENTS`). Warns as
        tf.keras 2 did, or with a `RuntimeWarning` where the flow is unclear, mixed, or treats
        gradients differently from the last step.
        """
        calls = self._calls(pop=True)
        flow = flow_of(calls, grads)
        # Keras 3's apply() takes scaled gradients: only get_unscaled_gradients()' output is known not to be.
        unscale = FLOWS[flow].unscale or (entry == APPLY and GET_UNSCALED_GRADIENTS not in calls.seen)
        self._report(flow, unscale, entry, optimizer_name)
        return Decision(flow, unscale, calls)

    def _calls(self, pop: bool = False) -> StepCalls:
        """This thread's calls in the current context; `pop` takes them away."""
        # Weak keys: a trace that scales a loss but never applies does not
        # keep its graph alive (unless it holds its gradients).
        contexts = self._local.__dict__.setdefault("contexts", weakref.WeakKeyDictionary())
        context = self if tf.executing_eagerly() else _outermost_graph()  # eager calls: keyed by the record itself
        return (contexts.pop(context, None) or StepCalls()) if pop else contexts.setdefault(context, StepCalls())

    def _report(self, flow: str, unscale: bool, entry: str, name: str) -> None:
        if flow.startswith("tf_keras2") and not unscale:
            if message := tf_keras2_warning(self.loss_has_been_scaled, self.gradients_have_been_unscaled):
                tf.get_logger().warning(message)
        elif flow != "keras3":
            kind = flow if flow in _WARNINGS else "mixed"
            does = _DOES[unscale].format("them" if kind == "none" else "the gradients")
            fill = dict(does=does, why=_WHY[unscale], risk=_RISK[unscale], seen=FLOWS[flow].seen, entry=entry)
            _warn(f"LossScaleOptimizer '{name}': " + _WARNINGS[kind].format(**fill))
        last, self._last = self._last, (flow, unscale, entry)
        if last is not None and last[1] != unscale and not (last[0] in CLEAN_FLOWS and flow in CLEAN_FLOWS):
            this = "this one" if last[2] == entry else f"this {entry}()"
            _warn(
                f"LossScaleOptimizer '{name}' changed how it treats gradients: the previous {last[2]}() saw "
                f"{FLOWS[last[0]].seen} and {_DID[last[1]]}; {this} saw {FLOWS[flow].seen} and {_DID[unscale]}. "
                "Scaling calls are only seen in the context of the update (eagerly, or in the same tf.function "
                f"trace): keep them in the same function as {entry}()."
            )
