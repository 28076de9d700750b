"""Where a run writes: its run directory and checkpoint directories, created, checked and held.

`hold(...)` creates each directory once, checks it writable as it is made
(`ConfigError` naming `logdir` or `checkpoint_dir` otherwise), and on the
chief holds the run directory and the checkpoint directory with a
`RunDirLock`, so a second run there is refused. When the block fails, or
Ctrl-C interrupts it, the locks are released and the directories it created
removed again if still empty.

Two training runs writing to one directory would overwrite each other's
checkpoints and mix their TensorBoard event files. `RunDirLock` makes the
first run the directory's holder: it creates the lock file `tfmp.lock` in
the directory, writes who holds it (pid, host, process start time) and
keeps an exclusive `fcntl.flock` on it until the run ends, however it ends
(the kernel drops the `flock` of a killed process). A second run is refused
with `RunDirInUseError`, naming the directory and the holder.

A lock file left by a killed run is stale and is taken over, with a note:
on the same host, when the holder's pid is not running, or runs another
process (its start time, read from `/proc`, differs), or the machine has
rebooted since. A lock written on another host is never guessed at: the
error says so and how to remove the file by hand.

`make_dirs` creates a directory and reports what it created, so that a run
that fails or is interrupted before training can remove the empty
directories it made (`remove_empty_dirs`).

```python
created = make_dirs(run_dir)
try:
    with RunDirLock(run_dir):
        train()
except BaseException:
    remove_empty_dirs(created)
    raise
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tfmp import _deprecated
from tfmp.run import distribute
from tfmp.run.config import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the lock file alone, with the pid check
    fcntl = None

__all__ = [
    "LOCK_FILE",
    "Directories",
    "Holder",
    "RunDirInUseError",
    "RunDirLock",
    "default_run_name",
    "hold",
    "holder",
    "make_dirs",
    "make_writable_dir",
    "remove_empty_dirs",
]

LOCK_FILE = "tfmp.lock"

log = logging.getLogger(__name__)


class RunDirInUseError(RuntimeError):
    """Another run holds the directory; the message names it and the holder."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or held) a run directory, as its lock file records it.

    Attributes:
        pid: The holder's process id.
        host: Its host name (`socket.gethostname()`).
        started: When it took the lock (ISO 8601, UTC).
        start_time: The process's start time in clock ticks since boot
            (`/proc/<pid>/stat`), None where `/proc` is not available.
        boot_id: The boot the process ran in (`/proc/sys/kernel/random/boot_id`).
    """

    pid: int
    host: str
    started: str = ""
    start_time: int | None = None
    boot_id: str | None = None

    def __str__(self) -> str:
        since = f", since {self.started}" if self.started else ""
        return f"pid {self.pid} on host {self.host}{since}"


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _boot_id() -> str | None:
    text = _read_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def _stat(pid: int) -> list[str]:
    """Fields 3 on of `/proc/<pid>/stat` (state, ppid, ...), or [] where unknown."""
    text = _read_text(f"/proc/{pid}/stat")
    # The command name (field 2) is in parentheses and may hold spaces.
    return text[text.rfind(")") + 2 :].split() if text else []


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, field 22), or None if unknown or not running."""
    fields = _stat(pid)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def _this_process() -> Holder:
    return Holder(
        pid=os.getpid(),
        host=socket.gethostname(),
        started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        start_time=_start_time(os.getpid()),
        boot_id=_boot_id(),
    )


def _parse(text: str) -> Holder | None:
    try:
        record = json.loads(text)
        return Holder(
            int(record["pid"]),
            str(record["host"]),
            str(record.get("started", "")),
            record.get("start_time"),
            record.get("boot_id"),
        )
    except (ValueError, TypeError, KeyError):
        return None


def _running_on_this_host(holder: Holder) -> bool:
    """Whether the process `holder` names still runs (the holder is on this host)."""
    boot_id = _boot_id()
    if holder.boot_id and boot_id and holder.boot_id != boot_id:
        return False  # rebooted since
    if not _pid_running(holder.pid) or _stat(holder.pid)[:1] == ["Z"]:  # a zombie has ended, not yet reaped
        return False
    now = _start_time(holder.pid)
    # The pid was reused by another process when its start time differs.
    return holder.start_time is None or now is None or now == holder.start_time


class RunDirLock:
    """Holds a run directory for one run; see the module docstring.

    Use as a context manager (or `acquire()` / `release()`). The directory
    must exist. Releasing removes the lock file.

    Args:
        directory: The directory to hold. Taking over a stale lock is
            logged (`tfmp.run.output`).
    """

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the directory."""
        return self._fd is not None

    def _in_use(self, holder: Holder | None, detail: str = "") -> RunDirInUseError:
        who = str(holder) if holder else "another process (it has not written its pid yet)"
        return RunDirInUseError(
            f"{self.directory} is in use by another run: {who}{detail}. Two runs in one directory would overwrite "
            f"each other's checkpoints and mix their TensorBoard logs. Wait for that run to end, or choose another "
            f"run_name (or checkpoint_dir). Lock file: {self.path}"
        )

    def acquire(self) -> RunDirLock:
        """Takes the directory, or raises `RunDirInUseError` naming its holder.

        Returns:
            self.
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this RunDirLock")
        while True:
            try:
                fd, created = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                try:
                    fd, created = os.open(self.path, os.O_RDWR), False
                except FileNotFoundError:  # released in between
                    continue
            try:
                if self._take(fd, created):
                    self._fd = fd
                    return self
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the file was replaced meanwhile: try again

    def _take(self, fd: int, created: bool) -> bool:
        locked = None  # None: this file system has no flock
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                raise self._in_use(_parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))) from None
            except OSError:
                locked = None
        try:
            if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                return False  # the holder removed it (released) after we opened it
        except FileNotFoundError:
            return False
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        if text.strip():
            self._check_stale(_parse(text), text)
        elif not created and not locked:
            raise self._in_use(None)  # no flock to tell: its creator may be writing it now
        record = json.dumps(dataclasses.asdict(_this_process()), sort_keys=True).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        os.fsync(fd)
        return True

    def _check_stale(self, holder: Holder | None, text: str) -> None:
        """Returns when the recorded holder is gone (saying so); raises when it may still run."""
        if holder is None:
            log.info(f"note: {self.path} held no readable record ({text[:80]!r}); taking the run directory over")
            return
        if holder.host != socket.gethostname():
            raise RunDirInUseError(
                f"{self.directory} is held by a run on another host: {holder}. This host cannot tell whether it "
                f"still runs. If it does not (it was killed, or its host went down), delete the lock file "
                f"{self.path} and start again; otherwise wait for it to end, or choose another run_name "
                f"(or checkpoint_dir)."
            )
        if holder.pid != os.getpid() and _running_on_this_host(holder):
            raise self._in_use(holder)
        log.info(
            f"note: taking over the run directory {self.directory} from {holder}, which is no longer "
            f"running (it was killed or crashed); lock file {self.path}"
        )

    def release(self) -> None:
        """Removes the lock file and lets the directory go. Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)  # before the flock goes: a waiting process then sees a new file
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def holder(directory: str) -> Holder | None:
    """Who the lock file of `directory` names, or None if it has none (or no readable record)."""
    text = _read_text(os.path.join(directory, LOCK_FILE))
    return _parse(text) if text else None


def make_dirs(path: str) -> list[str]:
    """Creates `path` and its missing parents; returns the ones this call created, outermost first.

    A directory another process creates at the same moment is not counted
    as created here, so `remove_empty_dirs` never removes it.
    """
    missing = []
    head = os.path.abspath(path)
    while not os.path.isdir(head) and os.path.dirname(head) != head:
        missing.append(head)
        head = os.path.dirname(head)
    created: list[str] = []
    try:
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise
                continue
            created.append(directory)
    except BaseException:
        remove_empty_dirs(created)
        raise
    return created


def remove_empty_dirs(created: list[str]) -> None:
    """Removes the directories `make_dirs` created that are still empty, innermost first."""
    for directory in reversed(created):
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty (or gone): it holds something worth keeping


def default_run_name(precision: str, loss_scale: str | float, name: str = "") -> str:
    """A timestamp, the task's name, then the precision and loss-scale settings.

    `20261126-185627_text_classifier_mixed_float16_ls-dynamic`: the timestamp
    first, so that runs sort by time. The name is made safe for one path
    component (each run of characters other than letters, digits, `.`, `_`
    and `-` becomes one `_`); without a name it is left out.

    Args:
        precision: The resolved precision.
        loss_scale: The resolved loss scale.
        name: The task's name (`tfmp.run.tasks.Task.name`).
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return f"{stamp}_{safe + '_' if safe else ''}{precision}_ls-{loss_scale}"


@dataclasses.dataclass
class Directories:
    """Where a run writes; held by this run while it lasts (`Runner.build_directories`).

    Attributes:
        run_dir: The run's directory, `<logdir>/<run_name>` (or that with a
            `-2` suffix), decided once when claimed; its TensorBoard logs on the chief.
        tensorboard_dir: This process's TensorBoard directory: `run_dir` on
            the chief, a private one on other workers.
        run_checkpoints: The run's checkpoints, which every worker resumes from.
        checkpoint_dir: Where this process writes its checkpoints.
        training_started: Set once the first step is under way.
    """

    run_dir: str
    tensorboard_dir: str
    run_checkpoints: str
    checkpoint_dir: str
    training_started: bool = False

    @property
    def writes(self) -> str:
        """Deprecated: `tensorboard_dir`."""
        _deprecated.warn("Directories.writes")
        return self.tensorboard_dir


def make_writable_dir(name: str, path: str) -> list[str]:
    """Creates `path` (and missing parents) and checks it can be written to; returns what it created.

    Raises:
        ConfigError: naming the setting `name` and `path` when it cannot;
            whatever was created is removed again.
    """
    created: list[str] = []
    try:
        created = make_dirs(path)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        remove_empty_dirs(created)
        raise ConfigError(
            f"must be a directory tfmp can create and write to ({e.strerror or e}).", name, path
        ) from None
    return created


def _claim_new_dir(path: str, created: list[str]) -> str:
    """Creates `path`, or `path-2`, `path-3`... if taken (two runs started in the same second)."""
    created += make_writable_dir("logdir", os.path.dirname(path) or os.curdir)
    candidate, n = path, 1
    while True:
        try:
            os.mkdir(candidate)
        except FileExistsError:
            n += 1
            candidate = f"{path}-{n}"
            continue
        created.append(os.path.abspath(candidate))
        return candidate


@contextlib.contextmanager
def hold(
    run_dir: str,
    named: bool,
    checkpoint_dir: str,
    strategy: tf.distribute.Strategy,
) -> Iterator[Directories]:
    """Creates a run's directories and holds them for this run while the block runs.

    Args:
        run_dir: The run directory asked for, `<logdir>/<run_name>`.
        named: Whether the user named it (`run_name`): a default name another
            run took in the same second gets a `-2` suffix instead.
        checkpoint_dir: The config's `checkpoint_dir` (empty: `run_dir/checkpoints`).
        strategy: The run's strategy: only its chief writes the run's files.

    Yields:
        The directories, `run_dir` the one claimed.

    Raises:
        ConfigError: naming `logdir` or `checkpoint_dir` when one cannot be written.
        RunDirInUseError: when another run holds one of them.
    """
    chief = distribute.is_chief(strategy)
    created: list[str] = []
    try:
        with contextlib.ExitStack() as locks:
            if chief and not named:
                run_dir = _claim_new_dir(run_dir, created)
            tensorboard_dir = distribute.writable_dir(run_dir, strategy)
            created += make_writable_dir("logdir", tensorboard_dir)
            run_checkpoints = checkpoint_dir or os.path.join(run_dir, "checkpoints")
            own_checkpoints = distribute.writable_dir(run_checkpoints, strategy)
            created += make_writable_dir("checkpoint_dir", own_checkpoints)
            if chief:
                # Both: another run may name this run's checkpoint directory as its own checkpoint_dir.
                for directory in dict.fromkeys(os.path.abspath(d) for d in (tensorboard_dir, own_checkpoints)):
                    locks.enter_context(RunDirLock(directory))
            yield Directories(run_dir, tensorboard_dir, run_checkpoints, own_checkpoints)
    except BaseException:
        remove_empty_dirs(created)
        raise
