"""Fact editing: ROME and MEMIT on any HookedTransformer, and CounterFact-style metrics."""

__all__: list[str] = []
