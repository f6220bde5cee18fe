#!/usr/bin/env bash
# Set up .venv if needed, then run the guided tour on the bundled SmolLM2 model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/lmsci-mi tour "$@"
