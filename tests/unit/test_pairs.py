"""One prompt-pair type (lmsci_mi.data.pairs): the old names are it, its tokenised view puts the
answer positions where each padding side leaves the last real token, bad input names its fix, and
every analysis that takes pairs gives the same numbers from the pair object as from the
deprecated loose clean/corrupted form."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
from lmsci_mi.circuits.edges.faithfulness import CurveConfig, faithfulness_curve
from lmsci_mi.circuits.edges.graph import edge_graph
from lmsci_mi.circuits.edges.patching import edge_pairs, evaluate_circuits
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.circuits.patching import PatchingConfig, patch_activations
from lmsci_mi.circuits.path_patching import path_patch
from lmsci_mi.data.pairs import PromptPairs, TokenisedPairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

CLEAN = ("Mary and John: John gave it to", "The cat sat on the")
CORRUPTED = ("Mary and John: Mary gave it to", "The dog sat on the")


def test_the_old_names_are_the_one_type() -> None:
    import lmsci_mi.data
    from lmsci_mi.circuits import edge_patching, patching
    from lmsci_mi.data import ioi

    assert ioi.TextPairs is PromptPairs and patching.PromptPairs is PromptPairs
    assert lmsci_mi.data.PromptPairs is PromptPairs
    assert edge_patching.EdgePrompts is TokenisedPairs
    # The old positional form of TextPairs: clean, corrupted, answers, wrongs, source.
    old = ioi.TextPairs(("a",), ("b",), (3,), (4,), "demo")
    assert old == PromptPairs("a", "b", answers=3, wrongs=4, source="demo")


@pytest.mark.parametrize("side", ["right", "left"])
def test_tokenising_puts_answers_at_the_last_real_token(tiny: LensModel, side: str) -> None:
    texts = ["The cat sat on the mat", "A dog"]
    pairs = PromptPairs(texts, ["The dog sat on the mat", "A cat"])
    tok = pairs.tokenise(tiny, padding_side=side)  # type: ignore[arg-type]
    lengths = [len(tiny.encode(t)) for t in texts]
    assert lengths[0] > lengths[1] and tok.clean_lengths.tolist() == lengths
    width = max(lengths)
    expected = [n - 1 for n in lengths] if side == "right" else [width - 1] * 2
    assert tok.answer_positions.tolist() == expected
    assert tok.padding_side == side and tok.padded
    # Each answer position holds the prompt's own last token, and the mask covers its tokens.
    for row, text in enumerate(texts):
        ids = tiny.encode(text)
        assert int(tok.clean[row, tok.answer_positions[row]]) == ids[-1]
        assert tok.clean[row][tok.clean_mask[row]].tolist() == ids
    # An explicit position counts in the prompt's own tokens: 1 is the token after the sink.
    first = tok.with_answer_positions(1).answer_positions.tolist()
    assert first == ([1, 1] if side == "right" else [1, width - lengths[1] + 1])


def test_bad_pairs_raise_a_user_error_naming_the_fix() -> None:
    with pytest.raises(UserInputError, match="give one corrupted prompt per clean prompt"):
        PromptPairs(["a", "b"], ["c"])
    with pytest.raises(UserInputError, match="empty"):
        PromptPairs([], [])
    with pytest.raises(UserInputError, match="give one per pair"):
        PromptPairs(["a", "b"], ["c", "d"], answers=(1, 2, 3), wrongs=(4, 5, 6))
    with pytest.raises(UserInputError, match="give answers"):
        PromptPairs(["a"], ["b"], wrongs=4)
    with pytest.raises(UserInputError, match=r"TokenisedPairs\.from_tokens"):
        PromptPairs(torch.tensor([[1, 2]]), torch.tensor([[1, 3]]))  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match="give one corrupted prompt per clean prompt"):
        TokenisedPairs.from_tokens(torch.ones(2, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(UserInputError, match="PromptPairs"):
        LogitDiff.of_pairs(PromptPairs(["a"], ["b"]))


def test_left_padding_is_refused_where_the_analysis_needs_the_right(tiny: LensModel) -> None:
    pairs = PromptPairs(["The cat sat on the mat", "A dog"], ["The dog sat on the mat", "A cat"])
    left = pairs.tokenise(tiny, padding_side="left")
    with pytest.raises(UserInputError, match="padding_side='right'"):
        edge_pairs(tiny, left)
    assert edge_pairs(tiny, pairs).answer_positions.tolist() == (left.clean_lengths - 1).tolist()


def test_subsets_and_concatenation_keep_each_pairs_answers() -> None:
    pairs = PromptPairs(["a", "b", "c"], ["d", "e", "f"], answers=(1, 2, 3), wrongs=(4, 5, 6))
    assert pairs[1:].answers == (2, 3) and pairs[[2, 0]].clean == ("c", "a")
    assert PromptPairs.concat([pairs[:1], pairs[1:]]) == pairs


def test_pairs_and_the_deprecated_loose_form_agree(tiny: LensModel) -> None:
    answers, wrongs = (tiny.token_id(" Mary"), tiny.token_id(" mat")), (tiny.token_id(" John"), 6)
    pairs = PromptPairs(CLEAN[:1], CORRUPTED[:1], answers[:1], wrongs[:1])
    metric = LogitDiff(answers[:1], wrongs[:1])
    config = PatchingConfig(site="z", positions="all")
    new = patch_activations(tiny, pairs, config=config)  # the metric from the pairs' answers
    with pytest.warns(DeprecationWarning, match="PromptPairs"):
        old = patch_activations(tiny, CLEAN[0], CORRUPTED[0], metric, config)
    torch.testing.assert_close(new.values, old.values)
    new_paths = path_patch(tiny, pairs, senders=["L0.H1"], receivers=["logits"])
    with pytest.warns(DeprecationWarning):
        old_paths = path_patch(tiny, CLEAN[0], CORRUPTED[0], metric, ["L0.H1"], ["logits"])
    torch.testing.assert_close(new_paths.values, old_paths.values)

    both = PromptPairs(CLEAN, CORRUPTED, answers, wrongs)
    graph = edge_graph(tiny)
    scores = edge_attribution(tiny, both, config=EAPConfig(method="EAP"))
    with pytest.warns(DeprecationWarning):
        old_scores = edge_attribution(tiny, list(CLEAN), list(CORRUPTED), LogitDiff(answers, wrongs),
                                      EAPConfig(method="EAP"))
    torch.testing.assert_close(scores.values, old_scores.values)
    masks = torch.stack([graph.full_mask(), torch.zeros_like(graph.real)])
    circuits = evaluate_circuits(tiny, graph, masks, both)
    tokens = TokenisedPairs.from_tokens(tiny.encode_batch(CLEAN), tiny.encode_batch(CORRUPTED))
    from_ids = evaluate_circuits(tiny, graph, masks, tokens, LogitDiff(answers, wrongs))
    torch.testing.assert_close(circuits.values, from_ids.values)
    curve = faithfulness_curve(tiny, graph, scores, both,
                               config=CurveConfig(fractions=(50.0, 100.0), n_bootstrap=0))  # fmt: skip
    assert curve.at(100.0) == pytest.approx(1.0, abs=1e-4)
    assert curve.meta.prompts == CLEAN and scores.meta.data_source == "user prompts"
