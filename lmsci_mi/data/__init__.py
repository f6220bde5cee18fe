"""Prompt sets and generators: facts, IOI prompts, repeated random tokens, offline text."""

from lmsci_mi.data.facts import Fact as Fact
from lmsci_mi.data.facts import load_facts as load_facts
from lmsci_mi.data.ioi import IOIBatch as IOIBatch
from lmsci_mi.data.ioi import IOIDataset as IOIDataset
from lmsci_mi.data.ioi import ioi_dataset as ioi_dataset
from lmsci_mi.data.repeated_tokens import repeated_random_tokens as repeated_random_tokens

__all__ = ["Fact", "IOIBatch", "IOIDataset", "ioi_dataset", "load_facts", "repeated_random_tokens"]
