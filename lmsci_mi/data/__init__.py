"""Prompt sets and generators: facts, IOI prompts, repeated random tokens."""

# Each feature adds its own block of re-exports below.
# ruff: noqa: E402

__all__: list[str] = []

# Repeated random tokens (issue 4: head detection).
from lmsci_mi.data.repeated_tokens import repeated_random_tokens as repeated_random_tokens

__all__ += ["repeated_random_tokens"]

# IOI prompts (issue 4).
from lmsci_mi.data.ioi import IOIBatch as IOIBatch
from lmsci_mi.data.ioi import IOIDataset as IOIDataset
from lmsci_mi.data.ioi import ioi_dataset as ioi_dataset

__all__ += ["IOIBatch", "IOIDataset", "ioi_dataset"]
