"""Prompt sets and generators: facts, IOI prompts, repeated random tokens."""

__all__: list[str] = []
