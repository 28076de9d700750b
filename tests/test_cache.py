"""Tests for tfmp/_cache.py: per-machine measurements kept in small JSON files."""

import json
import os

from tfmp import _cache


def _figures(entry):
    """A stored entry's figures, or None when it holds none."""
    return entry.get("figures") if isinstance(entry, dict) else None


def test_a_value_is_measured_once_then_read_back(tmp_path):
    path = str(tmp_path / "kind.json")
    calls = []

    def measure():
        calls.append(1)
        return {"float32": 2.5}

    def remembered(key):
        return _cache.remembered(path, 3, key, _figures, measure, lambda figures: {"figures": figures})

    assert remembered("machine a") == ({"float32": 2.5}, False, "")
    assert remembered("machine a") == ({"float32": 2.5}, True, "")
    assert len(calls) == 1
    stored = json.loads((tmp_path / "kind.json").read_text())
    assert stored["version"] == 3
    assert stored["entries"]["machine a"]["figures"] == {"float32": 2.5}
    assert stored["entries"]["machine a"]["measured"]  # when it was measured
    # Another key, another version: measured again; the file keeps the other keys of its version.
    assert remembered("machine b")[1] is False
    assert set(json.loads((tmp_path / "kind.json").read_text())["entries"]) == {"machine a", "machine b"}
    assert _cache.remembered(path, 4, "machine a", _figures, measure, lambda f: {"figures": f})[1] is False
    assert len(calls) == 3


def test_an_unusable_entry_is_measured_again(tmp_path):
    path = tmp_path / "kind.json"
    path.write_text(json.dumps({"version": 1, "entries": {"k": {"other": 1}}}))
    value, cached, _ = _cache.remembered(str(path), 1, "k", _figures, lambda: [7], lambda v: {"figures": v})
    assert (value, cached) == ([7], False)
    path.write_text("{not json")
    assert _cache.remembered(str(path), 1, "k", _figures, lambda: [8], lambda v: {"figures": v})[:2] == ([8], False)


def test_a_directory_that_cannot_be_written_costs_only_a_measurement(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    path = os.path.join(str(blocker), "kind.json")  # its directory is a file
    value, cached, not_stored = _cache.remembered(path, 1, "k", _figures, lambda: [1], lambda v: {"figures": v})
    assert (value, cached) == ([1], False)
    assert str(blocker) in not_stored and _cache.CACHE_ENV in not_stored
