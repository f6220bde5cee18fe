"""Knowledge neurons: integrated-gradients attribution of a fact to MLP neurons (Dai et al. 2022).

A neuron is one coordinate of ``mlp_post`` (``act(gate) * up`` in a gated MLP, the vector the
down-projection reads) at the last prompt position. Its score is the integrated gradient of the
target's probability from a zero baseline; neurons scoring above a share of the maximum in most
paraphrases of a fact are its knowledge neurons, which :func:`suppress_neurons` and
:func:`enhance_neurons` switch off or double. :func:`suppression_test` measures what that does to
the fact's answer (Dai et al. 2022, §4.2), beside two controls: as many random neurons of the same
layers, and the same neurons on facts of other relations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.data.facts import Fact
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import HookFn
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import BaseRun, Intervention, Readout, Row, SweepConfig, run_rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from transformer_lens.hook_points import HookPoint

__all__ = [
    "KnowledgeNeurons",
    "KnowledgeNeuronsConfig",
    "NeuronAttribution",
    "NeuronScore",
    "ScaledProbabilities",
    "ScalingEffect",
    "SuppressionTest",
    "activation_neurons",
    "answer_probability",
    "enhance_neurons",
    "integrated_gradients",
    "knowledge_neurons",
    "random_neurons_like",
    "refine_neurons",
    "scale_neurons",
    "scaled_probabilities",
    "scaling_effect",
    "suppress_neurons",
    "suppression_test",
    "top_activation_neurons",
]

Neuron = tuple[int, int]
"""A neuron as ``(layer, index)`` into ``mlp_post``."""


class NeuronScore(NamedTuple):
    """One neuron and its score, as :meth:`NeuronAttribution.top` lists them."""

    layer: int
    neuron: int
    score: float

    def __str__(self) -> str:
        return f"L{self.layer}.N{self.neuron} {self.score:+.4g}"


@config
class KnowledgeNeuronsConfig(Config):
    """Integrated gradients and the paraphrase refinement of Dai et al. 2022 (§3)."""

    steps: int = field(
        default=20,
        metadata={"paper": 20, "paper_source": "Dai et al. 2022, code: Hunter-DDM/knowledge-neurons src/1_analyze_mlm.py (20 points, a left Riemann sum; ours is the right sum)", "help": "Riemann steps m of integrated gradients (Dai et al.: 20)", "ge": 1},
    )
    layers: tuple[int, ...] | None = field(
        default=None, metadata={"help": "layers to attribute (default: all)"}
    )
    threshold: float = field(
        default=0.2,
        metadata={"paper": 0.2, "paper_source": "Dai et al. 2022, code: Hunter-DDM/knowledge-neurons src/2_get_kn.py threshold_ratio",
            "help": "refinement: keep neurons scoring above this share of the prompt's "
            "maximum (Dai et al.: 0.2)",
            "gt": 0,
            "le": 1,
        },
    )
    share: float = field(
        default=0.7,
        metadata={"paper": "0.7, then adapted per relation by ±0.05 (up to 6 times) toward 2–5 neurons per fact", "paper_source": "Dai et al. 2022, code: Hunter-DDM/knowledge-neurons src/2_get_kn.py mode_ratio_bag", "why": "a fixed share: docs/data/knowledge_neurons.json (table.neurons_per_fact); benchmarks/knowledge_neurons.py --table",
            "help": "refinement: keep neurons above the threshold in at least this share "
            "of the prompts (Dai et al.'s code: 0.7)",
            "gt": 0,
            "le": 1,
        },
    )
    # Dai et al.'s baseline neurons come from the same refinement on the activations, with a
    # higher threshold (their code's second loop over 'base' values).
    baseline_threshold: float = field(default=0.5, metadata={
        "paper": 0.5, "gt": 0, "le": 1, "cli": False,  # the CLI command refines no baseline
        "paper_source": "Dai et al. 2022, code: Hunter-DDM/knowledge-neurons src/2_get_kn.py "
        "(threshold_ratio of the second loop, on the activation values 'base')",
        "help": "activation baseline (activation_neurons): keep neurons activated above this "
        "share of the prompt's largest activation (Dai et al.'s code: 0.5)",
    })
    min_prompts: int = field(
        default=3, metadata={"paper": 3, "paper_source": "Dai et al. 2022, code: Hunter-DDM/knowledge-neurons src/2_get_kn.py (at least 3 prompts share a neuron)", "help": "refinement needs at least this many prompts", "ge": 2}
    )
    sweep: SweepConfig = field(default_factory=SweepConfig, metadata={"cli": False})

    def layer_list(self, n_layers: int) -> list[int]:
        """The attributed layers, checked against the model."""
        layers = list(range(n_layers)) if self.layers is None else list(self.layers)
        bad = [layer for layer in layers if not 0 <= layer < n_layers]
        if bad or not layers:
            raise UserInputError(
                f"layers {bad or layers} do not exist: the model has layers 0..{n_layers - 1}"
            )
        return sorted(set(layers))


@result_type
class NeuronAttribution(Result):
    """Integrated-gradients scores of every ``mlp_post`` neuron at the last prompt position.

    ``values[i, n]`` is neuron ``n`` of layer ``layers[i]``: ``a_n / m * sum_k dF/da_n`` at
    ``(k/m) a`` for ``k = 1..m`` (the right Riemann sum of Dai et al. eq. 2), the other layers
    and positions left at the clean run. The scores of one layer sum to ``value -
    baseline_values[i]`` up to the Riemann error (:meth:`completeness_gap`).

    Attributes:
        prompt / target: the fact. ``target_tokens``: the target's tokens.
        objective: ``"probability"`` of a one-token target, or ``"log-probability"``: the
            target's total log-probability, teacher-forced on its true tokens, attributed to the
            neurons at the last prompt position (later positions see the change through
            attention).
        layers: the attributed layers (rows of ``values``). position: the attributed position.
        steps: m. value: the objective on the clean run.
        baseline_values: ``[layer]`` the objective with that layer's neurons zeroed at the position.
        activations: ``[layer, neuron]`` the clean ``mlp_post`` (its sign says which way a
            neuron's value vector is written).
    """

    prompt: str
    target: str
    target_tokens: tuple[str, ...]
    objective: str
    layers: tuple[int, ...]
    position: int
    steps: int
    value: float
    baseline_values: Tensor
    activations: Tensor

    def completeness_gap(self) -> Float[Tensor, " layer"]:
        """Per layer, the sum of the scores minus the objective's change from the zero baseline."""
        return self.values.sum(-1) - (self.value - self.baseline_values)

    def top(self, k: int = 10) -> tuple[NeuronScore, ...]:
        """The ``k`` highest-scoring neurons, best first."""
        return _top(self.values, self.layers, k)

    def summary(self, rows: int = 10) -> str:
        gap = self.completeness_gap().abs().max()
        lines = [
            f"Integrated gradients ({self.steps} steps, zero baseline) on {self.meta.model}: "
            f"{self.objective} of {self.target!r} after {self.prompt!r} = {self.value:.4g}; "
            f"mlp_post at position {self.position}, {len(self.layers)} layers; largest "
            f"completeness gap {float(gap):.2g}",
        ]
        for item in self.top(rows):
            row = self.layers.index(item.layer)
            lines.append(
                f"  {item}   (activation {float(self.activations[row, item.neuron]):+.3g})"
            )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Knowledge-neuron attribution of {self.target!r} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        return _plot_scores(self.values, self.layers, self.top(20), title)


@result_type
class KnowledgeNeurons(Result):
    """A fact's knowledge neurons, refined across paraphrases (Dai et al. 2022, §3.2).

    ``values[i, n]`` is the share of prompts in which neuron ``n`` of layer ``layers[i]`` scored
    above ``threshold`` times that prompt's maximum score; ``neurons`` are those whose share is
    at least ``share``, ordered by mean score.

    Attributes:
        target / objective / steps: as in :class:`NeuronAttribution`.
        layers: the attributed layers. threshold / share: t and p of the refinement.
        neurons: the knowledge neurons as ``(layer, neuron)``.
        scores: ``[prompt, layer, neuron]`` each prompt's integrated-gradients scores.
    """

    target: str
    objective: str
    steps: int
    layers: tuple[int, ...]
    threshold: float
    share: float
    neurons: tuple[tuple[int, int], ...]
    scores: Tensor

    def top(self, k: int | None = None) -> tuple[NeuronScore, ...]:
        """The knowledge neurons with their mean score over the prompts, best first."""
        mean = self.scores.mean(0)
        chosen = [
            NeuronScore(layer, neuron, float(mean[self.layers.index(layer), neuron]))
            for layer, neuron in self.neurons
        ]
        return tuple(chosen[:k] if k is not None else chosen)

    def summary(self, rows: int = 10) -> str:
        lines = [
            f"{len(self.neurons)} knowledge neurons of {self.target!r} on {self.meta.model} "
            f"(above {self.threshold:g} x max in >= {self.share:.0%} of {self.scores.shape[0]} prompts, "
            f"IG of the {self.objective}, {self.steps} steps)",
        ]
        lines += [f"  {item}" for item in self.top(rows)]
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Knowledge neurons of {self.target!r} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        return _plot_scores(self.scores.mean(0), self.layers, self.top(20), title)


def _top(values: Tensor, layers: Sequence[int], k: int) -> tuple[NeuronScore, ...]:
    flat = values.flatten()
    best = flat.topk(min(k, flat.numel())).indices.tolist()
    width = values.shape[-1]
    return tuple(NeuronScore(layers[i // width], i % width, float(flat[i])) for i in best)


def _plot_scores(
    values: Tensor,
    layers: Sequence[int],
    top: Sequence[NeuronScore],
    title: str,
) -> Figure:
    """Two panels: the largest score per layer, and the top neurons as bars."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    left.bar(list(layers), values.max(-1).values.float().cpu().numpy(), color="tab:blue")
    left.set_xlabel("layer")
    left.set_ylabel("largest neuron score")
    names = [f"L{item.layer}.N{item.neuron}" for item in top][::-1]
    right.barh(names, [item.score for item in top][::-1], color="tab:orange")
    right.set_xlabel("score")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- attribution


class _Tokenised(NamedTuple):
    """A (prompt, answer) case of a fact, tokenised: the prompt plus all but the last target token.
    A :class:`~lmsci_mi.data.facts.Fact` gives a case per prompt (:func:`_cases`)."""

    tokens: Tensor
    position: int
    target_ids: list[int]

    @classmethod
    def of(cls, lm: LensModel, prompt: str, target: str) -> _Tokenised:
        if not prompt.strip():
            raise UserInputError(
                "empty prompt: give the text before the target, e.g. "
                "'The Eiffel Tower is located in the city of'"
            )
        if not target.strip():
            raise UserInputError("empty target: give the answer's text, e.g. ' Paris'")
        target_ids = lm.continuation_ids(target)
        if not target_ids:
            raise UserInputError(
                f"target {target!r} tokenises to nothing for {lm.name}: give visible text"
            )
        prompt_ids = lm.encode(prompt)
        tokens = torch.tensor([prompt_ids + target_ids[:-1]], dtype=torch.long, device=lm.device)
        return cls(tokens, len(prompt_ids) - 1, target_ids)


def _cases(fact: Fact) -> tuple[list[str], str]:
    """A fact's prompts (the rewrite prompt, then its paraphrases) and its true answer."""
    return [fact.rewrite_prompt, *fact.paraphrase_prompts], fact.target_true


def _objective(target_ids: Sequence[int]) -> Readout:
    """The readout: the target's probability (one token) or its total teacher-forced
    log-probability (several), ``[row, batch, (answer,) vocab] -> [row, batch]``."""
    if len(target_ids) == 1:
        return lambda logits: logits.float().softmax(-1)[..., target_ids[0]]
    ids = torch.tensor(target_ids)

    def log_prob(logits: Tensor) -> Tensor:
        picked = ids.to(logits.device).expand(*logits.shape[:-1])
        return logits.float().log_softmax(-1).gather(-1, picked[..., None])[..., 0].sum(-1)

    return log_prob


def _rows(
    base: BaseRun, names: Sequence[str], position: int, steps: int
) -> tuple[list[Row], list[Tensor]]:
    """Per layer: ``steps`` rows at ``(k/m) a`` (k = 1..m, each source a slice of one leaf that
    takes the gradient) and one row at the zero baseline (for completeness, no gradient)."""
    rows: list[Row] = []
    leaves: list[Tensor] = []
    n_pos = base.n_pos
    mask = torch.zeros(1, n_pos, 1, dtype=torch.bool, device=base.tokens.device)
    mask[:, position] = True
    alphas = torch.arange(1, steps + 1, dtype=torch.float32, device=base.tokens.device) / steps
    for name in names:
        act = base.acts[name][0, position]
        leaf = (alphas[:, None].to(act.dtype) * act).requires_grad_(True)
        leaves.append(leaf)
        rows += [Row((Intervention(name, leaf[k].reshape(1, 1, -1), mask),)) for k in range(steps)]
        rows.append(Row((Intervention(name, torch.zeros_like(act).reshape(1, 1, -1), mask),)))
    return rows, leaves


def integrated_gradients(
    lm: LensModel, prompt: str, target: str, config: KnowledgeNeuronsConfig | None = None
) -> NeuronAttribution:
    """Integrated-gradients score of every ``mlp_post`` neuron at the last prompt position.

    Reads the model only. The m steps of every layer run as rows of one sweep (layers batched
    as the token budget allows), each computing only the last prompt position (and the target's
    teacher-forced positions) from its layer on, against the prompt's cached keys and values;
    one backward pass gives every gradient.

    Args:
        lm: the model.
        prompt: the fact's prompt, e.g. ``"The Eiffel Tower is located in the city of"``.
        target: the answer, e.g. ``" Paris"``; with several tokens, their total log-probability
            (teacher-forced on the true tokens) is attributed instead of the probability.
        config: steps, layers and batching.

    Returns:
        A :class:`NeuronAttribution` ``[layer, neuron]``.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> res = integrated_gradients(lm, "The Eiffel Tower is in", " Paris")
    >>> tuple(res.values.shape), res.objective
    ((2, 256), 'probability')
    """
    cfg = config or KnowledgeNeuronsConfig()
    layers = cfg.layer_list(lm.cfg.n_layers)
    fact = _Tokenised.of(lm, prompt, target)
    names = [hook_name("mlp_post", layer) for layer in layers]
    n_answers = len(fact.target_ids)
    answers = (
        torch.arange(fact.position, fact.position + n_answers)[None]
        if n_answers > 1
        else fact.position
    )
    base = BaseRun.record(lm, fact.tokens, answer_positions=answers, capture=names)
    rows, leaves = _rows(base, names, fact.position, cfg.steps)
    out = run_rows(lm, base, rows, _objective(fact.target_ids), cfg.sweep, grad=True)
    values = out.values.reshape(len(layers), cfg.steps + 1)
    grads = torch.autograd.grad(values[:, :-1].sum(), leaves)
    acts = torch.stack([base.acts[name][0, fact.position] for name in names]).detach()
    scores = acts * torch.stack(grads).sum(1) / cfg.steps
    return NeuronAttribution(
        values=scores.float().cpu(),
        axes=("layer", "neuron"),
        labels=(tuple(f"L{layer}" for layer in layers), ()),
        meta=lm.meta([prompt], params=cfg.params()),
        prompt=prompt,
        target=target,
        target_tokens=tuple(lm.to_str_tokens(fact.target_ids)),
        objective="probability" if n_answers == 1 else "log-probability",
        layers=tuple(layers),
        position=fact.position,
        steps=cfg.steps,
        value=float(_objective(fact.target_ids)(base.logits[None])[0, 0]),
        baseline_values=values[:, -1].detach().float().cpu(),
        activations=acts.float().cpu(),
    )


# ----------------------------------------------------------------------------- refinement


def refine_neurons(
    attributions: Sequence[NeuronAttribution], config: KnowledgeNeuronsConfig | None = None
) -> KnowledgeNeurons:
    """The neurons that score above ``threshold`` x the prompt's maximum in at least ``share``
    of the prompts (Dai et al. 2022, §3.2), from one attribution per paraphrase of a fact.

    Args:
        attributions: :func:`integrated_gradients` of each prompt, same target and layers.
        config: ``threshold`` (t), ``share`` (p) and ``min_prompts``.

    Returns:
        A :class:`KnowledgeNeurons`.
    """
    cfg = config or KnowledgeNeuronsConfig()
    first = _checked(attributions, cfg)
    scores = torch.stack([a.values for a in attributions])
    return _refined(attributions, scores, cfg.threshold, cfg, first.objective)


def _checked(
    attributions: Sequence[NeuronAttribution], config: KnowledgeNeuronsConfig
) -> NeuronAttribution:
    """The first attribution, once all are checked to share a target and layers and to be enough."""
    if len(attributions) < config.min_prompts:
        raise UserInputError(
            f"refinement across paraphrases needs at least {config.min_prompts} prompts, got "
            f"{len(attributions)}: add paraphrases of the fact, or lower min_prompts (at least 2)"
        )
    first = attributions[0]
    if any(a.layers != first.layers or a.target != first.target for a in attributions):
        raise UserInputError(
            "attributions differ in target or layers: attribute every paraphrase "
            "of one fact with the same config"
        )
    return first


def _refined(
    attributions: Sequence[NeuronAttribution],
    scores: Tensor,
    threshold: float,
    cfg: KnowledgeNeuronsConfig,
    objective: str,
) -> KnowledgeNeurons:
    """Dai et al.'s refinement of ``scores [prompt, layer, neuron]``: per prompt, above
    ``threshold`` x that prompt's largest value; then in at least ``cfg.share`` of the prompts."""
    first = attributions[0]
    peak = scores.flatten(1).max(1).values.clamp_min(0)[:, None, None]
    # Only positive values can pass: a prompt whose every value is <= 0 contributes no neuron.
    passed = (scores > threshold * peak) & (scores > 0)
    shared = passed.float().mean(0)
    keep = (shared >= cfg.share - 1e-9).nonzero().tolist()
    mean = scores.mean(0)
    keep.sort(key=lambda cell: -float(mean[cell[0], cell[1]]))
    return KnowledgeNeurons(
        values=shared,
        axes=("layer", "neuron"),
        labels=(tuple(f"L{layer}" for layer in first.layers), ()),
        meta=dataclasses.replace(
            first.meta, prompts=tuple(a.prompt for a in attributions), params=cfg.params()
        ),
        target=first.target,
        objective=objective,
        steps=first.steps,
        layers=first.layers,
        threshold=threshold,
        share=cfg.share,
        neurons=tuple((first.layers[row], neuron) for row, neuron in keep),
        scores=scores,
    )


def activation_neurons(
    attributions: Sequence[NeuronAttribution], config: KnowledgeNeuronsConfig | None = None
) -> KnowledgeNeurons:
    """Dai et al. 2022's baseline neurons: their refinement run on the activations instead of
    the attribution scores (their code, ``src/2_get_kn.py``: ``threshold_ratio`` 0.5 on ``base``).

    Per prompt, the neurons activated above ``baseline_threshold`` x the prompt's largest
    ``mlp_post`` activation (over every attributed layer, at the attributed position); then
    those kept in at least ``share`` of the prompts. The activations come with each
    :class:`NeuronAttribution`, so this costs no model run. How many neurons it keeps is
    whatever the rule gives, as in their code: compare the count with the knowledge neurons'.

    Args:
        attributions: :func:`integrated_gradients` of each prompt of one fact.
        config: ``baseline_threshold``, ``share`` and ``min_prompts``.

    Returns:
        A :class:`KnowledgeNeurons` whose ``objective`` is ``"activation"`` and whose ``scores``
        are the activations ``[prompt, layer, neuron]``.
    """
    cfg = config or KnowledgeNeuronsConfig()
    _checked(attributions, cfg)
    acts = torch.stack([a.activations for a in attributions])
    return _refined(attributions, acts, cfg.baseline_threshold, cfg, "activation")


def top_activation_neurons(attributions: Sequence[NeuronAttribution], k: int) -> list[Neuron]:
    """The ``k`` neurons with the largest mean activation over the prompts (every attributed
    layer, the attributed position): Dai et al.'s activation criterion with the count matched
    to another set, so that a comparison does not rest on how many neurons each rule keeps.

    >>> import torch
    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> res = integrated_gradients(lm, "The Eiffel Tower is in", " Paris")
    >>> top = top_activation_neurons([res], 3)
    >>> len(top), float(res.activations[top[0][0]].max()) == float(res.activations.max())
    (3, True)
    """
    if k <= 0:
        return []
    first = attributions[0]
    mean = torch.stack([a.activations for a in attributions]).mean(0)
    return [(item.layer, item.neuron) for item in _top(mean, first.layers, k)]


def knowledge_neurons(
    lm: LensModel,
    prompts: Sequence[str] | Fact,
    target: str | None = None,
    config: KnowledgeNeuronsConfig | None = None,
) -> KnowledgeNeurons:
    """A fact's knowledge neurons: integrated gradients on each paraphrase, then refinement.

    Reads the model only.

    Args:
        lm: the model.
        prompts: paraphrases of one fact (at least ``config.min_prompts``), each followed by
            ``target``; or a :class:`~lmsci_mi.data.facts.Fact`, whose rewrite prompt and
            paraphrase prompts are the prompts and ``target_true`` the target.
        target: the answer, e.g. ``" Paris"`` (a fact's own by default).
        config: see :class:`KnowledgeNeuronsConfig`.

    Returns:
        A :class:`KnowledgeNeurons`.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> kn = knowledge_neurons(lm, ["The Eiffel Tower is in", "The Eiffel Tower stands in",
    ...                             "Where is the Eiffel Tower? In"], " Paris")
    >>> kn.scores.shape[0], all(0 <= layer < 2 for layer, _ in kn.neurons)
    (3, True)
    """
    cfg = config or KnowledgeNeuronsConfig()
    if isinstance(prompts, Fact):
        prompts, answer = _cases(prompts)
        target = target or answer
    if target is None:
        raise UserInputError("give the answer (target), e.g. ' Paris', or a Fact")
    if len(prompts) < cfg.min_prompts:
        raise UserInputError(
            f"refinement across paraphrases needs at least {cfg.min_prompts} prompts, got "
            f"{len(prompts)}: add paraphrases of the fact, or lower min_prompts (at least 2)"
        )
    return refine_neurons([integrated_gradients(lm, p, target, cfg) for p in prompts], cfg)


# ----------------------------------------------------------------------------- interventions


@contextmanager
def scale_neurons(
    lm: LensModel,
    neurons: Sequence[tuple[int, int]],
    factor: float,
    *,
    position: int | None = -1,
) -> Iterator[None]:
    """Multiply ``mlp_post`` neurons by ``factor`` while the block runs.

    Changes no weight; the hooks go through the registry and are removed on exit, normal or not.

    Args:
        lm: the model.
        neurons: ``(layer, neuron)`` pairs, e.g. ``KnowledgeNeurons.neurons``.
        factor: 0 suppresses, 2 enhances (Dai et al. 2022, §4.2).
        position: the position to scale: the last one by default (the prompt's last token when
            the model is run on the prompt; with a teacher-forced continuation, give the prompt's
            last position), or None for every position.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with scale_neurons(lm, [(0, 3), (1, 7)], 0.0):
    ...     len(lm.hooks.active())
    2
    >>> len(lm.hooks.active())
    0
    """
    by_layer = _check_neurons(lm, neurons)
    where = slice(None) if position is None else _single_position(position)

    def scaler(index: Tensor) -> HookFn:
        def scale(activation: Tensor, hook: HookPoint) -> Tensor:
            out = activation.clone()
            chosen = index.to(activation.device)
            out[:, where, chosen] = activation[:, where, chosen] * factor
            return out

        return scale

    hooks = [
        (hook_name("mlp_post", layer), scaler(torch.tensor(index)))
        for layer, index in sorted(by_layer.items())
    ]
    with lm.hooks.hooks(fwd=hooks, label=f"scale neurons x{factor:g}"):
        yield


def suppress_neurons(
    lm: LensModel, neurons: Sequence[tuple[int, int]], *, position: int | None = -1
) -> contextlib.AbstractContextManager[None]:
    """Zero the neurons' activations while the block runs (see :func:`scale_neurons`)."""
    return scale_neurons(lm, neurons, 0.0, position=position)


def enhance_neurons(
    lm: LensModel, neurons: Sequence[tuple[int, int]], *, position: int | None = -1
) -> contextlib.AbstractContextManager[None]:
    """Double the neurons' activations while the block runs (see :func:`scale_neurons`)."""
    return scale_neurons(lm, neurons, 2.0, position=position)


def _single_position(position: int) -> slice:
    """A one-position slice that keeps the position axis (``-1`` -> ``-1:``)."""
    return slice(position, None if position == -1 else position + 1)


def _check_neurons(lm: LensModel, neurons: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """Neuron indices by layer, checked against the model before any hook is attached."""
    n_layers, d_mlp = lm.cfg.n_layers, int(lm.cfg.d_mlp or 0)
    if not neurons:
        raise UserInputError(
            "no neurons given: pass (layer, neuron) pairs, e.g. KnowledgeNeurons.neurons"
        )
    by_layer: dict[int, list[int]] = {}
    for item in neurons:
        layer, neuron = (int(v) for v in item[:2])
        if not 0 <= layer < n_layers:
            raise UserInputError(
                f"neuron {tuple(item[:2])}: layer {layer} does not exist (layers 0..{n_layers - 1})"
            )
        if not 0 <= neuron < d_mlp:
            raise UserInputError(
                f"neuron {tuple(item[:2])}: index {neuron} does not exist (neurons 0..{d_mlp - 1})"
            )
        by_layer.setdefault(layer, []).append(neuron)
    return by_layer


# ----------------------------------------------------------------------------- the suppression test


@dataclass(frozen=True)
class ScalingEffect:
    """The mean relative change of p(answer), ``(p_scaled - p) / p`` averaged over prompts, when
    neurons are suppressed (x0) and enhanced (x2) at the last prompt position.

    Attributes:
        suppress: under :func:`suppress_neurons`. enhance: under :func:`enhance_neurons`.
        n_prompts: the prompts averaged over.
    """

    suppress: float
    enhance: float
    n_prompts: int

    def as_dict(self) -> dict[str, float]:
        """``{"suppress", "enhance"}``, the shape a data file keeps."""
        return {"suppress": self.suppress, "enhance": self.enhance}


@dataclass(frozen=True)
class ScaledProbabilities:
    """p(answer) on each prompt before and after scaling a set of neurons: the measurements both
    our metric (:meth:`effect`) and Dai et al.'s ratio of means
    (:func:`lmsci_mi.knowledge.effects.dai_change`) are computed from.

    Attributes:
        before: ``[prompt]`` p(answer) with no neuron scaled.
        suppress / enhance: ``[prompt]`` p(answer) with the neurons x0 / x2.
    """

    before: tuple[float, ...]
    suppress: tuple[float, ...]
    enhance: tuple[float, ...]

    def effect(self) -> ScalingEffect:
        """Our per-fact measure: the mean over prompts of ``(p_after - p_before) / p_before``."""
        changes = [
            statistics.fmean((a - b) / b for a, b in zip(after, self.before, strict=True))
            for after in (self.suppress, self.enhance)
        ]
        return ScalingEffect(changes[0], changes[1], len(self.before))

    def as_dict(self) -> dict[str, list[float]]:
        """``{"before", "suppress", "enhance"}``, the shape a data file keeps."""
        return {key: list(getattr(self, key)) for key in ("before", "suppress", "enhance")}


@dataclass(frozen=True)
class SuppressionTest:
    """Dai et al. 2022's suppress/enhance test of one fact's knowledge neurons, with controls.

    Attributes:
        neurons: the knowledge neurons scaled. control: as many random neurons, each from the
            layer of one knowledge neuron and none of them (:func:`random_neurons_like`).
        knowledge: the knowledge neurons on the fact's own prompts.
        random: the control neurons on the fact's own prompts.
        other_facts: the knowledge neurons on facts of other relations (a specific neuron leaves
            them alone).
    """

    neurons: tuple[Neuron, ...]
    control: tuple[Neuron, ...]
    knowledge: ScalingEffect
    random: ScalingEffect
    other_facts: ScalingEffect


@torch.no_grad()
def answer_probability(lm: LensModel, prompt: str, answer: str) -> float:
    """p(first token of ``answer``) after ``prompt``, under whatever hooks are active.

    Reads the model only. A one-token answer makes this the paper's measure.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> 0 < answer_probability(lm, "The Eiffel Tower is in", " Paris") < 1
    True
    """
    logits = lm(lm.to_tokens(prompt))[0, -1].float()
    return float(logits.softmax(-1)[lm.continuation_ids(answer)[0]])


def scaled_probabilities(
    lm: LensModel, neurons: Sequence[tuple[int, int]], cases: Sequence[tuple[str, str]]
) -> ScaledProbabilities:
    """p(answer) on each ``(prompt, answer)`` case before, and with ``neurons`` suppressed (x0)
    and enhanced (x2) at each prompt's last token; with no neurons, every p is the clean one.

    Reads the model only: the neurons are scaled by hooks that are removed on exit.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> probs = scaled_probabilities(lm, [(1, 3)], [("The Eiffel Tower is in", " Paris")])
    >>> len(probs.before), probs.suppress != probs.before
    (1, True)
    """
    base = tuple(answer_probability(lm, prompt, answer) for prompt, answer in cases)
    if not neurons:
        return ScaledProbabilities(base, base, base)
    after = {}
    for kind, scaled in (("suppress", suppress_neurons), ("enhance", enhance_neurons)):
        with scaled(lm, neurons):
            after[kind] = tuple(answer_probability(lm, prompt, answer) for prompt, answer in cases)
    return ScaledProbabilities(base, after["suppress"], after["enhance"])


def scaling_effect(
    lm: LensModel, neurons: Sequence[tuple[int, int]], cases: Sequence[tuple[str, str]]
) -> ScalingEffect:
    """How suppressing and enhancing ``neurons`` changes p(answer) over ``(prompt, answer)``
    cases: the mean relative change under each (0 for both when there are no neurons), i.e.
    ``scaled_probabilities(...).effect()``.

    Reads the model only: the neurons are scaled by hooks that are removed on exit.

    Args:
        lm: the model.
        neurons: ``(layer, neuron)`` pairs, e.g. ``KnowledgeNeurons.neurons``.
        cases: ``(prompt, answer)`` pairs; the neurons are scaled at each prompt's last token.

    Returns:
        A :class:`ScalingEffect`.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> effect = scaling_effect(lm, [(1, 3), (1, 7)], [("The Eiffel Tower is in", " Paris")])
    >>> effect.n_prompts, effect.suppress != 0
    (1, True)
    """
    return scaled_probabilities(lm, neurons, cases).effect()


def random_neurons_like(
    neurons: Sequence[tuple[int, int]], d_mlp: int, *, seed: int
) -> list[Neuron]:
    """As many random neurons as ``neurons``, each from the layer of one of them, none of them
    and no two alike: the control that separates a neuron's role from its layer's.

    Raises:
        ValueError: a layer with too few other neurons to draw from.

    >>> random_neurons_like([(3, 10), (3, 11), (5, 0)], 1536, seed=0)
    [(3, 788), (3, 861), (5, 82)]
    """
    rng = random.Random(seed)
    taken = {(int(layer), int(neuron)) for layer, neuron in neurons}
    per_layer = Counter(int(layer) for layer, _ in neurons)
    crowded = sorted(layer for layer, n in per_layer.items() if 2 * n > d_mlp)
    if crowded:
        raise UserInputError(f"layers {crowded} have too few other neurons for a control of {d_mlp} a layer")
    picked: list[Neuron] = []
    for layer, _ in neurons:
        while (cell := (int(layer), rng.randrange(d_mlp))) in taken:
            pass
        taken.add(cell)
        picked.append(cell)
    return picked


def suppression_test(
    lm: LensModel,
    neurons: Sequence[tuple[int, int]],
    cases: Sequence[tuple[str, str]],
    other_cases: Sequence[tuple[str, str]],
    *,
    seed: int = 0,
) -> SuppressionTest:
    """Dai et al. 2022's test of a fact's knowledge neurons (§4.2), with two controls.

    Suppressing (x0) and enhancing (x2) the neurons should lower and raise p(answer) on the
    fact's own prompts, more than as many random neurons of the same layers do, and leave
    facts of other relations about where they were. Reads the model only.

    Args:
        lm: the model.
        neurons: the fact's knowledge neurons (``knowledge_neurons(...).neurons``).
        cases: ``(prompt, answer)`` of the fact: the prompts the neurons were refined on.
        other_cases: ``(prompt, answer)`` of facts of other relations.
        seed: the draw of the random control neurons.

    Returns:
        A :class:`SuppressionTest`.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> test = suppression_test(lm, [(1, 3)], [("The Eiffel Tower is in", " Paris")],
    ...                         [("The capital of Germany is", " Berlin")])
    >>> test.control[0][0], test.control != test.neurons
    (1, True)
    """
    chosen = [(int(layer), int(neuron)) for layer, neuron in neurons]
    control = random_neurons_like(chosen, int(lm.cfg.d_mlp or 0), seed=seed)
    return SuppressionTest(
        neurons=tuple(chosen),
        control=tuple(control),
        knowledge=scaling_effect(lm, chosen, cases),
        random=scaling_effect(lm, control, cases),
        other_facts=scaling_effect(lm, chosen, other_cases),
    )
