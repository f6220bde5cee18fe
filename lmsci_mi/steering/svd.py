"""The SVD probe of a steer: which vocabulary words each singular direction of W pushes up or down.

W = P1 P2ᵀ (one steer; h ↦ h + ε s h W). With W = U S Vᴴ, the steer adds ε s Σⱼ (h·Uⱼ) Sⱼ (Vᴴⱼ·u)
to the logit of a word with output embedding u, so each direction j ranks the vocabulary by
Vᴴⱼ·u (Han et al. 2024, ``pca_analysis.py``; scored through the unembedding, not the input
embedding). Words at both ends are scored with the VADER lexicon against random words.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config, paper
from lmsci_mi.data.steering_texts import neutral_prompts
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.steering.evaluate import vader_valence
from lmsci_mi.steering.lm_steer import LMSteer

if TYPE_CHECKING:

    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["SVDConfig", "SteerSVD", "steer_svd", "word_vocabulary"]


@config
class SVDConfig(Config):
    """The SVD probe's settings (the reference lists the top and bottom 20 of 10 directions)."""

    attribute: str = field(default="sentiment", metadata={"help": "the steer whose W is probed"})
    n_directions: int = field(
        default=5,
        metadata={
            "help": "singular directions listed",
            "ge": 1,
            **paper(
                10,
                "Han et al. 2024, code: Glaciohound/LM-Steer experiments/pca_analysis.py (the top "
                "10 singular directions of W = P1[0] P2[0]ᵀ)",
                why="a shorter listing: docs/data/steering.json (svd) reports 3 directions' singular "
                "values and the first direction's words; benchmarks/steering.py",
            ),
        },
    )
    top_k: int = field(
        default=20,
        metadata={
            "help": "words listed at each end of a direction",
            "ge": 1,
            **paper(
                20,
                "Han et al. 2024, code: Glaciohound/LM-Steer experiments/pca_analysis.py (top and "
                "bottom 20 tokens)",
            ),
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the random comparison words"})


_DEFAULT_S_V_D_CONFIG = SVDConfig()


@result_type
class SteerSVD(Result):
    """The SVD probe: ``values`` are W's top singular values (axis ``("direction",)``).

    Each direction is oriented so that a positive steer value raises its ``top_words`` on the
    bundled neutral prompts (the mean of h·Uⱼ there is positive).

    Attributes:
        top_words, bottom_words: per direction, the words at its raised and lowered ends.
        top_scores, bottom_scores: their scores Vᴴⱼ·u.
        end_valence: mean |VADER valence| of direction 0's words at both ends.
        random_valence: mean |VADER valence| of ``random_words``.
        random_words: random vocabulary words (same filter) for comparison.
    """

    top_words: tuple[tuple[str, ...], ...]
    bottom_words: tuple[tuple[str, ...], ...]
    top_scores: tuple[tuple[float, ...], ...]
    bottom_scores: tuple[tuple[float, ...], ...]
    end_valence: float
    random_valence: float
    random_words: tuple[str, ...]

    def summary(self, rows: int = 10) -> str:
        """Each direction's raised and lowered words (``rows`` directions at most), and the mean
        VADER valence of direction 0's end words against random words."""
        lines = []
        for j, s in enumerate(self.values.tolist()[:rows]):
            lines.append(f"direction {j} (singular value {s:.3g})")
            lines.append(f"  raised:  {' '.join(self.top_words[j])}")
            lines.append(f"  lowered: {' '.join(self.bottom_words[j])}")
        lines.append(
            f"mean |VADER valence|: direction 0's end words {self.end_valence:.3f}, "
            f"{len(self.random_words)} random words {self.random_valence:.3f}"
        )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"LM-Steer SVD directions — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bars of the singular values, each direction labelled with its first raised and
        lowered words."""
        from lmsci_mi.viz.plots import plot_bars

        labels = [
            f"{j}: +{' '.join(self.top_words[j][:3])} / −{' '.join(self.bottom_words[j][:3])}"
            for j in range(self.values.numel())
        ]
        fig = plot_bars(
            labels,
            self.values.tolist(),
            value_label="singular value of W",
            title=title,
        )
        return fig

    def to_dataframe(self) -> pd.DataFrame:
        """One row per listed word: direction, its singular value, end (``top``/``bottom``),
        rank, word, score and VADER valence (what ``export`` writes: the words are the result)."""
        import pandas as pd

        rows = []
        for j in range(len(self.top_words)):
            for end, words, scores in (
                ("top", self.top_words[j], self.top_scores[j]),
                ("bottom", self.bottom_words[j], self.bottom_scores[j]),
            ):
                for rank, (word, score) in enumerate(zip(words, scores, strict=True)):
                    rows.append(
                        {
                            "direction": j,
                            "singular_value": float(self.values[j]),
                            "end": end,
                            "rank": rank,
                            "word": word,
                            "score": score,
                            "valence": vader_valence(word),
                        }
                    )
        return pd.DataFrame(rows)


def word_vocabulary(lm: LensModel) -> tuple[list[int], list[str]]:
    """Token ids and lower-cased words of the tokens that are one alphabetic word of at least 3
    letters (a leading space allowed), one id per word (the first)."""
    ids, words, seen = [], [], set()
    for token_id in range(lm.cfg.d_vocab):
        word = lm.tokenizer.decode([token_id]).strip()
        if len(word) >= 3 and word.isascii() and word.isalpha() and word.lower() not in seen:
            seen.add(word.lower())
            ids.append(token_id)
            words.append(word.lower())
    return ids, words


@torch.no_grad()
def steer_svd(lm: LensModel, steer: LMSteer, config: SVDConfig = _DEFAULT_S_V_D_CONFIG) -> SteerSVD:
    """The SVD probe of one steer's W. Reads the model only.

    Raises:
        ValueError: a steer of another model, an unknown attribute.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> probe = steer_svd(lm, LMSteer.for_model(lm, ("sentiment",)), SVDConfig(n_directions=2, top_k=3))
    >>> probe.values.shape, len(probe.top_words[0])
    (torch.Size([2]), 3)
    """
    steer.check_model(lm)
    w = steer.matrix(config.attribute).float()
    u, s, vh = torch.linalg.svd(w)
    n = min(config.n_directions, int(s.shape[0]))
    ids, words = word_vocabulary(lm)
    # W lives in the normalized space (it acts on ln_final.hook_normalized): read out from there.
    scores = readout.vocab_projection(lm, vh[:n], space="normalized", token_ids=ids).to(vh.device)
    # Orient each direction: +s raises the words whose score has the sign of mean(h·Uⱼ).
    states = _neutral_states(lm).to(u.device)
    signs = torch.sign((states @ u[:, :n]).mean(0))
    signs[signs == 0] = 1
    scores = scores * signs[:, None]
    k = min(config.top_k, len(ids))
    top = scores.topk(k, dim=1)
    bottom = (-scores).topk(k, dim=1)
    top_words = tuple(tuple(words[i] for i in row) for row in top.indices.tolist())
    bottom_words = tuple(tuple(words[i] for i in row) for row in bottom.indices.tolist())
    generator = torch.Generator().manual_seed(config.seed)
    random_words = tuple(
        words[i] for i in torch.randperm(len(words), generator=generator)[:k].tolist()
    )
    ends = top_words[0] + bottom_words[0]
    return SteerSVD(
        values=s[:n].cpu(),
        axes=("direction",),
        labels=((),),
        meta=lm.meta(params=config.params()),
        top_words=top_words,
        bottom_words=bottom_words,
        top_scores=tuple(tuple(round(v, 4) for v in row) for row in top.values.tolist()),
        bottom_scores=tuple(tuple(round(-v, 4) for v in row) for row in bottom.values.tolist()),
        end_valence=sum(abs(vader_valence(w)) for w in ends) / len(ends),
        random_valence=sum(abs(vader_valence(w)) for w in random_words) / len(random_words),
        random_words=random_words,
    )


def _neutral_states(lm: LensModel) -> Tensor:
    """Final normalised states at the last token of the bundled neutral prompts."""
    batch = lm.encode_batch(list(neutral_prompts()))
    # Stop before the unembedding: only the states are read.
    resid = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
    h = readout.normalized(lm, resid, norm="live")
    return h[torch.arange(len(batch.lengths)), batch.lengths - 1].float()
