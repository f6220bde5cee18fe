"""Sharded analyses (lmsci_mi.cluster) give the single-process result: in this process (fast) and
on a local Ray instance with 2 CPUs (slow), also when a worker dies on its first attempt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lmsci_mi import load_model
from lmsci_mi.circuits.aie import AIEConfig, average_indirect_effect
from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.circuits.tracing import TraceConfig
from lmsci_mi.cli import main
from lmsci_mi.cluster import SHARDABLE, ClusterConfig, ShardError, run_sharded, split
from lmsci_mi.cluster.spec import FaultInjection
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.data import Fact
from lmsci_mi.data.pairs import PromptPairs, TokenisedPairs
from lmsci_mi.editing import (
    EditRequest,
    EvaluationConfig,
    MEMITConfig,
    ROMEConfig,
    evaluate_edits,
)
from lmsci_mi.editing.stats import StatsConfig, key_statistics
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result
from lmsci_mi.sites import hook_name
from tests.fixtures import FACT_TEMPLATE as TEMPLATE
from tests.fixtures import toy_known_facts

TEXTS = ["The cat sat on the mat", "A dog ran far away", "Birds fly", "One two three four", "Hello"]
CLEAN = ["Mary and John: John gave it to", "Anna and Tom: Tom gave it to", "Kim and Lee: Lee said hi to"]
CORRUPTED = ["Mary and John: Mary gave it to", "Anna and Tom: Anna gave it to", "Kim and Lee: Kim said hi to"]
EIFFEL = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris",
                     ("The Eiffel Tower can be found in the city of",), ("The Louvre is located in the city of",))
LOUVRE = EditRequest("{} is located in the city of", "The Louvre", " Berlin", " Paris",
                     ("The Louvre can be found in the city of",), ("The Eiffel Tower is in the city of",))
QUIET = EvaluationConfig(generation_tokens=5)
FAST_ROME = ROMEConfig(layer=0, n_contexts=2, steps=4)
FAST_MEMIT = MEMITConfig(layers=(0, 1), n_contexts=2, steps=4)


def _known(lm: LensModel) -> list[Fact]:
    return toy_known_facts(lm)


def _aie_config() -> AIEConfig:
    return AIEConfig(cache=False, trace=TraceConfig(corruption="gaussian", n_samples=2, window=1))


@pytest.fixture(scope="module")
def lm() -> LensModel:
    """One toy for the module, on the CPU like the Ray workers' (results are compared exactly)."""
    return load_model("toy-2l")


@pytest.fixture(scope="module")
def stats(lm: LensModel, tmp_path_factory: pytest.TempPathFactory):
    return key_statistics(lm, [0, 1], StatsConfig(n_tokens=1024, seq_len=64),
                          cache_dir=tmp_path_factory.mktemp("stats"))


def _process(shards: int) -> ClusterConfig:
    return ClusterConfig(address="process", shards=shards, progress=False)


# ---------------------------------------------------------------------- the four analyses, one process


def _check_aie(lm: LensModel, cluster: ClusterConfig, **kw: object) -> None:
    facts = _known(lm)
    assert len(facts) >= 3
    single = average_indirect_effect(lm, facts, _aie_config())
    sharded = (
        run_sharded("aie", lm, facts, _aie_config(), cluster=cluster, **kw)
        if kw
        else average_indirect_effect(lm, facts, _aie_config(), cluster=cluster)
    )
    # Traces are per fact and seeded per fact: exactly the same numbers.
    assert torch.equal(sharded.values, single.values) and torch.equal(sharded.band, single.band)
    assert sharded.n_facts == single.n_facts and sharded.n == single.n
    assert sharded.meta.params["cluster.shards"] == min(3, len(facts))


def _check_edges(lm: LensModel, cluster: ClusterConfig) -> None:
    config = EAPConfig(method="EAP-IG", steps=2, batch_size=2)
    # Each pair its own answer and wrong token: a shard scores its pairs with their own rows.
    pairs = PromptPairs(CLEAN, CORRUPTED, answers=(5, 7, 9), wrongs=(6, 8, 10))
    single = edge_attribution(lm, pairs, config=config)
    sharded = edge_attribution(lm, pairs, config=config, cluster=cluster)
    # A mean over pairs, summed in another order.
    torch.testing.assert_close(sharded.values, single.values, rtol=1e-5, atol=1e-6)
    assert sharded.clean_value == pytest.approx(single.clean_value, rel=1e-5)
    assert sharded.corrupted_value == pytest.approx(single.corrupted_value, rel=1e-5)
    assert sharded.meta.prompts == single.meta.prompts


def _check_collect(lm: LensModel, cluster: ClusterConfig, **kw: object) -> None:
    hooks = [hook_name("resid_post", 1), hook_name("mlp_out", 0)]
    config = CollectConfig(max_items=9, seed=3, progress=False)
    single = collect_activations(lm, TEXTS, hooks, positions="all", config=config)
    sharded = (
        run_sharded("collect", lm, TEXTS, hooks, positions="all", config=config, cluster=cluster, **kw)
        if kw
        else collect_activations(lm, TEXTS, hooks, positions="all", config=config, cluster=cluster)
    )
    # One subsample over all texts, as in one process; the rows in the same order.
    for name in ("example", "position", "token"):
        assert torch.equal(getattr(sharded, name), getattr(single, name)), name
    for hook in single.hooks:
        torch.testing.assert_close(sharded.acts[hook], single.acts[hook], rtol=1e-5, atol=1e-6)


def _check_edit_eval(lm: LensModel, stats, config, cluster: ClusterConfig) -> None:
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    single = evaluate_edits(lm, [EIFFEL, LOUVRE], config, stats=stats, evaluation=QUIET)
    sharded = evaluate_edits(lm, [EIFFEL, LOUVRE], config, stats=stats, evaluation=QUIET, cluster=cluster)
    torch.testing.assert_close(sharded.per_fact, single.per_fact, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert sharded.fact_layers == single.fact_layers and sharded.n_edits == single.n_edits
    assert sharded.excluded_neighbours == single.excluded_neighbours
    for k, v in lm.model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed"


def test_split_keeps_order_and_balances() -> None:
    shards = split(list(range(10)), 4)
    assert [len(s) for s in shards] == [3, 3, 2, 2] and sum(shards, ()) == tuple(range(10))
    with pytest.raises(ValueError, match="at least 1"):
        split([1], 0)


def test_the_registry_names_the_four_analyses() -> None:
    assert SHARDABLE.names() == ("aie", "collect", "edges", "edit-eval")
    with pytest.raises(KeyError, match="registered"):
        run_sharded("nope", load_model("toy-2l"), cluster=_process(1))


@pytest.mark.slow
def test_aie_sharded_in_process_equals_one_process(lm: LensModel) -> None:
    _check_aie(lm, _process(3))


@pytest.mark.slow
def test_edges_sharded_in_process_equal_one_process(lm: LensModel) -> None:
    _check_edges(lm, _process(2))


def test_collection_sharded_in_process_equals_one_process(lm: LensModel) -> None:
    _check_collect(lm, _process(3))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["memit", "rome"])
def test_edit_evaluation_sharded_in_process_equals_one_process(lm: LensModel, stats, method: str) -> None:
    _check_edit_eval(lm, stats, FAST_MEMIT if method == "memit" else FAST_ROME, _process(2))


def test_bad_input_is_refused_on_the_driver(lm: LensModel) -> None:
    token_ids = TokenisedPairs.from_tokens(torch.tensor([[1, 2]]), torch.tensor([[1, 3]]))
    with pytest.raises(ValueError, match="as texts"):
        run_sharded("edges", lm, token_ids, LogitDiff(5, 6), cluster=_process(2))
    with pytest.raises(ValueError, match="knows none"):
        run_sharded("aie", lm, [Fact("The cat sat on the", "cat", target_true=" zebra")], cluster=_process(2))
    with pytest.raises(ValueError, match="address"):
        ClusterConfig(address="somewhere")
    with pytest.raises(ValueError, match="not both"):
        collect_activations(lm, TEXTS, [hook_name("resid_post", 0)], out_dir="unused",
                            cluster=_process(2))
    # The shardable binds its function's signature: what the function refuses, it refuses.
    with pytest.raises(TypeError, match="windw"):
        run_sharded("aie", lm, _known(lm), windw=1, cluster=_process(2))
    assert lm.hooks.attached_count() == 0


@pytest.mark.slow  # a fresh interpreter: seconds of imports
def test_nothing_imports_ray_and_asking_for_it_says_how_to_install() -> None:
    code = (
        "import sys\n"
        # The cluster imports no feature; it finds the built-in analyses by name when asked.
        "import lmsci_mi.cluster\n"
        "features = ('circuits', 'editing', 'probes', 'lenses', 'knowledge', 'steering', 'sae')\n"
        "loaded = [m for m in sys.modules if m.split('.')[1:2] and m.split('.')[1] in features]\n"
        "assert not loaded, loaded\n"
        "assert lmsci_mi.cluster.SHARDABLE.names() == ('aie', 'collect', 'edges', 'edit-eval')\n"
        "import lmsci_mi, lmsci_mi.cli, lmsci_mi.circuits, lmsci_mi.editing\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
        "sys.modules['ray'] = None  # as if it were not installed\n"
        "from lmsci_mi.cluster import run_sharded, ClusterConfig\n"
        "try:\n"
        "    run_sharded('collect', lmsci_mi.load_model('toy-2l'), ['a b'], ['blocks.0.hook_resid_post'],"
        " cluster=ClusterConfig(address='local', progress=False))\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr
    assert "pip install 'lmsci-mi[ray]'" in child.stdout


@pytest.mark.slow
def test_cli_shards_a_fact_set_and_an_edit_evaluation(
    lm: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(
        [{"prompt": TEMPLATE, "subject": f.subject, "target_true": f.target_true} for f in _known(lm)]
    ))
    trace = ["trace", "--model", "toy-2l", "--facts", str(facts), "--corruption", "str",
             "--n-facts", "3", "--window", "1", "--kinds", "resid", "--out", str(tmp_path / "aie.json")]
    assert main([*trace, "--ray", "process", "--shards", "2"]) == 0
    assert "AIE (str, logit diff)" in capsys.readouterr().out
    saved = Result.load(tmp_path / "aie.json")
    assert saved.meta.params["cluster.shards"] == 2
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps([EIFFEL.to_json(), LOUVRE.to_json()]))
    edit = ["edit", "--model", "toy-2l", "--requests", str(requests), "--method", "memit", "--layers", "0,1",
            "--n-contexts", "2", "--steps", "4", "--ge-tokens", "0", "--evaluate"]
    assert main([*edit, "--ray", "process", "--shards", "2", "--out", str(tmp_path / "ev.json")]) == 0
    assert Result.load(tmp_path / "ev.json").meta.params["cluster.shards"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "--facts", "shipped", "--ray", "nowhere"], "address"),
        (["trace", "--facts", "shipped", "--shards", "2"], "give --ray too"),
        (["circuit", "eap", "--max-retries", "1"], "--max-retries shard the work over Ray"),
        (["trace", "--prompt", "The Eiffel Tower is in", "--subject", "The Eiffel Tower", "--ray", "local"],
         "give --facts"),
        (["edit", "--prompt", "{} is in", "--subject", "Paris", "--target-new", " Rome", "--evaluate"],
         "give --requests"),
        (["edit", "--prompt", "{} is in", "--subject", "Paris", "--target-new", " Rome", "--ray", "local"],
         "give --evaluate"),
    ],
)
def test_cli_refuses_bad_cluster_flags_before_loading(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("lmsci_mi.cli.common.load_model", no_model)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_ray_without_ray_installed_says_how_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    assert main(["trace", "--facts", "shipped", "--ray", "local"]) == 2
    assert "pip install 'lmsci-mi[ray]'" in capsys.readouterr().err


# ---------------------------------------------------------------------- on a local Ray instance


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _ray(**changes: object) -> ClusterConfig:
    return ClusterConfig(address="auto", shards=3, workers=2, progress=False).replace(**changes)


@pytest.mark.slow
def test_on_ray_every_analysis_equals_one_process(ray_instance, lm: LensModel, stats) -> None:
    _check_aie(lm, _ray())
    _check_edges(lm, _ray(shards=2))
    _check_collect(lm, _ray())
    _check_edit_eval(lm, stats, FAST_MEMIT, _ray(shards=2))


@pytest.mark.slow
def test_on_ray_a_worker_that_dies_is_replaced_and_its_shard_counted_once(
    ray_instance, lm: LensModel, stats, tmp_path
) -> None:
    faults = FaultInjection(shards=(1,), marker_dir=str(tmp_path))
    _check_collect(lm, _ray(), _faults=faults)
    assert (tmp_path / "shard-1.died").exists()  # it did die once
    faults = FaultInjection(shards=(0,), marker_dir=str(tmp_path / "aie"))
    (tmp_path / "aie").mkdir()
    _check_aie(lm, _ray(), _faults=faults)


@pytest.mark.slow
def test_on_ray_a_shard_that_fails_fails_the_run_with_its_message(ray_instance, lm: LensModel, stats) -> None:
    # ROME's layer is checked where the edit is made: on the worker.
    with pytest.raises(ShardError, match="out of range"):
        run_sharded("edit-eval", lm, [EIFFEL, LOUVRE], FAST_ROME.replace(layer=7), stats=stats,
                    evaluation=QUIET, cluster=_ray(shards=2))
    # A model changed in memory on the driver is not what the workers load: refused.
    w = lm.model.blocks[0].mlp.W_out
    with torch.no_grad():
        w.add_(1.0)
    try:
        with pytest.raises(ShardError, match="other weights"):
            run_sharded("collect", lm, TEXTS, [hook_name("resid_post", 0)], cluster=_ray())
    finally:
        with torch.no_grad():
            w.sub_(1.0)
