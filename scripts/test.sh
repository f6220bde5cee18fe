#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite: unit tests on tiny random models, doctests,
# and the `slow` integration tests on SmolLM2 (pass -m "not slow" for the fast part only).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
