"""Where knowledge is stored: FFN key-value memories (Geva et al. 2021, 2022) and knowledge neurons
(Dai et al. 2022). Re-exports only."""

from lmsci_mi.knowledge.agreement import AgreementConfig, KeyValueAgreement, key_value_agreement
from lmsci_mi.knowledge.neurons import (
    KnowledgeNeurons,
    KnowledgeNeuronsConfig,
    NeuronAttribution,
    NeuronScore,
    enhance_neurons,
    integrated_gradients,
    knowledge_neurons,
    refine_neurons,
    scale_neurons,
    suppress_neurons,
)
from lmsci_mi.knowledge.subupdates import SubUpdateConfig, SubUpdates, sub_updates
from lmsci_mi.knowledge.triggers import TriggerConfig, TriggerExamples, trigger_examples
from lmsci_mi.knowledge.values import ValueVectorConfig, ValueVectors, neuron_label, value_vectors

__all__ = [
    "AgreementConfig",
    "KeyValueAgreement",
    "KnowledgeNeurons",
    "KnowledgeNeuronsConfig",
    "NeuronAttribution",
    "NeuronScore",
    "SubUpdateConfig",
    "SubUpdates",
    "TriggerConfig",
    "TriggerExamples",
    "ValueVectorConfig",
    "ValueVectors",
    "enhance_neurons",
    "integrated_gradients",
    "key_value_agreement",
    "knowledge_neurons",
    "neuron_label",
    "refine_neurons",
    "scale_neurons",
    "sub_updates",
    "suppress_neurons",
    "trigger_examples",
    "value_vectors",
]
