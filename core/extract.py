"""Model forward in batches with streaming per-layer statistics, accumulated on the device.

Memory does not grow with the corpus: per batch we update float64 sums (L+1 layers x d dims) and
copy the hidden states of the pre-drawn sample positions; hidden states are dropped right after.
All sums are plain sums, so two accumulators merge exactly (`merge_stats`).

Layer 0 is the embedding output (`hidden_states[0]`), layers 1..L the block outputs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .corpora import TokenWindows
from .errors import Cancelled
from .models import torch_dtype
from .spec import N_FREQ_BINS, N_GROUPS, N_SELF_SIM_IDS

# Arrays that are sums over tokens/sequences (merge by addition); the rest merge as noted.
SUM_KEYS = ("n", "n_seq", "sum_n_sq", "group_sum_u", "group_n", "sum_u_sq", "sum_seq_sq", "sum_norm",
            "sum_x", "sum_abs", "sum_abs2", "sum_f", "sum_f2", "sum_f_abs", "intra_sum", "id_sum_u",
            "id_counts", "bin_sum_u", "bin_n")
MAX_KEYS = ("max_abs",)
STATS_CHUNK_TOKENS = 2048  # padded positions per chunk of the float64 statistics (bounds memory)


@dataclass
class Progress:
    """What a progress callback receives (CLI bar and UI bar alike)."""

    stage: str  # "load", "tokenize", "forward", "metrics", "done"
    done: int
    total: int
    tokens_per_s: float = 0.0
    eta_s: float = float("nan")
    message: str = ""


def _noop(_p: Progress) -> None:
    pass


def plan_batches(windows: TokenWindows, batch_size: int) -> list[np.ndarray]:
    """Windows sorted by length (longest first) cut into batches: little padding, stable order."""
    lengths = np.asarray([len(w) for w in windows.ids])
    order = np.argsort(-lengths, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def padding_fraction(windows: TokenWindows, batches: list[np.ndarray]) -> float:
    lengths = np.asarray([len(w) for w in windows.ids])
    padded = sum(len(b) * lengths[b].max() for b in batches)
    return float(1 - lengths.sum() / padded) if padded else 0.0


def token_frequencies(windows: TokenWindows, analysed: list[np.ndarray]) -> dict[int, int]:
    """Counts of each token id over the analysed positions (the corpus frequency used everywhere)."""
    allids = np.concatenate([w[m] for w, m in zip(windows.ids, analysed)])
    uniq, cnt = np.unique(allids, return_counts=True)
    return dict(zip(uniq.tolist(), cnt.tolist()))


def analysed_masks(windows: TokenWindows, special_policy: str) -> list[np.ndarray]:
    if special_policy == "include":
        return [np.ones(len(w), dtype=bool) for w in windows.ids]
    return [~s for s in windows.special]


def stats_layout(windows: TokenWindows, special_policy: str = "exclude", seed: int = 0) -> dict:
    """What every shard of one corpus must share for `merge_stats` to be exact.

    The corpus frequency of each token id (hence the tracked self-similarity ids and the frequency
    bins), the frequency bin of each token id and the bootstrap group of each window: `extract_stats` derives
    exactly these from the windows it is given; a shard passes the whole corpus's layout instead,
    with `group_of` restricted to the shard's windows.
    """
    analysed = analysed_masks(windows, special_policy)
    freq = token_frequencies(windows, analysed)
    _, logf_lut = _freq_luts(freq, windows)
    return {"freq": freq, "bin_of_id": _freq_bins(freq),
            "group_of": np.random.default_rng(seed).integers(0, N_GROUPS, size=len(windows.ids))}


def _freq_luts(freq: dict[int, int], windows: TokenWindows) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables id -> corpus frequency and id -> log frequency (log 1 = 0 for unseen ids)."""
    vocab_hi = max(max(freq) + 1, max(int(w.max()) for w in windows.ids) + 1)
    freq_lut = np.zeros(vocab_hi, dtype=np.float64)
    for k, v in freq.items():
        freq_lut[k] = v
    return freq_lut, np.log(np.maximum(freq_lut, 1.0))


def _freq_bins(freq: dict[int, int]) -> dict[int, int]:
    """Frequency deciles: token types sorted by corpus frequency (ties by id), cut where their
    cumulative occurrences cross each tenth of the tokens. Each type lies in one bin and no bin is
    empty because of ties (a very frequent type can still make its bin larger than a tenth)."""
    items = sorted(freq.items(), key=lambda kv: (kv[1], kv[0]))
    counts = np.asarray([c for _, c in items], dtype=np.float64)
    before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])
    bins = np.minimum((before * N_FREQ_BINS / counts.sum()).astype(np.int64), N_FREQ_BINS - 1)
    return {int(k): int(b) for (k, _), b in zip(items, bins)}


def extract_stats(model, windows: TokenWindows, *, special_policy: str = "exclude", batch_size: int = 16,
                  sample_size: int = 5000, seed: int = 0, device: str = "cpu", dtype: str = "float32",
                  pad_id: int = 0, progress: Callable[[Progress], None] | None = None,
                  cancel: Callable[[], bool] | None = None, layout: dict | None = None) -> tuple[dict, dict]:
    """Run `model` (a transformers base model) over `windows`; return (arrays, sample_meta).

    arrays: the streaming sums (see SUM_KEYS) stacked over layers, plus `sample` (L+1, K, d)
    float32 and per-sample-token metadata arrays. Everything is numpy on return.
    `layout` (see `stats_layout`): corpus-wide frequencies, frequency bins and window groups to use
    instead of those of `windows` alone, so that shards of one corpus merge exactly.
    """
    import torch

    progress = progress or _noop
    analysed = analysed_masks(windows, special_policy)
    n_an = np.asarray([int(m.sum()) for m in analysed])
    N = int(n_an.sum())
    rng = np.random.default_rng(seed)

    # Corpus frequency of each analysed token id, and derived per-token values.
    freq = token_frequencies(windows, analysed) if layout is None else dict(layout["freq"])
    freq_lut, logf_lut = _freq_luts(freq, windows)
    vocab_hi = len(freq_lut)
    bin_of_id = _freq_bins(freq) if layout is None else layout["bin_of_id"]
    bin_lut = np.zeros(vocab_hi, dtype=np.int64)
    for k, v in bin_of_id.items():
        bin_lut[k] = v
    # The log-frequency range of each bin, for labels.
    edges = np.full((N_FREQ_BINS, 2), np.nan)
    for k, v in bin_of_id.items():
        lf = logf_lut[k]
        edges[v] = [np.fmin(edges[v, 0], lf), np.fmax(edges[v, 1], lf)]
    # Self-similarity: the most frequent token ids (>= 5 occurrences), tracked exactly.
    by_count = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))
    tracked = np.asarray([k for k, c in by_count if c >= 5][:N_SELF_SIM_IDS], dtype=np.int64)
    id_slot = np.full(vocab_hi, -1, dtype=np.int64)
    id_slot[tracked] = np.arange(len(tracked))
    # Sequence groups for the bootstrap (seeded assignment), and the pre-drawn sample positions.
    group_of = rng.integers(0, N_GROUPS, size=len(windows.ids))  # drawn even with a layout: same sample
    if layout is not None:
        group_of = np.asarray(layout["group_of"], dtype=np.int64)
        if len(group_of) != len(windows.ids):
            raise ValueError(f"layout['group_of'] has {len(group_of)} entries for {len(windows.ids)} windows")
    K = min(sample_size, N)
    sample_global = np.sort(rng.choice(N, size=K, replace=False))
    offsets = np.concatenate([[0], np.cumsum(n_an)])  # global analysed index of each window's 1st token

    dev = torch.device(device)
    tdt = torch_dtype(dtype)
    cfg = model.config
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd"))
    L1 = int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer")) + 1
    f64 = dict(dtype=torch.float64, device=dev)
    acc = {
        "group_sum_u": torch.zeros(L1, N_GROUPS, d, **f64), "sum_u_sq": torch.zeros(L1, d, **f64),
        "sum_seq_sq": torch.zeros(L1, **f64), "sum_norm": torch.zeros(L1, **f64),
        "sum_x": torch.zeros(L1, d, **f64), "sum_abs": torch.zeros(L1, d, **f64),
        "sum_abs2": torch.zeros(L1, d, **f64), "max_abs": torch.zeros(L1, d, **f64),
        "sum_f_abs": torch.zeros(L1, d, **f64), "intra_sum": torch.zeros(L1, **f64),
        "id_sum_u": torch.zeros(L1, len(tracked), d, **f64),
        "bin_sum_u": torch.zeros(L1, N_FREQ_BINS, d, **f64),
    }
    sample = torch.zeros(L1, K, d, dtype=torch.float32, device=dev)
    logf_dev = torch.as_tensor(logf_lut, **f64)  # id -> log corpus frequency
    bin_dev = torch.as_tensor(bin_lut, device=dev)
    slot_dev = torch.as_tensor(id_slot, device=dev)

    batches = plan_batches(windows, batch_size)
    t0 = time.perf_counter()
    done_tokens = 0
    progress(Progress("forward", 0, N, message=f"{len(batches)} batches"))
    use_autocast = dev.type == "cuda" and tdt != torch.float32
    with torch.inference_mode():
        for bi, b in enumerate(batches):
            if cancel is not None and cancel():
                raise Cancelled("Cancelled by the user; nothing was stored.")
            T = max(len(windows.ids[i]) for i in b)
            ids = np.full((len(b), T), pad_id, dtype=np.int64)
            att = np.zeros((len(b), T), dtype=np.int64)
            an = np.zeros((len(b), T), dtype=bool)
            for r, i in enumerate(b):
                n = len(windows.ids[i])
                ids[r, :n] = windows.ids[i]
                att[r, :n] = 1
                an[r, :n] = analysed[i]
            # Sample positions inside this batch, as flat indices into the (B, T) grid.
            sel_flat, sel_k = [], []
            for r, i in enumerate(b):
                lo, hi = offsets[i], offsets[i + 1]
                a, z = np.searchsorted(sample_global, [lo, hi])
                if z > a:
                    sel_flat.append(r * T + np.flatnonzero(an[r])[sample_global[a:z] - lo])
                    sel_k.append(np.arange(a, z))
            sel_flat = np.concatenate(sel_flat) if sel_flat else np.zeros(0, dtype=np.int64)
            sel_k = np.concatenate(sel_k) if sel_k else np.zeros(0, dtype=np.int64)

            ids_t = torch.as_tensor(ids).to(dev, non_blocking=True)
            att_t = torch.as_tensor(att).to(dev, non_blocking=True)
            an_t = torch.as_tensor(an).to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=tdt, enabled=use_autocast):
                out = model(input_ids=ids_t, attention_mask=att_t, output_hidden_states=True)
            hs = out.hidden_states
            # Statistics on the padded grid with non-analysed positions zeroed: dense reductions,
            # no per-token scatter but for the tracked ids; in chunks of rows so the float64
            # temporaries stay bounded whatever the window length.
            step = max(1, STATS_CHUNK_TOKENS // T)
            seq_n = torch.as_tensor(an.sum(1), **f64)
            grp = torch.as_tensor(group_of[b], device=dev)
            chunks = [_chunk_inputs(an_t[r0:r0 + step], ids_t[r0:r0 + step], seq_n[r0:r0 + step],
                                    grp[r0:r0 + step], logf_dev, bin_dev, slot_dev, r0)
                      for r0 in range(0, len(b), step)]
            sel_flat_t = torch.as_tensor(sel_flat, device=dev)
            sel_k_t = torch.as_tensor(sel_k, device=dev)
            for layer, h in enumerate(hs):
                for c in chunks:
                    _accumulate(acc, layer, h[c["r0"]:c["r0"] + len(c["seq_n"])], c)
                if len(sel_k):
                    sample[layer, sel_k_t] = h.reshape(-1, d)[sel_flat_t].float()
            del out, hs
            done_tokens += int(an.sum())
            el = time.perf_counter() - t0
            rate = done_tokens / el if el > 0 else 0.0
            progress(Progress("forward", done_tokens, N, rate, (N - done_tokens) / rate if rate else float("nan"),
                              f"batch {bi + 1}/{len(batches)}"))

    arrays = {k: v.cpu().numpy() for k, v in acc.items()}
    all_tok = np.concatenate([w[m] for w, m in zip(windows.ids, analysed)])
    all_seq = np.repeat(np.arange(len(windows.ids)), n_an)
    gn = np.bincount(group_of[all_seq], minlength=N_GROUPS).astype(np.float64)
    occ_logf_all = logf_lut[all_tok]
    arrays.update(
        n=np.float64(N), n_seq=np.float64((n_an > 0).sum()), sum_n_sq=np.float64((n_an.astype(np.float64) ** 2).sum()),
        group_n=gn, sum_f=np.float64(occ_logf_all.sum()), sum_f2=np.float64((occ_logf_all ** 2).sum()),
        id_counts=_slot_counts(id_slot[all_tok], len(tracked)), id_list=tracked,
        bin_n=np.bincount(bin_lut[all_tok], minlength=N_FREQ_BINS).astype(np.float64), bin_edges=edges,
        sample=sample.cpu().numpy(),
    )
    # Metadata of the sampled tokens: id, window, position, document, corpus frequency.
    win_of = np.searchsorted(offsets, sample_global, side="right") - 1
    pos = np.asarray([np.flatnonzero(analysed[w])[g - offsets[w]] for w, g in zip(win_of, sample_global)],
                     dtype=np.int64)
    s_ids = all_tok[sample_global]
    arrays.update(sample_token_id=s_ids, sample_window=win_of, sample_position=pos,
                  sample_doc=windows.doc[win_of], sample_freq=freq_lut[s_ids])
    el = time.perf_counter() - t0
    progress(Progress("forward", N, N, N / el if el > 0 else 0.0, 0.0, "done"))
    timing = {"forward_s": el, "tokens_per_s": N / el if el > 0 else 0.0,
              "padding_fraction": padding_fraction(windows, batches), "n_batches": len(batches)}
    return arrays, timing


def _slot_counts(slots: np.ndarray, n: int) -> np.ndarray:
    """Occurrences of each tracked id among these tokens (a sum, so shards add up)."""
    return np.bincount(slots[slots >= 0], minlength=n).astype(np.float64)



def _chunk_inputs(an, ids, seq_n, grp, logf_lut, bin_lut, slot_lut, r0: int) -> dict:
    """Per-chunk tensors shared by every layer: masks, log frequencies, bins, tracked-id slots."""
    import torch

    safe = torch.where(an, ids, 0)  # padding ids may lie outside the lookup tables
    slots = slot_lut[safe].reshape(-1)
    keep_idx = torch.nonzero((slots >= 0) & an.reshape(-1)).squeeze(1)  # one host sync per chunk
    onehot = torch.nn.functional.one_hot(bin_lut[safe], N_FREQ_BINS) * an.unsqueeze(-1)
    return {"r0": r0, "mk": an.unsqueeze(-1).to(torch.float64), "logf": torch.where(an, logf_lut[safe], 0.0),
            "onehot_bins": onehot.reshape(-1, N_FREQ_BINS).to(torch.float64).T, "keep_idx": keep_idx,
            "keep_slots": slots[keep_idx], "any_keep": len(keep_idx) > 0, "seq_n": seq_n, "grp": grp}


def _accumulate(acc: dict, layer: int, h, c: dict) -> None:
    """Add one chunk of one layer's hidden states h (B, T, d) to the float64 accumulators."""
    import torch

    d = h.shape[-1]
    x = h.to(torch.float64) * c["mk"]  # (B, T, d), zeros where not analysed
    norm = x.norm(dim=-1)  # (B, T)
    u = x / norm.clamp_min(1e-30).unsqueeze(-1)
    ax = x.abs()
    S = u.sum(1)  # (B, d) per-sequence sums of u
    acc["group_sum_u"][layer].index_add_(0, c["grp"], S)
    acc["sum_seq_sq"][layer] += (S * S).sum()
    acc["sum_u_sq"][layer] += (u * u).sum((0, 1))
    acc["sum_norm"][layer] += norm.sum()
    acc["sum_x"][layer] += x.sum((0, 1))
    acc["sum_abs"][layer] += ax.sum((0, 1))
    acc["sum_abs2"][layer] += (x * x).sum((0, 1))
    acc["max_abs"][layer] = torch.maximum(acc["max_abs"][layer], ax.amax((0, 1)))
    acc["sum_f_abs"][layer] += torch.einsum("bt,btd->d", c["logf"], ax)
    # Intra-sentence similarity: cos(x_t, mean of its sequence), averaged per sequence.
    m = x.sum(1)
    m = m / m.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    per_seq = torch.einsum("btd,bd->b", u, m)
    acc["intra_sum"][layer] += torch.where(c["seq_n"] > 0, per_seq / c["seq_n"].clamp_min(1), 0.0).sum()
    uf = u.reshape(-1, d)
    acc["bin_sum_u"][layer] += c["onehot_bins"] @ uf
    if c["any_keep"]:
        acc["id_sum_u"][layer].index_add_(0, c["keep_slots"], uf[c["keep_idx"]])

def merge_stats(a: dict, b: dict) -> dict:
    """Merge two accumulators of the same model and layout exactly (shards, processes, machines).

    Samples are not merged here (each shard keeps its own); the sums are.
    """
    out = dict(a)
    for k in SUM_KEYS:
        out[k] = a[k] + b[k]
    for k in MAX_KEYS:
        out[k] = np.maximum(a[k], b[k])
    return out
