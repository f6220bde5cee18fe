"""Where knowledge is stored: FFN key-value memories and knowledge neurons."""

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

__all__ = [
    "KnowledgeNeurons",
    "KnowledgeNeuronsConfig",
    "NeuronAttribution",
    "NeuronScore",
    "enhance_neurons",
    "integrated_gradients",
    "knowledge_neurons",
    "refine_neurons",
    "scale_neurons",
    "suppress_neurons",
]
