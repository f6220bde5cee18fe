"""Task vectors (Hendel et al. 2023, arXiv:2310.15916) and function vectors (Todd et al. 2024,
arXiv:2310.15213): how much of the in-context-learning gain one vector carries into a zero-shot
prompt, layer by layer, against a random vector of the same norm and operation.

A task vector is the last token's residual stream after block L of an ICL prompt (averaged over
dummy queries), *replacing* that state in the zero-shot prompt; a function vector is the sum of
the mean outputs (through ``W_O``) of the heads with the largest average indirect effect,
*added* after block L. Both run through the sweep engine (:mod:`lmsci_mi.sweep`), which recomputes
only the last position from block L on; a function vector steers generation as a
:class:`~lmsci_mi.steering.vectors.SteeringVector` (:meth:`FunctionVector.steering_vector`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config, paper, validate_choice
from lmsci_mi.data.icl_tasks import ICLTask, load_icl_task
from lmsci_mi.errors import UserInputError
from lmsci_mi.icl.prompts import (
    ICL_FORMATS,
    SPLITS,
    ICLPromptConfig,
    ICLPromptSet,
    icl_prompts,
    icl_split,
    zero_shot_prompts,
)
from lmsci_mi.model import LensModel
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name, layer_hooks
from lmsci_mi.stats import Interval, bootstrap_interval
from lmsci_mi.steering.vectors import SteeringVector, steering_vector
from lmsci_mi.sweep import BaseRun, Intervention, Row, SweepConfig, run_rows

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CONDITIONS",
    "ICL_VECTOR_METHODS",
    "FunctionVector",
    "FunctionVectorConfig",
    "HeadIndirectEffects",
    "ICLGainRecovery",
    "RecoveryReport",
    "TaskVectorConfig",
    "TaskVectors",
    "VectorRecovery",
    "function_vector",
    "function_vector_recovery",
    "head_indirect_effects",
    "icl_gain_recovery",
    "matched_random_vectors",
    "task_vector_recovery",
    "task_vectors",
    "vector_recovery",
]

logger = logging.getLogger(__name__)

_HENDEL = "Hendel et al. 2023, roeehendel/icl_task_vectors"
_TODD = "Todd et al. 2024, ericwtodd/function_vectors"
_SPLIT_WHY = ("every ICL analysis shares icl_split's dev / held-out halves (the heads, layers and "
              "settings are chosen on dev, reported on held-out)")
Operation = Literal["replace", "add"]
CONDITIONS: tuple[str, ...] = ("vector", "random")
"""The two interventions of every curve: the method's vector, and a random vector of the same
norm put in the same way (replaced or added)."""


# ---------------------------------------------------------------------------------- configs


@config
class TaskVectorConfig(Config):
    """Hendel et al.'s task vector and its evaluation; the defaults are the paper code's."""

    n_demonstrations: int = field(default=5, metadata={
        "help": "demonstrations per ICL prompt", "ge": 1,
        **paper(5, f"{_HENDEL} scripts/experiments/main.py (num_examples = 5)")})
    format: str = field(default="hendel", metadata={
        "help": "prompt format, a key of ICL_FORMATS", "choices": tuple(ICL_FORMATS),
        **paper("hendel", f"{_HENDEL} core/data/datasets/few_shot_format.py ('example:{{x}}->{{y}}')")})
    n_prompts: int = field(default=50, metadata={
        "help": "ICL prompts per split (every item of a smaller split)", "ge": 1,
        **paper(50, f"{_HENDEL} scripts/experiments/main.py (50 dev and 50 test datasets)")})
    n_dummy_queries: int = field(default=2, metadata={
        "help": "dummy queries a prompt's task vector is averaged over", "ge": 1,
        **paper(2, f"{_HENDEL} core/task_vectors.py get_single_context_task_hiddens "
                   "(num_test_inputs_to_avg = 2)")})
    layers: tuple[int, ...] | None = field(default=None, metadata={
        "help": "blocks whose output is replaced (None: every block)",
        **paper(None, f"{_HENDEL} core/task_vectors.py task_vector_accuracy_by_layer (every layer)")})
    held_out_fraction: float = field(default=0.5, metadata={
        "help": "share of the task's items held out", "gt": 0, "lt": 1})
    seed: int = field(default=0, metadata={"help": "seed of the prompts, dummy queries and random control"})
    token_budget: int = field(default=4096, metadata={"help": "tokens per block call", "ge": 1})


@config
class FunctionVectorConfig(Config):
    """Todd et al.'s function vector and its evaluation; the defaults are the paper code's."""

    n_demonstrations: int = field(default=10, metadata={
        "help": "demonstrations per ICL prompt", "ge": 1,
        **paper(10, f"{_TODD} src/compute_indirect_effect.py (--n_shots 10)")})
    format: str = field(default="todd", metadata={
        "help": "prompt format, a key of ICL_FORMATS", "choices": tuple(ICL_FORMATS),
        **paper("todd", f"{_TODD} src/compute_indirect_effect.py (--prefixes Q:/A:, --separators \\n/\\n\\n)")})
    n_mean_prompts: int = field(default=100, metadata={
        "help": "clean dev prompts the mean head outputs average over (every dev item of a smaller split)",
        "ge": 1, **paper(100, f"{_TODD} src/compute_average_activations.py (--n_trials 100)")})
    n_aie_prompts: int = field(default=25, metadata={
        "help": "shuffled-label dev prompts the indirect effects average over", "ge": 1,
        **paper(25, f"{_TODD} src/compute_indirect_effect.py (--n_trials 25)")})
    n_top_heads: int = field(default=10, metadata={
        "help": "heads summed into the function vector", "ge": 1,
        **paper(10, f"{_TODD} src/utils/extract_utils.py compute_function_vector (n_top_heads = 10)")})
    n_prompts: int | None = field(default=None, metadata={
        "help": "zero-shot queries evaluated per split (None: every item)", "ge": 1,
        **paper(None, f"{_TODD} src/evaluate_function_vector.py (n_shot_eval over the test split)")})
    layers: tuple[int, ...] | None = field(default=None, metadata={
        "help": "blocks whose output the vector is added to (None: every block)",
        **paper(None, f"{_TODD} src/evaluate_function_vector.py (--edit_layer -1: every layer)")})
    held_out_fraction: float = field(default=0.5, metadata={
        "help": "share of the task's items held out", "gt": 0, "lt": 1,
        **paper(0.3, f"{_TODD} src/compute_indirect_effect.py (--test_split 0.3)", why=_SPLIT_WHY)})
    seed: int = field(default=0, metadata={"help": "seed of the prompts and random control"})
    cache: bool = field(default=True, metadata={"help": "cache each prompt's indirect effects on disk"})
    cache_dir: str | None = field(default=None, metadata={
        "help": "where the indirect effects are cached (None: <cache root>/icl_indirect_effects)"})
    batch_size: int = field(default=8, metadata={"help": "shuffled prompts per base run", "ge": 1})
    token_budget: int = field(default=4096, metadata={"help": "tokens per block call", "ge": 1})


def _prompt_config(cfg: TaskVectorConfig | FunctionVectorConfig, n_prompts: int | None,
                   **changes: Any) -> ICLPromptConfig:
    return ICLPromptConfig(n_demonstrations=cfg.n_demonstrations, format=ICL_FORMATS[cfg.format],
                           n_prompts=n_prompts, held_out_fraction=cfg.held_out_fraction,
                           seed=cfg.seed, **changes)


def _capped(task: ICLTask, cfg: TaskVectorConfig | FunctionVectorConfig, split: str, n: int | None) -> int | None:
    """``n`` prompts, or every item of a split that holds fewer (each item is a query once)."""
    return None if n is None else min(n, len(icl_split(task, cfg.held_out_fraction)[split]))


def _layers(lm: LensModel, layers: Sequence[int] | None) -> tuple[int, ...]:
    """The layers asked for (every block when None), checked before anything runs."""
    layer_hooks("resid_post", layers, lm.cfg.n_layers, lm.name)  # a layer out of range raises
    if layers is not None and not len(layers):
        raise UserInputError("no layers given: name at least one block (or None for every block)")
    return tuple(range(lm.cfg.n_layers)) if layers is None else tuple(int(layer) for layer in layers)


# ---------------------------------------------------------------------------------- results


def _share(x: Tensor, zero: Tensor, icl: Tensor, axis: int = -1) -> Tensor:
    """(acc_vector − acc_zero_shot) / (acc_ICL − acc_zero_shot); NaN where ICL gains nothing."""
    gain = icl.mean(axis) - zero.mean(axis)
    return torch.where(gain != 0, (x.mean(axis) - zero.mean(axis)) / gain, torch.nan)


@result_type
class VectorRecovery(Result):
    """Zero-shot answers with a vector put in after each block, on one split, with a random control.

    ``values`` is ``[condition, layer, prompt]``: 1.0 where the top-1 next token of the zero-shot
    prompt is the answer's first token (Hendel et al.'s and Todd et al.'s first-token accuracy).

    Attributes:
        probs: ``[condition, layer, prompt]`` the probability of the answer's first token.
        zero_shot: ``[prompt]`` correct without an intervention.
        icl: ``[prompt]`` correct on the ICL prompt of the same query (gold demonstrations).
        operation: ``"replace"`` (task vectors) or ``"add"`` (function vectors).
        split: ``"dev"`` or ``"held_out"``.
        queries: each prompt's query item (indices into the task's items).
    """

    probs: Tensor
    zero_shot: Tensor
    icl: Tensor
    operation: str
    split: str
    queries: tuple[int, ...]

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(int(label) for label in self.labels[1])

    def accuracy(self, condition: str = "vector") -> Tensor:
        """Accuracy per layer of ``condition``."""
        validate_choice("condition", condition, CONDITIONS)
        return self.values[CONDITIONS.index(condition)].float().mean(-1)

    def shares(self) -> Tensor:
        """``[condition, layer]``: the share of the ICL gain recovered."""
        n_cond, n_layers, _ = self.values.shape
        x = self.values.double().flatten(0, 1)
        return _share(x, self.zero_shot.double()[None], self.icl.double()[None]).view(n_cond, n_layers)

    def best_layer(self) -> int:
        """The layer of highest vector accuracy (the lowest of a tie, as Hendel et al.'s ``max``)."""
        return self.layers[int(torch.argmax(self.accuracy("vector")))]

    def interval(self, what: str, layer: int | None = None, *, seed: int = 0) -> Interval:
        """A 95 % percentile-bootstrap interval over prompts: ``what`` is ``"zero_shot"``,
        ``"icl"``, a condition's accuracy (``"vector"``, ``"random"``) or its share of the ICL
        gain (``"vector_share"``, ``"random_share"``: prompts resampled with their zero-shot
        and ICL answers)."""
        if what in ("zero_shot", "icl"):
            return bootstrap_interval(getattr(self, what).double(), seed=seed)
        condition = what.removesuffix("_share")
        validate_choice("what", condition, CONDITIONS)
        if layer not in self.layers:
            raise UserInputError(f"layer {layer} was not evaluated; layers are {list(self.layers)}")
        x = self.values[CONDITIONS.index(condition), self.layers.index(layer)].double()
        if condition == what:
            return bootstrap_interval(x, seed=seed)
        return bootstrap_interval((x, self.zero_shot.double(), self.icl.double()), _share,
                                  seed=seed, nan_policy="omit")


@dataclass(frozen=True)
class RecoveryReport:
    """The held-out figures at the layer chosen on dev, each with its 95 % interval over prompts.

    ``share`` is (acc_vector − acc_zero_shot) / (acc_ICL − acc_zero_shot): our summary of the
    three accuracies both papers report (Hendel et al.'s Table "Baseline / Hypothesis / Regular";
    Todd et al.'s zero-shot and ICL accuracies), not a metric of either paper."""

    method: str
    operation: str
    task: str
    best_layer: int
    dev_accuracy: float
    n: int
    zero_shot: Interval
    icl: Interval
    vector: Interval
    random: Interval
    share: Interval
    random_share: Interval

    def to_dict(self) -> dict[str, Any]:
        plain = {k: getattr(self, k) for k in ("method", "operation", "task", "best_layer", "dev_accuracy", "n")}
        for k in ("zero_shot", "icl", "vector", "random", "share", "random_share"):
            plain[k] = getattr(self, k).as_dict()
        return plain


@result_type
class ICLGainRecovery(Result):
    """A task's recovery curves on dev and held-out, and the layer chosen on dev.

    ``values`` is ``[split, condition, layer]``: the share of the ICL gain recovered (NaN where
    ICL gains nothing over zero-shot on that split).

    Attributes:
        method: ``"task_vector"`` or ``"function_vector"``.
        task: the task's name.
        best_layer: the layer of highest dev accuracy, where the held-out figures are read.
        dev, held_out: the per-prompt answers behind each curve.
    """

    method: str
    task: str
    best_layer: int
    dev: VectorRecovery
    held_out: VectorRecovery

    def report(self, *, seed: int = 0) -> RecoveryReport:
        """The held-out figures at ``best_layer`` with their intervals."""
        held, layer = self.held_out, self.best_layer
        figures = {name: held.interval(what, layer, seed=seed) for name, what in (
            ("zero_shot", "zero_shot"), ("icl", "icl"), ("vector", "vector"), ("random", "random"),
            ("share", "vector_share"), ("random_share", "random_share"))}
        return RecoveryReport(
            method=self.method, operation=held.operation, task=self.task, best_layer=layer,
            dev_accuracy=float(self.dev.accuracy()[self.dev.layers.index(layer)]),
            n=len(held.queries), **figures,
        )

    def summary(self, rows: int = 10) -> str:
        r = self.report()
        return (f"{self.method} on {self.task} ({self.meta.model}), layer {r.best_layer} (chosen on dev): "
                f"held-out accuracy {r.vector} vs zero-shot {r.zero_shot}, ICL {r.icl}, random "
                f"{r.random}; share of the ICL gain {r.share} (random {r.random_share}), n={r.n}")

    def default_title(self, **options: object) -> str:
        return f"{self.method} on {self.task}: share of the ICL gain by layer ({self.meta.model})"

    def draw_curves(self, ax: Axes) -> None:
        """Draw the share of the ICL gain by layer on ``ax``: the vector and the random control,
        dev dashed and held-out solid, with the layer chosen on dev marked."""
        layers = [int(label) for label in self.labels[2]]
        for s, split in enumerate(SPLITS):
            for c, condition in enumerate(CONDITIONS):
                ax.plot(layers, self.values[s, c].tolist(), color=f"C{c}", linestyle="-" if s else "--",
                        label=f"{condition} ({split})")
        ax.axvline(self.best_layer, color="grey", linewidth=0.8)
        ax.axhline(0, color="black", linewidth=0.5)
        if self.values[1].isnan().all():  # an empty panel would read as "no data"
            ax.text(0.5, 0.5, "no ICL gain over zero-shot on held-out:\nno share to recover",
                    transform=ax.transAxes, ha="center", va="center", fontsize=7)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("layer (block output)")
        ax.set_ylabel("share of the ICL gain")

    def _draw(self, title: str) -> Figure:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 3.2))
        ax = fig.add_subplot()
        self.draw_curves(ax)
        ax.set_title(title, fontsize=8)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig


# ---------------------------------------------------------------------------------- evaluation


def matched_random_vectors(vectors: Float[Tensor, "... layer d"], seed: int = 0) -> Float[Tensor, "... layer d"]:
    """The random control: one Gaussian direction per layer (seeded), scaled to the norm of each
    vector it stands in for, so a random vector is replaced or added exactly as the real one.

    >>> v = torch.randn(3, 2, 8)
    >>> r = matched_random_vectors(v, seed=1)
    >>> torch.allclose(r.norm(dim=-1), v.norm(dim=-1))
    True
    """
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(vectors.shape[-2:], generator=generator, dtype=torch.float64)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    norms = vectors.double().norm(dim=-1, keepdim=True)
    return (directions.to(norms.device) * norms).to(vectors.dtype)


def _answer_readout(answers: Tensor) -> Callable[[Tensor], Tensor]:
    """``[row, batch, vocab] -> [row, batch, 2]``: top-1 correct, and p(answer's first token)."""

    def read(logits: Tensor) -> Tensor:
        logits = logits.float()
        index = answers.to(logits.device)[None, :, None].expand(logits.shape[0], -1, 1)
        prob = logits.softmax(-1).gather(-1, index)[..., 0]
        correct = (logits.argmax(-1) == index[..., 0]).float()
        return torch.stack([correct, prob], -1)

    return read


def _length_groups(prompts: ICLPromptSet, indices: Sequence[int], size: int | None = None) -> list[list[int]]:
    """Prompts of one token length together (no padding: each row's change is at its last
    position, so the engine recomputes one position per row), at most ``size`` per group."""
    by_length: dict[int, list[int]] = {}
    for i in indices:
        by_length.setdefault(len(prompts[i].tokens), []).append(i)
    groups = []
    for members in by_length.values():
        step = size or len(members)
        groups += [members[k:k + step] for k in range(0, len(members), step)]
    return groups


def _answer_stats(lm: LensModel, prompts: ICLPromptSet, token_budget: int) -> tuple[Tensor, Tensor]:
    """Top-1 correct and p(answer) at each prompt's last token, without intervention."""
    last = hook_name("resid_post", lm.cfg.n_layers - 1)
    acts = collect_activations(lm, [list(p.tokens) for p in prompts], [last],
                               config=CollectConfig(token_budget=token_budget, progress=False))
    with torch.no_grad():
        logits = lm.unembed(acts.acts[last].to(lm.device))
    stats = _answer_readout(prompts.answer_tokens())(logits[None])[0].cpu()
    return stats[:, 0], stats[:, 1]


def _curve_rows(base: BaseRun, vectors: Tensor, layers: Sequence[int], operation: str) -> list[Row]:
    """One row per (condition, layer): the vector put at the last position after block L."""
    rows = []
    last = torch.zeros(base.tokens.shape, dtype=torch.bool, device=base.tokens.device)
    last[:, -1] = True
    mask = last[..., None]
    for condition in range(vectors.shape[0]):
        for k, layer in enumerate(layers):
            hook = hook_name("resid_post", layer)
            vector = vectors[condition, :, k].to(base.acts[hook])[:, None]  # [batch, 1, d]
            source = vector if operation == "replace" else base.acts[hook] + vector
            rows.append(Row((Intervention(hook, source, mask),)))
    return rows


def _sweep_curves(lm: LensModel, zero: ICLPromptSet, vectors: Tensor, layers: Sequence[int],
                  operation: str, token_budget: int) -> tuple[Tensor, Tensor]:
    """``[condition, layer, prompt, 2]`` (correct, p) with each vector, and ``[prompt, 2]`` without."""
    n_cond, n_prompts = vectors.shape[0], len(zero)
    out = torch.zeros(n_cond, len(layers), n_prompts, 2)
    base_out = torch.zeros(n_prompts, 2)
    hooks = [hook_name("resid_post", layer) for layer in layers]
    for group in _length_groups(zero, range(n_prompts)):
        tokens = torch.tensor([zero[i].tokens for i in group], device=lm.device)
        base = BaseRun.record(lm, tokens, capture=hooks)
        readout = _answer_readout(zero.answer_tokens()[group])
        rows = _curve_rows(base, vectors[:, group], layers, operation)
        swept = run_rows(lm, base, rows, readout, SweepConfig(token_budget=token_budget))
        out[:, :, group] = swept.values.view(n_cond, len(layers), len(group), 2).cpu()
        base_out[group] = readout(base.logits[None])[0].cpu()
    return out, base_out


def vector_recovery(
    lm: LensModel,
    icl: ICLPromptSet,
    vectors: Float[Tensor, "prompt layer d_model"] | Float[Tensor, "layer d_model"],
    layers: Sequence[int],
    operation: Operation,
    *,
    seed: int = 0,
    token_budget: int = 4096,
) -> VectorRecovery:
    """Put ``vectors`` into the zero-shot prompts of ``icl``'s queries at the last position after
    each block of ``layers`` (``"replace"`` the state, or ``"add"`` to it), and a random vector
    of the same norm the same way; score every answer by its first token.

    Reads the model only; every hook is removed on return or error.

    Args:
        lm: the model.
        icl: the ICL prompts (their queries' zero-shot prompts are intervened on; their own
            answers are the ICL baseline).
        vectors: one vector per prompt and layer (a task vector), or one per layer for all.
        layers: the blocks whose output is changed, in ``vectors``' layer order.
        operation: ``"replace"`` or ``"add"``.
        seed: the random control's seed.
        token_budget: tokens per block call.

    Returns:
        A :class:`VectorRecovery`.

    Raises:
        UserInputError: an empty prompt set, a layer out of range, vectors of the wrong shape.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> icl = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=2, n_prompts=3))
    >>> r = vector_recovery(lm, icl, torch.zeros(2, 64), (0, 1), "add")
    >>> tuple(r.values.shape), bool((r.probs[0, 0] == r.probs[0, 1]).all())
    ((2, 2, 3), True)
    """
    validate_choice("operation", operation, ("replace", "add"))
    if not len(icl):
        raise UserInputError("the ICL prompt set is empty: give at least one prompt")
    layers = _layers(lm, layers)
    vectors = torch.as_tensor(vectors).detach().float()
    if vectors.ndim == 2:
        vectors = vectors[None].expand(len(icl), -1, -1)
    if tuple(vectors.shape) != (len(icl), len(layers), lm.cfg.d_model):
        raise UserInputError(f"vectors of shape {tuple(vectors.shape)}: give [layer, d_model] or "
                             f"[prompt, layer, d_model] = {(len(icl), len(layers), lm.cfg.d_model)}")
    zero = zero_shot_prompts(lm, icl)
    both = torch.stack([vectors, matched_random_vectors(vectors, seed)])  # [condition, prompt, layer, d]
    stats, base = _sweep_curves(lm, zero, both, layers, operation, token_budget)
    icl_correct, _ = _answer_stats(lm, icl, token_budget)
    return VectorRecovery(
        values=stats[..., 0], axes=("condition", "layer", "prompt"),
        labels=(CONDITIONS, tuple(str(layer) for layer in layers), ()),
        meta=lm.meta(zero.texts, seed=seed, data_source=f"ICL task {icl.task.name}",
                     params={**icl.params(), "operation": operation}),
        probs=stats[..., 1], zero_shot=base[:, 0], icl=icl_correct,
        operation=operation, split=icl.split, queries=icl.queries,
    )


def _gain_recovery(lm: LensModel, method: str, task: ICLTask, curves: dict[str, VectorRecovery],
                   params: dict[str, Any]) -> ICLGainRecovery:
    dev, held = curves["dev"], curves["held_out"]
    values = torch.stack([dev.shares(), held.shares()]).float()
    return ICLGainRecovery(
        values=values, axes=("split", "condition", "layer"),
        labels=(SPLITS, CONDITIONS, tuple(str(layer) for layer in dev.layers)),
        meta=lm.meta(params=params, seed=params.get("seed"), data_source=f"ICL task {task.name}"),
        method=method, task=task.name, best_layer=dev.best_layer(), dev=dev, held_out=held,
    )


# ---------------------------------------------------------------------------------- task vectors


@result_type
class TaskVectors(Result):
    """Hendel et al.'s task vectors: ``values`` ``[prompt, layer, d_model]``, each prompt's last-token
    residual stream after every block, averaged over its dummy queries.

    Attributes:
        split: the prompts' split.
        queries: each prompt's (real) query item, whose zero-shot prompt the vector goes into.
        dummy_queries: per prompt, the items asked after the same demonstrations instead.
    """

    split: str
    queries: tuple[int, ...]
    dummy_queries: tuple[tuple[int, ...], ...]


def _dummy_texts(prompts: ICLPromptSet, n_dummy: int, seed: int) -> tuple[list[str], list[tuple[int, ...]]]:
    """Each prompt's demonstrations asked ``n_dummy`` other queries of its split (Hendel et al.
    leave out only the prompt's own query), so its vector carries the task but not its answer."""
    task, fmt = prompts.task, prompts.config.format
    pool = icl_split(task, prompts.config.held_out_fraction)[prompts.split]
    texts, dummies = [], []
    for p in prompts:
        own = fmt.input_template.replace("{x}", task.items[p.query].input)
        if not p.text.endswith(own):
            raise UserInputError(f"prompt {p.text!r} does not end with its query {own!r}")
        others = [i for i in pool if i != p.query]
        if len(others) < n_dummy:
            raise UserInputError(f"n_dummy_queries={n_dummy}, but the {prompts.split} split has "
                                 f"{len(others)} other items")
        rng = random.Random(f"{seed}|{task.name}|{prompts.split}|{p.query}|dummy")
        chosen = tuple(rng.sample(others, n_dummy))
        dummies.append(chosen)
        prefix = p.text[: len(p.text) - len(own)]
        texts += [prefix + fmt.input_template.replace("{x}", task.items[i].input) for i in chosen]
    return texts, dummies


def task_vectors(lm: LensModel, prompts: ICLPromptSet, config: TaskVectorConfig | None = None) -> TaskVectors:
    """Hendel et al.'s task vector of every prompt: the last token's residual stream after each
    block (``resid_post``: the code's ``hidden[:, 1:]``, dropping the embeddings), averaged
    over ``n_dummy_queries`` prompts with the same demonstrations and another query
    (``get_single_context_task_hiddens``). Reads the model only.

    Raises:
        UserInputError: an empty prompt set, a split too small for the dummy queries.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> icl = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=2, n_prompts=3))
    >>> tuple(task_vectors(lm, icl).values.shape)
    (3, 2, 64)
    """
    config = config or TaskVectorConfig()
    if not len(prompts):
        raise UserInputError("the ICL prompt set is empty: give at least one prompt")
    texts, dummies = _dummy_texts(prompts, config.n_dummy_queries, config.seed)
    hooks = [hook_name("resid_post", layer) for layer in range(lm.cfg.n_layers)]
    acts = collect_activations(lm, texts, hooks, config=CollectConfig(token_budget=config.token_budget,
                                                                      progress=False))
    stacked = acts.stack(hooks).float()  # [layer, prompt × dummy, d]
    values = stacked.view(len(hooks), len(prompts), config.n_dummy_queries, -1).mean(2).transpose(0, 1)
    return TaskVectors(
        values=values.contiguous(), axes=("prompt", "layer", "d_model"),
        labels=((), tuple(str(layer) for layer in range(lm.cfg.n_layers)), ()),
        meta=lm.meta(prompts.texts, seed=config.seed, data_source=f"ICL task {prompts.task.name}",
                     params={**prompts.params(), **config.params()}),
        split=prompts.split, queries=prompts.queries, dummy_queries=tuple(dummies),
    )


ICL_VECTOR_METHODS: MethodRegistry[Callable[..., ICLGainRecovery]] = MethodRegistry("ICL vector")
"""The ICL-vector methods by name, each ``fn(lm, task, config) -> ICLGainRecovery``."""


@ICL_VECTOR_METHODS.register("task_vector", TaskVectorConfig, "Hendel et al. 2023: replace the state")
def task_vector_recovery(lm: LensModel, task: ICLTask | str, config: TaskVectorConfig | None = None) -> ICLGainRecovery:
    """Hendel et al.'s experiment on one task: on each split, every ICL prompt's task vector
    replaces the last state after block L of its query's zero-shot prompt; the layer of highest
    dev accuracy is the one reported on held-out. Reads the model only.

    Raises:
        UserInputError: a layer out of range (before anything runs), a split too small.

    >>> from lmsci_mi import load_model
    >>> r = task_vector_recovery(load_model("toy-2l"), "antonyms", TaskVectorConfig(n_prompts=3))
    >>> r.values.shape, r.best_layer in (0, 1)
    (torch.Size([2, 2, 2]), True)
    """
    config = config or TaskVectorConfig()
    task = load_icl_task(task) if isinstance(task, str) else task
    layers = _layers(lm, config.layers)
    curves = {}
    for split in SPLITS:
        prompt_config = _prompt_config(config, _capped(task, config, split, config.n_prompts))
        icl = icl_prompts(lm, task, prompt_config, split=split)  # type: ignore[arg-type]
        vectors = task_vectors(lm, icl, config).values[:, list(layers)]
        curves[split] = vector_recovery(lm, icl, vectors, layers, "replace", seed=config.seed,
                                        token_budget=config.token_budget)
    return _gain_recovery(lm, "task_vector", task, curves, config.params())


# ---------------------------------------------------------------------------------- function vectors


@result_type
class HeadIndirectEffects(Result):
    """Todd et al.'s indirect effects: ``values`` ``[prompt, layer, head]``, the gain in p(answer's
    first token) of a shuffled-label ICL prompt when one head's output (``hook_z``) at the last
    token is replaced by its mean over clean ICL prompts.

    Attributes:
        mean_activations: ``[layer, head, d_head]`` each head's mean ``hook_z`` at the last token
            of the clean prompts (the input to ``W_O``).
        n_clean: clean prompts behind the means.
    """

    mean_activations: Tensor
    n_clean: int

    def aie(self) -> Tensor:
        """``[layer, head]``: the average indirect effect over prompts."""
        return self.values.float().mean(0)

    def top(self, k: int = 10) -> tuple[tuple[Head, float], ...]:
        """The ``k`` heads of largest AIE, largest first."""
        aie = self.aie()
        if not 1 <= k <= aie.numel():
            raise UserInputError(f"k={k}: the model has {aie.numel()} heads")
        values, flat = aie.flatten().topk(k)
        return tuple((Head(int(i) // aie.shape[1], int(i) % aie.shape[1]), float(v))
                     for i, v in zip(flat, values, strict=True))

    def default_title(self, **options: object) -> str:
        return f"average indirect effect per head ({self.meta.model}, n={self.values.shape[0]})"

    def _draw(self, title: str) -> Figure:
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        aie = self.aie()
        fig = Figure(figsize=(max(4, 0.5 * aie.shape[1] + 2), max(3, 0.22 * aie.shape[0] + 1.5)))
        heatmap(fig.subplots(), aie, row_labels=[str(i) for i in range(aie.shape[0])],
                col_labels=[f"H{i}" for i in range(aie.shape[1])], row_name="layer",
                col_name="head", title=title)
        fig.tight_layout()
        return fig


def _mean_head_activations(lm: LensModel, clean: ICLPromptSet, token_budget: int) -> Tensor:
    """``[layer, head, d_head]``: each head's mean ``hook_z`` at the clean prompts' last token."""
    hooks = [hook_name("z", layer) for layer in range(lm.cfg.n_layers)]
    acts = collect_activations(lm, [list(p.tokens) for p in clean], hooks,
                               config=CollectConfig(token_budget=token_budget, progress=False))
    return acts.stack(hooks).float().mean(1)


def _effect_rows(base: BaseRun, means: Tensor, n_heads: int) -> list[Row]:
    """One row per head: its ``hook_z`` at the last position replaced by its mean."""
    last = torch.zeros(base.tokens.shape, dtype=torch.bool, device=base.tokens.device)
    last[:, -1] = True
    rows = []
    for layer in range(means.shape[0]):
        hook = hook_name("z", layer)
        source = means[layer].to(base.acts[hook])[None, None]  # [1, 1, head, d_head]
        for head in range(n_heads):
            one = torch.zeros(n_heads, dtype=torch.bool, device=last.device)
            one[head] = True
            rows.append(Row((Intervention(hook, source, last[:, :, None, None] & one[None, None, :, None]),)))
    return rows


def _prompt_effects(lm: LensModel, shuffled: ICLPromptSet, group: Sequence[int], means: Tensor,
                    token_budget: int) -> Tensor:
    """``[prompt, layer, head]`` indirect effects of the prompts of ``group`` (one length)."""
    tokens = torch.tensor([shuffled[i].tokens for i in group], device=lm.device)
    hooks = [hook_name("z", layer) for layer in range(lm.cfg.n_layers)]
    base = BaseRun.record(lm, tokens, capture=hooks)
    readout = _answer_readout(shuffled.answer_tokens()[group])
    swept = run_rows(lm, base, _effect_rows(base, means, lm.cfg.n_heads), readout,
                     SweepConfig(token_budget=token_budget))
    probs = swept.values[..., 1].cpu()  # [head row, prompt]
    corrupt = readout(base.logits[None])[0, :, 1].cpu()
    return (probs - corrupt[None]).T.reshape(len(group), lm.cfg.n_layers, lm.cfg.n_heads)


def _effects_folder(lm: LensModel, clean: ICLPromptSet, shuffled: ICLPromptSet, config: FunctionVectorConfig) -> Path:
    """The cache folder of these prompts' effects: keyed by the weights and every prompt's text."""
    root = Path(config.cache_dir) if config.cache_dir else cache_root() / "icl_indirect_effects"
    key = cache_key(weights_fingerprint(lm), [list(p.tokens) for p in clean],
                    [[*p.tokens, p.answer_token] for p in shuffled])
    return root / key


def head_indirect_effects(lm: LensModel, clean: ICLPromptSet, shuffled: ICLPromptSet,
                          config: FunctionVectorConfig | None = None) -> HeadIndirectEffects:
    """Todd et al.'s indirect effect of every head on every shuffled-label prompt
    (``compute_indirect_effect.py``): each head's mean output over ``clean`` prompts patched in
    at the last token, the gain in p(answer's first token) over the shuffled prompt's own.

    Each prompt's effects are cached as they finish (a JSON file per prompt, in a folder keyed by
    the model's weights and the prompts' tokens), so a stopped run resumes. Reads the model only.

    Raises:
        UserInputError: an empty prompt set.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> c = FunctionVectorConfig(cache=False)
    >>> clean = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=2, n_prompts=4))
    >>> shuffled = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=2, n_prompts=2, label_mode="shuffled"))
    >>> tuple(head_indirect_effects(lm, clean, shuffled, c).values.shape)
    (2, 2, 4)
    """
    config = config or FunctionVectorConfig()
    if not len(clean) or not len(shuffled):
        raise UserInputError(f"{len(clean)} clean and {len(shuffled)} shuffled prompts: give at least one of each")
    means = _mean_head_activations(lm, clean, config.token_budget)
    folder = _effects_folder(lm, clean, shuffled, config) if config.cache else None
    effects: dict[int, Tensor] = {}
    for i in range(len(shuffled)):
        if folder is not None and (folder / f"{i}.json").is_file():
            effects[i] = torch.tensor(json.loads((folder / f"{i}.json").read_text())["effects"])
    todo = [i for i in range(len(shuffled)) if i not in effects]
    for group in _length_groups(shuffled, todo, config.batch_size):
        computed = _prompt_effects(lm, shuffled, group, means, config.token_budget)
        for i, value in zip(group, computed, strict=True):
            effects[i] = value
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                partial = folder / f".{i}.json.partial"
                partial.write_text(json.dumps({"query": shuffled[i].query, "effects": value.tolist()}))
                partial.replace(folder / f"{i}.json")  # whole or absent: a killed run leaves no half file
        logger.info("indirect effects: %d of %d prompts", len(effects), len(shuffled))
    return HeadIndirectEffects(
        values=torch.stack([effects[i] for i in range(len(shuffled))]).float(),
        axes=("prompt", "layer", "head"),
        labels=((), tuple(str(layer) for layer in range(lm.cfg.n_layers)), Head.axis_labels(lm.cfg.n_heads)),
        meta=lm.meta(shuffled.texts, seed=config.seed, data_source=f"ICL task {shuffled.task.name}",
                     params={**shuffled.params(), "n_clean": len(clean)}),
        mean_activations=means, n_clean=len(clean),
    )


@result_type
class FunctionVector(Result):
    """Todd et al.'s function vector: ``values`` ``[d_model]``, the sum over the top heads of
    their mean ``hook_z`` at the last token through ``W_O`` (``compute_function_vector``; no
    bias, and no post-attention norm: Todd et al.'s code takes ``o_proj``'s output for Gemma too).

    Attributes:
        heads: the heads summed (``"L9.H3"``), largest AIE first.
        head_aie: their average indirect effects.
        effects: the indirect effects the heads were chosen by.
    """

    heads: tuple[str, ...]
    head_aie: tuple[float, ...]
    effects: HeadIndirectEffects

    def steering_vector(self, lm: LensModel, layer: int) -> SteeringVector:
        """The vector to add after block ``layer`` (``resid_post``), as a steering vector: add it
        at the last prompt token with ``.apply(lm, 1.0, PositionScope.prompt(-1))``."""
        return steering_vector(lm, self.values, layer, "resid_post", method="function_vector")

    def summary(self, rows: int = 10) -> str:
        top = ", ".join(f"{h} {a:.3g}" for h, a in zip(self.heads[:rows], self.head_aie, strict=False))
        return f"function vector of {self.meta.model} (‖v‖ {float(self.values.norm()):.3g}): {top}"


def function_vector(lm: LensModel, task: ICLTask | str, config: FunctionVectorConfig | None = None) -> FunctionVector:
    """Todd et al.'s function vector of a task, from its dev items: mean head outputs over clean
    ICL prompts, indirect effects over shuffled-label prompts (drawn with the next seed, so they
    are other prompts), and the top ``n_top_heads`` heads' mean outputs through ``W_O`` summed.
    Reads the model only.

    Raises:
        UserInputError: ``n_top_heads`` above the model's head count.

    >>> from lmsci_mi import load_model
    >>> fv = function_vector(load_model("toy-2l"), "antonyms", FunctionVectorConfig(
    ...     n_mean_prompts=4, n_aie_prompts=2, n_top_heads=3, cache=False))
    >>> tuple(fv.values.shape), len(fv.heads)
    ((64,), 3)
    """
    config = config or FunctionVectorConfig()
    task = load_icl_task(task) if isinstance(task, str) else task
    if config.n_top_heads > lm.cfg.n_layers * lm.cfg.n_heads:
        raise UserInputError(f"n_top_heads={config.n_top_heads}, but {lm.name} has "
                             f"{lm.cfg.n_layers * lm.cfg.n_heads} heads")
    clean = icl_prompts(lm, task, _prompt_config(config, _capped(task, config, "dev", config.n_mean_prompts)))
    shuffled_config = _prompt_config(config, _capped(task, config, "dev", config.n_aie_prompts),
                                     label_mode="shuffled").replace(seed=config.seed + 1)
    effects = head_indirect_effects(lm, clean, icl_prompts(lm, task, shuffled_config), config)
    top = effects.top(config.n_top_heads)
    with torch.no_grad():
        vector = sum((effects.mean_activations[h.layer, h.head].to(lm.device)
                      @ lm.model.blocks[h.layer].attn.W_O[h.head].float() for h, _ in top),
                     torch.zeros(lm.cfg.d_model, device=lm.device))
    return FunctionVector(
        values=vector.detach().float(), axes=("d_model",), labels=((),),
        meta=lm.meta(seed=config.seed, data_source=f"ICL task {task.name}", params=config.params()),
        heads=tuple(h.label for h, _ in top), head_aie=tuple(a for _, a in top), effects=effects,
    )


@ICL_VECTOR_METHODS.register("function_vector", FunctionVectorConfig, "Todd et al. 2024: add the vector")
def function_vector_recovery(lm: LensModel, task: ICLTask | str,
                             config: FunctionVectorConfig | None = None) -> ICLGainRecovery:
    """Todd et al.'s experiment on one task: the function vector built on dev items, added after
    block L at the last token of every zero-shot query of each split; the layer of highest dev
    accuracy is the one reported on held-out. Reads the model only.

    Raises:
        UserInputError: a layer out of range (before anything runs).
    """
    config = config or FunctionVectorConfig()
    task = load_icl_task(task) if isinstance(task, str) else task
    layers = _layers(lm, config.layers)
    fv = function_vector(lm, task, config)
    curves = {}
    for split in SPLITS:
        icl = icl_prompts(lm, task, _prompt_config(config, _capped(task, config, split, config.n_prompts)),
                          split=split)  # type: ignore[arg-type]
        curves[split] = vector_recovery(lm, icl, fv.values.cpu()[None].expand(len(layers), -1), layers, "add",
                                        seed=config.seed, token_budget=config.token_budget)
    result = _gain_recovery(lm, "function_vector", task, curves,
                            {**config.params(), "heads": list(fv.heads)})
    return result


def icl_gain_recovery(lm: LensModel, task: ICLTask | str, method: str = "task_vector",
                      config: Config | None = None) -> ICLGainRecovery:
    """Run a registered ICL-vector method (``"task_vector"``, ``"function_vector"``) on a task.

    Raises:
        UnknownNameError: an unknown method (the message lists the registered ones).
        UserInputError: a config of another method's type.
    """
    entry = ICL_VECTOR_METHODS.get(method)
    if config is not None and not isinstance(config, entry.config_type):
        raise UserInputError(f"method {method!r} takes a {entry.config_type.__name__}, not a {type(config).__name__}")
    return entry.function(lm, task, config)
