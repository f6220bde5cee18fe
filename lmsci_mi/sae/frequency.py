"""Does steering with a feature make its tokens more frequent? The steering frequency table.

A feature is chosen by the tokens its decoder direction promotes; seeded continuations of many
prompts are sampled unsteered, steered with that feature, and steered with a random feature at the
same coefficient, and the share of generated tokens that fall in the feature's promoted set is
compared. (The control asks whether any push of that size would do the same.)
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import field
from types import MappingProxyType
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.features import promoted_tokens
from lmsci_mi.sae.intervene import steer_with_sae_feature
from lmsci_mi.stats import standard_error

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FrequencyConfig", "SteeringFrequency", "steering_frequency"]


@config
class FrequencyConfig(Config):
    """The generations of the steering frequency table.

    ``generation`` is the sampling of every condition; its seed also draws the random control
    feature. The flat keywords ``new_tokens`` (now ``generation.max_new_tokens``),
    ``temperature``, ``top_p`` and ``seed`` still set it, deprecated.
    """

    _moved = MappingProxyType({
        "new_tokens": "generation.max_new_tokens",
        "temperature": "generation.temperature",
        "top_p": "generation.top_p",
        "seed": "generation.seed",
    })

    coefficient: float = field(default=4.0, metadata={"help": "in units of the typical max"})
    promoted: int = field(default=20, metadata={"help": "size of the feature's token set", "ge": 1})
    generation: GenerationConfig = field(
        default_factory=functools.partial(
            GenerationConfig, max_new_tokens=30, temperature=1.0, top_p=0.9, seed=0, batch_size=64
        ),
        metadata={"help": "how continuations are sampled"},
    )


@result_type
class SteeringFrequency(Result):
    """Share of generated tokens in the feature's promoted set, ``values`` ``[condition, prompt]``
    (conditions: unsteered, the feature, a random feature at the same coefficient).

    Attributes:
        feature, control: the steered feature and the random control feature.
        coefficient: in units of each feature's typical maximum activation.
        token_set: the feature's promoted tokens counted.
        samples: one continuation per condition for the first prompts (for reading).
    """

    feature: int
    control: int
    coefficient: float
    token_set: tuple[str, ...]
    samples: tuple[tuple[str, ...], ...]

    def mean(self) -> Tensor:
        """Mean share per condition."""
        return self.values.float().mean(1)

    def summary(self, rows: int = 10) -> str:
        """Mean share ± standard error per condition, and the fraction of prompts with a hit
        (``rows`` unused: one row per condition)."""
        n = self.values.shape[1]
        lines = [f"{'condition':<36} {'share of tokens':>16} {'± s.e.':>8} {'prompts hit':>12}"]
        for label, row in zip(self.axis_labels(0), self.values.float(), strict=True):
            se = float(standard_error(row)) if n > 1 else 0.0
            lines.append(
                f"{label:<36} {float(row.mean()):>16.4f} {se:>8.4f} "
                f"{float((row > 0).float().mean()):>12.2f}"
            )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Steering with feature {self.feature} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bar chart of the mean share per condition, with standard errors."""
        import matplotlib.pyplot as plt

        means = self.mean().tolist()
        errors = standard_error(self.values.float()).tolist()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(self.axis_labels(0), means, yerr=errors, color=["grey", "tab:blue", "tab:orange"])
        ax.set_ylabel("share of generated tokens in the set")
        ax.set_title(title)
        fig.tight_layout()
        return fig


def steering_frequency(
    lm: LensModel,
    sae: LensSAE,
    feature: int,
    prompts: Sequence[str],
    config: FrequencyConfig | None = None,
    *,
    control: int | None = None,
    alive: Tensor | None = None,
) -> SteeringFrequency:
    """The steering frequency table of ``feature`` over ``prompts``.

    Args:
        lm, sae: the model and its SAE.
        feature: the feature to steer with; its top promoted tokens form the counted set.
        prompts: at least one prompt (the acceptance run uses 60).
        config: coefficient, length, sampling.
        control: the random feature (default: a seeded draw among ``alive`` features, or all).
        alive: a ``[d_sae]`` mask of features eligible as the control.

    Reads the model only; every condition samples with the same seed.
    """
    config = config or FrequencyConfig()
    sae.check(lm)
    feature = sae.feature(feature)
    if not prompts:
        raise UserInputError("give at least one prompt")
    if control is None:
        pool = [i for i in range(sae.d_sae) if i != feature and (alive is None or bool(alive[i]))]
        control = random.Random(config.generation.seed).choice(pool)
    control = sae.feature(control)
    ids, _ = promoted_tokens(lm, sae, [feature], config.promoted)
    token_set = set(ids[0])

    sampling = config.generation

    def run(steer: int | None) -> list[list[int]]:
        if steer is None:
            return [list(t) for t in generate(lm, prompts, sampling).tokens]
        with steer_with_sae_feature(lm, sae, steer, config.coefficient):
            return [list(t) for t in generate(lm, prompts, sampling).tokens]

    conditions = [
        ("unsteered", None),
        (f"feature {feature} ×{config.coefficient:g}", feature),
        (f"random feature {control} ×{config.coefficient:g}", control),
    ]
    shares, samples = [], []
    for _, steer in conditions:
        outs = run(steer)
        shares.append([sum(t in token_set for t in out) / max(len(out), 1) for out in outs])
        samples.append(tuple("".join(lm.to_str_tokens(out)) for out in outs[:3]))
    return SteeringFrequency(
        values=torch.tensor(shares),
        axes=("condition", "prompt"),
        labels=(tuple(label for label, _ in conditions), tuple(prompts)),
        meta=lm.meta(prompts, seed=config.generation.seed, params=config.params()),
        feature=feature,
        control=control,
        coefficient=config.coefficient,
        token_set=tuple(lm.to_str_tokens(ids[0])),
        samples=tuple(samples),
    )
