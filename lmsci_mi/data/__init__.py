"""Prompt sets and generators: facts, IOI prompts, repeated random tokens."""

__all__: list[str] = []

# Repeated random tokens (issue 4: head detection).
from lmsci_mi.data.repeated_tokens import repeated_random_tokens as repeated_random_tokens

__all__ += ["repeated_random_tokens"]
