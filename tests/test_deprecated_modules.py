"""Tests for tfmp/_deprecated/'s alias modules: tfmp 0.1's module paths, each with a warning; no import hook."""

import os

import pytest
from fresh_python import imports_in_order

from tfmp import _deprecated


def test_importing_tfmp_installs_no_import_hook_and_loads_no_run_module():
    unchanged, hooks_unchanged, _, loaded = imports_in_order()["tfmp"]
    assert unchanged and hooks_unchanged
    assert [m for m in loaded if m.startswith(("tfmp.run", "tfmp._deprecated."))] == []


def test_every_old_path_is_the_new_module_with_a_warning_naming_it():
    modules = imports_in_order()["old_paths"]
    assert sorted(modules) == sorted(_deprecated.MOVED) and len(_deprecated.MOVED) == 16
    for name, (same, attribute, messages) in modules.items():
        assert same and attribute, name
        new = _deprecated.MOVED_MODULES[f"tfmp.{name}"]
        assert new.startswith("tfmp.run.")
        assert [m for m in messages if f"`tfmp.{name}` moved" in m] == [
            f"`tfmp.{name}` moved to `{new}` in tfmp 0.2; import it from there. "
            "The old path will be removed in tfmp 0.3."
        ]


def test_each_old_path_has_its_module_and_no_other_module_is_there():
    assert sorted(f.removesuffix(".py") for f in os.listdir(_deprecated.FOLDER) if f.endswith(".py")) == sorted(
        ("__init__", *_deprecated.MOVED)
    )


def test_a_name_that_did_not_move_is_refused_naming_it():
    with pytest.raises(
        ValueError, match=r"'tfmp\.nonsense' is not an old path of tfmp: expected one of tfmp\.autotune, "
    ):
        _deprecated.alias("tfmp.nonsense")


def test_a_name_that_never_existed_is_still_a_module_not_found_error():
    with pytest.raises(ModuleNotFoundError, match="tfmp.nonsense"):
        import tfmp.nonsense  # noqa: F401
