"""The package version, in one place (read by results' metadata and the CLI)."""

__version__ = "0.1.0"
