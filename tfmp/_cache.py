"""tfmp's per-machine measurements on disk: one small JSON file per kind, written atomically.

`auto` precision (`tfmp.run.autotune`) and the CPU kernel timings
(`tfmp.cpu_kernels`) each keep one file in `cache_dir()`. A file that is
missing, unreadable or of another version reads as empty; one that cannot be
written only costs a measurement next time.
"""

from __future__ import annotations

import json
import os
import tempfile

__all__ = ["CACHE_ENV", "cache_dir", "load", "store"]

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
