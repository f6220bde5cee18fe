"""The key-value agreement curve (Geva et al. 2021, "Transformer Feed-Forward Layers Are Key-Value
Memories", §4): how often a value vector's top tokens contain the next token of its key's trigger
examples, per layer, against a shuffled baseline (each value paired with another neuron's triggers).

Geva found agreement near chance in the lower layers, rising in the upper layers. Here the sign is
kept: a trigger with a negative coefficient (gated MLPs) is checked against the value's bottom tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Bool
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.knowledge.triggers import (
    SIGNS,
    TopCoefficients,
    TriggerConfig,
    text_sequences,
    top_coefficients,
)
from lmsci_mi.knowledge.values import value_directions, vocab_projection
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import binomial_standard_error

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmsci_mi.model import LensModel

__all__ = ["AgreementConfig", "KeyValueAgreement", "key_value_agreement"]

_SERIES = ("agreement", "shuffled")


@config
class AgreementConfig(Config):
    """Neurons sampled, triggers and tokens compared, and the text."""

    neurons_per_layer: int = field(
        default=64, metadata={"help": "neurons sampled per layer", "ge": 1}
    )
    layers: tuple[int, ...] = field(default=(), metadata={"help": "layers (default: all)", "ge": 0})
    n_triggers: int = field(default=5, metadata={"help": "top trigger examples per key", "ge": 1})
    top_k: int = field(
        default=10, metadata={"help": "value tokens a next token must be among", "ge": 1}
    )
    sign: str = field(
        default="magnitude", metadata={"help": "rank coefficients by", "choices": SIGNS}
    )
    n_shuffles: int = field(
        default=10, metadata={"help": "random pairings averaged for the baseline", "ge": 1}
    )
    n_tokens: int = field(default=32768, metadata={"help": "tokens of the bundled text", "ge": 1})
    seq_len: int = field(default=128, metadata={"help": "row length of the bundled text", "ge": 2})
    token_budget: int = field(default=8192, metadata={"help": "tokens per forward pass", "ge": 1})
    seed: int = field(default=0, metadata={"help": "seed of the neuron sample and the shuffles"})
    progress: bool = field(default=False, metadata={"help": "show a progress bar", "cli": False})


@result_type
class KeyValueAgreement(Result):
    """Agreement rate per layer: ``values[series, layer]`` with series ``agreement`` (each value with
    its own key's triggers) and ``shuffled`` (with another sampled neuron's triggers, same layer).

    Attributes:
        stderr: ``[series, layer]`` binomial standard error ``sqrt(p (1 - p) / n)`` over the
            (neuron, trigger) pairs, which treats the pairs as independent (triggers of one
            neuron are correlated, so it is a lower bound).
        n_pairs: ``[layer]`` (neuron, trigger) pairs compared.
        layers: the layers along axis 1.
        neurons: ``[layer, neuron]`` the sampled neuron indices.
        hits: ``[layer, neuron, trigger]`` 1 where the trigger's next token is among the value's
            tokens, 0 where not, NaN where the neuron had fewer triggers.
        top_k, n_triggers, sign: the comparison's settings.
    """

    stderr: Tensor
    n_pairs: Tensor
    layers: tuple[int, ...]
    neurons: Tensor
    hits: Tensor
    top_k: int
    n_triggers: int
    sign: str

    def summary(self, rows: int = 40) -> str:
        """One line per layer: agreement and shuffled baseline, each with its standard error."""
        lines = [
            f"Key-value agreement on {self.meta.model}: next token of a key's top {self.n_triggers} "
            f"triggers among its value's top {self.top_k} tokens ({self.meta.data_source})",
            f"{'layer':>5} {'agreement':>16} {'shuffled':>16} {'pairs':>6}",
        ]
        for i, layer in enumerate(self.layers[:rows]):
            a, s = (float(self.values[j, i]) for j in range(2))
            ea, es = (float(self.stderr[j, i]) for j in range(2))
            lines.append(
                f"{layer:>5} {a:>9.3f} ± {ea:.3f} {s:>9.3f} ± {es:.3f} {int(self.n_pairs[i]):>6}"
            )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Key-value agreement (Geva 2021 §4) — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Agreement and the shuffled baseline against layer, with ±1 standard error bars."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(7, 4))
        ax = fig.subplots()
        for j, name in enumerate(_SERIES):
            ax.errorbar(
                list(self.layers),
                self.values[j].numpy(),
                yerr=self.stderr[j].numpy(),
                marker="o",
                markersize=3,
                capsize=2,
                label=name,
                linestyle="-" if j == 0 else ":",
            )
        ax.set_xlabel("layer")
        ax.set_ylabel(f"next token in the value's top {self.top_k}")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig


def _sampled(lm: LensModel, layers: Sequence[int], n: int, seed: int) -> dict[int, list[int]]:
    d_mlp = int(lm.cfg.d_mlp or 0)
    out = {}
    for layer in layers:
        generator = torch.Generator().manual_seed(seed * 100_003 + layer)
        out[layer] = sorted(torch.randperm(d_mlp, generator=generator)[: min(n, d_mlp)].tolist())
    return out


def _value_sets(lm: LensModel, layer: int, neurons: Sequence[int], k: int) -> tuple[Tensor, Tensor]:
    """Per neuron, its value's top-k and bottom-k token ids (normed projection)."""
    tops, bottoms = [], []
    for start in range(0, len(neurons), 64):
        logits = vocab_projection(lm, value_directions(lm, layer, neurons[start : start + 64]))
        tops.append(logits.topk(k, dim=-1).indices.cpu())
        bottoms.append(logits.topk(k, dim=-1, largest=False).indices.cpu())
    return torch.cat(tops), torch.cat(bottoms)


def _hits(
    nxt: Tensor,
    negative: Bool[Tensor, "neuron trigger"],
    top: Tensor,
    bottom: Tensor,
    pairing: Tensor,
) -> Tensor:
    """Whether value j's tokens (bottom ones for a negative trigger) hold the next token of the
    triggers of neuron ``pairing[j]``: 1/0, NaN for missing triggers."""
    t, neg = nxt[pairing], negative[pairing]
    in_top = (t[:, :, None] == top[:, None, :]).any(-1)
    in_bottom = (t[:, :, None] == bottom[:, None, :]).any(-1)
    hit = torch.where(neg, in_bottom, in_top).float()
    return hit.masked_fill(t < 0, torch.nan)


def _next_tokens(sequences: Sequence[Sequence[int]], top: TopCoefficients) -> Tensor:
    """The token after each trigger (-1 where the neuron had no trigger)."""
    out = torch.full_like(top.text, -1)
    for j in range(top.text.shape[0]):
        for r in range(top.text.shape[1]):
            t = int(top.text[j, r])
            if t >= 0:
                out[j, r] = sequences[t][int(top.position[j, r]) + 1]
    return out


def _layer_rates(
    lm: LensModel,
    layer: int,
    neurons: Sequence[int],
    nxt: Tensor,
    negative: Tensor,
    cfg: AgreementConfig,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, int, Tensor]:
    """One layer's agreement and shuffled rates, their standard errors, pairs and hits."""
    top_ids, bottom_ids = _value_sets(lm, layer, neurons, cfg.top_k)
    m = len(neurons)
    own = _hits(nxt, negative, top_ids, bottom_ids, torch.arange(m))
    shuffled = []
    for _ in range(cfg.n_shuffles):
        order = torch.randperm(m, generator=generator)
        pairing = torch.empty(m, dtype=torch.long)
        pairing[order] = order.roll(-1)  # one cycle: no value keeps its own triggers
        shuffled.append(_hits(nxt, negative, top_ids, bottom_ids, pairing))
    n = int((~own.isnan()).sum())
    if n == 0:
        nan = torch.full((2,), torch.nan)
        return nan, nan, 0, own
    rates = torch.stack([own.nanmean(), torch.stack(shuffled).nanmean()]).float()
    errors = binomial_standard_error(rates, n)
    return rates, errors, n, own


def _trigger_config(cfg: AgreementConfig) -> TriggerConfig:
    """The trigger search the agreement reads: each text's last token left out (it has no next
    token to compare with the value's top tokens)."""
    return TriggerConfig(
        n_examples=cfg.n_triggers,
        sign=cfg.sign,
        n_tokens=cfg.n_tokens,
        seq_len=cfg.seq_len,
        skip_last=True,
        token_budget=cfg.token_budget,
        progress=cfg.progress,
    )


@torch.no_grad()
def key_value_agreement(
    lm: LensModel, texts: Sequence[str] | None = None, config: AgreementConfig | None = None
) -> KeyValueAgreement:
    """Geva 2021's key-value agreement per layer, with a shuffled baseline. Reads the model only.

    Args:
        lm: the model.
        texts: the text set for the trigger examples; None reads ``config.n_tokens`` of the bundled
            stdlib text.
        config: sampling, triggers, top-k, shuffles (:class:`AgreementConfig`).

    Returns:
        :class:`KeyValueAgreement`.

    Raises:
        ValueError: an unknown layer, no texts or a blank text.

    >>> from lmsci_mi import load_model
    >>> kv = key_value_agreement(load_model("toy-2l"), ["The cat sat on the mat today"],
    ...                          AgreementConfig(neurons_per_layer=8, n_triggers=2, n_shuffles=2))
    >>> tuple(kv.values.shape), kv.layers
    ((2, 2), (0, 1))
    """
    cfg = config or AgreementConfig()
    layers = cfg.layers or tuple(range(lm.cfg.n_layers))
    bad = [layer for layer in layers if layer >= lm.cfg.n_layers]
    if bad:
        raise UserInputError(
            f"layer {bad[0]} does not exist: {lm.name} has layers 0..{lm.cfg.n_layers - 1}"
        )
    trig = _trigger_config(cfg)
    sequences, source = text_sequences(lm, texts, trig)
    neurons = _sampled(lm, layers, cfg.neurons_per_layer, cfg.seed)
    tops = top_coefficients(lm, sequences, neurons, trig)
    values, errors, pairs, all_hits = [], [], [], []
    for layer in layers:
        top = tops[layer]
        rates, error, n, hits = _layer_rates(
            lm,
            layer,
            neurons[layer],
            _next_tokens(sequences, top),
            top.coefficient < 0,
            cfg,
            # per layer, so a layer's numbers do not depend on which layers ran with it
            torch.Generator().manual_seed(cfg.seed * 100_003 + layer + 1),
        )
        values.append(rates)
        errors.append(error)
        pairs.append(n)
        all_hits.append(hits)
    return KeyValueAgreement(
        values=torch.stack(values, dim=1),
        axes=("series", "layer"),
        labels=(_SERIES, tuple(str(layer) for layer in layers)),
        meta=lm.meta(
            tuple(texts or ()),
            seed=cfg.seed,
            data_source=source,
            params={
                **cfg.params(),
                "method": "Geva et al. 2021 §4 key-value agreement, sign-aware",
            },
        ),
        stderr=torch.stack(errors, dim=1),
        n_pairs=torch.tensor(pairs),
        layers=tuple(layers),
        neurons=torch.tensor([neurons[layer] for layer in layers]),
        hits=torch.stack(all_hits),
        top_k=cfg.top_k,
        n_triggers=cfg.n_triggers,
        sign=cfg.sign,
    )
