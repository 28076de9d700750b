"""Tests for tfmp/_api_style.py: which loss-scaling API a step used, and what tfmp says about it."""

import contextlib
import threading
import warnings
from unittest import mock

import pytest
import tensorflow as tf
from tf_keras.src.mixed_precision import loss_scale_optimizer as tf_keras_lso

from tfmp import _api_style as style
from tfmp._api_style import GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS, SCALE_LOSS


@contextlib.contextmanager
def _tf_log():
    """Collects the messages warned through TensorFlow's logger (where tf.keras 2 warned)."""
    with mock.patch.object(tf.get_logger(), "warning") as warning:
        messages = []
        warning.side_effect = lambda message, *args, **kwargs: messages.append(message % args if args else message)
        yield messages


def _end_step(api, grads=(), name="opt", entry=style.APPLY_GRADIENTS):
    """Runs `api.end_step`; returns the step, the TF log lines and the RuntimeWarnings."""
    with _tf_log() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = api.end_step(list(grads), name, entry)
    return step, log, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def _api(*calls):
    api = style.ApiStyle()
    for call in calls:
        api.note(call)
    return api


# -- naming the flow --------------------------------------------------------------------------

_CASES = [
    # seen, whether the applied gradients are get_unscaled_gradients' inputs, flow, unscale
    ((), False, "none", False),
    ((SCALE_LOSS,), False, "keras3", True),
    ((GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS), False, "tf_keras2", False),
    ((GET_SCALED_LOSS,), False, "tf_keras2_scaled_only", False),
    ((GET_UNSCALED_GRADIENTS,), False, "tf_keras2_unscaled_only", False),
    ((SCALE_LOSS, GET_UNSCALED_GRADIENTS), False, "mixed_unscaled", False),
    ((SCALE_LOSS, GET_SCALED_LOSS), False, "mixed_scaled", True),
    ((GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS), True, "scaled_inputs", True),
    ((SCALE_LOSS, GET_UNSCALED_GRADIENTS), True, "scaled_inputs", True),
]


def test_the_cases_cover_every_flow():
    assert {case[2] for case in _CASES} == set(style.FLOWS)


@pytest.mark.parametrize("seen, applies_inputs, flow, unscale", _CASES)
def test_flow_of_names_each_flow(seen, applies_inputs, flow, unscale):
    scaled_grad, unscaled_grad = object(), object()
    calls = style.StepCalls()
    calls.seen.update(seen)
    if GET_UNSCALED_GRADIENTS in seen:
        calls.scaled.append(scaled_grad)
        calls.unscaled.append(unscaled_grad)
    applied = [scaled_grad if applies_inputs else unscaled_grad]
    assert style.flow_of(calls, applied) == flow
    assert style.FLOWS[flow].unscale is unscale


def test_none_gradients_are_not_taken_for_scaled_inputs():
    calls = style.StepCalls()
    calls.seen.update((GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS))
    calls.scaled.append(None)
    calls.unscaled.append(None)
    assert style.flow_of(calls, [None]) == "tf_keras2"


def test_gradients_returned_as_given_are_not_taken_for_scaled_inputs():
    # At the fixed scale 1 (a skip-only optimizer) get_unscaled_gradients returns the very gradients it was given.
    calls, grad = style.StepCalls(), object()
    calls.seen.update((GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS))
    calls.scaled.append(grad)
    calls.unscaled.append(grad)
    assert style.flow_of(calls, [grad]) == "tf_keras2"


@pytest.mark.parametrize("seen, applies_inputs, flow, unscale", _CASES)
def test_end_step_returns_the_flow_of_the_noted_calls(seen, applies_inputs, flow, unscale):
    api = style.ApiStyle()
    scaled_grad, unscaled_grad = object(), object()
    for call in seen:
        if call == GET_UNSCALED_GRADIENTS:
            api.note(call, scaled=[scaled_grad], unscaled=[unscaled_grad])
        else:
            api.note(call)
    step, _, _ = _end_step(api, [scaled_grad if applies_inputs else unscaled_grad])
    assert (step.flow, step.unscale, step.calls.seen) == (flow, unscale, set(seen))


@pytest.mark.parametrize("traced", [False, True])
def test_end_step_takes_the_calls_away(traced):
    api = style.ApiStyle()
    flows = []

    def two_applies():
        api.note(SCALE_LOSS)
        flows.extend(_end_step(api)[0].flow for _ in range(2))
        return tf.constant(0.0)

    (tf.function(two_applies) if traced else two_applies)()
    assert flows == ["keras3", "none"]


def test_handed_back_gives_kept_entries_their_input():
    calls = style.StepCalls()
    a, b, ua, ub = object(), object(), object(), object()
    calls.scaled.extend([a, b, None])
    calls.unscaled.extend([ua, ub, None])
    assert calls.handed_back([ua, ub, None], [False, True, True]) == [ua, b, None]


# -- tf.keras 2's warnings, character for character -------------------------------------------


def _tf_keras2_logged(loss_has_been_scaled, gradients_have_been_unscaled):
    with _tf_log() as log:
        tf_keras_lso._maybe_warn_about_scaling(loss_has_been_scaled, gradients_have_been_unscaled)
    return log


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)])
def test_tf_keras2_warning_is_tf_keras2s_text(flags):
    ours = style.tf_keras2_warning(*flags)
    assert _tf_keras2_logged(*flags) == ([] if ours is None else [ours])


@pytest.mark.parametrize(
    "calls, flags",
    [((GET_SCALED_LOSS,), (True, False)), ((GET_UNSCALED_GRADIENTS,), (False, True))],
)
def test_a_half_tf_keras2_step_logs_tf_keras2s_warning(calls, flags):
    api = _api(*calls)
    assert (api.loss_has_been_scaled, api.gradients_have_been_unscaled) == flags
    _, log, runtime = _end_step(api)
    assert log == _tf_keras2_logged(*flags) and len(log) == 1
    assert runtime == []


def test_tf_keras2_flags_are_sticky_as_in_tf_keras2():
    api = _api(GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS)
    assert _end_step(api)[1:] == ([], [])
    api.note(GET_SCALED_LOSS)  # forgets get_unscaled_gradients, but called it once before
    step, log, runtime = _end_step(api)
    assert (step.flow, log, runtime) == ("tf_keras2_scaled_only", [], [])


# -- tfmp's own warnings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "seen, applies_inputs, expected",
    [
        (
            (),
            False,
            "LossScaleOptimizer 'opt': apply_gradients() saw no scale_loss() (Keras 3), "
            "get_scaled_loss() or get_unscaled_gradients() (tf.keras 2) call in this step, "
            "so nothing says whether the gradients are scaled. tfmp applies them as given",
        ),
        (
            (SCALE_LOSS, GET_UNSCALED_GRADIENTS),
            True,
            "LossScaleOptimizer 'opt': apply_gradients() received the very gradients that went into "
            "get_unscaled_gradients() (still scaled), not its output. tfmp divides them by the loss scale once",
        ),
        (
            (SCALE_LOSS, GET_UNSCALED_GRADIENTS),
            False,
            "LossScaleOptimizer 'opt': this step mixed the Keras 3 and tf.keras 2 loss-scaling APIs: "
            "apply_gradients() saw scale_loss() (Keras 3) and get_unscaled_gradients() (tf.keras 2). tfmp applies "
            "the gradients as given, not divided by the loss scale. Use one API",
        ),
        (
            (SCALE_LOSS, GET_SCALED_LOSS),
            False,
            "LossScaleOptimizer 'opt': this step mixed the Keras 3 and tf.keras 2 loss-scaling APIs: "
            "apply_gradients() saw scale_loss() (Keras 3) and get_scaled_loss() (tf.keras 2), without "
            "get_unscaled_gradients(). tfmp divides the gradients by the loss scale. Use one API",
        ),
    ],
)
def test_unclear_and_mixed_steps_warn_at_the_callers_line(seen, applies_inputs, expected):
    api = style.ApiStyle()
    grad = object()
    for call in seen:
        api.note(call, **({"scaled": [grad], "unscaled": [object()]} if call == GET_UNSCALED_GRADIENTS else {}))
    _, log, runtime = _end_step(api, [grad if applies_inputs else object()])
    assert [str(w.message)[: len(expected)] for w in runtime] == [expected]
    assert runtime[0].filename == __file__  # not _api_style.py: the frame that called end_step
    assert log == []


def test_the_clean_flows_do_not_warn_even_when_switching():
    api = style.ApiStyle()
    for call in (SCALE_LOSS, GET_SCALED_LOSS, SCALE_LOSS):
        if call == GET_SCALED_LOSS:
            api.note(call)
            api.note(GET_UNSCALED_GRADIENTS)
        else:
            api.note(call)
        assert _end_step(api)[1:] == ([], [])


def test_a_change_of_treatment_between_steps_warns():
    api = _api(SCALE_LOSS)
    _end_step(api)
    _, _, runtime = _end_step(api)  # no call: applied as given, after a divided step
    texts = [str(w.message) for w in runtime]
    assert len(texts) == 2 and "nothing says" in texts[0]
    assert texts[1].startswith(
        "LossScaleOptimizer 'opt' changed how it treats gradients: the previous apply_gradients() saw "
        "scale_loss() and divided them by the loss scale; this one saw no scale_loss(), get_scaled_loss() or "
        "get_unscaled_gradients() call and applied them as given."
    )
    # The same treatment again: only the step's own warning.
    assert ["nothing says" in str(w.message) for w in _end_step(api)[2]] == [True]


# -- the entry: apply() divides unless the gradients come out of get_unscaled_gradients -------


@pytest.mark.parametrize("seen, applies_inputs, flow, unscale", _CASES)
def test_through_apply_only_get_unscaled_gradients_output_is_applied_as_given(seen, applies_inputs, flow, unscale):
    api = style.ApiStyle()
    scaled_grad, unscaled_grad = object(), object()
    for call in seen:
        api.note(
            call, **({"scaled": [scaled_grad], "unscaled": [unscaled_grad]} if call == GET_UNSCALED_GRADIENTS else {})
        )
    step, _, _ = _end_step(api, [scaled_grad if applies_inputs else unscaled_grad], entry=style.APPLY)
    assert step.flow == flow
    assert step.unscale is (unscale or GET_UNSCALED_GRADIENTS not in seen)


def test_apply_without_a_scaling_call_divides_and_says_so():
    step, log, runtime = _end_step(_api(), entry=style.APPLY)
    assert (step.flow, step.unscale, log) == ("none", True, [])
    assert [str(w.message) for w in runtime] == [
        "LossScaleOptimizer 'opt': apply() saw no scale_loss() (Keras 3), get_scaled_loss() or "
        "get_unscaled_gradients() (tf.keras 2) call in this step, so nothing says whether the gradients are "
        "scaled. tfmp divides them by the loss scale, as Keras 3's apply() does. If they are gradients of a "
        "scale_loss() result, call scale_loss() in the same tf.function (or eagerly) as apply(); if of an unscaled "
        "loss, scale the loss, or the update is the loss scale times too small."
    ]


def test_a_change_of_entry_that_changes_the_treatment_warns():
    api = style.ApiStyle()
    _end_step(api, entry=style.APPLY)  # no call, divided
    _, _, runtime = _end_step(api)  # no call, applied as given
    texts = [str(w.message) for w in runtime]
    assert len(texts) == 2 and "tfmp applies them as given" in texts[0]
    assert texts[1].startswith(
        "LossScaleOptimizer 'opt' changed how it treats gradients: the previous apply() saw no scale_loss(), "
        "get_scaled_loss() or get_unscaled_gradients() call and divided them by the loss scale; this "
        "apply_gradients() saw no scale_loss(), get_scaled_loss() or get_unscaled_gradients() call and applied "
        "them as given."
    )
    # apply() after scale_loss() treats gradients as apply() without a call does: only the step's own warning.
    api.note(SCALE_LOSS)
    _end_step(api, entry=style.APPLY)
    assert ["nothing says" in str(w.message) for w in _end_step(api, entry=style.APPLY)[2]] == [True]


# -- contexts: eager, each outermost trace, each thread ---------------------------------------


def test_a_traced_step_decides_once_per_trace():
    api = style.ApiStyle()
    flows = []

    @tf.function
    def step(x):
        flows.append(api.end_step([x], "opt").flow)  # no call: warns, at trace time only
        return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            step(tf.constant(1.0))
        assert flows == ["none"]
        step(tf.constant([1.0, 2.0]))  # a new input shape: a new trace decides again
    assert flows == ["none", "none"]
    assert sum("nothing says" in str(w.message) for w in caught) == 2


def test_calls_in_a_trace_are_not_seen_eagerly_and_the_reverse():
    api = _api(SCALE_LOSS)  # eager
    traced = []

    @tf.function
    def scale_only():
        api.note(GET_SCALED_LOSS)
        return tf.constant(0.0)

    @tf.function
    def apply_only():
        traced.append(_end_step(api)[0].flow)
        return tf.constant(0.0)

    scale_only()
    apply_only()
    assert traced == ["none"]
    assert _end_step(api)[0].flow == "keras3"


def test_a_nested_trace_belongs_to_the_outermost_one():
    api = style.ApiStyle()
    flows = []
    inner = tf.function(lambda x: (api.note(SCALE_LOSS), x * 2.0)[1])

    @tf.function
    def outer(x):
        y = inner(x)
        flows.append(_end_step(api)[0].flow)
        return y

    outer(tf.constant(1.0))
    assert flows == ["keras3"]


def test_each_thread_has_its_own_calls():
    api = _api(SCALE_LOSS)
    flows = []

    def replica():
        api.note(GET_SCALED_LOSS)
        api.note(GET_UNSCALED_GRADIENTS)
        flows.append(_end_step(api)[0].flow)

    thread = threading.Thread(target=replica)
    thread.start()
    thread.join()
    assert flows == ["tf_keras2"]
    assert _end_step(api)[0].flow == "keras3"
