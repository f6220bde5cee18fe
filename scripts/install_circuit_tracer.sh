#!/usr/bin/env bash
# Set up the separate virtualenv where circuit-tracer runs for benchmarks/graphs_vs_circuit_tracer.py
# (and tests/unit/test_graphs_vs_circuit_tracer.py), by default /work/main/.venv-ct (override with
# CT_VENV=...). circuit-tracer pins transformers <= 4.57.3 while lmsci-mi runs on transformers 5, so
# it can never share our venv; lmsci-mi is NOT installed here: the peer side of the benchmark
# (benchmarks/circuit_tracer_side.py) needs only torch, circuit-tracer and what it pulls in.
#
# Which circuit-tracer. The reference (decoderesearch/circuit-tracer, tag v0.5.0 = commit 4bb8c0e,
# whose pyproject still says 0.4.1) is not on the package registry. The registry's only release,
# circuit-tracer 0.5.0 (2026), is built from the Caerii/circuit-tracer fork ("Original Repository:
# decoderesearch/circuit-tracer" in its metadata). Compared file by file with the tag: the
# TransformerLens attribution path (attribution/context_transformerlens.py, the attribute loop,
# graph.py, the replacement model's hooks) is the tag's code, refactored (one attribute() for both
# backends, type hints) with the same arithmetic; but its load_transcoder_set predates the tag's
# TopK loading (#94: no activation=/k= arguments, ReLU or JumpReLU only), so the benchmark builds
# TopK transcoders itself from the files (as circuit-tracer's own tests build theirs). So the
# default pins the registry's 0.5.0 (CT_SPEC=circuit-tracer==0.5.0); where the tag's source is at
# hand, CT_SPEC=/path/to/circuit-tracer-checkout-at-4bb8c0e installs that instead (a local folder
# builds with hatchling). Idempotent: rerun it to repair the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${CT_VENV:-/work/main/.venv-ct}
CT_SPEC=${CT_SPEC:-circuit-tracer==0.5.0}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# torch first, pinned to the local CPU wheel: any other spec (also the bare `torch>=2.0.0` that
# circuit-tracer declares, if torch is not there yet) downloads several GB of CUDA packages.
"${pip[@]}" torch==2.13.0
# torch==2.13.0 again beside circuit-tracer: a dependency that wants another torch fails here
# instead of replacing the CPU wheel with a CUDA build. transformers, transformer-lens, nnsight
# and safetensors come at whatever versions circuit-tracer's pins resolve to.
"${pip[@]}" "$CT_SPEC" torch==2.13.0 pyyaml

status="$VENV/circuit-tracer-status.txt"
"$VENV/bin/python" -m pip list 2>/dev/null \
  | grep -i -E '^(torch|transformers|transformer-lens|transformer_lens|circuit-tracer|circuit_tracer|nnsight|safetensors) ' \
  > "$status"
# Importing it is the check that matters (nnsight and transformer-lens are imported at its top).
"$VENV/bin/python" -c "import circuit_tracer, transformer_lens; print('circuit_tracer imports from', circuit_tracer.__file__)" \
  >> "$status"
cat "$status"
