"""Benchmarks of the anisotropy workbench: `python -m bench --help` lists the modes; BENCHMARKS.md holds each
section's method and its figures (measured in one run on one machine, so that the machine's speed cancels out)."""

__all__ = ["__version__"]
__version__ = "1"
