"""Lenses on the residual stream: direct logit attribution, the logit lens and the tuned lens."""

from lmsci_mi.lenses.dla import DLAConfig as DLAConfig
from lmsci_mi.lenses.dla import LogitAttribution as LogitAttribution
from lmsci_mi.lenses.dla import LogitContributions as LogitContributions
from lmsci_mi.lenses.dla import direct_logit_attribution as direct_logit_attribution
from lmsci_mi.lenses.dla import dla_hook_names as dla_hook_names
from lmsci_mi.lenses.dla import logit_contributions as logit_contributions

__all__ = [
    "DLAConfig",
    "LogitAttribution",
    "LogitContributions",
    "direct_logit_attribution",
    "dla_hook_names",
    "logit_contributions",
]
