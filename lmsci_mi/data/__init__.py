"""Prompt sets and generators: facts, IOI prompts, repeated random tokens, offline text."""

from lmsci_mi.data.ioi import IOIBatch as IOIBatch
from lmsci_mi.data.ioi import IOIDataset as IOIDataset
from lmsci_mi.data.ioi import ioi_dataset as ioi_dataset
from lmsci_mi.data.repeated_tokens import repeated_random_tokens as repeated_random_tokens

__all__ = ["IOIBatch", "IOIDataset", "ioi_dataset", "repeated_random_tokens"]
