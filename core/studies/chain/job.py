"""The "chain" job (the Chain page's button): a run's chain section (core.studies.chain.run.chain_section), cached."""

from __future__ import annotations

from ...base.cache import get_store
from ...compute.pipeline import run_key, run_of
from .run import chain_key, chain_section


def job_chain_key(params: dict) -> str:
    """One chain job per chain section (the run's key, the rules and the code)."""
    return chain_key(run_key(run_of(params)))


def job_chain(params: dict, progress, cancel) -> dict:
    got = chain_section(run_of(params), progress=progress, cancel=cancel)
    return {"super_weights": len(got["super_weights"]), "cache_hit": bool(got.get("cache_hit"))}


def cached_chain_section(run, cache_dir=None) -> dict | None:
    """The stored chain section of a resolved run, or None (never computes, never loads a model)."""
    return get_store(cache_dir).get_json(chain_key(run.key))
