"""Where knowledge is stored: FFN key-value memories (Geva et al. 2021, 2022) and knowledge neurons
(Dai et al. 2022). Re-exports only."""

from lmsci_mi.knowledge.agreement import AgreementConfig, KeyValueAgreement, key_value_agreement
from lmsci_mi.knowledge.neurons import (
    KnowledgeNeurons,
    KnowledgeNeuronsConfig,
    NeuronAttribution,
    NeuronScore,
    ScalingEffect,
    SuppressionTest,
    answer_probability,
    enhance_neurons,
    integrated_gradients,
    knowledge_neurons,
    random_neurons_like,
    refine_neurons,
    scale_neurons,
    scaling_effect,
    suppress_neurons,
    suppression_test,
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
    "ScalingEffect",
    "SubUpdateConfig",
    "SubUpdates",
    "SuppressionTest",
    "TriggerConfig",
    "TriggerExamples",
    "ValueVectorConfig",
    "ValueVectors",
    "answer_probability",
    "enhance_neurons",
    "integrated_gradients",
    "key_value_agreement",
    "knowledge_neurons",
    "neuron_label",
    "random_neurons_like",
    "refine_neurons",
    "scale_neurons",
    "scaling_effect",
    "sub_updates",
    "suppress_neurons",
    "suppression_test",
    "trigger_examples",
    "value_vectors",
]
