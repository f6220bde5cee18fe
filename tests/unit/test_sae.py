"""SAEs on the toy model: training through sae-lens, the cache, clamping's algebra, steering and
clamping under the KV cache, the feature browser, the CLI, and bad input."""

from __future__ import annotations

import ast
import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import lmsci_mi.sae as sae_package
from lmsci_mi import LensModel, load_model
from lmsci_mi.cli import main
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.sae import (
    FeatureConfig,
    FrequencyConfig,
    LensSAE,
    PretrainedSAEUnavailable,
    SAEDataConfig,
    SAEMismatchError,
    SAEStats,
    SAETrainConfig,
    clamp_sae_feature,
    feature_cards,
    find_features,
    load_sae,
    promoted_tokens,
    sae_corpus,
    steer_with_sae_feature,
    steering_frequency,
    train_sae,
)
from lmsci_mi.sae import train as train_module
from lmsci_mi.sites import hook_name

HOOK = hook_name("resid_post", 0)
DATA = SAEDataConfig(corpus_tokens=3000, seq_len=64, generations=8, generation_tokens=8)
TRAIN = SAETrainConfig(
    layer=0,
    d_sae=64,
    k=4,
    training_samples=8192,
    batch_size=512,
    dead_feature_window=4,
    autocast=None,
    progress=False,
)
PROMPTS = ["The cat sat on", "Once upon a time", "My favourite food is", "Hello"]
# Every test here trains an SAE or uses the one trained for the module (10-15 s); the fast
# suite's SAE check is test_sae_compact.py's round trip.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The generations and SAEs of these tests go to a scratch cache, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LMSCI_MI_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def toy() -> LensModel:
    return load_model("toy-2l", device="cpu")


@pytest.fixture(scope="module")
def trained(toy: LensModel) -> tuple[LensSAE, SAEStats]:
    return train_sae(toy, DATA, TRAIN, cache=False)


def test_training_reports_the_statistics(trained: tuple[LensSAE, SAEStats]) -> None:
    sae, stats = trained
    assert sae.d_sae == 64 and sae.hook == HOOK and sae.architecture == "topk"
    assert 0 < stats.l0 <= 4  # TopK keeps at most k features per token
    assert -1 < stats.explained_variance <= 1 and 0 <= stats.dead_fraction <= 1
    assert stats.n_tokens > 0 and stats.values.shape == (64,)
    assert stats.loss_clean > 0 and stats.loss_sae > 0 and stats.loss_zero > 0
    assert (stats.feature_scale > 0).all() and torch.equal(sae.feature_scale, stats.feature_scale)
    assert {"harvest_seconds", "train_seconds", "n_train_tokens"} <= set(stats.costs)
    assert "explained variance" in stats.summary()


def test_trained_sae_beats_a_fresh_one(toy: LensModel, trained: tuple[LensSAE, SAEStats]) -> None:
    """Training lowers the reconstruction error: an untrained SAE of the same shape is worse."""
    from lmsci_mi.sae.stats import sae_stats

    _, stats = trained
    fresh = LensSAE(
        _inference(train_module._training_sae(toy, HOOK, TRAIN)),
        HOOK,
        toy.name,
        toy.cfg.d_model,
        torch.ones(64),
    )
    rows = sae_corpus(toy, DATA).held_out
    assert sae_stats(toy, fresh, rows, progress=False).explained_variance < stats.explained_variance


def _inference(training_sae: object) -> object:
    import tempfile

    from sae_lens import SAE

    with tempfile.TemporaryDirectory() as folder:
        training_sae.save_inference_model(folder)  # type: ignore[attr-defined]
        return SAE.load_from_disk(folder)


def test_save_load_round_trip(trained: tuple[LensSAE, SAEStats], tmp_path: Path) -> None:
    sae, stats = trained
    loaded = LensSAE.load(sae.save(tmp_path / "sae"))
    x = torch.randn(5, sae.d_model)
    assert torch.allclose(loaded.decode(loaded.encode(x)), sae.decode(sae.encode(x)))
    assert loaded.hook == sae.hook and loaded.model_name == sae.model_name
    assert torch.equal(loaded.feature_scale, sae.feature_scale)
    assert SAEStats.load(stats.save(tmp_path / "stats.json")) == stats


def test_the_cache_answers_a_second_call(
    toy: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    small = TRAIN.replace(training_samples=1024)
    first, stats = train_sae(toy, DATA, small)

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached SAE was trained again")

    monkeypatch.setattr(train_module, "_fit", no_training)
    again, cached = train_sae(toy, DATA, small)
    assert cached == stats and torch.equal(again.sae.W_dec, first.sae.W_dec)
    with pytest.raises(AssertionError, match="trained again"):
        train_sae(toy, DATA, small.replace(k=3))  # another config is another cache entry


def test_direction_is_what_decode_adds(trained: tuple[LensSAE, SAEStats]) -> None:
    sae, _ = trained
    f = torch.zeros(2, sae.d_sae)
    f[0, 7] = 2.5
    expected = sae.decode(f)[0] - sae.decode(f)[1]
    assert torch.allclose(2.5 * sae.direction(7), expected, atol=1e-5)


def _resid(lm: LensModel, tokens: torch.Tensor) -> torch.Tensor:
    """The residual stream after the SAE's site, as the next block reads it."""
    with lm.hooks.capture([hook_name("resid_pre", 1)]) as captured:
        lm.model(tokens)
    return captured[hook_name("resid_pre", 1)]


@pytest.mark.parametrize("mode", ["everywhere", "where_active"])
def test_clamping_to_zero_changes_only_the_reconstruction(
    toy: LensModel, trained: tuple[LensSAE, SAEStats], mode: str
) -> None:
    sae, _ = trained
    tokens = torch.tensor([toy.encode("The cat sat on the mat and looked at the dog")])
    clean = _resid(toy, tokens)
    f = sae.encode(clean[0, 1:])
    feature = int(f.gt(0).sum(0).argmax())  # a feature that fires here
    with clamp_sae_feature(toy, sae, feature, 0.0, mode=mode):  # type: ignore[arg-type]
        clamped = _resid(toy, tokens)
    edited = f.clone()
    edited[:, feature] = 0.0
    expected = sae.decode(edited) - sae.decode(f)
    change = clamped[0] - clean[0]
    assert torch.equal(change[0], torch.zeros_like(change[0]))  # the sink is left alone
    assert torch.allclose(change[1:], expected, atol=1e-5)
    assert change.abs().sum() > 0
    # The change lies along the feature's direction, and the error term x - decode(f) is kept.
    direction = sae.direction(feature)
    assert torch.allclose(change[1:], -f[:, feature, None] * direction, atol=1e-5)
    error_before = clean[0, 1:] - sae.decode(f)
    error_after = clamped[0, 1:] - sae.decode(edited)
    assert torch.allclose(error_before, error_after, atol=1e-5)


def test_clamping_where_active_leaves_inactive_positions(
    toy: LensModel, trained: tuple[LensSAE, SAEStats]
) -> None:
    sae, _ = trained
    tokens = torch.tensor([toy.encode("The cat sat on the mat and looked at the dog")])
    clean = _resid(toy, tokens)
    f = sae.encode(clean[0, 1:])
    feature = int(f.gt(0).sum(0).argmax())
    inactive = f[:, feature] == 0
    assert inactive.any() and (~inactive).any()
    with clamp_sae_feature(toy, sae, feature, 3.0, mode="where_active"):
        clamped = _resid(toy, tokens)
    assert torch.equal(clamped[0, 1:][inactive], clean[0, 1:][inactive])
    with clamp_sae_feature(toy, sae, feature, 3.0, mode="everywhere"):
        everywhere = _resid(toy, tokens)
    assert not torch.equal(everywhere[0, 1:][inactive], clean[0, 1:][inactive])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_is_the_same_with_and_without_the_kv_cache(
    toy: LensModel, trained: tuple[LensSAE, SAEStats], temperature: float
) -> None:
    sae, _ = trained
    runs = {}
    for name, context in [
        ("none", contextlib.nullcontext),
        ("steer", lambda: steer_with_sae_feature(toy, sae, 5, 8.0)),
        ("clamp", lambda: clamp_sae_feature(toy, sae, 5, 6.0)),
        ("clamp_active", lambda: clamp_sae_feature(toy, sae, 5, 6.0, mode="where_active")),
    ]:
        outs = []
        for cache in (True, False):
            with context():
                config = GenerationConfig(max_new_tokens=8, temperature=temperature, seed=1)
                outs.append(generate(toy, PROMPTS, config, use_kv_cache=cache).tokens)
        assert outs[0] == outs[1], name
        runs[name] = outs[0]
    assert toy.hooks.attached_count() == 0
    if temperature == 0:  # greedy tokens of the random toy move under the push: it does something
        assert runs["steer"] != runs["none"] and runs["clamp"] != runs["none"]


def test_steering_applies_at_every_generated_step(
    toy: LensModel, trained: tuple[LensSAE, SAEStats]
) -> None:
    """lm.sample (the core sampler, KV-cached) matches the uncached recomputation."""
    sae, _ = trained
    greedy = GenerationConfig(max_new_tokens=8, temperature=0.0)
    with steer_with_sae_feature(toy, sae, 5, 8.0):
        cached = toy.sample(["The cat sat on"], 8, temperature=0.0)[0]
        recomputed = generate(toy, ["The cat sat on"], greedy, use_kv_cache=False).texts[0]
    assert cached == recomputed


def test_feature_cards_and_find_features(
    toy: LensModel, trained: tuple[LensSAE, SAEStats], tmp_path: Path
) -> None:
    sae, _ = trained
    rows = sae_corpus(toy, DATA).held_out
    cards = feature_cards(toy, sae, rows, config=FeatureConfig(contexts=3, progress=False))
    assert cards.features == tuple(range(64)) and cards.values.shape == (64, 3)
    assert (cards.values[:, :-1] >= cards.values[:, 1:]).all()  # best context first
    feature = int(cards.density.argmax())
    tokens, acts = cards.contexts(feature)[0]
    assert max(acts) == pytest.approx(float(cards.values[cards.row(feature), 0]))
    assert len(tokens) <= 16 and len(cards.promoted[0]) == 10
    # The peak activation is the SAE's own encoding of the corpus at that token.
    all_acts = torch.cat([sae.encode(_resid(toy, torch.tensor([r]))[0, 1:]) for r in rows])
    assert float(all_acts[:, feature].max()) == pytest.approx(max(acts), rel=1e-4)
    assert cards.density[feature] == pytest.approx(float((all_acts[:, feature] > 0).float().mean()))
    word = cards.promoted[3][0]
    assert 3 in find_features(cards, [word])
    page = cards.save_html(tmp_path / "cards.html").read_text()
    assert "CircuitsVis.render(" in page and "<script src=" not in page
    assert 'from "https://' not in page and "unpkg.com" not in page.split("<body>")[1]
    assert cards.to_dataframe().shape[0] == 64 * 3


def test_steering_frequency_table(toy: LensModel, trained: tuple[LensSAE, SAEStats]) -> None:
    sae, _ = trained
    table = steering_frequency(toy, sae, 5, PROMPTS, FrequencyConfig(coefficient=8.0, new_tokens=6))
    assert table.values.shape == (3, 4) and table.control != 5
    assert table.axis_labels(0)[0] == "unsteered" and "random feature" in table.summary()
    assert len(table.token_set) == 20
    # The unsteered row is the share of the feature's promoted tokens in plain samples.
    sampling = GenerationConfig(max_new_tokens=6, temperature=1.0, top_p=0.9, seed=0, batch_size=64)
    plain = generate(toy, PROMPTS, sampling).tokens
    ids = set(promoted_tokens(toy, sae, [5], 20)[0][0])
    assert table.values[0].tolist() == pytest.approx([sum(t in ids for t in o) / 6 for o in plain])
    # With no push all three conditions sample the same tokens.
    same = steering_frequency(toy, sae, 5, PROMPTS, FrequencyConfig(coefficient=0.0, new_tokens=6))
    assert torch.equal(same.values[0], same.values[1]) and torch.equal(
        same.values[0], same.values[2]
    )
    assert same.samples[0] == same.samples[1]


def test_bad_input_gets_clear_errors(
    toy: LensModel, trained: tuple[LensSAE, SAEStats], monkeypatch: pytest.MonkeyPatch
) -> None:
    sae, _ = trained
    with (
        pytest.raises(ValueError, match=r"out of range: this SAE has features 0\.\.63"),
        steer_with_sae_feature(toy, sae, 64, 1.0),
    ):
        pass
    with pytest.raises(ValueError, match="out of range"):
        clamp_sae_feature(toy, sae, -1, 0.0).__enter__()
    other = load_model("toy-3l", device="cpu")
    with (
        pytest.raises(SAEMismatchError, match="trained on toy-2l"),
        steer_with_sae_feature(other, sae, 1, 1.0),
    ):
        pass
    with pytest.raises(SAEMismatchError, match=r"reads blocks\.0\.hook_resid_post, not"):
        sae.check(toy, hook_name("resid_post", 1))
    with pytest.raises(ValueError, match="mode must be one of"):
        clamp_sae_feature(toy, sae, 1, 0.0, mode="sometimes").__enter__()  # type: ignore[arg-type]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the SAE that ships is expanded into the cache and offered instead
    with pytest.raises(PretrainedSAEUnavailable, match=r"offline.*the locally trained SAE"):
        load_sae("gemma-scope-2-270m-pt-res", "layer_12_width_16k_l0_medium")
    with pytest.raises(ValueError, match="no release"):
        load_sae("gemma-scope-2-270m-pt-rez", "layer_12_width_16k_l0_medium")
    with pytest.raises(ValueError, match=r"SAETrainConfig\.k must be >= 1, not 0"):
        SAETrainConfig(k=0)
    with pytest.raises(ValueError, match="layer 5 does not exist"):
        train_sae(toy, DATA, TRAIN.replace(layer=5), cache=False)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    model = ["--model", "toy-2l", "--device", "cpu"]
    small = [
        "--layer",
        "0",
        "--d-sae",
        "64",
        "--k",
        "4",
        "--training-samples",
        "2048",
        "--batch-size",
        "512",
        "--autocast",
        "none",
        "--corpus-tokens",
        "2000",
        "--seq-len",
        "64",
        "--generations",
        "0",
    ]
    code, out, _ = _cli(["sae", "train", *model, *small, "--sae-dir", str(tmp_path / "sae")])
    assert code == 0 and "SAE cached at" in out and (tmp_path / "sae" / "stats.json").is_file()
    sae = ["--sae", str(tmp_path / "sae")]
    code, out, _ = _cli(["sae", "stats", *model, *sae, "--out", str(tmp_path / "stats.json")])
    assert code == 0 and "held-out tokens" in out and (tmp_path / "stats.safetensors").is_file()
    code, out, _ = _cli(
        [
            "sae",
            "features",
            *model,
            *sae,
            "--top",
            "2",
            "--rows",
            "20",
            "--html",
            str(tmp_path / "f.html"),
        ]
    )
    assert code == 0 and (tmp_path / "f.html").is_file()
    code, out, _ = _cli(
        ["sae", "steer", *model, *sae, "--feature", "3", "--coef", "8", "--max-new-tokens", "4"]
    )
    assert code == 0 and "unsteered:" in out and "feature 3" in out
    code, out, _ = _cli(
        [
            "sae",
            "clamp",
            *model,
            *sae,
            "--feature",
            "3",
            "--value",
            "0",
            "--mode",
            "where_active",
            "--max-new-tokens",
            "4",
        ]
    )
    assert code == 0 and "where_active" in out
    for argv, message in [
        (["sae", "steer", *model, *sae, "--feature", "64"], "out of range"),
        (["sae", "stats", *model, *sae, "--layer", "1"], "reads blocks.0.hook_resid_post"),
        (["sae", "stats", "--model", "toy-3l", "--device", "cpu", *sae], "trained on toy-2l"),
        (["sae", "stats", *model], "no trained SAE"),
        (["sae", "stats", *model, "--sae", str(tmp_path)], "holds no lmsci-mi SAE"),
        (["sae", "features", *model, *sae, "--top", "0"], "--top must be at least 1"),
    ]:
        code, _, err = _cli(argv)
        assert code == 2 and message in err and "Traceback" not in err, (argv, err)


def test_the_sae_package_uses_no_steering_module() -> None:
    """SAE-feature steering lives in lmsci_mi.sae and reaches LM-Steer's files for nothing."""
    for path in Path(sae_package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not any(n.startswith("lmsci_mi.steering") for n in names), path.name


def test_an_untrained_sae_is_seeded_and_leaves_the_global_rng_alone(toy: LensModel) -> None:
    config = SAETrainConfig(layer=1, d_sae=32, k=4, seed=7)
    state = torch.get_rng_state()
    first = sae_package.untrained_sae(toy, config)
    assert torch.equal(torch.get_rng_state(), state)
    second = sae_package.untrained_sae(toy, config)
    other = sae_package.untrained_sae(toy, config.replace(seed=8))
    assert torch.equal(first.sae.W_enc, second.sae.W_enc)
    assert not torch.equal(first.sae.W_enc, other.sae.W_enc)
    assert first.hook == hook_name("resid_post", 1) and first.info["untrained"]


def _private_names(source: str) -> set[str]:
    """Single-underscore names that a piece of code imports from lmsci_mi or reads off one of
    its modules (``train_module._helper``); its own helpers are its business."""
    tree = ast.parse(source)
    modules, found = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmsci_mi"):
            found |= {a.name for a in node.names if a.name.startswith("_")}
            modules |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.startswith("lmsci_mi")}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
        ):
            found.add(node.attr)
    return {name for name in found if not name.startswith("__")}


def test_no_docstring_example_or_example_script_uses_a_private_name() -> None:
    import doctest

    root = Path(sae_package.__file__).parents[1]
    used = {}
    parser = doctest.DocTestParser()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = [
            ast.get_docstring(node) or ""
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        source = "\n".join(e.source for doc in docs for e in parser.get_examples(doc))
        if names := _private_names(source):
            used[str(path.relative_to(root.parent))] = names
    for path in sorted((root.parent / "examples").glob("*.py")):
        if names := _private_names(path.read_text(encoding="utf-8")):
            used[str(path.relative_to(root.parent))] = names
    # Known and outside the SAE package, left to their owners: a notebook builder reading the
    # results registry, and the tour's doctest reading the CLI's feature table.
    known = {"examples/make_notebooks.py": {"_RESULT_TYPES"}, "lmsci_mi/cli/tour.py": {"_FEATURES"}}
    assert {path: names for path, names in used.items() if known.get(path) != names} == {}
