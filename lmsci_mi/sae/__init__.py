"""Sparse autoencoders with sae-lens: train one offline on a model's residual stream, measure it,
browse its features, and steer or clamp them during (cached) generation through the registry.

Train with :func:`train_sae` (cached), measure with :func:`sae_stats`, browse with
:func:`feature_cards` / :func:`find_features`, intervene with :func:`steer_with_sae_feature` and
:func:`clamp_sae_feature`, test a steer with :func:`steering_frequency` (a card and a steer at
once: :func:`feature_overview`), and load sae-lens's
pretrained SAEs (online only) with :func:`load_sae`. The default SAE of the bundled SmolLM2 ships
in a compact form (:mod:`~lmsci_mi.sae.compact`, restored by :mod:`~lmsci_mi.sae.shipped`, built
by :mod:`~lmsci_mi.sae.build`). The package uses the core only (generation through
:func:`lmsci_mi.generation.generate`, cache keys through :mod:`lmsci_mi.cache`), no steering module.
"""

from lmsci_mi.sae.core import LensSAE as LensSAE
from lmsci_mi.sae.core import SAEMismatchError as SAEMismatchError
from lmsci_mi.sae.data import SAECorpus as SAECorpus
from lmsci_mi.sae.data import SAEDataConfig as SAEDataConfig
from lmsci_mi.sae.data import sae_corpus as sae_corpus
from lmsci_mi.sae.features import FeatureCards as FeatureCards
from lmsci_mi.sae.features import FeatureConfig as FeatureConfig
from lmsci_mi.sae.features import feature_cards as feature_cards
from lmsci_mi.sae.features import find_features as find_features
from lmsci_mi.sae.features import promoted_tokens as promoted_tokens
from lmsci_mi.sae.frequency import FrequencyConfig as FrequencyConfig
from lmsci_mi.sae.frequency import SteeringFrequency as SteeringFrequency
from lmsci_mi.sae.frequency import steering_frequency as steering_frequency
from lmsci_mi.sae.intervene import clamp_sae_feature as clamp_sae_feature
from lmsci_mi.sae.intervene import steer_with_sae_feature as steer_with_sae_feature
from lmsci_mi.sae.overview import FeatureOverview as FeatureOverview
from lmsci_mi.sae.overview import FeatureOverviewConfig as FeatureOverviewConfig
from lmsci_mi.sae.overview import feature_overview as feature_overview
from lmsci_mi.sae.pretrained import PretrainedSAEUnavailable as PretrainedSAEUnavailable
from lmsci_mi.sae.pretrained import list_trained_saes as list_trained_saes
from lmsci_mi.sae.pretrained import load_sae as load_sae
from lmsci_mi.sae.stats import SAEStats as SAEStats
from lmsci_mi.sae.stats import sae_stats as sae_stats
from lmsci_mi.sae.train import SAETrainConfig as SAETrainConfig
from lmsci_mi.sae.train import cached_sae_path as cached_sae_path
from lmsci_mi.sae.train import load_trained_sae as load_trained_sae
from lmsci_mi.sae.train import train_sae as train_sae
from lmsci_mi.sae.train import untrained_sae as untrained_sae

__all__ = [
    "FeatureCards",
    "FeatureConfig",
    "FeatureOverview",
    "FeatureOverviewConfig",
    "FrequencyConfig",
    "LensSAE",
    "PretrainedSAEUnavailable",
    "SAECorpus",
    "SAEDataConfig",
    "SAEMismatchError",
    "SAEStats",
    "SAETrainConfig",
    "SteeringFrequency",
    "cached_sae_path",
    "clamp_sae_feature",
    "feature_cards",
    "feature_overview",
    "find_features",
    "list_trained_saes",
    "load_sae",
    "load_trained_sae",
    "promoted_tokens",
    "sae_corpus",
    "sae_stats",
    "steer_with_sae_feature",
    "steering_frequency",
    "train_sae",
    "untrained_sae",
]
