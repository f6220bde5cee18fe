"""Dataset-scale analyses sharded over a Ray cluster (or in this process, for checks).

Infrastructure: nothing here imports a feature package. Each shardable analysis lives beside the
feature it shards (``lmsci_mi.circuits.shards``: the AIE over a fact set and EAP/EAP-IG edge scores
over a prompt set; ``lmsci_mi.editing.shards``: the editing evaluation over a fact set;
``lmsci_mi.collect``: activation collection over a text set), and the dataset-scale functions take
``cluster=ClusterConfig(...)`` themselves.

- :mod:`~lmsci_mi.cluster.shardable`: what a shardable analysis declares (prepare, run, merge)
  and the registry :data:`SHARDABLE`, which finds the built-in analyses by name.
- :mod:`~lmsci_mi.cluster.spec`: :class:`ClusterConfig` (where the shards run) and :class:`ModelSpec`
  (what each worker loads).
- :mod:`~lmsci_mi.cluster.runner`: :func:`run_sharded`, the one entry point.
- :mod:`~lmsci_mi.cluster.ray_backend`: the Ray actors; the only module that imports Ray.

>>> from lmsci_mi.cluster import SHARDABLE
>>> SHARDABLE.names()
('aie', 'collect', 'edges', 'edit-eval')
"""

from lmsci_mi.cluster.runner import run_sharded as run_sharded
from lmsci_mi.cluster.shardable import SHARDABLE as SHARDABLE
from lmsci_mi.cluster.shardable import Job as Job
from lmsci_mi.cluster.shardable import Shardable as Shardable
from lmsci_mi.cluster.shardable import split as split
from lmsci_mi.cluster.spec import ClusterConfig as ClusterConfig
from lmsci_mi.cluster.spec import ModelSpec as ModelSpec
from lmsci_mi.cluster.spec import ShardError as ShardError

__all__ = [
    "SHARDABLE",
    "ClusterConfig",
    "Job",
    "ModelSpec",
    "ShardError",
    "Shardable",
    "run_sharded",
    "split",
]
