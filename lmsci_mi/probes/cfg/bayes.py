"""The Bayes-optimal causal reader of a CFG's DP features: the ceiling of any probe on a causal model.

A causal model at token ``i`` has seen only ``x_1..x_i``. Whether token ``i`` ends an NT, and
which NT it belongs to, can still be uncertain then: the first token of a span rarely tells which
of several NTs the span is. No probe of a causal model can beat the posterior's argmax, so this
module computes that posterior exactly and scores it on the same labels the probes see.

Exactness comes from the grammar's shape. A layered grammar has no recursion, so the generator's
whole state at a token is the path from the root to it: the rule and the slot in that rule at each
level. There are at most ``prod(rules x slots)`` such paths (1,296 for four levels of two rules of
length <= 3), the token is a function of the path, and the next path depends only on the current
one: a hidden Markov model, filtered exactly with one small matrix product per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.data.cfg import CFGSample, Grammar

__all__ = [
    "BAYES_TARGETS",
    "GrammarChain",
    "bayes_accuracy",
    "bayes_hits",
    "grammar_chain",
    "path_posterior",
]


@dataclass(frozen=True)
class GrammarChain:
    """A grammar as a Markov chain over root-to-leaf paths.

    Attributes:
        start: ``[path]`` probability that a string's first token has this path.
        transition: ``[path, path]`` probability of the next token's path (rows sum to 1 minus the
            probability that the string ends there).
        emission: ``[path]`` the terminal token each path emits.
        ancestors: ``[path, level]`` the NT at each level on the path.
        ends: ``[path, level]`` True where the path's token is the last of its level-NT's span.
    """

    start: Float[Tensor, " path"]
    transition: Float[Tensor, "path path"]
    emission: Int[Tensor, " path"]
    ancestors: Int[Tensor, "path level"]
    ends: Bool[Tensor, "path level"]


def _paths(grammar: Grammar) -> list[tuple[tuple[int, int], ...]]:
    """Every root-to-leaf path as ``((rule, slot), ...)``, one pair per level, in DFS order."""
    paths: list[tuple[tuple[int, int], ...]] = []

    def walk(level: int, symbol: int, prefix: tuple[tuple[int, int], ...]) -> None:
        if level == grammar.n_levels:
            paths.append(prefix)
            return
        for rule, rhs in enumerate(grammar.rules[level][symbol]):
            for slot, child in enumerate(rhs):
                walk(level + 1, child, (*prefix, (rule, slot)))

    walk(0, 0, ())
    return paths


def _symbols(grammar: Grammar, path: tuple[tuple[int, int], ...]) -> list[int]:
    """The NT at each level of ``path``, then the terminal it emits."""
    symbols = [0]
    for level, (rule, slot) in enumerate(path):
        symbols.append(grammar.rules[level][symbols[-1]][rule][slot])
    return symbols


def grammar_chain(grammar: Grammar) -> GrammarChain:
    """Build the path chain of ``grammar`` (rules chosen uniformly, as ``Grammar.sample`` does)."""
    paths = _paths(grammar)
    symbols = [_symbols(grammar, path) for path in paths]
    levels = grammar.n_levels
    lengths = [
        [len(grammar.rules[d][sym[d]][rule]) for d, (rule, _) in enumerate(path)]
        for path, sym in zip(paths, symbols, strict=True)
    ]
    ends = torch.tensor(
        [
            [all(path[e][1] == size[e] - 1 for e in range(d, levels)) for d in range(levels)]
            for path, size in zip(paths, lengths, strict=True)
        ]
    )
    # The probability of a path that starts fresh below level d: every rule below it is uniform.
    fresh = torch.zeros(len(paths), levels + 1, dtype=torch.float64)
    for i, (path, sym) in enumerate(zip(paths, symbols, strict=True)):
        for d in range(levels + 1):
            if all(slot == 0 for _, slot in path[d:]):
                fresh[i, d] = torch.tensor(
                    [1.0 / len(grammar.rules[e][sym[e]]) for e in range(d, levels)]
                ).prod()
    transition = torch.zeros(len(paths), len(paths), dtype=torch.float64)
    for i, (path, size) in enumerate(zip(paths, lengths, strict=True)):
        # The next token advances the deepest level whose rule has slots left; below it, fresh.
        open_levels = [d for d in range(levels) if path[d][1] < size[d] - 1]
        if not open_levels:
            continue  # the string ends here
        d = open_levels[-1]
        head = (*path[:d], (path[d][0], path[d][1] + 1))
        for j, other in enumerate(paths):
            if other[: d + 1] == head:
                transition[i, j] = fresh[j, d + 1]
    return GrammarChain(
        start=fresh[:, 0].clone(),
        transition=transition,
        emission=torch.tensor([sym[-1] for sym in symbols]),
        ancestors=torch.tensor([sym[:-1] for sym in symbols]),
        ends=ends,
    )


def path_posterior(
    chain: GrammarChain, tokens: Int[Tensor, "n pos"], mask: Bool[Tensor, "n pos"]
) -> Float[Tensor, "n pos path"]:
    """The forward filter of the path chain: the posterior over the path at each token given the
    tokens up to it (zero where ``mask`` is False).

    Args:
        chain: the grammar's chain (:func:`grammar_chain`).
        tokens: ``[n, pos]`` terminal ids, any value where ``mask`` is False.
        mask: ``[n, pos]`` the real tokens.

    Returns:
        ``[n, pos, path]`` float64 posteriors; each real token's row sums to 1.

    >>> from lmsci_mi.data.cfg import CFGConfig, build_grammar
    >>> grammar = build_grammar(CFGConfig())
    >>> tokens, _, _, mask = grammar.sample(2, seed=0).padded(bos=None)
    >>> posterior = path_posterior(grammar_chain(grammar), tokens, mask)
    >>> bool(torch.allclose(posterior[mask].sum(-1), torch.ones(int(mask.sum()), dtype=torch.float64)))
    True
    """
    n, width = tokens.shape
    emits = chain.emission[None, :] == tokens.clamp(min=0)[..., None]  # [n, pos, path]
    posterior = torch.zeros(n, width, len(chain.start), dtype=torch.float64)
    belief = chain.start.expand(n, -1)
    for pos in range(width):
        if pos:
            belief = posterior[:, pos - 1] @ chain.transition
        belief = belief * emits[:, pos]
        total = belief.sum(-1, keepdim=True)
        posterior[:, pos] = torch.where(total > 0, belief / total.clamp(min=1e-300), 0.0)
        posterior[:, pos] *= mask[:, pos, None]
    return posterior


_filter = path_posterior
"""Deprecated alias of :func:`path_posterior` (its name before it was public)."""


BAYES_TARGETS = ("ancestor", "ancestor at NT end", "boundary")
"""The probes' three targets, the keys of :func:`bayes_hits` and :func:`bayes_accuracy`."""


def bayes_hits(
    grammar: Grammar, sample: CFGSample, rows: Tensor | None = None
) -> dict[str, list[Bool[Tensor, " token"]]]:
    """Per level (the root's level 0 included) and target, whether the posterior's argmax is
    right at each token of ``sample`` (or its sequences ``rows``): the per-token form of
    :func:`bayes_accuracy`, for intervals paired with a probe's own hits on the same tokens.

    Tokens come in the probes' order (sequences as given, positions ascending). ``"ancestor at
    NT end"`` has one entry per token that ends its level's NT, the others one per token.

    >>> from lmsci_mi.data.cfg import CFGConfig, build_grammar
    >>> grammar = build_grammar(CFGConfig())
    >>> hits = bayes_hits(grammar, grammar.sample(50, seed=0))
    >>> bool(all(h.all() for h in hits["boundary"]))  # a prefix-free grammar's ends are certain
    True
    """
    chain = grammar_chain(grammar)
    tokens, ancestors, boundaries, mask = sample.padded(bos=None)
    if rows is not None:
        tokens, ancestors, boundaries, mask = (x[rows] for x in (tokens, ancestors, boundaries, mask))
    posterior = path_posterior(chain, tokens, mask)[mask]  # [token, path]
    ancestors, boundaries = ancestors[mask], boundaries[mask]
    hits: dict[str, list[Tensor]] = {target: [] for target in BAYES_TARGETS}
    for level in range(grammar.n_levels):
        n_nts = int(chain.ancestors[:, level].max()) + 1
        by_nt = torch.nn.functional.one_hot(chain.ancestors[:, level], n_nts).double()
        truth, at_end = ancestors[:, level], boundaries[:, level]
        hits["ancestor"].append((posterior @ by_nt).argmax(-1) == truth)
        # At an NT end the posterior is also told that the token ends its NT, as the probe's
        # row selection tells the probe.
        end_posterior = (posterior * chain.ends[:, level]) @ by_nt
        hits["ancestor at NT end"].append(end_posterior[at_end].argmax(-1) == truth[at_end])
        guess = posterior @ chain.ends[:, level].double() > 0.5
        hits["boundary"].append(guess == at_end)
    return hits


def bayes_accuracy(
    grammar: Grammar, sample: CFGSample, rows: Tensor | None = None
) -> dict[str, Float[Tensor, " level"]]:
    """Accuracy of the posterior's argmax on ``sample`` (or its sequences ``rows``), per level
    (the root's level 0 included), for the probes' three targets.

    Keys: ``"ancestor"`` (every token), ``"ancestor at NT end"`` (tokens that end their level's
    NT, the posterior also told that they do, as the probe's row selection tells it) and
    ``"boundary"``. A causal probe can reach these numbers but not exceed them (in expectation).

    >>> from lmsci_mi.data.cfg import CFGConfig, build_grammar
    >>> grammar = build_grammar(CFGConfig())
    >>> scores = bayes_accuracy(grammar, grammar.sample(50, seed=0))
    >>> bool((scores["boundary"] > 0.99).all())
    True
    """
    hits = bayes_hits(grammar, sample, rows)
    return {
        target: torch.tensor([h.double().mean().item() for h in per_level])
        for target, per_level in hits.items()
    }
