"""One of each lmsci-mi result type, built cheaply: `results.ipynb` shows each, and run as a script
this prints each one's summary.

    .venv/bin/python examples/result_gallery.py

Where an analysis runs in about a second on the toy model `toy-2l` (random weights), the result
comes from that run; where it needs a trained model, generations or minutes (SAE training, edit
evaluation, LM-Steer curves, the IOI circuit), the result is built from synthetic numbers of the
right shape, and its ``meta.data_source`` says so. Either way it is a real result object: it
saves, loads, plots and shows itself in a notebook like one from a real run.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable

import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.aie import aggregate_traces
from lmsci_mi.circuits.attention import attention_summary
from lmsci_mi.circuits.attribution import AttributionConfig, attribution_patch
from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
from lmsci_mi.circuits.edges.faithfulness import CurveConfig, faithfulness_curve
from lmsci_mi.circuits.edges.graph import edge_graph
from lmsci_mi.circuits.graphs import GraphConfig, attribution_graph, feature_intervention
from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    InductionAblationConfig,
    composition_scores,
    induction_ablation,
    induction_scores,
)
from lmsci_mi.circuits.ioi import IOI_ROLES, CircuitHead, IOICircuit
from lmsci_mi.circuits.patching import PatchingConfig, patch_activations
from lmsci_mi.circuits.path_patching import path_patch
from lmsci_mi.circuits.tracing import TraceConfig, causal_trace
from lmsci_mi.data import Fact
from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.data.concepts import load_concept_pairs
from lmsci_mi.data.contrasts import contrast_pairs
from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.editing.metrics import METRICS as EDIT_METRICS
from lmsci_mi.editing.metrics import EditEvaluation
from lmsci_mi.editing.session import SESSION_METRICS, SessionResult
from lmsci_mi.editing.stats import StatsConfig, key_statistics
from lmsci_mi.editing.wild import WILD_METRICS, WildEvaluation, WildFact, WildGeneration
from lmsci_mi.icl import (
    FunctionVectorConfig,
    ICLPromptConfig,
    ICLRegressionConfig,
    KernelRegressionConfig,
    TaskVectorConfig,
    choose_kr_heads,
    evaluate_regression,
    function_vector,
    function_vector_recovery,
    icl_prompts,
    kernel_regression_heads,
    kr_table,
    regression_probes,
    task_vectors,
    train_regression_model,
)
from lmsci_mi.knowledge import (
    AgreementConfig,
    KnowledgeNeuronsConfig,
    TriggerConfig,
    integrated_gradients,
    key_value_agreement,
    knowledge_neurons,
    sub_updates,
    trigger_examples,
    value_vectors,
)
from lmsci_mi.lenses import direct_logit_attribution, logit_lens
from lmsci_mi.outliers import (
    AttentionCurvesConfig,
    ExclusionEffectConfig,
    FirstTokenMaskConfig,
    MassiveActivationAblation,
    MassiveConfig,
    NLLByPositionConfig,
    OutlierAblationConfig,
    SinkScoreConfig,
    SuperWeightConfig,
    SuperWeightRestoreActivation,
    attention_length_curves,
    find_massive_activations,
    find_super_weights,
    first_token_mask_effect,
    first_token_separation,
    lens_kl_without,
    long_text,
    nll_by_position,
    outlier_ablations,
    sink_heads,
)
from lmsci_mi.positions import Exclude
from lmsci_mi.probes.cfg import (
    AttentionTransitionConfig,
    CFGProbeConfig,
    cfg_attention_transitions,
    cfg_probe_table,
    random_cfg_model,
)
from lmsci_mi.probes.sweep import ProbeSweepConfig, probe_sweep
from lmsci_mi.representations.concepts import (
    concept_direction,
    concept_inner_products,
    concept_intervention,
    concept_projections,
)
from lmsci_mi.representations.reading import ReadingConfig, representation_reading
from lmsci_mi.results import LayerCurve, Meta, Result
from lmsci_mi.sae.features import FeatureCards
from lmsci_mi.sae.frequency import SteeringFrequency
from lmsci_mi.sae.stats import SAEStats
from lmsci_mi.sites import Head
from lmsci_mi.steering.evaluate import METRICS as STEER_METRICS
from lmsci_mi.steering.evaluate import ControlCurve
from lmsci_mi.steering.highlight import highlight_keywords
from lmsci_mi.steering.lm_steer import LMSteer
from lmsci_mi.steering.svd import SVDConfig, steer_svd
from lmsci_mi.steering.train import SteerTraining
from lmsci_mi.steering.transfer import SteerTransfer
from lmsci_mi.steering.vectors import MeanDifferenceConfig, mean_difference_vector
from lmsci_mi.transcoders import TranscoderSet, transcoder_metrics

SYNTHETIC = "synthetic numbers of a real run's shape (a picture of the view, not a measurement)"
PROMPT = "The Eiffel Tower is in the city of"
CONCEPTS = ["male_female", "verb_past", "english_french"]  # concept directions (Park et al.)


def toy() -> LensModel:
    """The two-layer toy model with random weights that the real runs use."""
    return load_model("toy-2l")


def _meta(**params: object) -> Meta:
    return Meta("toy-2l", (PROMPT,), seed=0, data_source=SYNTHETIC, params=params, sink=None)  # type: ignore[arg-type]


def _noise(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _randomise(steer: LMSteer) -> None:
    """Random steer weights (a fresh steer changes nothing), so its views have something to show."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in steer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))


TEXTS = [
    "The Eiffel Tower is in Paris, the capital of France.",
    "Berlin is the capital of Germany and its largest city.",
    "A function returns a value to the caller when it ends.",
]
PAIRS = (["When Mary and John went out, John gave it to", "The cat sat on the"],
         ["When Mary and John went out, Mary gave it to", "The dog sat on the"])


def _pairs(lm: LensModel) -> PromptPairs:
    """PAIRS with each pair's answer and wrong token (the analyses' default metric reads them)."""
    return PromptPairs(*PAIRS, answers=(lm.token_id(" Mary"), lm.token_id(" mat")),
                       wrongs=(lm.token_id(" John"), lm.token_id(" rug")))


ICL_PROMPTS = ICLPromptConfig(n_demonstrations=4, n_prompts=8)
ICL_VECTORS = {"n_prompts": 3}
ICL_REGRESSION = ICLRegressionConfig(d=2, n_points=5, n_layers=1, d_model=16, n_heads=2, steps=12,
                                     batch_size=16, lr=1e-2, warmup=2, noise_std=0.0, seed=3)
"""Small ICL settings: the toy runs each ICL analysis in about a second."""


@functools.cache
def _antonyms_function_vector(lm: LensModel):
    """Todd et al.'s function vector for antonyms on the toy (kept: two result types read it)."""
    return function_vector(lm, "antonyms", FunctionVectorConfig(**ICL_VECTORS, n_top_heads=2))


@functools.cache
def _antonyms_recovery(lm: LensModel):
    """The function vector's share of the ICL gain by layer (kept: two result types read it)."""
    return function_vector_recovery(lm, "antonyms", FunctionVectorConfig(**ICL_VECTORS, n_top_heads=2))


def _regression_model():
    """The in-context regression transformer at ICL_REGRESSION, trained for 12 steps (cached)."""
    return train_regression_model(ICL_REGRESSION, threads=1)[0]


@functools.cache
def _toy_transcoders(lm: LensModel):
    """Random TopK-4 transcoders with skips, one per layer: the graph's shape, not a finding."""
    return TranscoderSet.random(lm, 64, k=4)


def _long_toy_text(lm: LensModel):
    """Two rows of 96 tokens of the standard library's prose: the toy's n_ctx is far longer."""
    return long_text(lm, 2, 96)


# ---------------------------------------------------------------------- builders
# make_notebooks.py turns each builder below into a notebook cell, and the code above into the
# notebook's first cell.

# real runs on the toy


def token_predictions(lm: LensModel) -> Result:
    return lm.top_tokens(PROMPT, k=8)


def causal_trace_result(lm: LensModel) -> Result:
    return causal_trace(lm, PROMPT, "Eiffel Tower", TraceConfig(n_samples=2))


def patching(lm: LensModel) -> Result:
    return patch_activations(
        lm,
        PromptPairs("When Mary and John went out, John gave it to",
                    "When Mary and John went out, Mary gave it to"),
        "kl",
        PatchingConfig(site="resid_pre", positions="each"),
    )


def attribution(lm: LensModel) -> Result:
    return attribution_patch(
        lm,
        PromptPairs("When Mary and John went out, John gave it to",
                    "When Mary and John went out, Mary gave it to"),
        "kl",
        AttributionConfig(site="z"),
    )


def attention(lm: LensModel) -> Result:
    return attention_summary(lm, PROMPT)


def head_scores(lm: LensModel) -> Result:
    return induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=8))


def composition(lm: LensModel) -> Result:
    return composition_scores(lm, "K")


def ablation(lm: LensModel) -> Result:
    config = InductionAblationConfig(n_sequences=8, half_length=8, n_random_draws=5)
    return induction_ablation(lm, [Head(1, 0)], config)


def layer_curve(lm: LensModel) -> Result:
    scores = induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=8))
    best = scores.values.max(dim=1).values
    return LayerCurve(values=best, axes=("layer",), labels=((),), meta=scores.meta)


def highlight(lm: LensModel) -> Result:
    steer = LMSteer.for_model(lm, ("sentiment",))
    _randomise(steer)
    return highlight_keywords(lm, steer, "What a wonderful, sunny day; the food was awful though.")


def svd(lm: LensModel) -> Result:
    steer = LMSteer.for_model(lm, ("sentiment",))
    _randomise(steer)
    return steer_svd(lm, steer, SVDConfig(n_directions=5, top_k=5))


def key_stats(lm: LensModel) -> Result:
    folder = tempfile.mkdtemp(prefix="lmsci-gallery-")
    return key_statistics(lm, [0, 1], StatsConfig(n_tokens=200, seq_len=64), cache_dir=folder)


def probe(lm: LensModel) -> Result:
    texts = [f"The {w} is here" for w in ["cat", "dog", "fish", "bird", "cow", "frog"] * 8]
    labels = ["mammal" if t.split()[1] in ("cat", "dog", "cow") else "other" for t in texts]
    return probe_sweep(lm, texts, labels, config=ProbeSweepConfig(bootstrap=20), task="animals")


def cfg_transitions(lm: LensModel) -> Result:
    grammar = build_grammar(CFGConfig())
    return cfg_attention_transitions(
        random_cfg_model(), grammar, AttentionTransitionConfig(n_sequences=30, batch_size=30)
    )


def cfg_probes(lm: LensModel) -> Result:
    cfg_lm = random_cfg_model()
    config = CFGProbeConfig(n_sequences=20, multihead=False, attention=False, evaluate=False)
    return cfg_probe_table(cfg_lm, cfg_lm, build_grammar(CFGConfig()), config)


# synthetic numbers


def edit_evaluation(lm: LensModel) -> Result:
    # S, ES, PS, NS, EM, PM, NM, GE, then NEG, REV, 2HOP, ORL
    unedited = torch.tensor([40.0, 20.0, 25.0, 90.0, -5.0, -3.0, 8.0, 620.0, 0.0, 0.0, 0.0, 0.0])
    edited = torch.tensor([85.0, 100.0, 80.0, 78.0, 60.0, 35.0, 6.0, 615.0, 70.0, 0.0, 30.0, 10.0])
    per_fact = torch.rand(2, 4, len(EDIT_METRICS) - 1, generator=torch.Generator().manual_seed(0))
    return EditEvaluation(
        values=torch.stack([unedited, edited]),
        axes=("model", "metric"),
        labels=(("unedited", "rome"), EDIT_METRICS),
        meta=_meta(method="rome"),
        per_fact=per_fact,
        subjects=(
            "Eiffel Tower",
            "Danielle Darrieux",
            "Toko Yasuda",
            "Autonomous University of Madrid",
        ),
        method="rome",
        fact_layers=((5,), (5,), (5,), (5,)),
        n_edits=4,
        seconds_per_edit=2.5,
        stats_tokens=100_000,
        excluded_neighbours=0,
    )


def wild_evaluation(lm: LensModel) -> Result:
    # rewrite, paraphrase, locality, true answer: the generations say what each score read
    def fact(rewrite: str, paraphrase: str, neighbour: str, kept: bool) -> WildFact:
        return WildFact(
            "Eiffel Tower", " Rome", " Paris",
            WildGeneration("The Eiffel Tower is in", (), rewrite),
            (WildGeneration("Where is the Eiffel Tower? It is in", (), paraphrase),),
            (WildGeneration("The Louvre is in", (), neighbour),), (kept,),
        )

    unedited = fact(" Paris, France", " Paris", " Paris", True)
    edited = fact(" Rome, Italy", " Paris", " Paris", True)
    per_fact = torch.tensor([[unedited.scores()], [edited.scores()]])
    return WildEvaluation(
        values=per_fact.nanmean(1) * 100,
        axes=("model", "metric"),
        labels=(("unedited", "rome"), WILD_METRICS),
        meta=_meta(method="rome"),
        per_fact=per_fact,
        facts=((unedited,), (edited,)),
        method="rome",
        n_edits=1,
        seconds_per_edit=2.5,
        excluded_neighbours=0,
    )


def session_result(lm: LensModel) -> Result:
    edits = (0, 20, 40, 60)
    # ES, PS, NS, specificity, GE: a session that installs its edits and slowly loses neighbours
    values = torch.tensor([
        [0.0, 1.0, 100.0, 100.0, 525.0],
        [100.0, 95.0, 96.0, 94.0, 522.0],
        [98.0, 93.0, 91.0, 88.0, 518.0],
        [96.0, 90.0, 85.0, 81.0, 510.0],
    ])
    return SessionResult(
        values=values,
        axes=("step", "metric"),
        labels=(tuple(str(n) for n in edits), SESSION_METRICS),
        meta=_meta(method="alphaedit"),
        n_edited=edits,
        seconds=(0.0, 80.0, 160.0, 240.0),
        method="alphaedit",
        batch_size=10,
        order=tuple(f"subject {i}" for i in range(60)),
        targets=tuple(" Rome" for _ in range(60)),
    )


def sae_stats(lm: LensModel) -> Result:
    density = (10 ** (-4 * torch.rand(512, generator=torch.Generator().manual_seed(0)))) * (
        torch.rand(512, generator=torch.Generator().manual_seed(1)) > 0.05
    )
    return SAEStats(
        values=density,
        axes=("feature",),
        labels=((),),
        meta=_meta(d_sae=512),
        hook="blocks.1.hook_resid_post",
        explained_variance=0.82,
        explained_variance_autocast=None,
        l0=31.0,
        dead_fraction=float((density == 0).float().mean()),
        loss_clean=3.1,
        loss_sae=3.3,
        loss_zero=7.9,
        n_tokens=20_000,
        feature_scale=torch.rand(512) + 0.5,
        costs={"harvest seconds": 12.0, "train seconds": 60.0},
    )


def steering_frequency(lm: LensModel) -> Result:
    shares = torch.stack([torch.rand(12) * 0.02, 0.1 + torch.rand(12) * 0.2, torch.rand(12) * 0.03])
    return SteeringFrequency(
        values=shares,
        axes=("condition", "prompt"),
        labels=(("unsteered", "feature 17 at 8", "random feature 301 at 8"), ()),
        meta=_meta(coefficient=8.0),
        feature=17,
        control=301,
        coefficient=8.0,
        token_set=(" Paris", " France", " French"),
        samples=(("…", "…", "…"),),
    )


def feature_cards(lm: LensModel) -> Result:
    words = (
        "The",
        " Eiffel",
        " Tower",
        " is",
        " in",
        " Paris",
        ",",
        " France",
        ".",
        " We",
        " visited",
        " the",
        " Louvre",
        " museum",
        " and",
        " ate",
        " croissants",
        "\n",
    )
    n_features, n_contexts, window = 3, 3, 12
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, len(words), (n_features, n_contexts, window), generator=generator)
    acts = torch.rand(n_features, n_contexts, window, generator=generator) ** 4 * 5
    return FeatureCards(
        values=acts.amax(-1),
        axes=("feature", "context"),
        labels=(("4", "17", "230"), ()),
        meta=_meta(),
        hook="blocks.1.hook_resid_post",
        features=(4, 17, 230),
        density=torch.tensor([1e-3, 2e-2, 4e-4]),
        scale=torch.tensor([4.0, 5.0, 3.0]),
        promoted=((" Paris", " France"), (" museum", " art"), (" food", " bread")),
        promoted_logits=torch.tensor([[2.0, 1.5], [1.8, 1.2], [1.1, 0.9]]),
        context_tokens=tokens,
        context_acts=acts,
        token_strings=words,
        n_tokens=50_000,
    )


def control_curve(lm: LensModel) -> Result:
    settings = (-5.0, -2.5, 0.0, 2.5, 5.0)
    sentiment = torch.tensor(settings) * 0.08
    rows = torch.stack(
        [
            sentiment,
            0.1 * torch.ones(5),
            30 + torch.tensor(settings).abs() * 3,
            0.6 * torch.ones(5),
            0.8 * torch.ones(5),
            0.9 * torch.ones(5),
        ],
        dim=1,
    )
    return ControlCurve(
        values=rows,
        axes=("setting", "metric"),
        labels=(tuple(f"sentiment={s:+g}" for s in settings), STEER_METRICS),
        meta=_meta(),
        attributes=("sentiment", "dummy"),
        settings=tuple((s, 1.0) for s in settings),
        unsteered=(0.0, 0.1, 28.0, 0.6, 0.8, 0.9),
        continuations=tuple(("…",) for _ in settings),
    )


def steer_training(lm: LensModel) -> Result:
    steps = torch.arange(200, dtype=torch.float32)
    loss = 3.0 + 1.5 * torch.exp(-steps / 40) + 0.05 * _noise(200)
    return SteerTraining(
        values=loss,
        axes=("step",),
        labels=((),),
        meta=_meta(),
        attributes=("sentiment",),
        n_texts=2000,
        n_tokens=60_000,
        unsteered_loss=4.5,
        final_loss=float(loss[-20:].mean()),
        collect_seconds=20.0,
        train_seconds=90.0,
    )


def steer_transfer(lm: LensModel) -> Result:
    r2 = torch.tensor([0.91, 0.85, 0.78, 0.7, 0.66, 0.52, 0.47, 0.3])
    return SteerTransfer(
        values=r2,
        axes=("d_source",),
        labels=((),),
        meta=_meta(),
        source_model="toy-2l",
        target_model="toy-3l",
        n_shared=5000,
        r2=float(r2.mean()),
    )


def ioi_circuit(lm: LensModel) -> Result:
    n_layers, n_heads = 2, 4
    dla = _noise(n_layers, n_heads)
    heads = tuple(
        CircuitHead(
            head=Head(i % n_layers, i % n_heads),
            role=role,
            dla=float(dla[i % n_layers, i % n_heads]),
            attn_end_io=0.4,
            attn_end_s=0.1,
            path_patching=float("nan"),
            score=0.5,
        )
        for i, role in enumerate(IOI_ROLES[:4])
    )
    grid = torch.rand(n_layers, n_heads)
    return IOICircuit(
        values=dla,
        axes=("layer", "head"),
        labels=(("0", "1"), ("0", "1", "2", "3")),
        meta=_meta(),
        heads=heads,
        logit_diffs=_noise(20) + 1.0,
        logit_diff=1.0,
        fraction_positive=0.8,
        attn_end_io=grid,
        attn_end_s=grid,
        induction_s2=grid,
        duplicate_s2=grid,
        previous_s1_plus_1=grid,
        path_patching=grid,
        logit_diff_circuit=0.9,
        faithfulness=0.9,
        logit_diff_without_name_movers=0.3,
        name_mover_removed=0.7,
    )


def lens(lm: LensModel) -> Result:
    return logit_lens(lm, PROMPT, " Paris")


def dla(lm: LensModel) -> Result:
    return direct_logit_attribution(lm, PROMPT, " Paris")


def values(lm: LensModel) -> Result:
    return value_vectors(lm, 1, [0, 1, 2])


def triggers(lm: LensModel) -> Result:
    return trigger_examples(lm, 1, [0, 1], TEXTS, TriggerConfig(n_examples=3))


def subupdates(lm: LensModel) -> Result:
    return sub_updates(lm, PROMPT)


def agreement(lm: LensModel) -> Result:
    config = AgreementConfig(neurons_per_layer=6, n_triggers=3, top_k=50, n_shuffles=2)
    return key_value_agreement(lm, TEXTS, config)


def neuron_attribution(lm: LensModel) -> Result:
    return integrated_gradients(lm, PROMPT, " Paris", KnowledgeNeuronsConfig(steps=4))


def neurons(lm: LensModel) -> Result:
    prompts = [PROMPT, "The Eiffel Tower stands in the city of", "You can see the Eiffel Tower in"]
    return knowledge_neurons(lm, prompts, " Paris", KnowledgeNeuronsConfig(steps=4))


def edge_scores(lm: LensModel) -> Result:
    return edge_attribution(lm, _pairs(lm), config=EAPConfig(method="EAP"))


def curve(lm: LensModel) -> Result:
    scores = edge_attribution(lm, _pairs(lm), config=EAPConfig(method="EAP"))
    config = CurveConfig(fractions=(10.0, 50.0, 100.0), n_bootstrap=0)
    return faithfulness_curve(lm, edge_graph(lm), scores, _pairs(lm), config=config)


def circuit(lm: LensModel) -> Result:
    return curve(lm).circuit(50.0)  # type: ignore[attr-defined]


def paths(lm: LensModel) -> Result:
    one = _pairs(lm)[:1]  # one pair: equal lengths; its logit difference Mary − John
    return path_patch(lm, one, senders=["L0.H0", "L0.H1", "MLP0"], receivers=["logits"])


def aie(lm: LensModel) -> Result:
    facts = [
        Fact(PROMPT, "Eiffel Tower", target_true=" Paris"),
        Fact("Berlin is the capital of", "Berlin", target_true=" Germany"),
    ]
    config = TraceConfig(n_samples=2, window=1, kinds=("resid", "mlp"))
    traces = [causal_trace(lm, f.rewrite_prompt, f.subject, config.replace(target=f.target_true)) for f in facts]
    return aggregate_traces(traces)


def concept_direction_result(lm: LensModel) -> Result:
    return concept_direction(lm, load_concept_pairs(["male_female"])["male_female"], drop=True)


def projections(lm: LensModel) -> Result:
    return concept_projections(lm, load_concept_pairs(CONCEPTS))


def inner_products(lm: LensModel) -> Result:
    return concept_inner_products(lm, load_concept_pairs(CONCEPTS))


def intervention(lm: LensModel) -> Result:
    return concept_intervention(lm, load_concept_pairs(CONCEPTS))


def reading(lm: LensModel) -> Result:
    pairs = contrast_pairs("sentiment", n_pairs=16)
    return representation_reading(lm, pairs, config=ReadingConfig(n_random=2, bootstrap=100))


def steering_vector_result(lm: LensModel) -> Result:
    pairs = contrast_pairs("sentiment", n_pairs=8)
    return mean_difference_vector(lm, pairs.positive, pairs.negative, MeanDifferenceConfig(layer=1))


def kr_heads(lm: LensModel, split: str = "dev") -> Result:
    prompts = icl_prompts(lm, "parity", ICL_PROMPTS, split=split)  # type: ignore[arg-type]
    return kernel_regression_heads(lm, prompts, KernelRegressionConfig(batch_size=8))


def kr_table_result(lm: LensModel) -> Result:
    return kr_table(choose_kr_heads({"parity": kr_heads(lm)}), {"parity": kr_heads(lm, "held_out")})


def task_vectors_result(lm: LensModel) -> Result:
    prompts = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=3, n_prompts=3))
    return task_vectors(lm, prompts, TaskVectorConfig(**ICL_VECTORS))


def function_vector_result(lm: LensModel) -> Result:
    return _antonyms_function_vector(lm)


def indirect_effects(lm: LensModel) -> Result:
    return _antonyms_function_vector(lm).effects


def gain_recovery(lm: LensModel) -> Result:
    return _antonyms_recovery(lm)


def vector_recovery_result(lm: LensModel) -> Result:
    return _antonyms_recovery(lm).dev


def regression_curves(lm: LensModel) -> Result:
    return evaluate_regression(_regression_model(), ICL_REGRESSION, n_prompts=40, n_dev=40,
                               n_resamples=20).errors


def regression_probes_result(lm: LensModel) -> Result:
    return regression_probes(_regression_model(), ICL_REGRESSION, n_prompts=150, n_examples=3,
                             n_resamples=50)


def attribution_graph_result(lm: LensModel) -> Result:
    return attribution_graph(lm, _toy_transcoders(lm), PROMPT, GraphConfig(max_feature_nodes=40, batch_size=64))


def transcoder_quality(lm: LensModel) -> Result:
    rows = [lm.encode(text) for text in TEXTS]
    return transcoder_metrics(lm, _toy_transcoders(lm), rows, n_resamples=20)


def feature_intervention_result(lm: LensModel) -> Result:
    return feature_intervention(lm, _toy_transcoders(lm), PROMPT, [(1, 3, 5, 0.0)])


def massive_activations(lm: LensModel) -> Result:
    # The random toy has no activation 1,000 times its median: a low rule shows the table's shape.
    return find_massive_activations(lm, TEXTS, MassiveConfig(threshold=1.0, ratio=4.0))


def super_weights(lm: LensModel) -> Result:
    return find_super_weights(lm, SuperWeightConfig(threshold=0.5, max_candidates=2))


def length_curve(lm: LensModel) -> Result:
    return attention_length_curves(lm, _long_toy_text(lm), AttentionCurvesConfig(chunk_size=32)).max_logit


def first_tokens(lm: LensModel) -> Result:
    return first_token_separation(lm, _long_toy_text(lm))


def nll_positions(lm: LensModel) -> Result:
    return nll_by_position(lm, _long_toy_text(lm), NLLByPositionConfig(window=16, in_context_start=8,
                                                                       in_context_stop=40))


def sinks(lm: LensModel) -> Result:
    return sink_heads(lm, SinkScoreConfig(n_texts=2, seq_len=16))


def first_token_mask(lm: LensModel) -> Result:
    config = FirstTokenMaskConfig(n_texts=2, seq_len=12, n_random_draws=1, n_resamples=20)
    return first_token_mask_effect(lm, ["L1.H0", "L1.H2"], config)


def exclusion(lm: LensModel) -> Result:
    config = ExclusionEffectConfig(n_texts=2, seq_len=16, n_resamples=20)
    return lens_kl_without(lm, Exclude(positions=(1,)), config=config)
def outlier_ablations_result(lm: LensModel) -> Result:
    # The toy has no massive activations or super weights: these coordinates are arbitrary, so
    # the view is a real run's shape, not a finding. The text is TEXTS, not the stdlib prose.
    small = OutlierAblationConfig(n_texts=4, seq_len=12, text_start=2, n_reference_texts=1,
                                  n_control_draws=2, n_facts=4, n_ioi=2, n_resamples=100)
    return outlier_ablations(lm, {
        "zero L0.d5": MassiveActivationAblation(((0, 5),)),
        "remove L1 weight, restore SA": SuperWeightRestoreActivation((1, 7, 30)),
    }, small, documents=TEXTS * 3)


BUILDERS: dict[str, Callable[[LensModel], Result]] = {
    "TokenPredictions": token_predictions,
    "CausalTrace": causal_trace_result,
    "PatchingResult": patching,
    "AttributionResult": attribution,
    "AttentionSummary": attention,
    "HeadScores": head_scores,
    "CompositionScores": composition,
    "InductionAblation": ablation,
    "LayerCurve": layer_curve,
    "IOICircuit": ioi_circuit,
    "ProbeSweep": probe,
    "CFGAttentionTransitions": cfg_transitions,
    "CFGProbeTable": cfg_probes,
    "KeyStatistics": key_stats,
    "EditEvaluation": edit_evaluation,
    "WildEvaluation": wild_evaluation,
    "SessionResult": session_result,
    "Highlight": highlight,
    "SteerSVD": svd,
    "ControlCurve": control_curve,
    "SteerTraining": steer_training,
    "SteerTransfer": steer_transfer,
    "SAEStats": sae_stats,
    "FeatureCards": feature_cards,
    "SteeringFrequency": steering_frequency,
    "LogitLens": lens,
    "LogitAttribution": dla,
    "ValueVectors": values,
    "TriggerExamples": triggers,
    "SubUpdates": subupdates,
    "KeyValueAgreement": agreement,
    "NeuronAttribution": neuron_attribution,
    "KnowledgeNeurons": neurons,
    "EdgeScores": edge_scores,
    "FaithfulnessCurve": curve,
    "Circuit": circuit,
    "PathPatchingResult": paths,
    "AverageIndirectEffect": aie,
    "ConceptDirection": concept_direction_result,
    "ConceptProjections": projections,
    "ConceptInnerProducts": inner_products,
    "ConceptIntervention": intervention,
    "RepresentationReading": reading,
    "SteeringVector": steering_vector_result,
    "KernelRegressionHeads": kr_heads,
    "KernelRegressionTable": kr_table_result,
    "TaskVectors": task_vectors_result,
    "FunctionVector": function_vector_result,
    "HeadIndirectEffects": indirect_effects,
    "ICLGainRecovery": gain_recovery,
    "VectorRecovery": vector_recovery_result,
    "RegressionCurves": regression_curves,
    "RegressionProbes": regression_probes_result,
    "AttributionGraph": attribution_graph_result,
    "InterventionEffect": feature_intervention_result,
    "TranscoderMetrics": transcoder_quality,
    "MassiveActivations": massive_activations,
    "SuperWeightCandidates": super_weights,
    "LengthCurve": length_curve,
    "FirstTokenSeparation": first_tokens,
    "NLLByPosition": nll_positions,
    "SinkHeads": sinks,
    "FirstTokenMaskEffect": first_token_mask,
    "ExclusionEffect": exclusion,
    "OutlierAblations": outlier_ablations_result,
}
"""One builder per registered result type, by type name."""


def main() -> None:
    lm = toy()
    for name, build in BUILDERS.items():
        result = build(lm)
        assert type(result).__name__ == name, (name, type(result))
        print(f"{result!r}\n{result.summary(rows=5)}\n")


if __name__ == "__main__":
    main()
