#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite: unit tests on tiny random models, doctests,
# and the `slow` integration tests on SmolLM2 (pass -m "not slow" for the fast part only).
# Two pytest-xdist workers of one torch thread each keep both cores busy; a file's tests stay on
# one worker, so its module fixtures (a trained toy, a cached SAE) are built once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export HF_HUB_OFFLINE=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -n "${LMSCI_MI_TEST_WORKERS:-2}" --dist loadfile "$@"
