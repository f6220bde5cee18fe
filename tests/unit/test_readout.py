"""The readout (lmsci_mi/readout.py) against the model's own logits, on every kind of final norm.

1. One test, parametrised over tiny random models with an RMSNorm (gain folded into ``W_U`` and
   not), a LayerNorm (folded and not, with biases), Gemma-style post-norms, an output soft cap and
   no norm at all, checks every public caller of the readout against what the model itself
   computes: the readout's entries, ``LensModel.unembed``, the logit lens, the tuned lens at
   identity translators, direct logit attribution, sub-updates, causal tracing's logit difference,
   LM-Steer's logits (plain, steered and its training path), value-vector and SAE-decoder vocab
   projections, normalized-space projections (LM-Steer's SVD probe and transfer read these) and
   the concept unembedding vectors. Where a caller gives a number "up to the final norm's divisor",
   the model is run with that divisor held at its clean value, so the comparison stays exact.
2. A scan of the library: no module but readout.py reads ``W_U``, ``b_U`` or the soft cap, runs
   ``ln_final`` or the model's ``unembed``, or asks which norm the model has (allow-listed
   exceptions carry their reason).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi import LensModel, readout
from lmsci_mi.cache import weights_fingerprint
from lmsci_mi.circuits import TraceConfig, causal_trace
from lmsci_mi.knowledge.subupdates import SubUpdateConfig, sub_updates
from lmsci_mi.knowledge.values import ValueVectorConfig, value_vectors
from lmsci_mi.lenses import (
    TunedLens,
    TunedLensConfig,
    direct_logit_attribution,
    logit_lens,
    tuned_lens,
)
from lmsci_mi.lenses.tuned_lens import lens_logits
from lmsci_mi.representations.concepts import unembedding_site, unembedding_vectors
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.features import promoted_tokens
from lmsci_mi.sites import hook_name
from lmsci_mi.steering import LMSteer, LMSteerConfig, logits_from_normalized, steered_logits

PROMPT = "The cat sat on the"
CORRUPTED = "The dog sat on the"
ANSWER, WRONG = " mat", " floor"
VARIANTS = (
    "rms_folded",
    "rms_unfolded",
    "layernorm",
    "layernorm_folded",
    "post_norm",
    "soft_cap",
    "no_norm",
)
_VOCAB = 8192  # the first 8192 SmolLM2 tokens hold every token used here, at a sixth of the cost
UNCAPPED = "unembed.hook_out"  # the model's own logits before its soft cap
ATOL = 1e-4  # float32 logits of order 1, summed in other orders


def _variant(kind: str, like: LensModel) -> LensModel:
    """A 2-layer random model of the given kind, every norm gain and bias random (so that a gain
    or bias left out, or applied twice, changes the numbers), sharing ``like``'s tokenizer."""
    cfg = dict(
        n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, n_ctx=64,
        d_vocab=_VOCAB, act_fn="silu", gated_mlp=True, normalization_type="RMS",
        positional_embedding_type="rotary", rotary_dim=8, seed=0, device="cpu",
    )  # fmt: skip
    if kind.startswith("layernorm"):
        cfg.update(normalization_type="LN", act_fn="gelu_new", gated_mlp=False,
                   positional_embedding_type="standard", rotary_dim=None)  # fmt: skip
    if kind == "post_norm":  # Gemma 3: RMS pre- and post-norms, one K/V head
        cfg.update(use_normalization_before_and_after=True, act_fn="gelu_pytorch_tanh",
                   n_key_value_heads=1)  # fmt: skip
    if kind == "soft_cap":  # Gemma 2's cap is 30 on logits of tens; these logits are of order 1
        cfg.update(output_logits_soft_cap=2.0)
    if kind == "no_norm":
        cfg.update(normalization_type=None)
    # No tokenizer on the HookedTransformer itself: it would reload it (0.5 s); LensModel holds it.
    model = HookedTransformer(HookedTransformerConfig(**cfg))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".w"):
                param.copy_(1 + 0.5 * torch.randn_like(param))
            elif name.endswith((".b", "b_U", "b_O", "b_out")):
                param.copy_(0.2 * torch.randn_like(param))
    if kind in ("rms_folded", "layernorm_folded", "post_norm"):  # load_model's default fold_ln
        model.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    model.eval()
    return LensModel(model, name=f"toy-{kind}", source="test", tokenizer=like.tokenizer,
                     sink_token_id=like.sink_token_id)  # fmt: skip


Hook = tuple[str, Callable[[Tensor, object], Tensor | None]]


def _set(value: Tensor) -> Callable[[Tensor, object], Tensor]:
    return lambda act, hook: value.to(act.dtype).expand_as(act).clone()


def _add_at_last(delta: Tensor, index: int | None = None) -> Callable[[Tensor, object], Tensor]:
    """Add ``delta`` at the last position (to one coordinate, if ``index``)."""

    def fn(act: Tensor, hook: object) -> Tensor:
        act = act.clone()
        if index is None:
            act[:, -1] += delta.to(act.dtype)
        else:
            act[:, -1, index] += delta.to(act.dtype)
        return act

    return fn


class _Run:
    """The model's own run on the prompt: logits (capped and not) and the activations read."""

    def __init__(self, lm: LensModel) -> None:
        self.lm = lm
        self.tokens = lm.to_tokens(PROMPT)
        self.last = lm.cfg.n_layers - 1
        self.resid_hook = hook_name("resid_post", self.last)
        self.names = [self.resid_hook, UNCAPPED, unembedding_site(lm)]
        if readout.has_final_norm(lm):
            self.names.append(hook_name("ln_final_scale"))
        if readout.post_mlp_norm(lm, self.last) is not None:
            self.names.append(hook_name("ln2_post_scale", self.last))
        with torch.no_grad(), lm.hooks.capture(sorted(set(self.names))) as cap:
            self.logits = lm(self.tokens)[0]
        self.cap = {name: cap[name][0] for name in set(self.names)}
        self.uncapped = self.cap[UNCAPPED]
        self.answer, self.wrong = lm.token_id(ANSWER), lm.token_id(WRONG)

    def frozen(self) -> list[Hook]:
        """Hooks that hold every norm divisor between the last block's MLP and the logits at its
        clean value: what 'up to the divisor' means, made exact."""
        hooks: list[Hook] = []
        for name in (hook_name("ln_final_scale"), hook_name("ln2_post_scale", self.last)):
            if name in self.cap:
                hooks.append((name, _set(self.cap[name][None])))
        return hooks

    def divisors(self) -> Tensor:
        """The product of those divisors at the last position."""
        out = torch.ones(())
        for name in (hook_name("ln_final_scale"), hook_name("ln2_post_scale", self.last)):
            if name in self.cap:
                out = out * self.cap[name][-1, 0]
        return out

    def uncapped_with(self, hooks: Sequence[Hook]) -> Tensor:
        """The model's uncapped logits at the last position with ``hooks`` attached."""
        registry = self.lm.hooks
        attached = registry.hooks(fwd=list(hooks), label="test")
        with torch.no_grad(), attached, registry.capture([UNCAPPED]) as cap:
            self.lm(self.tokens)
        return cap[UNCAPPED][0, -1]


def _close(actual: Tensor, expected: Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual.float().cpu(), expected.float().cpu(), atol=atol, rtol=1e-4)


# --------------------------------------------------------------------------- the callers


def _check_readout_entries(run: _Run) -> None:
    lm, resid = run.lm, run.cap[run.resid_hook]
    _close(lm.unembed(resid), run.logits)
    for norm in ("live", "recompute"):
        _close(readout.logits(lm, resid, space="resid", norm=norm), run.logits)
    normalized = run.cap[unembedding_site(lm)]
    _close(readout.logits(lm, normalized, space="normalized"), run.logits)
    _close(readout.normalized(lm, resid), normalized)
    ids = [run.answer, run.wrong]
    two = readout.logits(lm, resid, space="resid", token_ids=ids, cap=False)
    _close(two, run.uncapped[:, ids])
    if readout.has_final_norm(lm):
        scale = run.cap[hook_name("ln_final_scale")]
        frozen = readout.logits(lm, resid, space="resid", norm="frozen", scale=scale)
        _close(frozen, run.logits)
    # Directions through the frozen norm, from either space, give the logit difference.
    for space, x in (("resid", resid), ("normalized", normalized)):
        scale = run.cap.get(hook_name("ln_final_scale")) if space == "resid" else None
        d = readout.logit_directions(lm, [run.answer] * len(x), [run.wrong] * len(x),
                                     space=space, scale=scale)  # fmt: skip
        diff = (x.float() * d.vectors).sum(-1) + d.bias
        _close(diff, run.uncapped[:, run.answer] - run.uncapped[:, run.wrong])
    _close(readout.soft_cap(lm, readout.undo_soft_cap(lm, run.logits)), run.logits)


def _check_lenses(run: _Run) -> None:
    lm = run.lm
    lens = logit_lens(lm, PROMPT, ANSWER)
    _close(lens.values[0, -1], run.logits.softmax(-1)[:, run.answer])
    assert float(lens.kl[0, -1].max()) < 1e-5
    d = lm.cfg.d_model
    identity = TunedLens(torch.eye(d).expand(lm.cfg.n_layers, d, d).clone(),
                         torch.zeros(lm.cfg.n_layers, d), lm.name, weights_fingerprint(lm),
                         TunedLensConfig(site="resid_post"), 0.0)  # fmt: skip
    tuned = tuned_lens(lm, PROMPT, ANSWER, lens=identity)  # read at resid_post, as the lens
    _close(tuned.values, lens.values)
    _close(tuned.kl, lens.kl)
    # What its translators are trained against reads the same logits (soft cap included).
    _close(lens_logits(lm, run.cap[run.resid_hook]), run.logits)


def _check_attribution(run: _Run) -> None:
    lm = run.lm
    dla = direct_logit_attribution(lm, PROMPT, ANSWER, WRONG)
    expected = run.uncapped[-1, run.answer] - run.uncapped[-1, run.wrong]
    _close(dla.logit[0], expected)
    _close(dla.total()[0], expected)
    plain = direct_logit_attribution(lm, PROMPT, ANSWER)
    _close(plain.total()[0], run.uncapped[-1, run.answer])
    # Sub-updates explain the MLPs' part of that same logit, neuron by neuron.
    su = sub_updates(lm, PROMPT, SubUpdateConfig(target=ANSWER, top_k=3))
    _close(su.mlp_total, plain.per_prompt[0, :, -1])
    _close(su.values.sum(1) + su.bias, su.mlp_total)


def _check_tracing(run: _Run) -> None:
    config = TraceConfig(corruption="prompt", corrupted_prompt=CORRUPTED, target=ANSWER,
                         wrong=WRONG, kinds=("resid",), n_samples=1, window=1)  # fmt: skip
    trace = causal_trace(run.lm, PROMPT, "cat", config)
    assert trace.metric == "logit_diff"
    expected = run.logits[-1, run.answer] - run.logits[-1, run.wrong]
    _close(torch.tensor(trace.clean_value), expected)
    # The last layer's stream restored at the last position: read out through the two columns.
    _close(trace.values[0, -1, -1], expected)


def _check_lm_steer(run: _Run) -> None:
    lm = run.lm
    if not readout.has_final_norm(lm):
        return  # LM-Steer attaches at ln_final.hook_normalized
    steer = LMSteer.for_model(lm, ("a",), LMSteerConfig(rank=4, epsilon=1.0, init_std=0.3), seed=1)
    h = run.cap[hook_name("ln_final")]
    _close(logits_from_normalized(lm, h), run.logits)
    with torch.no_grad(), steer.apply(lm, {"a": 2.0}):
        steered_own = lm(run.tokens)[0]
    assert not torch.allclose(steered_own, run.logits, atol=1e-2)
    with torch.no_grad():
        _close(logits_from_normalized(lm, steer.steered(h, {"a": 2.0})), steered_own)
        vector = steer.value_vector({"a": 2.0}).expand(len(h), -1)
        _close(steered_logits(lm, steer, h, vector), steered_own)


def _check_vocab_projections(run: _Run) -> None:
    """Value vectors and SAE decoder directions (``"resid"``) and normalized-space directions,
    against the model's change of logits when the direction is added with the divisors held."""
    lm, k, neuron = run.lm, 5, 3
    # A value vector: one more unit of the last MLP's neuron coefficient at the last position.
    push = (hook_name("mlp_post", run.last), _add_at_last(torch.tensor(1.0), neuron))
    change = (run.uncapped_with([push, *run.frozen()]) - run.uncapped[-1]) * run.divisors()
    vv = value_vectors(lm, run.last, [neuron], ValueVectorConfig(top_k=k))
    top = change.topk(k)
    assert vv.token_ids[0, 0, 0].tolist() == top.indices.tolist()
    _close(vv.values[0, 0, 0], top.values)
    # An SAE decoder direction added to the stream; a linear stand-in decoder, so decode(e_i) -
    # decode(0) is its row i.
    decoder = torch.randn(8, lm.cfg.d_model)
    stand_in = SimpleNamespace(cfg=SimpleNamespace(d_sae=8), device=torch.device("cpu"),
                               dtype=torch.float32, decode=lambda f: f @ decoder + 0.1)  # fmt: skip
    sae = LensSAE(stand_in, run.resid_hook, lm.name, lm.cfg.d_model, torch.ones(8))
    ids, values = promoted_tokens(lm, sae, [2], k)
    frozen_final = [h for h in run.frozen() if h[0] == hook_name("ln_final_scale")]
    add = (run.resid_hook, _add_at_last(decoder[2]))
    scale = run.cap[hook_name("ln_final_scale")][-1, 0] if frozen_final else torch.ones(())
    change = (run.uncapped_with([add, *frozen_final]) - run.uncapped[-1]) * scale
    top = change.topk(k)
    assert ids[0] == top.indices.tolist()
    _close(values[0], top.values)
    # A normalized-space direction (what LM-Steer's SVD probe scores, and its transfer maps).
    v = torch.randn(lm.cfg.d_model)
    change = run.uncapped_with([(unembedding_site(lm), _add_at_last(v))]) - run.uncapped[-1]
    _close(readout.vocab_projection(lm, v[None], space="normalized")[0], change)
    rows = readout.unembedding_vectors(lm, [run.answer, run.wrong], space="normalized")
    _close(rows @ v, change[[run.answer, run.wrong]])


def _check_concept_vectors(run: _Run) -> None:
    """γ(y) read at the unembedding site gives the logits up to a constant per token."""
    acts = run.cap[unembedding_site(run.lm)].double()
    rebuilt = acts @ unembedding_vectors(run.lm).T
    _close(rebuilt - rebuilt[:1], run.uncapped - run.uncapped[:1])


@pytest.mark.parametrize("kind", VARIANTS)
def test_every_readout_equals_the_models_own_logits(kind: str, tiny: LensModel) -> None:
    lm = _variant(kind, tiny)
    run = _Run(lm)
    if kind == "soft_cap":  # the cap must bite, or the test could not tell it was applied
        assert float((run.logits - run.uncapped).abs().max()) > 0.1
    _check_readout_entries(run)
    _check_lenses(run)
    _check_attribution(run)
    _check_tracing(run)
    _check_lm_steer(run)
    _check_vocab_projections(run)
    _check_concept_vectors(run)
    assert lm.hooks.attached_count() == 0


# --------------------------------------------------------------------------- one home

_LIBRARY = Path(__file__).resolve().parents[2] / "lmsci_mi"
_READOUT_NAMES = {
    "W_U": "the unembedding",
    "b_U": "the unembedding bias",
    "output_logits_soft_cap": "the soft cap",
    "apply_softcap": "the soft cap",
    "ln_final": "the final norm",
    "normalization_type": "which norm the model has",
    "LayerNorm": "which norm the model has",
    "LayerNormPre": "which norm the model has",
}
ALLOWED: dict[str, dict[str, str]] = {
    "readout.py": {name: "the home of every readout" for name in [*_READOUT_NAMES, "unembed"]},
    "circuits/heads.py": {
        "W_U": "copying scores read the weight circuit W_E W_V W_O W_U (Olsson et al. 2022), "
        "no residual stream"
    },
    "collect.py": {
        "ln_final": "runs the final norm so that its hooks fire for a collection; never unembeds"
    },
    "outliers/super_weights.py": {
        "normalization_type": "refuses a LayerNorm post-norm, whose input its hooks cannot give "
        "back (the raw down-projection output); no readout"
    },
    "loading.py": {
        "normalization_type": "load-time weight processing (centring the writing weights of a "
        "LayerNorm model), before any readout"
    },
}


def _readout_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every read of a readout name: an attribute (``model.W_U``, or through
    ``getattr``), a name (``LayerNorm``), an import (``apply_softcap``), or the model's ``unembed``
    module (``lm.model.unembed``; ``lm.unembed``, LensModel's method, calls the readout)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in _READOUT_NAMES:
                found.append((node.lineno, node.attr))
            elif node.attr == "unembed" and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "model")
                or (isinstance(node.value, ast.Name) and node.value.id == "model")
            ):
                found.append((node.lineno, "unembed"))
        elif isinstance(node, ast.Name) and node.id in _READOUT_NAMES:
            found.append((node.lineno, node.id))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in _READOUT_NAMES
        ):
            found.append((node.lineno, str(node.args[1].value)))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in _READOUT_NAMES]
    return found


@functools.cache
def _uses(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    # Parsing only the files that mention a name keeps the scan well under a second.
    if not any(name in text for name in [*_READOUT_NAMES, "unembed"]):
        return []
    return _readout_uses(ast.parse(text))


def test_no_module_but_readout_reads_logits_itself() -> None:
    offences = []
    for path in sorted(_LIBRARY.rglob("*.py")):
        module = path.relative_to(_LIBRARY).as_posix()
        allowed = ALLOWED.get(module, {})
        for line, name in _uses(path):
            if name not in allowed:
                offences.append(f"lmsci_mi/{module}:{line} reads {name} "
                                f"({_READOUT_NAMES.get(name, 'the unembedding')})")  # fmt: skip
    assert not offences, "readouts outside lmsci_mi/readout.py (use it instead):\n" + "\n".join(
        offences
    )
    for module, names in ALLOWED.items():  # an allowance nobody needs any more is removed
        uses = {name for _, name in _uses(_LIBRARY / module)}
        assert set(names) & uses, f"{module} no longer needs its allowance {sorted(names)}"
