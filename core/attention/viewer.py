"""The attention viewer's maps: one window's attention probabilities, as the model computes them
and with the outlier dims zeroed (cached per window)."""

from __future__ import annotations

import numpy as np

from ..config import CONFIG, cache_identity
from .arch import attention_arch, eager_attention
from .run import doc_start, link_dims


def attention_maps(spec, window: int, cache_dir=None, max_tokens: int = CONFIG.attention_viewer_tokens) -> dict:
    """Attention probabilities of every block and head for one window of the run, as the model
    computes them and with the outlier dims zeroed in every norm (`outliers.zeroed_dims`, the
    ablation's change, undone afterwards). The window runs whole; the first `max_tokens` query and
    key positions are kept. Cached; only this window's maps are ever held.

    Returns ``{"tokens", "text", "window", "n_positions", "n_shown", "dims", "document" (its corpus
    index), "doc_window", "doc_windows" (the window's place among its document's windows, 0-based, and
    their number), "doc_start" (the document's first words), "causal", "maps": (L, H, n, n) float32,
    "zeroed": same}``.
    """
    from ..errors import InputError
    from ..pipeline import analyze, get_store, resolve
    from ..prepare import prepare
    from ..spec import stable_hash

    run = resolve(spec, cache_dir)
    spec = run.spec
    res = analyze(run, cache_dir)
    n_win = int(res["manifest"]["corpus"]["n_windows"])
    if not 0 <= int(window) < n_win:
        raise InputError(f"Window {window} does not exist: this run has windows 0 to {n_win - 1}.")
    dims = link_dims(res)
    store = get_store(cache_dir)
    key = "attnmap:" + stable_hash({"run": res["manifest"]["cache_key"], "window": int(window), "dims": dims,
                                    "n": int(max_tokens), **cache_identity("attention")})
    hit = store.get(key)
    if hit is not None:
        return {**hit[0], "maps": hit[1]["maps"], "zeroed": hit[1]["zeroed"]}
    import torch

    from ..ablation import ablation_modules, zeroed_dims

    m = res["manifest"]
    prep = prepare(spec, device=m["device"], dtype=m["dtype"], cache_dir=cache_dir,
                   fingerprint=m["model"].get("fingerprint"))
    lm, docs, windows = prep.lm, prep.documents, prep.windows
    ids = windows.ids[int(window)]
    doc = int(windows.doc[int(window)])
    same = np.flatnonzero(np.asarray(windows.doc) == doc)  # the document's windows, in order
    n = min(len(ids), int(max_tokens))
    t = torch.as_tensor(ids, device=m["device"])[None]

    def maps():
        with torch.inference_mode():
            out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_attentions=True)
        return np.stack([a[0, :, :n, :n].float().cpu().numpy() for a in out.attentions])  # (L, H, n, n)

    with eager_attention(lm.base):
        plain = maps()
        if dims:
            with zeroed_dims([mod for _, mod in ablation_modules(lm.model)], dims):
                zeroed = maps()
        else:
            zeroed = np.full_like(plain, np.nan)
    meta = {"tokens": lm.tokenizer.convert_ids_to_tokens(ids[:n].tolist()),
            "text": lm.tokenizer.decode(ids[:n], skip_special_tokens=False), "window": int(window),
            "n_positions": int(len(ids)), "n_shown": int(n), "dims": dims,
            "document": doc, "doc_window": int(np.searchsorted(same, int(window))), "doc_windows": int(len(same)),
            "doc_start": doc_start(docs[doc]) if 0 <= doc < len(docs) else "",
            "causal": bool(attention_arch(lm.base).layers[0].causal)}
    store.put(key, meta, {"maps": plain, "zeroed": zeroed})
    return {**meta, "maps": plain, "zeroed": zeroed}
