"""2-D projections of the sampled token cloud (PCA, UMAP), cached by (run, layer, method, params).

umap-learn is imported lazily; its numba kernels take tens of seconds to compile in a fresh
process, so the app calls `warmup_umap()` in a background thread at start.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .postprocess import PostProcess
from .spec import RunSpec, stable_hash

PROJECTION_VERSION = 1
METHODS = ("pca", "umap")
_warm = threading.Event()


def pca_2d(X: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """(K, 2) coordinates on the top two principal axes, and their explained-variance ratios."""
    Xc = X - X.mean(0)
    cov = (Xc.T @ Xc) / max(len(X) - 1, 1)
    lam, vec = np.linalg.eigh(cov)
    top = vec[:, ::-1][:, :2]
    # Fix the sign of each axis (largest loading positive) so figures are reproducible.
    top = top * np.sign(top[np.abs(top).argmax(0), [0, 1]])
    total = lam.sum()
    return Xc @ top, [float(lam[-1] / total), float(lam[-2] / total)] if total > 0 else [0.0, 0.0]


def umap_2d(X: np.ndarray, n_neighbors: int = 15, min_dist: float = 0.1, metric: str = "cosine",
            seed: int = 0) -> np.ndarray:
    try:
        import umap
    except ImportError:  # pragma: no cover - umap-learn is in requirements.txt
        raise ImportError("UMAP needs umap-learn: pip install umap-learn==0.5.12") from None
    import warnings

    reducer = umap.UMAP(n_neighbors=n_neighbors, min_dist=min_dist, metric=metric, random_state=seed,
                        n_components=2, n_jobs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "n_jobs overridden by random_state": seeded on purpose
        return reducer.fit_transform(X)


def warmup_umap() -> None:
    """Compile umap's numba kernels once in this process (a tiny fit). Safe to call repeatedly."""
    if _warm.is_set():
        return
    rng = np.random.default_rng(0)
    # Above 4096 points umap switches to NN-descent, whose kernels compile separately: warm both.
    umap_2d(rng.normal(size=(4200, 8)).astype(np.float32), n_neighbors=15)
    _warm.set()


def start_warmup() -> threading.Thread:
    t = threading.Thread(target=warmup_umap, name="umap-warmup", daemon=True)
    t.start()
    return t


def project(spec: RunSpec, layer: int, method: str = "pca", post: PostProcess | None = None,
            n_neighbors: int = 15, min_dist: float = 0.1, metric: str = "cosine", seed: int = 0,
            cache_dir=None) -> dict:
    """Projection of the run's sample at `layer` (after optional post-processing), cached.

    Returns {"xy": (K, 2) float array, "method", "params", "layer", "post", "n_points",
    "explained_variance" (PCA only), "seconds", "cached"}.
    """
    from .pipeline import get_stats, get_store, run_key

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    post = post or PostProcess()
    params = {"n_neighbors": n_neighbors, "min_dist": min_dist, "metric": metric, "seed": seed} if method == "umap" else {}
    store = get_store(cache_dir)
    key = "proj:" + stable_hash({"v": PROJECTION_VERSION, "run": run_key(spec, cache_dir), "layer": layer,
                                 "method": method, "params": params, "post": post.to_dict()})
    got = store.get(key)  # a hit does not read the run's statistics
    if got is not None:
        meta, arrays = got
        return {**meta, "xy": arrays["xy"], "cached": True}
    stats = get_stats(spec, cache_dir)
    if not 0 <= layer < stats.n_layers:
        raise ValueError(f"layer must be in 0..{stats.n_layers - 1}, got {layer}")
    S = stats.sample(layer)
    if "layer_dims" in stats.arrays:  # a CNN stage: drop the zero padding beyond its channels
        S = S[:, :int(stats.arrays["layer_dims"][layer])]
    X = post.apply(S) if not post.is_identity else S.astype(np.float64)
    t0 = time.perf_counter()
    meta = {"method": method, "params": params, "layer": layer, "post": post.label(), "n_points": int(len(X))}
    if method == "pca":
        xy, ev = pca_2d(X)
        meta["explained_variance"] = ev
    else:
        xy = umap_2d(X.astype(np.float32), **params)
    meta["seconds"] = time.perf_counter() - t0
    xy = np.asarray(xy, dtype=np.float32)
    store.put(key, meta, {"xy": xy})
    return {**meta, "xy": xy, "cached": False}


def sample_table(stats):
    """One row per sampled token: token, context, position, document, frequency (pandas)."""
    import pandas as pd

    a = stats.arrays
    df = pd.DataFrame({
        "token": stats.meta["sample_tokens"],
        "context": stats.meta["sample_context"],
        "token_id": a["sample_token_id"],
        "position": a["sample_position"],
        "document": a["sample_doc"],
        "frequency": a["sample_freq"],
        "log_frequency": np.log(np.maximum(a["sample_freq"], 1)),
    })
    # Other modalities: what each position is (image + patch, clip + time) instead of a token
    for k in ("sample_patch_row", "sample_patch_col", "sample_time_s"):
        if k in a:
            df[k[len("sample_"):]] = a[k]
    if "sample_item" in stats.meta:
        df["item"] = stats.meta["sample_item"]
    return df
