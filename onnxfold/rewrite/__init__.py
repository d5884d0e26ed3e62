"""The rewrite driver (pattern sweeps until nothing changes, the cleanups) and contained steps."""
