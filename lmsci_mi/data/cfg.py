"""Synthetic context-free grammars in the style of Allen-Zhu & Li, "Physics of Language Models,
Part 1" (arXiv 2305.13673): a seeded layered grammar, a vectorised sampler that labels every token
with its non-terminal (NT) ancestor and NT-boundary flag at every level, and a vectorised
level-wise span-DP (CYK) membership parser.

Level 0 holds the root; the NTs of level ``d`` rewrite only into symbols of level ``d + 1``, and
those of the last level into terminals. Tokens: 0 is BOS, terminals are ``1..n_terminals``, EOS is
``n_terminals + 1`` (the paper's grammars use terminals {1, 2, 3} and eos 4).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError

__all__ = ["CFGConfig", "CFGSample", "Grammar", "build_grammar", "cfg_accepts", "cfg_span_tables"]

BOS = 0


@config
class CFGConfig(Config):
    """A grammar of the family: NTs per level, rule lengths, rules per NT, terminals, seed.

    The default has 4 levels counting the terminals (root, two NT levels of 3 NTs, 3 terminals),
    two rules of length 2-3 per NT, so strings have 2^3 = 8 to 3^3 = 27 terminals: the paper's
    cfg3b with three of its middle NT levels removed, so that a GPT learns it in minutes on a
    CPU and a dense span DP is fast. ``nts_per_level=(1, 3, 3, 3)`` adds a level (16-81
    terminals).

    ``prefix_free`` adds one condition to the paper's family: no right-hand side at a level is a
    prefix of another (``3 3`` and ``3 3 2`` cannot both be rules of one level). Then every
    token's NT boundaries, and its ancestors at the NT ends, follow from the tokens up to it, so a
    causal model *can* know them at that token. Without it, whether ``3 3`` ends an NT depends on
    the next token, and no probe of a causal model reaches 100% on such labels.
    """

    nts_per_level: tuple[int, ...] = field(
        default=(1, 3, 3),
        metadata={"help": "NTs at each level, root first (comma list)", "ge": 1, "min_length": 2},
    )
    n_terminals: int = field(default=3, metadata={"help": "size of the terminal alphabet", "ge": 1})
    rule_lengths: tuple[int, ...] = field(
        default=(2, 3),
        metadata={"help": "allowed right-hand-side lengths", "choices": (2, 3), "min_length": 1},
    )
    rules_per_nt: tuple[int, ...] = field(
        default=(2,),
        metadata={
            "help": "allowed numbers of rules per NT (drawn per NT)",
            "ge": 1,
            "min_length": 1,
        },
    )
    prefix_free: bool = field(
        default=True,
        metadata={
            "help": "no right-hand side at a level is a prefix of another (see the class doc)"
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the grammar's construction"})

    def validate(self) -> None:
        if self.nts_per_level[0] != 1:
            raise UserInputError(
                f"nts_per_level must start with the root (1), not {self.nts_per_level}"
            )
        for level, size in enumerate(self.nts_per_level):
            below = (
                self.nts_per_level[level + 1]
                if level + 1 < len(self.nts_per_level)
                else self.n_terminals
            )
            distinct = sum(below**length for length in set(self.rule_lengths))
            if size * max(self.rules_per_nt) > distinct:
                raise UserInputError(
                    f"level {level}: {size} NTs x {max(self.rules_per_nt)} rules need more distinct "
                    f"right-hand sides than the {distinct} that {below} symbols allow"
                )


@dataclass(frozen=True)
class Grammar:
    """A layered CFG. ``rules[d][a]`` lists the right-hand sides of NT ``a`` of level ``d``.

    A right-hand side is a tuple of symbols of level ``d + 1`` (NT indices at that level), or of
    terminal tokens ``1..n_terminals`` for the last level.
    """

    config: CFGConfig
    rules: tuple[tuple[tuple[tuple[int, ...], ...], ...], ...]

    @property
    def n_levels(self) -> int:
        """Number of NT levels, root included."""
        return len(self.rules)

    @property
    def n_terminals(self) -> int:
        return self.config.n_terminals

    @property
    def bos(self) -> int:
        return BOS

    @property
    def eos(self) -> int:
        return self.config.n_terminals + 1

    @property
    def vocab_size(self) -> int:
        """BOS, the terminals and EOS."""
        return self.config.n_terminals + 2

    @property
    def length_range(self) -> tuple[int, int]:
        """Shortest and longest possible string (terminals only)."""
        lo, hi = min(self.config.rule_lengths), max(self.config.rule_lengths)
        return lo**self.n_levels, hi**self.n_levels

    def __str__(self) -> str:
        lines = []
        for level, nts in enumerate(self.rules):
            last = level == self.n_levels - 1
            for a, rhs_list in enumerate(nts):
                rendered = " | ".join(
                    " ".join(str(s) if last else f"N{level + 1}.{s}" for s in rhs)
                    for rhs in rhs_list
                )
                lines.append(f"N{level}.{a} -> {rendered}")
        return "\n".join(lines)

    @cached_property
    def _tables(self) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """Per level: right-hand sides ``[nt, rule, 3]`` (padded with -1), lengths, rule counts."""
        rhs_tables, length_tables, count_tables = [], [], []
        for nts in self.rules:
            width = max(len(r) for r in nts)
            rhs = np.full((len(nts), width, 3), -1, dtype=np.int64)
            lengths = np.zeros((len(nts), width), dtype=np.int64)
            for a, rhs_list in enumerate(nts):
                for r, right in enumerate(rhs_list):
                    rhs[a, r, : len(right)] = right
                    lengths[a, r] = len(right)
            rhs_tables.append(rhs)
            length_tables.append(lengths)
            count_tables.append(np.array([len(r) for r in nts], dtype=np.int64))
        return rhs_tables, length_tables, count_tables

    # ------------------------------------------------------------------ sampling

    def sample(self, n: int, *, seed: int = 0) -> CFGSample:
        """Draw ``n`` strings, choosing every rule uniformly (vectorised, level by level).

        Returns each token's ancestor NT and boundary flag at every level (see :class:`CFGSample`).

        >>> grammar = build_grammar(CFGConfig())
        >>> batch = grammar.sample(4, seed=0)
        >>> len(batch), bool(cfg_accepts(grammar, batch.sequences()).all())
        (4, True)
        """
        if n < 1:
            raise UserInputError(f"n must be >= 1, not {n}")
        rng = np.random.default_rng(seed)
        rhs_tables, length_tables, count_tables = self._tables
        symbols = np.zeros(n, dtype=np.int64)  # the roots
        sequence = np.arange(n)
        parents: list[np.ndarray] = []  # parents[d]: level-d node of each node of the level below
        node_symbols = [symbols]
        for level in range(self.n_levels):
            rule = (rng.random(len(symbols)) * count_tables[level][symbols]).astype(np.int64)
            lengths = length_tables[level][symbols, rule]
            parent = np.repeat(np.arange(len(symbols)), lengths)
            starts = np.cumsum(lengths) - lengths
            slot = np.arange(len(parent)) - starts[parent]
            symbols = rhs_tables[level][symbols[parent], rule[parent], slot]
            sequence = sequence[parent]
            parents.append(parent)
            node_symbols.append(symbols)
        # Walk each terminal up the tree: its node index at every level is its NT instance id.
        node = np.arange(len(symbols))
        instances = np.zeros((len(symbols), self.n_levels), dtype=np.int64)
        for level in reversed(range(self.n_levels)):
            node = parents[level][node]
            instances[:, level] = node
        ancestors = np.stack(
            [node_symbols[level][instances[:, level]] for level in range(self.n_levels)], axis=1
        )
        # A token ends its level-d NT when the next token has another level-d instance (or is in
        # another sequence), as in the reference code's seq_tree comparison.
        last = np.ones(len(symbols), dtype=bool)
        last[:-1] = sequence[1:] != sequence[:-1]
        boundaries = np.ones_like(instances, dtype=bool)
        boundaries[:-1] = instances[1:] != instances[:-1]
        boundaries |= last[:, None]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(sequence, minlength=n))])
        return CFGSample(
            tokens=torch.from_numpy(symbols.copy()),
            offsets=torch.from_numpy(offsets),
            ancestors=torch.from_numpy(ancestors),
            boundaries=torch.from_numpy(boundaries),
        )


@dataclass(frozen=True)
class CFGSample:
    """Sampled strings, flat and ragged: sequence ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

    Attributes:
        tokens: terminal tokens (``1..n_terminals``), all sequences concatenated.
        offsets: ``[n + 1]`` start of each sequence in ``tokens``.
        ancestors: ``[token, level]`` the index of the token's ancestor NT at each level (level 0
            is the root, always 0).
        boundaries: ``[token, level]`` True where the token is the last of its level's ancestor's
            span (the NT-end flag b_level(i) of the paper).
    """

    tokens: Int[Tensor, " token"]
    offsets: Int[Tensor, " n_plus_1"]
    ancestors: Int[Tensor, "token level"]
    boundaries: Bool[Tensor, "token level"]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> Int[Tensor, " n"]:
        return self.offsets[1:] - self.offsets[:-1]

    def sequences(self) -> list[list[int]]:
        """Each sequence's terminal tokens as a list."""
        flat = self.tokens.tolist()
        bounds = self.offsets.tolist()
        return [flat[a:b] for a, b in itertools.pairwise(bounds)]

    def padded(
        self, *, bos: int | None = BOS, pad: int = -1
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``[n, pos]`` tokens (with ``bos`` in front when given), ancestors ``[n, pos, level]``,
        boundaries and a mask of real terminal positions, right-padded with ``pad``/-1/False."""
        n, width = len(self), int(self.lengths.max())
        shift = 0 if bos is None else 1
        row = torch.repeat_interleave(torch.arange(n), self.lengths)
        col = torch.arange(len(self.tokens)) - self.offsets[row] + shift
        tokens = torch.full((n, width + shift), pad, dtype=torch.long)
        if bos is not None:
            tokens[:, 0] = bos
        tokens[row, col] = self.tokens
        levels = self.ancestors.shape[1]
        ancestors = torch.full((n, width + shift, levels), -1, dtype=torch.long)
        ancestors[row, col] = self.ancestors
        boundaries = torch.zeros((n, width + shift, levels), dtype=torch.bool)
        boundaries[row, col] = self.boundaries
        mask = torch.zeros((n, width + shift), dtype=torch.bool)
        mask[row, col] = True
        return tokens, ancestors, boundaries, mask


def build_grammar(config: CFGConfig | None = None) -> Grammar:
    """Draw a grammar of the family, seeded by ``config.seed``.

    Right-hand sides are drawn uniformly (length from ``rule_lengths``, symbols from the level
    below); no two right-hand sides at a level are the same (so no two NTs of a level are
    interchangeable), and every symbol of the level below is used by some rule (none is
    unreachable). Draws that break either condition are redrawn.

    >>> grammar = build_grammar(CFGConfig(nts_per_level=(1, 2), n_terminals=2, seed=1))
    >>> grammar.n_levels, grammar.vocab_size, len(grammar.rules[1])
    (2, 4, 2)
    """
    config = config if config is not None else CFGConfig()
    rng = np.random.default_rng(config.seed)
    sizes = config.nts_per_level
    levels = []
    for level, size in enumerate(sizes):
        last = level == len(sizes) - 1
        below = config.n_terminals if last else sizes[level + 1]
        offset = 1 if last else 0  # terminals are tokens 1..n_terminals
        for _attempt in range(1000):
            nts = _draw_level(rng, config, size, below, offset)
            if nts is not None:
                levels.append(nts)
                break
        else:
            raise UserInputError(
                f"level {level}: cannot draw {size} NTs' rules that meet the conditions"
            )
    return Grammar(config=config, rules=tuple(levels))


def _draw_level(
    rng: np.random.Generator, config: CFGConfig, size: int, below: int, offset: int
) -> tuple[tuple[tuple[int, ...], ...], ...] | None:
    """One level's rules, or None when a draw breaks a condition (the caller redraws)."""
    seen: set[tuple[int, ...]] = set()
    nts: list[tuple[tuple[int, ...], ...]] = []
    for count in rng.choice(config.rules_per_nt, size=size):
        rules: list[tuple[int, ...]] = []
        for _draw in range(200):
            if len(rules) == count:
                break
            length = int(rng.choice(config.rule_lengths))
            rhs = tuple(int(s) + offset for s in rng.integers(0, below, size=length))
            clash = config.prefix_free and any(
                other[: len(rhs)] == rhs or rhs[: len(other)] == other for other in seen
            )
            if rhs not in seen and not clash:
                seen.add(rhs)
                rules.append(rhs)
        if len(rules) < count:
            return None
        nts.append(tuple(rules))
    used = {s - offset for rhs in seen for s in rhs}
    return tuple(nts) if len(used) == below else None


# --------------------------------------------------------------------------- parsing


def cfg_span_tables(
    grammar: Grammar,
    sequences: Sequence[Sequence[int]],
    *,
    device: torch.device | str | None = None,
) -> list[Bool[Tensor, "batch nt start end"]]:
    """The inside-DP tables of a level-wise CYK parse, one per NT level.

    ``tables[d][b, a, i, j]`` is True when terminals ``i..j-1`` of sequence ``b`` can be derived
    from NT ``a`` of level ``d`` (the paper's DP(i, j, a)). The last level is matched against the
    terminals directly; each level above combines the level below with one batched boolean
    matrix product per symbol of a rule, so a batch of sequences is parsed at once.
    """
    if not sequences:
        raise UserInputError("no sequences to parse")
    width = max(len(s) for s in sequences)
    tokens = torch.full((len(sequences), width + 3), -1, dtype=torch.long)
    for row, seq in enumerate(sequences):
        tokens[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    tokens = tokens.to(device)
    n_batch, size = len(sequences), width + 1
    starts = torch.arange(width, device=tokens.device)
    tables: list[Tensor] = [torch.empty(0)] * grammar.n_levels
    last = grammar.n_levels - 1
    table = torch.zeros((n_batch, len(grammar.rules[last]), size, size), device=tokens.device)
    for a, rhs_list in enumerate(grammar.rules[last]):
        for rhs in rhs_list:
            match = torch.ones((n_batch, width), dtype=torch.bool, device=tokens.device)
            for k, symbol in enumerate(rhs):
                match &= tokens[:, k : k + width] == symbol
            ends = starts + len(rhs)
            fits = ends <= width
            table[:, a, starts[fits], ends[fits]] += match[:, fits].float()
    tables[last] = table.clamp_(max=1.0)
    for level in reversed(range(last)):
        below = tables[level + 1]
        table = torch.zeros((n_batch, len(grammar.rules[level]), size, size), device=tokens.device)
        for a, rhs_list in enumerate(grammar.rules[level]):
            for rhs in rhs_list:
                product = below[:, rhs[0]]
                for symbol in rhs[1:]:
                    # counts of split points: clamp to 0/1 so products stay exact in float32
                    product = torch.bmm(product, below[:, symbol]).clamp_(max=1.0)
                table[:, a] += product
        tables[level] = table.clamp_(max=1.0)
    return [t.bool() for t in tables]


def cfg_accepts(
    grammar: Grammar, sequences: Sequence[Sequence[int]], *, batch_size: int = 256
) -> Bool[Tensor, " n"]:
    """Whether the grammar derives each sequence of terminals (CYK/DP membership).

    Sequences are parsed in batches of ``batch_size`` of similar length. A sequence with a token
    outside the terminals (BOS, EOS, anything else) is rejected.

    >>> grammar = build_grammar(CFGConfig())
    >>> good = grammar.sample(2, seed=3).sequences()
    >>> cfg_accepts(grammar, good + [[1, 2]]).tolist()
    [True, True, False]
    """
    lo, hi = grammar.length_range
    out = torch.zeros(len(sequences), dtype=torch.bool)
    order = sorted(
        (i for i, s in enumerate(sequences) if lo <= len(s) <= hi), key=lambda i: len(sequences[i])
    )
    for chunk_start in range(0, len(order), batch_size):
        chunk = order[chunk_start : chunk_start + batch_size]
        batch = [list(sequences[i]) for i in chunk]
        root = cfg_span_tables(grammar, batch)[0][:, 0, 0]  # [batch, end]
        lengths = torch.tensor([len(s) for s in batch])
        out[torch.tensor(chunk)] = root[torch.arange(len(batch)), lengths]
    return out


def grammar_summary(grammar: Grammar) -> dict[str, object]:
    """The grammar's configuration and rules as plain data (for result metadata)."""
    return {"config": grammar.config.params(), "rules": dataclasses.asdict(grammar)["rules"]}
