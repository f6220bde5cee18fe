"""Massive activations (Sun et al. 2024) on toys with planted outliers: coordinates, rules, roles,
the layer-wise statistic against a full capture, the exclusion, cleanup and bad input."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers import MassiveActivations, MassiveConfig, find_massive_activations
from lmsci_mi.positions import Exclude
from lmsci_mi.sites import hook_name

TEXTS = [
    "Hello world.\nThe cat. sat",
    "A dog ran fast. Then it stopped.",
    "No full stop here\nbut a newline",
    "Short.",
]
SINK_DIM, PERIOD_DIM = 7, 11


def _plant(lm: LensModel) -> int:
    """A paper-size outlier (2,000) on the sink token's embedding and a ratio-only one (90, under
    the threshold of 100) on the "." token's, each in one dimension; the residual stream carries
    both through every layer. Returns the "." token's id."""
    period = lm.token_id(".")
    with torch.no_grad():
        lm.model.W_E[lm.sink_token_id, SINK_DIM] = 2000.0
        lm.model.W_E[period, PERIOD_DIM] = 90.0
    return period


@pytest.mark.parametrize("toy", ["tiny", "tiny_post_norm"])
def test_planted_activations_are_found_where_they_are(toy: str, request: pytest.FixtureRequest) -> None:
    lm: LensModel = request.getfixturevalue(toy)
    period = _plant(lm)
    found = find_massive_activations(lm, TEXTS, MassiveConfig(ratio=50))
    n_layers = lm.cfg.n_layers

    paper = found.selected("paper")
    assert {(e.layer, e.text) for e in paper} == {(layer, t) for layer in range(n_layers) for t in range(4)}
    assert {(e.position, e.dim, e.role, e.token_id) for e in paper} == {(0, SINK_DIM, "sink", lm.sink_token_id)}
    ratio_only = [e for e in found.entries if e.rule == "ratio only"]
    assert ratio_only and {(e.dim, e.token_id) for e in ratio_only} == {(PERIOD_DIM, period)}
    assert all(abs(e.value) <= 100 and e.ratio >= 50 for e in ratio_only)
    # Every "." carries it; the first one in each text is named as such, the later ones are "other".
    assert found.role_counts("ratio")["first '.'"] == (3, 3)
    assert found.token_counts("ratio") == {lm.sink: 4, ".": 3}
    # Position 0 sees only itself: its value is the same in every text (cv 0), input-independent.
    sink_dims = [d for d in found.dimensions if d.role == "sink"]
    assert [(d.dim, d.n_texts, d.n_massive) for d in sink_dims] == [(SINK_DIM, 4, 4)] * n_layers
    assert all(d.cv < 1e-6 and abs(d.mean) > 1000 for d in sink_dims)
    assert found.meta.sink == lm.sink and found.sink_at_zero == (True,) * 4
    assert found.exclude() == Exclude(sink=True)
    assert found.exclude("ratio") == Exclude(sink=True, token_ids=(period,))
    assert found.exclude("ratio", by="positions") == Exclude(sink=True)
    assert lm.hooks.attached_count() == 0

    strict = find_massive_activations(lm, TEXTS)  # the paper's ratio of 1,000: the "." is out
    assert {e.dim for e in strict.entries} == {SINK_DIM} and int(strict.absolute_only.sum()) == 0


def test_layer_statistic_equals_a_full_capture_of_unequal_texts(tiny: LensModel) -> None:
    found = find_massive_activations(tiny, TEXTS, MassiveConfig(batch_size=3))
    names = [hook_name("resid_post", layer) for layer in range(tiny.cfg.n_layers)]
    for i, text in enumerate(TEXTS):
        with tiny.hooks.capture(names) as cap:
            tiny(tiny.to_tokens(text))
        for layer, name in enumerate(names):
            mag = cap[name][0].abs().flatten()
            expected = torch.cat([mag.topk(3).values, mag.median()[None]])
            torch.testing.assert_close(found.per_text[i, layer], expected)
    torch.testing.assert_close(found.values, found.per_text.mean(0))
    assert found.labels[1] == ("top-1", "top-2", "top-3", "median")


def test_a_model_without_sink_has_its_first_token_at_zero(tiny: LensModel) -> None:
    tiny.sink_token_id = None
    with torch.no_grad():
        tiny.model.W_E[tiny.token_id("Hello"), SINK_DIM] = 2000.0
    found = find_massive_activations(tiny, TEXTS[:1], MassiveConfig(layers=(1,)))
    assert found.meta.sink is None and found.sink_at_zero == (False,)
    assert {(e.layer, e.position, e.role, e.token) for e in found.entries} == {(1, 0, "first token", "Hello")}
    assert found.role_texts["sink"] == 0


def test_tokens_are_taken_as_given_and_the_result_round_trips(tiny: LensModel, tmp_path) -> None:
    _plant(tiny)
    tokens = tiny.pad_batch([tiny.encode(TEXTS[1])]).tokens
    found = find_massive_activations(tiny, tokens, MassiveConfig(max_entries=1, ratio=100))
    assert len(found.entries) == 1 and found.n_found > 1  # the cap keeps the largest ratio
    assert found.meta.prompts == ()
    frame = found.to_dataframe()
    assert list(frame.columns[:4]) == ["layer", "text", "position", "token_id"] and len(frame) == 1
    assert found.layer_frame()["n_paper"].tolist() == [1, 0]  # layer 0's sink: the largest ratio
    assert MassiveActivations.load(found.save(tmp_path / "m.json")) == found
    assert found.plot().axes[0].get_yscale() == "log"


def test_hooks_are_removed_when_the_pass_fails(tiny: LensModel) -> None:
    def boom(activation: torch.Tensor, hook: object) -> None:
        raise RuntimeError("boom")

    with tiny.hooks.hooks(fwd=[(hook_name("resid_post", 1), boom)]):
        with pytest.raises(RuntimeError, match="boom"):
            find_massive_activations(tiny, TEXTS)
        assert tiny.hooks.attached_count() == 1  # the outer block's own hook only
    assert tiny.hooks.attached_count() == 0


BAD_INPUT = [
    ([], {}, "no texts given"),
    (["fine", "  "], {}, "text 1 is empty"),
    (TEXTS, {"layers": (2,)}, "layer 2 does not exist"),
    (TEXTS, {"layers": ()}, "no layers given"),
    (torch.ones(2, 3), {}, "integer tensor"),
]


def test_bad_input_is_named(tiny: LensModel) -> None:
    for texts, fields, message in BAD_INPUT:
        with pytest.raises(UserInputError, match=message):
            find_massive_activations(tiny, texts, MassiveConfig(**fields))  # type: ignore[arg-type]
    for field in ("threshold", "ratio"):
        for value in (0.0, -5.0):
            with pytest.raises(UserInputError, match=f"MassiveConfig.{field} must be > 0"):
                MassiveConfig(**{field: value})
    assert tiny.hooks.attached_count() == 0
