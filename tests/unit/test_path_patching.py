"""General path patching on the tiny models: equals hand-written two-pass patches with
TransformerLens hooks only, equals TransformerLens's own head patching where the two coincide,
batches exactly, rejects bad input before attaching anything, and drives the `path` command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformer_lens import patching as tl_patching

from lmsci_mi import LensModel
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.circuits.path_patching import (
    PathPatchingConfig,
    PathPatchingResult,
    Receiver,
    path_patch,
)
from lmsci_mi.cli.paths import add_path_command
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset
from lmsci_mi.sites import Head, hook_name

Hook = tuple[str | Callable, Callable]


def _pairs(lm: LensModel):
    batch = ioi_dataset(lm, n_prompts=3, seed=1, templates=IOI_TEMPLATES[:1]).batches[0]
    metric = LogitDiff(batch.io_token, batch.s_token)
    return batch.tokens, batch.abc_tokens, metric


def _metric_at_end(logits: torch.Tensor, metric: LogitDiff) -> torch.Tensor:
    return metric(logits[:, -1]).cpu()  # results live on the CPU, whatever the model's device


def _freeze_hooks(model, clean, corrupt, sender: str, below: int, mlps: bool) -> list[Hook]:
    """Step 1 by hand: every head's z (and MLP output) of layers < ``below`` at its clean value,
    the sender's output (``'L0.H1'`` or ``'MLP0'``) from the corrupted run."""
    hooks: list[Hook] = []
    for layer in range(below):
        for site in ("z", "mlp_out") if mlps else ("z",):
            name = hook_name(site, layer)
            value = clean[name].clone()
            if sender == f"MLP{layer}" and site == "mlp_out":
                value = corrupt[name].clone()
            if sender.startswith(f"L{layer}.H") and site == "z":
                head = int(sender.split(".H")[1])
                value[:, :, head] = corrupt[name][:, :, head]
            hooks.append((name, lambda act, hook, value=value: value))
    return hooks


@torch.no_grad()
def _hand_to_logits(lm: LensModel, sender: str, mlps: bool = True) -> torch.Tensor:
    model = lm.model
    clean_tokens, corrupt_tokens, metric = _pairs(lm)
    _, clean = model.run_with_cache(clean_tokens)
    _, corrupt = model.run_with_cache(corrupt_tokens)
    hooks = _freeze_hooks(model, clean, corrupt, sender, model.cfg.n_layers, mlps)
    return _metric_at_end(model.run_with_hooks(clean_tokens, fwd_hooks=hooks), metric)


@torch.no_grad()
def _hand_to_receiver(
    lm: LensModel,
    sender: str,
    receiver: str,
    heads: list[int] | None,
    layer: int,
    below: int,
    mlps: bool = True,
) -> torch.Tensor:
    """Both steps by hand: freeze and record the receiver's input, then write it into the clean
    run at every position (``heads`` on the hook's head axis, None for a vector hook)."""
    model = lm.model
    clean_tokens, corrupt_tokens, metric = _pairs(lm)
    _, clean = model.run_with_cache(clean_tokens)
    _, corrupt = model.run_with_cache(corrupt_tokens)
    name = hook_name(receiver, layer)
    with model.hooks(fwd_hooks=_freeze_hooks(model, clean, corrupt, sender, below, mlps)):
        _, frozen = model.run_with_cache(clean_tokens, names_filter=[name])

    def write(act: torch.Tensor, hook) -> torch.Tensor:
        act = act.clone()
        if heads is None:
            return frozen[name].clone()
        act[:, :, heads] = frozen[name][:, :, heads]
        return act

    return _metric_at_end(model.run_with_hooks(clean_tokens, fwd_hooks=[(name, write)]), metric)


def _ours(lm: LensModel, senders, receivers, **config) -> PathPatchingResult:
    clean, corrupt, metric = _pairs(lm)
    return path_patch(lm, clean, corrupt, metric, senders, receivers, PathPatchingConfig(**config))


@pytest.mark.parametrize("sender", ["L0.H1", "MLP0", "L1.H3"])
def test_to_logits_equals_the_hand_written_two_pass_patch(tiny: LensModel, sender: str) -> None:
    ours = _ours(tiny, [sender], ["logits"])
    torch.testing.assert_close(ours.per_prompt[0], _hand_to_logits(tiny, sender))
    assert not torch.allclose(ours.per_prompt[0], _hand_to_logits(tiny, "L0.H0"))


def test_recomputing_mlps_equals_freezing_heads_only(tiny: LensModel) -> None:
    ours = _ours(tiny, ["L0.H1"], ["logits"], freeze="heads")
    torch.testing.assert_close(ours.per_prompt[0], _hand_to_logits(tiny, "L0.H1", mlps=False))
    frozen = _ours(tiny, ["L0.H1"], ["logits"])
    assert not torch.allclose(ours.per_prompt, frozen.per_prompt)


@pytest.mark.parametrize(
    ("sender", "receivers", "site", "heads", "layer", "below"),
    [
        ("L0.H3", ["L1.H1.q", "L1.H2.q"], "q", [1, 2], 1, 1),
        # toy-2l has 4 query heads over 2 key/value heads: L1.H3's key is key/value head 1.
        ("MLP0", ["L1.H3.k"], "k", [1], 1, 1),
        ("L0.H2", ["L1.H0.v"], "v", [0], 1, 1),
        # An MLP reads its own layer's heads (order: heads of layer 1, then MLP1).
        ("L1.H0", ["MLP1"], "mlp_in_normed", None, 1, 2),
    ],
)
def test_to_a_receiver_input_equals_the_hand_patch(
    tiny: LensModel, sender, receivers, site, heads, layer, below
) -> None:
    ours = _ours(tiny, [sender], receivers)
    hand = _hand_to_receiver(tiny, sender, site, heads, layer, below)
    torch.testing.assert_close(ours.per_prompt[0], hand)
    clean, _, metric = _pairs(tiny)
    assert not torch.allclose(hand, _metric_at_end(tiny(clean), metric))


@pytest.mark.parametrize("head", [0, 2])
def test_last_layer_head_to_logits_equals_transformer_lens_head_patching(
    tiny_gpt2: LensModel, head: int
) -> None:
    """With the MLPs recomputed, a last-layer head reaches the logits directly and through its
    own layer's MLP only, which is plain head patching (corrupted z into the clean run):
    TransformerLens's own patcher."""
    clean, corrupt, metric = _pairs(tiny_gpt2)
    config = PathPatchingConfig(freeze="heads")
    ours = path_patch(tiny_gpt2, clean, corrupt, metric, [f"L1.H{head}"], config=config)
    _, corrupt_cache = tiny_gpt2.model.run_with_cache(corrupt)
    theirs = tl_patching.get_act_patch_attn_head_out_all_pos(
        tiny_gpt2.model, clean, corrupt_cache, lambda logits: _metric_at_end(logits, metric).mean()
    )
    torch.testing.assert_close(ours.values[0], theirs[1, head].cpu(), atol=1e-5, rtol=1e-5)


def test_batching_over_senders_equals_one_sender_at_a_time(tiny: LensModel) -> None:
    senders = ["L0.H0", "L0.H1", "L0.H3", "MLP0"]
    for receivers in (["logits"], ["L1.H1.q", "L1.H2.k"]):
        together = _ours(tiny, senders, receivers)
        alone = torch.stack([_ours(tiny, [s], receivers).per_prompt[0] for s in senders])
        torch.testing.assert_close(together.per_prompt, alone)
    per_receiver = _ours(tiny, senders, ["L1.H1.q", "L1.H2.k"], per_receiver=True)
    assert per_receiver.axes == ("sender", "receiver") and per_receiver.values.shape == (4, 2)
    second = _ours(tiny, senders, ["L1.H2.k"])
    torch.testing.assert_close(per_receiver.per_prompt[:, 1], second.per_prompt)


def test_default_senders_are_every_head_below_the_receivers(tiny: LensModel) -> None:
    res = _ours(tiny, None, ["L1.H0.q"])
    assert res.axis_labels(0) == [f"L0.H{h}" for h in range(4)]
    top = res.top(2)
    assert isinstance(top[0][0], Head) and abs(top[0][1] - res.clean_value) >= abs(
        top[1][1] - res.clean_value
    )
    assert "L0.H" in res.summary()


@pytest.mark.parametrize(
    ("senders", "receivers", "match"),
    [
        (["L0.H9"], ["logits"], "head 9 out of range"),
        (["L7.H0"], ["logits"], "layer 7 out of range"),
        (["H0"], ["logits"], "not a head or an MLP"),
        (["L0.H0"], ["L1.H0.x"], "receiver input 'x'"),
        (["L0.H0"], ["MLP1.q"], "receiver input 'q'"),
        (["L0.H0"], [Receiver(Head(1, 0), "mlp")], "receiver input 'mlp'"),
        (["L0.H0"], ["attn1"], "not a head input, an MLP or the logits"),
        (["L0.H0"], ["logits", "L1.H0.q"], "cannot be mixed"),
        (["L1.H0"], ["L1.H2.q"], "not below any receiver"),
        (["L0.H0"], [], "at least one receiver"),
    ],
)
def test_bad_input_is_a_clear_error_with_nothing_attached(
    tiny: LensModel, senders, receivers, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        _ours(tiny, senders, receivers)
    assert tiny.hooks.attached_count() == 0


def test_prompts_of_different_lengths_are_refused(tiny: LensModel) -> None:
    metric = LogitDiff(tiny.token_id(" Mary"), tiny.token_id(" John"))
    with pytest.raises(ValueError, match="do not line up"):
        path_patch(tiny, "When Mary and John went,", "When Mary went,", metric, ["L0.H0"])
    with pytest.raises(ValueError, match="freeze"):
        PathPatchingConfig(freeze="everything")  # type: ignore[arg-type]


def test_result_round_trips_and_plots(tiny: LensModel, tmp_path: Path) -> None:
    res = _ours(tiny, ["L0.H0", "L0.H2", "MLP0"], ["L1.H1.q"], normalise=True)
    assert PathPatchingResult.load(res.save(tmp_path / "paths.json")) == res
    res.plot(tmp_path / "bars.png")
    _ours(tiny, None, ["L1.H1.q"]).plot(tmp_path / "heads.png")
    _ours(tiny, ["L0.H0", "MLP0"], ["L1.H1.q", "MLP1"], per_receiver=True).plot(
        tmp_path / "grid.png"
    )
    assert all((tmp_path / f).stat().st_size > 0 for f in ("bars.png", "heads.png", "grid.png"))


def test_path_command_on_a_throwaway_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    add_path_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "path",
            "--model",
            "toy-2l",
            "--device",
            "cpu",
            "--clean",
            "When Mary and John went, John gave it to",
            "--corrupted",
            "When Mary and John went, Mary gave it to",
            "--answer",
            " Mary",
            "--wrong",
            " John",
            "--senders",
            "L0.H1,MLP0",
            "--receivers",
            "L1.H0.q",
            "--receiver-position",
            "-1",
            "--freeze",
            "heads",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    assert args.run(args) == 0
    assert "L0.H1" in capsys.readouterr().out
    saved = PathPatchingResult.load(tmp_path / "r.json")
    assert saved.receivers == ("L1.H0.q",) and saved.meta.params["freeze"] == "heads"
    with pytest.raises(SystemExit):
        parser.parse_args(
            [
                "path",
                "--clean",
                "a",
                "--corrupted",
                "b",
                "--answer",
                "a",
                "--wrong",
                "b",
                "--freeze",
                "all",
            ]
        )
