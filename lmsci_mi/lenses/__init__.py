"""Lenses on the residual stream: direct logit attribution, the logit lens and the tuned lens."""

from lmsci_mi.lenses.dla import DLAConfig as DLAConfig
from lmsci_mi.lenses.dla import LogitAttribution as LogitAttribution
from lmsci_mi.lenses.dla import LogitContributions as LogitContributions
from lmsci_mi.lenses.dla import direct_logit_attribution as direct_logit_attribution
from lmsci_mi.lenses.dla import dla_hook_names as dla_hook_names
from lmsci_mi.lenses.dla import logit_contributions as logit_contributions
from lmsci_mi.lenses.logit_lens import LENS_SITES as LENS_SITES
from lmsci_mi.lenses.logit_lens import LogitLens as LogitLens
from lmsci_mi.lenses.logit_lens import LogitLensConfig as LogitLensConfig
from lmsci_mi.lenses.logit_lens import final_norm as final_norm
from lmsci_mi.lenses.logit_lens import logit_lens as logit_lens
from lmsci_mi.lenses.tuned_lens import TunedLens as TunedLens
from lmsci_mi.lenses.tuned_lens import TunedLensConfig as TunedLensConfig
from lmsci_mi.lenses.tuned_lens import fit_least_squares_lens as fit_least_squares_lens
from lmsci_mi.lenses.tuned_lens import train_tuned_lens as train_tuned_lens
from lmsci_mi.lenses.tuned_lens import tuned_lens as tuned_lens
from lmsci_mi.lenses.tuned_lens import tuned_lens_for as tuned_lens_for

__all__ = [
    "LENS_SITES",
    "DLAConfig",
    "LogitAttribution",
    "LogitContributions",
    "LogitLens",
    "LogitLensConfig",
    "TunedLens",
    "TunedLensConfig",
    "direct_logit_attribution",
    "dla_hook_names",
    "final_norm",
    "fit_least_squares_lens",
    "logit_contributions",
    "logit_lens",
    "train_tuned_lens",
    "tuned_lens",
    "tuned_lens_for",
]
