"""The Bayes-optimal causal reader of a CFG: its chain against brute-force enumeration."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
import torch

from lmsci_mi.data.cfg import CFGConfig, Grammar, build_grammar
from lmsci_mi.probes.cfg import bayes
from lmsci_mi.probes.cfg.bayes import bayes_accuracy, bayes_hits, grammar_chain, path_posterior


def _derivations(grammar: Grammar, level: int = 0, symbol: int = 0):
    """Every derivation below ``symbol``: (probability, tokens, per-token [(nt, ends), ...])."""
    rules = grammar.rules[level][symbol]
    for rhs in rules:
        if level == grammar.n_levels - 1:
            children = [[(1.0, (t,), [[]])] for t in rhs]
        else:
            children = [list(_derivations(grammar, level + 1, s)) for s in rhs]
        for parts in itertools.product(*children):
            p, tokens, labels = 1.0 / len(rules), (), []
            for part_p, part_tokens, part_labels in parts:
                p *= part_p
                tokens += part_tokens
                labels += part_labels
            labels = [[(symbol, i == len(labels) - 1), *rest] for i, rest in enumerate(labels)]
            yield p, tokens, labels


@pytest.fixture(scope="module")
def small() -> Grammar:
    return build_grammar(CFGConfig(nts_per_level=(1, 2, 2), n_terminals=2, seed=3))


def test_chain_posterior_matches_enumeration(small: Grammar) -> None:
    derivations = list(_derivations(small))
    assert sum(p for p, _, _ in derivations) == pytest.approx(1.0)
    chain = grammar_chain(small)
    level = small.n_levels - 1  # the terminals' parents: the most ambiguous ancestors
    for p_string, tokens, _ in derivations[:12]:
        posterior = path_posterior(
            chain, torch.tensor([tokens]), torch.ones(1, len(tokens), dtype=torch.bool)
        )
        for i in range(len(tokens)):
            # brute force: P(level NT of token i | tokens[: i + 1]) over every derivation
            mass: dict[int, float] = defaultdict(float)
            for p, other, labels in derivations:
                if other[: i + 1] == tokens[: i + 1]:
                    mass[labels[i][level][0]] += p
            total = sum(mass.values())
            for nt, m in mass.items():
                exact = float(posterior[0, i][chain.ancestors[:, level] == nt].sum())
                assert exact == pytest.approx(m / total, abs=1e-9)
        assert p_string > 0


def test_prefix_free_boundaries_are_certain_and_ancestors_are_not() -> None:
    grammar = build_grammar(CFGConfig(nts_per_level=(1, 3, 3)))
    scores = bayes_accuracy(grammar, grammar.sample(60, seed=0))
    assert torch.allclose(scores["boundary"], torch.ones_like(scores["boundary"]))
    assert torch.allclose(scores["ancestor at NT end"], torch.ones_like(scores["boundary"]))
    assert scores["ancestor"][-1] < 0.99  # a span's first token rarely names its NT


def test_without_prefix_freedom_boundaries_become_uncertain() -> None:
    # seed 2's level 1 holds "N2.2 N2.2" beside "N2.2 N2.2 N2.0": whether the second N2.2 ends
    # its parent waits on the tokens after it, so even the exact posterior misses some boundaries
    grammar = build_grammar(CFGConfig(nts_per_level=(1, 3, 3), prefix_free=False, seed=2))
    scores = bayes_accuracy(grammar, grammar.sample(200, seed=0))
    assert scores["boundary"][1:].min() < 0.99


def test_bayes_hits_are_the_accuracy_per_token(small: Grammar) -> None:
    sample = small.sample(40, seed=1)
    rows = torch.tensor([3, 0, 7, 12, 5])
    hits = bayes_hits(small, sample, rows)
    scores = bayes_accuracy(small, sample, rows)
    _, _, boundaries, mask = sample.padded(bos=None)
    n_tokens, n_ends = int(mask[rows].sum()), boundaries[rows][mask[rows]].sum(0)
    for level in range(small.n_levels):
        assert len(hits["ancestor"][level]) == len(hits["boundary"][level]) == n_tokens
        assert len(hits["ancestor at NT end"][level]) == int(n_ends[level])
        for target in hits:
            assert float(hits[target][level].double().mean()) == pytest.approx(float(scores[target][level]))
    # the root's ancestor is always known; the leaves' parents are not (a span's first token)
    assert bool(hits["ancestor"][0].all()) and not bool(hits["ancestor"][-1].all())


def test_the_old_private_name_still_works() -> None:
    assert bayes._filter is path_posterior
