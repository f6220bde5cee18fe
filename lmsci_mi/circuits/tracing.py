"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", ROME).

A corruption (Gaussian noise on the subject's embeddings, symmetric token replacement after Zhang &
Nanda 2024, or a given prompt; see :mod:`lmsci_mi.circuits.corruption`) spoils the prediction; restoring one clean
hidden state (the residual stream after a layer, or the MLP / attention output over a window of
layers) at one position measures how much of the fact flows through that state (its indirect
effect). Severed kinds restore the stream while the MLP or attention outputs at that token stay
at their corrupted values in every layer (ROME Fig. 3). All noise samples and all positions of one restored layer run as one batch, resumed at the
restored layer from the shared corrupted run, so the layers below it are never recomputed.

Attention-sink pitfall (measured on SmolLM2): a model without BOS uses its first token as the
attention sink, and if that token is the subject, noising it breaks every head at once. lmsci-mi's
tokenisation puts a sink token at position 0, so the subject never includes it; this is asserted.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.circuits.corruption import CORRUPTIONS, METRIC_PROB, CleanRun, Corrupted
from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name
from lmsci_mi.stats import MaxSignFlipTest, sign_flip_max_test, sign_flip_test, standard_error
from lmsci_mi.sweep import BaseRun, Intervention, Row, SweepConfig, SweepStats, run_rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmsci_mi.hooks import Capture
    from lmsci_mi.model import LensModel

__all__ = [
    "PEAK_TEST_ALPHA",
    "SEVERED_KINDS",
    "TRACE_KINDS",
    "CausalTrace",
    "TraceConfig",
    "causal_trace",
    "embedding_std",
    "naive_causal_trace",
    "subject_embedding_std",
]

logger = logging.getLogger(__name__)

TRACE_KINDS = ("resid", "mlp", "attn")
"""What a trace can restore: the residual stream after a layer, or an MLP / attention output."""

SEVERED_KINDS = ("sever_mlp", "sever_attn")
"""The residual stream restored while the MLP (or attention) outputs at the restored token are held
at their corrupted values in every layer (ROME Fig. 3)."""

PEAK_TEST_ALPHA = 0.05
"""The level :meth:`CausalTrace.gap_test` and :meth:`CausalTrace.peak_test` are read at where a
caller accepts a traced peak (``traced_layer`` in ROME): each test's chance of passing its null."""

_KIND_SITE = {"resid": "resid_post", "mlp": "mlp_out", "attn": "attn_out"}
_SEVERED_SITE = {"sever_mlp": "mlp_out", "sever_attn": "attn_out"}
_KIND_CMAP = {
    "resid": "Purples",
    "mlp": "Greens",
    "attn": "Reds",
    "sever_mlp": "Purples",
    "sever_attn": "Purples",
}
_KIND_TITLE = {
    "resid": "the residual stream",
    "mlp": "MLP",
    "attn": "attention",
    "sever_mlp": "the residual stream, MLP severed",
    "sever_attn": "the residual stream, attention severed",
}
_METRIC_LABEL = {"prob": "p(target)", "logit_diff": "logit difference"}


@result_type
class CausalTrace(Result):
    """A causal trace: the metric when one state is restored from the clean run.

    ``values`` is ``[kind, layer, position]`` (axes ``("kind", "layer", "position")``): the metric
    (p(target) for Gaussian noise, the logit difference target − wrong for STR and a given
    corrupted prompt) averaged over the corrupted sequences. ``kind`` follows ``kinds`` (from
    ``("resid", "mlp", "attn", "sever_mlp", "sever_attn")``); positions are the prompt's tokens,
    sink included.

    Attributes:
        clean_prob: p(target) on the clean prompt.
        corrupted_prob: p(target) on the corrupted run, nothing restored (sample-averaged).
        subject_positions: token positions of the subject (never 0, the sink).
        target / target_id: the answer token.
        noise_scale: standard deviation of the noise added to each embedding coordinate (0
            without noise).
        window: number of layers restored together for "mlp" and "attn".
        kinds: the kinds along the first axis.
        noise: the noise used, ``[sample, subject_token, d_model]`` (reproduces the trace).
        work: what the sweep engine ran.
        corruption: the corruption's registered name (``gaussian``, ``str``, ``prompt``).
        metric: ``"prob"`` or ``"logit_diff"``.
        wrong / wrong_id: the competing answer of ``"logit_diff"`` ("" and -1 otherwise).
        corrupted_prompt: the corrupted text ("" for noise).
        clean_value / corrupted_value: the metric on the clean and the corrupted run.
        sample_values: the metric per corrupted sequence, ``[kind, layer, position, sample]``
            (``values`` is its mean), for standard errors.
        corrupted_samples: the corrupted run's metric per sequence, ``[sample]``.
    """

    clean_prob: float
    corrupted_prob: float
    subject_positions: tuple[int, ...]
    target: str
    target_id: int
    noise_scale: float
    window: int
    kinds: tuple[str, ...]
    noise: Tensor
    work: SweepStats
    corruption: str = "gaussian"
    metric: str = METRIC_PROB
    wrong: str = ""
    wrong_id: int = -1
    corrupted_prompt: str = ""
    clean_value: float | None = None
    corrupted_value: float | None = None
    sample_values: Tensor | None = None
    corrupted_samples: Tensor | None = None

    @property
    def clean_metric(self) -> float:
        """The metric on the clean run (p(target) for traces saved before metrics existed)."""
        return self.clean_prob if self.clean_value is None else self.clean_value

    @property
    def corrupted_metric(self) -> float:
        """The metric on the corrupted run, nothing restored."""
        return self.corrupted_prob if self.corrupted_value is None else self.corrupted_value

    def kind_values(self, kind: str) -> Float[Tensor, "layer position"]:
        """The ``[layer, position]`` map of one kind."""
        if kind not in self.kinds:
            raise UnknownNameError(f"kind {kind!r} was not traced; this trace has {self.kinds}")
        return self.values[self.kinds.index(kind)]

    def indirect_effect(self) -> Float[Tensor, "kind layer position"]:
        """``values - corrupted_metric``: how much restoring each state brings the answer back."""
        return self.values - self.corrupted_metric

    def peak_layer(self, kind: str = "mlp", position: int | None = None) -> int:
        """The layer whose restoration helps most at ``position`` (default: last subject token).

        ROME edits the MLP at (around) this layer for the MLP kind.
        """
        pos = self.subject_positions[-1] if position is None else position
        return int(self.kind_values(kind)[:, pos].argmax())

    def peak_effect(self, kind: str = "mlp", position: int | None = None) -> tuple[int, float, float]:
        """``(layer, effect, standard error)`` at :meth:`peak_layer`: the effect is the restored
        metric minus the corrupted one, its standard error that of the paired difference over the
        corrupted sequences (each restored run reuses its sequence's noise). With one sample (or a
        trace saved before samples were kept) the error is NaN."""
        pos = self.subject_positions[-1] if position is None else position
        layer = self.peak_layer(kind, pos)
        effect = float(self.kind_values(kind)[layer, pos]) - self.corrupted_metric
        if self.sample_values is None or self.corrupted_samples is None:
            return layer, effect, float("nan")
        restored = self.sample_values[self.kinds.index(kind), layer, pos]
        difference = (restored - self.corrupted_samples).double()
        return layer, effect, float(standard_error(difference.flatten()))

    def peak_test(
        self, kind: str = "mlp", position: int | None = None, *, n_flips: int = 10_000, seed: int = 0
    ) -> MaxSignFlipTest:
        """Is the peak over layers at ``position`` (default: last subject token) larger than the
        largest of the layers' effects would be with no effect at any layer?

        The paired differences (restored minus corrupted, per noise sample, every layer) go to
        :func:`~lmsci_mi.stats.sign_flip_max_test`: each sample's signs flip together in every
        layer, and the p-value is the share of flips whose largest layer mean reaches the observed
        peak. The peak is selected as the largest of ``n_layers`` correlated effects; comparing it
        with its own standard error (:meth:`peak_effect`) ignores that selection and passes data
        with no effect at all far more often than 5 % (tests/unit/test_stats.py). Exact (all
        ``2**n_samples`` flips, no seed) at ROME's 10 samples. A real effect passes however
        small, fact or not (docs/data/guard_null.json).

        Returns:
            A :class:`~lmsci_mi.stats.MaxSignFlipTest` over layers: ``argmax`` is the peak layer,
            ``statistic`` its effect; accept the peak where ``p_value <= PEAK_TEST_ALPHA``.

        Raises:
            ValueError: the trace kept no per-sample values (saved before they were) or has one
                noise sample.
        """
        pos = self.subject_positions[-1] if position is None else position
        self.kind_values(kind)  # raises on a kind not traced
        if self.sample_values is None or self.corrupted_samples is None:
            raise UserInputError("this trace kept no per-sample values; trace it again to test its peak")
        restored = self.sample_values[self.kinds.index(kind), :, pos]  # [layer, sample]
        differences = (restored - self.corrupted_samples).double().T  # [sample, layer]
        return sign_flip_max_test(differences, n_flips=n_flips, seed=seed)

    def gap_test(self, *, n_flips: int = 10_000, seed: int = 0) -> MaxSignFlipTest:
        """Does the corruption remove something: is the clean run's metric above the corrupted
        runs'?

        A trace locates what the noise destroys; where the clean run gives the target no more
        than the corrupted runs do, there is nothing to locate, and a peak is a restoration
        effect of no fact (docs/circuits.md, "The traced-layer guard"). The differences (clean
        metric minus each noise sample's corrupted metric) go to the one-sided
        :func:`~lmsci_mi.stats.sign_flip_test`: exact at ROME's 10 samples, where ``p = 1/1024``
        means every corrupted sample is below the clean run. It needs no restored run.

        Returns:
            A :class:`~lmsci_mi.stats.MaxSignFlipTest` with one test: ``statistic`` is the mean
            gap; a caller accepts a gap where ``p_value <= PEAK_TEST_ALPHA``.

        Raises:
            ValueError: the trace kept no per-sample values (saved before they were).
        """
        if self.corrupted_samples is None:
            raise UserInputError("this trace kept no per-sample values; trace it again to test its gap")
        differences = self.clean_metric - self.corrupted_samples.double()
        return sign_flip_test(differences, n_flips=n_flips, seed=seed)

    def default_title(self, **options: object) -> str:
        what = _METRIC_LABEL[self.metric]
        if self.metric != METRIC_PROB:
            what = f"{self.target!r} − {self.wrong!r} {what}"
        else:
            what = f"p({self.target!r})"
        return (
            f"Causal trace ({self.corruption}) of {what} — {self.meta.model}: clean "
            f"{self.clean_metric:.3f}, corrupted {self.corrupted_metric:.3f}"
        )

    def _draw(self, title: str) -> Figure:
        """Heatmaps in the style of Meng et al. (Figure 1): tokens down, layers across.

        Subject tokens are starred; each panel's colour bar is the metric.
        """
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        tokens = [
            f"{tok!r}*" if i in self.subject_positions else repr(tok)
            for i, tok in enumerate(self.axis_labels(2))
        ]
        layers = self.axis_labels(1)
        n = len(self.kinds)
        fig = Figure(figsize=(5.2 * n, 0.32 * len(tokens) + 2.2))
        grid = fig.subplots(1, n, squeeze=False)
        for i, kind in enumerate(self.kinds):
            label = _KIND_TITLE[kind]
            if kind in ("mlp", "attn") and self.window > 1:
                label += f" ({self.window}-layer window)"
            heatmap(
                grid[0][i],
                self.values[i].T,
                row_labels=tokens,
                col_labels=layers,
                row_name="token (* = subject)",
                col_name="restored layer",
                title=f"Restoring {label}",
                cmap=_KIND_CMAP[kind],
            )
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        return fig


@torch.no_grad()
def embedding_std(lm: LensModel, max_tokens: int = 8192) -> float:
    """Standard deviation of the token embeddings (as they enter the residual stream).

    Meng et al. use 3× the std of subject embeddings over a corpus; here the std is over an
    evenly spaced subset of the vocabulary, taken after the model's own embedding scaling (Gemma
    multiplies by sqrt(d_model)), so the noise is on the scale the blocks see.
    :func:`subject_embedding_std` is ROME's measure over a fact set.
    """
    vocab = lm.cfg.d_vocab
    step = max(1, vocab // max_tokens)
    ids = torch.arange(0, vocab, step, device=lm.device)
    return float(lm.model.embed(ids[None]).float().std())


@torch.no_grad()
def subject_embedding_std(lm: LensModel, prompts: Sequence[str], subjects: Sequence[str]) -> float:
    """ROME's noise unit: the std of the subject tokens' embeddings over a fact set.

    Every coordinate of every subject token (as found by ``lm.find_subject`` in its prompt, so a
    leading-space token counts) at the embedding hook, after the model's own embedding scaling.

    Args:
        prompts: the facts' prompts, subject written in.
        subjects: each prompt's subject.

    Returns:
        The standard deviation (Meng et al. noise the subject with 3 × this).

    >>> from lmsci_mi import load_model
    >>> subject_embedding_std(load_model("toy-2l"), ["The Eiffel Tower is in"], ["Eiffel Tower"]) > 0
    True
    """
    if not prompts or len(prompts) != len(subjects):
        raise UserInputError(
            f"give one subject per prompt and at least one ({len(prompts)} prompts, "
            f"{len(subjects)} subjects)"
        )
    rows = []
    for prompt, subject in zip(prompts, subjects, strict=True):
        positions = list(_validate_subject(lm, prompt, subject))
        ids = torch.tensor([lm.encode(prompt)], device=lm.device)
        rows.append(lm.model.embed(ids)[0, positions].float())
    return float(torch.cat(rows).std())


def _validate_subject(lm: LensModel, prompt: str, subject: str) -> tuple[int, ...]:
    positions = tuple(lm.find_subject(prompt, subject))
    # The sink at position 0 must never be noised: corrupting the attention sink breaks every
    # head and the trace then measures that, not the fact.
    if 0 in positions:
        raise UserInputError(
            f"subject {subject!r} covers position 0 (the attention sink) of {prompt!r}; "
            "causal tracing must not noise the sink"
        )
    return positions


@config
class TraceConfig(Config):
    """Parameters of a causal trace (ROME's defaults)."""

    target: str | None = field(
        default=None, metadata={"help": "answer token (default: clean top-1)"}
    )
    corruption: str = field(
        default="gaussian",
        metadata={
            "help": "how the prompt is corrupted",
            "choices": CORRUPTIONS.names(),
            **paper(
                "gaussian",
                "Meng et al. 2022 (ROME), code: experiments/causal_trace.py (--noise_level s3)",
            ),
        },
    )
    noise: float = field(
        default=3.0,
        metadata={
            "help": "noise std as a multiple of embedding_std",
            **paper(
                3.0,
                "Meng et al. 2022 (ROME), code: experiments/causal_trace.py --noise_level s3; "
                "the paper's App. B.1: ν = 3σ",
            ),
        },
    )
    noise_scale: float | None = field(
        default=None, metadata={"help": "absolute noise std (overrides --noise)"}
    )
    n_samples: int = field(
        default=10,
        metadata={
            "help": "noise samples, averaged",
            "ge": 1,
            **paper(10, "Meng et al. 2022 (ROME), code: experiments/causal_trace.py samples=10"),
        },
    )
    replacement: str | None = field(
        default=None,
        metadata={"help": "str: the subject put in place of --subject (same token count)"},
    )
    corrupted_prompt: str | None = field(
        default=None, metadata={"help": "prompt: the corrupted prompt (same token length)"}
    )
    wrong: str | None = field(
        default=None,
        metadata={
            "help": "str/prompt: competing answer of the logit difference "
            "(default: the corrupted run's top-1)"
        },
    )
    window: int = field(
        default=10,
        metadata={
            "help": "layers restored together for mlp and attn",
            "ge": 1,
            **paper(
                10,
                "Meng et al. 2022 (ROME), code: experiments/causal_trace.py "
                "trace_important_window, [l − 5, l + 5)",
            ),
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the noise"})
    last_subject_only: bool = field(
        default=False,
        metadata={
            "help": "restore the last subject token only (all ROME's layer choice reads; other "
            "positions keep the corrupted value)",
            # Not a flag: the AIE averages every token category of the trace it is given.
            "cli": False,
        },
    )
    kinds: tuple[str, ...] = field(
        default=TRACE_KINDS,
        metadata={
            "help": "what to restore",
            "choices": TRACE_KINDS + SEVERED_KINDS,
            "min_length": 1,
        },
    )
    sweep: SweepConfig = field(default_factory=SweepConfig, metadata={"cli": False})


def causal_trace(
    lm: LensModel, prompt: str, subject: str, config: TraceConfig | None = None
) -> CausalTrace:
    """Causal trace of ``prompt``'s prediction of the target through ``subject``'s tokens.
    Reads the model only (no weight changes; every hook is removed on return or error).

    Args:
        lm: the model.
        prompt: the fact's prompt, e.g. "The Eiffel Tower is located in the city of".
        subject: the subject as it appears in the prompt ("Eiffel Tower"); its tokens, leading
            space included, are found with ``lm.find_subject``.
        config: target, corruption (``gaussian``: noise 3 × :func:`embedding_std` in ROME;
            ``str`` with ``replacement``; ``prompt`` with ``corrupted_prompt``), samples, window
            (10 in ROME, centred on the layer), seed, kinds (:class:`TraceConfig`).

    Returns:
        A :class:`CausalTrace`; ``values[k, l, p]`` is the metric with state (k, l, p) restored.

    Raises:
        ValueError: subject not in the prompt, target not one token, bad kind or window, or
            a corrupted prompt not aligned token by token with the prompt.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> trace = causal_trace(lm, "The Eiffel Tower is in", "Eiffel Tower", TraceConfig(n_samples=2, window=1))
    >>> trace.values.shape, trace.subject_positions
    (torch.Size([3, 2, 7]), (2, 3, 4))
    """
    cfg = config or TraceConfig()
    corrupt = CORRUPTIONS.get(cfg.corruption).function
    subject_positions = _validate_subject(lm, prompt, subject)
    target_id, wrong_given = (
        None if t is None else lm.token_id(t) for t in (cfg.target, cfg.wrong)
    )
    tokens, n_layers = lm.to_tokens(prompt), lm.cfg.n_layers
    hooks, severed = _trace_hooks(cfg, n_layers)
    with torch.no_grad(), lm.hooks.capture([*hooks, hook_name("embed")]) as clean:
        clean_logits = lm(tokens)[:, -1]
    scale = float(cfg.noise_scale) if cfg.noise_scale is not None else cfg.noise * embedding_std(lm)
    run = CleanRun(prompt, subject, tokens, subject_positions, clean[hook_name("embed")])
    corrupted: Corrupted = corrupt(lm, run, cfg, scale)
    target_id = int(clean_logits[0].argmax()) if target_id is None else target_id
    captured = sorted({*hooks, *severed, _final_hook(n_layers)})
    base = BaseRun.record(
        lm, corrupted.tokens, capture=captured, interventions=corrupted.interventions
    )
    wrong_id = _wrong_id(lm, corrupted, base, wrong_given, target_id)
    readout = _readout(target_id, wrong_id, corrupted.metric)
    restored = subject_positions[-1:] if cfg.last_subject_only else range(subject_positions[0], base.n_pos)
    samples, work = _restorations(lm, base, clean, restored, readout, cfg)
    corrupted_samples = readout(base.logits[None]).reshape(-1).float().cpu()
    values = samples.mean(-1)
    method = f"Meng et al. 2022 causal tracing, {CORRUPTIONS.get(cfg.corruption).description}"
    params = {**cfg.params(), "subject": subject, "noise_scale": corrupted.noise_scale, "method": method}
    return CausalTrace(
        values=values,
        axes=("kind", "layer", "position"),
        labels=(cfg.kinds, tuple(str(i) for i in range(n_layers)), tuple(lm.to_str_tokens(prompt))),
        meta=lm.meta([prompt], seed=cfg.seed, data_source="user prompt", params=params),
        clean_prob=float(clean_logits[0].float().softmax(-1)[target_id]),
        corrupted_prob=float(base.logits.float().softmax(-1)[:, target_id].mean()),
        subject_positions=subject_positions,
        target=_decode(lm, target_id),
        target_id=target_id,
        noise_scale=corrupted.noise_scale,
        window=cfg.window,
        kinds=cfg.kinds,
        noise=corrupted.noise,
        work=work,
        corruption=cfg.corruption,
        metric=corrupted.metric,
        wrong=_decode(lm, wrong_id) if wrong_id >= 0 else "",
        wrong_id=wrong_id,
        corrupted_prompt=corrupted.corrupted_prompt,
        clean_value=float(readout(clean_logits[None]).mean()),
        corrupted_value=float(corrupted_samples.mean()),
        sample_values=samples,
        corrupted_samples=corrupted_samples,
    )


def _trace_hooks(cfg: TraceConfig, n_layers: int) -> tuple[list[str], list[str]]:
    """The hooks restored (clean values captured) and held by severing (corrupted values)."""
    kinds, window = cfg.kinds, cfg.window
    restored = {
        h
        for k in kinds
        for layer in range(n_layers)
        for h in _restored_hooks(k, layer, window, n_layers)
    }
    held = {
        hook_name(_SEVERED_SITE[k], layer)
        for k in kinds
        if k in _SEVERED_SITE
        for layer in range(n_layers)
    }
    return sorted(restored), sorted(held)


def _wrong_id(
    lm: LensModel, corrupted: Corrupted, base: BaseRun, given: int | None, target_id: int
) -> int:
    """The logit difference's competing answer: given, else the corrupted run's top-1 (-1: none)."""
    if corrupted.metric == METRIC_PROB:
        return -1
    wrong_id = int(base.logits[0].argmax()) if given is None else given
    if wrong_id == target_id:
        raise UserInputError(
            f"the corrupted run still predicts the target {_decode(lm, target_id)!r}: the logit "
            "difference needs another answer; give --wrong or a corruption that changes the answer"
        )
    return wrong_id


def _decode(lm: LensModel, token: int) -> str:
    return lm.tokenizer.decode([token]) if lm.tokenizer is not None else str(token)


def _readout(target_id: int, wrong_id: int, metric: str) -> Callable[[Tensor], Tensor]:
    """The metric from logits ``[row, batch, vocab]``: p(target), or logit(target) − logit(wrong)."""
    if metric == METRIC_PROB:
        return lambda logits: logits.float().softmax(-1)[..., target_id]
    return _LogitDiff(target_id, wrong_id)


@dataclass(frozen=True)
class _LogitDiff:
    """logit(target) − logit(wrong), from logits or (cheaper) from final residual vectors."""

    target_id: int
    wrong_id: int

    def __call__(self, logits: Tensor) -> Tensor:
        return (logits[..., self.target_id] - logits[..., self.wrong_id]).float()

    def from_final(self, lm: LensModel, resid: Float[Tensor, "... d_model"]) -> Tensor:
        """The same from the last block's output: final norm, two unembedding columns, soft cap."""
        ids = [self.target_id, self.wrong_id]
        logits = readout.logits(lm, resid, space="resid", norm="live", token_ids=ids)
        return (logits[..., 0] - logits[..., 1]).float()


def _final_hook(n_layers: int) -> str:
    return hook_name("resid_post", n_layers - 1)


def _restored_hooks(kind: str, layer: int, window: int, n_layers: int) -> list[str]:
    """The hooks restored for one cell: the stream leaving ``layer``, or a window of outputs."""
    if kind == "resid" or kind in _SEVERED_SITE:
        # resid_post of layer l is resid_pre of layer l + 1: rows then start one block later.
        return [
            hook_name("resid_pre", layer + 1)
            if layer + 1 < n_layers
            else hook_name("resid_post", layer)
        ]
    return [hook_name(_KIND_SITE[kind], inner) for inner in _window(layer, window, n_layers)]


def _row(
    kind: str, layer: int, mask: Tensor, clean: Capture, base: BaseRun, window: int, n_layers: int
) -> Row:
    """Restore (kind, layer) where ``mask``; a severed kind also holds the MLP or attention output
    there at its corrupted value in every layer (ROME's second pass: the base run is the first).

    The held outputs equal the base run's, so they never move a row's start layer; those below the
    restored layer are identities and those above cut the clean state's path through that module.
    """
    restored = [
        Intervention(h, clean[h], mask) for h in _restored_hooks(kind, layer, window, n_layers)
    ]
    if kind in _SEVERED_SITE:
        held = [hook_name(_SEVERED_SITE[kind], inner) for inner in range(n_layers)]
        restored += [Intervention(h, base.acts[h], mask) for h in held]
    return Row(tuple(restored))


@torch.no_grad()
def _restorations(
    lm: LensModel,
    base: BaseRun,
    clean: Capture,
    positions: Sequence[int],
    readout: Callable[[Tensor], Tensor],
    cfg: TraceConfig,
) -> tuple[Float[Tensor, "kind layer position sample"], SweepStats]:
    """The metric with each (kind, layer, position) restored, per corrupted sequence: the
    planner's rows, run by the engine.

    Positions before the subject never see the corruption (causal attention), so restoring them
    is a no-op: they keep the corrupted value and get no row; so do positions not in
    ``positions``.
    """
    n_layers, n_pos = lm.cfg.n_layers, base.n_pos
    rows, cells = [], []
    for k, kind in enumerate(cfg.kinds):
        for layer in range(n_layers):
            for pos in positions:
                mask = torch.zeros(1, n_pos, 1, dtype=torch.bool, device=lm.device)
                mask[:, pos] = True
                rows.append(_row(kind, layer, mask, clean, base, cfg.window, n_layers))
                cells.append((k, layer, pos))
    if isinstance(readout, _LogitDiff):
        # The metric reads two logits: take each row's final stream and unembed two columns,
        # not the vocabulary (Gemma's 262k-token unembedding costs as much as its blocks here).
        out = run_rows(lm, base, rows, None, cfg.sweep, capture=[_final_hook(n_layers)])
        per_row = readout.from_final(lm, out.captured[_final_hook(n_layers)][:, :, -1])
    else:
        out = run_rows(lm, base, rows, readout, cfg.sweep)
        per_row = out.values
    corrupted = readout(base.logits[None]).reshape(-1).float().cpu()
    values = corrupted.repeat(len(cfg.kinds), n_layers, n_pos, 1)
    index = torch.tensor(cells).T
    values[index[0], index[1], index[2]] = per_row.reshape(len(cells), -1).float().cpu()
    return values, out.stats


def _window(layer: int, window: int, n_layers: int) -> range:
    """Layers restored together around ``layer`` (ROME: ``[l - w//2, l + ceil(w/2))``, clipped)."""
    return range(max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))


def _noise(clean_embed: Tensor, subject: Sequence[int], eps: Tensor) -> Intervention:
    """The corruption: the clean embeddings with ``eps`` added over the subject, per sample."""
    source = clean_embed.expand(eps.shape[0], -1, -1).clone()
    source[:, list(subject)] += eps.to(source)
    return Intervention(hook_name("embed"), source, torch.ones(1, 1, 1, dtype=torch.bool))


def naive_causal_trace(
    lm: LensModel, trace: CausalTrace, layers: Sequence[int] | None = None
) -> Float[Tensor, "kind layer position"]:
    """Reference implementation: one full forward pass (all noise samples) per restoration.

    Uses the trace's own noise, so it must reproduce ``trace.values``; it is the slow baseline
    that tests and ``benchmarks/patching.py`` compare the engine with, never for analysis.
    """
    if trace.corruption != "gaussian" or set(trace.kinds) - set(TRACE_KINDS):
        raise UserInputError(
            "naive_causal_trace reproduces Gaussian-noise traces of resid/mlp/attn only"
        )
    tokens = lm.to_tokens(trace.meta.prompts[0])
    n_layers, n_pos = lm.cfg.n_layers, tokens.shape[1]
    layer_list = list(range(n_layers)) if layers is None else list(layers)
    hooks = sorted(
        {
            h
            for kind in trace.kinds
            for layer in layer_list
            for h in _restored_hooks(kind, layer, trace.window, n_layers)
        }
    )
    out = torch.empty(len(trace.kinds), len(layer_list), n_pos)
    with torch.no_grad():
        with lm.hooks.capture([*hooks, hook_name("embed")]) as clean:
            lm(tokens)
        noise = _noise(clean[hook_name("embed")], trace.subject_positions, trace.noise)
        batch = tokens.expand(trace.noise.shape[0], n_pos)
        with lm.hooks.patch(noise.hook, noise.source, positions=list(trace.subject_positions)):
            for (k, kind), (li, layer), pos in itertools.product(
                enumerate(trace.kinds), enumerate(layer_list), range(n_pos)
            ):
                with ExitStack() as stack:
                    for name in _restored_hooks(kind, layer, trace.window, n_layers):
                        stack.enter_context(lm.hooks.patch(name, clean[name], positions=[pos]))
                    logits = lm(batch)[:, -1]
                out[k, li, pos] = logits.float().softmax(-1)[:, trace.target_id].mean()
    return out
