"""Graceful stops: SIGTERM or SIGINT finish the step, then checkpoint and exit.

Cluster schedulers preempt jobs with SIGTERM (and a grace period), and people
press Ctrl-C. `PreemptionGuard` turns either signal into a request that the
training loop honours between steps (`tfmp.run.callbacks.Checkpointing` checks
it): the current step finishes, a checkpoint is written, and `Preempted` is
raised with where the checkpoint is and how to resume, in the settings'
terms (`resume=True`; the scripts say it with their flags). A second signal
while that happens is passed to the previous handler, so a second Ctrl-C
still interrupts at once.

Under `MultiWorkerMirroredStrategy` a signal reaches one worker, not the
others, so a worker's own request is not enough: after every step each
worker contributes the signal it has received (0 for none) to one small
collective (`ClusterStop`, an all-gather), and every worker gets every
worker's answer at the same step. When any worker has one, all of them save
at that step (the chief into the run's checkpoint directory) and raise
`Preempted` with `exit_code` `CLUSTER_EXIT_CODE` (75), naming the worker that
was signalled. A worker that dies instead (SIGKILL, out of memory) cannot
take part: the others' next collective fails once TensorFlow's coordination
service misses its heartbeats for the run's `worker_timeout`, and
`worker_lost` turns that error into `WorkerLost` (`WORKER_LOST_EXIT_CODE`,
69) naming the missing worker and the newest checkpoint to resume from.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

import tensorflow as tf

__all__ = [
    "CLUSTER_EXIT_CODE",
    "SIGNALS",
    "WORKER_LOST_EXIT_CODE",
    "ClusterStop",
    "Preempted",
    "PreemptionGuard",
    "WorkerLost",
    "worker_lost",
    "worker_names",
]

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Every worker of a multi-worker run stopped together after saving at the same step (sysexits' EX_TEMPFAIL:
# a temporary failure, try again: restart every worker with resume).
CLUSTER_EXIT_CODE = 75
# A multi-worker run lost a worker (sysexits' EX_UNAVAILABLE); the newest checkpoint is intact.
WORKER_LOST_EXIT_CODE = 69


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# How a message names a setting: `(setting, value)` -> text; the value None names the setting alone.
Namer = Callable[..., str]


def setting_name(setting: str, value: Any = None) -> str:
    """A setting as the library's messages name it: `resume=True`, `worker_timeout=5`, `run_name`."""
    return setting if value is None else f"{setting}={value}"


class Preempted(RuntimeError):
    """Training stopped on a signal after writing a checkpoint.

    Attributes:
        signum: The signal received (in a cluster: the first signalled
            worker's).
        step: Training steps done (and saved).
        checkpoint: The checkpoint written (in a cluster: the run's, which
            the chief wrote and every worker resumes from).
        signalled: In a multi-worker run, each signalled worker's name
            (`worker_names`) and its signal; None on one host.
        exit_code: On one host the conventional exit status, 128 + the
            signal number; in a multi-worker run `CLUSTER_EXIT_CODE` on
            every worker, signalled or not.
    """

    def __init__(self, signum: int, step: int, checkpoint: str, signalled: Mapping[str, int] | None = None):
        self.signum = signum
        self.step = step
        self.checkpoint = checkpoint
        self.signalled = dict(signalled) if signalled is not None else None
        self.exit_code = 128 + int(signum) if self.signalled is None else CLUSTER_EXIT_CODE
        super().__init__(self.render(setting_name))

    def render(self, name: Namer) -> str:
        """The message, each setting called `name(setting, value)` (the scripts pass their flags)."""
        again = f"{name('resume', True)} (and the same {name('run_name')})"
        if self.signalled is None:
            return (
                f"training stopped by {_signal_name(self.signum)} after step {self.step}; checkpoint written to "
                f"{self.checkpoint}. To resume, start the run again with {again}."
            )
        who = ", ".join(f"{worker} received {_signal_name(number)}" for worker, number in self.signalled.items())
        return (
            f"training stopped after step {self.step}: {who}, so every worker saved its state at step {self.step} "
            f"and stopped; the run's checkpoint is {self.checkpoint}. To resume, start every worker again with "
            f"{again}."
        )


class PreemptionGuard:
    """While active, SIGTERM and SIGINT set `requested` instead of killing.

    Use as a context manager around training; the previous handlers come
    back on exit. Outside the main thread Python cannot install signal
    handlers, and the guard then does nothing (`active` is False).
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS):
        self.signals = tuple(signals)
        self.signum: int | None = None
        self.active = False
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            return
        # Second signal: let the previous handler have it (e.g. KeyboardInterrupt).
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
            self.active = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        self.active = False


# -- several workers ------------------------------------------------------------------


def worker_names(cluster: Mapping[str, Sequence[str]]) -> list[str]:
    """Each worker of a `TF_CONFIG` cluster, named with its address, in TensorFlow's order.

    The chief (if any) comes first, then the workers by index, as
    `MultiWorkerMirroredStrategy` numbers its replicas: `["worker 0
    (host0:12345)", "worker 1 (host1:12345)"]`.
    """
    return [
        f"{role} {i} ({address})" for role in ("chief", "worker") for i, address in enumerate(cluster.get(role, []))
    ]


class ClusterStop:
    """Every worker's stop request, gathered at the same step on each (a collective).

    Every worker must call it at the same points of the run (the
    checkpointing callback does, after each step and at each epoch's end).

    Args:
        strategy: The run's `MultiWorkerMirroredStrategy` (any strategy works;
            with one worker the answer is this process's own).
        names: The workers in the strategy's order (`worker_names`).
    """

    def __init__(self, strategy: tf.distribute.Strategy, names: Sequence[str]):
        self.strategy = strategy
        self.names = list(names)
        self._local_replicas = len(strategy.extended.worker_devices)
        replicas = strategy.num_replicas_in_sync
        if replicas != self._local_replicas * len(self.names):
            raise ValueError(
                f"names must list one name per worker of the strategy ({replicas} replicas, "
                f"{self._local_replicas} per worker). Received: names={self.names!r}"
            )

        def replica_fn(signum: tf.Tensor) -> tf.Tensor:
            context = tf.distribute.get_replica_context()
            # tf.identity places the value on the replica's device, which the collective needs.
            return context.all_gather(tf.reshape(tf.identity(signum), [1]), axis=0)

        self._gather = tf.function(lambda signum: strategy.run(replica_fn, args=(signum,)))

    def __call__(self, signum: int | None) -> dict[str, int]:
        """Contributes this worker's signal (None: none); returns each signalled worker's name and signal."""
        gathered = self._gather(tf.constant(int(signum or 0), tf.int32))
        values = self.strategy.experimental_local_results(gathered)[0].numpy()
        # One entry per replica, the replicas of a worker next to each other.
        per_worker = values.reshape(len(self.names), self._local_replicas).max(axis=1)
        return {name: int(number) for name, number in zip(self.names, per_worker) if number}


class WorkerLost(RuntimeError):
    """A worker of a multi-worker run stopped answering; this worker stopped too.

    Attributes:
        missing: The names (`worker_names`) of the workers the error named,
            empty if it named none.
        step: Steps this worker had finished.
        checkpoint: The newest checkpoint of the run, None if there is none.
        exit_code: `WORKER_LOST_EXIT_CODE`.
    """

    def __init__(
        self, message: str | Callable[[Namer], str], missing: Sequence[str], step: int, checkpoint: str | None
    ):
        self._message = message
        super().__init__(self.render(setting_name))
        self.missing = list(missing)
        self.step = step
        self.checkpoint = checkpoint
        self.exit_code = WORKER_LOST_EXIT_CODE

    def render(self, name: Namer) -> str:
        """The message, each setting called `name(setting, value)` (the scripts pass their flags)."""
        return self._message(name) if callable(self._message) else self._message


# TensorFlow names tasks "/job:worker/replica:0/task:1" or "/job:worker/task:1".
_TASK = re.compile(r"/job:(chief|worker)(?:/replica:\d+)?/task:(\d+)")
_UNHEALTHY = "stopped sending heartbeats"


def worker_lost(
    error: BaseException,
    cluster: Mapping[str, Sequence[str]],
    own: tuple[str, int],
    step: int,
    checkpoint: str | None,
    timeout: float,
) -> WorkerLost:
    """The `WorkerLost` for a collective's failure (`tf.errors.UnavailableError`, ...) in a multi-worker run.

    Names the workers TensorFlow's message names, other than this one:
    those the coordination service found unhealthy if it says so, else
    those a failed remote call went to.

    Args:
        error: What the collective raised.
        cluster: The `TF_CONFIG` cluster (`{"worker": ["host:port", ...]}`).
        own: This process's `(task type, task index)`.
        step: Steps this worker had finished.
        checkpoint: The newest checkpoint of the run (None: none yet).
        timeout: The run's `worker_timeout`, in seconds.
    """
    text = str(error)
    # The coordination service lists the unhealthy tasks after this phrase; otherwise any task named.
    scope = text.split(_UNHEALTHY, 1)[1] if _UNHEALTHY in text else text
    tasks = dict.fromkeys((role, int(index)) for role, index in _TASK.findall(scope) if (role, int(index)) != own)
    missing = [
        f"{role} {index} ({cluster[role][index]})" if index < len(cluster.get(role, ())) else f"{role} {index}"
        for role, index in tasks
    ]
    who = " and ".join(missing) if missing else "another worker (TensorFlow's error names none)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # Skip TensorFlow's "Graph execution error:" and "Detected at node" preamble when there is a reason.
    first_line = next((line for line in lines if "aborted by" in line), lines[0] if lines else "")
    kept = (
        f"The run's newest checkpoint, {checkpoint}, is intact"
        if checkpoint
        else "No checkpoint had been written yet, so the run starts again from step 0"
    )

    def message(name: Namer) -> str:
        return (
            f"lost {who}: it stopped answering (no heartbeat for up to {name('worker_timeout', f'{timeout:g}')} "
            f"seconds, or a closed connection), so {own[0]} {own[1]} stopped after step {step}. {kept}. To resume, "
            f"start every worker again with {name('resume', True)} (and the same {name('run_name')}). "
            f"TensorFlow said: {type(error).__name__}: {first_line}"
        )

    return WorkerLost(message, missing, step, checkpoint)
