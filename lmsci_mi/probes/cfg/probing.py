"""DP-feature probes on a GPT trained on a synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1):
at every level and every layer, does the hidden state encode each token's NT ancestor and whether
the token ends an NT (the NT boundary)? Plain linear probes and the paper's multi-head linear
probe, on the trained model and on its random-weights twin (the baseline).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.data.cfg import CFGConfig, Grammar, build_grammar
from lmsci_mi.model import LensModel
from lmsci_mi.probes.cfg.attention import (
    AttentionTransitionConfig,
    CFGAttentionTransitions,
    cfg_attention_transitions,
)
from lmsci_mi.probes.cfg.bayes import bayes_accuracy
from lmsci_mi.probes.cfg.model import (
    CFGEvaluation,
    CFGModelConfig,
    CFGTraining,
    evaluate_cfg_model,
    load_cfg_model,
    random_cfg_model,
)
from lmsci_mi.probes.cfg.multihead import (
    MultiHeadProbeConfig,
    balanced_accuracy,
    fit_multihead_probes,
)
from lmsci_mi.probes.linear import ProbeConfig, Split, fit_probes
from lmsci_mi.results import ParamValue, Result, result_type
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "CFGProbeConfig",
    "CFGProbeTable",
    "cfg_hidden_states",
    "cfg_probe_table",
    "run_cfg_probes",
]

MODELS = ("trained", "random")
PROBES = ("linear", "multihead")
TARGETS = ("ancestor", "ancestor at NT end", "boundary")


@config
class CFGProbeConfig(Config):
    """What the CFG probes are fitted on and how.

    Splits are by sequence (60/20/20), so no test token shares a string with a training token.
    The multi-head probe trains on the train split's sequences and is scored on the test split's.
    """

    n_sequences: int = field(
        # 10 or more, to split 60/20/20
        default=400, metadata={"help": "sampled strings to probe on", "ge": 10}
    )
    seed: int = field(default=777, metadata={"help": "seed of the strings and the split"})
    multihead: bool = field(default=True, metadata={"help": "also fit the multi-head linear probe"})
    multihead_heads: int = field(
        default=4, metadata={"help": "heads of the multi-head probe", "ge": 1}
    )
    multihead_steps: int = field(
        default=200, metadata={"help": "Adam steps of the multi-head probe", "ge": 1}
    )
    l2_grid: tuple[float, ...] = field(
        default=(1e-4, 1e-3, 1e-2, 1e-1),
        metadata={"help": "L2 strengths for the linear probes", "ge": 0, "min_length": 1},
    )
    attention: bool = field(default=True, metadata={"help": "also measure attention transitions"})
    evaluate: bool = field(default=True, metadata={"help": "also measure accuracy and validity"})
    n_samples: int = field(
        default=500, metadata={"help": "generations for the validity check", "ge": 1}
    )


@result_type
class CFGProbeTable(Result):
    """Probe test accuracy, axes ``("level", "layer", "model", "probe", "target")``.

    ``level`` runs over the NT levels below the root (level 1 is the root's children, the last
    level the terminals' parents); ``layer`` 0 is the embeddings, layer ``l`` the residual stream
    after block ``l - 1``; ``model`` is trained / random (the same architecture untrained);
    ``probe`` is linear / multihead (NaN where not fitted); ``target`` is ancestor / boundary.

    Targets: the NT ancestor at every token; the NT ancestor at the tokens that end an NT of that
    level (where the paper finds it, and where a causal model can know it); the NT-boundary flag
    at every token.

    Attributes:
        balanced: the same axes, balanced accuracy (mean per-class recall: 50% for a constant
            guess on the boundary flag, which is True on only 1 in 3-20 tokens).
        majority: ``[level, target]`` majority-class test accuracy.
        ceiling: ``[level, target]`` the Bayes-optimal causal reader's test accuracy: the exact
            posterior given the tokens up to each one (:mod:`lmsci_mi.probes.cfg.bayes`). No
            probe of a causal model can beat it in expectation; the ancestor at a span's first
            tokens is often still ambiguous, so it is below 100% there.
        grammar: the grammar's rules, printed.
        training: the trained model's cost, None when it came from a cache made elsewhere.
        evaluation: next-token accuracy and generation validity (None when not measured).
        attention: the attention-transition result of the trained model (None when skipped).
        attention_random: the same for the random model.
    """

    balanced: Tensor = field(default_factory=lambda: torch.zeros(0))
    majority: Tensor = field(default_factory=lambda: torch.zeros(0))
    ceiling: Tensor = field(default_factory=lambda: torch.zeros(0))
    grammar: str = ""
    training: CFGTraining | None = None
    evaluation: CFGEvaluation | None = None
    attention: CFGAttentionTransitions | None = None
    attention_random: CFGAttentionTransitions | None = None

    def best(
        self, *, model: str = "trained", probe: str = "linear", balanced: bool = False
    ) -> Tensor:
        """``[level, target]`` accuracy (or balanced accuracy) at the best layer."""
        table = self.balanced if balanced else self.values
        values = table[:, :, MODELS.index(model), PROBES.index(probe)]
        return values.nan_to_num(-1.0).amax(1)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (level, layer, model, probe, target): ``value`` (test accuracy),
        ``balanced_accuracy``, ``majority`` (the majority-class accuracy of that level and
        target) and ``ceiling`` (the Bayes-optimal causal accuracy, NaN if not computed)."""
        frame = super().to_dataframe()
        frame["balanced_accuracy"] = self.balanced.detach().cpu().float().numpy().ravel()
        cells = (frame["level_index"], frame["target_index"])
        frame["majority"] = self.majority.detach().cpu().float().numpy()[cells]
        if self.ceiling.numel():
            frame["ceiling"] = self.ceiling.detach().cpu().float().numpy()[cells]
        else:
            frame["ceiling"] = float("nan")
        return frame

    def default_title(self, **options: object) -> str:
        return f"CFG DP-feature probes — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Accuracy against layer, one panel per (probe, target), one line per level and model."""
        import matplotlib.pyplot as plt

        # A probe that was not fitted (e.g. ``multihead=False``) gets no row of empty panels.
        fitted = [p for p in range(len(PROBES)) if not self.values[:, :, :, p].isnan().all()] or [0]
        fig, axes = plt.subplots(
            len(fitted),
            len(TARGETS),
            figsize=(10, 3.5 * len(fitted)),
            sharex=True,
            sharey=True,
            squeeze=False,
        )
        layers = self.axis_labels(1)
        colours = plt.get_cmap("viridis")
        n_levels = self.values.shape[0]
        for row, p in enumerate(fitted):
            probe = PROBES[p]
            for t, target in enumerate(TARGETS):
                ax = axes[row][t]
                for level in range(n_levels):
                    colour = colours(level / max(1, n_levels - 1))
                    for m, style in ((0, "-"), (1, ":")):
                        curve = self.values[level, :, m, p, t]
                        if curve.isnan().all():
                            continue
                        ax.plot(
                            range(len(layers)),
                            curve.numpy(),
                            style,
                            color=colour,
                            marker="o",
                            label=f"{self.axis_labels(0)[level]} ({MODELS[m]})",
                        )
                ax.set_title(f"{probe} probe, NT {target}")
                ax.set_xticks(range(len(layers)), layers, rotation=30)
                ax.set_ylim(0, 1.02)
                ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("test accuracy")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(title)
        fig.tight_layout()
        return fig


@torch.no_grad()
def cfg_hidden_states(
    lm: LensModel, tokens: Tensor, mask: Tensor, *, progress: bool = False
) -> Float[Tensor, "layer seq pos d_model"]:
    """The residual stream at every labelled position of whole sequences, for the embeddings and
    after every block, collected by :func:`~lmsci_mi.collect.collect_activations` and laid back
    out as ``[layer, seq, pos, d]`` (zeros at the BOS sink and the padding), since the
    multi-head probe mixes positions.

    Args:
        lm: the model.
        tokens: ``[seq, pos]`` BOS-first token ids, right-padded.
        mask: ``[seq, pos]`` True at the real tokens after BOS.
        progress: show the collection's progress bar.
    """
    names = [hook_name("resid_pre", 0)] + [
        hook_name("resid_post", layer) for layer in range(lm.cfg.n_layers)
    ]
    lengths = mask.sum(1) + 1
    sequences = [row[:n].tolist() for row, n in zip(tokens, lengths.tolist(), strict=True)]
    collected = collect_activations(
        lm, sequences, names, positions="all", config=CollectConfig(progress=progress)
    )
    hidden = torch.zeros(len(names), *tokens.shape, lm.cfg.d_model)
    hidden[:, collected.example, collected.position] = collected.stack().float()
    return hidden


def _token_split(rows: Tensor, split: Split) -> Split:
    """The split of labelled tokens that follows the split of their sequences (``rows``)."""
    return Split(
        *(
            torch.nonzero(torch.isin(rows, part)).flatten()
            for part in (split.train, split.val, split.test)
        )
    )


def _probe_models(
    models: dict[str, LensModel], grammar: Grammar, config: CFGProbeConfig, *, progress: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Accuracy and balanced accuracy ``[level, layer, model, probe, target]``, and the
    majority-class and Bayes-ceiling accuracies ``[level, target]``."""
    sample = grammar.sample(config.n_sequences, seed=config.seed)
    tokens, ancestors, boundaries, mask = sample.padded(bos=grammar.bos, pad=grammar.eos)
    seq_split = Split.random(config.n_sequences, seed=config.seed)
    levels = list(range(1, grammar.n_levels))
    # one task per (level, target): its labels and the tokens that carry them
    task_labels, task_masks = [], []
    for level in levels:
        ends = boundaries[..., level] & mask
        task_labels += [ancestors[..., level], ancestors[..., level], boundaries[..., level].long()]
        task_masks += [mask, ends, mask]
    labels, masks = torch.stack(task_labels), torch.stack(task_masks)
    n_layers = next(iter(models.values())).cfg.n_layers + 1
    shape = (len(levels), n_layers, len(MODELS), len(PROBES), len(TARGETS))
    accuracy, balanced = torch.full(shape, float("nan")), torch.full(shape, float("nan"))
    majority = torch.zeros(len(levels), len(TARGETS))
    probe_config = ProbeConfig(control=False, bootstrap=0, l2_grid=config.l2_grid, seed=config.seed)
    multihead_config = MultiHeadProbeConfig(
        heads=config.multihead_heads, steps=config.multihead_steps, seed=config.seed
    )
    bar = tqdm(
        total=len(MODELS) * (len(labels) + config.multihead),
        disable=not progress,
        desc="cfg probes",
    )
    for m, name in enumerate(MODELS):
        hidden = cfg_hidden_states(models[name], tokens, mask)  # [layer, seq, pos, d]
        for task in range(len(labels)):
            a, t = divmod(task, len(TARGETS))
            rows = torch.nonzero(masks[task])[:, 0]
            split = _token_split(rows, seq_split)
            flat, y = hidden[:, masks[task]], labels[task][masks[task]]
            fits, _ = fit_probes(flat, y, split, probe_config)
            majority[a, t] = fits[0].baseline
            n_classes = int(y.max()) + 1
            for layer, fit in enumerate(fits):
                accuracy[a, layer, m, 0, t] = fit.score
                guess = torch.tensor(fit.probe.classes)[
                    fit.probe.decision(flat[layer, split.test]).argmax(-1)
                ]
                balanced[a, layer, m, 0, t] = balanced_accuracy(guess, y[split.test], n_classes)
            bar.update()
        if config.multihead:
            fits = fit_multihead_probes(
                hidden, labels, masks, seq_split.train, seq_split.test, multihead_config
            )
            accuracy[:, :, m, 1] = fits.accuracy.T.reshape(
                len(levels), len(TARGETS), n_layers
            ).transpose(1, 2)
            balanced[:, :, m, 1] = fits.balanced_accuracy.T.reshape(
                len(levels), len(TARGETS), n_layers
            ).transpose(1, 2)
            bar.update()
    bar.close()
    ceilings = bayes_accuracy(grammar, sample, seq_split.test)
    ceiling = torch.stack([ceilings[target][1:] for target in TARGETS], -1).float()
    return accuracy, balanced, majority, ceiling


def cfg_probe_table(
    trained: LensModel,
    random: LensModel,
    grammar: Grammar,
    config: CFGProbeConfig | None = None,
    *,
    training: CFGTraining | None = None,
    progress: bool = False,
) -> CFGProbeTable:
    """Probe a trained CFG GPT and its random-weights twin at every level and layer.

    Also measures the trained model's next-token accuracy and generation validity, and both
    models' attention transitions, as ``config`` asks. Reads the models only.

    Args:
        trained, random: the trained GPT and the same architecture untrained.
        grammar: the grammar both were built for.
        config: the probing data and probes.
        training: the training record to keep in the result.
        progress: show a progress bar.

    >>> from lmsci_mi.data.cfg import CFGConfig, build_grammar
    >>> lm = random_cfg_model()
    >>> table = cfg_probe_table(lm, lm, build_grammar(CFGConfig()), CFGProbeConfig(
    ...     n_sequences=20, multihead=False, attention=False, evaluate=False))
    >>> table.values.shape, table.axes[1:]
    (torch.Size([2, 5, 2, 2, 3]), ('layer', 'model', 'probe', 'target'))
    """
    config = config if config is not None else CFGProbeConfig()
    values, balanced, majority, ceiling = _probe_models(
        {"trained": trained, "random": random}, grammar, config, progress=progress
    )
    evaluation = (
        evaluate_cfg_model(trained, grammar, n_samples=config.n_samples)
        if config.evaluate
        else None
    )
    attention = attention_random = None
    if config.attention:
        attention_config = AttentionTransitionConfig(seed=config.seed + 1)
        attention = cfg_attention_transitions(trained, grammar, attention_config)
        attention_random = cfg_attention_transitions(random, grammar, attention_config)
    levels = tuple(f"level {level}" for level in range(1, grammar.n_levels))
    layers = ("embed", *(f"after L{layer}" for layer in range(trained.cfg.n_layers)))
    params: dict[str, ParamValue] = dict(config.params())
    params.update({f"grammar.{k}": v for k, v in grammar.config.params().items()})
    return CFGProbeTable(
        values=values,
        axes=("level", "layer", "model", "probe", "target"),
        labels=(levels, layers, MODELS, PROBES, TARGETS),
        meta=trained.meta(
            data_source="cfg sampler (lmsci_mi.data.cfg)", seed=config.seed, params=params
        ),
        balanced=balanced,
        majority=majority,
        ceiling=ceiling,
        grammar=str(grammar),
        training=training,
        evaluation=evaluation,
        attention=attention,
        attention_random=attention_random,
    )


def run_cfg_probes(
    config: CFGProbeConfig | None = None,
    *,
    grammar_config: CFGConfig | None = None,
    model_config: CFGModelConfig | None = None,
    train: bool = False,
    progress: bool = False,
) -> CFGProbeTable:
    """Load (or train and cache) the CFG GPT, then probe it and its random twin
    (:func:`cfg_probe_table`). This is what ``lmsci-mi probe cfg`` runs.

    Args:
        config: the probing data and probes.
        grammar_config, model_config: the grammar and the GPT with its training run; together
            they key the cached weights.
        train: train the GPT when it is not cached (minutes on a CPU); False raises instead.
        progress: show progress bars.

    Raises:
        FileNotFoundError: the model is not cached and ``train`` is False.
    """
    config = config if config is not None else CFGProbeConfig()
    grammar_config = grammar_config if grammar_config is not None else CFGConfig()
    model_config = model_config if model_config is not None else CFGModelConfig()
    grammar = build_grammar(grammar_config)
    trained, training = load_cfg_model(grammar_config, model_config, train=train, progress=progress)
    random = random_cfg_model(grammar_config, model_config, device=trained.device)
    table = cfg_probe_table(trained, random, grammar, config, training=training, progress=progress)
    params = dict(table.meta.params)
    params.update({f"model.{k}": v for k, v in model_config.params().items()})
    return dataclasses.replace(table, meta=dataclasses.replace(table.meta, params=params))
