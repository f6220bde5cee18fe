"""The short-context LM (issue 40, item 5): its byte tokenizer under the LensModel policy, its data
split and rows, a tiny training run cached and loaded as a LensModel that runs at 8x its training
length. (A stopped run resuming to the same weights is the training home's, tested there.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformer_lens import HookedTransformer

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import resolve_sink
from lmsci_mi.outliers import short_context_lm as slm
from lmsci_mi.outliers import trained_context
from lmsci_mi.outliers.short_context_lm import (
    ByteTokenizer,
    ShortLMConfig,
    heldout_rows,
    load_short_context_lm,
    short_lm_documents,
    wrap_short_context_lm,
)

TINY = ShortLMConfig(n_layers=2, d_model=16, n_heads=2, n_key_value_heads=1, d_mlp=32, context=8,
                     steps=3, batch_size=4, heldout_block=1, heldout_every=2)
DOCS = [f"Document {i}: the café sells {i} coffees; the café is open." for i in range(6)]


@pytest.fixture
def tiny_lm() -> object:
    torch.manual_seed(0)
    return wrap_short_context_lm(HookedTransformer(TINY.hooked_config()), TINY)


def test_byte_tokenizer_round_trips_text_and_names_its_tokens() -> None:
    tok = ByteTokenizer()
    text = "naïve → ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode()) and tok.decode(ids) == text
    assert tok.decode([256, *ids[:3]], skip_special_tokens=True) == "na\ufffd"  # half a character
    assert tok.batch_decode([[104], [256]]) == ["h", "<|endoftext|>"]
    assert tok(["a", "bc"])["input_ids"] == [[97], [98, 99]]
    assert [tok.convert_ids_to_tokens(i) for i in (65, 256)] == ["<0x41>", "<|endoftext|>"]
    assert [tok.convert_tokens_to_ids(t) for t in ("<0x41>", "<|endoftext|>", "A", "<0xZZ>")] == [
        65, 256, None, None]
    with pytest.raises(UserInputError, match="outside the byte vocabulary"):
        tok.decode([257])


def test_the_lens_model_policy_works_on_bytes(tiny_lm) -> None:
    lm = tiny_lm
    assert lm.encode("hé") == [256, 104, 195, 169] and lm.sink == "<|endoftext|>"
    assert resolve_sink(lm.tokenizer, "<|endoftext|>", None, lm.cfg.d_vocab) == 256
    assert resolve_sink(lm.tokenizer, "a", None, lm.cfg.d_vocab) == 97
    assert lm.find_subject("The café opens", "café") == range(5, 10)  # 'é' is two bytes
    assert lm.token_id("x") == 120
    with pytest.raises(UserInputError, match="2 tokens"):
        lm.token_id("é")
    bare = wrap_short_context_lm(lm.model, TINY, sink=None)
    assert bare.encode("hé") == [104, 195, 169] and bare.sink is None
    assert lm.sample(["ab"], 3, seed=0)[0] is not None
    # The length diagnostics read the training length, not the 8x-longer n_ctx it is loaded with.
    context = trained_context(lm)
    assert (context.trained_length, context.n_ctx) == (8, 64) and "trained here" in context.source


def test_documents_split_by_blocks_and_rows_start_with_the_sink() -> None:
    config = ShortLMConfig(heldout_block=2, heldout_every=3)
    train, held = (short_lm_documents(s, config, DOCS) for s in ("train", "heldout"))
    assert held == DOCS[4:6] and train == DOCS[:4]
    with pytest.raises(UserInputError, match="'train' or 'heldout'"):
        short_lm_documents("test", config, DOCS)  # type: ignore[arg-type]
    stream = slm._stream(train)
    rows = slm._sampler(TINY, stream)
    first, again, other = rows(0, 4), rows(0, 4), rows(1, 4)
    assert first.shape == (4, TINY.context) and (first[:, 0] == 256).all()
    assert torch.equal(first, again) and not torch.equal(first, other)
    with pytest.raises(UserInputError, match="fewer than a row"):
        slm._sampler(TINY, stream[:5])


def test_config_refuses_shapes_it_cannot_build() -> None:
    with pytest.raises(UserInputError, match="multiple of n_key_value_heads"):
        ShortLMConfig(n_heads=4, n_key_value_heads=3)
    with pytest.raises(UserInputError, match="even head width"):
        ShortLMConfig(d_model=12, n_heads=4, n_key_value_heads=2)
    assert ShortLMConfig().n_ctx == 2048 and ShortLMConfig().hooked_config().n_ctx == 2048


def test_training_loads_as_a_lens_model_that_runs_at_8x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    monkeypatch.setattr(slm, "stdlib_documents", lambda: iter(DOCS * 3))
    slm._training_stream.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="train it first"):
            load_short_context_lm(TINY, train=False)
        lm, record = load_short_context_lm(TINY, threads=1, device="cpu")
        again, cached = load_short_context_lm(TINY, train=False, device="cpu")
    finally:
        slm._training_stream.cache_clear()
    assert record == cached and record["trained_context"] == 8 and len(record["run"]["losses"]) == 3
    assert all(torch.equal(a, b) for a, b in zip(lm.model.parameters(), again.model.parameters(),
                                                 strict=True))
    # trained on rows of 8 tokens, it runs (and every hook works) at 8x that
    rows = heldout_rows(lm, 2, config=TINY, documents=DOCS)
    assert rows.shape == (2, 64) and (rows[:, 0] == 256).all()
    with lm.hooks.capture(["blocks.1.attn.hook_pattern"]) as captured:
        logits = lm(rows)
    assert logits.shape == (2, 64, 257) and torch.isfinite(logits).all()
    assert captured["blocks.1.attn.hook_pattern"].shape == (2, 2, 64, 64)
    assert lm.hooks.attached_count() == 0
    with pytest.raises(UserInputError, match="held-out stdlib text holds"):
        heldout_rows(lm, 1000, config=TINY, documents=DOCS)
    with pytest.raises(UserInputError, match="n_rows must be at least 1"):
        heldout_rows(lm, 0, config=TINY, documents=DOCS)

