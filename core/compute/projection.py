"""2-D projections of the sampled token cloud (PCA, UMAP), cached by (run, layer, method, params).

umap-learn is imported lazily; its numba kernels take a minute or more to compile in a fresh
process, and compiling (like fitting) holds the interpreter. The app therefore fits UMAP in a
separate process of its own (`start_warmup()`: one spawned worker that compiles the kernels at
once); the app server stays free to draw pages meanwhile. Without that process (CLI, benchmarks,
tests) `umap_2d` fits in the calling process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
import types
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from ..base import settings
from ..base.cache import get_store
from ..base.spec import RunSpec, stable_hash
from ..inputs.corpora import META_PREFIX
from ..stats.postprocess import PostProcess
from .pipeline import get_stats, resolve

PROJECTION_VERSION = 1
METHODS = ("pca", "umap")
umap_warm = threading.Event()  # set once the kernels are compiled where umap_2d fits (this process or its UMAP process)
_process: ProcessPoolExecutor | None = None
_process_lock = threading.Lock()


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
    """(K, 2) UMAP coordinates, seeded; fitted in the UMAP process when the app started one."""
    params = dict(n_neighbors=n_neighbors, min_dist=min_dist, metric=metric, seed=seed)
    if _process is None:
        return _umap_fit(X, **params)
    for attempt in (1, 2):
        try:
            return _umap_executor().submit(_umap_fit, X, **params).result()
        except BrokenProcessPool:  # killed (out of memory, by hand): start a fresh one once
            _forget_process()
            if attempt == 2:
                raise RuntimeError("The UMAP process stopped during the fit (out of memory?). "
                                   "Try fewer sampled points or PCA.") from None
    raise AssertionError("unreachable")


def _umap_fit(X: np.ndarray, n_neighbors: int, min_dist: float, metric: str, seed: int) -> np.ndarray:
    try:
        # lazy: keeps umap (and numba's JIT) out of a cache hit
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
    if umap_warm.is_set():
        return
    rng = np.random.default_rng(0)
    # Up to 4096 points umap finds neighbours exactly, above it by NN-descent: the kernels differ, warm both.
    for n in (300, 4200):
        _umap_fit(rng.normal(size=(n, 8)).astype(np.float32), n_neighbors=15, min_dist=0.1, metric="cosine", seed=0)
    umap_warm.set()


def _init_umap_process(nice: int, parent: int) -> None:
    """The UMAP process's start: a lower priority, and an exit when the app server is gone.

    Its call queue's pipe stays open in the process itself, so the death of the server (SIGKILL,
    out of memory, an exit that skips the exit hooks) would otherwise leave it behind, idle, holding
    its memory (an orphan of 580 MiB was found after a load test's server stopped)."""
    with contextlib.suppress(OSError):
        os.nice(nice)
    threading.Thread(target=_exit_with_parent, args=(parent,), name="exit-with-parent", daemon=True).start()


def _exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os._exit(0)  # reparented: the server is gone, and nobody can read a result any more


def _umap_executor() -> ProcessPoolExecutor:
    global _process
    with _process_lock:
        if _process is None:
            # spawn, not fork: the app server is multi-threaded (tornado, job pollers)
            _process = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_init_umap_process,
                                           # behind the app server's threads: pages stay quick while it
                                           # compiles or fits
                                           initargs=(settings.umap_nice(), os.getpid()))
            # At exit, stop it at once: the executor's own exit hook would wait for a running fit or
            # warm-up (a minute). Registered after that hook, so it runs before it.
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                with contextlib.suppress(RuntimeError):  # already shutting down
                    register(_terminate_process)
            with _no_main_module():
                _process.submit(os.getpid)  # starts the process now, while __main__ is hidden
        return _process


@contextlib.contextmanager
def _no_main_module():
    """Hide `__main__` while a spawned process starts.

    multiprocessing's spawn re-runs the parent's `__main__` in the child. Under Streamlit that is the
    app script itself (a script run installs it as `__main__`), so the child would start the app
    again. A bare module (no file, no spec) gives the child nothing to re-run."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def _terminate_process() -> None:
    with _process_lock:
        ex = _process
    if ex is not None:
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                proc.terminate()
    _forget_process()


def _forget_process() -> None:
    global _process
    with _process_lock:
        if _process is not None:
            _process.shutdown(wait=False, cancel_futures=True)
            _process = None
            umap_warm.clear()


def start_process() -> None:
    """From now on fit UMAP in a separate process (started now, its kernels compiled by its first fit)."""
    _umap_executor()


def start_warmup() -> Future:
    """From now on fit UMAP in a separate process, and compile its kernels there now (the app, once).

    Returns the warm-up's future; `umap_warm` is set in this process when it is done."""
    umap_warm.clear()
    fut = _umap_executor().submit(warmup_umap)
    fut.add_done_callback(lambda f: umap_warm.set() if f.exception() is None else None)
    return fut


def project(spec: RunSpec, layer: int, method: str = "pca", post: PostProcess | None = None,
            n_neighbors: int = 15, min_dist: float = 0.1, metric: str = "cosine", seed: int = 0,
            cache_dir=None) -> dict:
    """Projection of the run's sample at `layer` (after optional post-processing), cached.

    Returns {"xy": (K, 2) float array, "method", "params", "layer", "post", "n_points",
    "explained_variance" (PCA only), "seconds", "cached"}.
    """

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    post = post or PostProcess()
    params = {"n_neighbors": n_neighbors, "min_dist": min_dist, "metric": metric, "seed": seed} if method == "umap" else {}
    store = get_store(cache_dir)
    run = resolve(spec, cache_dir)
    key = "proj:" + stable_hash({"v": PROJECTION_VERSION, "run": run.key, "layer": layer,
                                 "method": method, "params": params, "post": post.to_dict()})
    got = store.get(key)  # a hit does not read the run's statistics
    if got is not None:
        meta, arrays = got
        return {**meta, "xy": arrays["xy"], "cached": True}
    stats = get_stats(run, cache_dir)
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


def sample_table(stats, metadata=None):
    """One row per sampled token: token, context, position, document, frequency (pandas).

    metadata: the corpus table's other columns, one row per document (core.inputs.corpora.document_metadata):
    each sampled token takes its document's value, in a column "meta:<name>"."""
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
    if "sample_special" in stats.meta:  # runs made before it was stored: position 0 is still known
        df["special"] = np.asarray(stats.meta["sample_special"], dtype=bool)
    if metadata is not None and len(metadata):
        doc = np.asarray(a["sample_doc"], dtype=np.int64)
        ok = (doc >= 0) & (doc < len(metadata))  # always, unless the file changed under its name
        for c in metadata.columns:
            v = np.full(len(doc), None, dtype=object)
            v[ok] = metadata[c].to_numpy(dtype=object)[doc[ok]]
            df[META_PREFIX + str(c)] = v
    return df
