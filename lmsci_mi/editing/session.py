"""Sequential editing: edit after edit without restoring, measured against the original model.

An :class:`EditingSession` applies a list of requests in batches with a registered editing method,
keeps every handle, and evaluates at chosen steps. Specificity is always measured against the
*original* model's answers, computed once before the first edit (EasyEdit measured locality on
the already-edited model, its #643). For AlphaEdit the session carries the earlier edits' keys
explicitly (never a global cache: EasyEdit #613). ``restore()`` undoes every edit, newest first,
bit for bit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.editing.fit import check_requests
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.methods import method_for
from lmsci_mi.editing.metrics import (
    EvaluationConfig,
    fact_fluency,
    next_token_top1,
    target_nll,
)
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = ["SESSION_METRICS", "EditingSession", "SessionConfig", "SessionResult"]

SESSION_METRICS = ("ES", "PS", "NS", "specificity", "GE")
"""Columns of :class:`SessionResult` (percent, GE in bits ×100)."""


@config
class SessionConfig(Config):
    """How a session applies and evaluates its edits.

    Attributes:
        batch_size: requests per edit (1 for ROME; MEMIT and AlphaEdit take batches).
        eval_every: evaluate after every this many requests (0: only after the last).
        evaluation: GE's generation length (0 skips GE) and seed, as in ``evaluate_edits``
            (each fact keeps its own random stream at every step).
    """

    batch_size: int = field(default=1, metadata={"help": "requests per edit", "ge": 1})
    eval_every: int = field(
        default=0, metadata={"help": "evaluate every N requests (0: at the end)", "ge": 0}
    )
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig, metadata={"cli": False})


@result_type
class SessionResult(Result):
    """The metrics of a sequential-editing session, step by step.

    ``values`` is ``[step, metric]`` with the columns :data:`SESSION_METRICS`. Step 0 is the
    original model, before any edit (ES and PS then over every request of the run: the unedited
    baseline). ES and PS are the shares of the requests edited so far (retained, not just
    installed) whose rewrite prompt / paraphrases prefer ``target_new``; NS the share of the
    neighbourhood prompts (subjects the session never edits) where ``target_true`` still beats
    the fact's ``target_new``; specificity the share of those prompts whose top-1 token is still
    the *original* model's, read before the first edit; GE the generation entropy of a 50-token
    sample from every request's rewrite prompt.

    Attributes:
        n_edited: requests applied at each step.
        seconds: the edits' compute time up to each step.
        method: the registered method's name (its settings are in ``meta.params``).
        batch_size: requests per edit.
        order: the edited subjects, in the order they were applied.
        targets: the new answer of each, in the same order (the objective).
    """

    n_edited: tuple[int, ...]
    seconds: tuple[float, ...]
    method: str
    batch_size: int
    order: tuple[str, ...]
    targets: tuple[str, ...]

    def metric(self, name: str) -> list[float]:
        """One column over the steps, e.g. ``result.metric("NS")``."""
        if name not in SESSION_METRICS:
            raise UnknownNameError(f"unknown metric {name!r}: choose from {SESSION_METRICS}")
        return [float(v) for v in self.values[:, SESSION_METRICS.index(name)]]

    def summary(self, rows: int = 10) -> str:
        """The method and batch size, then a markdown table of the first ``rows`` steps."""
        head = (
            f"{self.method} session on {self.meta.model}: {len(self.order)} requests, "
            f"{self.batch_size} per edit, {self.seconds[-1]:.1f} s of edits"
        )
        table = ["| edits | " + " | ".join(SESSION_METRICS) + " |", "|---|" + "---|" * len(SESSION_METRICS)]
        for n, row in list(zip(self.n_edited, self.values, strict=True))[:rows]:
            table.append(f"| {n} | " + " | ".join(f"{float(v):.1f}" for v in row) + " |")
        return "\n".join([head, *table])

    def default_title(self, **options: object) -> str:
        return f"{self.method}, batches of {self.batch_size} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """ES, PS, NS and specificity against the number of edits; GE beside them."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9, 3.4))
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        for name in SESSION_METRICS[:4]:
            left.plot(self.n_edited, self.metric(name), marker="o", label=name)
        left.set(xlabel="edits applied", ylabel="% of prompts", ylim=(-3, 103))
        left.legend(fontsize=8)
        right.plot(self.n_edited, self.metric("GE"), marker="o", color="tab:purple")
        right.set(xlabel="edits applied", ylabel="generation entropy GE")
        for ax in (left, right):
            ax.grid(alpha=0.3)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        return fig


class EditingSession:
    """Edits applied one batch after another on ``lm``, never restored in between.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.editing import MEMITConfig, StatsConfig, key_statistics
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", s, t) for s, t in [("Paris", " Rome"), ("Berlin", " Oslo")]]
    >>> no_ge = SessionConfig(evaluation=EvaluationConfig(generation_tokens=0))  # skip GE's sampling
    >>> session = EditingSession(lm, MEMITConfig(layers=(0, 1), steps=2), no_ge, stats=stats)
    >>> session.run(reqs).n_edited
    (0, 2)
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
        self._keys: dict[int, Tensor] = {}
        self._seconds = 0.0
        self._steps: list[tuple[int, float, Tensor]] = []
        self._facts: tuple[EditRequest, ...] = ()
        self._neighbours: tuple[tuple[str, str, str], ...] = ()  # (prompt, true, new)
        self._original: Tensor | None = None
        self._fingerprint = ""

    def run(self, requests: Sequence[EditRequest]) -> SessionResult:
        """Apply ``requests`` in order, in batches, evaluating as configured; returns every step
        so far (:meth:`result`).

        The first call reads the original model: its answers to the neighbourhood prompts, the
        unedited row (step 0), and the key statistics. Those prompts and the GE prompts stay the
        first call's requests in later calls. Any error restores every edit of this call before
        it propagates.
        """
        requests = list(requests)
        if not requests:
            raise UserInputError("no edit requests given")
        for start in range(0, len(requests), self.session.batch_size):  # before any edit
            check_requests(self.lm, requests[start : start + self.session.batch_size])
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
                    self._record()
        except BaseException:
            while len(self.handles) > applied:
                self.handles.pop().restore()
            self.order = self.order[: sum(len(h.requests) for h in self.handles)]
            raise
        return self.result()

    def _apply(self, batch: list[EditRequest]) -> None:
        begin = time.perf_counter()
        if self.method.name == "alphaedit":
            from lmsci_mi.editing.alphaedit import alphaedit_edit

            # The earlier edits' keys are this session's, passed explicitly (EasyEdit #613).
            handle = alphaedit_edit(
                self.lm, batch, self.config, stats=self.stats, previous_keys=dict(self._keys)  # type: ignore[arg-type]
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
        from lmsci_mi.editing.rome import default_rome_layer
        from lmsci_mi.editing.stats import StatsConfig, key_statistics

        if hasattr(self.config, "layers"):  # MEMIT and AlphaEdit
            layers = tuple(getattr(self.config, "layers", None) or default_memit_layers(self.lm))
        else:
            if getattr(self.config, "trace_layer", False):
                raise UserInputError(
                    f"a {self.method.name} session needs a fixed layer (a per-fact traced layer "
                    "would need statistics of the edited model): set layer= or leave "
                    "trace_layer False, or pass stats="
                )
            layer = getattr(self.config, "layer", None)
            layers = (int(layer) if layer is not None else default_rome_layer(self.lm),)
        tokens = getattr(self.config, "stats_tokens", StatsConfig().n_tokens)
        return key_statistics(self.lm, list(layers), StatsConfig(n_tokens=tokens))

    def _remember_original(self, requests: Sequence[EditRequest]) -> None:
        from lmsci_mi.cache import weights_fingerprint

        self._fingerprint = weights_fingerprint(self.lm)
        edited = {r.subject for r in requests}
        self._facts = tuple(requests)
        self._neighbours = tuple(
            (p, r.target_true, r.target_new)
            for r in requests
            for p in r.neighborhood_prompts
            if r.target_true and not any(s in p for s in edited)
        )
        self._original = next_token_top1(self.lm, [p for p, _, _ in self._neighbours])
        self._record()

    def _record(self) -> None:
        row = torch.tensor([self.evaluate()[name] for name in SESSION_METRICS])
        self._steps.append((len(self.order), self._seconds, row))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The metrics (:data:`SESSION_METRICS`, in percent) on the model as edited now; before
        the first edit, ES and PS are over every request (the unedited baseline)."""
        facts = [r for r in (self.order or self._facts) if r.target_true]

        def prefers(pairs: list[tuple[str, str, str]]) -> float:
            if not pairs:
                return float("nan")
            prompts = [p for p, _, _ in pairs]
            nll = target_nll(self.lm, prompts * 2, [w for _, w, _ in pairs] + [lo for _, _, lo in pairs])
            return 100 * float((nll[: len(pairs)] < nll[len(pairs) :]).float().mean())

        assert self._original is not None
        kept = next_token_top1(self.lm, [p for p, _, _ in self._neighbours]) == self._original
        ge = float("nan")
        if self.session.evaluation.generation_tokens:
            ge = float(fact_fluency(self.lm, self._facts, self.session.evaluation).mean())
        return {
            "ES": prefers([(r.rewrite_prompt, r.target_new, r.target_true) for r in facts]),
            "PS": prefers([(p, r.target_new, r.target_true) for r in facts for p in r.paraphrase_prompts]),
            "NS": prefers(list(self._neighbours)),
            "specificity": 100 * float(kept.float().mean()) if kept.numel() else float("nan"),
            "GE": ge,
        }

    def result(self) -> SessionResult:
        """Every step recorded so far, with the order and the method's settings."""
        if not self._steps:
            raise UserInputError("the session has not run yet: call run(requests) first")
        return SessionResult(
            values=torch.stack([row for _, _, row in self._steps]),
            axes=("step", "metric"),
            labels=(tuple(str(n) for n, _, _ in self._steps), SESSION_METRICS),
            meta=self.lm.meta(
                [r.rewrite_prompt for r in self._facts],
                seed=self.session.evaluation.seed,
                data_source="edit requests" + (f"; C from {self.stats.source}" if self.stats else ""),
                params={
                    "method": self.method.name,
                    **{f"edit.{k}": v for k, v in self.config.params().items()},
                    **{f"session.{k}": v for k, v in self.session.params().items()},
                },
            ),
            n_edited=tuple(n for n, _, _ in self._steps),
            seconds=tuple(t for _, t, _ in self._steps),
            method=self.method.name,
            batch_size=self.session.batch_size,
            order=tuple(r.subject for r in self.order),
            targets=tuple(r.target_new for r in self.order),
        )

    def save(self, folder: str | Path) -> Path:
        """Write the session so far to ``folder``: each edit's deltas (one file per edit, kept
        across saves), AlphaEdit's carried keys, the steps and the original model's answers.
        :meth:`resume` continues it in another process, so a long run survives being stopped."""
        from pathlib import Path

        from safetensors.torch import save_file

        if self._original is None:
            raise UserInputError("the session has not run yet: nothing to save")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for i, handle in enumerate(self.handles):
            path = folder / f"edit{i:05d}.safetensors"
            if not path.exists():
                handle.save(folder / f"edit{i:05d}.partial.safetensors")
                os.replace(folder / f"edit{i:05d}.partial.safetensors", path)
        tensors = {f"keys.{layer}": k.contiguous() for layer, k in self._keys.items()}
        tensors["original"] = self._original.contiguous()
        save_file(tensors, folder / "state.partial.safetensors")
        os.replace(folder / "state.partial.safetensors", folder / "state.safetensors")
        state = {
            "model": self.lm.name,
            "fingerprint": self._fingerprint,
            "method": self.method.name,
            "config": self.config.params(),
            "session": self.session.params(),
            "n_edits": len(self.handles),
            "facts": [r.to_json() for r in self._facts],
            "neighbours": [list(n) for n in self._neighbours],
            "steps": [[n, t, row.tolist()] for n, t, row in self._steps],
            "seconds": self._seconds,
        }
        (folder / "session.partial.json").write_text(json.dumps(state))
        os.replace(folder / "session.partial.json", folder / "session.json")
        return folder

    @classmethod
    def resume(
        cls,
        lm: LensModel,
        folder: str | Path,
        method: Config | str,
        session: SessionConfig | None = None,
        *,
        stats: KeyStatistics | None = None,
    ) -> EditingSession:
        """A session saved by :meth:`save`, its edits re-applied to the unedited ``lm``.

        Raises:
            ValueError: ``lm`` is not the model the session started from (its weights differ),
                or the method or its settings differ from the saved ones. Nothing is changed.
        """
        from pathlib import Path

        from safetensors.torch import load_file

        from lmsci_mi.cache import weights_fingerprint
        from lmsci_mi.editing.handle import apply_delta

        folder = Path(folder)
        state = json.loads((folder / "session.json").read_text())
        resumed = cls(lm, method, session, stats=stats)
        if weights_fingerprint(lm) != state["fingerprint"]:
            raise UserInputError(
                f"{folder} continues a session on other weights than {lm.name}'s now: resume it "
                "on the unedited model it started from"
            )
        mine = json.loads(json.dumps([resumed.method.name, resumed.config.params(), resumed.session.params()]))
        saved_config = dict(state["config"])
        if "config" in saved_config:  # saved before ROMEHyperParams & co. were renamed *Config
            saved_config["config"] = str(saved_config["config"]).replace("HyperParams", "Config")
        saved = [state["method"], saved_config, state["session"]]
        if mine != saved:
            raise UserInputError(f"{folder} was saved with other settings: {saved}, not {mine}")
        tensors = load_file(folder / "state.safetensors")
        resumed.stats = stats or resumed._statistics()  # of the unedited model, so before any edit
        try:
            for i in range(state["n_edits"]):
                handle = apply_delta(lm, folder / f"edit{i:05d}.safetensors")
                resumed.handles.append(handle)
                resumed.order += handle.requests
        except BaseException:
            resumed.restore()
            raise
        resumed._keys = {int(k.split(".")[1]): v for k, v in tensors.items() if k.startswith("keys.")}
        resumed._original = tensors["original"]
        resumed._fingerprint = state["fingerprint"]
        resumed._facts = tuple(EditRequest.from_json(r) for r in state["facts"])
        resumed._neighbours = tuple((p, t, n) for p, t, n in state["neighbours"])
        resumed._steps = [(n, t, torch.tensor(row)) for n, t, row in state["steps"]]
        resumed._seconds = state["seconds"]
        return resumed

    def restore(self) -> None:
        """Undo every edit of the session, newest first: the weights come back bit for bit."""
        while self.handles:
            self.handles.pop().restore()
        self.order.clear()
        self._keys.clear()
