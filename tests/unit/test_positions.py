"""One position-exclusion mechanism (lmsci_mi.positions.Exclude): its keep-masks (sink, positions,
tokens; with and without a sink token; padded; in a running pass under cached generation), each
consumer's default equal to what it computed before the mechanism existed and changed by an extra
exclusion, and no literal sink slice left in library code."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lmsci_mi
from lmsci_mi import LensModel, load_model, readout
from lmsci_mi.circuits.attribution import AttributionConfig, attribution_patch
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.circuits.patching import PatchingConfig, patch_activations
from lmsci_mi.collect import (
    CollectConfig,
    collect_activations,
    positions_to_collect,
    select_positions,
)
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.editing.stats import STDLIB_TEXT, StatsConfig, _cache_key, key_statistics
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.hooks import PositionScope
from lmsci_mi.knowledge.triggers import TriggerConfig, top_coefficients
from lmsci_mi.lenses.least_squares import normal_equations
from lmsci_mi.lenses.tuned_lens import TunedLensConfig, tuned_lens_path
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.intervene import clamp_sae_feature, steer_with_sae_feature
from lmsci_mi.sae.stats import reconstruction_loss
from lmsci_mi.sae.train import SAETrainConfig, _training_sae
from lmsci_mi.sites import hook_name
from lmsci_mi.steering.highlight import HighlightConfig, highlight_keywords, max_spans
from lmsci_mi.steering.lm_steer import LMSteer, LMSteerConfig
from lmsci_mi.steering.vectors import (
    MeanDifferenceConfig,
    SteeringVector,
    mean_difference_vector,
    steering_vector,
)

ROOT = Path(__file__).resolve().parents[2] / "lmsci_mi"

# ------------------------------------------------------------------ the masks


def test_the_default_is_the_sink_and_nothing_is_nothing() -> None:
    assert lmsci_mi.Exclude is Exclude and "Exclude" in lmsci_mi.__all__
    tokens = torch.tensor([[0, 5, 6, 7]])
    assert resolve_exclude(None) == Exclude() and Exclude().is_default
    assert Exclude().keep(tokens).tolist() == [[False, True, True, True]]
    assert Exclude.nothing().keep(tokens).all()
    assert Exclude(positions=(3, 1, 3)).positions == (1, 3)  # one spelling per exclusion
    assert Exclude.leading(3) == Exclude(positions=(1, 2)) and Exclude.leading(0) == Exclude.nothing()
    with pytest.raises(UserInputError):
        Exclude(positions=(-1,))
    with pytest.raises(TypeError):
        resolve_exclude(1)  # type: ignore[arg-type]


def test_positions_and_tokens_with_and_without_a_sink_token(tiny: LensModel) -> None:
    bare = load_model("toy-2l", device="cpu", sink=None)
    text = "The cat. The dog."
    period = tiny.encode(".")[-1]
    for lm in (tiny, bare):
        tokens = torch.tensor([lm.encode(text)])
        keep = Exclude(positions=(2,), token_ids=(period,)).keep(tokens)[0]
        dropped = {i for i, k in enumerate(keep.tolist()) if not k}
        periods = {i for i, t in enumerate(tokens[0].tolist()) if t == period}
        assert periods and dropped == {0, 2} | periods
    # Without a sink token, position 0 is the first word, which takes the sink's role.
    assert bare.encode(text)[0] != tiny.sink_token_id


def test_padded_batches_keep_no_padding(tiny: LensModel) -> None:
    batch = tiny.pad_batch([tiny.encode("The cat sat on the mat"), tiny.encode("A dog")])
    keep = Exclude().keep(batch.tokens, lengths=batch.lengths)
    assert keep.sum(1).tolist() == [n - 1 for n in batch.lengths.tolist()]
    assert not keep[1, int(batch.lengths[1]) :].any()
    # A cached step at absolute position 5 is never the sink.
    assert Exclude(positions=(6,)).keep(torch.tensor([[3, 4]]), offset=5).tolist() == [[True, False]]


def test_a_scope_takes_the_exclusion_and_skip_stays_its_alias() -> None:
    assert PositionScope.all(skip=1) == PositionScope.all(exclude=Exclude())
    assert PositionScope.all(skip=1).skip == 1
    mask = PositionScope.prompt(skip=2, exclude=Exclude(sink=False, positions=(4,))).mask(1, 6, "cpu")
    assert mask.tolist() == [[False, False, True, True, False, True]]
    with pytest.raises(UserInputError, match="RunningExclusion"):
        PositionScope.all(exclude=Exclude(token_ids=(3,)))


@pytest.mark.parametrize("sink", ["default", None])
def test_the_running_mask_under_cached_generation_equals_the_token_mask(sink: str | None) -> None:
    lm = load_model("toy-2l", device="cpu") if sink else load_model("toy-2l", device="cpu", sink=None)
    prompts = ["The cat sat on the mat", "A dog ran to the park"]
    ids = [lm.encode(p) for p in prompts]
    assert len(ids[0]) == len(ids[1])  # equal lengths: the grid has no row past its own end
    exclude = Exclude(positions=(3,), token_ids=(ids[0][2], ids[1][4]))
    for use_kv_cache in (True, False):
        running = lm.running_exclusion(exclude)
        seen: list[torch.Tensor] = []

        def record(activation: torch.Tensor, hook: object, running=running, seen=seen) -> None:
            seen.append(running.keep(activation))

        site = hook_name("resid_post", 1)
        with lm.hooks.hooks(fwd=[*running.hooks(), (site, record)]):
            out = generate(lm, prompts, GenerationConfig(max_new_tokens=4), use_kv_cache=use_kv_cache)
        grid = torch.tensor([i + list(t) for i, t in zip(ids, out.tokens, strict=True)])[:, :-1]
        marks = torch.cat(seen, 1)[..., 0] if use_kv_cache else seen[-1][..., 0]
        assert torch.equal(marks, exclude.keep(grid)), use_kv_cache


# ------------------------------------------------------------------ the consumers


def _keys_moment(lm: LensModel, rows: torch.Tensor, layer: int, drop: slice) -> torch.Tensor:
    """C as the statistics computed it before the mechanism: ``mlp_post[:, drop]``."""
    site = hook_name("mlp_post", layer)
    with lm.hooks.capture(site) as cap:
        lm.model(rows)
    keys = cap[site][:, drop].reshape(-1, lm.cfg.d_mlp).double()
    return keys.T @ keys / len(keys)


def test_key_statistics_default_and_an_extra_position(tiny: LensModel) -> None:
    folder = tempfile.mkdtemp()
    plain = key_statistics(tiny, 1, StatsConfig(n_tokens=62, seq_len=32), cache_dir=folder)
    rows = text_chunks(tiny, 62, 32)
    assert torch.allclose(plain.for_layer(1), _keys_moment(tiny, rows, 1, slice(1, None)), atol=1e-6)
    extra = StatsConfig(n_tokens=62, seq_len=32, exclude=Exclude(positions=(5,)))
    more = key_statistics(tiny, 1, extra, cache_dir=folder)
    assert more.n_tokens == plain.n_tokens - len(rows) and not torch.equal(more.values, plain.values)
    # The default keeps the key statistics were cached under; another exclusion gets its own.
    key = [_cache_key("f" * 32, tiny, STDLIB_TEXT, 32, e) for e in (None, Exclude(), extra.exclude)]
    assert key[0] == key[1] != key[2]


def test_tuned_lens_fit_default_and_an_extra_position(tiny: LensModel) -> None:
    rows = text_chunks(tiny, 120, 16)[:8]
    xtx, _ = normal_equations(tiny, rows, "resid_post")
    # Layer 0's X^T X as the fit computed it before the mechanism: every position from 1 on.
    names = [hook_name("resid_post", layer) for layer in range(tiny.cfg.n_layers)]
    with tiny.hooks.capture(names) as cap:
        tiny.model(rows)
    streams = torch.stack([cap[n][:, 1:].reshape(-1, tiny.cfg.d_model) for n in names], 1)
    weight = 1 / readout.final_norm_scale(tiny, streams[:, -1])
    x = torch.cat([streams[:, 0], torch.ones(len(streams), 1)], 1) * weight
    assert torch.allclose(xtx[0], (x.T @ x).double(), rtol=1e-5, atol=1e-4)
    other, _ = normal_equations(tiny, rows, "resid_post", Exclude(positions=(3,)))
    assert not torch.allclose(other[0], xtx[0])
    # The default keeps the cache key lenses were saved under; another exclusion gets its own.
    assert "exclude" not in TunedLensConfig().key_params()
    assert tuned_lens_path(tiny) == tuned_lens_path(tiny, TunedLensConfig(exclude=Exclude()))
    moved = TunedLensConfig(exclude=Exclude(positions=(3,)))
    assert tuned_lens_path(tiny) != tuned_lens_path(tiny, moved)


def test_highlight_spans_default_and_an_excluded_token(tiny: LensModel) -> None:
    steer = LMSteer.for_model(
        tiny, ("sentiment",), LMSteerConfig(rank=8, epsilon=1.0, init_std=0.2), seed=1
    )
    text = "What a lovely day it was, and the cat sat on the warm mat"
    result = highlight_keywords(tiny, steer, text, HighlightConfig(max_spans=2, max_length=6))
    # Before the mechanism: the spans of evidence[1:], shifted by one.
    total, spans = max_spans(result.values[1:], 2, 6)
    assert result.total == total and list(result.spans) == [(s + 1, e + 1) for s, e in spans]
    assert result.spans, "the steer gives some positive evidence"
    inside = result.spans[0][0]
    token = tiny.encode(text)[inside]
    config = HighlightConfig(max_spans=2, max_length=6, exclude=Exclude(token_ids=(token,)))
    other = highlight_keywords(tiny, steer, text, config)
    holding = {i for i, t in enumerate(tiny.encode(text)) if t == token}
    assert other.spans != result.spans
    assert not any(s <= i < e for s, e in other.spans for i in holding)


def _sae(lm: LensModel, layer: int) -> LensSAE:
    torch.manual_seed(0)
    site = hook_name("resid_post", layer)
    raw = _training_sae(lm, site, SAETrainConfig(layer=layer, d_sae=32, k=4))
    return LensSAE(raw, site, lm.name, lm.cfg.d_model, torch.ones(32))


def test_sae_steering_leaves_the_excluded_positions_alone(tiny: LensModel) -> None:
    sae = _sae(tiny, 0)
    tokens = torch.tensor([tiny.encode("The cat sat on the mat")])
    with tiny.hooks.capture(sae.hook) as clean:
        tiny.model(tokens)
    for exclude, left in ((None, {0}), (Exclude(positions=(3,)), {0, 3})):
        with (
            steer_with_sae_feature(tiny, sae, 2, 4.0, exclude=exclude) as vector,
            tiny.hooks.capture(sae.hook) as steered,
        ):
            tiny.model(tokens)
        shift = steered[sae.hook] - clean[sae.hook]
        for position in range(tokens.shape[1]):
            want = torch.zeros_like(vector) if position in left else vector
            assert torch.allclose(shift[0, position], want, atol=1e-5), (exclude, position)
    token = tokens[0, 4].item()
    with (
        clamp_sae_feature(tiny, sae, 2, 3.0, exclude=Exclude(token_ids=(token,))),
        tiny.hooks.capture(sae.hook) as clamped,
    ):
        tiny.model(tokens)
    same = (clamped[sae.hook] == clean[sae.hook]).all(-1)[0]
    assert same[0] and same[4] and not same[1:4].any()


def test_sae_loss_default_and_an_extra_position(tiny: LensModel) -> None:
    sae = _sae(tiny, 0)
    rows = [tiny.encode("The cat sat on the mat today"), tiny.encode("A dog ran")]
    batch = tiny.pad_batch(rows)

    @torch.no_grad()
    def before() -> float:  # the loss as it was computed before the mechanism
        def splice(activation: torch.Tensor, hook: object) -> torch.Tensor:
            out = activation.clone()
            out[:, 1:] = sae.decode(sae.encode(activation[:, 1:].float())).to(activation.dtype)
            return out

        with tiny.hooks.hooks(fwd=[(sae.hook, splice)]):
            logits = tiny.model(batch.tokens)
        losses = F.cross_entropy(logits[:, 1:-1].transpose(1, 2), batch.tokens[:, 2:], reduction="none")
        mask = batch.mask[:, 2:]
        return float((losses * mask).sum()) / int(mask.sum())

    assert reconstruction_loss(tiny, sae, rows, "sae") == before()
    other = reconstruction_loss(tiny, sae, rows, "sae", exclude=Exclude(positions=(2,)))
    assert other != before()


def test_collection_default_and_an_extra_position() -> None:
    texts = ["The cat sat on the mat", "A dog ran"]
    site = hook_name("resid_post", 1)
    quiet = CollectConfig(progress=False)
    for lm in (load_model("toy-2l", device="cpu"), load_model("toy-2l", device="cpu", sink=None)):
        ids = [lm.encode(t) for t in texts]
        first = 1 if lm.sink_token_id is not None else 0  # what collection always kept
        assert positions_to_collect(lm, texts, "all") == [list(range(first, len(i))) for i in ids]
        plain = collect_activations(lm, texts, [site], positions="all", config=quiet)
        with lm.hooks.capture(site) as cap:
            lm.model(torch.tensor([ids[0]]))
        # Batched with a shared prefix: equal up to float summation order.
        assert torch.allclose(plain.acts[site][: len(ids[0]) - first], cap[site][0, first:], atol=1e-5)
        default = Exclude(sink=lm.sink_token_id is not None)
        more = collect_activations(lm, texts, [site], positions="all", config=quiet,
                                   exclude=default.union(Exclude(sink=False, positions=(2,))))
        assert 2 not in more.position.tolist() and len(more) == len(plain) - 2
        assert (0 in more.position.tolist()) == (lm.sink_token_id is None)
        # Asked for explicitly, the sink of a sink-free model is its first word.
        assert positions_to_collect(lm, texts, "all", exclude=Exclude())[1][0] == 1
    # select_positions' old skip= is an alias (deprecated) of Exclude.leading.
    with pytest.warns(DeprecationWarning, match="exclude="):
        old = select_positions([[7, 1, 2, 3]], "all", skip=2)
    assert old == select_positions([[7, 1, 2, 3]], "all", exclude=Exclude.leading(2)) == [[2, 3]]
    with pytest.raises(UserInputError, match="no token left once the sink"):
        select_positions([[7]], "last")
    token = ids[1][1]
    by_token = select_positions(ids, "all", exclude=Exclude(token_ids=(token,)))
    assert all(ids[i][p] != token for i, row in enumerate(by_token) for p in row)


def test_a_sharded_collection_keeps_the_exclusion(tiny: LensModel) -> None:
    from lmsci_mi.cluster import ClusterConfig

    texts = ["The cat sat on the mat", "A dog ran", "Birds sing"]
    site, exclude = hook_name("resid_post", 0), Exclude(positions=(1,))
    quiet = CollectConfig(progress=False)
    one = collect_activations(tiny, texts, [site], positions="all", config=quiet, exclude=exclude)
    sharded = collect_activations(tiny, texts, [site], positions="all", config=quiet,
                                  exclude=exclude, cluster=ClusterConfig(address="process"))
    assert one.position.tolist() == sharded.position.tolist() and 1 not in one.position.tolist()


def test_trigger_examples_default_and_an_excluded_token(tiny: LensModel) -> None:
    texts = ["The cat sat on the mat and the dog ran", "A bird sang in the warm morning sun"]
    sequences = [tiny.encode(t) for t in texts]
    neurons = {0: [1, 2, 3]}
    cfg = TriggerConfig(n_examples=4)
    top = top_coefficients(tiny, sequences, neurons, cfg)[0]
    # Before the mechanism: the largest |coefficient| over every position but the sink.
    site = hook_name("mlp_post", 0)
    best = []
    for i, seq in enumerate(sequences):
        with tiny.hooks.capture(site) as cap:
            tiny.model(torch.tensor([seq]))
        for p in range(1, len(seq)):
            best += [(abs(float(cap[site][0, p, n])), n, i, p) for n in neurons[0]]
    for k, n in enumerate(neurons[0]):
        want = sorted([(v, i, p) for v, m, i, p in best if m == n], reverse=True)[:4]
        assert [(i, p) for _, i, p in want] == list(
            zip(top.text[k].tolist(), top.position[k].tolist(), strict=True)
        )
        assert torch.allclose(top.coefficient[k].abs(), torch.tensor([v for v, _, _ in want]),
                              atol=1e-5)
    text, position = int(top.text[0, 0]), int(top.position[0, 0])
    token = sequences[text][position]
    other = top_coefficients(tiny, sequences, neurons, cfg.replace(exclude=Exclude(token_ids=(token,))))[0]
    assert not torch.equal(other.coefficient, top.coefficient)
    assert all(sequences[t][p] != token for t, p in zip(other.text.reshape(-1).tolist(),
                                                          other.position.reshape(-1).tolist(),
                                                          strict=True) if t >= 0)


def test_steering_vector_mean_read_default_and_an_extra_position(tiny: LensModel) -> None:
    positive, negative = ["I love this film so much", "Great"], ["I hate this film", "Awful day"]
    config = MeanDifferenceConfig(layer=1, read="mean")
    vector = mean_difference_vector(tiny, positive, negative, config)
    site = hook_name("resid_post", 1)

    def mean_of(prompts: list[str]) -> torch.Tensor:  # before the mechanism: positions 1..
        rows = []
        for prompt in prompts:
            with tiny.hooks.capture(site) as cap:
                tiny.model(torch.tensor([tiny.encode(prompt)]))
            rows.append(cap[site][0, 1:].mean(0))
        return torch.stack(rows).mean(0)

    assert torch.allclose(vector.values, mean_of(positive) - mean_of(negative), atol=1e-5)
    moved = mean_difference_vector(tiny, positive, negative, config.replace(exclude=Exclude(positions=(2,))))
    assert not torch.allclose(moved.values, vector.values)


def _steered(lm: LensModel, vector: SteeringVector, tokens: torch.Tensor, **apply) -> torch.Tensor:
    with vector.apply(lm, 3.0, **apply), lm.hooks.capture(vector.hook) as cap:
        lm.model(tokens)
    return cap[vector.hook][0]


@pytest.mark.parametrize("sink", ["default", None])
def test_steering_vector_apply_default_and_extra_exclusions(sink: str | None) -> None:
    lm = load_model("toy-2l", device="cpu") if sink else load_model("toy-2l", device="cpu", sink=None)
    vector = steering_vector(lm, torch.randn(64, generator=torch.Generator().manual_seed(0)), 1)
    tokens = torch.tensor([lm.encode("The cat sat on the mat")])
    # Before the mechanism: PositionScope.all(skip=1 if the model has a sink token else 0).
    old = PositionScope.all(skip=1 if lm.sink_token_id is not None else 0)
    assert torch.equal(_steered(lm, vector, tokens), _steered(lm, vector, tokens, scope=old))
    plain = _steered(lm, vector, tokens, scope=PositionScope.all(exclude=Exclude.nothing()))
    for exclude in (Exclude(positions=(3,)), Exclude(sink=False, token_ids=(int(tokens[0, 3]),))):
        steered = _steered(lm, vector, tokens, exclude=exclude)
        with lm.hooks.capture(vector.hook) as clean:
            lm.model(tokens)
        # The excluded position is left alone in this layer; every earlier position is steered.
        assert torch.equal(steered[3], clean[vector.hook][0, 3])
        assert torch.allclose(steered[1:3], plain[1:3]) and not torch.allclose(steered, plain)
        # Position 0 is left alone by the exclusion's sink, or as the default's sink token.
        alone = exclude.sink or lm.sink_token_id is not None
        assert torch.equal(steered[0], clean[vector.hook][0, 0] if alone else plain[0])


def test_steering_vector_token_exclusion_holds_under_cached_generation(tiny: LensModel) -> None:
    vector = steering_vector(tiny, torch.randn(64, generator=torch.Generator().manual_seed(1)), 0)
    prompt = "The cat sat on the mat"
    exclude = Exclude(token_ids=(tiny.encode(prompt)[2],))
    texts = []
    for use_kv_cache in (True, False):
        with vector.apply(tiny, 4.0, exclude=exclude):
            out = generate(tiny, [prompt], GenerationConfig(max_new_tokens=5), use_kv_cache=use_kv_cache)
        texts.append(out.texts[0])
    assert texts[0] == texts[1]


def test_cli_steer_scopes_leave_the_sink_token_alone(tiny: LensModel) -> None:
    from lmsci_mi.cli.steer import _scope

    bare = load_model("toy-2l", device="cpu", sink=None)
    assert _scope("all", tiny) == PositionScope.all(skip=1)
    assert _scope("prompt", tiny) == PositionScope.prompt(skip=1)
    # A sink-free model's first word is steered, as before.
    assert _scope("all", bare).mask(1, 4, torch.device("cpu")).all()


def test_patching_default_and_an_excluded_position(tiny: LensModel) -> None:
    clean, corrupted = "When Mary and John went, John gave it to", "When Mary and John went, Mary gave it to"
    metric = LogitDiff(tiny.token_id(" Mary"), tiny.token_id(" John"))
    each = patch_activations(tiny, clean, corrupted, metric, PatchingConfig())
    assert torch.equal(
        each.values,
        patch_activations(tiny, clean, corrupted, metric, PatchingConfig(exclude=Exclude.nothing())).values,
    )
    # The sink is the same token in both runs: leaving it out changes no cell.
    sink_out = patch_activations(tiny, clean, corrupted, metric, PatchingConfig(exclude=Exclude()))
    assert torch.equal(sink_out.values, each.values)
    changed = int((tiny.to_tokens(clean) != tiny.to_tokens(corrupted)).nonzero()[0, 1])
    config = PatchingConfig(exclude=Exclude(positions=(changed,)))
    moved = patch_activations(tiny, clean, corrupted, metric, config)
    assert not torch.equal(moved.values[:, changed], each.values[:, changed])
    assert torch.allclose(moved.values[:, changed], torch.tensor(each.corrupted_value))
    others = [p for p in range(each.values.shape[1]) if p != changed]
    # The other cells as before (up to float order: the engine batches the rows otherwise).
    assert torch.allclose(moved.values[:, others], each.values[:, others], atol=1e-5)
    whole = PatchingConfig(positions="all")
    assert not torch.allclose(
        patch_activations(tiny, clean, corrupted, metric, whole).values,
        patch_activations(tiny, clean, corrupted, metric, whole.replace(exclude=config.exclude)).values,
    )
    # Attribution patching reads the same config: the excluded cell is the corrupted run's.
    estimate = attribution_patch(tiny, clean, corrupted, metric,
                                 AttributionConfig(site="resid_pre", positions="each",
                                                   exclude=config.exclude))
    assert torch.allclose(estimate.values[:, changed], torch.tensor(estimate.corrupted_value))


# ------------------------------------------------------------------ no sink slices left

SLICE = re.compile(r"\[\s*((\.\.\.|:|\d+)\s*,\s*)*1\s*:")
"""A slice from 1 on an axis: ``[1:]``, ``[:, 1:]``, ``[..., 1:]``, ``[0, 1:]``."""

ALLOWED: dict[tuple[str, str], str] = {
    ("representations/reading.py", "padded[..., 1:]"): "midpoints of sorted scores",
    ("steering/caa.py", "rows[1::2]"): "every second row: the A/B items' other-letter answers",
    ("config.py", "low[1:]"): "a string: the bound after its bracket",
    ("probes/cfg/model.py", "tokens[:, 1:]"): "targets: the next token",
    ("outliers/consequences.py", "replicates[1:]"): "bootstrap replicates after row 0, the estimate",
    ("outliers/sinks.py", "rows[:, 1:]"): "the same texts tokenised without the sink, to score "
    "heads with and without it (not leaving the sink out of a statistic)",
    ("circuits/graphs/attribution.py", "texts[1:] if lm.sink_token_id"): "the prompt's text for the "
    "graph's record, without the sink token's text (no statistic)",
    ("outliers/ablations.py", "tokens[:, 1:]"): "targets: the next token (the sink's prediction "
    "of the first text token counts)",
    ("probes/cfg/model.py", "mask[:, 1:]"): "the next token is predictable",
    ("probes/cfg/probing.py", "ceilings[target][1:]"): "a table's rows after its header",
    ("steering/highlight.py", "targets = tokens[0, 1:]"): "targets: the next token",
    ("steering/highlight.py", "self.axis_labels(0)[1:]"): "shown: position 0 is predicted by no "
    "token, so it has no evidence (with or without a sink)",
    ("steering/highlight.py", "self.values[1:]"): "shown: the same positions' evidence",
    ("steering/evaluate.py", "column[1:] > column[:-1]"): "monotonic: neighbours compared",
    ("sae/compact.py", "ids[1:] > ids[:-1]"): "sorted ids: neighbours compared",
    ("cli/edges.py", "text[1:]"): "a string: the file name after '@'",
    ("data/cfg.py", "sequence[1:] != sequence[:-1]"): "run boundaries: neighbours compared",
    ("data/cfg.py", "instances[1:] != instances[:-1]"): "run boundaries: neighbours compared",
    ("data/cfg.py", "self.offsets[1:] - self.offsets[:-1]"): "lengths from offsets",
    ("data/cfg.py", "rhs[1:]"): "a grammar rule's symbols after its first",
    ("circuits/heads.py", "pattern[:, :, 1:] = duplicate[:, :, :-1]"): "the induction pattern: "
    "one key after the duplicate",
    ("circuits/toy_induction.py", "tokens[:, 1:, None]"): "targets: the next token",
    ("circuits/toy_induction.py", "predictable[:, 1:]"): "targets: the next token",
    ("icl/prompts.py", "words[1:] + words[:1]"): "flipped labels: each label shows the next "
    "label's word",
    ("icl/vectors.py", "``hidden[:, 1:]``"): "a docstring quoting Hendel et al.'s code, which "
    "drops the embedding layer, not a position",
}
"""Slices from 1 that are not about the sink, each with its reason (matched by file and code)."""


def _slices() -> list[tuple[str, str]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#", 1)[0]
            if code.lstrip().startswith(">>>"):
                continue  # a doctest's own slicing
            code = re.sub(r"\.shape\[1:\d*\]", "", code)  # a shape's trailing sizes
            if SLICE.search(code):
                found.append((str(path.relative_to(ROOT)), code.strip()))
    return found


def test_no_literal_sink_slice_in_library_code() -> None:
    unexplained = [
        f"{path}: {code}"
        for path, code in _slices()
        if not any(path == where and snippet in code for where, snippet in ALLOWED)
    ]
    assert unexplained == [], (
        "leave the sink out with lmsci_mi.positions.Exclude (exclude=...), or add the slice to "
        "ALLOWED with the reason it is not about the sink"
    )
