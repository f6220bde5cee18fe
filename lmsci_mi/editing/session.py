"""Sequential editing: edit after edit without restoring, measured against the original model.

An :class:`EditingSession` applies a list of requests in batches with a registered editing method,
keeps every handle, and evaluates at chosen steps. Specificity is always measured against the
*original* model's answers, computed once before the first edit (EasyEdit measured locality on
the already-edited model, its #643). For AlphaEdit the session carries the earlier edits' keys
explicitly (never a global cache: EasyEdit #613). ``restore()`` undoes every edit, newest first,
bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.methods import method_for
from lmsci_mi.editing.metrics import target_nll
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.model import LensModel

__all__ = ["EditingSession", "SessionConfig", "SessionStep"]


@config
class SessionConfig(Config):
    """How a session applies and evaluates its edits.

    Attributes:
        batch_size: requests per edit (1 for ROME; MEMIT and AlphaEdit take batches).
        eval_every: evaluate after every this many requests (0: only after the last).
    """

    batch_size: int = field(default=1, metadata={"help": "requests per edit", "ge": 1})
    eval_every: int = field(
        default=0, metadata={"help": "evaluate every N requests (0: at the end)", "ge": 0}
    )


@dataclass(frozen=True)
class SessionStep:
    """The metrics after ``n_edited`` requests.

    Attributes:
        efficacy: share of the requests edited so far whose rewrite prompt prefers the new target.
        generalisation: the same over their paraphrases.
        specificity: share of neighbourhood prompts (subjects the session never edits) whose
            top-1 next token is still the original model's.
        seconds: the edits' compute time so far.
    """

    n_edited: int
    efficacy: float
    generalisation: float
    specificity: float
    seconds: float


class EditingSession:
    """Edits applied one batch after another on ``lm``, never restored in between.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.editing import MEMITHyperParams, StatsConfig, key_statistics
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", s, t) for s, t in [("Paris", " Rome"), ("Berlin", " Oslo")]]
    >>> session = EditingSession(lm, MEMITHyperParams(layers=(0, 1), steps=2), stats=stats)
    >>> [step.n_edited for step in session.run(reqs)]
    [2]
    >>> session.restore()
    """

    def __init__(
        self,
        lm: LensModel,
        method: Config | str,
        session: SessionConfig | None = None,
        *,
        stats: KeyStatistics | None = None,
    ):
        self.lm, self.stats = lm, stats
        self.method, self.config = method_for(method)
        self.session = session or SessionConfig()
        self.handles: list[EditHandle] = []
        self.order: list[EditRequest] = []
        self.steps: list[SessionStep] = []
        self._keys: dict[int, Tensor] = {}
        self._seconds = 0.0
        self._neighbours: tuple[str, ...] = ()
        self._original: Tensor | None = None

    def run(self, requests: Sequence[EditRequest]) -> list[SessionStep]:
        """Apply ``requests`` in order, in batches, evaluating as configured; returns the steps.

        The original model's answers to the neighbourhood prompts are read before the first edit
        of the session. Any error restores every edit of this call before it propagates.
        """
        requests = list(requests)
        if self._original is None:
            self.stats = self.stats or self._statistics()
            self._remember_original(requests)
        size, every = self.session.batch_size, self.session.eval_every
        applied = len(self.handles)
        try:
            for start in range(0, len(requests), size):
                self._apply(requests[start : start + size])
                done = start + size >= len(requests)
                if done or (every and len(self.order) % every < size):
                    self.steps.append(self.evaluate())
        except BaseException:
            while len(self.handles) > applied:
                self.handles.pop().restore()
            raise
        return self.steps

    def _apply(self, batch: list[EditRequest]) -> None:
        begin = time.perf_counter()
        extra = {"previous_keys": dict(self._keys)} if self.method.name == "alphaedit" else {}
        if extra:
            from lmsci_mi.editing.alphaedit import alphaedit_edit

            handle = alphaedit_edit(
                self.lm, batch, self.config, stats=self.stats, **extra  # type: ignore[arg-type]
            )
            for layer, keys in handle.details["keys"].items():
                earlier = self._keys.get(layer)
                self._keys[layer] = keys if earlier is None else torch.cat([earlier, keys])
        else:
            handle = self.method.function(self.lm, batch, self.config, stats=self.stats)
        self._seconds += time.perf_counter() - begin
        self.handles.append(handle)
        self.order += batch

    def _statistics(self) -> KeyStatistics:
        """The key statistics of the unedited model, for every layer the session edits: once
        the first edit is applied they could no longer be computed."""
        from lmsci_mi.editing.memit import default_memit_layers
        from lmsci_mi.editing.stats import StatsConfig, key_statistics

        if hasattr(self.config, "layers"):  # MEMIT and AlphaEdit
            layers = tuple(getattr(self.config, "layers", None) or default_memit_layers(self.lm))
        else:
            layer = getattr(self.config, "layer", None)
            if layer is None:
                raise ValueError(
                    f"a {self.method.name} session needs a fixed layer (its per-fact traced "
                    "layer would need statistics of the edited model): set layer=, or pass stats="
                )
            layers = (int(layer),)
        tokens = getattr(self.config, "stats_tokens", StatsConfig().n_tokens)
        return key_statistics(self.lm, list(layers), StatsConfig(n_tokens=tokens))

    def _remember_original(self, requests: Sequence[EditRequest]) -> None:
        edited = {r.subject for r in requests}
        self._neighbours = tuple(
            p for r in requests for p in r.neighborhood_prompts if not any(s in p for s in edited)
        )
        self._original = self._top_tokens(self._neighbours)

    @torch.no_grad()
    def _top_tokens(self, prompts: Sequence[str]) -> Tensor:
        if not prompts:
            return torch.empty(0, dtype=torch.long)
        batch = self.lm.encode_batch(list(prompts))
        logits = self.lm(batch.tokens)
        rows = torch.arange(len(prompts), device=logits.device)
        return logits[rows, batch.lengths.to(logits.device) - 1].argmax(-1).cpu()

    @torch.no_grad()
    def evaluate(self) -> SessionStep:
        """The metrics on the model as edited now (see :class:`SessionStep`)."""

        def prefers_new(prompts: list[str], facts: list[EditRequest]) -> float:
            pairs = [(p, f) for p, f in zip(prompts, facts, strict=True) if f.target_true]
            if not pairs:
                return float("nan")
            prompts, facts = [p for p, _ in pairs], [f for _, f in pairs]
            new = target_nll(self.lm, prompts, [f.target_new for f in facts])
            true = target_nll(self.lm, prompts, [f.target_true for f in facts])
            return float((new < true).float().mean())

        para = [(p, r) for r in self.order for p in r.paraphrase_prompts]
        same = self._top_tokens(self._neighbours)
        assert self._original is not None
        kept = (same == self._original).float()
        specificity = float(kept.mean()) if kept.numel() else float("nan")
        return SessionStep(
            n_edited=len(self.order),
            efficacy=prefers_new([r.rewrite_prompt for r in self.order], self.order),
            generalisation=prefers_new([p for p, _ in para], [r for _, r in para]),
            specificity=specificity,
            seconds=self._seconds,
        )

    def restore(self) -> None:
        """Undo every edit of the session, newest first: the weights come back bit for bit."""
        while self.handles:
            self.handles.pop().restore()
        self._keys.clear()
