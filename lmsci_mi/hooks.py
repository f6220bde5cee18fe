"""The hook registry: the only place in lmsci-mi that attaches or removes a hook.

Every intervention (capture, patch, add a vector, ablate) is a context manager that validates all
of its hook names first, attaches its hooks on entry and removes exactly its own hooks in
``finally``, so blocks nest and an exception never leaves a hook behind. After TransformerLens
``HookedRootModule.hooks()`` and baukit ``Trace``, without baukit's half-attached ``TraceDict``.
"""

from __future__ import annotations

import difflib
import itertools
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookedRootModule, HookPoint

from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.generation import decoding_step
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sites import hook_name, layout_of
from lmsci_mi.typecheck import shape_checked

__all__ = [
    "ActiveHook",
    "Capture",
    "HookFn",
    "HookRegistry",
    "NamesFilter",
    "PositionScope",
    "Positions",
    "RunningExclusion",
    "UnknownHookError",
    "registry_for",
    "selection_mask",
]

NamesFilter = str | Sequence[str] | Callable[[str], bool]
"""One hook name, several names, or a predicate over every name of the model."""

ScopeKind = Literal["all", "prompt", "generated", "from_last_prompt"]


@dataclass(frozen=True)
class PositionScope:
    """Positions named by their role in the sequence, valid in every forward pass of generation.

    Cached generation feeds one new position per row and step, so fixed indices mean nothing
    there; a scope reads each pass's absolute positions and each row's prompt length from the
    sampler (:func:`lmsci_mi.generation.decoding_step`) and is applied per row and per step.
    In a plain forward every position is a prompt position (declare a padded batch's lengths
    with :func:`lmsci_mi.generation.prompt_lengths`).

    - ``all()``: every position, prompt and generated.
    - ``prompt(start, stop)``: the prompt's positions ``[start, stop)``, counted in each row's
      own prompt; negative values count from its end (``prompt(-1)``: the last prompt token).
    - ``generated()``: the positions of generated tokens. The first new token is predicted from
      the last prompt position, so this scope does not change it.
    - ``from_last_prompt()``: the last prompt position and every generated one, so the first
      new token is steered too (the off-by-one of nrimsky/CAA #3 is the difference of these two).

    ``exclude`` (an :class:`~lmsci_mi.positions.Exclude`) leaves chosen positions alone: the
    sink (position 0) and explicit positions; positions of chosen tokens need the tokens, which
    a scope does not see (use :class:`RunningExclusion`). ``skip=n``, the older spelling, leaves
    the first ``n`` positions alone (``skip=1``: the sink) and is kept as an alias.

    >>> PositionScope.prompt(-1)
    PositionScope(kind='prompt', start=-1, stop=None, exclude=None)
    >>> PositionScope.all(skip=1).exclude == Exclude()
    True
    """

    kind: ScopeKind = "all"
    start: int | None = None
    stop: int | None = None
    skip: int = field(default=0, repr=False, compare=False)
    exclude: Exclude | None = None

    def __post_init__(self) -> None:
        if self.kind not in get_args(ScopeKind):
            raise UserInputError(f"unknown scope {self.kind!r}: use one of {get_args(ScopeKind)}")
        if self.kind != "prompt" and (self.start is not None or self.stop is not None):
            raise UserInputError(f"start/stop select prompt positions; scope {self.kind!r} takes none")
        if self.skip < 0:
            raise UserInputError(f"skip must be >= 0, got {self.skip}")
        if self.exclude is not None and not self.exclude.by_position:
            raise UserInputError(
                "a PositionScope selects by position and never sees the tokens: leave tokens "
                f"{self.exclude.token_ids} out with lm.running_exclusion(exclude) (a RunningExclusion) in the hook"
            )
        if self.skip:  # the alias: the first `skip` positions are an exclusion like any other
            merged = Exclude.leading(self.skip).union(self.exclude)
            object.__setattr__(self, "exclude", merged)

    @classmethod
    def all(cls, *, skip: int = 0, exclude: Exclude | None = None) -> PositionScope:
        return cls("all", skip=skip, exclude=exclude)

    @classmethod
    def prompt(
        cls,
        start: int | None = None,
        stop: int | None = None,
        *,
        skip: int = 0,
        exclude: Exclude | None = None,
    ) -> PositionScope:
        return cls("prompt", start, stop, skip, exclude)

    @classmethod
    def generated(cls) -> PositionScope:
        return cls("generated")

    @classmethod
    def from_last_prompt(cls) -> PositionScope:
        return cls("from_last_prompt")

    def mask(self, batch: int, n_pos: int, device: torch.device) -> Bool[Tensor, "batch pos"]:
        """Which of the running pass's ``[batch, n_pos]`` positions the scope covers."""
        step = decoding_step()
        offset = step.offset if step is not None else 0
        position = offset + torch.arange(n_pos, device=device)[None]  # absolute, [1, pos]
        if step is None or step.prompt_lengths is None:
            length = torch.full((batch, 1), offset + n_pos, device=device)
        else:
            if step.prompt_lengths.numel() != batch:
                raise ValueError(
                    f"{step.prompt_lengths.numel()} prompt lengths declared for a batch of {batch}"
                )
            length = step.prompt_lengths.to(device)[:, None]
        if self.kind == "all":
            mask = torch.ones(batch, n_pos, dtype=torch.bool, device=device)
        elif self.kind == "generated":
            mask = position >= length
        elif self.kind == "from_last_prompt":
            mask = position >= length - 1
        else:
            lo = _bound(self.start, length, 0)
            hi = _bound(self.stop, length, length)
            mask = (position >= lo) & (position < hi) & (position < length)
        if self.exclude is not None:
            mask = mask & self.exclude.keep_positions(batch, n_pos, device, offset=offset)
        return mask


def _bound(value: int | None, length: Tensor, default: int | Tensor) -> Tensor:
    """A prompt-relative slice bound as an absolute position per row (negative: from the end)."""
    if value is None:
        return torch.as_tensor(default, device=length.device).expand_as(length)
    if value < 0:
        return (length + value).clamp_min(0)
    return torch.full_like(length, value)


class RunningExclusion:
    """Which positions of the running forward pass an :class:`~lmsci_mi.positions.Exclude`
    leaves out, for a hook that acts at every pass, cached generation included.

    Attach :meth:`hooks` in the same block as the hook that reads :meth:`keep`. The sink of a
    model with a sink token is recognised by its first-block input (the sink token's embedding
    at position 0), so the mark holds with and without the KV cache and under
    TransformerLens's own ``generate``, which embeds without ``hook_embed``; a model without
    positional embeddings gives that input wherever the sink token recurs, and those positions
    are left out too. Tokens are recognised by their embedding (``hook_embed``), and absolute
    positions (the first token of a sink-free model among them) from the pass's
    :func:`~lmsci_mi.generation.decoding_step`: both hold in lmsci-mi's sampler and in a plain
    forward, not in TransformerLens's ``generate``.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> running = lm.running_exclusion(Exclude(positions=(2,)))
    >>> seen = []
    >>> with lm.hooks.hooks(fwd=[*running.hooks(), ("blocks.1.hook_resid_post",
    ...                          lambda act, hook: seen.append(running.keep(act)))]):
    ...     _ = lm.model(torch.tensor([[0, 5, 6, 7]]))
    >>> seen[0][..., 0].tolist()
    [[False, True, False, True]]
    """

    sink_site = hook_name("resid_pre", 0)
    token_site = "hook_embed"

    def __init__(
        self,
        exclude: Exclude | None = None,
        *,
        sink_reference: Tensor | None = None,
        token_references: Tensor | None = None,
    ) -> None:
        """``sink_reference``: the sink token's first-block input (None: the model has no sink
        token); ``token_references``: the embeddings of ``exclude.token_ids``. A model computes
        both (:meth:`lmsci_mi.model.LensModel.running_exclusion`)."""
        self.exclude = resolve_exclude(exclude)
        self._sink: Tensor | None = None
        self._tokens: Tensor | None = None
        self._pending: Tensor | None = None
        self.sink_reference = sink_reference if self.exclude.sink else None
        self.token_references = token_references if self.exclude.token_ids else None

    def hooks(self) -> list[tuple[str, HookFn]]:
        """The recording hooks, for :meth:`HookRegistry.hooks`'s ``fwd``."""
        out: list[tuple[str, HookFn]] = []
        if self.token_references is not None:
            out.append((self.token_site, self._record_tokens))
        if self.token_references is not None or self.sink_reference is not None:
            out.append((self.sink_site, self._record_pass))
        return out

    def _record_tokens(self, activation: Tensor, hook: Any) -> None:
        assert self.token_references is not None
        refs = self.token_references.to(activation.device, activation.dtype)
        self._pending = (activation[:, :, None] == refs[None, None]).all(-1).any(-1)

    def _record_pass(self, activation: Tensor, hook: Any) -> None:
        # Every pass reaches the first block's input; the token mark is this pass's only if
        # hook_embed fired in it (TransformerLens's generate embeds without it).
        self._tokens, self._pending = self._pending, None
        if self.sink_reference is not None:
            reference = self.sink_reference.to(activation.device, activation.dtype)
            self._sink = (activation == reference).all(-1)

    def keep(self, activation: Tensor) -> Bool[Tensor, "batch pos 1"]:
        """True where the running pass's ``activation`` (``[batch, pos, ...]``) is kept."""
        batch, n_pos = activation.shape[:2]
        step = decoding_step()
        offset = step.offset if step is not None else 0
        # The sink by its input where the model has a sink token, else by its position.
        by_position = Exclude(
            sink=self.exclude.sink and self.sink_reference is None, positions=self.exclude.positions
        )
        kept = by_position.keep_positions(batch, n_pos, activation.device, offset=offset)
        for marked in (self._sink, self._tokens):
            # A mark from another pass (another shape) is stale: ignored, as a pass without it.
            if marked is not None and marked.shape == (batch, n_pos):
                kept = kept & ~marked
        return kept.unsqueeze(-1)


Positions = (
    int | Sequence[int] | Int[Tensor, " batch"] | Bool[Tensor, "batch pos"] | PositionScope | None
)
"""Which token positions an intervention touches.

``None`` means every position. An int or a list of ints picks the same positions in every
sequence. A 1-D integer tensor gives one position per sequence (e.g. the S2 token of each IOI
prompt). A boolean ``[batch, pos]`` mask gives full control. A :class:`PositionScope` names
positions by role (prompt, generated) and is the only choice besides ``None`` that stays
meaningful during cached generation, where each step sees one new position.
"""


class HookFn(Protocol):
    """The one hook signature: return ``None`` to observe, a tensor to replace the activation."""

    def __call__(self, activation: Tensor, hook: HookPoint) -> Tensor | None: ...


class UnknownHookError(UnknownNameError):
    """A hook name that the model does not have. The message lists the closest valid names.

    An :class:`~lmsci_mi.errors.UnknownNameError`: a LookupError and a ValueError, as before."""


@dataclass(frozen=True)
class ActiveHook:
    """One hook that the registry has attached and not yet removed."""

    name: str
    direction: Literal["fwd", "bwd"]
    label: str
    level: int


class Capture:
    """Activations recorded by :meth:`HookRegistry.capture`, keyed by hook name.

    Filled while the ``with`` block runs; read it after (or inside, after a forward pass).
    Capturing the same site on several forward passes keeps the last one unless
    ``accumulate=True`` was given, in which case the passes are concatenated along the batch.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._values: dict[str, Tensor] = {}

    def __getitem__(self, name: str) -> Tensor:
        if name not in self._values:
            if name in self.names:
                raise UnknownNameError(f"{name!r} was not reached: run a forward pass inside the block.")
            raise UnknownNameError(f"{name!r} was not captured; captured sites are {list(self.names)}")
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> Iterator[tuple[str, Tensor]]:
        return iter(self._values.items())

    def _store(self, name: str, value: Tensor, accumulate: bool) -> None:
        if accumulate and name in self._values:
            self._values[name] = torch.cat([self._values[name], value], dim=0)
        else:
            self._values[name] = value


# Levels above TransformerLens's own `hooks()` counter (which starts at 0), one per context, so
# that `remove_hooks(level=...)` removes exactly one context's hooks and nothing else.
_LEVELS = itertools.count(1_000_000)


class HookRegistry:
    """Attaches and removes hooks on one TransformerLens model.

    Use :func:`registry_for` to get the registry of a model: there is one per model, so
    :meth:`active` sees every hook lmsci-mi has attached to it.
    """

    def __init__(self, model: HookedRootModule) -> None:
        # Weakly: the registries are values of a WeakKeyDictionary keyed by the model, and a value
        # that refers to its key keeps the key alive for ever (every model ever loaded would stay).
        self._model = weakref.ref(model)
        self._active: list[ActiveHook] = []

    @property
    def model(self) -> HookedRootModule:
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this hook registry no longer exists")
        return model

    # ----------------------------------------------------------------------------- names

    @property
    def hook_names(self) -> tuple[str, ...]:
        return tuple(self.model.hook_dict)

    def resolve(self, names: NamesFilter) -> list[str]:
        """Turn a names filter into the list of hook names it denotes, validating each name.

        Raises:
            UnknownHookError: a name is not a hook point of the model; the message lists the
                closest valid names. Nothing is attached when this raises.
        """
        valid = self.model.hook_dict
        if callable(names):
            found = [name for name in valid if names(name)]
            if not found:
                raise UnknownHookError("the names filter matched no hook point of the model")
            return found
        requested = [names] if isinstance(names, str) else list(names)
        for name in requested:
            if name not in valid:
                raise UnknownHookError(self._unknown_message(name))
        return requested

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.model.hook_dict), n=5, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        example = next(iter(self.model.hook_dict), "")
        return (
            f"Unknown hook name {name!r}.{hint} Hook names look like {example!r}; "
            "`registry.hook_names` lists them all."
        )

    # ----------------------------------------------------------------------------- attach

    @contextmanager
    def hooks(
        self,
        fwd: Sequence[tuple[NamesFilter, HookFn]] = (),
        bwd: Sequence[tuple[NamesFilter, HookFn]] = (),
        *,
        label: str = "hooks",
    ) -> Iterator[None]:
        """Attach forward and backward hooks for the duration of the block.

        All names are resolved before the first hook is attached, and exactly this block's hooks
        are removed on exit (normal or exceptional), so blocks nest.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> with lm.hooks.hooks(fwd=[("blocks.0.hook_resid_post", lambda act, hook: None)]):
        ...     len(lm.hooks.active())
        1
        >>> len(lm.hooks.active())
        0
        """
        plan: list[tuple[str, HookFn, Literal["fwd", "bwd"]]] = []
        for direction, pairs in (("fwd", fwd), ("bwd", bwd)):
            for names, fn in pairs:
                for name in self.resolve(names):
                    plan.append((name, fn, direction))  # type: ignore[arg-type]
        level = next(_LEVELS)
        mine: list[ActiveHook] = []
        try:
            for name, fn, direction in plan:
                self.model.hook_dict[name].add_hook(fn, dir=direction, level=level)
                record = ActiveHook(name=name, direction=direction, label=label, level=level)
                mine.append(record)
                self._active.append(record)
            yield
        finally:
            for record in mine:
                self.model.hook_dict[record.name].remove_hooks(record.direction, level=level)
            self._active = [record for record in self._active if record.level != level]

    def active(self) -> list[ActiveHook]:
        """The hooks this registry has attached and not yet removed, oldest first."""
        return list(self._active)

    def attached_count(self) -> int:
        """Every hook on every hook point of the model, whoever attached it.

        Tests use this to prove cleanup: it sees hooks that bypassed the registry too.
        """
        return sum(len(hp.fwd_hooks) + len(hp.bwd_hooks) for hp in self.model.hook_dict.values())

    # ----------------------------------------------------------------------------- interventions

    @contextmanager
    def capture(
        self,
        sites: NamesFilter,
        *,
        detach: bool = True,
        retain_grad: bool = False,
        accumulate: bool = False,
    ) -> Iterator[Capture]:
        """Record the activations at ``sites`` during the forward passes run inside the block.

        Args:
            sites: hook names or a filter over them.
            detach: store detached tensors (set False to keep the autograd graph).
            retain_grad: keep the graph and call ``retain_grad()`` so that ``.grad`` is filled by
                a backward pass (used by attribution patching). Implies ``detach=False``.
            accumulate: concatenate along the batch over several forward passes.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> with lm.hooks.capture("blocks.1.hook_resid_post") as cap:
        ...     _ = lm.model(torch.tensor([[1, 2, 3]]))
        >>> tuple(cap["blocks.1.hook_resid_post"].shape)
        (1, 3, 64)
        """
        names = self.resolve(sites)
        result = Capture(names)

        def record(activation: Tensor, hook: HookPoint) -> None:
            value = activation
            if retain_grad:
                value.retain_grad()
            elif detach:
                value = value.detach()
            result._store(hook.name or "", value, accumulate)

        with self.hooks(fwd=[(names, record)], label="capture"):
            yield result

    @contextmanager
    def patch(
        self,
        site: str,
        source: Tensor,
        *,
        positions: Positions = None,
        heads: int | Sequence[int] | None = None,
    ) -> Iterator[None]:
        """Replace the activation at ``site`` with ``source`` at the given positions and heads.

        ``source`` is a whole activation of the same shape as the site's (for example the clean
        run's, from :meth:`capture`); its batch axis may be 1 to broadcast. Only the selected
        positions and heads are taken from it; everything else keeps the running values.

        Raises:
            UnknownHookError: unknown site (nothing attached).
            ValueError: shape mismatch, raised at the forward pass (the block still cleans up).
        """
        (name,) = self.resolve(site)

        def replace(activation: Tensor, hook: HookPoint) -> Tensor:
            if source.shape[1:] != activation.shape[1:] or source.shape[0] not in (
                1,
                activation.shape[0],
            ):
                raise UserInputError(
                    f"patch source for {name!r} has shape {tuple(source.shape)} but the "
                    f"activation has {tuple(activation.shape)}; the prompts must tokenise to the "
                    "same length (or pass a source captured from a run of the same shape)."
                )
            mask = selection_mask(activation, name, positions, heads)
            # A source kept on the CPU (to spare GPU memory) is moved per forward pass.
            return torch.where(mask, source.to(activation.device, activation.dtype), activation)

        with self.hooks(fwd=[(name, replace)], label=f"patch {name}"):
            yield

    @contextmanager
    @shape_checked
    def add_vector(
        self,
        site: str,
        vector: Float[Tensor, " d"],
        *,
        scale: float = 1.0,
        positions: Positions = None,
        heads: int | Sequence[int] | None = None,
    ) -> Iterator[None]:
        """Add ``scale * vector`` to the activation at ``site`` (activation steering).

        With ``positions=None`` the vector is added at every position, which also holds during
        cached generation, where each step's activation covers only the newest token; a
        :class:`PositionScope` (prompt, generated, from the last prompt token) holds there too.
        """
        (name,) = self.resolve(site)

        def add(activation: Tensor, hook: HookPoint) -> Tensor:
            if vector.shape[-1] != activation.shape[-1]:
                raise UserInputError(
                    f"vector has size {vector.shape[-1]} but {name!r} has size "
                    f"{activation.shape[-1]} in its last axis"
                )
            mask = selection_mask(activation, name, positions, heads)
            shift = scale * vector.to(device=activation.device, dtype=activation.dtype)
            return activation + mask * shift

        with self.hooks(fwd=[(name, add)], label=f"add_vector {name}"):
            yield

    @contextmanager
    def ablate(
        self,
        sites: NamesFilter,
        *,
        mode: Literal["zero", "mean"] = "zero",
        means: Mapping[str, Tensor] | None = None,
        positions: Positions = None,
        heads: int | Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    ) -> Iterator[None]:
        """Zero- or mean-ablate ``sites`` (optionally only some positions and heads).

        Args:
            mode: ``"zero"`` writes zeros; ``"mean"`` writes ``means[site]``, which must broadcast
                against the activation (compute it with :meth:`mean_activations`).
            heads: heads to ablate at every site, or ``{hook name: heads}`` for a different set
                per site (a set of heads across layers, e.g. everything outside a circuit);
                sites the mapping leaves out or maps to no head are left alone.
        """
        names = self.resolve(sites)
        if isinstance(heads, Mapping):
            unknown = [name for name in heads if name not in names]
            if unknown:
                raise UserInputError(f"heads given for {unknown}, which are not among the ablated sites")
            names = [name for name in names if len(heads.get(name, ()))]
        if mode not in ("zero", "mean"):
            raise UserInputError(f"mode must be 'zero' or 'mean', not {mode!r}")
        if mode == "mean":
            missing = [n for n in names if means is None or n not in means]
            if missing:
                raise UserInputError(
                    f"mean ablation needs means for {missing}; compute them with "
                    "registry.mean_activations(sites, reference_tokens)"
                )

        def overwrite(activation: Tensor, hook: HookPoint) -> Tensor:
            name = hook.name or ""
            if mode == "zero":
                fill = torch.zeros((), dtype=activation.dtype, device=activation.device)
            else:
                assert means is not None
                fill = means[name].to(device=activation.device, dtype=activation.dtype)
                if fill.ndim == activation.ndim and fill.shape[1] != activation.shape[1]:
                    raise UserInputError(
                        f"per-position means for {name!r} cover {fill.shape[1]} positions but the "
                        f"input has {activation.shape[1]}; average over positions instead"
                    )
            chosen = heads[name] if isinstance(heads, Mapping) else heads
            mask = selection_mask(activation, name, positions, chosen)
            return torch.where(mask, fill, activation)

        with self.hooks(fwd=[(names, overwrite)], label="ablate"):
            yield

    @shape_checked
    def mean_activations(
        self,
        sites: NamesFilter,
        tokens: Int[Tensor, "batch pos"],
        *,
        over_positions: bool = False,
    ) -> dict[str, Tensor]:
        """Mean activation at each site over a reference batch (one forward pass, no grad).

        The mean is over the batch, keeping positions (shape ``[1, pos, ...]``), or over batch
        and positions with ``over_positions=True`` (shape broadcastable to any length).
        """
        with torch.no_grad(), self.capture(sites) as cap:
            self.model(tokens)
        means: dict[str, Tensor] = {}
        for name, value in cap.items():
            layout = layout_of(name)
            reduce = (0, layout.position_axis) if over_positions else (0,)
            means[name] = value.mean(dim=reduce, keepdim=True)
        return means


def selection_mask(
    activation: Tensor,
    name: str,
    positions: Positions,
    heads: int | Sequence[int] | None,
) -> Tensor:
    """A boolean mask, broadcastable to ``activation``, of the selected positions and heads.

    A mask rather than index arithmetic keeps one code path for every position spec, per-example
    positions included, and every site layout.
    """
    layout = layout_of(name)
    batch, n_pos = activation.shape[0], activation.shape[layout.position_axis]
    device = activation.device
    pos_mask = _position_mask(positions, batch, n_pos, device)  # [batch, pos]
    shape = [1] * activation.ndim
    shape[0], shape[layout.position_axis] = batch, n_pos
    mask = pos_mask.reshape(shape)
    if heads is not None:
        if layout.head_axis is None:
            raise UserInputError(
                f"{name!r} has no head axis; select heads on hook_z, hook_q/k/v, hook_result or "
                "hook_pattern"
            )
        n_heads = activation.shape[layout.head_axis]
        head_list = [heads] if isinstance(heads, int) else list(heads)
        bad = [h for h in head_list if not 0 <= h < n_heads]
        if bad:
            # Grouped-query attention: k/v hooks have fewer heads than q, so the bound comes
            # from the tensor, not from cfg.n_heads.
            raise UserInputError(f"head index {bad} out of range for {name!r}, which has {n_heads}")
        head_mask = torch.zeros(n_heads, dtype=torch.bool, device=device)
        head_mask[head_list] = True
        head_shape = [1] * activation.ndim
        head_shape[layout.head_axis] = n_heads
        mask = mask & head_mask.reshape(head_shape)
    return mask


def _position_mask(positions: Positions, batch: int, n_pos: int, device: torch.device) -> Tensor:
    if isinstance(positions, PositionScope):
        return positions.mask(batch, n_pos, device)
    if positions is None:
        return torch.ones(batch, n_pos, dtype=torch.bool, device=device)
    if isinstance(positions, Tensor) and positions.dtype == torch.bool:
        if tuple(positions.shape) != (batch, n_pos):
            raise UserInputError(
                f"position mask has shape {tuple(positions.shape)}, expected {(batch, n_pos)}"
            )
        return positions.to(device)
    mask = torch.zeros(batch, n_pos, dtype=torch.bool, device=device)
    if isinstance(positions, Tensor) and positions.ndim == 1 and positions.numel() == batch:
        per_example = positions.to(device=device, dtype=torch.long)
        if (per_example >= n_pos).any() or (per_example < -n_pos).any():
            raise UserInputError(f"positions {per_example.tolist()} out of range for length {n_pos}")
        mask[torch.arange(batch, device=device), per_example % n_pos] = True
        return mask
    pos_list = [int(positions)] if isinstance(positions, int) else [int(p) for p in positions]
    bad = [p for p in pos_list if not -n_pos <= p < n_pos]
    if bad:
        raise UserInputError(f"positions {bad} out of range for sequences of length {n_pos}")
    mask[:, [p % n_pos for p in pos_list]] = True
    return mask


_REGISTRIES: weakref.WeakKeyDictionary[HookedRootModule, HookRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry_for(model: HookedRootModule) -> HookRegistry:
    """The one registry of ``model``, created on first use."""
    registry = _REGISTRIES.get(model)
    if registry is None:
        registry = HookRegistry(model)
        _REGISTRIES[model] = registry
    return registry
