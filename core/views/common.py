"""What every view shares: the View record, run labels and sizes, the manifest of a view.

Runs are read through `core.views.results.Results` (one small typed accessor), never by string paths.
Layer 0 is the embedding output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from .. import __version__
from ..stats.geometry import CKA_LEVEL
from ..stats.postprocess import PostProcess
from .results import Results, as_results, corpus_display

SYMBOLS = ("circle", "square", "diamond", "triangle-up", "star")

__all__ = ["View", "Results", "as_results", "corpus_display", "corpus_label", "model_label", "run_name",
           "n_layers", "depth_of", "layer_at_depth", "post_for", "cka_bounds", "ci_text", "near_ties", "TIE_REL",
           "TIE_ABS"]

# An argmax over near-ties picks one of them by accident: the largest value is a tie when another is within
# TIE_REL of it (relative to |max|), at least TIE_ABS, or inside the max's own 95% interval where there is one.
TIE_REL = 0.01
TIE_ABS = 1e-3


def tie_width(top: float, half_width: float | None = None, rel: float = TIE_REL, floor: float = TIE_ABS) -> float:
    """How close to the largest value `top` another must be to tie with it: max(rel * |top|, floor, half_width)."""
    return max(rel * abs(top), floor, float(half_width or 0.0))


def near_ties(values, half_width: float | None = None, rel: float = TIE_REL, floor: float = TIE_ABS) -> list[int]:
    """The indices (of a flat or n-d array, as flat indices) whose value is within the tie tolerance of the
    largest finite one: max(rel * |max|, floor, half_width). The argmax first, the others in index order;
    [] when nothing is finite. One index: a clear maximum; more: a tie that no argmax should break."""
    v = np.asarray(values, dtype=float).ravel()
    ok = np.isfinite(v)
    if not ok.any():
        return []
    top = int(np.nanargmax(np.where(ok, v, np.nan)))
    tol = tie_width(v[top], half_width, rel, floor)
    rest = [int(i) for i in np.flatnonzero(ok & (v >= v[top] - tol)) if i != top]
    return [top, *rest]


@dataclass
class View:
    """One figure (or table) with the data behind it and the manifest of the runs it shows."""

    name: str  # file-name stem, e.g. "layers_mean_cosine"
    title: str
    figure: object | None  # go.Figure, or None for a table-only view
    data: pd.DataFrame
    manifest: dict
    caption: str = ""
    notes: list[str] = field(default_factory=list)


def modality(results) -> str:
    """'text', 'image' or 'audio': what the run read (results written before modalities are text)."""
    return as_results(results).raw["manifest"].get("modality", "text")


def not_applicable(name: str, title: str, runs, why: str) -> View:
    """A view that says plainly that its metric does not apply to these runs (never an empty chart)."""
    rows = [{"run": as_results(r).run_name, "modality": modality(r), "status": "not applicable"} for r in runs]
    return View(name, title, None, pd.DataFrame(rows), {"view": name, "not_applicable": why},
                caption=f"Not applicable: {why}", notes=[f"Not applicable: {why}"])


TOKEN_ID_WHY = ("images and audio have no token ids, hence no token frequency: this metric is defined "
                "for text runs only")


# ----------------------------------------------------------------------------- labels (dict or Results)
def corpus_label(results) -> str:
    return as_results(results).corpus_label


def model_label(results) -> str:
    return as_results(results).model_label


def run_name(results) -> str:
    return as_results(results).run_name


def n_layers(results) -> int:
    return as_results(results).n_layers


def depth_of(results, layer: int) -> float:
    return layer / as_results(results).last_layer


def layer_at_depth(results, depth: float) -> int:
    return int(round(float(depth) * (as_results(results).n_layers - 1)))


def view_manifest(view: str, params: dict, runs: Sequence) -> dict:
    rs = [as_results(r) for r in runs]
    # raw/post panels share a run; "name": the corpus as the user named it (uploads, renames)
    uniq = {r.cache_key or id(r): {**r.manifest, "corpus": {**r.manifest["corpus"], "name": r.corpus_label}}
            for r in rs}
    return {"app": "anisotropy-workbench", "core_version": __version__, "view": view,
            "params": params, "runs": list(uniq.values())}


def fmt_n(n: int) -> str:
    return f"{int(n):,}"


def sizes_text(runs: Sequence, what: str = "tokens") -> str:
    """"N = 20,039 tokens" or "N = 20,039 / 20,412 tokens (all-MiniLM / BERT)"."""
    rs = [as_results(r) for r in runs]
    ns = [r.n_tokens if what == "tokens" else r.n_sample for r in rs]
    if len(set(ns)) == 1:
        return f"{fmt_n(ns[0])} {what}"
    return " / ".join(fmt_n(n) for n in ns) + f" {what} (" + " / ".join(r.model_label for r in rs) + ")"


def corpora_text(runs: Sequence) -> str:
    return ", ".join(dict.fromkeys(as_results(r).corpus_label for r in runs))


def layer_dtick(n: int) -> int:
    return 1 if n <= 16 else 2


def nan_if_none(v) -> float:
    return float("nan") if v is None else float(v)


def post_for(results, post: PostProcess, drop_outliers: bool = False) -> PostProcess:
    """The post-processing for one model: `post`, with removed dims restricted to the model's d
    and, when `drop_outliers`, the model's own persistent activation outliers added."""
    r = as_results(results)
    d = r.hidden_size or 0
    remove = {i for i in post.remove if not d or i < d}
    if drop_outliers:
        remove |= set(r.persistent_activation_outliers)
    return PostProcess(center=post.center, zscore=post.zscore, abtt=post.abtt, whiten=post.whiten,
                       whiten_k=post.whiten_k, remove=tuple(sorted(remove)))


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet (every byte as a printable character), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTES = _byte_decoder()


def readable_token(tok: str) -> str:
    """A tokenizer's token as the text it stands for: byte-level BPE markers decoded (`ĠPolish` ->
    ` Polish`, `Ċ` -> a newline), SentencePiece's `▁` as a space and its `<0x0A>` bytes as characters;
    newlines and tabs then shown as ↵ and ⇥, a blank token as ␣. Other tokens (WordPiece's `##ing`,
    specials such as `<|endoftext|>`) are returned as they are.

    >>> readable_token("ĠPolish"), readable_token("Ċ"), readable_token("▁the"), readable_token("##ing")
    (' Polish', '↵', ' the', '##ing')
    """
    s = str(tok)
    if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):  # SentencePiece byte fallback
        try:
            s = bytes([int(s[3:5], 16)]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return s
    elif "▁" in s:
        s = s.replace("▁", " ")
    elif s and all(c in _BYTES for c in s):
        try:
            s = bytes(_BYTES[c] for c in s).decode("utf-8")
        except UnicodeDecodeError:  # not byte-level text (e.g. WordPiece's "café"), or half a character
            pass
    s = s.replace("\n", "↵").replace("\r", "↵").replace("\t", "⇥")
    return s if s.strip() else "␣" * max(1, len(s))


def cka_bounds(sec: dict, shape: tuple) -> tuple[np.ndarray, np.ndarray, str]:
    """(low, high, a note for the caption) of a CKA section's bootstrap interval; NaN bounds for results of an
    earlier version (no interval) or where it is not applicable, and the note says why."""
    if "low" not in sec:
        nan = np.full(shape, np.nan)
        return nan, nan.copy(), " (no interval: results of an earlier version)"
    lo = np.asarray(sec["low"], dtype=float)
    hi = np.asarray(sec["high"], dtype=float)
    iv = sec.get("interval") or {}
    if iv.get("not_applicable"):
        return lo, hi, f" (no interval: {iv['not_applicable']})"
    return lo, hi, (f"; {iv.get('level', 0.95):.0%} interval: bootstrap over {iv.get('n_groups')} groups of documents, "
                    f"{iv.get('n_boot')} replicates")


def ci_text(lo: float, hi: float) -> str:
    """The hover line of a CKA cell's interval ('' when it has none)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return f"<br>{CKA_LEVEL:.0%} interval [{lo:.4f}, {hi:.4f}] (bootstrap over groups of documents)"
