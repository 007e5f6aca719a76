"""What only tests need from inside the product: kept here, not in core/ (they reach private state on purpose)."""

from __future__ import annotations


def load_pictures(n: int) -> list:
    """The first n sample photographs (a small, real image corpus)."""
    from core.inputs.modalities.images import sample_photographs

    return sample_photographs()[:n]


def umap_process_pids() -> list[int]:
    """The pid of the UMAP process, if one was started (core.compute.projection keeps it in `_process`)."""
    from core.compute import projection as P

    ex = P._process
    return [p.pid for p in (getattr(ex, "_processes", None) or {}).values()] if ex is not None else []


def stop_umap_process() -> None:
    """Fit in this process again: the UMAP process is stopped."""
    from core.compute import projection as P

    P._terminate_process()


def raw_set(store, key: str, blob: bytes) -> None:
    """Store raw bytes under `key` of a CacheStore, as a corrupted entry would lie there."""
    store._put_bytes(key, blob)
