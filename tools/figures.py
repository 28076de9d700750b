"""Checks every figure the docs quote against the record it comes from (docs/records/*.json).

    python3 tools/figures.py              # README.md, getting-started, PERFORMANCE, NUMERICS, the guides
    python3 tools/figures.py docs/PERFORMANCE.md

A quoted figure carries an HTML comment right after it that names its record and the key of the
value in it; the comment is invisible on GitHub and on the docs site:

    the GAN ran at 0.93x<!-- figure: avx2-gan-fp16-batch256 ratio_to_float32 --> float32's speed

The check reads the number just before the comment (`0.93`), formats the record's value with as many
decimals as the quote has, and fails when the two differ. Options after the key: `scale=100` (a
percentage of a ratio), `lower` (`1 - value`, for "34% lower" with `scale=100`). A key is a dotted
path into the record (`data.ms.matmul.float32`); a segment `rows[model=gan,precision=float32]`
picks the one list item whose fields have those values (a value with a comma quoted: `[arm="a, b"]`),
`rows[0]` or `.0` an index; `a / b` quotes the ratio of two values; `NAME(KEY)` a figure derived from
a value (`DERIVED`): `step_ms(ROW)` a benchmark row's step time, counting the GAN's 2 images per example,
`slowest_kernel(NOTE)` the ratio of the slowest float16 kernel that a 16-bit run's CPU note prints.
A figure named `q=NAME` is one quantity: every page quotes it from one key with the same digits.

Where the prose should read cleanly raw (README.md), the figures of a paragraph or table go in a block on
the lines after it instead, one a line, each with the number as the text writes it:

    bfloat16 is within 1 point of float32 (mean gap -0.23 points).
    <!-- figures:
    -0.23 history data.avx512bf16-parity-sweep.arms[arm="mixed_bfloat16"].accuracy_gap
    -->

The check finds each number in the paragraph above and compares it with its record.

A sample output (a fenced block of console text) carries `<!-- sample: RECORD KEY -->` on the line
before it: each line of the block, other than `...`, must be a line of the record's text, in order.

Run on README.md and docs/ (no paths given), the check also counts the quoted figures by the kind of the
record each names (`figure_kinds`: every comment and block entry once, a repeated figure as often as it is
quoted) and fails when more than a third (`UNKEPT_FIGURE_SHARE`) come from `transcribed` or `history`
records, which do not hold their command's output.

The mkdocs build runs the same check on every page (docs/_ext/quoted_figures.py), and
tests/docs/test_quoted_figures.py on README.md and every page.

Unmarked figures: on README.md, getting-started, PERFORMANCE, NUMERICS and the guides (`GUARDED`),
every figure in prose (outside code blocks, inline code, links and comments) must carry a figure
comment (or be listed in its paragraph's block). A figure is

- a number with a unit (`MEASURED`): a ratio (`1.7x`), a percentage (`4%`), a throughput
  (`999 img/s`), a time (`118 ms`, `5 s`, `5 seconds`) or a size (`600 MB`, `21.1 MiB`, `2 GiB`); its
  comment may sit before or after the unit;
- or a number with no unit (`bare_figures`): points (`-0.64 points`); an interval, each end
  (`[-0.93, +0.47]`, `(-1.04..+0.55)`, `interval -0.93 to +0.47`); a standard deviation (`SD 3.94`); two
  ratios as a range (`0.88-1.24`); and, in a sentence that says it measured (a word of `MEASURING`:
  measured, averaged, spread, median, mean, took, ran, gave, skipped, faster, slower, against, ...), a
  bare ratio (any number with decimals, `2.95`) or a count of what a run did (`5-8 steps skipped`,
  `skips 0-1 steps`, `27 small kernels`, a range of integers such as `3-5` or `1024-128`).

To keep false alarms few, these are not figures: an integer alone, even in a measured sentence (a batch
of 256, 2 cores, 13 of the 17 layers, 35 units, 200 rounds: settings and counts of things, not results);
a range that labels (`seeds 0-7`, `folds 0-3`, `runs 1-3`); a version (`TensorFlow 2.21`, `tfmp 0.2`,
`v1.5`, `1.9.1`), a date, a commit, a section number, a model's setting (`alpha 0.35`); an interval of
integers (`[0, 1]`, a range of values). Numbers that are not measurements but look like one (a
confidence level, the parity band of 1 point, a threshold constant of tfmp's code, a flag's value, a
budget, a timeout or a test's limit) are allowed by the short list `NOT_MEASURED`.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "RECORDS",
    "REQUIRED_FIELDS",
    "GUARDED",
    "NOT_MEASURED",
    "Problem",
    "check_file",
    "check_files",
    "quantity_problems",
    "check_text",
    "covered_files",
    "KINDS",
    "HISTORY_PAGES",
    "MEASURED_SHARE",
    "UNKEPT_KINDS",
    "UNKEPT_FIGURE_SHARE",
    "figure_kinds",
    "figure_share_problems",
    "record_names",
    "record_problems",
    "CPU_CLASSES",
    "class_problems",
    "load_record",
    "lookup",
    "DERIVED",
    "IMAGES_PER_EXAMPLE",
    "step_ms",
    "slowest_kernel",
    "guarded",
    "main",
    "unmarked_figures",
    "bare_figures",
    "MEASURING",
    "COUNTED",
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(REPO, "docs", "records")
# What every record says of itself: where it was measured, how, at which tfmp, when, and whether the
# file holds the command's own output or figures transcribed from elsewhere.
REQUIRED_FIELDS = ("kind", "machine", "command", "tfmp_commit", "date", "source", "data")
# What a record is. `measured`: it holds the raw output of its command (the keys its `raw` field names:
# the --json_out file, what the command printed). `transcribed`: a measurement whose output was printed
# and not kept, read from the notes written at the time (copied into the record). `quoted`: another
# framework's figures. `history`: figures of earlier tfmp commits, or of machine classes the project can
# no longer measure, raw output not kept; the current guides and getting started do not quote them.
KINDS = ("measured", "transcribed", "quoted", "history")
# The share of records that must hold their command's raw output.
MEASURED_SHARE = 0.6
# The kinds of record that do not hold their command's output, and the largest share of the quoted figures
# (README.md and docs/) that may come from them: a reader should mostly read what a kept run printed.
UNKEPT_KINDS = ("transcribed", "history")
UNKEPT_FIGURE_SHARE = 1 / 3
# Pages that may quote the `history` record: README and the reports, which say where a figure was measured
# before, the contributors' page of what was measured before, and the CHANGELOG. Not the guides.
HISTORY_PAGES = ("README.md", "docs/PERFORMANCE.md", "docs/NUMERICS.md", "docs/measured-before.md", "CHANGELOG.md")
# The CPU classes as `tfmp.cpu_info.cpu_class` names them from the flags, each with whether it runs bfloat16
# and float16 natively (None: the class alone does not say). A record made on a machine names the class of
# its CPU in `cpu_class`; one whose CPU note came from another CPU's cached measurement names that CPU's
# class in `cpu_note_class`.
CPU_CLASSES: dict[str, tuple[bool | None, bool | None]] = {
    "AMX": (None, None),
    "AVX512-FP16": (None, True),
    "AVX512-BF16": (True, False),
    "AVX-512": (False, False),
    "AVX2 only": (False, False),
    "Arm BF16": (True, None),
    "Arm": (False, None),
}
# What a run's output says of its CPU: the note a 16-bit run prints (from the kernel measurement), the
# benchmark's first line (from the flags) and a machine id (`tfmp.cpu_info.machine_id`, from the flags).
_CPU_NOTE = re.compile(r"note: (?:bfloat16|float16) is (?:native|emulated)\b[^\n]*")
_NOTE_TYPE = re.compile(r"note: (bfloat16|float16) is (native|emulated)")
_BENCHMARK_TYPES = re.compile(r"auto measures on this CPU \((?:no 16-bit arithmetic|native (\w+)(?: and (\w+))?)")
_MACHINE_CLASS = re.compile(r" \| ([\w -]+?) \([\w ]*\) \| \d+ cpus \| ")
# A path outside the repository (absolute, a parent's, the shared folder) or one that no longer exists in it.
_OUTSIDE = re.compile(r"(?<![\w.])(?:/(?:work|home|tmp|root|mnt)/\S*|\.\./\S*|shared/\S*|REFERENCE\.md)")
_REPO_PATH = re.compile(r"(?<![\w./-])(?:docs|tools|scripts|tfmp|tests|models)/[\w./-]*\w")

FIGURE = re.compile(r"<!--\s*figure:\s*(?P<record>[\w.-]+)\s+(?P<key>.+?)(?P<options>(?:\s+\w+(?:=\S+)?)*)\s*-->")
# The block form, for prose that should read cleanly raw: on the lines after a paragraph (or a table), each
# figure of it with its record, one a line, `<!-- figures:` ... `-->`; each quoted number must be in it.
BLOCK_OPEN = re.compile(r"^\s*<!--\s*figures:\s*$")
ENTRY = re.compile(
    r"^\s*(?P<quoted>[-+\u2212]?\d[\d,]*(?:\.\d+)?)\s+(?P<record>[\w.-]+)\s+(?P<key>.+?)"
    r"(?P<options>(?:\s+\w+(?:=\S+)?)*)\s*$"
)
SAMPLE = re.compile(r"^\s*<!--\s*sample:\s*(?P<record>[\w.-]+)\s+(?P<key>\S+)\s*-->\s*$")
# A number as the docs write it: 1,353 or 0.93 or -0.23 or +0.47 (the minus may be U+2212); a sign only
# where no word, number or figure comment precedes it, so that a range's dash (9-22x) is not read as a minus.
NUMBER = re.compile(r"(?:(?<![\w.>])[-+\u2212])?\d[\d,]*(?:\.\d+)?")
_SEGMENT = re.compile(r"^(?P<name>[^\[\]]*)(?:\[(?P<select>[^\]]*)\])?$")
# field=value in a selector; a value with a comma in it is quoted: [arm="mixed_float16, initial scale 256"].
_PAIR = re.compile(r'(\w+)\s*=\s*("[^"]*"|[^,\]]*)')
_OPTIONS = ("scale", "lower", "q")

# A measured figure by its unit: 1.7x, 4%, 0.94-0.96x, 999 img/s, 118 ms, 600 MB, 21.1 MiB, 5 s; a figure
# comment may sit between the number and its unit (0.93<!-- figure: ... -->x). Not 32x32 (a size) nor
# 2 x 512 (a product); seconds only apart from their number (5 s, 5 seconds), so that 1990s is not one.
MEASURED = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:\*\*)?(?P<figure><!--\s*figure:(?:(?!-->).)*-->)?(?:\*\*)?"
    r"(?:x|[ \u00a0]?%|[ \u00a0]?[A-Za-z]+/s(?:ec)?|[ \u00a0](?:images|examples|steps|samples) (?:a|per) second"
    r"|[ \u00a0]?(?:ms|[\u00b5\u03bc]s|us)|[ \u00a0]?[KMGT]i?B|[ \u00a0](?:s|seconds?|min|minutes?|h|hours?))(?![\w/])"
)
# Numbers with those units that are not measurements, each with what it is.
NOT_MEASURED = (
    r"95%(?= interval| bootstrap| Student|$)|\(95%\)",  # a confidence level
    r"about 0\.1% probability",  # a false alarm's rate, computed from a test's bound
    r"1\.25x float32's",  # tfmp.cpu_kernels.SLOW_RATIO, the threshold of a slow float16 kernel
    r"within 5% of the",  # tfmp.run.benchmark.MaxBatchSettings.resolution
    r"at least 1% of|less than 1\.1x",  # --mode=ceiling's slow_ops rule (kernel_ceiling.py)
    r"\(8x headroom",  # the gradient report's suggested static scale
    r"--\w+=[\w.,]+",  # a flag's value, a setting (--memory_budget=2GiB), where inline code does not hide it
    r"fits \d[\d,]* ?[KMGT]i?B",  # the budget --mode=max_batch fits a batch into
    r"(?:timeout|limit|budget)s?(?: of)? \d[\d,.]* ?(?:ms|s|seconds?|[KMGT]i?B)",  # a setting or limit so named
    r"\d+ s configured",  # --worker_timeout, as the preemption test sets it
    r"under \d+ minutes",  # the default test suite's limit
    r"at least 60% of the records",  # MEASURED_SHARE
    r"within \d+ s naming",  # the preemption test's limit on a survivor's exit
    r"(?<![\d.+\u2212-])(?:\u00b1|\+-)?1[ -]point\b",  # the parity band (docs_figures.PARITY_BAND, TARGET_GAP)
    r"\b\d\.\d(?:\+| or newer)",  # a GPU's compute capability (tfmp.precision's rule)
    r"the bound is -\d+\.\d+ points",  # the accuracy sweep test's bound, from its constants (tests/run/parity)
)
_NOT_MEASURED = re.compile("|".join(NOT_MEASURED))
# A measured throughput in a block of console output: such a block is a sample, and names its record.
_SAMPLE_FIGURE = re.compile(r"\d[\d,.]*(?:e[+-]?\d+)? ?(?:img|ex|images|examples)/s\b|(?:images|examples)_per_sec \d")
# Pages whose measured figures must all carry a comment (the others quote sources, e.g. background.md).
GUARDED = (
    "README.md",
    "index.md",
    "getting-started.md",
    "PERFORMANCE.md",
    "NUMERICS.md",
    "measured-before.md",
    "glossary.md",
    "guides/",
)
_HIDDEN = re.compile(r"`[^`]*`|<!--(?!\s*figure:).*?-->|\]\([^)]*\)")

# Figures with no unit (`bare_figures`; the module's docstring says which numbers are and are not figures).
_NUMBER_TEXT = r"[-+\u2212]?\d[\d,]*(?:\.\d+)?"
_COUNT_TEXT = r"\d[\d,]*(?:[-\u2013]\d[\d,]*)?"  # 5 or 5-8
_START = r"(?<![\w.,/*^-])"  # not inside a word, a number, a path or a power
_WORD = r"(?:[a-z-]+[ \u00a0])?"  # at most one word between a count and its noun: 5-8 fewer updates
# Points: `-0.64 points`, `+0.5 point`, `2-3 points`, `1.5-point`.
_POINTS = re.compile(r"(?<![\w.,/*^])" + _NUMBER_TEXT + r"(?:[-\u2013]\d[\d,]*(?:\.\d+)?)?(?:\*\*)?[ \u00a0-]points?\b")
# An interval, each end a figure: `[-0.93, +0.47]`, `(-1.04..+0.55)` or `-1.43..+0.65`, `interval -0.93 to +0.47`.
_INTERVAL = re.compile(
    r"\[\s*(?P<a>" + _NUMBER_TEXT + r")\s*,\s*(?P<b>" + _NUMBER_TEXT + r")\s*\]"
    r"|(?<![\w.,])(?P<c>" + _NUMBER_TEXT + r")(?:\*\*)?\s*\.\.\s*(?:\*\*)?(?P<d>" + _NUMBER_TEXT + r")(?![\w.]\d?)"
    r"|\binterval (?:of )?(?P<e>" + _NUMBER_TEXT + r") to (?P<f>" + _NUMBER_TEXT + r")(?![\w.]\d?)"
)
# A standard deviation: `SD 3.94`, `standard deviation 19`, `standard deviation of 2.5`.
_SD = re.compile(r"(?:\bSD\b|\bstandard deviation)[ :=,]*(?:of |is |was )?(?P<n>" + _NUMBER_TEXT + r")")
# Two ratios as a range (`0.88-1.24`), in any sentence: a spread of measurements.
_RATIO_RANGE = re.compile(_START + r"\d+\.\d+[-\u2013]\d+\.\d+(?![\w]|\.\d)")
# The words of a sentence that says it measured; in such a sentence a bare ratio or a count is a figure.
MEASURING = re.compile(
    r"\b(?:measur\w*|averag\w*|spread\w*|median|means?(?!\()|took|timed|ran|gave|skip(?:s|ped)|faster|slower|norm"
    r"|against)\b",
    re.IGNORECASE,
)
# A bare ratio: a number with decimals and no unit (`2.95`, `-0.47`).
_RATIO = re.compile(r"(?<![\w.,/*^])[-+\u2212]?\d+\.\d+(?![\w]|\.\d)")
# The nouns of what a run did, which a count before them makes a figure: `27 small kernels`, `5-8 fewer updates`;
# and skipped steps, `skips 0-1 steps`, `5-8 steps skipped`.
COUNTED = ("updates", "launches", "kernels", "ops")
_COUNT = re.compile(
    _START + _COUNT_TEXT + r"(?:[ \u00a0][a-z-]+)?[ \u00a0](?:" + "|".join(COUNTED) + r")\b"
    r"|\bskip(?:s|ped)?[ \u00a0]" + _COUNT_TEXT + r"[ \u00a0]" + _WORD + r"steps?\b"
    r"|" + _START + _COUNT_TEXT + r"[ \u00a0]" + _WORD + r"steps?[ \u00a0](?:were[ \u00a0]|are[ \u00a0])?skipped"
)
# A range of integers (`3-5`, `1024-128`), not a date's (2026-12-02).
_RANGE = re.compile(_START + r"\d[\d,]*[-\u2013]\d[\d,]*(?![\w]|[.-]\d)")
# What may precede a number that is not a figure: a product's version, a section, a model's setting.
_VERSION_BEFORE = re.compile(
    r"(?:\b(?:TensorFlow|Keras|Python|tfmp|PyTorch|CUDA|cuDNN|Material|MkDocs|NumPy|scikit-learn|TensorBoard"
    r"|tf_keras|Chromium|release|version|section|alpha|epsilon|capability)[ \u00a0]+|\bv|\u00a7 ?)$"
)
# What labels a count or range instead of measuring it: `seeds 0-7`, `runs 1-3`.
_LABEL_BEFORE = re.compile(
    r"\b(?:seeds?|folds?|runs?|epochs?|units?|items?|blocks?|steps?|lines?|rows?|layers?|commits?|cores?|columns?)"
    r"[ \u00a0]+$"
)
# A figure comment, masked by \x01s of its length so that positions keep; a number right before one is marked.
_MASK = re.compile(r"<!--\s*figure:.*?-->")
_MARKED_AFTER = re.compile(r"(?:\*\*)?\x01")
# Where a new sentence starts: after a full stop (or ! or ?) and a space, before anything but a lower-case word.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?:\*\*)?\s+(?=[^a-z\s])")


class Problem(NamedTuple):
    """A quoted figure or sample that does not match its record.

    Attributes:
        path: The file quoting it.
        line: Its line (1-based).
        message: What differs, e.g. `0.73 quoted, the record avx2-gan ratio_to_float32 gives 0.93`.
    """

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@functools.cache
def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    missing = [field for field in REQUIRED_FIELDS if field not in record]
    if missing:
        raise ValueError(f"{path}: a record needs the fields {list(REQUIRED_FIELDS)}. Missing: {missing}")
    return record


def record_names(records: str | None = None) -> list[str]:
    """The names of the records in `records` (default: `RECORDS`), sorted."""
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(records or RECORDS, "*.json")))


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def record_problems(records: str | None = None, repo: str = REPO) -> list[str]:
    """What keeps the records from standing alone: an unknown `kind`, a measured record without its raw
    output, a path outside the repository (or one gone from it, unless named "at commit ..."), fewer
    than `MEASURED_SHARE` of the records holding their raw output, or a CPU class that is missing or
    disagrees with the record's own output (`class_problems`)."""
    problems = []
    names = record_names(records)
    measured = 0
    for name in names:
        try:
            record = load_record(name, records)
        except ValueError as e:
            problems.append(str(e))
            continue
        kind = record["kind"]
        if kind not in KINDS:
            problems.append(f"{name}: kind {kind!r} is not one of {list(KINDS)}")
        if kind == "measured":
            raw = record.get("raw") or []
            if not raw:
                problems.append(f"{name}: a measured record names the keys of its raw output in `raw`")
            for key in raw:
                try:
                    held = lookup(record, key)
                except (KeyError, IndexError, TypeError) as e:
                    problems.append(f"{name}: raw output {key!r} is missing: {e}")
                    continue
                if not held:
                    problems.append(f"{name}: raw output {key!r} is empty")
            measured += bool(raw)
        for text in _strings(record):
            for match in _OUTSIDE.finditer(text):
                problems.append(f"{name}: names a path outside the repository: {match.group()!r}")
            for match in _REPO_PATH.finditer(text):
                gone = not os.path.exists(os.path.join(repo, match.group()))
                if gone and not re.search(r"commit [0-9a-f]{7}", text):
                    problems.append(f"{name}: names {match.group()!r}, which is not in the repository")
    if names and measured < MEASURED_SHARE * len(names):
        problems.append(f"{measured} of {len(names)} records hold their raw output; at least {MEASURED_SHARE:.0%} must")
    return problems + class_problems(records)


def _native_types(text: str) -> Iterable[tuple[str, bool]]:
    """What the benchmark's first line says of each 16-bit type on the CPU: (type, native)."""
    for match in _BENCHMARK_TYPES.finditer(text):
        native = {t for t in match.groups() if t}
        yield from (("bfloat16", "bfloat16" in native), ("float16", "float16" in native))


def class_problems(records: str | None = None) -> list[str]:
    """Where a record's CPU class is missing or disagrees with its own output.

    A `measured` or `transcribed` record names its CPU's class in `cpu_class` (one of `CPU_CLASSES`).
    Its output must agree where it shows the class: a machine id (`tfmp.cpu_info.machine_id`) names it,
    the benchmark's first line names the types the CPU runs natively, and a 16-bit run's CPU note says
    whether its type is native. A note comes from one CPU's kernel measurement, its figures with it, so
    records of two classes that print the same note cannot both be right: one read a measurement another
    CPU cached. Such a record names the class that measured its note in `cpu_note_class`.
    """
    problems = []
    notes: dict[str, list[tuple[str, str]]] = {}
    for name in record_names(records):
        try:
            record = load_record(name, records)
        except ValueError:
            continue  # record_problems names it
        if record["kind"] not in ("measured", "transcribed"):
            continue
        kind = record.get("cpu_class")
        if kind not in CPU_CLASSES:
            problems.append(
                f"{name}: a record made on a machine names its CPU's class in `cpu_class`, as "
                f"tfmp.cpu_info.cpu_class() reads it from the flags: one of {list(CPU_CLASSES)}. Received: {kind!r}"
            )
            continue
        note_class = record.get("cpu_note_class", kind)
        if note_class not in CPU_CLASSES:
            problems.append(f"{name}: `cpu_note_class` is one of {list(CPU_CLASSES)}. Received: {note_class!r}")
            continue
        said: list[tuple[str, str, bool]] = []  # (where, type, native) as the output says
        for text in _strings(record["data"]):
            for match in _MACHINE_CLASS.finditer(text):
                if match.group(1) != kind:
                    problems.append(f"{name}: its output's machine id names {match.group(1)!r}, the record {kind!r}")
            said += [(kind, dtype, native) for dtype, native in _native_types(text)]
            for note in dict.fromkeys(_CPU_NOTE.findall(text)):
                dtype, native = _NOTE_TYPE.match(note).groups()
                said.append((note_class, dtype, native == "native"))
                notes.setdefault(note, []).append((name, note_class))
        for where, dtype, native in dict.fromkeys(said):
            known = CPU_CLASSES[where][dtype == "float16"]
            if known is not None and known != native:
                state = "native" if native else "emulated"
                problems.append(
                    f"{name}: its output says {dtype} is {state} on its CPU, which on an {where} CPU it is not"
                )
    for note, made in notes.items():
        classes = dict.fromkeys(cls for _, cls in made)
        if len(classes) > 1:
            named = ", ".join(f"{name} ({cls})" for name, cls in dict.fromkeys(made))
            problems.append(
                f"records of {len(classes)} CPU classes print one CPU note: {named}. A note comes from one CPU's "
                "kernel measurement: name the class that measured it in `cpu_note_class` where it is another "
                f"CPU's. The note: {note[:80]}..."
            )
    return problems


def load_record(name: str, records: str | None = None) -> dict:
    """The record `<records>/<name>.json` (default: `RECORDS`), checked for `REQUIRED_FIELDS`.

    Raises:
        FileNotFoundError: when there is no such record.
        ValueError: when it lacks a required field.
    """
    return _load(os.path.join(records or RECORDS, f"{name}.json"))


def _literal(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _step(value: object, segment: str, key: str) -> object:
    match = _SEGMENT.match(segment)
    if match is None:
        raise KeyError(f"key {key!r}: cannot read the segment {segment!r}")
    if match["name"] and isinstance(value, list) and re.fullmatch(r"-?\d+", match["name"]):
        value = value[int(match["name"])]  # `ratio.1`: an index into a list of figures (min, median, max)
    elif match["name"]:
        if not isinstance(value, dict) or match["name"] not in value:
            raise KeyError(f"key {key!r}: no {match['name']!r} here. Received fields: {_fields(value)}")
        value = value[match["name"]]
    select = match["select"]
    if select is None:
        return value
    if not isinstance(value, list):
        raise KeyError(f"key {key!r}: [{select}] needs a list. Received: {type(value).__name__}")
    if re.fullmatch(r"-?\d+", select):
        return value[int(select)]
    pairs = _PAIR.findall(select)
    if not pairs:
        raise KeyError(f"key {key!r}: [{select}] is neither an index nor field=value pairs")
    wanted = {k: _literal(v.strip()) for k, v in pairs}
    found = [item for item in value if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items())]
    if len(found) != 1:
        raise KeyError(f"key {key!r}: [{select}] matches {len(found)} items, not one")
    return found[0]


def _fields(value: object) -> list[str]:
    return sorted(value) if isinstance(value, dict) else []


# Images per example of a benchmark row's model, as the benchmark counts them (`images_per_example` of
# tfmp's trainers): the GAN's step takes a batch of real images and generates as many.
IMAGES_PER_EXAMPLE = {"gan": 2}


def step_ms(row: dict) -> float:
    """A benchmark row's step time in ms, from its fields: batch_size x images per example / images_per_sec."""
    images = row["batch_size"] * IMAGES_PER_EXAMPLE.get(row["model"], 1)
    return 1000.0 * images / row["images_per_sec"]


def slowest_kernel(note: str) -> float:
    """The ratio a 16-bit run's CPU note gives its slowest float16 kernel (`... takes 1.9x float32's time`).

    Raises:
        KeyError: when `note` names no slowest kernel.
    """
    match = re.search(r"slowest kernel, [^,]+, takes (\d+(?:\.\d+)?)x float32's time", str(note))
    if match is None:
        raise KeyError(f"slowest_kernel: the text names no slowest kernel. Received: {str(note)[:120]!r}")
    return float(match[1])


# Figures the check derives from a record's fields (a key `NAME(KEY)`), so that no marker computes by hand or
# copies a figure out of a record's raw output: `step_ms(ROW)`, `slowest_kernel(NOTE)`.
DERIVED = {"step_ms": step_ms, "slowest_kernel": slowest_kernel}


def lookup(record: dict, key: str) -> object:
    """The value at `key` in `record` (the grammar is in the module's docstring); `a / b` divides two values.

    Raises:
        KeyError: naming the key and what was there instead.
    """
    if " / " in key:
        numerator, denominator = (lookup(record, part.strip()) for part in key.split(" / ", 1))
        return float(numerator) / float(denominator)
    derived = re.fullmatch(r"(?P<name>\w+)\((?P<key>.+)\)", key)
    if derived is not None:
        if derived["name"] not in DERIVED:
            raise KeyError(f"key {key!r}: no derived figure {derived['name']!r} (known: {sorted(DERIVED)})")
        return DERIVED[derived["name"]](lookup(record, derived["key"]))
    value: object = record
    for segment in key.split("."):
        value = _step(value, segment, key)
    return value


def _quoted_number(line: str, start: int, end: int) -> str | None:
    """The last number in `line[start:end]`, the text before a figure's comment (its own quote), or None."""
    numbers = [m.group() for m in NUMBER.finditer(line, start, end)]
    return numbers[-1] if numbers else None


def _format(value: float, quoted: str) -> str:
    digits = quoted.split(".", 1)[1] if "." in quoted else ""
    return f"{value:.{len(digits)}f}"


def _plain(quoted: str) -> str:
    return quoted.replace(",", "").replace("\u2212", "-").lstrip("+")


def _check_figure(match: re.Match, quoted: str | None, path: str, line: int) -> Problem | None:
    name, key = match["record"], match["key"].strip()
    options = dict(
        (option.split("=", 1) + [""])[:2]
        for option in match["options"].split()
        if option  # noqa: RUF005
    )
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        return Problem(path, line, f"figure {name} {key}: unknown options {unknown} (known: {list(_OPTIONS)})")
    if quoted is None:
        return Problem(path, line, f"figure {name} {key}: no number before the comment")
    try:
        value = lookup(load_record(name), key)
    except (OSError, ValueError, KeyError, IndexError, TypeError, ZeroDivisionError) as e:
        return Problem(path, line, f"figure {name} {key}: {e}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return Problem(path, line, f"figure {name} {key}: the record holds {value!r}, not a number")
    if "lower" in options:
        value = 1 - value
    value *= float(options.get("scale") or 1)
    plain = _plain(quoted)
    expected = _format(value, plain)
    if float(expected) == float(plain):  # -0.0 and 0.0 alike
        return None
    return Problem(path, line, f"{quoted} quoted, the record {name} {key} gives {expected}")


def _record_lines(value: object) -> list[str]:
    text = "\n".join(value) if isinstance(value, list) else str(value)
    return [line.rstrip() for line in text.splitlines()]


def _check_sample(match: re.Match, block: Sequence[str], path: str, line: int) -> Problem | None:
    name, key = match["record"], match["key"]
    try:
        lines = _record_lines(lookup(load_record(name), key))
    except (OSError, ValueError, KeyError, IndexError, TypeError, ZeroDivisionError) as e:
        return Problem(path, line, f"sample {name} {key}: {e}")
    at = 0
    for shown in block:
        if shown.strip() in ("...", ""):
            continue
        try:
            at = lines.index(shown.rstrip(), at) + 1
        except ValueError:
            return Problem(path, line, f"sample {name} {key}: this line is not in the record (in order): {shown!r}")
    return None


def _fenced_block(lines: Sequence[str], start: int) -> list[str] | None:
    """The lines inside the fenced block opening at `lines[start]`, or None if none opens there."""
    if start >= len(lines) or not lines[start].lstrip().startswith(("```", "~~~")):
        return None
    fence = lines[start].lstrip()[:3]
    block = []
    for line in lines[start + 1 :]:
        if line.lstrip().startswith(fence):
            return block
        block.append(line)
    return None


class _Block(NamedTuple):
    first: int  # the paragraph's first and last line (0-based), the block's first and last line
    last: int
    opens: int
    closes: int
    entries: list  # (line index, ENTRY match or None)


def _blocks(lines: Sequence[str]) -> list[_Block]:
    """Every `<!-- figures:` block in `lines`, with the paragraph (or table) it follows."""
    blocks = []
    at = 0
    while at < len(lines):
        if not BLOCK_OPEN.match(lines[at]):
            at += 1
            continue
        closes = at + 1
        while closes < len(lines) and lines[closes].strip() != "-->":
            closes += 1
        last = at - 1
        while last >= 0 and not lines[last].strip():
            last -= 1
        first = last
        while first > 0 and lines[first - 1].strip() and not lines[first - 1].lstrip().startswith("#"):
            first -= 1
        entries = [(i, ENTRY.match(lines[i])) for i in range(at + 1, min(closes, len(lines))) if lines[i].strip()]
        blocks.append(_Block(first, last, at, closes, entries))
        at = closes + 1
    return blocks


def _unsigned(number: str) -> str:
    return _plain(number).lstrip("-")


def _paragraphs(prose: dict[int, str]) -> list[list[int]]:
    """The prose lines (0-based) in paragraphs: a blank line, code, a heading, a table row, a list item or an
    admonition starts a new one."""
    groups: list[list[int]] = []
    current: list[int] = []
    last = None
    for i in sorted(prose):
        text = prose[i].strip()
        starts = (
            not text
            or last is None
            or i != last + 1
            or re.match(r"(?:#|\||[-*+] |\d+\. |!!!|>)", text)
            or (current and prose[current[-1]].lstrip().startswith("|"))
        )
        if starts and current:
            groups.append(current)
            current = []
        if text:
            current.append(i)
        last = i
    if current:
        groups.append(current)
    return groups


_DIGITS = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _numbers(match: re.Match, at: int) -> list[tuple[int, int]]:
    """The spans of the numbers in `match`, a match in a sentence that starts at `at` in its paragraph."""
    return [(at + match.start() + m.start(), at + match.start() + m.end()) for m in _DIGITS.finditer(match.group())]


def _candidates(sentence: str, at: int, measured: bool) -> Iterable[tuple[str, int, int, list[tuple[int, int]]]]:
    """Each figure with no unit in `sentence` (starting at `at` in its paragraph): its kind, its span, and the
    spans of its numbers. With `measured` (the sentence says it measured), also its bare ratios and counts."""
    for match in _POINTS.finditer(sentence):
        yield "points", at + match.start(), at + match.end(), _numbers(match, at)
    for match in _INTERVAL.finditer(sentence):
        if "." not in match.group():  # [0, 1]: a range of values, not a measured interval
            continue
        ends = [(at + match.start(g), at + match.end(g)) for g in "abcdef" if match.group(g) is not None]
        yield "an interval", at + match.start(), at + match.end(), ends
    for match in _SD.finditer(sentence):
        number = (at + match.start("n"), at + match.end("n"))
        yield "a standard deviation", at + match.start(), at + match.end(), [number]
    for match in _RATIO_RANGE.finditer(sentence):
        if not _VERSION_BEFORE.search(sentence[max(0, match.start() - 40) : match.start()]):
            yield "a range of ratios", at + match.start(), at + match.end(), _numbers(match, at)
    if not measured:
        return
    for match in _RATIO.finditer(sentence):
        if not _VERSION_BEFORE.search(sentence[max(0, match.start() - 40) : match.start()]):
            yield "a measured ratio", at + match.start(), at + match.end(), [(at + match.start(), at + match.end())]
    for pattern in (_COUNT, _RANGE):
        for match in pattern.finditer(sentence):
            digit = match.start() + re.search(r"\d", match.group()).start()
            before = sentence[max(0, digit - 40) : digit]
            if not (_LABEL_BEFORE.search(before) or _VERSION_BEFORE.search(before)):
                yield "a measured count", at + match.start(), at + match.end(), _numbers(match, at)


def bare_figures(
    prose: dict[int, str], anchored: dict[int, set[str]], path: str = "<text>"
) -> list[tuple[int, int, Problem]]:
    """The figures with no unit in `prose` (0-based line -> its prose) that carry no comment and are not listed in
    their paragraph's block (`anchored`: 0-based line -> the numbers its block lists), each as (line, column,
    problem); the module's docstring says what they are. A sentence is read whole, across the lines of its
    paragraph."""
    found = []
    for paragraph in _paragraphs(prose):
        starts = []
        at = 0
        for i in paragraph:
            starts.append(at)
            at += len(prose[i]) + 1
        text = "\n".join(prose[i] for i in paragraph)
        masked = _MASK.sub(lambda m: "\x01" * len(m.group()), text)
        units = [(m.start(), m.end()) for m in MEASURED.finditer(text)]

        def line_of(position: int) -> int:
            index = max(k for k, start in enumerate(starts) if start <= position)
            return paragraph[index]

        seen: list[tuple[int, int]] = []
        bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(masked)), len(masked)]
        for start, end in zip(bounds, bounds[1:]):
            sentence = masked[start:end]
            measured = MEASURING.search(sentence) is not None
            for kind, first, last, numbers in _candidates(sentence, start, measured):
                if any(s < last and first < e for s, e in seen) or any(s <= first < e for s, e in units):
                    continue
                seen.append((first, last))
                if len(numbers) == 1 and _MARKED_AFTER.match(masked, last):  # `-0.64 points<!-- figure: ... -->`
                    continue
                unmarked = [
                    (s, e)
                    for s, e in numbers
                    if not _MARKED_AFTER.match(masked, e) and _unsigned(masked[s:e]) not in anchored.get(line_of(s), ())
                ]
                if unmarked:
                    line = line_of(unmarked[0][0])
                    column = unmarked[0][0] - starts[paragraph.index(line)]
                    shown = " ".join(masked[first:last].replace("\x01", "").split())
                    found.append(
                        (line + 1, column, Problem(path, line + 1, f"{shown!r} quoted with no figure comment ({kind})"))
                    )
    return found


def unmarked_figures(text: str, path: str = "<text>") -> list[Problem]:
    """Every figure in the prose of `text` with no comment, not in `NOT_MEASURED`: a ratio, percentage, img/s,
    time or size (`MEASURED`), and the figures with no unit that `bare_figures` finds."""
    found = []
    fence = None
    lines = text.splitlines()
    anchored: dict[int, set[str]] = {}  # line (0-based) -> the numbers a block below marks
    inside: set[int] = set()  # the lines of the blocks themselves
    prose_lines: dict[int, str] = {}
    for block in _blocks(lines):
        numbers = {_unsigned(match["quoted"]) for _, match in block.entries if match}
        for i in range(block.first, block.last + 1):
            anchored.setdefault(i, set()).update(numbers)
        inside.update(range(block.opens, block.closes + 1))
    for number, line in enumerate(lines, 1):
        if number - 1 in inside:
            prose_lines[number - 1] = ""
            continue
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            block = _fenced_block(lines, number - 1) or []
            marked = number > 1 and SAMPLE.match(lines[number - 2])
            if not marked and any(_SAMPLE_FIGURE.search(shown) for shown in block):
                found.append(
                    (number, 0, Problem(path, number, "a sample output with a throughput and no sample comment"))
                )
            continue
        if fence is not None:
            fence = None if stripped.startswith(fence) else fence
            continue
        prose = _NOT_MEASURED.sub(" ", _HIDDEN.sub(" ", line))
        prose_lines[number - 1] = prose
        for match in MEASURED.finditer(prose):
            marked = match["figure"] or re.match(r"(?:\*\*)?<!--\s*figure:", prose[match.end() :])
            lead = NUMBER.match(match.group().lstrip("*"))
            marked = marked or (lead is not None and _unsigned(lead.group()) in anchored.get(number - 1, ()))
            if not marked:
                found.append(
                    (number, match.start(), Problem(path, number, f"{match.group()!r} quoted with no figure comment"))
                )
    found += bare_figures(prose_lines, anchored, path)
    return [problem for _, _, problem in sorted(found, key=lambda item: item[:2])]


def guarded(path: str) -> bool:
    """Whether `path` is a page whose measured figures must all be marked (`GUARDED`)."""
    relative = os.path.relpath(os.path.abspath(path), REPO).replace(os.sep, "/")
    return any(relative == name or relative.startswith("docs/" + name) for name in GUARDED)


def check_text(text: str, path: str = "<text>", guard: bool = False) -> list[Problem]:
    """Every quoted figure and sample in the markdown `text` that differs from its record.

    With `guard`, also every measured figure that carries no comment (`unmarked_figures`).
    """
    problems = unmarked_figures(text, path) if guard else []
    lines = text.splitlines()
    for block in _blocks(lines):
        if block.closes >= len(lines):
            problems.append(Problem(path, block.opens + 1, "a figures block with no closing `-->` line"))
            continue
        paragraph = " ".join(_HIDDEN.sub(" ", FIGURE.sub(" ", lines[i])) for i in range(block.first, block.last + 1))
        written = {_unsigned(m.group()) for m in NUMBER.finditer(paragraph)}
        for i, match in block.entries:
            if match is None:
                problems.append(Problem(path, i + 1, f"cannot read this figures entry: {lines[i].strip()!r}"))
                continue
            if _unsigned(match["quoted"]) not in written:
                problems.append(Problem(path, i + 1, f"{match['quoted']} is not in the paragraph above its block"))
            problem = _check_figure(match, match["quoted"], path, i + 1)
            if problem is not None:
                problems.append(problem)
    for number, line in enumerate(lines, 1):
        sample = SAMPLE.match(line)
        if sample is not None:
            block = _fenced_block(lines, number)
            problem = (
                Problem(path, number, f"sample {sample['record']}: no fenced block on the next line")
                if block is None
                else _check_sample(sample, block, path, number)
            )
            if problem is not None:
                problems.append(problem)
            continue
        end = 0
        for match in FIGURE.finditer(line):
            problem = _check_figure(match, _quoted_number(line, end, match.start()), path, number)
            if problem is not None:
                problems.append(problem)
            end = match.end()
    return problems


def check_file(path: str) -> list[Problem]:
    """`check_text` of one file, with the guard against unmarked figures where `guarded(path)`."""
    with open(path, encoding="utf-8") as f:
        return check_text(f.read(), os.path.relpath(path, REPO), guard=guarded(path))


def covered_files(repo: str = REPO) -> list[str]:
    """README.md and every page under docs/ (the guides, the reports, getting started), API pages aside."""
    pages = [p for p in glob.glob(os.path.join(repo, "docs", "**", "*.md"), recursive=True)]
    pages = [p for p in pages if os.sep + "api" + os.sep not in p]
    return [os.path.join(repo, "README.md"), *sorted(pages)]


def _quotes(paths: Iterable[str]) -> list[tuple[str, int, str, str, dict]]:
    """Each figure comment in `paths`: (path, line, the number quoted, record + key, options)."""
    quotes = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for block in _blocks(text.splitlines()):
            for i, match in block.entries:
                if match is not None:
                    options = dict((o.split("=", 1) + [""])[:2] for o in match["options"].split())  # noqa: RUF005
                    source = f"{match['record']} {match['key'].strip()}"
                    quotes.append((os.path.relpath(path, REPO), i + 1, _plain(match["quoted"]), source, options))
        for number, line in enumerate(text.splitlines(), 1):
            end = 0
            for match in FIGURE.finditer(line):
                quoted = _quoted_number(line, end, match.start())
                end = match.end()
                options = dict((o.split("=", 1) + [""])[:2] for o in match["options"].split())  # noqa: RUF005
                source = f"{match['record']} {match['key'].strip()}"
                quotes.append((os.path.relpath(path, REPO), number, _plain(quoted or ""), source, options))
    return quotes


def quantity_problems(paths: Iterable[str]) -> list[Problem]:
    """One quantity, one figure: a named quantity (`q=NAME`) comes from one record key wherever it is quoted,
    with the same digits; and one record key is quoted with the same digits on every page."""
    problems = []
    named: dict[str, tuple] = {}
    keyed: dict[tuple, tuple] = {}
    for path, line, quoted, source, options in _quotes(paths):
        name = options.pop("q", None)
        what = (source, tuple(sorted(options.items())))
        if name:
            first = named.setdefault(name, (what, quoted, path, line))
            if first[0] != what:
                where = f"{first[2]}:{first[3]}"
                problems.append(
                    Problem(path, line, f"quantity {name}: from {source}, but {where} quotes it from {first[0][0]}")
                )
            elif first[1] != quoted:
                where = f"{first[2]}:{first[3]}"
                problems.append(Problem(path, line, f"quantity {name}: {quoted} here, {first[1]} at {where}"))
        first = keyed.setdefault(what, (quoted, path, line))
        if first[0] != quoted and first[1] != path:
            problems.append(Problem(path, line, f"{source}: {quoted} here, {first[0]} at {first[1]}:{first[2]}"))
    return problems


def figure_kinds(paths: Iterable[str], records: str | None = None) -> dict[str, int]:
    """How many figures `paths` quote from records of each kind (`KINDS`).

    Every figure comment and every entry of a figures block is one quoted figure, counted by the `kind` of the
    record it names (`records`, default `RECORDS`), as often as a page quotes it: a figure repeated on two
    pages counts twice. A figure naming no readable record is not counted (`check_files` reports it).
    """
    counts = dict.fromkeys(KINDS, 0)
    for *_, source, _ in _quotes(paths):
        try:
            kind = load_record(source.split()[0], records)["kind"]
        except (OSError, ValueError):
            continue
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def figure_share_problems(paths: Iterable[str], records: str | None = None) -> list[str]:
    """A problem if more than `UNKEPT_FIGURE_SHARE` of the figures `paths` quote come from records that do not
    hold their command's output (`UNKEPT_KINDS`), counted by `figure_kinds`; else none."""
    counts = figure_kinds(paths, records)
    total = sum(counts.values())
    unkept = sum(counts.get(kind, 0) for kind in UNKEPT_KINDS)
    if total and unkept > UNKEPT_FIGURE_SHARE * total:
        by_kind = ", ".join(f"{counts.get(kind, 0)} {kind}" for kind in UNKEPT_KINDS)
        return [
            f"{unkept} of {total} quoted figures ({unkept / total:.0%}) come from records without their command's "
            f"output ({by_kind}); at most {UNKEPT_FIGURE_SHARE:.0%} may"
        ]
    return []


def check_files(paths: Iterable[str]) -> list[Problem]:
    """`check_file` of each path, and `quantity_problems` across them."""
    paths = list(paths)
    return [problem for path in paths for problem in check_file(path)] + quantity_problems(paths)


# The problems of a figure or sample that names no record, as `unmarked_figures` words them.
_UNRECORDED = re.compile(r"quoted with no figure comment|with a throughput and no sample comment")


def main(argv: Sequence[str] | None = None) -> int:
    """Checks the given files (default: `covered_files()`, and then also `figure_share_problems` over them);
    prints each problem and the count of quoted figures by their record's kind; 1 if any problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="Markdown files (default: README.md and docs/).")
    args = parser.parse_args(argv)
    paths = args.paths or covered_files()
    problems = check_files(paths)
    for problem in problems:
        print(problem)
    share = [] if args.paths else figure_share_problems(paths)
    for problem in share:
        print(problem)
    quoted = len(_quotes(paths))
    unrecorded = sum(1 for problem in problems if _UNRECORDED.search(problem.message))
    counts = figure_kinds(paths)
    by_kind = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    print(
        f"{quoted} quoted figures in {len(paths)} files ({by_kind}); {len(problems) - unrecorded} differ from "
        f"their records, {unrecorded} without a record"
    )
    return 1 if problems or share else 0


if __name__ == "__main__":
    sys.exit(main())
