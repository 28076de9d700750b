"""The records (docs/records/) stand alone: each says what it is, the measured ones hold their raw output,
none names a path outside the repository, at least 60% of them hold raw output, and each made on a machine
names its CPU class, as its own output shows it."""

import importlib.util
import json
import pathlib
import shutil

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
        "cpu_class": "AVX2 only",
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


# --- the CPU class -------------------------------------------------------------------------------

AVX2_NOTE = (
    "note: float16 is emulated (no float16 arithmetic) on this CPU; its matmul runs at 1.42x float32's speed; its "
    "slowest kernel, conv2d d/input, takes 1.9x float32's time. tfmp computes the conv2d and depthwise gradients "
    "from the float16 values in float32 and rounds them to float16, as a GPU accumulates them."
)


def test_a_record_made_on_a_machine_names_its_cpu_class_as_tfmp_reads_it(records):
    _record(records, "a", cpu_class=None)
    _record(records, "b", cpu_class="Zen 4")
    _record(records, "c", kind="quoted", raw=None, cpu_class=None)  # another framework's figures
    _record(records, "d")
    problems = figures.record_problems(str(records))
    assert [p.split(":")[0] for p in problems] == ["a", "b"]
    assert problems[1].endswith("Received: 'Zen 4'")


def test_the_classes_are_tfmp_s():
    from tfmp import cpu_info

    assert list(figures.CPU_CLASSES) == [name for name, _ in cpu_info._CLASSES] + ["Arm"]


def test_one_cpu_note_printed_by_records_of_two_classes_fails_until_one_names_where_it_came_from(records):
    _record(records, "avx2", data={"output": ["training", AVX2_NOTE]}, raw=["data.output"])
    _record(records, "bf16", cpu_class="AVX512-BF16", data={"output": ["training", AVX2_NOTE]}, raw=["data.output"])
    (problem,) = figures.record_problems(str(records))
    assert problem.startswith("records of 2 CPU classes print one CPU note: avx2 (AVX2 only), bf16 (AVX512-BF16).")
    _record(
        records,
        "bf16",
        cpu_class="AVX512-BF16",
        cpu_note_class="AVX2 only",
        data={"output": ["training", AVX2_NOTE]},
        raw=["data.output"],
    )
    figures._load.cache_clear()
    assert figures.record_problems(str(records)) == []


def test_what_the_output_says_of_the_cpu_must_fit_the_class(records, tmp_path):
    from tfmp import cpu_info

    native = "note: bfloat16 is native on this CPU; its matmul runs at 1.54x float32's speed."
    _record(records, "a", data={"output": [native]}, raw=["data.output"])
    line = (
        "benchmark: measuring gan x float32, mixed_bfloat16; the precisions auto measures on this CPU (native bfloat16"
    )
    _record(records, "b", data={"output": [line + "; float16 emulated, left out)"]}, raw=["data.output"])
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: avx2 fma f16c avx512f avx512_bf16\n")
    header = f"16-bit kernels on this CPU ({cpu_info.machine_id(str(cpuinfo))}): ms per call"
    _record(records, "c", data={"output": [header]}, raw=["data.output"])
    output = [header, native.replace("1.54x", "1.49x"), line + ")"]
    _record(records, "d", cpu_class="AVX512-BF16", data={"output": output}, raw=["data.output"])
    assert figures.record_problems(str(records)) == [
        "a: its output says bfloat16 is native on its CPU, which on an AVX2 only CPU it is not",
        "b: its output says bfloat16 is native on its CPU, which on an AVX2 only CPU it is not",
        "c: its output's machine id names 'AVX512-BF16', the record 'AVX2 only'",
    ]


def test_the_tensorboard_record_names_the_cpu_its_note_came_from(records):
    # Its note is the AVX2 CPU's (avx2-main-job prints it too): without `cpu_note_class` the check flags it.
    for name in ("avx2-main-job", "avx512bf16-tensorboard-runs"):
        shutil.copy(_ROOT / "docs" / "records" / f"{name}.json", records)
    assert figures.record_problems(str(records)) == []
    record = json.loads((records / "avx512bf16-tensorboard-runs.json").read_text())
    assert (record["cpu_class"], record.pop("cpu_note_class")) == ("AVX512-BF16", "AVX2 only")
    (records / "avx512bf16-tensorboard-runs.json").write_text(json.dumps(record))
    figures._load.cache_clear()
    (problem,) = figures.record_problems(str(records))
    assert problem.startswith(
        "records of 2 CPU classes print one CPU note: avx2-main-job (AVX2 only), "
        "avx512bf16-tensorboard-runs (AVX512-BF16)."
    )
