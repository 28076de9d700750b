"""The records (docs/records/) stand alone: each says what it is, the measured ones hold their raw output,
none names a path outside the repository, and at least 60% of them hold raw output."""

import importlib.util
import json
import pathlib

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("figures", _ROOT / "tools" / "figures.py")
figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(figures)


def test_the_records_stand_alone():
    assert figures.record_problems() == []


def test_at_least_60_percent_of_the_records_hold_their_raw_output():
    kinds = [figures.load_record(name)["kind"] for name in figures.record_names()]
    assert kinds.count("measured") >= 0.6 * len(kinds), kinds


def test_the_amx_records_hold_the_benchmark_s_own_files():
    gan = figures.load_record("amx-gan")
    assert gan["data"]["output"][-1] == "wrote gan.json"
    row = figures.lookup(gan, "data.rows[precision=mixed_bfloat16].ratio_to_float32")
    assert round(row, 2) == 2.15


def _record(tmp_path, name, **fields):
    record = {
        "kind": "measured",
        "machine": "2-core test CPU",
        "command": "python3 scripts/benchmark.py --models=gan --json_out=gan.json",
        "tfmp_commit": "0" * 40,
        "date": "2026-12-01",
        "source": "measured",
        "raw": ["data.rows"],
        "data": {"rows": [{"model": "gan", "images_per_sec": 800.0}]},
    }
    record.update(fields)
    (tmp_path / f"{name}.json").write_text(json.dumps(record))


@pytest.fixture
def records(tmp_path):
    figures._load.cache_clear()
    yield tmp_path
    figures._load.cache_clear()


def test_a_record_naming_a_shared_file_fails(records):
    _record(records, "a", source="Transcribed from /work/shared/REFERENCE.md")
    _record(records, "b", command="see ../shared/gpu/README.md")
    problems = figures.record_problems(str(records))
    assert any("a: names a path outside the repository: '/work/shared/REFERENCE.md'" in p for p in problems)
    assert any("b: names a path outside the repository: '../shared/gpu/README.md'" in p for p in problems)


def test_a_record_naming_a_page_gone_from_the_repository_fails_unless_it_names_its_commit(records):
    _record(records, "a", command="python3 docs/investigations/profile.py")
    _record(records, "b", command="python3 docs/investigations/profile.py, removed after commit 5b2a681")
    assert figures.record_problems(str(records)) == [
        "a: names 'docs/investigations/profile.py', which is not in the repository"
    ]


def test_a_measured_record_without_its_raw_output_fails(records):
    _record(records, "a", raw=[])
    _record(records, "b", raw=["data.output"])
    _record(records, "c", raw=["data.rows"], data={"rows": []})
    problems = figures.record_problems(str(records))
    assert "a: a measured record names the keys of its raw output in `raw`" in problems
    assert any(p.startswith("b: raw output 'data.output' is missing") for p in problems)
    assert "c: raw output 'data.rows' is empty" in problems


def test_too_few_records_with_raw_output_fail(records):
    _record(records, "a")
    _record(records, "b", kind="history", raw=None)
    _record(records, "c", kind="quoted", raw=None)
    assert figures.record_problems(str(records)) == ["1 of 3 records hold their raw output; at least 60% must"]


def test_an_unknown_kind_fails(records):
    _record(records, "a", kind="guessed", raw=None)
    _record(records, "b")
    _record(records, "c")
    assert figures.record_problems(str(records)) == [
        "a: kind 'guessed' is not one of ['measured', 'transcribed', 'quoted', 'history']"
    ]


def test_only_readme_the_reports_and_the_contributors_page_quote_the_history_record():
    quoting = sorted(
        str(pathlib.Path(path).relative_to(_ROOT))
        for path in figures.covered_files()
        if "figure: history " in pathlib.Path(path).read_text() or "\nhistory " in pathlib.Path(path).read_text()
    )
    assert quoting and set(quoting) <= set(figures.HISTORY_PAGES), quoting
