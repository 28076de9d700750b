"""tfmp's per-machine measurements on disk: one small JSON file per kind, written atomically.

`auto` precision (`tfmp.run.autotune`) and the CPU kernel timings
(`tfmp.cpu_kernels`) each keep one file in `cache_dir()`. A file that is
missing, unreadable or of another version reads as empty; one that cannot be
written only costs a measurement next time.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from collections.abc import Callable
from typing import TypeVar

__all__ = ["CACHE_ENV", "cache_dir", "load", "remembered", "store"]

T = TypeVar("T")

CACHE_ENV = "TFMP_CACHE_DIR"


def cache_dir() -> str:
    """`$TFMP_CACHE_DIR`, else `$XDG_CACHE_HOME/tfmp`, else `~/.cache/tfmp`."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return root
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tfmp")


def load(path: str, version: int) -> dict:
    """The entries of the cache file at `path`; empty unless it is a readable file of `version`."""
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(cache, dict) or cache.get("version") != version:
        return {}
    return cache.get("entries", {}) if isinstance(cache.get("entries"), dict) else {}


def store(path: str, version: int, entries: dict) -> str:
    """Writes `entries` to `path` atomically; returns why it could not ("" when it could)."""
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": version, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        return f"{directory} is not writable ({e.strerror or e}); set {CACHE_ENV} to a writable directory"
    return ""


def remembered(
    path: str,
    version: int,
    key: str,
    read: Callable[[object], T | None],
    measure: Callable[[], T],
    entry: Callable[[T], dict],
) -> tuple[T, bool, str]:
    """The value kept under `key` in the cache file at `path`, else `measure()`'s, kept there.

    Args:
        path: The cache file.
        version: Its format; a file of another version reads as empty.
        key: What the value depends on (the machine, the workload).
        read: The value in a stored entry (None or a missing key: not there,
            or not usable), e.g. a dataclass's `from_json`.
        measure: Measures the value when it is not there.
        entry: The entry to store for a measured value; the time of the
            measurement is added as `measured`.

    Returns:
        `(value, cached, not_stored)`: whether the value came from the file,
        and why a measured one could not be written ("" when it was, or
        when nothing was measured).
    """
    entries = load(path, version)
    value = read(entries.get(key))
    if value is not None:
        return value, True, ""
    value = measure()
    entries[key] = {**entry(value), "measured": datetime.datetime.now().isoformat(timespec="seconds")}
    return value, False, store(path, version, entries)
