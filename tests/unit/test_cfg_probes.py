"""The CFG GPT's trainer and cache, its evaluation, the probe table and the attention transitions,
on tiny budgets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg import (
    AttentionTransitionConfig,
    CFGModelConfig,
    CFGProbeConfig,
    CFGProbeTable,
    cfg_attention_transitions,
    cfg_hidden_states,
    cfg_probe_table,
    evaluate_cfg_model,
    load_cfg_model,
    random_cfg_model,
    train_cfg_model,
)
from lmsci_mi.probes.cfg import model as cfg_model
from lmsci_mi.sites import hook_name

TINY = CFGModelConfig(
    n_layers=1, d_model=32, n_heads=2, context=64, batch_size=4, steps=30, warmup=5
)
GRAMMAR = CFGConfig()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    return tmp_path


def test_training_lowers_the_loss_and_is_seeded() -> None:
    grammar = build_grammar(GRAMMAR)
    model, record = train_cfg_model(grammar, TINY)
    again, _ = train_cfg_model(grammar, TINY)
    chance = torch.log(torch.tensor(float(grammar.vocab_size)))
    assert record.final_loss < chance - 0.2
    assert record.tokens == 30 * 4 * 64 and record.seconds > 0
    for (name, a), (_, b) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_cache_is_reused_and_keyed_by_config(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="--train"):
        load_cfg_model(GRAMMAR, TINY, train=False)
    lm, record = load_cfg_model(GRAMMAR, TINY, device="cpu")
    assert lm.sink_token_id == 0 and lm.tokenizer is None

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again although cached")

    monkeypatch.setattr(cfg_model, "train_model", no_training)  # the loop every training runs
    again, record_again = load_cfg_model(GRAMMAR, TINY, device="cpu", train=False)
    assert record_again == record
    assert torch.equal(again.model.W_E, lm.model.W_E)
    with pytest.raises(FileNotFoundError):
        load_cfg_model(GRAMMAR, TINY.replace(seed=1), train=False)
    assert len(list((cache / "cfg").iterdir())) == 1


def test_evaluation_of_a_random_model() -> None:
    grammar = build_grammar(GRAMMAR)
    lm = random_cfg_model(GRAMMAR, TINY, device="cpu")
    result = evaluate_cfg_model(lm, grammar, n_documents=20, n_samples=20)
    assert 0 <= result.next_token_accuracy <= 1 and result.loss > 0
    assert result.validity < 0.2  # random weights do not write grammatical strings
    assert lm.hooks.attached_count() == 0


def test_attention_transitions_see_boundary_to_boundary_heads() -> None:
    """Replace every pattern through the registry: a previous-token head depends on distance only,
    so its bias-removed transitions are 0; a head that looks from each token to the last earlier
    deepest-level NT end scores highest on the transitions into the deepest level."""
    grammar = build_grammar(GRAMMAR)
    lm = random_cfg_model(GRAMMAR, TINY, device="cpu")
    config = AttentionTransitionConfig(n_sequences=30, batch_size=30)
    names = [hook_name("pattern", layer) for layer in range(lm.cfg.n_layers)]

    def previous_token(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        n = pattern.shape[-1]
        shifted = torch.eye(n).roll(-1, dims=1).tril()
        shifted[0, 0] = 1.0
        return shifted.expand_as(pattern).clone()

    with lm.hooks.hooks(fwd=[(name, previous_token) for name in names]):
        flat = cfg_attention_transitions(lm, grammar, config)
    assert flat.values.abs().max() < 1e-5

    sample = grammar.sample(config.n_sequences, seed=config.seed)
    _, _, ends, mask = sample.padded()
    deepest = ends[..., -1] & mask

    def to_last_end(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        n = pattern.shape[-1]
        marked = torch.where(deepest[:, :n], torch.arange(n), torch.zeros(n, dtype=torch.long))
        latest = torch.cummax(marked, dim=1).values
        previous = torch.cat([torch.zeros_like(latest[:, :1]), latest[:, :-1]], dim=1)
        one_hot = torch.nn.functional.one_hot(previous, n).float()
        return one_hot[:, None].expand_as(pattern).clone()

    with lm.hooks.hooks(fwd=[(name, to_last_end) for name in names]):
        result = cfg_attention_transitions(lm, grammar, config)
    # every NT end is also a deepest-level end, so the whole last column lights up
    assert (result.values[:, -1] > 0.3).all()
    assert (result.values.argmax(1) == len(result.values) - 1).all()
    assert lm.hooks.attached_count() == 0


@pytest.mark.slow  # trains every probe of the table
def test_probe_table_round_trip(tmp_path: Path) -> None:
    grammar = build_grammar(GRAMMAR)
    lm = random_cfg_model(GRAMMAR, TINY, device="cpu")
    trained = random_cfg_model(GRAMMAR, TINY.replace(seed=3), device="cpu")
    config = CFGProbeConfig(
        n_sequences=30, multihead_steps=5, attention=True, evaluate=False, n_samples=5
    )
    table = cfg_probe_table(trained, lm, grammar, config)
    assert table.values.shape == (2, 2, 2, 2, 3)
    assert ((table.values >= 0) & (table.values <= 1)).all()
    assert table.attention is not None and table.attention_random is not None
    frame = table.to_dataframe()
    assert len(frame) == table.values.numel()
    assert set(frame["target"]) == {"ancestor", "ancestor at NT end", "boundary"}
    row = frame.iloc[-1]  # the last cell: last level, last layer, random, multihead, boundary
    assert row["value"] == pytest.approx(float(table.values[-1, -1, 1, 1, 2]))
    assert row["balanced_accuracy"] == pytest.approx(float(table.balanced[-1, -1, 1, 1, 2]))
    assert row["majority"] == pytest.approx(float(table.majority[-1, 2]))
    loaded = CFGProbeTable.load(table.save(tmp_path / "cfg.json"))
    assert loaded == table
    assert loaded.attention == table.attention
    # most tokens end no NT, at every level: the boundary's majority class is "no end"
    assert (table.majority[:, 2] > 0.5).all() and (table.majority > 0).all()
    table.plot(tmp_path / "cfg.png")
    assert (tmp_path / "cfg.png").stat().st_size > 0


def test_hidden_states_match_a_plain_capture() -> None:
    grammar = build_grammar(GRAMMAR)
    lm = random_cfg_model(GRAMMAR, TINY, device="cpu")
    tokens, _, _, mask = grammar.sample(12, seed=5).padded(bos=grammar.bos, pad=grammar.eos)
    hidden = cfg_hidden_states(lm, tokens, mask)
    last = hook_name("resid_post", lm.cfg.n_layers - 1)
    with lm.hooks.capture([last]) as captured:
        lm.model(tokens, return_type=None)
    assert hidden.shape == (lm.cfg.n_layers + 1, *tokens.shape, lm.cfg.d_model)
    assert torch.allclose(hidden[-1][mask], captured[last][mask], atol=1e-5)
    assert (hidden[:, ~mask] == 0).all()  # BOS and padding stay empty


def test_cli_refuses_bad_export_and_missing_model(cache: Path) -> None:
    import argparse

    from lmsci_mi.cli.probe_cfg import add_cfg_arguments

    parser = argparse.ArgumentParser()
    add_cfg_arguments(parser)
    with pytest.raises(SystemExit):  # a usage error, before anything runs
        parser.parse_args(["--export", "table.txt"])
    # The default GPT ships with the package, so only another config can be missing.
    with pytest.raises(FileNotFoundError, match="--train"):
        load_cfg_model(GRAMMAR, TINY, train=False)
    with pytest.raises(SystemExit):
        parser.parse_args(["--n-sequences", "many"])
