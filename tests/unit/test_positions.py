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

from lmsci_mi import LensModel, load_model, readout
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.editing.stats import STDLIB_TEXT, StatsConfig, _cache_key, key_statistics
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.hooks import PositionScope, RunningExclusion
from lmsci_mi.lenses.tuned_lens import TunedLensConfig, _normal_equations, tuned_lens_path
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.intervene import clamp_sae_feature, steer_with_sae_feature
from lmsci_mi.sae.stats import reconstruction_loss
from lmsci_mi.sae.train import SAETrainConfig, _training_sae
from lmsci_mi.sites import hook_name
from lmsci_mi.steering.highlight import HighlightConfig, highlight_keywords, max_spans
from lmsci_mi.steering.lm_steer import LMSteer, LMSteerConfig

ROOT = Path(__file__).resolve().parents[2] / "lmsci_mi"

# ------------------------------------------------------------------ the masks


def test_the_default_is_the_sink_and_nothing_is_nothing() -> None:
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
        running = RunningExclusion(lm, exclude)
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
    xtx, _, _ = _normal_equations(tiny, rows, TunedLensConfig())
    # Layer 0's X^T X as the fit computed it before the mechanism: every position from 1 on.
    names = [hook_name("resid_post", layer) for layer in range(tiny.cfg.n_layers)]
    with tiny.hooks.capture(names) as cap:
        tiny.model(rows)
    streams = torch.stack([cap[n][:, 1:].reshape(-1, tiny.cfg.d_model) for n in names], 1)
    weight = 1 / readout.final_norm_scale(tiny, streams[:, -1])
    x = torch.cat([streams[:, 0], torch.ones(len(streams), 1)], 1) * weight
    assert torch.allclose(xtx[0], (x.T @ x).double(), rtol=1e-5, atol=1e-4)
    other, _, _ = _normal_equations(tiny, rows, TunedLensConfig(exclude=Exclude(positions=(3,))))
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


# ------------------------------------------------------------------ no sink slices left

SLICE = re.compile(r"\[\s*((\.\.\.|:|\d+)\s*,\s*)*1\s*:")
"""A slice from 1 on an axis: ``[1:]``, ``[:, 1:]``, ``[..., 1:]``, ``[0, 1:]``."""

ALLOWED: dict[tuple[str, str], str] = {
    ("representations/reading.py", "padded[..., 1:]"): "midpoints of sorted scores",
    ("config.py", "low[1:]"): "a string: the bound after its bracket",
    ("probes/cfg/model.py", "tokens[:, 1:]"): "targets: the next token",
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
