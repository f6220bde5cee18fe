"""Prompt sets and generators: prompt pairs, facts, IOI prompts, repeated random tokens, offline text."""

from lmsci_mi.data.facts import Fact as Fact
from lmsci_mi.data.facts import load_facts as load_facts
from lmsci_mi.data.ioi import IOIBatch as IOIBatch
from lmsci_mi.data.ioi import IOIDataset as IOIDataset
from lmsci_mi.data.ioi import ioi_dataset as ioi_dataset
from lmsci_mi.data.pairs import PromptPairs as PromptPairs
from lmsci_mi.data.pairs import TokenisedPairs as TokenisedPairs
from lmsci_mi.data.repeated_tokens import repeated_random_tokens as repeated_random_tokens

__all__ = [
    "Fact",
    "IOIBatch",
    "IOIDataset",
    "PromptPairs",
    "TokenisedPairs",
    "ioi_dataset",
    "load_facts",
    "repeated_random_tokens",
]
