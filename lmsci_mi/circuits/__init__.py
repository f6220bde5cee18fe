"""Circuit discovery: causal tracing, activation and attribution patching, head detection, IOI."""

__all__: list[str] = []
