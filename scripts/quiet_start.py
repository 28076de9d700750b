"""A quiet TensorFlow start-up for the scripts: `import_tensorflow_quietly`.

Imported by `common` before anything imports TensorFlow.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

# What TF_CPP_MIN_LOG_LEVEL hides: 3 hides INFO, WARNING and ERROR lines, keeping FATAL.
_CPP_SEVERITIES = {"I": 0, "W": 1, "E": 2}
# A line of TensorFlow's C++ (absl) log: `E0000 00:00:1795536065.870533   27039 port.cc:153] ...` (before
# absl's logging is initialised the time reads 00:00 and the seconds since the epoch).
_CPP_LOG_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\s\]]+:\d+\] ")
_ABSL_PRE_INIT_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _kept(line: str, min_level: int) -> bool:
    """Whether TF_CPP_MIN_LOG_LEVEL=`min_level` lets a line written while TensorFlow loads through."""
    if line.rstrip("\n") == _ABSL_PRE_INIT_NOTICE:
        return min_level < 1  # absl's notice of the lines below: warning level
    match = _CPP_LOG_LINE.match(line)
    return match is None or _CPP_SEVERITIES[match.group(1)] >= min_level


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow without its C++ start-up chatter, unless the user set TF_CPP_MIN_LOG_LEVEL.

    Without a GPU a fresh import prints the oneDNN notice, "Could not find cuda
    drivers", the CPU feature guard and "failed call to cuInit" (an ERROR). The
    level defaults to 3 here, keeping FATAL lines only. The lines logged while
    the libraries load ignore it (absl writes to stderr until
    `absl::InitializeLog`), so stderr goes to a file during the import and
    only the lines the level allows are written back.
    """
    min_level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules:
        return
    try:
        min_level = int(min_level)
    except ValueError:  # TensorFlow reads an unparsable level as 0
        min_level = 0
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if _kept(line, min_level)))
            sys.stderr.flush()
