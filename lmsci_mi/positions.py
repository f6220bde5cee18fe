"""Positions left out of an analysis: the attention sink, chosen positions, chosen tokens.

One type, :class:`Exclude`, says which token positions statistics, lenses, SAE metrics, steering
and patching leave out: by default the attention sink (Xiao et al. 2023), optionally positions
given by index and positions holding given tokens, such as the massive-activation tokens of Sun
et al. (2024, "Massive Activations in Large Language Models": the first "." or "\\n").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Any

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError

__all__ = ["Exclude", "resolve_exclude"]


@config
class Exclude(Config):
    """Which token positions an analysis leaves out; ``Exclude()`` leaves out the sink only.

    Attributes:
        sink: leave out position 0, the attention sink: the sink token lmsci-mi puts in front of
            every prompt, or, in a model loaded with ``sink=None``, its first token, which then
            takes the sink's role (it draws the attention and carries the massive activations).
        positions: absolute positions to leave out too (0 is the sink's).
        token_ids: leave out every position holding one of these tokens (massive-activation
            tokens are recognised by their identity).

    A keep-mask comes from a ``[batch, pos]`` token tensor (:meth:`keep`), or from positions
    alone (:meth:`keep_positions`, for a running pass where only the positions are known); a
    hook that runs during cached generation reads it from
    :class:`lmsci_mi.hooks.RunningExclusion`.

    >>> Exclude(token_ids=(13,)).keep(torch.tensor([[0, 5, 13, 7]])).tolist()
    [[False, True, False, True]]
    """

    sink: bool = field(default=True, metadata={"help": "leave out position 0, the attention sink"})
    positions: tuple[int, ...] = field(
        default=(), metadata={"help": "absolute positions to leave out too", "ge": 0}
    )
    token_ids: tuple[int, ...] = field(
        default=(), metadata={"help": "leave out the positions holding these tokens", "ge": 0}
    )

    def __post_init__(self) -> None:
        # Sorted and deduplicated, so that equal exclusions compare (and cache) equal.
        object.__setattr__(self, "positions", tuple(sorted(set(self.positions))))
        object.__setattr__(self, "token_ids", tuple(sorted(set(self.token_ids))))
        super().__post_init__()

    @classmethod
    def nothing(cls) -> Exclude:
        """Leave every position in, the sink too."""
        return cls(sink=False)

    @classmethod
    def leading(cls, n: int) -> Exclude:
        """The first ``n`` positions (``n = 1``: the sink); what ``PositionScope(skip=n)`` meant."""
        return cls(sink=n > 0, positions=tuple(range(1, n)))

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Exclude:
        """The exclusion of :meth:`params` (as a config records it)."""
        return cls(**{k: params[k] for k in ("sink", "positions", "token_ids") if k in params})

    def union(self, other: Exclude | None) -> Exclude:
        """Every position either exclusion leaves out."""
        if other is None:
            return self
        return Exclude(
            sink=self.sink or other.sink,
            positions=self.positions + other.positions,
            token_ids=self.token_ids + other.token_ids,
        )

    @property
    def is_default(self) -> bool:
        """True for the default exclusion, the sink alone."""
        return self == _DEFAULT

    @property
    def by_position(self) -> bool:
        """True when positions alone decide (no token ids): a running pass needs no tokens."""
        return not self.token_ids

    def keep_at(
        self, position: Int[Tensor, "*item"], token: Int[Tensor, "*item"] | None = None
    ) -> Bool[Tensor, "*item"]:
        """Which items, at absolute ``position`` and holding ``token``, are kept (any shape:
        a ``[batch, pos]`` grid, or the flat rows of collected activations).

        >>> Exclude(token_ids=(9,)).keep_at(torch.tensor([0, 1, 2]), torch.tensor([4, 9, 5])).tolist()
        [False, False, True]
        """
        dropped = torch.zeros_like(position, dtype=torch.bool)
        if self.sink:
            dropped |= position == 0
        if self.positions:
            dropped |= torch.isin(position, torch.tensor(self.positions, device=position.device))
        if self.token_ids:
            if token is None:
                raise UserInputError(
                    f"leaving tokens {self.token_ids} out needs the tokens, not only positions"
                )
            dropped |= torch.isin(token, torch.tensor(self.token_ids, device=token.device))
        return ~dropped

    def keep_positions(
        self, batch: int, n_pos: int, device: torch.device | str = "cpu", *, offset: int = 0
    ) -> Bool[Tensor, "batch pos"]:
        """Which of ``n_pos`` positions, the first at absolute position ``offset``, are kept by
        the sink and position rules (the token rule needs tokens: :meth:`keep`)."""
        position = offset + torch.arange(n_pos, device=device)
        return Exclude(sink=self.sink, positions=self.positions).keep_at(position)[None].expand(
            batch, n_pos
        )

    def keep(
        self,
        tokens: Int[Tensor, "batch pos"],
        *,
        offset: int = 0,
        lengths: Int[Tensor, " batch"] | Sequence[int] | None = None,
    ) -> Bool[Tensor, "batch pos"]:
        """The keep-mask of a ``[batch, pos]`` token tensor (True: the position counts).

        Args:
            tokens: token ids; the first column sits at absolute position ``offset``.
            offset: the absolute position of the first column (a cached decoding step's).
            lengths: each row's length in a right-padded batch: its padding is never kept.

        >>> Exclude(positions=(2,)).keep(torch.tensor([[0, 4, 5, 6], [0, 8, 9, 0]]),
        ...                              lengths=[4, 3]).long().tolist()
        [[0, 1, 0, 1], [0, 1, 0, 0]]
        """
        position = offset + torch.arange(tokens.shape[1], device=tokens.device)[None]
        kept = self.keep_at(position.expand_as(tokens), tokens)
        if lengths is not None:
            kept &= position < torch.as_tensor(lengths, device=tokens.device)[:, None]
        return kept

    def describe(self) -> str:
        """In words: ``"the sink"``, ``"the sink, positions 3, 7 and tokens 13"``."""
        parts = ["the sink"] if self.sink else []
        if self.positions:
            parts.append("positions " + ", ".join(map(str, self.positions)))
        if self.token_ids:
            parts.append("tokens " + ", ".join(map(str, self.token_ids)))
        return ", ".join(parts) or "nothing"


_DEFAULT = Exclude()
_NOTHING = Exclude.nothing()


def resolve_exclude(exclude: Exclude | None, *, sink_token: bool = True) -> Exclude:
    """``exclude``, or the default exclusion for None: the sink; with ``sink_token=False`` (the
    model puts no sink token in front) nothing, for the analyses that always kept a sink-free
    model's first token (activation collection, steering vectors, trigger examples).

    >>> resolve_exclude(None) == Exclude(), resolve_exclude(None, sink_token=False).describe()
    (True, 'nothing')
    """
    if exclude is None:
        return _DEFAULT if sink_token else _NOTHING
    if not isinstance(exclude, Exclude):
        raise TypeError(f"exclude must be an Exclude, got {type(exclude).__name__}")
    return exclude
