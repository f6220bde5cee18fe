"""Linear probes, control tasks, probe sweeps and their export (toy model and synthetic features)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci_mi import load_model
from lmsci_mi.probes import (
    ProbeConfig,
    ProbeSweep,
    ProbeSweepConfig,
    Split,
    control_labels,
    fit_probe,
    fit_probes,
    probe_sweep,
    probe_task,
    task_dataset,
)
from lmsci_mi.results import Result

FAST = ProbeConfig(control=False, bootstrap=0)


def _blobs(n=900, d=40, classes=5, spread=0.35, seed=0):
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d, generator=generator) * spread
    y = torch.randint(classes, (n,), generator=generator)
    return centres[y] + torch.randn(n, d, generator=generator), y


@pytest.mark.parametrize("l2", [1e-3, 1e-1])
def test_lbfgs_probe_matches_scikit_learn(l2):
    # Imported here: scikit-learn takes 0.4 s to import, and every xdist worker collects this file.
    from sklearn.linear_model import LogisticRegression

    x, y = _blobs()
    split = Split.random(len(y), seed=1)
    fit = fit_probe(x, y, split, FAST.replace(l2_grid=(l2,)))
    train = x[split.train]
    mean, std = train.mean(0), train.std(0)
    # scikit-learn minimises C·Σ CE + |W|²/2, i.e. mean CE + |W|²/(2·C·n): C = 1 / (l2·n).
    reference = LogisticRegression(C=1 / (l2 * len(split.train)), max_iter=5000, tol=1e-8)
    reference.fit(((train - mean) / std).numpy(), y[split.train].numpy())
    sk_accuracy = reference.score(((x[split.test] - mean) / std).numpy(), y[split.test].numpy())
    assert abs(fit.score - sk_accuracy) <= 0.01
    ours = fit.probe.decision(x[split.test]).log_softmax(-1)
    theirs = torch.from_numpy(
        reference.predict_log_proba(((x[split.test] - mean) / std).numpy())
    ).float()
    assert (ours.exp() - theirs.exp()).abs().max() < 0.02  # the same probabilities, not only labels


def test_strength_is_chosen_on_validation_and_baselines_reported():
    x, y = _blobs(n=600, d=200, spread=0.2)
    split = Split.random(len(y), seed=0)
    fits, control = fit_probes(x[None], y, split, ProbeConfig(bootstrap=200), word_types=y.tolist())
    fit = fits[0]
    assert fit.probe.l2 in ProbeConfig().l2_grid
    majority = torch.bincount(y[split.train]).argmax()
    assert math.isclose(
        fit.baseline, float((y[split.test] == majority).float().mean()), rel_tol=1e-6
    )
    assert fit.interval[0] <= fit.score <= fit.interval[1]
    assert control is not None and len(control) == 1


def test_control_labels_are_per_word_type_and_follow_the_prior():
    labels = torch.tensor([0] * 900 + [1] * 100)
    types = [i % 500 for i in range(1000)]
    split = Split.random(1000, seed=0)
    control = control_labels(types, labels, split, seed=3)
    for t in range(500):
        assert control[t] == control[t + 500]
    assert 0.8 < float((control == 0).float().mean()) < 0.98
    assert torch.equal(control, control_labels(types, labels, split, seed=3))


def test_grouped_split_keeps_groups_whole():
    groups = [f"g{i // 4}" for i in range(80)]
    split = Split.random(80, groups=groups, seed=2)
    where = {}
    for part, index in enumerate((split.train, split.val, split.test)):
        for i in index.tolist():
            assert where.setdefault(groups[i], part) == part
    assert sorted(torch.cat([split.train, split.val, split.test]).tolist()) == list(range(80))


def test_ridge_probe_scores_r2():
    x, _ = _blobs(n=500, d=20)
    target = x[:, 0] * 2 + x[:, 1] + 0.1 * torch.randn(500)
    fit = fit_probe(x, target, Split.random(500), FAST.replace(kind="ridge"))
    assert fit.score > 0.95 and fit.probe.classes == ()
    assert abs(fit.baseline) < 0.1  # the train mean explains nothing


def test_bad_probe_input_is_named():
    x, y = _blobs(n=60)
    split = Split.random(60)
    with pytest.raises(ValueError, match="59 labels for 60 examples"):
        fit_probe(x, y[:59], split, FAST)
    with pytest.raises(ValueError, match="single class"):
        fit_probe(x, torch.zeros(60, dtype=torch.long), split, FAST)
    with pytest.raises(ValueError, match="unknown probe kind 'svm'"):
        ProbeConfig(kind="svm")
    with pytest.raises(ValueError, match="word_types"):
        fit_probe(x, y, split, ProbeConfig())


# ---------------------------------------------------------------------- sweeps on the toy model


@pytest.fixture(scope="module")
def lm():
    return load_model("toy-2l")


@pytest.fixture(scope="module")
def sweep(lm):
    texts = [f"The {w} is here" for w in ["cat", "dog", "fish", "bird", "cow", "frog"] * 8]
    labels = ["mammal" if t.split()[1] in ("cat", "dog", "cow") else "other" for t in texts]
    return probe_sweep(lm, texts, labels, config=ProbeSweepConfig(bootstrap=50), task="animals")


def test_sweep_has_a_row_per_layer_and_round_trips(sweep, tmp_path):
    frame = sweep.to_dataframe()
    assert list(frame["layer"]) == ["0", "1"]
    assert {"accuracy", "control_accuracy", "selectivity", "majority", "ci_low", "ci_high"} <= set(
        frame
    )
    np.testing.assert_allclose(
        frame["selectivity"], frame["accuracy"] - frame["control_accuracy"], atol=1e-6
    )
    assert Result.load(sweep.save(tmp_path / "sweep.json")) == sweep
    for suffix in ("csv", "parquet", "json"):
        path = sweep.export(tmp_path / f"sweep.{suffix}")
        back = getattr(pd, f"read_{suffix}")(path)
        np.testing.assert_allclose(back["accuracy"], frame["accuracy"], rtol=1e-6)
        if suffix == "parquet":
            pd.testing.assert_frame_equal(back, frame)
    sweep.plot(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0
    with pytest.raises(ValueError, match=r"\.parquet"):
        sweep.export(tmp_path / "sweep.xlsx")
    assert not list(tmp_path.glob(".*partial"))


def test_sweep_at_every_token_groups_by_text(lm):
    texts = ["a b c d", "e f g h", "a c e g", "b d f h"] * 3
    labels = [[i % 2 for i in range(len(lm.encode(t)) - 1)] for t in texts]
    flat = [v for row in labels for v in row]
    result = probe_sweep(
        lm, texts, flat, positions="all", config=ProbeSweepConfig(bootstrap=0, layers=(1,))
    )
    assert result.axis_labels(0) == ["1"]
    assert result.n_train + result.n_val + result.n_test == len(flat)


def test_bad_sweep_input_is_named(lm):
    texts = ["The cat", "The dog", "A fish"] * 4
    with pytest.raises(ValueError, match="11 labels for 12 texts"):
        probe_sweep(lm, texts, [0, 1] * 5 + [0])
    with pytest.raises(ValueError, match="at least two classes"):
        probe_sweep(lm, texts, ["x"] * 12)
    with pytest.raises(ValueError, match="layer 7 does not exist"):
        probe_sweep(lm, texts, [0, 1] * 6, config=ProbeSweepConfig(layers=(7,)))
    with pytest.raises(ValueError, match="unknown site 'resid'"):
        ProbeSweepConfig(site="resid")
    with pytest.raises(ValueError, match="no vector per position"):
        ProbeSweepConfig(site="pattern")
    with pytest.raises(ValueError, match="tasks: bracket_depth, country, subject_number"):
        task_dataset("colour")
    assert lm.hooks.attached_count() == 0


def test_tasks_build_offline_with_sources():
    for name in ("country", "subject_number", "bracket_depth"):
        data = task_dataset(name)
        assert len(data) >= 1000 and len(set(data.labels)) >= 2 and data.source
        if data.spans is not None:
            assert all(
                0 <= s < e <= len(t) for t, (s, e) in zip(data.texts, data.spans, strict=True)
            )


def test_probe_task_reads_the_subject_token(lm):
    from lmsci_mi.probes.tasks import ProbeTaskConfig

    result = probe_task(
        lm, "country", ProbeSweepConfig(bootstrap=0, layers=(0,)), ProbeTaskConfig(n_examples=60)
    )
    assert isinstance(result, ProbeSweep) and result.task == "country"
    assert result.meta.data_source.startswith("lmsci_mi/data/probing/cities.json")
