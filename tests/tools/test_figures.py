"""tools/figures.py: a quoted figure or sample output that differs from its record is reported."""

import importlib.util
import json
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "figures.py"
_SPEC = importlib.util.spec_from_file_location("figures", _PATH)
figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(figures)


@pytest.fixture
def records(tmp_path, monkeypatch):
    record = {
        "kind": "measured",
        "machine": "2-core test CPU",
        "command": "python3 scripts/benchmark.py --models=gan",
        "tfmp_commit": "0" * 40,
        "date": "2026-11-29",
        "source": "measured",
        "data": {
            "rows": [
                {"model": "gan", "precision": "float32", "images_per_sec": 211.5, "step_ratio": 0.66},
                {"model": "gan", "precision": "mixed_float16", "images_per_sec": 197.4, "ratio_to_float32": 0.933},
            ],
            "output": ["first line", "second line", "third line"],
            "parity": {"gap": -0.64, "sd": 3.94, "low": -0.93, "high": 0.47, "spread": 2.95, "skipped": [5, 8]},
        },
    }
    (tmp_path / "bench.json").write_text(json.dumps(record))
    (tmp_path / "partial.json").write_text(json.dumps({"machine": "x", "data": {}}))
    figures._load.cache_clear()
    monkeypatch.setattr(figures, "RECORDS", str(tmp_path))
    yield tmp_path
    figures._load.cache_clear()


def _messages(text):
    return [p.message for p in figures.check_text(text, "page.md")]


def test_a_figure_equal_to_its_record_at_the_quoted_decimals_passes(records):
    text = (
        "float16 ran at 0.93x<!-- figure: bench data.rows[precision=mixed_float16].ratio_to_float32 --> "
        "float32's speed (**197.4**<!-- figure: bench data.rows[1].images_per_sec --> against 211.5 img/s"
        "<!-- figure: bench data.rows[model=gan,precision=float32].images_per_sec -->), 34% lower"
        "<!-- figure: bench data.rows[0].step_ratio lower scale=100 -->, 0.9333"
        "<!-- figure: bench data.rows[1].images_per_sec / data.rows[0].images_per_sec -->"
    )
    assert _messages(text) == []


def test_a_wrong_figure_names_both_values(records):
    text = "float16 ran at 0.73x<!-- figure: bench data.rows[precision=mixed_float16].ratio_to_float32 -->\n"
    [problem] = figures.check_text(text, "page.md")
    assert (problem.path, problem.line) == ("page.md", 1)
    assert problem.message == (
        "0.73 quoted, the record bench data.rows[precision=mixed_float16].ratio_to_float32 gives 0.93"
    )


def test_a_wrong_figure_in_a_file_fails_the_command_line(records, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("| row | 1,353<!-- figure: bench data.rows[0].images_per_sec --> |\n")
    assert figures.main([str(page)]) == 1
    assert "1,353 quoted, the record bench data.rows[0].images_per_sec gives 212" in capsys.readouterr().out


def test_missing_records_keys_and_fields_are_problems(records):
    assert _messages("1.5x<!-- figure: nowhere data.x -->")[0].startswith("figure nowhere data.x: ")
    assert "no 'ratio'" in _messages("1.5x<!-- figure: bench data.ratio -->")[0]
    assert "matches 2 items" in _messages("1<!-- figure: bench data.rows[model=gan].images_per_sec -->")[0]
    assert "Missing: ['kind', 'command'" in _messages("1<!-- figure: partial data -->")[0]
    assert "not a number" in _messages("1<!-- figure: bench data.output -->")[0]
    assert "no number" in _messages("about<!-- figure: bench data.rows[0].images_per_sec -->")[0]
    assert "unknown options ['round']" in _messages("1<!-- figure: bench data.rows[0].images_per_sec round -->")[0]


def test_a_sample_must_be_the_records_lines_in_order(records):
    good = "<!-- sample: bench data.output -->\n```text\nfirst line\n...\nthird line\n```\n"
    assert _messages(good) == []
    bad = "<!-- sample: bench data.output -->\n```text\nthird line\nfirst line\n```\n"
    assert _messages(bad) == ["sample bench data.output: this line is not in the record (in order): 'first line'"]
    assert "no fenced block" in _messages("<!-- sample: bench data.output -->\ntext\n")[0]


def test_every_record_in_the_repository_names_its_machine_command_commit_date_and_source():
    paths = sorted(pathlib.Path(figures.RECORDS).glob("*.json"))
    assert paths
    for path in paths:
        record = figures.load_record(path.stem)
        assert all(isinstance(record[field], str) and record[field] for field in figures.REQUIRED_FIELDS[:-1]), path


def _guarded_page(tmp_path, monkeypatch, text):
    monkeypatch.setattr(figures, "REPO", str(tmp_path))
    page = tmp_path / "docs" / "guides" / "page.md"
    page.parent.mkdir(parents=True)
    page.write_text(text)
    return page


def test_an_unmarked_ratio_on_a_guarded_page_fails(records, tmp_path, monkeypatch, capsys):
    page = _guarded_page(tmp_path, monkeypatch, "bfloat16 ran at 1.7x float32's speed.\n")
    assert [p.message for p in figures.check_file(str(page))] == ["'1.7x' quoted with no figure comment"]
    assert figures.main([str(page)]) == 1
    assert "docs/guides/page.md:1: '1.7x' quoted with no figure comment" in capsys.readouterr().out


def test_a_marked_ratio_on_a_guarded_page_passes(records, tmp_path, monkeypatch):
    marked = (
        "float16 ran at 0.93x<!-- figure: bench data.rows[1].ratio_to_float32 --> and "
        "**0.93**<!-- figure: bench data.rows[1].ratio_to_float32 -->x of float32, 197.4"
        "<!-- figure: bench data.rows[1].images_per_sec --> img/s, 34"
        "<!-- figure: bench data.rows[0].step_ratio lower scale=100 -->% lower.\n"
    )
    page = _guarded_page(tmp_path, monkeypatch, marked)
    assert figures.check_file(str(page)) == []


def test_the_guard_reads_prose_only_and_allows_numbers_that_are_not_measurements():
    text = (
        "```text\n1.7x in a code block\n```\n"
        "inline `--ratio=1.7x`, a link [here](page.md#table-2x), a comment <!-- 5% -->, 32x32 images, batch 2 x 512,\n"
        "a 95% interval, within 1 point (95%), a kernel 1.25x float32's or slower\n"
    )
    assert figures.unmarked_figures(text) == []
    found = figures.unmarked_figures("4% and 9-22x and 999 img/s and **1.5x**\n", "p.md")
    assert [p.message for p in found] == [
        "'4%' quoted with no figure comment",
        "'22x' quoted with no figure comment",
        "'999 img/s' quoted with no figure comment",
        "'1.5x' quoted with no figure comment",
    ]


def test_only_the_readme_reports_and_guides_are_guarded():
    root = pathlib.Path(figures.REPO)
    assert figures.guarded(str(root / "README.md"))
    assert figures.guarded(str(root / "docs" / "NUMERICS.md"))
    assert figures.guarded(str(root / "docs" / "guides" / "precision.md"))
    assert not figures.guarded(str(root / "docs" / "background.md"))


def test_an_unmarked_time_or_size_on_a_guarded_page_fails(records, tmp_path, monkeypatch):
    page = _guarded_page(tmp_path, monkeypatch, "One step took 118 ms.\n")
    assert [p.message for p in figures.check_file(str(page))] == ["'118 ms' quoted with no figure comment"]
    found = figures.unmarked_figures("600 MB, 21.1 MiB and 2GiB; it stopped in 5 s, or 20 seconds\n")
    quoted = ["'600 MB'", "'21.1 MiB'", "'2GiB'", "'5 s'", "'20 seconds'"]
    assert [p.message.split(" quoted")[0] for p in found] == quoted


def test_a_marked_time_or_size_and_a_setting_pass(records, tmp_path, monkeypatch):
    text = (
        "One step took 211.5<!-- figure: bench data.rows[0].images_per_sec --> ms and 197"
        "<!-- figure: bench data.rows[1].images_per_sec -->MiB.\n"
        "With --memory_budget=2GiB, a batch that fits 256 MiB, a timeout of 30 s and the test's 5 s configured;\n"
        "every 100 steps, in the 1990s, 32x32 images.\n"
    )
    page = _guarded_page(tmp_path, monkeypatch, text)
    assert figures.check_file(str(page)) == []


def test_the_guard_catches_a_space_before_percent_microseconds_minutes_and_any_throughput_unit():
    text = (
        "about 1 to 3 % of a step; a launch of about 10 µs (or 10 us); up to 13 minutes, or 2 min;\n"
        "16232.2 ex/s, 900 tokens/s, 12 steps/sec and 500 images per second\n"
    )
    found = [p.message for p in figures.unmarked_figures(text, "p.md")]
    assert found == [
        "'3 %' quoted with no figure comment",
        "'10 µs' quoted with no figure comment",
        "'10 us' quoted with no figure comment",
        "'13 minutes' quoted with no figure comment",
        "'2 min' quoted with no figure comment",
        "'16232.2 ex/s' quoted with no figure comment",
        "'900 tokens/s' quoted with no figure comment",
        "'12 steps/sec' quoted with no figure comment",
        "'500 images per second' quoted with no figure comment",
    ]
    assert figures.unmarked_figures("the default set runs in under 10 minutes\n") == []


def test_a_sample_output_with_a_throughput_must_name_its_record():
    block = "```text\nsummary: 150 steps; mean throughput 16232.2 ex/s over 147 steps\n```\n"
    [problem] = figures.unmarked_figures("It prints:\n\n" + block, "p.md")
    assert (problem.line, problem.message) == (3, "a sample output with a throughput and no sample comment")
    assert figures.unmarked_figures("<!-- sample: run data.output -->\n" + block) == []
    assert figures.unmarked_figures("```bash\npython3 scripts/train.py --epochs=3\n```\n") == []


def test_a_step_time_is_derived_from_a_rows_fields_counting_the_gan_s_two_images(records):
    rows = {"rows": [{"model": "gan", "batch_size": 512, "images_per_sec": 125350.0}]}
    record = {"data": rows}
    assert round(figures.lookup(record, "step_ms(data.rows[model=gan])"), 1) == 8.2
    with pytest.raises(KeyError, match="no derived figure 'step_s'"):
        figures.lookup(record, "step_s(data.rows[model=gan])")


def test_the_derived_step_time_equals_the_step_ms_the_benchmark_itself_recorded():
    for name in ("amx-gan", "amx-mobilenet-v2", "avx512bf16-compare"):
        for row in figures.load_record(name)["data"]["rows"]:
            assert figures.step_ms(row) == pytest.approx(row["step_ms"], rel=1e-3), (name, row["model"])


def _pages(tmp_path, **pages):
    paths = []
    for name, text in pages.items():
        path = tmp_path / f"{name}.md"
        path.write_text(text)
        paths.append(str(path))
    return paths


def test_a_named_quantity_from_two_keys_on_two_pages_fails(records, tmp_path):
    paths = _pages(
        tmp_path,
        a="XLA was 11x<!-- figure: bench data.rows[0].images_per_sec q=xla-slowdown -->\n",
        b="XLA was 197.4x<!-- figure: bench data.rows[1].images_per_sec q=xla-slowdown -->\n",
    )
    [problem] = figures.quantity_problems(paths)
    assert problem.message.startswith("quantity xla-slowdown: from bench data.rows[1].images_per_sec, but ")


def test_one_key_quoted_with_other_digits_on_another_page_fails(records, tmp_path):
    paths = _pages(
        tmp_path,
        a="211.5 img/s<!-- figure: bench data.rows[0].images_per_sec -->\n",
        b="212 img/s<!-- figure: bench data.rows[0].images_per_sec -->\n",
    )
    [problem] = figures.quantity_problems(paths)
    assert problem.message.startswith("bench data.rows[0].images_per_sec: 212 here, 211.5 at ")
    assert figures.quantity_problems(paths[:1] * 2) == []


def test_the_docs_quote_each_quantity_with_one_figure():
    assert [str(p) for p in figures.quantity_problems(figures.covered_files())] == []


def test_a_figures_block_checks_the_paragraph_above_it_and_marks_its_figures(records):
    text = (
        "float16 ran at 0.93x float32's speed,\n"
        "197.4 img/s against 211.5.\n"
        "<!-- figures:\n"
        "0.93 bench data.rows[precision=mixed_float16].ratio_to_float32\n"
        "197.4 bench data.rows[1].images_per_sec\n"
        "211.5 bench data.rows[0].images_per_sec\n"
        "-->\n"
    )
    assert figures.check_text(text, "page.md", guard=True) == []
    wrong = text.replace("0.93 bench", "0.73 bench").replace("211.5 bench", "212.5 bench")
    assert [p.message for p in figures.check_text(wrong, "page.md", guard=True)] == [
        "'0.93x' quoted with no figure comment",
        "'211.5' quoted with no figure comment (a measured ratio)",
        "0.73 is not in the paragraph above its block",
        "0.73 quoted, the record bench data.rows[precision=mixed_float16].ratio_to_float32 gives 0.93",
        "212.5 is not in the paragraph above its block",
        "212.5 quoted, the record bench data.rows[0].images_per_sec gives 211.5",
    ]
    unmarked = text.replace("197.4 bench data.rows[1].images_per_sec\n", "")
    assert [p.message for p in figures.unmarked_figures(unmarked)] == ["'197.4 img/s' quoted with no figure comment"]


# One figure with no unit of each kind the guard reads, unmarked; and the same text with each one's comment.
_BARE = (
    "Fused minus Keras averaged -0.64 points on one split.\n"
    "Its interval was [-0.93, +0.47], the other (-0.93..+0.47).\n"
    "The gaps spread with SD 3.94 per unit.\n"
    "Over seeds 6-7 the spread measured 2.95.\n"
    "Every float16 run skips 5-8 steps at the start.\n"
)
_BARE_MARKED = (
    "Fused minus Keras averaged -0.64<!-- figure: bench data.parity.gap --> points on one split.\n"
    "Its interval was [-0.93<!-- figure: bench data.parity.low -->, +0.47<!-- figure: bench data.parity.high -->],"
    " the other (-0.93<!-- figure: bench data.parity.low -->..+0.47<!-- figure: bench data.parity.high -->).\n"
    "The gaps spread with SD 3.94<!-- figure: bench data.parity.sd --> per unit.\n"
    "Over seeds 6-7 the spread measured 2.95<!-- figure: bench data.parity.spread -->.\n"
    "Every float16 run skips 5<!-- figure: bench data.parity.skipped.0 -->"
    "-8<!-- figure: bench data.parity.skipped.1 --> steps at the start.\n"
)


def test_a_figure_with_no_unit_of_each_kind_and_no_record_fails(records, tmp_path, monkeypatch, capsys):
    page = _guarded_page(tmp_path, monkeypatch, _BARE)
    assert [(p.line, p.message) for p in figures.check_file(str(page))] == [
        (1, "'-0.64 points' quoted with no figure comment (points)"),
        (2, "'[-0.93, +0.47]' quoted with no figure comment (an interval)"),
        (2, "'-0.93..+0.47' quoted with no figure comment (an interval)"),
        (3, "'SD 3.94' quoted with no figure comment (a standard deviation)"),
        (4, "'2.95' quoted with no figure comment (a measured ratio)"),
        (5, "'skips 5-8 steps' quoted with no figure comment (a measured count)"),
    ]
    assert figures.main([str(page)]) == 1
    assert capsys.readouterr().out.endswith("0 differ from their records, 6 without a record\n")


def test_a_figure_with_no_unit_of_each_kind_with_its_record_passes(records, tmp_path, monkeypatch, capsys):
    page = _guarded_page(tmp_path, monkeypatch, _BARE_MARKED)
    assert figures.check_file(str(page)) == []
    assert figures.main([str(page)]) == 0
    assert capsys.readouterr().out.endswith("0 differ from their records, 0 without a record\n")
    wrong = _BARE_MARKED.replace("averaged -0.64", "averaged -0.46")
    assert [p.message for p in figures.check_text(wrong, "page.md", guard=True)] == [
        "-0.46 quoted, the record bench data.parity.gap gives -0.64"
    ]


def test_a_figure_with_no_unit_listed_in_its_paragraphs_block_passes(records):
    text = (
        "float16's gap averaged\n-0.64 points, within\n[-0.93, +0.47].\n"
        "<!-- figures:\n-0.64 bench data.parity.gap\n-0.93 bench data.parity.low\n+0.47 bench data.parity.high\n-->\n"
    )
    assert figures.check_text(text, "page.md", guard=True) == []
    assert [p.message for p in figures.check_text(text.replace("+0.47 bench data.parity.high\n", ""), guard=True)] == [
        "'[-0.93, +0.47]' quoted with no figure comment (an interval)"
    ]


def test_a_ratio_or_count_is_a_figure_only_in_a_sentence_that_says_it_measured():
    assert figures.unmarked_figures("The default spread of 2.95 was measured.\n") != []
    assert figures.unmarked_figures("The model's width is 0.35 and its loss scale 2.95.\n") == []
    text = "It ran in 3-5 processes. It ran 27 small kernels per variable. The scale measured 1024-128.\n"
    assert [p.message.split(" quoted")[0] for p in figures.unmarked_figures(text)] == [
        "'3-5'",
        "'27 small kernels'",
        "'1024-128'",
    ]


def test_numbers_that_are_not_figures_pass_the_guard():
    text = (
        "We measured it with TensorFlow 2.21, Keras 3.15, tfmp 0.2 and scikit-learn 1.9.1 on 2026-12-02 at commit\n"
        "3c859f6 (section 2.3), with ResNet-50 v1.5 and MobileNetV2 alpha 0.35: batch 256 on 2 cores, 13 of the 17\n"
        "layers, 35 units over seeds 0-7 and folds 0-3, 200 rounds, pixels in [0, 1], `a 0.93 in code`, and a\n"
        "a [link](page.md#measured-2-95); bfloat16 was within 1 point of float32, the ±1-point band.\n"
        "The mean time took `ratio=1.5` <!-- a comment measured 2.95 --> on GPUs of compute capability 8.0+.\n"
        "```text\nmeasured 2.95 and -0.64 points in a code block\n```\n"
    )
    assert figures.unmarked_figures(text) == []


def test_a_figure_comment_marks_only_the_number_right_before_it():
    text = "a batch of 384<!-- figure: bench data.rows[0].images_per_sec -->, and one trial took 13 minutes.\n"
    assert [p.message for p in figures.unmarked_figures(text)] == ["'13 minutes' quoted with no figure comment"]


def test_the_slowest_kernel_is_read_from_a_cpu_note_in_a_record_s_output():
    record = figures.load_record("avx2-main-job")
    assert figures.lookup(record, "slowest_kernel(data.terminal.1)") == 1.9
    with pytest.raises(KeyError, match="names no slowest kernel"):
        figures.lookup(record, "slowest_kernel(data.terminal.0)")


def test_at_most_a_third_of_the_quoted_figures_may_come_from_records_without_their_output(records, tmp_path):
    history = {
        "kind": "history",
        "machine": "a machine the project no longer has",
        "command": "python3 scripts/benchmark.py --models=gan",
        "tfmp_commit": "0" * 40,
        "date": "2026-11-01",
        "source": "transcribed from an earlier report",
        "data": {"ratio": 0.61},
    }
    (records / "old.json").write_text(json.dumps(history))
    old = "0.61x<!-- figure: old data.ratio -->"
    new = "0.93x<!-- figure: bench data.rows[1].ratio_to_float32 -->"
    page = tmp_path / "page.md"
    # A block entry counts as a figure, and a figure repeated counts as often as it is quoted.
    page.write_text(
        f"{old} and {new}.\n\nAgain {new}, and 197.4 img/s.\n"
        "<!-- figures:\n197.4 bench data.rows[1].images_per_sec\n-->\n"
    )
    assert figures.figure_kinds([str(page)], str(records)) == {
        "measured": 3,
        "transcribed": 0,
        "quoted": 0,
        "history": 1,
    }
    assert figures.figure_share_problems([str(page)], str(records)) == []
    page.write_text(f"{old} and {new}; {old} again.\n")
    assert figures.figure_share_problems([str(page)], str(records)) == [
        "2 of 3 quoted figures (67%) come from records without their command's output (0 transcribed, 2 history); "
        "at most 33% may"
    ]
    page.write_text(f"{old} and {new}; {new} again.\n")  # one of three: exactly the limit
    assert figures.figure_share_problems([str(page)], str(records)) == []
