"""The CFG family: construction, sampler labels, and the span-DP parser against a brute-force one."""

from __future__ import annotations

import itertools
from functools import cache

import pytest
import torch

from lmsci_mi.data.cfg import CFGConfig, Grammar, build_grammar, cfg_accepts, cfg_span_tables


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return build_grammar(CFGConfig())


def _derives(grammar: Grammar, tokens: tuple[int, ...]):
    """A plain recursive top-down parser: derives(level, nt, i, j) tries every split."""
    last = grammar.n_levels - 1

    @cache
    def derives(level: int, nt: int, i: int, j: int) -> bool:
        for rhs in grammar.rules[level][nt]:
            if level == last:
                if tokens[i:j] == rhs:
                    return True
                continue
            if j - i < len(rhs):
                continue
            for cuts in itertools.combinations(range(i + 1, j), len(rhs) - 1):
                bounds = (i, *cuts, j)
                if all(derives(level + 1, s, bounds[k], bounds[k + 1]) for k, s in enumerate(rhs)):
                    return True
        return False

    return derives


def test_construction_is_seeded_and_follows_the_family(grammar: Grammar) -> None:
    assert build_grammar(CFGConfig()) == grammar
    assert build_grammar(CFGConfig(seed=1)) != grammar
    for level, nts in enumerate(grammar.rules):
        assert len(nts) == grammar.config.nts_per_level[level]
        rhs = [r for rules in nts for r in rules]
        assert len(rhs) == len(set(rhs)), "duplicate right-hand side at a level"
        assert all(len(r) in (2, 3) for r in rhs)
        below = (
            range(1, 4)
            if level == grammar.n_levels - 1
            else range(grammar.config.nts_per_level[level + 1])
        )
        assert {s for r in rhs for s in r} == set(below)


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="root"):
        CFGConfig(nts_per_level=(3, 3))
    with pytest.raises(ValueError, match="rule_lengths"):
        CFGConfig(rule_lengths=(4,))
    with pytest.raises(ValueError, match="distinct"):
        CFGConfig(nts_per_level=(1, 9), n_terminals=1, rule_lengths=(2,))


def test_samples_are_accepted_and_corruptions_mostly_rejected(grammar: Grammar) -> None:
    batch = grammar.sample(300, seed=0)
    sequences = batch.sequences()
    lo, hi = grammar.length_range
    assert all(lo <= len(s) <= hi for s in sequences)
    assert bool(cfg_accepts(grammar, sequences).all())
    generator = torch.Generator().manual_seed(0)
    corrupted = []
    for seq in sequences:
        seq = list(seq)
        i = int(torch.randint(len(seq), (1,), generator=generator))
        seq[i] = seq[i] % 3 + 1  # another terminal
        corrupted.append(seq)
    assert cfg_accepts(grammar, corrupted).float().mean() < 0.3
    truncated = [s[:-1] for s in sequences]
    assert cfg_accepts(grammar, truncated).float().mean() < 0.3
    assert not cfg_accepts(grammar, [[0, *sequences[0]], [*sequences[0], grammar.eos]]).any()


def test_labels_agree_with_the_tree(grammar: Grammar) -> None:
    batch = grammar.sample(50, seed=1)
    tokens, ancestors, boundaries, mask = batch.padded()
    last = grammar.n_levels - 1
    for b, seq in enumerate(batch.sequences()):
        anc = ancestors[b][mask[b]]
        ends = boundaries[b][mask[b]]
        assert ends[-1].all(), "the last token ends every level"
        assert (anc[:, 0] == 0).all() and ends[:-1, 0].sum() == 0
        for level in range(1, grammar.n_levels):
            # spans between boundaries carry one ancestor, and parse as that NT
            cut = [0, *(torch.nonzero(ends[:, level])[:, 0] + 1).tolist()]
            derives = _derives(grammar, tuple(seq))
            for i, j in itertools.pairwise(cut):
                nts = set(anc[i:j, level].tolist())
                assert len(nts) == 1
                assert derives(level, nts.pop(), i, j)
            # every NT end is also an NT end at every deeper level
            assert (ends[:, level - 1] <= ends[:, level]).all()
        leaf_spans = torch.diff(torch.tensor([-1, *torch.nonzero(ends[:, last])[:, 0].tolist()]))
        assert set(leaf_spans.tolist()) <= {2, 3}
    assert (tokens[:, 0] == grammar.bos).all()


def test_span_dp_matches_brute_force_on_small_strings() -> None:
    small = build_grammar(CFGConfig(nts_per_level=(1, 2, 2), n_terminals=2, seed=3))
    strings = [tuple(s) for s in small.sample(20, seed=0).sequences()]
    strings += [tuple(s) for n in range(4, 10) for s in itertools.product((1, 2), repeat=n)][:300]
    tables = cfg_span_tables(small, strings)
    for b, seq in enumerate(strings):
        derives = _derives(small, seq)
        for level in range(small.n_levels):
            for nt in range(len(small.rules[level])):
                for i in range(len(seq)):
                    for j in range(i + 1, len(seq) + 1):
                        assert bool(tables[level][b, nt, i, j]) == derives(level, nt, i, j), (
                            seq,
                            level,
                            nt,
                            i,
                            j,
                        )
    accepted = cfg_accepts(small, strings)
    assert accepted.tolist() == [_derives(small, s)(0, 0, 0, len(s)) for s in strings]
    assert 0 < accepted.sum() < len(strings)
