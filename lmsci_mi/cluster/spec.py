"""Where the shards of an analysis run and what each worker loads: :class:`ClusterConfig`,
:class:`ModelSpec`, and the errors and test hooks the runner and the Ray backend share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lmsci_mi.cache import weights_fingerprint
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["ClusterConfig", "FaultInjection", "ModelSpec", "ShardError"]

LOCAL_ADDRESSES = ("auto", "local", "process")


@config
class ClusterConfig(Config):
    """Where and how the shards of an analysis run.

    ``address``: ``"auto"`` joins the cluster that ``RAY_ADDRESS`` or a running head names, else
    starts a local Ray instance; ``"local"`` starts a local instance; ``"host:port"`` (or
    ``"ray://host:port"``) joins a cluster started with ``ray start --head``; ``"process"`` runs
    the shards one after another in this process, without Ray (the same split and merge; for
    checks and debugging).
    """

    address: str = field(
        default="auto",
        metadata={"help": "auto | local | HOST:PORT (ray start --head) | process (no Ray)"},
    )
    shards: int | None = field(
        default=None, metadata={"help": "shards (default: 4 per worker, for load balance)", "ge": 1}
    )
    workers: int | None = field(
        default=None,
        metadata={"help": "Ray actors (default: as many as the cluster's CPUs or GPUs allow)", "ge": 1},
    )
    cpus_per_worker: int = field(
        default=1, metadata={"help": "CPUs per actor; its torch thread count", "ge": 1}
    )
    gpus_per_worker: float | None = field(
        default=None,
        metadata={"help": "GPUs per actor (default: 1 when the cluster has GPUs, else 0)", "ge": 0},
    )
    max_retries: int = field(
        default=3,
        metadata={"help": "times an actor that dies is restarted and its shard re-run", "ge": 0},
    )
    local_cpus: int | None = field(
        default=None, metadata={"help": "CPUs of a local Ray instance (default: all)", "ge": 1}
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar", "cli": False})

    def validate(self) -> None:
        a = self.address
        if a not in LOCAL_ADDRESSES and ":" not in a:
            raise UserInputError(
                f"ClusterConfig.address must be 'auto', 'local', 'process' or a Ray address like "
                f"'10.0.0.1:6379' (from `ray start --head`), not {a!r}"
            )


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads the driver's model: :func:`~lmsci_mi.load_model`'s arguments, and the
    weights fingerprint the loaded model must have (a model changed in memory on the driver, or
    another version on a node, is refused instead of silently analysed)."""

    name_or_path: str
    sink: int | None
    dtype: str
    fingerprint: str

    @classmethod
    def of(cls, lm: LensModel) -> ModelSpec:
        source = Path(lm.source)
        name = str(source) if source.is_absolute() and source.exists() else lm.name
        return cls(name, lm.sink_token_id, str(lm.cfg.dtype), weights_fingerprint(lm))

    def load(self) -> LensModel:
        import torch

        from lmsci_mi.loading import load_model

        dtype = getattr(torch, self.dtype.removeprefix("torch."))
        lm = load_model(self.name_or_path, dtype=dtype, sink=self.sink)
        if weights_fingerprint(lm) != self.fingerprint:
            raise UserInputError(
                f"the worker's {self.name_or_path!r} has other weights than the driver's model "
                "(was the driver's model edited or steered in memory, or is another version "
                "cached on this node?): shard only models that load_model gives as they are, or "
                "ship an edit's deltas as the editing evaluation does"
            )
        return lm


class ShardError(RuntimeError):
    """A shard failed for a reason a retry cannot fix (bad input, a bug); the whole run fails."""


@dataclass(frozen=True)
class FaultInjection:
    """For tests: the worker running shard ``shard`` dies (``os._exit``) on its first attempt,
    leaving a marker in ``marker_dir`` so the retry runs normally."""

    shards: tuple[int, ...]
    marker_dir: str
