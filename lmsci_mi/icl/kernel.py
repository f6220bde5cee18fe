"""Kernel-regression heads: which attention heads do in-context learning as kernel regression,
after Han, Wang, Zhao & Ji, "Explaining Emergent In-Context Learning as Kernel Regression"
(arXiv:2305.12766, §5), and the tutorial's drawing of it (Han & Ji, AAAI-25).

From the test (final) position, each head weighs every demonstration; the label whose summed weight
is largest is the head's kernel-regression prediction ŷ = argmax Σ_i e(y_i) K_i. The paper's weight
K_i is the largest attention inside the demonstration's span [x_i, y_i] (§5.2); the tutorial's is
the attention on the label token y_i. Per head: accuracy against gold and agreement with the
model's own ICL answer; next to them the model's ICL accuracy, a kernel regression on an offline
similarity (the baseline), the attention-on-labels map (§5.1) and Pearson r between a
demonstration's attention (logit) and the predicted similarity P(o|x_test)ᵀP(o|x_i) (§5.3).
Heads are chosen on dev and reported on held-out (§5.5): :func:`choose_kr_heads`, :func:`kr_table`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config, paper, validate_choice
from lmsci_mi.errors import UserInputError
from lmsci_mi.icl.prompts import ICLPrompt, ICLPromptSet
from lmsci_mi.model import LensModel
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.results import Meta, Result, result_type
from lmsci_mi.sites import Head, hook_name, layer_hooks
from lmsci_mi.stats import Interval, wilson_interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "KR_SIMILARITIES",
    "KR_WEIGHTINGS",
    "KRHeadChoice",
    "KernelRegressionConfig",
    "KernelRegressionHeads",
    "KernelRegressionTable",
    "bag_of_words_similarity",
    "char_ngram_similarity",
    "choose_kr_heads",
    "kernel_regression_heads",
    "kr_predictions",
    "kr_table",
    "label_weights",
    "pearson_r",
    "prediction_similarity",
    "span_max_weights",
]

WeightFn = Callable[[Float[Tensor, "batch layer head key"], Sequence[ICLPrompt]], Float[Tensor, "batch layer head demo"]]
SimilarityFn = Callable[[LensModel, Sequence[str], "KernelRegressionConfig"], Float[Tensor, "item item"]]

KR_WEIGHTINGS: MethodRegistry[WeightFn] = MethodRegistry("kernel-regression weighting")
"""How a head's attention from the test position weighs demonstration i: ``"span_max"`` (the
paper's) and ``"label"`` (the tutorial's). Each is ``fn(rows, prompts) -> [batch, layer, head, demo]``."""
KR_SIMILARITIES: MethodRegistry[SimilarityFn] = MethodRegistry("kernel-regression similarity")
"""Similarities K(x, x') between item inputs, ``fn(lm, texts, config) -> [item, item]``: the
baseline kernel regression's (``"char_ngram"``, ``"bag_of_words"``) and the paper's predicted
similarity (``"prediction"``, Eq. 9), which the Pearson analysis always uses."""

SelectBy = Literal["agreement", "accuracy"]
MEASURES = ("accuracy", "agreement")
"""The per-head measures of ``KernelRegressionHeads.values``: against gold, and against the model."""


@config
class KernelRegressionConfig(Config):
    """Settings of :func:`kernel_regression_heads`. The prompts (demonstrations, label words,
    format, split) are the :class:`~lmsci_mi.icl.ICLPromptSet`'s own."""

    weightings: tuple[str, ...] = field(
        default=("span_max", "label"),
        metadata={"help": "demonstration weightings: 'span_max' (the paper's), 'label' (the tutorial's)",
                  "min_length": 1},
    )
    similarity: str = field(
        default="char_ngram",
        metadata={"help": "the baseline kernel regression's similarity (char_ngram, bag_of_words, prediction)",
                  **paper("sentence embeddings (all-MiniLM-L6-v2, bert-base-nli-mean-tokens)",
                          "tutorial's KR table (reference/tutorial_tables.md)",
                          why="no sentence-embedding model offline; the rows are not comparable")},
    )
    pearson: bool = field(
        default=True,
        metadata={"help": "Pearson r of attention (logit) vs predicted similarity (one standalone run per item)"},
    )
    layers: tuple[int, ...] | None = field(
        default=None, metadata={"help": "layers whose heads are read (default: all)", "ge": 0}
    )
    ngram: int = field(default=3, metadata={"help": "character n-gram length of 'char_ngram'", "ge": 1})
    batch_size: int = field(
        default=8, metadata={"help": "prompts per forward pass", "ge": 1}
    )

    def validate(self) -> None:
        for name in self.weightings:
            KR_WEIGHTINGS.get(name)
        KR_SIMILARITIES.get(self.similarity)
        if len(set(self.weightings)) != len(self.weightings):
            raise UserInputError(f"weightings lists a weighting twice: {list(self.weightings)}")


# ---------------------------------------------------------------------- weightings


@KR_WEIGHTINGS.register("span_max", KernelRegressionConfig, "largest attention inside [x_i, y_i] (Han et al. §5.2)")
def span_max_weights(rows: Float[Tensor, "batch layer head key"], prompts: Sequence[ICLPrompt]) -> Float[Tensor, "batch layer head demo"]:
    """Demonstration i's weight: the largest of ``rows`` over its span ``[x_i, y_i]`` (from its
    first token through its label), the paper's a_i. Works on attention logits as well.

    >>> from lmsci_mi.icl.prompts import Demonstration
    >>> demo = Demonstration(0, "a", "a", range(1, 4), range(1, 3), range(3, 4), range(4, 5))
    >>> prompt = ICLPrompt("", (0,) * 6, 0, (demo,), range(5, 6), "a", "a", 0)
    >>> span_max_weights(torch.tensor([[[[0.1, 0.2, 0.5, 0.1, 0.05, 0.05]]]]), [prompt]).flatten().tolist()
    [0.5]
    """
    n_demos = len(prompts[0].demonstrations)
    keys = torch.arange(rows.shape[-1], device=rows.device)
    out = []
    for d in range(n_demos):
        start = torch.tensor([p.demonstrations[d].span.start for p in prompts], device=rows.device)
        stop = torch.tensor([p.demonstrations[d].span.stop for p in prompts], device=rows.device)
        inside = (keys[None] >= start[:, None]) & (keys[None] < stop[:, None])  # [batch, key]
        out.append(rows.masked_fill(~inside[:, None, None, :], -math.inf).amax(-1))
    return torch.stack(out, dim=-1)


@KR_WEIGHTINGS.register("label", KernelRegressionConfig, "attention on the label token y_i (the tutorial's)")
def label_weights(rows: Float[Tensor, "batch layer head key"], prompts: Sequence[ICLPrompt]) -> Float[Tensor, "batch layer head demo"]:
    """Demonstration i's weight: ``rows`` at its label token (the tutorial's attention on y_i).

    >>> from lmsci_mi.icl.prompts import Demonstration
    >>> demo = Demonstration(0, "a", "a", range(1, 4), range(1, 3), range(3, 4), range(4, 5))
    >>> prompt = ICLPrompt("", (0,) * 6, 0, (demo,), range(5, 6), "a", "a", 0)
    >>> label_weights(torch.tensor([[[[0.1, 0.2, 0.5, 0.4, 0.05, 0.05]]]]), [prompt]).flatten().tolist()
    [0.4000000059604645]
    """
    index = torch.tensor([p.label_positions for p in prompts], device=rows.device)  # [batch, demo]
    return rows.gather(-1, index[:, None, None, :].expand(*rows.shape[:3], index.shape[1]))


def kr_predictions(
    weights: Float[Tensor, "prompt *heads demo"], demo_labels: Int[Tensor, "prompt demo"], n_labels: int
) -> Int[Tensor, " prompt *heads"]:
    """Kernel regression: ŷ = argmax_c Σ_i [y_i = c] K_i for every prompt (and head, for any
    axes between prompt and demo). Normalising by Σ K_i does not change the argmax; a tie goes
    to the first label.

    >>> kr_predictions(torch.tensor([[0.1, 0.3, 0.25]]), torch.tensor([[0, 1, 0]]), 2).tolist()
    [0]
    """
    one_hot = torch.nn.functional.one_hot(demo_labels.long(), n_labels).to(weights.dtype)  # [P, D, C]
    flat = weights.reshape(weights.shape[0], -1, weights.shape[-1])  # [P, heads, D]
    return torch.bmm(flat, one_hot).argmax(-1).reshape(weights.shape[:-1])


# ---------------------------------------------------------------------- similarities


def _cosine(counts: Sequence[Counter[str]]) -> Float[Tensor, "item item"]:
    vocab = {key: i for i, key in enumerate(sorted({k for c in counts for k in c}))}
    matrix = torch.zeros(len(counts), max(len(vocab), 1), dtype=torch.float64)
    for row, c in enumerate(counts):
        for key, n in c.items():
            matrix[row, vocab[key]] = n
    unit = matrix / matrix.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.T).float()


@KR_SIMILARITIES.register("char_ngram", KernelRegressionConfig, "cosine of character n-gram counts")
def char_ngram_similarity(lm: LensModel, texts: Sequence[str], config: KernelRegressionConfig) -> Float[Tensor, "item item"]:
    """Cosine between the texts' character n-gram counts (lower-cased, padded with a space):
    a similarity of the surface form that needs no model.

    >>> s = char_ngram_similarity(None, ["great film", "great food", "xyz"], KernelRegressionConfig())
    >>> s[0, 1] > s[0, 2], round(float(s[0, 0]), 4)
    (tensor(True), 1.0)
    """
    n = config.ngram
    padded = [f" {t.lower()} " for t in texts]
    return _cosine([Counter(t[i:i + n] for i in range(max(len(t) - n + 1, 1))) for t in padded])


@KR_SIMILARITIES.register("bag_of_words", KernelRegressionConfig, "cosine of word counts")
def bag_of_words_similarity(lm: LensModel, texts: Sequence[str], config: KernelRegressionConfig) -> Float[Tensor, "item item"]:
    """Cosine between the texts' lower-cased word counts."""
    return _cosine([Counter(re.findall(r"\w+", t.lower())) for t in texts])


@KR_SIMILARITIES.register("prediction", KernelRegressionConfig, "P(o|x)ᵀP(o|x') from standalone runs (Eq. 9)")
@torch.no_grad()
def prediction_similarity(lm: LensModel, texts: Sequence[str], config: KernelRegressionConfig) -> Float[Tensor, "item item"]:
    """The paper's predicted similarity (§5.3, Eq. 9): ``P(o|x₁)ᵀ P(o|x₂)``, each the model's
    next-token distribution over its whole vocabulary after the text alone (sink, then the
    text; not inside an ICL prompt). Reads the model only."""
    final = hook_name("resid_post", lm.cfg.n_layers - 1)
    probs = []
    for start in range(0, len(texts), config.batch_size):
        batch = lm.encode_batch(texts[start:start + config.batch_size])
        rows = torch.arange(batch.tokens.shape[0], device=lm.device)
        with lm.hooks.capture([final]) as cap:
            lm(batch.tokens, stop_at_layer=lm.cfg.n_layers)
        resid = cap[final][rows, batch.lengths - 1]
        probs.append(readout.logits(lm, resid, space="resid", norm="live").float().softmax(-1).cpu())
    p = torch.cat(probs)
    return p @ p.T


_DEFAULT = KernelRegressionConfig()  # after the registrations its validation reads


# ---------------------------------------------------------------------- the forward passes


@dataclass(frozen=True)
class _Read:
    """What one batch of prompts gives: per-demonstration weights of every weighting, the span
    maxima of the attention logits (or None), and the label words' logits at the final position."""

    weights: Float[Tensor, "weighting batch layer head demo"]
    logits: Float[Tensor, "batch layer head demo"] | None
    label_logits: Float[Tensor, "batch label"]


def _read_batch(lm: LensModel, prompts: Sequence[ICLPrompt], layers: Sequence[int], config: KernelRegressionConfig) -> _Read:
    """One forward pass: keep only the final query row of every layer's pattern (and scores)."""
    batch = lm.pad_batch([p.tokens for p in prompts])
    final = batch.lengths - 1
    rows = torch.arange(len(prompts), device=lm.device)
    kept: dict[str, Tensor] = {}

    def keep_row(activation: Tensor, hook: Any) -> None:  # [batch, head, query, key] -> [batch, head, key]
        kept[hook.name] = activation[rows, :, final, :].detach().float().cpu()

    def keep_final(activation: Tensor, hook: Any) -> None:
        kept[hook.name] = activation[rows, final].detach()

    patterns = [hook_name("pattern", layer) for layer in layers]
    scores = [hook_name("attn_scores", layer) for layer in layers] if config.pearson else []
    resid = hook_name("resid_post", lm.cfg.n_layers - 1)
    with lm.hooks.hooks(fwd=[(patterns + scores, keep_row), (resid, keep_final)], label="icl kernel"):
        lm(batch.tokens, stop_at_layer=lm.cfg.n_layers)
    pattern = torch.stack([kept[name] for name in patterns], dim=1)  # [batch, layer, head, key]
    weights = torch.stack([KR_WEIGHTINGS.get(w).function(pattern, prompts) for w in config.weightings])
    logits = None
    if scores:
        logits = span_max_weights(torch.stack([kept[name] for name in scores], dim=1), prompts)
    union = sorted({t for p in prompts for t in p.label_tokens})
    label_logits = readout.logits(lm, kept[resid], space="resid", norm="live", token_ids=union).float().cpu()
    where = torch.tensor([[union.index(t) for t in p.label_tokens] for p in prompts])
    return _Read(weights, logits, label_logits.gather(1, where))


def _check_prompts(lm: LensModel, prompts: ICLPromptSet) -> None:
    """Bad input raises here, before any hook is attached."""
    if len(prompts) == 0:
        raise UserInputError(f"the prompt set of task {prompts.task.name!r} ({prompts.split}) is empty")
    if not prompts.task.is_classification:
        raise UserInputError(
            f"task {prompts.task.name!r} is a pair task: kernel regression votes among labels, so it "
            "needs a classification task"
        )
    counts = {len(p.demonstrations) for p in prompts}
    if counts == {0} or len(counts) != 1:
        raise UserInputError(
            f"kernel regression needs the same number (> 0) of demonstrations in every prompt; "
            f"task {prompts.task.name!r} has {sorted(counts)}: build the set with n_demonstrations >= 1"
        )
    if prompts.model != lm.name:
        raise UserInputError(f"the prompts were tokenised for {prompts.model!r}, not {lm.name!r}: rebuild them")


def _similarities(lm: LensModel, prompts: ICLPromptSet, name: str, config: KernelRegressionConfig) -> Tensor:
    """``K(x_test, x_i)`` for every prompt and demonstration, ``[prompt, demo]``."""
    items = sorted({i for p in prompts for i in (p.query, *(d.item for d in p.demonstrations))})
    where = {item: k for k, item in enumerate(items)}
    matrix = KR_SIMILARITIES.get(name).function(lm, [prompts.task.items[i].input for i in items], config)
    return torch.tensor([[float(matrix[where[p.query], where[d.item]]) for d in p.demonstrations] for p in prompts])


@torch.no_grad()
def kernel_regression_heads(
    lm: LensModel, prompts: ICLPromptSet, config: KernelRegressionConfig = _DEFAULT
) -> KernelRegressionHeads:
    """Every head's kernel-regression prediction on an ICL prompt set, with the model's own answer.

    One forward pass per batch of ``config.batch_size`` prompts (sorted by length to pad little)
    keeps, of every layer's attention pattern, only the final (test) position's row. Bad input (an
    empty set, a pair task, prompts without demonstrations, a layer out of range) raises before
    any hook is attached; an error inside the pass leaves no hook behind. Reads the model only.

    Args:
        lm: the model the prompts were tokenised for.
        prompts: a classification task's :class:`~lmsci_mi.icl.ICLPromptSet` (one split).
        config: weightings, baseline similarity, Pearson, layers, batch size.

    Returns:
        :class:`KernelRegressionHeads`.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.icl import ICLPromptConfig, icl_prompts
    >>> lm = load_model("toy-2l")
    >>> kr = kernel_regression_heads(lm, icl_prompts(lm, "parity", ICLPromptConfig(n_demonstrations=4, n_prompts=6)))
    >>> kr.values.shape, kr.axes
    (torch.Size([2, 2, 2, 4]), ('weighting', 'measure', 'layer', 'head'))
    """
    _check_prompts(lm, prompts)
    layers = list(config.layers) if config.layers is not None else list(range(lm.cfg.n_layers))
    layer_hooks("pattern", layers, lm.cfg.n_layers, lm.name)  # raises for a layer out of range
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].tokens))
    reads = [_read_batch(lm, [prompts[i] for i in order[s:s + config.batch_size]], layers, config)
             for s in range(0, len(order), config.batch_size)]
    back = torch.argsort(torch.tensor(order))  # sorted order -> the set's order
    weights = torch.cat([r.weights for r in reads], dim=1)[:, back]
    logits = torch.cat([r.logits for r in reads])[back] if config.pearson else torch.zeros(0)
    label_logits = torch.cat([r.label_logits for r in reads])[back]
    labels = prompts.task.labels
    demo_labels = torch.tensor([[labels.index(d.shown) for d in p.demonstrations] for p in prompts])
    gold = torch.tensor([labels.index(p.gold) for p in prompts])
    predicted = _similarities(lm, prompts, "prediction", config) if config.pearson else torch.zeros(0)
    baseline = (predicted if config.similarity == "prediction" and config.pearson
                else _similarities(lm, prompts, config.similarity, config))
    return _assemble(lm, prompts, config, layers, weights=weights, demo_logits=logits,
                     label_logits=label_logits, demo_labels=demo_labels, gold=gold,
                     baseline_similarity=baseline, predicted_similarity=predicted)


def _assemble(lm: LensModel, prompts: ICLPromptSet, config: KernelRegressionConfig, layers: Sequence[int],
              **tensors: Tensor) -> KernelRegressionHeads:
    n_labels = len(prompts.task.labels)
    model = tensors["label_logits"].argmax(-1)
    heads = torch.stack([kr_predictions(w, tensors["demo_labels"], n_labels) for w in tensors["weights"]])
    accuracy = (heads == tensors["gold"][None, :, None, None]).float().mean(1)
    agreement = (heads == model[None, :, None, None]).float().mean(1)
    meta = lm.meta(prompts.texts, seed=prompts.config.seed, data_source=prompts.task.source,
                   params={**prompts.params(), **config.params(), "layers": tuple(layers)})
    return KernelRegressionHeads(
        values=torch.stack([accuracy, agreement], dim=1),
        axes=("weighting", "measure", "layer", "head"),
        labels=(config.weightings, MEASURES, tuple(str(layer) for layer in layers), Head.axis_labels(lm.cfg.n_heads)),
        meta=meta, task=prompts.task.name, split=prompts.split, label_names=prompts.task.labels,
        similarity=config.similarity, demo_weights=tensors["weights"], demo_logits=tensors["demo_logits"],
        label_logits=tensors["label_logits"], demo_labels=tensors["demo_labels"], gold=tensors["gold"],
        baseline_similarity=tensors["baseline_similarity"], predicted_similarity=tensors["predicted_similarity"],
    )


# ---------------------------------------------------------------------- the result


@result_type
class KernelRegressionHeads(Result):
    """Every head's kernel regression on one task's prompt set (one split).

    ``values`` is ``[weighting, measure, layer, head]``: per head, the share of prompts whose
    kernel-regression prediction equals the gold label (``accuracy``) and the model's own ICL
    answer (``agreement``).

    Attributes:
        task, split: the prompt set's task and split.
        label_names: the task's labels; label indices below count in this order.
        similarity: the baseline kernel regression's similarity (a ``KR_SIMILARITIES`` name).
        demo_weights: ``[weighting, prompt, layer, head, demo]``, each demonstration's weight.
        demo_logits: ``[prompt, layer, head, demo]``, the largest attention logit in each span
            (empty without Pearson).
        label_logits: ``[prompt, label]``, the label words' logits at the final position.
        demo_labels: ``[prompt, demo]``, the label each demonstration shows.
        gold: ``[prompt]``, the query's gold label.
        baseline_similarity: ``[prompt, demo]``, the baseline's K(x_test, x_i).
        predicted_similarity: ``[prompt, demo]``, P(o|x_test)ᵀP(o|x_i) (empty without Pearson).
    """

    task: str
    split: str
    label_names: tuple[str, ...]
    similarity: str
    demo_weights: Tensor
    demo_logits: Tensor
    label_logits: Tensor
    demo_labels: Tensor
    gold: Tensor
    baseline_similarity: Tensor
    predicted_similarity: Tensor

    @property
    def n_prompts(self) -> int:
        return int(self.gold.shape[0])

    @property
    def weightings(self) -> tuple[str, ...]:
        return tuple(self.labels[0])

    def model_predictions(self) -> Int[Tensor, " prompt"]:
        """The model's ICL answer: the label whose word has the largest logit."""
        return self.label_logits.argmax(-1)

    def head_predictions(self, weighting: str = "span_max") -> Int[Tensor, "prompt layer head"]:
        validate_choice("weighting", weighting, self.weightings)
        weights = self.demo_weights[self.weightings.index(weighting)]
        return kr_predictions(weights, self.demo_labels, len(self.label_names))

    def baseline_predictions(self) -> Int[Tensor, " prompt"]:
        """Kernel regression with the baseline similarity as the kernel."""
        return kr_predictions(self.baseline_similarity, self.demo_labels, len(self.label_names))

    def _index(self, head: Head | str | tuple[int, int]) -> tuple[int, int]:
        head = Head.parse(head)
        layers = self.axis_labels(2)
        if str(head.layer) not in layers or not 0 <= head.head < self.values.shape[3]:
            raise UserInputError(
                f"head {head} is not in this result: layers {layers[0]}–{layers[-1]} were read, "
                f"{self.values.shape[3]} heads each"
            )
        return layers.index(str(head.layer)), head.head

    def correct(self, row: str, head: Head | str | None = None, against: str = "gold") -> Tensor:
        """Per prompt, 1 where ``row``'s prediction matches ``against`` (``"gold"`` or ``"model"``):
        ``row`` is ``"icl"``, ``"baseline"`` or a weighting (with ``head``)."""
        validate_choice("against", against, ("gold", "model"))
        target = self.gold if against == "gold" else self.model_predictions()
        if row == "icl":
            predicted = self.model_predictions()
        elif row == "baseline":
            predicted = self.baseline_predictions()
        else:
            if head is None:
                raise UserInputError(f"row {row!r} is a weighting: give a head")
            layer, h = self._index(head)
            predicted = self.head_predictions(row)[:, layer, h]
        return (predicted == target).float()

    def interval(self, row: str, head: Head | str | None = None, against: str = "gold") -> Interval:
        """The share of :meth:`correct` with its 95 % Wilson interval over the prompts."""
        hits = self.correct(row, head, against)
        return wilson_interval(int(hits.sum()), int(hits.numel()))

    def label_attention(self) -> Float[Tensor, "layer head"]:
        """The attention-on-labels map: the mean over prompts of the attention mass the test
        position puts on all demonstrations' label tokens (§5.1, the tutorial's map)."""
        if "label" not in self.weightings:
            raise UserInputError("this result has no 'label' weighting: run with weightings including 'label'")
        return self.demo_weights[self.weightings.index("label")].sum(-1).mean(0)

    def pearson(self, of: str = "logit") -> Float[Tensor, "layer head"]:
        """Per head, Pearson r over every (prompt, demonstration) pair between the predicted
        similarity P(o|x_test)ᵀP(o|x_i) and the demonstration's ``of``: ``"attention"`` (the
        paper's a_i, §5.3) or ``"logit"`` (its pre-softmax logit, the tutorial's)."""
        validate_choice("of", of, ("attention", "logit"))
        if self.predicted_similarity.numel() == 0:
            raise UserInputError("this result was run with pearson=False: no predicted similarity")
        y = self.demo_logits if of == "logit" else self.demo_weights[self.weightings.index("span_max")]
        return pearson_r(self.predicted_similarity, y)

    def default_title(self, **options: object) -> str:
        return f"kernel-regression heads, {self.task} ({self.split}) — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """The attention-on-labels map beside each weighting's agreement with the model."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        panels = [("attention on label tokens", self.label_attention())] if "label" in self.weightings else []
        panels += [(f"KR agreement with ICL ({w})", self.values[i, 1]) for i, w in enumerate(self.weightings)]
        n_layers, n_heads = self.values.shape[2:]
        fig = Figure(figsize=(len(panels) * max(3.5, 0.45 * n_heads + 2), max(3, 0.22 * n_layers + 1.8)))
        for ax, (name, values) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
            heatmap(ax, values, row_labels=self.axis_labels(2), col_labels=self.axis_labels(3),
                    row_name="layer", col_name="head", title=name)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        return fig


def pearson_r(x: Float[Tensor, "prompt demo"], y: Float[Tensor, "prompt layer head demo"]) -> Float[Tensor, "layer head"]:
    """Pearson r per head between ``x`` and ``y`` over every (prompt, demo) pair (NaN where
    either is constant).

    >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> pearson_r(x, (2 * x)[:, None, None, :]).tolist()
    [[1.0]]
    """
    xs = x.double().flatten()
    ys = y.double().movedim(0, -2).flatten(-2)  # [layer, head, prompt·demo]
    xc, yc = xs - xs.mean(), ys - ys.mean(-1, keepdim=True)
    denominator = xc.norm() * yc.norm(dim=-1)
    r = (yc * xc).sum(-1) / denominator
    return torch.where(denominator > 0, r, torch.nan).float()


# ---------------------------------------------------------------------- dev -> held-out


@dataclass(frozen=True)
class KRHeadChoice:
    """Heads chosen on dev: per weighting, each task's best head and the best by the mean over
    tasks; and the dev score each was chosen by.

    Attributes:
        select_by: ``"agreement"`` (with the model's ICL answer; the paper's Table 2 choice) or
            ``"accuracy"`` (against gold).
        task_best: weighting -> task -> head.
        overall_best: weighting -> head.
        dev_scores: weighting -> task -> the task-best head's dev score; ``"overall"`` the
            overall head's mean dev score over tasks.
        n_dev: task -> dev prompts.
    """

    select_by: str
    task_best: Mapping[str, Mapping[str, Head]]
    overall_best: Mapping[str, Head]
    dev_scores: Mapping[str, Mapping[str, float]]
    n_dev: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"select_by": self.select_by,
                "task_best": {w: {t: h.label for t, h in by.items()} for w, by in self.task_best.items()},
                "overall_best": {w: h.label for w, h in self.overall_best.items()},
                "dev_scores": {w: dict(s) for w, s in self.dev_scores.items()}, "n_dev": dict(self.n_dev)}


def _best(values: Float[Tensor, "layer head"], layers: Sequence[str]) -> tuple[Head, float]:
    flat = torch.nan_to_num(values.float(), nan=-math.inf).flatten()
    index = int(flat.argmax())  # the first best head (lowest layer, then head) on a tie
    n_heads = values.shape[1]
    return Head(int(layers[index // n_heads]), index % n_heads), float(flat[index])


def choose_kr_heads(dev: Mapping[str, KernelRegressionHeads], select_by: SelectBy = "agreement") -> KRHeadChoice:
    """Choose heads on dev results only: per weighting, each task's best head and the head with
    the best mean over tasks. It takes no held-out data, so held-out never shapes the choice.

    Raises:
        UserInputError: no results, a held-out result given as dev, or results of different
            models, layers or weightings.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.icl import ICLPromptConfig, icl_prompts
    >>> lm = load_model("toy-2l")
    >>> dev = kernel_regression_heads(lm, icl_prompts(lm, "parity", ICLPromptConfig(n_demonstrations=4, n_prompts=6)))
    >>> choice = choose_kr_heads({"parity": dev})
    >>> sorted(choice.overall_best), choice.overall_best["label"] == choice.task_best["label"]["parity"]
    (['label', 'span_max'], True)
    """
    validate_choice("select_by", select_by, ("agreement", "accuracy"))
    first = _consistent(dev, "dev")
    measure = MEASURES.index(select_by)
    layers = first.axis_labels(2)
    task_best: dict[str, dict[str, Head]] = {}
    scores: dict[str, dict[str, float]] = {}
    overall: dict[str, Head] = {}
    for w, weighting in enumerate(first.weightings):
        per_task = {task: _best(result.values[w, measure], layers) for task, result in dev.items()}
        task_best[weighting] = {task: head for task, (head, _) in per_task.items()}
        scores[weighting] = {task: score for task, (_, score) in per_task.items()}
        mean = torch.stack([result.values[w, measure] for result in dev.values()]).mean(0)
        overall[weighting], scores[weighting]["overall"] = _best(mean, layers)
    return KRHeadChoice(select_by, task_best, overall, scores, {t: r.n_prompts for t, r in dev.items()})


def _consistent(results: Mapping[str, KernelRegressionHeads], split: str) -> KernelRegressionHeads:
    if not results:
        raise UserInputError(f"no {split} results given")
    first = next(iter(results.values()))
    for task, result in results.items():
        if result.split != split:
            raise UserInputError(f"the {split} result of task {task!r} is a {result.split!r} result")
        if (result.meta.model, result.labels[0], result.labels[2:]) != (first.meta.model, first.labels[0], first.labels[2:]):
            raise UserInputError(
                f"task {task!r}'s result differs from the first in model, weightings or heads read: "
                "run every task with the same model and config"
            )
    return first


@result_type
class KernelRegressionTable(Result):
    """The tutorial's table on held-out prompts: ``values`` is ``[row, task]`` (a share of
    prompts), with 95 % Wilson bounds ``low`` and ``high`` of the same shape.

    Rows: ``icl`` (the model's accuracy), ``baseline`` (KR on the offline similarity), and for each
    weighting W ``task_best:W`` and ``overall_best:W`` (the dev-chosen heads' accuracy against
    gold) and the same with ``:agreement`` (against the model's ICL answer).

    Attributes:
        low, high: the interval bounds.
        n: ``[task]`` held-out prompts.
        heads: per row, per task, the head label (``""`` for a row without a head).
        choice: the dev choice (:meth:`KRHeadChoice.to_dict`).
    """

    low: Tensor
    high: Tensor
    n: Tensor
    heads: tuple[tuple[str, ...], ...]
    choice: Mapping[str, Any]

    def summary(self, rows: int = 20) -> str:
        """The table as text: one line per row, ``estimate [low, high] head`` per task."""
        tasks = self.axis_labels(1)
        width = max(len(r) for r in self.axis_labels(0))
        lines = [f"{type(self).__name__} on {self.meta.model}, held-out n = "
                 + ", ".join(f"{t} {int(n)}" for t, n in zip(tasks, self.n, strict=True))]
        for r, name in enumerate(self.axis_labels(0)[:rows]):
            cells = [f"{self.values[r, t]:.2f} [{self.low[r, t]:.2f}, {self.high[r, t]:.2f}] {self.heads[r][t]}".rstrip()
                     for t in range(len(tasks))]
            lines.append(f"{name:<{width}}  " + " | ".join(cells))
        return "\n".join(lines)

    def cell(self, row: str, task: str) -> Interval:
        r, t = self.axis_labels(0).index(row), self.axis_labels(1).index(task)
        return Interval(float(self.values[r, t]), float(self.low[r, t]), float(self.high[r, t]), 0.95,
                        int(self.n[t]), "wilson")


def kr_table(choice: KRHeadChoice, held_out: Mapping[str, KernelRegressionHeads]) -> KernelRegressionTable:
    """Report the dev-chosen heads on held-out results, next to ICL and the baseline, with 95 %
    Wilson intervals over the held-out prompts (the tutorial's table; the paper's §5.5)."""
    first = _consistent(held_out, "held_out")
    tasks = tuple(held_out)
    missing = [t for t in tasks if any(t not in by for by in choice.task_best.values())]
    if missing:
        raise UserInputError(f"tasks {missing} have held-out results but no head chosen on dev")
    rows: list[tuple[str, str, Callable[[str], Head | None]]] = [
        ("icl", "icl", lambda t: None), ("baseline", "baseline", lambda t: None)]
    for w in first.weightings:
        rows += [(f"task_best:{w}", w, lambda t, w=w: choice.task_best[w][t]),
                 (f"overall_best:{w}", w, lambda t, w=w: choice.overall_best[w])]
    rows += [(f"{name}:agreement", kind, head_of) for name, kind, head_of in rows[2:]]
    cells = [[held_out[t].interval(kind, head_of(t), "model" if name.endswith(":agreement") else "gold")
              for t in tasks] for name, kind, head_of in rows]
    grid = {k: torch.tensor([[getattr(c, k) for c in row] for row in cells]) for k in ("estimate", "low", "high")}
    heads = tuple(tuple(str(head_of(t) or "") for t in tasks) for _, _, head_of in rows)
    return KernelRegressionTable(
        values=grid["estimate"], axes=("row", "task"), labels=(tuple(r[0] for r in rows), tasks),
        meta=Meta(model=first.meta.model, sink=first.meta.sink, data_source=first.meta.data_source,
                  params={"select_by": choice.select_by, "tasks": tasks}),
        low=grid["low"], high=grid["high"], n=torch.tensor([held_out[t].n_prompts for t in tasks]),
        heads=heads, choice=choice.to_dict(),
    )
