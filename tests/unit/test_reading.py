"""Representation reading (Zou et al. 2023 LAT): planted directions, sign randomisation, scoring,
the dev/test discipline, bad input and hook cleanup (synthetic activations and toy-2l)."""

import pytest
import torch

from lmsci_mi.data import load_facts
from lmsci_mi.data.contrasts import LAT_TEMPLATES, ContrastPairs, contrast_pairs
from lmsci_mi.probes import Split
from lmsci_mi.representations import (
    READING_METHODS,
    ReadingConfig,
    RepresentationReading,
    pairwise_accuracy,
    reading_from_activations,
    reading_vector,
    representation_reading,
)
from lmsci_mi.representations.reading import _best_threshold
from lmsci_mi.results import Result

FAST = ReadingConfig(n_random=4, bootstrap=50)


def _unit(d: int, i: int) -> torch.Tensor:
    v = torch.zeros(d)
    v[i] = 1.0
    return v


# ---------------------------------------------------------------------- the reading vector


def test_planted_direction_is_recovered_and_sign_randomisation_is_why():
    """Differences = a constant concept step + a pair-specific nuisance that varies more.

    Without random pair orders, centring removes the constant step (the mean difference *is* the
    concept), so the first PC follows the nuisance; with a random half of the pairs swapped the
    concept becomes variance (9 along it against 1 along the nuisance) and PC1 finds it."""
    g = torch.Generator().manual_seed(0)
    d, n = 32, 80
    concept, nuisance = _unit(d, 3), _unit(d, 7)
    differences = (
        3.0 * concept
        + torch.randn(n, 1, generator=g) * nuisance
        + 0.2 * torch.randn(n, d, generator=g)
    )
    shuffled = reading_vector(differences, seed=0)
    assert float(shuffled @ concept) > 0.98  # oriented: the positive side projects higher
    in_order = reading_vector(differences, randomise_signs=False)
    assert abs(float(in_order @ concept)) < 0.2
    assert abs(float(in_order @ nuisance)) > 0.95
    # the reason, directly: once centred, the in-order differences hold almost no concept
    centred = differences - differences.mean(0)
    assert float((centred @ concept).var()) < 0.1 * float((centred @ nuisance).var())


def test_reading_vector_orients_to_the_positive_side_and_works_per_layer():
    g = torch.Generator().manual_seed(1)
    planted = torch.stack([_unit(16, 2), -_unit(16, 5)])  # [layer, d]
    differences = 2.0 * planted[:, None] + 0.3 * torch.randn(2, 30, 16, generator=g)
    vectors = reading_vector(differences)
    assert vectors.shape == (2, 16)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(2))
    assert (vectors * planted).sum(-1).min() > 0.95
    assert torch.allclose(reading_vector(-differences), -vectors, atol=1e-5)


def test_reading_vector_needs_two_pairs():
    with pytest.raises(ValueError, match="at least 2 pairs"):
        reading_vector(torch.randn(1, 8))


# ---------------------------------------------------------------------- scoring


def test_pairwise_accuracy_by_hand():
    # right, wrong, tie -> (1 + 0 + 0.5) / 3
    assert (
        float(pairwise_accuracy(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 2.0])))
        == 0.5
    )
    batched = pairwise_accuracy(
        torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.zeros(2, 2) + torch.tensor([[0.0], [5.0]])
    )
    assert batched.tolist() == [1.0, 0.0]


def test_threshold_is_chosen_between_the_classes():
    # positives 2, 3 and negatives 0, 1: the best cut is the midpoint 1.5
    assert float(_best_threshold(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0]))) == 1.5
    # one outlier: the cut still separates 3 of 4 prompts on each side as best it can
    cut = float(_best_threshold(torch.tensor([2.0, 3.0, -5.0]), torch.tensor([0.0, 1.0, 0.5])))
    assert 1.0 < cut < 2.0


def _planted(n_layers=3, n_pairs=60, d=16, strength=(0.0, 1.0, 3.0), seed=0):
    g = torch.Generator().manual_seed(seed)
    negative = torch.randn(n_layers, n_pairs, d, generator=g)
    step = torch.stack([s * _unit(d, 4) for s in strength])[:, None]
    positive = torch.randn(n_layers, n_pairs, d, generator=g) + step
    return positive, negative


def test_scores_on_planted_activations():
    positive, negative = _planted()
    reading = reading_from_activations(positive, negative, config=FAST)
    pca = reading.accuracy("pca")
    assert reading.values.shape == (4, 3, 2, 3)
    assert pca[2] > 0.9 and pca[2] > pca[0]  # no concept at layer 0, a strong one at layer 2
    assert reading.chosen_layer() == "2"
    assert float(reading.direction(2) @ _unit(16, 4)) > 0.8
    mean_diff = (positive - negative)[2, list(reading.fit_pairs)].mean(0)
    assert torch.allclose(
        reading.direction(2, "diff_of_means"), mean_diff / mean_diff.norm(), atol=1e-5
    )
    assert float(reading.direction(2, "probe") @ _unit(16, 4)) > 0.5
    assert reading.accuracy("random")[2] < pca[2]
    low, high = reading.intervals[0, 0, 2]
    assert low <= pca[2] <= high
    assert ((reading.values >= 0) & (reading.values <= 1)).all()


def test_the_layer_is_chosen_on_dev_and_test_pairs_change_nothing_fitted():
    config = FAST
    n = 80
    split = Split.random(n, fractions=config.fractions, seed=config.seed)
    g = torch.Generator().manual_seed(3)
    negative = torch.randn(2, n, 16, generator=g)
    positive = torch.randn(2, n, 16, generator=g)
    # layer 0: the concept in the fit and dev pairs only; layer 1: in the fit and test pairs only
    positive[0, torch.cat([split.train, split.val]), 4] += 3.0
    positive[1, torch.cat([split.train, split.test]), 4] += 3.0
    reading = reading_from_activations(positive, negative, config=config)
    assert reading.chosen_layer() == "0"
    test = reading.accuracy("pca", "test")
    assert test[1] > 0.9 > test[0]  # the better test layer is not the one chosen

    # redraw every test pair's activations: nothing fitted or chosen may change
    redrawn_pos, redrawn_neg = positive.clone(), negative.clone()
    redrawn_pos[:, split.test] = torch.randn(2, len(split.test), 16, generator=g)
    redrawn_neg[:, split.test] = torch.randn(2, len(split.test), 16, generator=g)
    again = reading_from_activations(redrawn_pos, redrawn_neg, config=config)
    assert torch.equal(again.directions, reading.directions)
    assert torch.equal(again.values[:, :2], reading.values[:, :2])  # fit and dev scores
    assert again.chosen == reading.chosen
    assert not torch.equal(again.values[:, 2], reading.values[:, 2])
    assert again.test_pairs == tuple(split.test.tolist())


def test_same_seed_same_result_other_seed_other_split():
    positive, negative = _planted(seed=5)
    a = reading_from_activations(positive, negative, config=FAST)
    assert a == reading_from_activations(positive, negative, config=FAST)
    b = reading_from_activations(positive, negative, config=FAST.replace(seed=1))
    assert a.test_pairs != b.test_pairs


# ---------------------------------------------------------------------- on the toy model


def test_reading_on_toy_model_round_trips_and_plots(tiny, tmp_path):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    pairs = contrast_pairs("sentiment", n_pairs=24)
    reading = representation_reading(tiny, pairs, config=FAST)
    assert all(torch.equal(before[k], v) for k, v in tiny.model.state_dict().items())
    assert tiny.hooks.attached_count() == 0
    assert reading.hooks == ("blocks.0.hook_resid_post", "blocks.1.hook_resid_post")
    assert reading.directions.shape == (3, 2, tiny.cfg.d_model)
    assert torch.equal(reading.direction(), reading.direction(reading.chosen_layer()))
    assert len(reading.meta.prompts) == 48 and reading.meta.data_source == pairs.source
    assert reading.contrast == "sentiment"
    loaded = Result.load(reading.save(tmp_path / "reading.json"))
    assert isinstance(loaded, RepresentationReading) and loaded == reading
    reading.plot(tmp_path / "reading.png")
    assert (tmp_path / "reading.png").stat().st_size > 0
    summary = reading.summary()
    assert f"random (mean of {FAST.n_random})" in summary and "12 fit / 6 dev / 6 test" in summary
    frame = reading.to_dataframe()
    assert set(frame["method"]) == set(READING_METHODS) and len(frame) == 4 * 3 * 2 * 2


@pytest.mark.parametrize(
    ("changes", "labels", "width"),
    [
        ({"layers": (1,)}, ("1",), 64),
        ({"site": "mlp_out", "position": "mean"}, ("0", "1"), 64),
        ({"site": "z", "layers": (0,)}, ("0",), 64),  # 4 heads x 16, flattened
        ({"site": "ln_final"}, ("ln_final",), 64),
    ],
)
def test_sites_layers_and_positions(tiny, changes, labels, width):
    pairs = [
        (f"I love the {w}.", f"I hate the {w}.")
        for w in ["cake", "film", "park", "song", "book", "town"]
    ]
    reading = representation_reading(tiny, pairs, config=FAST.replace(**changes))
    assert reading.labels[3] == labels
    assert reading.directions.shape[-1] == width
    assert reading.position == changes.get("position", "last")


def test_positions_read_the_last_token_or_the_mean_of_the_tokens(tiny):
    """Checked against plain captures, one prompt at a time: the difference of means over the fit
    pairs, of the last token and of the mean over tokens (the sink left out)."""
    pairs = [
        (f"I love the {w} a lot.", f"I hate the {w}.")
        for w in ["cake", "film", "park", "song", "book", "town"]
    ]
    hook = "blocks.1.hook_resid_post"
    vectors = {"last": [], "mean": []}
    for prompt in [p for pair in pairs for p in pair]:
        with tiny.hooks.capture(hook) as cap:
            tiny(tiny.to_tokens(prompt))
        vectors["last"].append(cap[hook][0, -1])
        vectors["mean"].append(cap[hook][0, 1:].mean(0))  # position 0 is the sink
    for position, rows in vectors.items():
        reading = representation_reading(tiny, pairs, config=FAST.replace(position=position))
        acts = torch.stack(rows).reshape(len(pairs), 2, -1).cpu()
        fit = list(reading.fit_pairs)
        expected = (acts[fit, 0] - acts[fit, 1]).mean(0)
        assert torch.allclose(
            reading.direction(1, "diff_of_means"), expected / expected.norm(), atol=1e-4
        )


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("n_pairs", [0, 1, 3])
def test_too_few_pairs(tiny, n_pairs):
    pairs = [("I love it.", "I hate it.")] * n_pairs
    with pytest.raises(ValueError, match=r"at least 4 contrast pairs.*give more pairs"):
        representation_reading(tiny, pairs, config=FAST)
    assert tiny.hooks.attached_count() == 0


def test_too_few_fit_pairs():
    positive, negative = _planted(n_pairs=4)
    with pytest.raises(ValueError, match=r"raise fractions\[0\]"):
        reading_from_activations(positive, negative, config=FAST.replace(fractions=(0.2, 0.4, 0.4)))


def test_layer_out_of_range(tiny):
    with pytest.raises(ValueError, match=r"layer 5 does not exist.*0–1"):
        representation_reading(
            tiny, contrast_pairs("truth", n_pairs=8), config=FAST.replace(layers=(0, 5))
        )
    assert tiny.hooks.attached_count() == 0 and tiny.hooks.active() == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"site": "resid"}, "unknown site 'resid'; choose one of"),
        ({"site": "pattern"}, "no vector per position"),
        ({"site": "embed", "layers": (0,)}, "exists once per model; give no layers"),
        ({"fractions": (0.5, 0.3, 0.3)}, "must sum to 1"),
        ({"position": "first"}, "position must be one of"),
        ({"n_random": 0}, "n_random must be >= 1"),
    ],
)
def test_bad_config(changes, message):
    with pytest.raises(ValueError, match=message):
        ReadingConfig(**changes)


def test_bad_pairs_and_names():
    with pytest.raises(ValueError, match="give \\(positive prompt, negative prompt\\)"):
        ContrastPairs.from_pairs([("a", "b", "c")])
    with pytest.raises(ValueError, match="one negative prompt per positive"):
        ContrastPairs("x", ("a", "b"), ("c",), "")
    with pytest.raises(ValueError, match="must both be \\[layer, pair, d\\]"):
        reading_from_activations(torch.zeros(2, 5, 4), torch.zeros(2, 6, 4))
    reading = reading_from_activations(*_planted(n_layers=2, strength=(0.0, 2.0)), config=FAST)
    with pytest.raises(ValueError, match=r"layer 7 was not read; choose one of \['0', '1'\]"):
        reading.direction(7)
    with pytest.raises(ValueError, match="unknown method 'pc'"):
        reading.accuracy("pc")
    with pytest.raises(ValueError, match="method with a kept direction"):
        reading.direction(0, "random")


def test_no_hook_is_left_after_an_error_mid_forward(tiny, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("block failed")

    monkeypatch.setattr(tiny.model.blocks[1], "forward", boom)
    with pytest.raises(RuntimeError, match="block failed"):
        representation_reading(tiny, contrast_pairs("sentiment", n_pairs=8), config=FAST)
    assert tiny.hooks.attached_count() == 0 and tiny.hooks.active() == []


# ---------------------------------------------------------------------- the contrast pairs


@pytest.mark.parametrize(("name", "count"), [("sentiment", 100), ("truth", 200)])
def test_contrast_pairs(name, count):
    pairs = contrast_pairs(name)
    assert len(pairs) == count and 60 <= count <= 200
    assert all(p != q for p, q in zip(pairs.positive, pairs.negative, strict=True))
    assert len(set(pairs.positive)) == count  # no pair twice
    prefix, suffix = LAT_TEMPLATES[name].split("{}")
    assert all(p.startswith(prefix) and p.endswith(suffix) for p in pairs.positive + pairs.negative)
    assert len(contrast_pairs(name, n_pairs=7)) == 7


def test_truth_pairs_differ_in_the_answer_only():
    records = {f.rewrite_prompt: f for f in load_facts("edit_facts")}
    pairs = contrast_pairs("truth", template=False)
    relations = set()
    for true, false in zip(pairs.positive, pairs.negative, strict=True):
        stem = next(s for s in records if true.startswith(s) and false.startswith(s))
        record = records[stem]
        assert (true, false) == (
            f"{stem}{record.target_true}.",
            f"{stem}{record.target_new}.",
        )
        relations.add(record.relation)
    assert len(relations) == 13  # round-robin over every relation, not the largest one's facts


def test_unknown_contrast():
    with pytest.raises(ValueError, match=r"choose from \['sentiment', 'truth'\]"):
        contrast_pairs("honesty")
    with pytest.raises(ValueError, match="n_pairs must be at least 1"):
        contrast_pairs("truth", n_pairs=0)
