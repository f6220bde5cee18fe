"""Pinned real-model values: each deterministic figure an integration test checks on SmolLM2, at
the test's exact small setting, compared with tests/data/pins.json at a tolerance measured from
the thread count's effect on CPU (looser on CUDA, where TF32 applies).

One function per pinned setting (``MEASURES``) runs it and returns the values to pin and the
result the test also asserts on; benchmarks/pins.py runs the same functions at 1 and 2 threads
and writes the file, so the test and the pin cannot drift apart. Regenerate after an intended
change with ``python benchmarks/pins.py`` and give the reason in the commit message."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmsci_mi import LensModel

PINS_FILE = Path(__file__).parent / "data" / "pins.json"
Value = float | list[float]

THREAD_FACTOR = 5.0
"""The CPU tolerance is this many times the largest difference seen between 1 and 2 threads..."""
REL_FLOOR = 1e-4
"""... and at least this share of the value: another CPU's kernels sum in another order too."""
ABS_FLOOR = 1e-5
"""... and at least this much. Measured: the pins were computed on an AMD EPYC; on an Intel Xeon
(2026-11-29) ``knowledge_neurons.0.random``, a change of p(answer) near 0 (a difference of two close
probabilities, whose list has no large element for REL_FLOOR to scale), came out 1.4e-6 away, over
the earlier floor of 1e-6. ``check_pins`` applies this floor to tolerances stored before it."""
PLATFORM_TOLERANCE: dict[str, float] = {"steering.sentiment": 5e-3, "steering.perplexity_ratio": 0.1}
"""Pins that another CPU moves past the rule above, with their CPU tolerance. Measured: on an Intel
Xeon (2026-11-29) against the AMD EPYC that wrote pins.json, the steering pin's values at +0.5
(sampled continuations, seeded: another CPU's last bits can change a sampled token) moved by 1.7e-3
(sentiment) and 3.0e-2 (perplexity ratio), those at -0.5 and 0 not past the rule; each tolerance is
about three times that. Every other pin of the file held on that machine (with ABS_FLOOR)."""
CUDA_REL = 2e-2
"""On CUDA the tolerance is at least this share of the value (a list's largest |value|): TF32
matmuls keep a 10-bit mantissa, about 1e-3 relative per matmul, and 30 layers add up. A factor
chosen, not measured: this project's machine has no GPU; a CUDA run that fails by a little says
to measure it."""


@dataclass(frozen=True)
class Measured:
    """What a pinned setting gives: the values to pin, and whatever the test asserts on besides."""

    values: dict[str, Value]
    result: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


MEASURES: dict[str, Callable[..., Measured]] = {}
TESTS: dict[str, str] = {}
"""The test that reads each pin (named in the data file)."""


def pinned(name: str, test: str) -> Callable[[Callable[..., Measured]], Callable[..., Measured]]:
    def register(fn: Callable[..., Measured]) -> Callable[..., Measured]:
        if name in MEASURES:
            raise ValueError(f"pin {name!r} registered twice")
        MEASURES[name], TESTS[name] = fn, test
        return fn

    return register


def measure(name: str, lm: LensModel, **inputs: Any) -> Measured:
    """Run the pinned setting ``name`` from torch seed 0 (what the suite's autouse fixture sets),
    so a value does not depend on which test ran before it."""
    torch.manual_seed(0)
    return MEASURES[name](lm, **inputs)


def tolerance(value: Value, thread_diff: Value) -> float:
    """The CPU tolerance of one pinned value (absolute; a list's is over its elements)."""
    values = value if isinstance(value, list) else [value]
    diffs = thread_diff if isinstance(thread_diff, list) else [thread_diff] * len(values)
    return max(THREAD_FACTOR * max(diffs), REL_FLOOR * max(abs(v) for v in values), ABS_FLOOR)


def load_pins(path: Path = PINS_FILE) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))["pins"]


def check_pins(name: str, measured: Measured | Mapping[str, Value], device: object = "cpu") -> None:
    """Assert each value of ``measured`` equals its pin within the pin's tolerance (on CUDA, at
    least ``CUDA_REL`` of the value, of a list's largest |value|)."""
    pin = load_pins()[name]
    values = measured.values if isinstance(measured, Measured) else measured
    assert set(values) == set(pin["values"]), f"{name}: pinned {sorted(pin['values'])}, got {sorted(values)}"
    for key, value in values.items():
        expected, tol = pin["values"][key], pin["tolerance"][key]
        got = value if isinstance(value, list) else [value]
        want = expected if isinstance(expected, list) else [expected]
        assert len(got) == len(want), f"{name}.{key}: {len(got)} values, pinned {len(want)}"
        scale = max(abs(w) for w in want)
        tol = max(tol, ABS_FLOOR, PLATFORM_TOLERANCE.get(f"{name}.{key}", 0.0))  # ABS_FLOOR: files before it
        allowed = max(tol, CUDA_REL * scale) if str(device).startswith("cuda") else tol
        for g, w in zip(got, want, strict=True):
            assert math.isclose(g, w, rel_tol=0, abs_tol=allowed), (
                f"pin {name}.{key}: {g!r} vs pinned {w!r} (tolerance {allowed:.3g}; "
                f"{PINS_FILE.name}, regenerate with benchmarks/pins.py only for an intended change)"
            )


# --- existing integration tests' settings -----------------------------------------------------

EIFFEL = "The Eiffel Tower is located in the city of"
IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


@pinned("core", "test_core_smollm2.py::test_core_figures_match_their_pins")
@torch.no_grad()
def core(lm: LensModel) -> Measured:
    p_paris = lm(lm.to_tokens(EIFFEL))[0, -1].softmax(-1)[lm.token_id(" Paris")]
    logits = lm(lm.to_tokens(IOI_CLEAN))[0, -1]
    diff = logits[lm.token_id(" Mary")] - logits[lm.token_id(" John")]
    return Measured({"p_paris": float(p_paris), "ioi_logit_diff": float(diff)})


@pinned("ioi_prompts", "test_ioi_smollm2.py::test_logit_difference_positive_on_generated_prompts")
@torch.no_grad()
def ioi_prompts(lm: LensModel) -> Measured:
    from lmsci_mi.circuits.ioi import ioi_logit_diff
    from lmsci_mi.data.ioi import ioi_dataset

    data = ioi_dataset(lm, n_prompts=36, seed=0)
    diffs = torch.cat([ioi_logit_diff(lm(b.tokens), b) for b in data.batches])
    return Measured({"mean": float(diffs.mean()), "min": float(diffs.min())}, diffs)


@pinned("ioi_circuit", "test_ioi_smollm2.py::test_circuit_name_movers_carry_the_logit_difference")
def ioi_circuit(lm: LensModel) -> Measured:
    from lmsci_mi.circuits.ioi import IOIConfig, find_ioi_circuit
    from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset

    data = ioi_dataset(lm, n_prompts=8, seed=0, templates=IOI_TEMPLATES[:1])
    circuit = find_ioi_circuit(lm, data, IOIConfig(n_sender_candidates=3))
    return Measured({"logit_diff": circuit.logit_diff, "name_mover_removed": circuit.name_mover_removed,
                     "faithfulness": circuit.faithfulness}, circuit)


@pinned("attribution", "test_circuits_smollm2.py::test_attribution_ranks_heads_like_exact_patching")
def attribution(lm: LensModel) -> Measured:
    from lmsci_mi.circuits import AttributionConfig, LogitDiff, attribution_patch

    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    res = attribution_patch(lm, IOI_CLEAN, IOI_CORRUPTED, metric, AttributionConfig(compare_exact=True))
    return Measured({"rank_correlation": float(res.rank_correlation or math.nan)}, res)


@pinned("eiffel_trace", "test_circuits_smollm2.py::test_eiffel_trace_is_sensible")
def eiffel_trace(lm: LensModel) -> Measured:
    from lmsci_mi.circuits import TraceConfig, causal_trace

    trace = causal_trace(lm, EIFFEL, "Eiffel Tower", TraceConfig(target=" Paris", n_samples=4, kinds=("resid",)))
    resid = trace.kind_values("resid")
    return Measured({"clean_prob": trace.clean_prob, "corrupted_prob": trace.corrupted_prob,
                     "resid_last_token": resid[:, -1].tolist()}, trace)


# Two layers near the measured peaks, in float32: bfloat16 autocast is emulated on this CPU, and
# on one thread (the suite's two workers) it took 333 s for the country probe against 53 s.
def _probe(lm: LensModel, task: str, layers: tuple[int, ...], n_examples: int | None) -> Measured:
    from lmsci_mi.probes import ProbeSweepConfig, ProbeTaskConfig, probe_task

    config = ProbeSweepConfig(layers=layers, bootstrap=100)
    task_config = ProbeTaskConfig() if n_examples is None else ProbeTaskConfig(n_examples=n_examples)
    peak = probe_task(lm, task, config, task_config).peak()
    return Measured({"score": peak.score, "selectivity": peak.selectivity, "baseline": peak.baseline}, peak)


@pinned("probe_country", "test_probes_smollm2.py::test_country_is_linearly_readable_at_the_city")
def probe_country(lm: LensModel) -> Measured:
    return _probe(lm, "country", (13, 25), None)


@pinned("probe_subject_number", "test_probes_smollm2.py::test_subject_number_survives_the_attractor")
def probe_subject_number(lm: LensModel) -> Measured:
    # Layer 28 is the documented peak; it costs one more hook of the same forward passes.
    return _probe(lm, "subject_number", (13, 25, 28), 800)


@pinned("steering", "test_steering_smollm2.py::test_the_shipped_steer_controls_sentiment_at_half_a_unit")
def steering(lm: LensModel, steer: Any = None) -> Measured:
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering import SteerEvalConfig, evaluate_steer, train_steer

    if steer is None:  # the shipped steer: train_steer restores it (the test's fixture does too)
        steer, _ = train_steer(lm, steering_texts("sentiment"))
    config = SteerEvalConfig(values=(-0.5, 0.0, 0.5), n_prompts=24, progress=False)  # seed 0
    curve = evaluate_steer(lm, steer, config)
    unsteered = curve.unsteered[2]
    return Measured({"sentiment": curve.metric("sentiment").tolist(),
                     "perplexity_ratio": [p / unsteered for p in curve.metric("perplexity").tolist()]}, curve)


@pinned("memit", "test_editing_smollm2.py::test_memit_small_batch")
def memit(lm: LensModel) -> Measured:
    from lmsci_mi.editing import (
        EvaluationConfig,
        MEMITConfig,
        default_memit_layers,
        evaluate_edits,
        key_statistics,
        load_facts,
    )

    layers = default_memit_layers(lm)
    facts = load_facts()[::20][:4]  # Paris, Tokyo, Calgary, the Colosseum
    ev = evaluate_edits(
        lm, facts, MEMITConfig(layers=layers, steps=15), stats=key_statistics(lm, layers),
        evaluation=EvaluationConfig(generation_tokens=0),  # GE is not pinned here: it costs most
        use_cache=False,
    )
    return Measured({k: float(ev.metric(k)) for k in ("ES", "PS", "NS", "EM", "PM", "NM")}, ev,
                    {"layers": layers})


EIFFEL_EDIT = ("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris",
               ("The Eiffel Tower can be found in the city of",), ("The Louvre is located in the city of",))
"""The Eiffel Tower → Rome request of test_editing_smollm2.py (``EditRequest(*EIFFEL_EDIT)``)."""


@pinned("rome", "test_editing_smollm2.py::test_rome_flips_eiffel_to_rome_and_restores")
def rome(lm: LensModel) -> Measured:
    """One ROME edit at the defaults (the paper's fit, layer 4): p(Rome) and p(Paris) on the
    rewrite, paraphrase and neighbour prompts while the edit is on, and the fit's steps and final
    NLL; ``result`` is the edited model's 5-token continuation. The edit is undone on return."""
    from lmsci_mi.editing import (
        EditRequest,
        ROMEConfig,
        default_rome_layer,
        key_statistics,
        rome_edit,
        target_nll,
    )

    request = EditRequest(*EIFFEL_EDIT)
    layer = default_rome_layer(lm)
    prompts = {"rewrite": request.rewrite_prompt, "paraphrase": request.paraphrase_prompts[0],
               "neighbour": request.neighborhood_prompts[0]}
    with rome_edit(lm, request, ROMEConfig(layer=layer), stats=key_statistics(lm, layer)) as handle:
        nll = target_nll(lm, [p for p in prompts.values() for _ in (0, 1)], [" Rome", " Paris"] * len(prompts))
        generated = lm.generate(request.rewrite_prompt, 5)
    p = (-nll).exp().tolist()
    values = {f"p_{target}_{name}": p[2 * i + j] for i, name in enumerate(prompts)
              for j, target in enumerate(("new", "true"))}
    values |= {"fit_steps": float(handle.details["fit_steps"]), "fit_nll": handle.details["fit_nll"]}
    return Measured(values, generated, {"layer": layer})


@pinned("alphaedit", "test_editing_smollm2.py::test_alphaedit_small_batch")
def alphaedit(lm: LensModel) -> Measured:
    """AlphaEdit at its defaults on MEMIT's pinned batch (the same 4 facts, 15 fit steps, no GE)."""
    from lmsci_mi.editing import (
        AlphaEditConfig,
        EvaluationConfig,
        default_memit_layers,
        evaluate_edits,
        key_statistics,
        load_facts,
    )

    layers = default_memit_layers(lm)
    ev = evaluate_edits(
        lm, load_facts()[::20][:4], AlphaEditConfig(layers=layers, steps=15),
        stats=key_statistics(lm, layers), evaluation=EvaluationConfig(generation_tokens=0), use_cache=False,
    )
    return Measured({k: float(ev.metric(k)) for k in ("ES", "PS", "NS", "EM", "PM", "NM")}, ev,
                    {"layers": layers})


def _mean_kl(kl: torch.Tensor) -> torch.Tensor:
    """Per layer, KL averaged over real tokens (sink and padding left out)."""
    per_layer = kl[:, :, 1:].permute(1, 0, 2).reshape(kl.shape[1], -1)
    return per_layer[:, ~per_layer[0].isnan()].mean(1)


@pinned("tuned_lens", "test_lenses_smollm2.py::test_kl_trained_tuned_lens_beats_logit_lens_on_held_out_text")
def tuned_lens_kl(lm: LensModel) -> Measured:
    from lmsci_mi.lenses import (
        LogitLensConfig,
        TunedLensConfig,
        logit_lens,
        train_tuned_lens,
        tuned_lens,
    )
    from lmsci_mi.lenses.tuned_lens import heldout_documents

    # A small pool: the default's 2^17 tokens take ~9 s to cut, more than these 8 steps need.
    # The paper's start (the identity) at the rate the pin was taken with: the loop itself is
    # pinned, not the least-squares fit or the default rate (0.1 since the start moved).
    lens = train_tuned_lens(lm, TunedLensConfig(init="identity", lr=0.5, steps=8, tokens_per_step=64,
                                                seq_len=32, pool_tokens=4096))
    read = LogitLensConfig(site="resid_pre")  # every layer: the same forward pass
    texts = [doc[:200] for doc in itertools.islice(heldout_documents(), 3)]
    logit = _mean_kl(logit_lens(lm, texts, config=read).kl)
    tuned = _mean_kl(tuned_lens(lm, texts, lens=lens, config=read).kl)
    return Measured({"losses": list(lens.losses), "tuned_kl": tuned.tolist(), "logit_kl": logit.tolist()},
                    lens, {"tuned": tuned, "logit": logit})


# --- the headline claims (tests/integration/test_headlines_smollm2.py) ------------------------------


@pinned("aie", "test_headlines_smollm2.py::test_aie_of_the_mlp_at_window_1")
def aie(lm: LensModel) -> Measured:
    """benchmarks/aie.py's smollm2-str piece at one kind (mlp), window 1, on its first 2 facts."""
    from lmsci_mi.circuits.aie import AIEConfig, average_indirect_effect
    from lmsci_mi.circuits.tracing import TraceConfig

    trace = TraceConfig(corruption="str", n_samples=1, kinds=("mlp",), window=1)
    result = average_indirect_effect(lm, "facts", AIEConfig(n_facts=2, cache=False, trace=trace))
    return Measured({"clean_mean": result.clean_mean, "corrupted_mean": result.corrupted_mean,
                     "last_subject": result.curve("mlp", "last subject").tolist(),
                     "last_token": result.curve("mlp", "last token").tolist()}, result)


@pinned("eap_ig", "test_headlines_smollm2.py::test_eap_ig_circuit_at_5_percent_is_faithful")
def eap_ig(lm: LensModel) -> Measured:
    """benchmarks/edges.py's (c) on 4 of its 32 IOI pairs: EAP-IG (m = 5), the greedy circuit at
    5 % of the edges (and 1 %, the curve needs two budgets)."""
    from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
    from lmsci_mi.circuits.edges.faithfulness import CurveConfig, faithfulness_curve
    from lmsci_mi.data.ioi import ioi_str_pairs

    pairs = ioi_str_pairs(lm, 4, seed=0)
    scores = edge_attribution(lm, pairs, config=EAPConfig(method="EAP-IG", steps=5))
    curve = faithfulness_curve(lm, scores.graph, scores, pairs, config=CurveConfig(fractions=(1.0, 5.0)))
    return Measured({"faithfulness": curve.values.tolist(), "clean": curve.clean_value,
                     "corrupted": curve.corrupted_value}, curve)


@pinned("knowledge_neurons", "test_headlines_smollm2.py::test_knowledge_neurons_suppress_their_fact")
def knowledge_neurons_suppression(lm: LensModel) -> Measured:
    """benchmarks/knowledge_neurons.py's (b) on its first 2 facts (one-token answers): the
    knowledge neurons refined over each fact's 4 prompts, suppressed and enhanced, beside as many
    random neurons of the same layers and 2 facts of other relations."""
    from lmsci_mi.data import load_facts
    from lmsci_mi.knowledge import KnowledgeNeuronsConfig, knowledge_neurons, suppression_test

    # Smaller than the benchmark's (m = 20, all 30 layers): a twentieth of the cost; the last
    # layers hold most of the neurons its table found on SmolLM2 (besides layer 0).
    cfg = KnowledgeNeuronsConfig(steps=5, layers=tuple(range(24, 30)))
    facts = [f for f in load_facts("facts") if len(lm.continuation_ids(f.target_true)) == 1]
    values: dict[str, Value] = {}
    tests = []
    for index in (0, 1):
        fact = facts[index]
        cases = [(p, fact.target_true) for p in (fact.rewrite_prompt, *fact.paraphrase_prompts)]
        others = [(f.rewrite_prompt, f.target_true) for f in facts if f.relation != fact.relation][:2]
        found = knowledge_neurons(lm, fact, config=cfg)
        test = suppression_test(lm, found.neurons, cases, others, seed=index)
        tests.append(test)
        for group in ("knowledge", "random", "other_facts"):
            effect = getattr(test, group)
            values[f"{index}.{group}"] = [effect.suppress, effect.enhance]
    return Measured(values, tests)


@pinned("concepts", "test_headlines_smollm2.py::test_held_out_concept_pairs_project_on_their_direction")
def concepts(lm: LensModel) -> Measured:
    """benchmarks/concepts.py's held-out projections (Park et al. Fig. 2) on every usable concept,
    at its defaults (the check reads the unembedding only: no forward pass)."""
    from lmsci_mi.data.concepts import load_concept_pairs
    from lmsci_mi.representations import ConceptConfig, concept_projections, single_token_pairs

    config = ConceptConfig(min_pairs=3, seed=0)
    shipped = load_concept_pairs()
    usable = {n: p for n, p in shipped.items() if len(single_token_pairs(lm, p, drop=True)) >= 3}
    projections = concept_projections(lm, usable, config)
    return Measured({name: projections.statistic(name).tolist()
                     for name in ("heldout_mean", "random_mean", "effect_size", "above_random_p95")},
                    projections)


@pinned("reading", "test_headlines_smollm2.py::test_reading_vector_reads_sentiment")
def reading(lm: LensModel) -> Measured:
    """benchmarks/reading.py's sentiment contrast on its first 40 pairs (20 fit, 10 dev, 10 test)
    at 3 layers, one early (low accuracy there) and the documented chosen layer 21."""
    from lmsci_mi.data.contrasts import contrast_pairs
    from lmsci_mi.representations import ReadingConfig, representation_reading

    result = representation_reading(lm, contrast_pairs("sentiment", n_pairs=40),
                                    config=ReadingConfig(layers=(2, 12, 21)))
    return Measured({"test_pairwise": result.accuracy("pca", "test").tolist(),
                     "test_unpaired": result.accuracy("pca", "test", "unpaired").tolist(),
                     "random_test_pairwise": result.accuracy("random", "test").tolist(),
                     "explained_by_pc1": result.explained.tolist()}, result)
