#!/usr/bin/env bash
# Builds tfmp's wheel and checks it as a user gets it: installed into a fresh virtual environment
# (no system site packages, so TensorFlow and the rest come from the package index) and run from
# a directory outside the checkout, so nothing can resolve to the source tree.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tfmp-wheel-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Built from a copy of the files git tracks or would track: setuptools builds in the source tree, and
# a stale build/ there would put modules deleted since into the wheel.
mkdir "$WORK/src"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard | tar -C "$ROOT" --null -T - -cf - \
    | tar -C "$WORK/src" -xf -
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$WORK/dist" "$WORK/src"
WHEEL="$(ls "$WORK"/dist/tfmp-*.whl)"

# Every module of tfmp/, models/ (installed as tfmp.models) and scripts/ (tfmp_scripts), the data
# file, the type-hints marker and the licence must be in the wheel.
python3 - "$WHEEL" "$ROOT" <<'EOF'
import os
import sys
import zipfile

wheel, root = sys.argv[1:]
names = set(zipfile.ZipFile(wheel).namelist())
expected = {"tfmp/datasets/digits.npz", "tfmp/py.typed"}
for folder, installed in (("tfmp", "tfmp"), ("models", "tfmp/models"), ("scripts", "tfmp_scripts")):
    for directory, subdirectories, files in os.walk(os.path.join(root, folder)):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        relative = os.path.relpath(directory, os.path.join(root, folder))
        for name in files:
            if name.endswith(".py"):
                expected.add(os.path.normpath(os.path.join(installed, relative, name)).replace(os.sep, "/"))
missing = sorted(expected - names)
if not any(name.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in name for name in names):
    missing.append("*.dist-info/LICENSE")
if missing:
    sys.exit(f"wheel check: {os.path.basename(wheel)} lacks {len(missing)} file(s): {', '.join(missing)}")
print(f"wheel check: {os.path.basename(wheel)} holds all {len(expected)} expected files")
EOF

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL"
cd "$WORK"

"$WORK/venv/bin/tfmp-train-gan" --help > help.txt
# absl wraps a flag with a long choice list right after its name (`  --precision:` alone on its line).
for flag in --precision --loss_scale --xla --batch_size --resume --latent_dim; do
    grep -q -- "^  --\(\[no\]\)\?${flag#--}:\( \|$\)" help.txt || { echo "wheel check: tfmp-train-gan --help lacks $flag"; exit 1; }
done

"$WORK/venv/bin/tfmp-train-classifier" --dataset=digits --alpha=0.35 --batch_size=16 --epochs=1 \
    --steps_per_epoch=2 --precision=float32 --logdir="$WORK/logs" --run_name=wheel > train.txt
grep -q "^summary: 2 steps" train.txt || { cat train.txt; echo "wheel check: no summary of a 2-step run"; exit 1; }

"$WORK/venv/bin/python" - "$WORK/venv" <<'EOF'
import os
import sys

import tfmp_scripts.common  # first: it imports TensorFlow quietly

import tfmp
import tfmp.models.gan

venv = os.path.realpath(sys.argv[1])
for module in (tfmp, tfmp.models.gan, tfmp_scripts.common):
    if not os.path.realpath(module.__file__).startswith(venv + os.sep):
        sys.exit(f"wheel check: {module.__name__} comes from {module.__file__}, not the fresh environment")
print(f"wheel check: tfmp {tfmp.__version__} installed from the wheel works (--help, a 2-step run, tfmp.models)")
EOF
