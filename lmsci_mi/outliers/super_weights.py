"""Super-weight candidates (Yu et al. 2024, arXiv:2411.07191, "The Super Weight in Large Language
Models"), found from one forward pass as their code does (``analyze.py``
``plot_down_proj_input_output``).

Every layer's MLP down-projection is read at its input and its raw output; a layer whose largest
|input| and largest |output| both spike points at the weight ``W_down[row, col]`` joining the
output channel ``row`` to the input channel ``col``. That weight is zeroed and the pass repeated to
find the next, up to ``max_candidates``; the weights are restored bit for bit at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name, layer_hooks, layer_of, weight_name
from lmsci_mi.weights import WeightEdit

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.hooks import HookFn

__all__ = [
    "YU_PROMPT",
    "SuperWeightCandidate",
    "SuperWeightCandidates",
    "SuperWeightConfig",
    "down_proj_output_hooks",
    "find_super_weights",
]

YU_PROMPT = "Apple Inc. is a worldwide tech company."
"""The one prompt of Yu et al.'s identification pass (``analyze.py``)."""

_YU = "Yu et al. 2024 (arXiv:2411.07191)"


@config
class SuperWeightConfig(Config):
    """The prompt, the spike rules and how many candidates the iterative search removes."""

    prompt: str = dataclasses.field(
        default=YU_PROMPT,
        metadata={"help": "the prompt of the forward pass (the sink is put in front)",
                  **paper(YU_PROMPT, f"{_YU}, analyze.py plot_down_proj_input_output: test_text")},
    )
    threshold: float = dataclasses.field(
        default=50.0,
        metadata={"help": "a spike is |value| above this (the paper's rule)", "gt": 0,
                  **paper(50.0, f"{_YU}, analyze.py: spikes are abs(value) > 50")},
    )
    ratio: float = dataclasses.field(
        default=100.0,
        metadata={"help": "the alternative rule, reported beside the paper's: |value| at least this "
                  "times the median |value| of the layer's input (output); ours, not Yu et al.'s",
                  "gt": 0},
    )
    rule: Literal["threshold", "ratio"] = dataclasses.field(
        default="threshold",
        metadata={"help": "the rule that picks candidates: the paper's threshold, or the ratio",
                  **paper("threshold", f"{_YU}, analyze.py: abs(value) > 50")},
    )
    max_candidates: int = dataclasses.field(
        default=4,
        metadata={"help": "candidates to find, each removed before the next pass", "ge": 1,
                  **paper(NOT_IN_NOTES, f"{_YU}: 'remove it and repeat' (our notes give no count; "
                          "their coordinate map lists 1 to 6 per model)")},
    )
    layers: tuple[int, ...] | None = dataclasses.field(
        default=None, metadata={"help": "layers to scan (default: every layer)", "ge": 0}
    )


_DEFAULT_CONFIG = SuperWeightConfig()


@dataclass(frozen=True)
class SuperWeightCandidate:
    """One super-weight candidate, ``W_down[row, col]`` of ``layer``'s MLP.

    In TransformerLens's layout (``W_out[layer]`` is ``[d_mlp, d_model]``, the transpose of the
    Hugging Face ``down_proj.weight``) the weight is ``W_out[layer][col, row]``.

    Attributes:
        layer, row, col: the output channel (d_model) and input channel (d_mlp).
        weight: its value before it was removed.
        input_spike, output_spike: the layer's largest-|value| down-projection input (at ``col``)
            and raw output (at ``row``), signed.
        position: the token position of the output spike; ``input_position``: of the input spike;
            ``token``: the token at ``position``.
        contribution: ``weight × input[position, col]``: this weight's share of the output spike.
        input_ratio, output_ratio: each spike over the median |value| of its tensor.
        above_threshold, above_ratio: whether both spikes pass the threshold rule, the ratio rule.
        iteration: the pass that found it (0: the unedited model; pass i ran with the
            candidates 0..i-1 removed).
    """

    layer: int
    row: int
    col: int
    weight: float
    input_spike: float
    output_spike: float
    position: int
    input_position: int
    token: str
    contribution: float
    input_ratio: float
    output_ratio: float
    above_threshold: bool
    above_ratio: bool
    iteration: int

    @property
    def super_activation(self) -> float:
        """The activation it produces: the output spike's value at ``position`` in the pass that
        found it, what restoring the super activation writes back (channel ``row``)."""
        return self.output_spike

    @property
    def w_out_index(self) -> tuple[int, int, int]:
        """``(layer, col, row)``: where the weight sits in TransformerLens's ``W_out``."""
        return (self.layer, self.col, self.row)


@result_type
class SuperWeightCandidates(Result):
    """The down-projection scan and the super-weight candidates it finds.

    ``values`` is ``[layer, side]``: the largest-|value| entry (signed) of each layer's
    down-projection input and raw output in the first, unedited pass (Yu et al.'s Fig. 3).

    Attributes:
        input_channel, output_channel, input_position, output_position: ``[layer]`` where each
            maximum sits (first pass).
        input_median, output_median: ``[layer]`` the median |value| of each tensor (first pass).
        passes: ``[pass, layer, side]`` the same maxima in every pass, the last one with every
            candidate removed.
        candidates: in the order found; ``stop_reason``: why the search ended.
        tokens: the prompt's tokens (sink included, at position 0 when the model has one).
        output_hooks: the hooks the raw output was read from (their product for a post-norm).
    """

    input_channel: Tensor
    output_channel: Tensor
    input_position: Tensor
    output_position: Tensor
    input_median: Tensor
    output_median: Tensor
    passes: Tensor
    candidates: tuple[SuperWeightCandidate, ...]
    stop_reason: str
    tokens: tuple[str, ...]
    output_hooks: tuple[str, ...]
    threshold: float
    ratio: float
    rule: str

    def coordinates(self) -> list[tuple[int, int, int]]:
        """``(layer, row, col)`` of each candidate, as Yu et al.'s coordinate map lists them."""
        return [(c.layer, c.row, c.col) for c in self.candidates]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per candidate, with its super activation and TransformerLens index."""
        import pandas as pd

        rows = []
        for c in self.candidates:
            row = dataclasses.asdict(c)
            row["super_activation"] = c.super_activation
            row["w_out_index"] = str(c.w_out_index)
            rows.append(row)
        columns = [f.name for f in dataclasses.fields(SuperWeightCandidate)]
        return pd.DataFrame(rows, columns=[*columns, "super_activation", "w_out_index"])

    def summary(self, rows: int = 30) -> str:
        """The candidates, then the per-layer maxima of the first pass."""
        lines = [
            f"super-weight candidates of {self.meta.model} on {self.meta.prompts[0]!r} "
            f"(sink {self.meta.sink!r}; rule: {self.rule}, threshold {self.threshold:g}, "
            f"ratio {self.ratio:g}); {len(self.candidates)} found, stopped: {self.stop_reason}",
        ]
        for c in self.candidates:
            lines.append(
                f"  layer {c.layer} row {c.row} col {c.col}: W = {c.weight:.4g}; input {c.input_spike:.4g}, "
                f"output {c.output_spike:.4g} at position {c.position} {c.token!r} (pass {c.iteration})"
            )
        lines.append(f"{'layer':>6} {'max input':>11} {'max output':>11}")
        for i, label in enumerate(self.axis_labels(0)[:rows]):
            lines.append(f"{label:>6} {float(self.values[i, 0]):>11.4g} {float(self.values[i, 1]):>11.4g}")
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Largest down-projection input and output per layer — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """The signed maxima per layer, input above and output below, with the threshold, and
        the output with every candidate removed (dashed)."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(7, 5), layout="tight")  # laid out when drawn: no cost unless saved or shown
        axes = fig.subplots(2, 1, sharex=True)
        layers = [int(label) for label in self.axis_labels(0)]
        for side, ax in enumerate(axes):
            ax.plot(layers, self.values[:, side].numpy(), marker="o", markersize=3, label="unedited")
            if self.passes.shape[0] > 1:
                ax.plot(layers, self.passes[-1, :, side].numpy(), linestyle="--", marker=".",
                        label=f"{len(self.candidates)} candidate(s) removed")
            for sign in (1, -1):
                ax.axhline(sign * self.threshold, color="grey", linewidth=0.8, linestyle=":",
                           label=f"±{self.threshold:g}" if sign > 0 else None)
            ax.set_ylabel(f"max down_proj {self.labels[1][side]}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1].set_xlabel("layer")
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0].set_title(title, fontsize=10)
        return fig


# ----------------------------------------------------------------------------- hooks


def down_proj_output_hooks(lm: LensModel, layer: int) -> tuple[str, ...]:
    """The hooks that give the raw output of ``layer``'s MLP down-projection (``W_out`` applied,
    no norm after it).

    - A pre-norm block (Llama, SmolLM2, GPT-2): ``hook_mlp_out``, the output itself.
    - A block with pre- and post-norms (Gemma 2/3): ``hook_mlp_out`` comes after the post-MLP
      norm, and no hook holds the raw output; it is ``ln2_post.hook_normalized ×
      ln2_post.hook_scale`` (the norm divides by the scale before its weight), exact to an ulp.

    Raises:
        UserInputError: a model without MLPs, or a norm after the MLP whose input cannot be
            recovered from its hooks (a LayerNorm subtracts the mean; OLMo 2's post-norm ``ln2``
            exposes no scale site).

    >>> from lmsci_mi import load_model
    >>> down_proj_output_hooks(load_model("toy-2l"), 1)
    ('blocks.1.hook_mlp_out',)
    """
    cfg = lm.cfg
    if cfg.attn_only:
        raise UserInputError(f"{lm.name} is attention-only: it has no MLP down-projection")
    if cfg.original_architecture in POST_NORM_ARCHITECTURES:
        raise UserInputError(
            f"{lm.name} ({cfg.original_architecture}) normalises the MLP output before "
            "hook_mlp_out with ln2, whose scale is not a site; super weights are read on pre-norm "
            "and Gemma-shaped (pre- and post-norm) models"
        )
    if cfg.use_normalization_before_and_after:
        if not str(cfg.normalization_type).startswith("RMS"):
            raise UserInputError(
                f"{lm.name}'s post-MLP norm is {cfg.normalization_type}, whose input its hooks do "
                "not give back (it subtracts the mean); super weights need an RMS post-norm"
            )
        return (hook_name("ln2_post_scale", layer), hook_name("ln2_post_normalized", layer))
    return (hook_name("mlp_out", layer),)


@dataclass(frozen=True)
class _Max:
    """The largest-|value| entry of one ``[pos, channel]`` tensor, and its median |value|."""

    value: float
    position: int
    channel: int
    median: float

    @classmethod
    def of(cls, x: Tensor) -> _Max:
        mag = x.abs()
        position, channel = divmod(int(mag.argmax()), x.shape[-1])
        return cls(float(x[position, channel]), position, channel, float(mag.median()))

    def ratio(self) -> float:
        return abs(self.value) / max(self.median, torch.finfo(torch.float32).tiny)


@dataclass(frozen=True)
class _LayerScan:
    """One layer of one pass: the input's and the output's maxima, and the input at the output
    spike's position in the input spike's channel."""

    input: _Max
    output: _Max
    input_at_output: float


@torch.no_grad()
def _scan(lm: LensModel, tokens: Int[Tensor, "1 pos"], layers: list[int]) -> dict[int, _LayerScan]:
    """One forward pass; each layer's down-projection input and raw output reduced in its hooks."""
    outputs = {layer: down_proj_output_hooks(lm, layer) for layer in layers}
    state: dict[str, Tensor] = {}
    found: dict[int, _LayerScan] = {}

    def read_input(activation: Tensor, hook: HookPoint) -> None:
        state["input"] = activation[0].float()

    def read_scale(activation: Tensor, hook: HookPoint) -> None:
        state["scale"] = activation[0].float()

    def read_output(activation: Tensor, hook: HookPoint) -> None:
        layer = layer_of(hook.name or "")
        assert layer is not None
        x = activation[0].float()
        if "scale" in state:  # post-norm: undo the division the norm made before its weight
            x = x * state.pop("scale")
        inp = state.pop("input")
        top_in, top_out = _Max.of(inp), _Max.of(x)
        found[layer] = _LayerScan(top_in, top_out, float(inp[top_out.position, top_in.channel]))

    fwd: list[tuple[str, HookFn]] = [(hook_name("mlp_post", layer), read_input) for layer in layers]
    for layer in layers:
        if len(outputs[layer]) == 2:
            fwd.append((outputs[layer][0], read_scale))
        fwd.append((outputs[layer][-1], read_output))
    stop = max(layers) + 1
    with lm.hooks.hooks(fwd=fwd, label="super weights"):
        lm(tokens, stop_at_layer=stop if stop < lm.cfg.n_layers else None)
    return found


# ----------------------------------------------------------------------------- the search


def _spikes(scan: _LayerScan, cfg: SuperWeightConfig) -> tuple[bool, bool]:
    """Whether both the input and the output spike, by the threshold rule and by the ratio rule."""
    pair = (scan.input, scan.output)
    return (
        all(abs(m.value) > cfg.threshold for m in pair),
        all(m.ratio() >= cfg.ratio for m in pair),
    )


def _pick(
    lm: LensModel,
    scans: dict[int, _LayerScan],
    removed: set[tuple[int, int, int]],
    cfg: SuperWeightConfig,
    iteration: int,
    tokens: list[str],
) -> SuperWeightCandidate | None:
    """The earliest layer whose input and output both spike by ``cfg.rule`` (the super weight
    sits early; the activation it makes spikes later layers too), unless already removed."""
    for layer, scan in sorted(scans.items()):
        above_threshold, above_ratio = _spikes(scan, cfg)
        if not (above_threshold if cfg.rule == "threshold" else above_ratio):
            continue
        row, col = scan.output.channel, scan.input.channel
        if (layer, row, col) in removed:
            continue
        weight = float(lm.model.get_parameter(weight_name("W_out", layer)).detach()[col, row])
        return SuperWeightCandidate(
            layer=layer, row=row, col=col, weight=weight,
            input_spike=scan.input.value, output_spike=scan.output.value,
            position=scan.output.position, input_position=scan.input.position,
            token=tokens[scan.output.position],
            contribution=weight * scan.input_at_output,
            input_ratio=scan.input.ratio(), output_ratio=scan.output.ratio(),
            above_threshold=above_threshold, above_ratio=above_ratio, iteration=iteration,
        )
    return None


@torch.no_grad()
def _zeroed(lm: LensModel, candidate: SuperWeightCandidate) -> WeightEdit:
    """The applied edit that sets the candidate's weight to 0 (undone exactly by ``restore``)."""
    name = weight_name("W_out", candidate.layer)
    weight = lm.model.get_parameter(name)
    delta = torch.zeros_like(weight)
    delta[candidate.col, candidate.row] = -weight[candidate.col, candidate.row]
    return WeightEdit(lm, {name: delta}).apply()


def _search(
    lm: LensModel, tokens: Tensor, layers: list[int], cfg: SuperWeightConfig, texts: list[str]
) -> Generator[tuple[dict[int, _LayerScan], SuperWeightCandidate | None], None, None]:
    """Yu et al.'s loop: scan, pick, remove, repeat. Yields each pass's scan and its pick; every
    removal is restored when the generator is closed (also on error)."""
    removed: set[tuple[int, int, int]] = set()
    with ExitStack() as edits:  # restores in reverse order of removal
        for iteration in range(cfg.max_candidates + 1):
            scans = _scan(lm, tokens, layers)
            candidate = None
            if iteration < cfg.max_candidates:
                candidate = _pick(lm, scans, removed, cfg, iteration, texts)
            yield scans, candidate
            if candidate is None:
                return
            removed.add((candidate.layer, candidate.row, candidate.col))
            edits.enter_context(_zeroed(lm, candidate))


def find_super_weights(
    lm: LensModel, config: SuperWeightConfig = _DEFAULT_CONFIG
) -> SuperWeightCandidates:
    """Super-weight candidates of ``lm`` by Yu et al.'s one-pass search, repeated after removing
    each. The model is edited during the search and restored bit for bit before it returns
    (also on error).

    Args:
        lm: the model (pre-norm, or Gemma-shaped pre- and post-norm; see
            :func:`down_proj_output_hooks`).
        config: the prompt, the spike rules, how many candidates, which layers.

    Returns:
        :class:`SuperWeightCandidates`.

    Raises:
        UserInputError: an empty prompt, a layer the model does not have, a model without MLPs.

    >>> from lmsci_mi import load_model
    >>> found = find_super_weights(load_model("toy-2l"))
    >>> found.values.shape, found.labels[1], found.stop_reason
    (torch.Size([2, 2]), ('input', 'output'), 'no layer spikes in both its input and its output')
    """
    if not config.prompt.strip():
        raise UserInputError("empty prompt: give the text of the forward pass, e.g. YU_PROMPT")
    _, labels = layer_hooks("mlp_post", config.layers, lm.cfg.n_layers, lm.name)
    layers = [int(label) for label in labels]
    if not layers:
        raise UserInputError("no layers given: pass layer indices, or None for every layer")
    for layer in layers:
        down_proj_output_hooks(lm, layer)  # refuse an unsupported model before any pass
    tokens = lm.to_tokens(config.prompt)
    texts = lm.to_str_tokens(config.prompt)
    passes, candidates = [], []
    search = _search(lm, tokens, layers, config, texts)
    try:
        for scans, candidate in search:
            passes.append(scans)
            if candidate is not None:
                candidates.append(candidate)
    finally:
        search.close()
    return _result(lm, layers, passes, tuple(candidates), config, texts)


def _stop_reason(n_found: int, cfg: SuperWeightConfig) -> str:
    if n_found >= cfg.max_candidates:
        return f"max_candidates ({cfg.max_candidates}) reached"
    if n_found == 0:
        return "no layer spikes in both its input and its output"
    return "no further layer spikes in both its input and its output"


def _result(
    lm: LensModel,
    layers: list[int],
    passes: list[dict[int, _LayerScan]],
    candidates: tuple[SuperWeightCandidate, ...],
    cfg: SuperWeightConfig,
    texts: list[str],
) -> SuperWeightCandidates:
    grid = torch.tensor([[[p[layer].input.value, p[layer].output.value] for layer in layers] for p in passes])
    first = [passes[0][layer] for layer in layers]
    return SuperWeightCandidates(
        values=grid[0].clone(),  # its own storage: a saved result keeps no shared tensors
        axes=("layer", "side"),
        labels=(tuple(str(layer) for layer in layers), ("input", "output")),
        meta=lm.meta([cfg.prompt], params=cfg.params()),
        input_channel=torch.tensor([s.input.channel for s in first]),
        output_channel=torch.tensor([s.output.channel for s in first]),
        input_position=torch.tensor([s.input.position for s in first]),
        output_position=torch.tensor([s.output.position for s in first]),
        input_median=torch.tensor([s.input.median for s in first]),
        output_median=torch.tensor([s.output.median for s in first]),
        passes=grid,
        candidates=candidates,
        stop_reason=_stop_reason(len(candidates), cfg),
        tokens=tuple(texts),
        output_hooks=down_proj_output_hooks(lm, layers[0]),
        threshold=cfg.threshold,
        ratio=cfg.ratio,
        rule=cfg.rule,
    )
