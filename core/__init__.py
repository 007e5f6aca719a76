"""Anisotropy workbench core: extraction, streaming statistics, metrics, cache, figures.

Nothing in this package imports streamlit. torch and transformers are imported lazily, only
where a model has to run, so that a cache hit never pays for them.
"""

__version__ = "0.1.0"
