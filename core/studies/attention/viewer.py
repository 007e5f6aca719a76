"""The attention viewer's maps: one window's attention probabilities, as the model computes them
and with the outlier dims zeroed (cached per window)."""

from __future__ import annotations

import numpy as np

from ...base.cache import get_store
from ...base.config import CONFIG, cache_identity
from ...base.errors import InputError
from ...base.progress import Progress
from ...base.spec import stable_hash
from ...compute.pipeline import analyze, analyze_params, is_cached, resolve, run_key, run_of
from ...compute.prepare import prepare
from .arch import attention_arch, eager_attention
from .run import doc_start, link_dims


def _request(spec, window: int, cache_dir, max_tokens: int):
    """(the run resolved, its results, the dims zeroed, the maps' cache key); a window the run does not
    have is refused before anything runs."""

    run = resolve(spec, cache_dir)
    res = analyze(run, cache_dir)
    n_win = int(res["manifest"]["corpus"]["n_windows"])
    if not 0 <= int(window) < n_win:
        raise InputError(f"Window {window} does not exist: this run has windows 0 to {n_win - 1}.")
    dims = link_dims(res)
    key = "attnmap:" + stable_hash({"run": res["manifest"]["cache_key"], "window": int(window), "dims": dims,
                                    "n": int(max_tokens), **cache_identity("attention")})
    return run, res, dims, key


def cached_maps(spec, window: int, cache_dir=None, max_tokens: int = CONFIG.attention_viewer_tokens) -> dict | None:
    """The stored maps of one window (see `attention_maps`), or None: never computes, never loads a model."""

    run = resolve(spec, cache_dir)
    if not is_cached(run, cache_dir):
        return None
    hit = get_store(cache_dir).get(_request(run, window, cache_dir, max_tokens)[3])
    return None if hit is None else {**hit[0], "maps": hit[1]["maps"], "zeroed": hit[1]["zeroed"]}


def attention_maps(spec, window: int, cache_dir=None, max_tokens: int = CONFIG.attention_viewer_tokens,
                   progress=None) -> dict:
    """Attention probabilities of every block and head for one window of the run, as the model
    computes them and with the outlier dims zeroed in every norm (`ablation.zeroed_dims`, the
    ablation's change, undone afterwards). The window runs whole; the first `max_tokens` query and
    key positions are kept. Cached; only this window's maps are ever held. The app computes them
    in a job ("attention-maps"), never in a page's script.

    Returns ``{"tokens", "text", "window", "n_positions", "n_shown", "dims", "document" (its corpus
    index), "doc_window", "doc_windows" (the window's place among its document's windows, 0-based, and
    their number), "doc_start" (the document's first words), "causal", "maps": (L, H, n, n) float32,
    "zeroed": same}``.
    """

    run, res, dims, key = _request(spec, window, cache_dir, max_tokens)
    spec = run.spec
    store = get_store(cache_dir)
    hit = store.get(key)
    if hit is not None:
        return {**hit[0], "maps": hit[1]["maps"], "zeroed": hit[1]["zeroed"]}
    # lazy: keeps torch out of a cache hit
    import torch

    from ...compute.ablation import ablation_modules, zeroed_dims

    m = res["manifest"]
    prep = prepare(spec, device=m["device"], dtype=m["dtype"], cache_dir=cache_dir,
                   fingerprint=m["model"].get("fingerprint"), progress=progress)
    lm, docs, windows = prep.lm, prep.documents, prep.windows
    ids = windows.ids[int(window)]
    doc = int(windows.doc[int(window)])
    same = np.flatnonzero(np.asarray(windows.doc) == doc)  # the document's windows, in order
    n = min(len(ids), int(max_tokens))
    t = torch.as_tensor(ids, device=m["device"])[None]
    n_pass = 2 if dims else 1

    def maps(i: int, what: str):
        if progress:
            progress(Progress("ablation", i, n_pass, message=f"forward pass {i + 1} of {n_pass}: {what}"))
        with torch.inference_mode():
            out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_attentions=True)
        return np.stack([a[0, :, :n, :n].float().cpu().numpy() for a in out.attentions])  # (L, H, n, n)

    with eager_attention(lm.base):
        plain = maps(0, "as is")
        if dims:
            with zeroed_dims([mod for _, mod in ablation_modules(lm.model)], dims):
                zeroed = maps(1, "outlier dims zeroed")
        else:
            zeroed = np.full_like(plain, np.nan)
    meta = {"tokens": lm.tokenizer.convert_ids_to_tokens(ids[:n].tolist()),
            "text": lm.tokenizer.decode(ids[:n], skip_special_tokens=False), "window": int(window),
            "n_positions": int(len(ids)), "n_shown": int(n), "dims": dims,
            "document": doc, "doc_window": int(np.searchsorted(same, int(window))), "doc_windows": int(len(same)),
            "doc_start": doc_start(docs[doc]) if 0 <= doc < len(docs) else "",
            "causal": bool(attention_arch(lm.base).layers[0].causal)}
    store.put(key, meta, {"maps": plain, "zeroed": zeroed})
    if progress:
        progress(Progress("ablation", n_pass, n_pass, message="maps stored"))
    return {**meta, "maps": plain, "zeroed": zeroed}


# ---------------------------------------------------------------------- the "attention-maps" job (core.entry.job_records.KINDS)
def maps_params(spec, window: int, max_tokens: int = CONFIG.attention_viewer_tokens) -> dict:
    """Parameters of the job that computes one window's maps (the run resolved once, carried)."""

    return {**analyze_params(spec), "window": int(window), "max_tokens": int(max_tokens)}


def job_attention_maps_key(params: dict) -> str:
    return stable_hash({"run": run_key(run_of(params)), "window": int(params["window"]),
                        "n": int(params["max_tokens"])})


def job_attention_maps(params: dict, progress, cancel) -> dict:
    """The "attention-maps" job: the viewer's forward passes of one window, into the cache."""

    got = attention_maps(run_of(params), int(params["window"]), max_tokens=int(params["max_tokens"]),
                         progress=progress)
    return {"window": got["window"], "blocks": int(got["maps"].shape[0]), "n_shown": got["n_shown"]}
