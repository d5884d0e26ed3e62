"""The package version (a leaf module: the CLI and the split manifest read it)."""

__version__ = "0.1.0"
