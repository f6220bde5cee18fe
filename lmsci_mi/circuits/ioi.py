"""The indirect-object-identification circuit (Wang et al. 2022, "Interpretability in the Wild").

Finds name movers and negative name movers (direct logit attribution to IO − S at END, attention
from END to IO and S), S-inhibition heads (path patching from the ABC run into the name movers'
queries), induction and duplicate-token heads (attention at S2) and previous-token heads (at S1+1),
then measures faithfulness by mean-ablating every head outside the circuit over the ABC prompts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from lmsci_mi.data.ioi import IOIBatch, IOIDataset, ioi_dataset
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "IOI_ROLES",
    "CircuitHead",
    "IOICircuit",
    "find_ioi_circuit",
    "ioi_logit_diff",
    "mean_ablated_logit_diff",
    "path_patch_to_queries",
]

log = logging.getLogger(__name__)

IOI_ROLES: tuple[str, ...] = (
    "name_mover",
    "negative_name_mover",
    "s_inhibition",
    "induction",
    "duplicate_token",
    "previous_token",
)

Head = tuple[int, int]


@dataclass(frozen=True)
class CircuitHead:
    """One head of the circuit with its evidence (averages over all prompts).

    Attributes:
        role: one of :data:`IOI_ROLES`.
        dla: direct logit attribution to logit(IO) − logit(S) at END (nats).
        attn_end_io / attn_end_s: attention from END to the IO token / to both S tokens.
        path_patching: relative change of the logit difference when this head's output (from the
            ABC run) reaches only the name movers' queries; NaN when not measured.
        score: the class's own score: attention S2→S1+1 (induction), S2→S1 (duplicate token),
            S1+1→S1 (previous token); the DLA for movers; the path-patching effect for
            S-inhibition.
    """

    layer: int
    head: int
    role: str
    dla: float
    attn_end_io: float
    attn_end_s: float
    path_patching: float
    score: float

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.head}"


@result_type
class IOICircuit(Result):
    """The IOI circuit found in one model: ``values`` is the DLA ``[layer, head]``.

    Attributes:
        heads: the circuit's heads, by role, with evidence.
        logit_diffs: per prompt, logit(IO) − logit(S) at END, clean model.
        logit_diff: their mean; ``fraction_positive``: share of prompts above 0.
        attn_end_io, attn_end_s, induction_s2, duplicate_s2, previous_s1_plus_1: ``[layer, head]``
            attention evidence; ``path_patching``: ``[layer, head]`` relative effect on the
            logit difference via the name movers' queries (NaN where not tested).
        logit_diff_circuit: mean logit difference with every head outside the circuit
            mean-ablated over the ABC prompts; ``faithfulness`` = that / ``logit_diff``.
        logit_diff_without_name_movers: with only the name movers mean-ablated;
            ``name_mover_removed`` = 1 − that / ``logit_diff``.
    """

    heads: tuple[CircuitHead, ...] = ()
    logit_diffs: Tensor | None = None
    logit_diff: float = 0.0
    fraction_positive: float = 0.0
    attn_end_io: Tensor | None = None
    attn_end_s: Tensor | None = None
    induction_s2: Tensor | None = None
    duplicate_s2: Tensor | None = None
    previous_s1_plus_1: Tensor | None = None
    path_patching: Tensor | None = None
    logit_diff_circuit: float = 0.0
    faithfulness: float = 0.0
    logit_diff_without_name_movers: float = 0.0
    name_mover_removed: float = 0.0

    def heads_of(self, role: str) -> tuple[Head, ...]:
        """``(layer, head)`` of every circuit head with this role."""
        if role not in IOI_ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {IOI_ROLES}")
        return tuple((h.layer, h.head) for h in self.heads if h.role == role)

    def summary(self) -> str:
        """A few lines: heads by class, logit difference, ablations."""
        lines = [
            f"logit diff {self.logit_diff:.2f} (positive for {100 * self.fraction_positive:.0f}% "
            f"of {len(self.meta.prompts)} prompts)"
        ]
        for role in IOI_ROLES:
            heads = [h for h in self.heads if h.role == role]
            shown = ", ".join(f"{h.name} ({h.score:+.2f})" for h in heads) or "none"
            lines.append(f"{role:>20}: {shown}")
        lines.append(
            f"name movers mean-ablated: logit diff {self.logit_diff_without_name_movers:.2f} "
            f"({100 * self.name_mover_removed:.0f}% removed)"
        )
        lines.append(
            f"circuit only (all other heads mean-ablated): logit diff "
            f"{self.logit_diff_circuit:.2f}, faithfulness {100 * self.faithfulness:.0f}%"
        )
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """DLA heatmap with circuit heads marked by the initial of their class."""
        import matplotlib.pyplot as plt

        from lmsci_mi.viz.plots import heatmap, save_figure

        n_layers, n_heads = self.values.shape
        fig, ax = plt.subplots(figsize=(max(5, 0.6 * n_heads + 2), max(4, 0.25 * n_layers + 1.5)))
        heatmap(
            ax, self.values, row_labels=self.axis_labels(0), col_labels=self.axis_labels(1),
            row_name="layer", col_name="head",
            title=title or f"IOI: DLA to IO − S at END — {self.meta.model}",
        )
        marks = {"name_mover": "N", "negative_name_mover": "−N", "s_inhibition": "SI",
                 "induction": "I", "duplicate_token": "D", "previous_token": "P"}
        for h in self.heads:
            ax.text(h.head, h.layer, marks[h.role], ha="center", va="center", fontsize=7,
                    color="black", fontweight="bold")
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


# --------------------------------------------------------------------------- measurements


def ioi_logit_diff(
    logits: Float[Tensor, "n pos vocab"], batch: IOIBatch
) -> Float[Tensor, " n"]:
    """logit(IO) − logit(S) at END, per prompt."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    end_logits = logits[rows, batch.end.to(logits.device)]
    return (
        end_logits[rows, batch.io_token.to(logits.device)]
        - end_logits[rows, batch.s_token.to(logits.device)]
    ).float()


def _clean_and_abc_z(lm: LensModel, batch: IOIBatch) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Every head's output (``hook_z``) on the clean prompts and on their ABC corruptions."""
    names = _z_names(lm)
    runs = []
    for tokens in (batch.tokens, batch.abc_tokens):
        with lm.hooks.capture(names) as cap:
            lm.model(tokens)
        runs.append({n: cap[n] for n in names})
    return runs[0], runs[1]


def _z_names(lm: LensModel) -> list[str]:
    return [f"blocks.{layer}.attn.hook_z" for layer in range(lm.cfg.n_layers)]


def _layer_of(name: str) -> int:
    return int(name.split(".")[1])


@torch.no_grad()
def mean_ablated_logit_diff(
    lm: LensModel,
    batch: IOIBatch,
    keep: Sequence[Head] | None = None,
    ablate: Sequence[Head] | None = None,
) -> Float[Tensor, " n"]:
    """Logit difference with heads mean-ablated (``hook_z``, mean over the batch's ABC prompts at
    each position). Give either the heads to ``keep`` (all others ablated) or those to
    ``ablate``. Hooks go through the registry; the model is unchanged afterwards.
    """
    if (keep is None) == (ablate is None):
        raise ValueError("give exactly one of keep= or ablate=")
    means = lm.hooks.mean_activations(_z_names(lm), batch.abc_tokens)
    n_layers, n_heads = lm.cfg.n_layers, lm.cfg.n_heads
    ablated = torch.zeros(n_layers, n_heads, dtype=torch.bool)
    if keep is not None:
        ablated[:] = True
        for layer, head in keep:
            ablated[layer, head] = False
    else:
        for layer, head in ablate or ():
            ablated[layer, head] = True
    hooks = []
    for layer in range(n_layers):
        if not ablated[layer].any():
            continue
        mask = ablated[layer].to(lm.device)[None, None, :, None]

        def replace(z: Tensor, hook: HookPoint, mask: Tensor = mask) -> Tensor:
            return torch.where(mask, means[hook.name or ""].to(z.dtype), z)

        hooks.append((f"blocks.{layer}.attn.hook_z", replace))
    with lm.hooks.hooks(fwd=hooks, label="IOI mean ablation"):
        logits = lm.model(batch.tokens)
    return ioi_logit_diff(logits, batch)


@torch.no_grad()
def path_patch_to_queries(
    lm: LensModel,
    batch: IOIBatch,
    sender: Head,
    receivers: Sequence[Head],
    *,
    clean_z: dict[str, Tensor] | None = None,
    abc_z: dict[str, Tensor] | None = None,
) -> Float[Tensor, " n"]:
    """Path patching (Wang et al. 2022): the sender's output comes from the ABC run and reaches
    only the receivers' queries at END; returns the resulting logit difference per prompt.

    Two steps, all through the hook registry:
      1. run the clean prompts with the sender's ``hook_z`` taken from the ABC run and every
         other head's ``hook_z`` frozen at its clean value, and record the receivers' queries
         (``hook_q``, computed from the residual stream that step produces);
      2. run the clean prompts again with only those receivers' ``hook_q`` at END replaced.
    A head's query is a function of its query input alone, so patching ``hook_q`` equals patching
    ``hook_q_input`` (which fires only with ``use_split_qkv_input``, a model setting we do not
    change). MLPs are recomputed in step 1, as in the paper (only heads are frozen).
    """
    names = _z_names(lm)
    if clean_z is None or abc_z is None:
        clean_z, abc_z = _clean_and_abc_z(lm, batch)
    s_layer, s_head = sender
    top = max(layer for layer, _ in receivers)
    if s_layer >= top:
        raise ValueError(f"sender {s_layer}.{s_head} is not below the receivers' layers")

    def freeze(activation: Tensor, hook: HookPoint) -> Tensor:
        name = hook.name or ""
        frozen = clean_z[name].clone()
        if _layer_of(name) == s_layer:
            frozen[:, :, s_head] = abc_z[name][:, :, s_head]
        return frozen

    q_sites = sorted({f"blocks.{layer}.attn.hook_q" for layer, _ in receivers})
    with lm.hooks.hooks(fwd=[(names[:top], freeze)], label="path patch: freeze"), \
            lm.hooks.capture(q_sites) as q_cap:
        lm.model(batch.tokens, stop_at_layer=top + 1)
    with ExitStack() as stack:
        for site in q_sites:
            layer = _layer_of(site)
            heads = [h for lyr, h in receivers if lyr == layer]
            stack.enter_context(
                lm.hooks.patch(site, q_cap[site], positions=batch.end, heads=heads)
            )
        logits = lm.model(batch.tokens)
    return ioi_logit_diff(logits, batch)


@dataclass
class _Evidence:
    """Sums over prompts of per-head evidence (divided by the prompt count at the end)."""

    dla: Tensor
    attn_end_io: Tensor
    attn_end_s: Tensor
    induction_s2: Tensor
    duplicate_s2: Tensor
    previous_s1_plus_1: Tensor


@torch.no_grad()
def _batch_evidence(lm: LensModel, batch: IOIBatch) -> tuple[Tensor, _Evidence]:
    cfg = lm.cfg
    z_names = _z_names(lm)
    pattern_names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(cfg.n_layers)]
    with lm.hooks.capture([*z_names, *pattern_names, "ln_final.hook_scale"]) as cap:
        logits = lm.model(batch.tokens)
    diffs = ioi_logit_diff(logits, batch)
    n = len(batch)
    rows = torch.arange(n, device=lm.device)
    end, io, s1, s2, s1p1 = (
        t.to(lm.device) for t in (batch.end, batch.io_pos, batch.s1_pos, batch.s2_pos, batch.s1_plus_1)
    )
    # The final RMSNorm/LayerNorm divides the residual by a per-token scale; a head's direct
    # contribution to the logits is its output divided by the scale cached from this very run.
    # (fold_ln has already folded the norm's weight into W_U.)
    scale = cap["ln_final.hook_scale"][rows, end]  # [n, 1]
    direction = (lm.model.W_U[:, batch.io_token] - lm.model.W_U[:, batch.s_token]).T  # [n, d]
    dla, a_io, a_s, ind, dup, prev = ([] for _ in range(6))
    for layer in range(cfg.n_layers):
        z_end = cap[z_names[layer]][rows, end]  # [n, head, d_head]
        out = torch.einsum("nhd,hdm->nhm", z_end, lm.model.W_O[layer]) / scale[:, :, None]
        dla.append(torch.einsum("nhm,nm->h", out, direction))
        pattern = cap[pattern_names[layer]]  # [n, head, q, k]
        at = lambda q, k, pattern=pattern: pattern[rows, :, q, k].sum(0)  # noqa: E731
        a_io.append(at(end, io))
        a_s.append(at(end, s1) + at(end, s2))
        ind.append(at(s2, s1p1))
        dup.append(at(s2, s1))
        prev.append(at(s1p1, s1))
    ev = _Evidence(*(torch.stack(x).float().cpu() for x in (dla, a_io, a_s, ind, dup, prev)))
    return diffs.cpu(), ev


def _top_heads(
    values: Tensor, threshold: float, limit: int, allowed: Tensor | None = None
) -> list[Head]:
    masked = values.clone()
    if allowed is not None:
        masked[~allowed] = -torch.inf
    flat = masked.flatten()
    order = flat.argsort(descending=True)[:limit]
    n_heads = values.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads) for i in order if flat[i] > threshold]


@torch.no_grad()
def find_ioi_circuit(
    lm: LensModel,
    dataset: IOIDataset | None = None,
    *,
    n_prompts: int = 48,
    seed: int = 0,
    mover_threshold: float = 0.05,
    max_name_movers: int = 6,
    n_sender_candidates: int = 10,
    s_inhibition_threshold: float = 0.05,
    attention_threshold: float = 0.15,
    max_heads_per_class: int = 4,
) -> IOICircuit:
    """Find the IOI circuit's head classes, with evidence, and measure its faithfulness.

    Steps (Wang et al. 2022, simplified to one criterion per class):
      * name movers: heads whose DLA to IO − S at END exceeds ``mover_threshold`` × the mean
        logit difference (at most ``max_name_movers``, best first); negative name movers: the
        same with negative DLA. Attention from END to IO and S is recorded as evidence;
      * S-inhibition: among the ``n_sender_candidates`` heads below the name movers that
        attend most from END to S2, those whose path-patched ABC output, reaching only the
        name movers' queries, lowers the logit difference by more than
        ``s_inhibition_threshold`` (relative);
      * induction (attention S2→S1+1), duplicate token (S2→S1) and previous token
        (S1+1→S1): heads below the S-inhibition heads (previous-token: below the induction
        heads) whose attention exceeds ``attention_threshold``, at most
        ``max_heads_per_class`` each;
      * faithfulness: every head outside the circuit mean-ablated over the ABC prompts of the
        same template, at every position.

    Reads the model only (all hooks go through the registry and are removed).

    Args:
        lm: the model.
        dataset: IOI prompts; by default ``ioi_dataset(lm, n_prompts, seed=seed)``.

    Returns:
        :class:`IOICircuit`.
    """
    if dataset is None:
        dataset = ioi_dataset(lm, n_prompts, seed=seed)
    cfg = lm.cfg
    n_total = len(dataset)
    diffs, sums = [], None
    for batch in dataset.batches:
        d, ev = _batch_evidence(lm, batch)
        diffs.append(d)
        if sums is None:
            sums = ev
        else:
            for field in vars(sums):
                setattr(sums, field, getattr(sums, field) + getattr(ev, field))
    assert sums is not None
    ev = _Evidence(**{k: v / n_total for k, v in vars(sums).items()})
    logit_diffs = torch.cat(diffs)
    mean_ld = float(logit_diffs.mean())
    layer_index = torch.arange(cfg.n_layers)[:, None].expand(cfg.n_layers, cfg.n_heads)

    # No attention filter here: on SmolLM2 the strongest mover (23.3) puts more attention on
    # the two S tokens together than on IO and would be dropped; attention is kept as evidence.
    movers = _top_heads(ev.dla, mover_threshold * abs(mean_ld), max_name_movers)
    negative = _top_heads(-ev.dla, mover_threshold * abs(mean_ld), max_heads_per_class)
    if not movers:
        raise RuntimeError("no name movers found: is the clean logit difference positive?")
    first_mover_layer = min(layer for layer, _ in movers)

    # Path patching is two forward passes per sender and batch, so only the heads that attend
    # most to S2 from END (what S-inhibition heads do) are tested.
    path = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
    attn_end_s2 = ev.attn_end_s  # S1 + S2; the S-inhibition heads' query sits at END
    candidates = _top_heads(attn_end_s2, 0.0, n_sender_candidates, layer_index < first_mover_layer)
    if candidates:
        totals = torch.zeros(len(candidates))
        for batch in dataset.batches:
            clean_z, abc_z = _clean_and_abc_z(lm, batch)
            for i, sender in enumerate(candidates):
                patched = path_patch_to_queries(
                    lm, batch, sender, movers, clean_z=clean_z, abc_z=abc_z
                )
                totals[i] += float(patched.sum())
        for (layer, head), total in zip(candidates, totals, strict=True):
            path[layer, head] = (float(total) / n_total - mean_ld) / abs(mean_ld)
    s_inhibition = _top_heads(
        -torch.nan_to_num(path, nan=0.0), s_inhibition_threshold, max_heads_per_class
    )
    below_si = layer_index < (max((lyr for lyr, _ in s_inhibition), default=first_mover_layer))
    induction = _top_heads(ev.induction_s2, attention_threshold, max_heads_per_class, below_si)
    duplicate = _top_heads(ev.duplicate_s2, attention_threshold, max_heads_per_class, below_si)
    below_ind = layer_index < max((lyr for lyr, _ in induction), default=first_mover_layer)
    previous = _top_heads(ev.previous_s1_plus_1, attention_threshold, max_heads_per_class, below_ind)

    roles: list[tuple[str, list[Head], Tensor]] = [
        ("name_mover", movers, ev.dla),
        ("negative_name_mover", negative, ev.dla),
        ("s_inhibition", s_inhibition, path),
        ("induction", induction, ev.induction_s2),
        ("duplicate_token", duplicate, ev.duplicate_s2),
        ("previous_token", previous, ev.previous_s1_plus_1),
    ]
    heads: list[CircuitHead] = []
    seen: set[Head] = set()
    for role, members, score in roles:
        for layer, head in members:
            if (layer, head) in seen:
                continue  # a head keeps its first (later-in-the-circuit) role
            seen.add((layer, head))
            heads.append(
                CircuitHead(
                    layer=layer, head=head, role=role, dla=float(ev.dla[layer, head]),
                    attn_end_io=float(ev.attn_end_io[layer, head]),
                    attn_end_s=float(ev.attn_end_s[layer, head]),
                    path_patching=float(path[layer, head]), score=float(score[layer, head]),
                )
            )

    circuit = [(h.layer, h.head) for h in heads]
    kept, no_movers = [], []
    for batch in dataset.batches:
        kept.append(mean_ablated_logit_diff(lm, batch, keep=circuit).cpu())
        no_movers.append(mean_ablated_logit_diff(lm, batch, ablate=movers).cpu())
    ld_circuit = float(torch.cat(kept).mean())
    ld_no_movers = float(torch.cat(no_movers).mean())
    return IOICircuit(
        values=ev.dla,
        axes=("layer", "head"),
        labels=(tuple(str(i) for i in range(cfg.n_layers)), tuple(str(i) for i in range(cfg.n_heads))),
        meta=lm.meta(
            dataset.prompts,
            seed=dataset.seed,
            data_source="lmsci_mi.data.ioi templates (ABBA/BABA, ABC corruption)",
            params={
                "n_prompts": n_total,
                "ablation": "mean over ABC prompts of the same template, per position, hook_z",
                "mover_threshold": mover_threshold,
                "attention_threshold": attention_threshold,
                "s_inhibition_threshold": s_inhibition_threshold,
                "n_sender_candidates": n_sender_candidates,
            },
        ),
        heads=tuple(heads),
        logit_diffs=logit_diffs,
        logit_diff=mean_ld,
        fraction_positive=float((logit_diffs > 0).float().mean()),
        attn_end_io=ev.attn_end_io,
        attn_end_s=ev.attn_end_s,
        induction_s2=ev.induction_s2,
        duplicate_s2=ev.duplicate_s2,
        previous_s1_plus_1=ev.previous_s1_plus_1,
        path_patching=path,
        logit_diff_circuit=ld_circuit,
        faithfulness=ld_circuit / mean_ld,
        logit_diff_without_name_movers=ld_no_movers,
        name_mover_removed=1 - ld_no_movers / mean_ld,
    )
