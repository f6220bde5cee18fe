"""Transferring an LM-Steer to another model through a linear map between the unembeddings.

Han et al. 2024 ("transferring to another LM", eq. 3): two ridge regressions over the tokens whose
strings both vocabularies share map the output embeddings each way, u_s ≈ Mᵀ u_t and u_t ≈ Bᵀ u_s.
The steer's logit change ε s h_s P1 P2ᵀ u_s then carries over as ε s (h_t Bᵀ) P1 P2ᵀ (Mᵀ u_t):
h_t · u_t ≈ (h_t Bᵀ) · u_s, so h_t Bᵀ stands for the source state. That is P1' = Bᵀ P1 and
P2' = M P2. (The reference code learns the maps by gradient descent; these are closed form. The
pseudo-inverse of M in place of Bᵀ inflates the steer wherever the fit is poor.)
"""

from __future__ import annotations

from dataclasses import field

import torch
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.steering.lm_steer import LMSteer

__all__ = ["SteerTransfer", "TransferConfig", "shared_tokens", "transfer_steer"]


@config
class TransferConfig(Config):
    """How the unembedding map is fitted."""

    ridge: float = field(
        default=1e-3,
        metadata={
            "help": "ridge penalty, relative to the mean eigenvalue of XᵀX",
            "ge": 0,
            **paper(
                "Adam on the MSE (5000 steps, lr 0.01), then B_backward's rows normalised; no "
                "ridge in our notes",
                "Han et al. 2024, code: Glaciohound/LM-Steer experiments/steer_transfer.py and "
                "its README",
                why="a closed-form ridge fit instead of Adam: held-out R² 0.36 on SmolLM2 → Gemma 3 "
                "(docs/data/steering.json, transfer); benchmarks/steering.py",
            ),
        },
    )
    holdout: float = field(
        default=0.1,
        metadata={
            "help": "fraction of shared tokens held out to score the map",
            "ge": 0,
            "lt": 1,
            **paper(
                NOT_IN_NOTES,
                "Han et al. 2024, code: Glaciohound/LM-Steer experiments/steer_transfer.py (fits "
                "on the first 4,000 shared tokens, hard-coded; a held-out split is not in our notes)",
            ),
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the held-out split"})


_DEFAULT_TRANSFER_CONFIG = TransferConfig()


@result_type
class SteerTransfer(Result):
    """The fitted map: ``values`` is the held-out R² of u_s ≈ Mᵀ u_t per source dimension
    (axis ``("d_source",)``).

    Attributes:
        source_model, target_model: the two models.
        n_shared: tokens whose strings both vocabularies share (the fit's rows).
        r2: the held-out R² over all dimensions (1 − residual / total variance).
    """

    source_model: str
    target_model: str
    n_shared: int
    r2: float


def shared_tokens(source: LensModel, target: LensModel) -> tuple[list[int], list[int]]:
    """Token ids, in both vocabularies, of the token strings they share (decoded text, first id
    of each string; broken UTF-8 pieces and empty strings left out)."""

    def table(lm: LensModel) -> dict[str, int]:
        strings: dict[str, int] = {}
        for token_id, text in enumerate(
            lm.tokenizer.batch_decode([[i] for i in range(lm.cfg.d_vocab)])
        ):
            if text and "\ufffd" not in text and text not in strings:
                strings[text] = token_id
        return strings

    a, b = table(source), table(target)
    common = sorted(set(a) & set(b))
    return [a[s] for s in common], [b[s] for s in common]


def _unembedding(lm: LensModel) -> Tensor:
    """Output embeddings as the final normalised state sees them (the norm's gain applied),
    ``[d_model, vocab]``: a steer acts in the normalized space."""
    return readout.unembedding_vectors(lm, space="normalized").T


def _ridge(x: Tensor, y: Tensor, ridge: float) -> Tensor:
    """The ridge solution w of x @ w ≈ y (penalty relative to the mean eigenvalue of xᵀx)."""
    gram = x.T @ x
    penalty = ridge * gram.diagonal().mean()
    return torch.linalg.solve(gram + penalty * torch.eye(gram.shape[0]), x.T @ y)


@torch.no_grad()
def transfer_steer(
    steer: LMSteer,
    source: LensModel,
    target: LensModel,
    config: TransferConfig = _DEFAULT_TRANSFER_CONFIG,
) -> tuple[LMSteer, SteerTransfer]:
    """Map ``steer`` (trained on ``source``) onto ``target``. Reads both models only.

    Returns:
        (the steer for ``target``, the map's fit).

    Raises:
        ValueError: the steer does not belong to ``source``, or the vocabularies share too few
            token strings to fit the map.

    >>> from lmsci_mi import load_model
    >>> a, b = load_model("toy-2l"), load_model("toy-gpt2-2l")
    >>> moved, fit = transfer_steer(LMSteer.for_model(a, ("sentiment",)), a, b)
    >>> moved.model_name, moved.p1.shape == LMSteer.for_model(b, ("x",)).p1.shape
    ('toy-gpt2-2l', True)
    """
    steer.check_model(source)
    ids_s, ids_t = shared_tokens(source, target)
    d_s, d_t = source.cfg.d_model, target.cfg.d_model
    if len(ids_s) < 2 * max(d_s, d_t):
        raise UserInputError(
            f"{source.name} and {target.name} share only {len(ids_s)} token strings; at least "
            f"{2 * max(d_s, d_t)} are needed to fit a {d_t} x {d_s} map"
        )
    x = _unembedding(target)[:, ids_t].T.cpu()  # [token, d_t]
    y = _unembedding(source)[:, ids_s].T.cpu()  # [token, d_s]
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.randperm(len(x), generator=generator)
    n_test = int(len(x) * config.holdout)
    test, train = order[:n_test], order[n_test:]
    m = _ridge(x[train], y[train], config.ridge)  # [d_t, d_s]: x @ m ≈ y, i.e. u_s ≈ mᵀ u_t
    b = _ridge(y[train], x[train], config.ridge)  # [d_s, d_t]: y @ b ≈ x, i.e. u_t ≈ bᵀ u_s
    if n_test > 0:
        residual = y[test] - x[test] @ m
        centred = y[test] - y[test].mean(0)
        per_dim = 1 - residual.square().sum(0) / centred.square().sum(0)
        r2 = float(1 - residual.square().sum() / centred.square().sum())
    else:
        per_dim, r2 = torch.full((d_s,), float("nan")), float("nan")
    n = b.T  # [d_t, d_s]: h_t n stands for h_s, since h_t · u_t ≈ (h_t bᵀ) · u_s
    moved = LMSteer(steer.attributes, d_t, target.name, steer.config)
    moved.p1.copy_(torch.einsum("ts,ksr->ktr", n, steer.p1.detach().float().cpu()))
    moved.p2.copy_(torch.einsum("ts,ksr->ktr", m, steer.p2.detach().float().cpu()))
    moved.requires_grad_(False)
    fit = SteerTransfer(
        values=per_dim,
        axes=("d_source",),
        labels=((),),
        meta=target.meta(params={**config.params(), "source": source.name}),
        source_model=source.name,
        target_model=target.name,
        n_shared=len(ids_s),
        r2=r2,
    )
    return moved.to(target.device), fit
