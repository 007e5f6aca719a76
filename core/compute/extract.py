"""Model forward in batches with streaming per-layer statistics, accumulated on the device.

Three steps, each testable alone:

* `plan_extraction` (numpy only, no torch): what the run needs before any forward pass, i.e. the
  corpus frequency of each token id, the frequency bins, the tracked self-similarity ids, the
  bootstrap group of each window, the pre-drawn sample positions and the batches;
* `_forward_loop`: the model over the batches; per batch and layer, the float64 sums (L+1 layers x
  d dims) and the hidden states of the sample positions; hidden states are dropped right after;
* `_finalise`: the counts that need no model, and the metadata of the sampled tokens.

Memory does not grow with the corpus. All sums are plain sums, so two accumulators merge exactly
(`merge_stats`). Layer 0 is the embedding output (`hidden_states[0]`), layers 1..L the block
outputs. A padded or excluded position never reaches a sum (selected out with `torch.where`, so a
NaN there cannot leak); a NaN or inf at an analysed position stops the run with
`NonFiniteHiddenState`, naming the layer, dtype and token.

torch is imported at the top: this module is imported by core.compute.forward_run (a cache miss) and by nothing that
a cache hit or the app's first page imports. Their numpy pieces of the plan are core.stats.batching's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np
import torch

from ..base.config import CONFIG, AnalysisConfig
from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..inputs.corpora import TokenWindows
from ..inputs.modalities.adapters import TextAdapter
from ..inputs.models import torch_dtype
from ..stats import kernels as M
from ..stats.batching import analysed_masks, document_groups, padding_fraction, plan_batches
from ..stats.sums import ADDED, ARGMAX_KEYS, FORWARD, MAX_KEYS, SUM_KEYS, Tokens, shape_of
from ..stats.sums import merge as _merge

__all__ = ["plan_extraction", "ExtractionPlan", "extract_stats", "merge_stats", "stats_layout",
           "analysed_masks", "token_frequencies", "plan_batches", "padding_fraction", "SUM_KEYS", "MAX_KEYS", "ARGMAX_KEYS",
           "NonFiniteHiddenState", "partial_arrays", "PARTIAL_EVERY_S"]

# The streaming sums are declared in core.stats.sums (allocation, merge, torchrun reduction); the key lists are its.
# Where each max |x_d| sits (issue 24, massive activations): per layer and dim, the token id and the position in its
# window of the analysed token that holds max_abs (ARGMAX_KEYS), merged by taking the side whose max_abs is larger.
# Whether the extraction records where each max |x_d| sits (ARGMAX_KEYS); `python -m bench` switches it off to
# measure what it costs (issue 24: the chain's extra statistics stay within 5% of the throughput).
TRACK_MAX_POSITION = True
STATS_CHUNK_TOKENS = 2048  # padded positions per chunk of the float64 statistics (bounds memory)
PARTIAL_EVERY_S = 2.0  # partial sums are handed out at most this often (the first right after the first batch)
PARTIAL_MAX_SHARE = 0.01  # ...and less often when slow: at most this share of the loop's time
PARTIAL_MAX_GAP_S = 30.0  # ...but never less often than this (at the end of a batch): a starved worker whose one
# partial took 5 s waited 500 s for the next one, and the curve stood still for 10 minutes (issue 36)


def next_partial_due(now: float, cost: float) -> float:
    """When the next partial result is due, given the last one's `cost` (s): PARTIAL_EVERY_S at the soonest, later
    when they cost more than PARTIAL_MAX_SHARE of the loop's time, PARTIAL_MAX_GAP_S at the latest."""
    return now + min(max(PARTIAL_EVERY_S, cost / PARTIAL_MAX_SHARE), max(PARTIAL_EVERY_S, PARTIAL_MAX_GAP_S))


def _noop(_p: Progress) -> None:
    pass


class NonFiniteHiddenState(InputError):
    """A NaN or inf at an analysed position: reported with its layer, dtype and token."""


def token_frequencies(windows: TokenWindows, analysed: list[np.ndarray]) -> dict[int, int]:
    """Counts of each token id over the analysed positions (the corpus frequency used everywhere)."""
    allids = np.concatenate([w[m] for w, m in zip(windows.ids, analysed)])
    uniq, cnt = np.unique(allids, return_counts=True)
    return dict(zip(uniq.tolist(), cnt.tolist()))


def stats_layout(windows: TokenWindows, special_policy: str = "exclude", seed: int = 0,
                 cfg: AnalysisConfig | None = None) -> dict:
    """What every shard of one corpus must share for `merge_stats` to be exact.

    The corpus frequency of each token id (hence the frequency bins), the tracked self-similarity
    ids, the frequency bin of each token id and the bootstrap group of each window: `plan_extraction`
    derives exactly these from the windows it is given; a shard passes the whole corpus's layout
    instead, with `group_of` restricted to the shard's windows. Shards must not split a document
    (its windows' sums per document are squared once it is complete).
    """
    cfg = cfg or CONFIG
    analysed = analysed_masks(windows, special_policy)
    freq = token_frequencies(windows, analysed)
    return {"freq": freq, "bin_of_id": _freq_bins(freq, cfg.freq_bins),
            "tracked": _tracked_ids(windows, analysed, freq, cfg),
            "group_of": document_groups(windows.doc, seed, cfg.bootstrap_groups)}


def _tracked_ids(windows: TokenWindows, analysed: list[np.ndarray], freq: dict[int, int],
                 cfg: AnalysisConfig) -> np.ndarray:
    """Self-similarity's token ids: the `cfg.self_sim_ids` most frequent (by analysed occurrences,
    ties by the smaller id) among those occurring in at least `cfg.min_contexts` distinct sequences."""
    per_seq = [np.unique(w[m]) for w, m in zip(windows.ids, analysed)]
    ids, n_ctx = np.unique(np.concatenate(per_seq), return_counts=True) if per_seq else (np.zeros(0), np.zeros(0))
    enough = {int(i) for i, c in zip(ids, n_ctx) if c >= cfg.min_contexts}
    by_count = sorted(((k, c) for k, c in freq.items() if k in enough), key=lambda kv: (-kv[1], kv[0]))
    return np.asarray([k for k, _ in by_count[:cfg.self_sim_ids]], dtype=np.int64)


def _freq_luts(freq: dict[int, int], windows: TokenWindows) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables id -> corpus frequency and id -> log frequency (log 1 = 0 for unseen ids)."""
    vocab_hi = max(max(freq) + 1, max(int(w.max()) for w in windows.ids) + 1)
    freq_lut = np.zeros(vocab_hi, dtype=np.float64)
    for k, v in freq.items():
        freq_lut[k] = v
    return freq_lut, np.log(np.maximum(freq_lut, 1.0))


def _freq_bins(freq: dict[int, int], n_bins: int) -> dict[int, int]:
    """Frequency bins: token types sorted by corpus frequency (ties by id), cut where their
    cumulative occurrences cross each 1/n_bins of the tokens. Each type lies in one bin and no bin
    is empty because of ties (a very frequent type can still make its bin larger than its share)."""
    items = sorted(freq.items(), key=lambda kv: (kv[1], kv[0]))
    counts = np.asarray([c for _, c in items], dtype=np.float64)
    before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])
    bins = np.minimum((before * n_bins / counts.sum()).astype(np.int64), n_bins - 1)
    return {int(k): int(b) for (k, _), b in zip(items, bins)}


@dataclass
class ExtractionPlan:
    """Everything decided before the first forward pass (numpy only)."""

    analysed: list[np.ndarray]  # per window, the mask of analysed positions
    n_an: np.ndarray  # analysed tokens per window
    freq_lut: np.ndarray  # token id -> corpus frequency
    logf_lut: np.ndarray  # token id -> log corpus frequency
    bin_lut: np.ndarray  # token id -> frequency bin
    bin_edges: np.ndarray  # (bins, 2) log-frequency range of each bin
    tracked: np.ndarray  # token ids tracked for self-similarity (in >= min_contexts sequences)
    id_slot: np.ndarray  # token id -> row of `tracked`, -1 if untracked
    group_of: np.ndarray  # bootstrap group of each window (that of its document)
    sample_global: np.ndarray  # sorted global analysed indices of the K sampled tokens
    offsets: np.ndarray  # global analysed index of each window's first analysed token (+ total)
    batches: list[np.ndarray]  # window indices of each batch, in processing order
    cfg: AnalysisConfig = CONFIG

    @property
    def n_tokens(self) -> int:
        return int(self.n_an.sum())

    @property
    def sample_size(self) -> int:
        return len(self.sample_global)

    @cached_property
    def window_rank(self) -> np.ndarray:
        """Each window's place in the plan's order (the concatenated `batches`): ties of max |x_d| go to the
        token first in this order, however the batches are run (`_order_keys`)."""
        rank = np.zeros(len(self.n_an), dtype=np.int64)
        flat = np.concatenate(self.batches) if self.batches else np.zeros(0, dtype=np.int64)
        rank[flat] = np.arange(len(flat))
        return rank


def plan_extraction(windows: TokenWindows, *, special_policy: str = "exclude", batch_size: int = 16,
                    sample_size: int = 5000, seed: int = 0, layout: dict | None = None,
                    cfg: AnalysisConfig | None = None) -> ExtractionPlan:
    """Frequency tables, bins, tracked ids, bootstrap groups, sample positions and batches.

    `layout` (see `stats_layout`): corpus-wide frequencies, frequency bins and window groups to use
    instead of those of `windows` alone, so that shards of one corpus merge exactly. `cfg`: the
    analysis rules (default `core.base.config.CONFIG`).
    """
    cfg = cfg or CONFIG
    analysed = analysed_masks(windows, special_policy)
    n_an = np.asarray([int(m.sum()) for m in analysed])
    N = int(n_an.sum())
    rng = np.random.default_rng(seed)
    freq = token_frequencies(windows, analysed) if layout is None else dict(layout["freq"])
    freq_lut, logf_lut = _freq_luts(freq, windows)
    vocab_hi = len(freq_lut)
    bin_of_id = _freq_bins(freq, cfg.freq_bins) if layout is None else layout["bin_of_id"]
    bin_lut = np.zeros(vocab_hi, dtype=np.int64)
    for k, v in bin_of_id.items():
        bin_lut[k] = v
    edges = np.full((cfg.freq_bins, 2), np.nan)  # the log-frequency range of each bin, for labels
    for k, v in bin_of_id.items():
        lf = logf_lut[k]
        edges[v] = [np.fmin(edges[v, 0], lf), np.fmax(edges[v, 1], lf)]
    tracked = (_tracked_ids(windows, analysed, freq, cfg) if layout is None
               else np.asarray(layout["tracked"], dtype=np.int64))
    if not getattr(windows, "has_token_ids", True):  # images, audio: no vocabulary, no ids to track
        tracked = tracked[:0]
    id_slot = np.full(max(vocab_hi, int(tracked.max()) + 1 if len(tracked) else 0), -1, dtype=np.int64)
    id_slot[tracked] = np.arange(len(tracked))
    id_slot = id_slot[:vocab_hi]
    group_of = document_groups(windows.doc, seed, cfg.bootstrap_groups)
    if layout is not None:
        group_of = np.asarray(layout["group_of"], dtype=np.int64)
        if len(group_of) != len(windows.ids):
            raise ValueError(f"layout['group_of'] has {len(group_of)} entries for {len(windows.ids)} windows")
    K = min(sample_size, N)
    sample_global = np.sort(rng.choice(N, size=K, replace=False))
    offsets = np.concatenate([[0], np.cumsum(n_an)])
    return ExtractionPlan(analysed, n_an, freq_lut, logf_lut, bin_lut, edges, tracked, id_slot, group_of,
                          sample_global, offsets, plan_batches(windows, batch_size), cfg)


def extract_stats(model, windows: TokenWindows, *, special_policy: str = "exclude", batch_size: int = 16,
                  sample_size: int = 5000, seed: int = 0, device: str = "cpu", dtype: str = "float32",
                  pad_id: int = 0, progress: Callable[[Progress], None] | None = None,
                  cancel: Callable[[], bool] | None = None, layout: dict | None = None,
                  cfg: AnalysisConfig | None = None, layers: Sequence[int] | None = None,
                  shard: Callable[[list[np.ndarray], np.ndarray], list[np.ndarray]] | None = None,
                  reduce: Callable[[dict], None] | None = None, adapter=None,
                  partial: Callable[[dict, int], None] | None = None) -> tuple[dict, dict]:
    """Run `model` (a transformers base model) over `windows`; return (arrays, timing).

    arrays: the streaming sums (see SUM_KEYS) stacked over layers, plus `sample` (L+1, K, d)
    float32 and per-sample-token metadata arrays; all numpy. timing: forward seconds, tokens/s,
    padding fraction, batches (and the batch splits forced by running out of GPU memory).
    `layers`: the hidden-state layers to keep (default all): arrays are stacked over these, in
    order, and `layer_index` names the model layer of each row.
    `shard(batches, window_lengths)` -> the batches of the plan this process runs, and
    `reduce(tensors)`, which combines the accumulators (and `sample`) of all processes in place
    before they leave the device: the torchrun path (`core.compute.distributed`). Accumulators are sums
    unless listed in MAX_KEYS.
    `adapter` (core.inputs.modalities.adapters) turns a batch into hidden states: token windows by default;
    images, audio windows or CNN maps laid out as `core.inputs.modalities.items.Items`.
    `partial(arrays, n_total)`: called after the first batch, then every `PARTIAL_EVERY_S` seconds at most (less
    often when it is slow: its share of the loop's time stays under `PARTIAL_MAX_SHARE`), with the sums
    over the batches processed so far (`partial_arrays`: the same arrays as the result's, no sample) and
    the analysed tokens of the whole run.
    Not with `shard` (a rank's sums are a share of the corpus until they are reduced).
    """
    plan = plan_extraction(windows, special_policy=special_policy, batch_size=batch_size,
                           sample_size=sample_size, seed=seed, layout=layout, cfg=cfg)
    acc, sample, timing = _forward_loop(model, windows, plan, device=device, dtype=dtype, pad_id=pad_id,
                                        progress=progress or _noop, cancel=cancel, layers=layers, shard=shard,
                                        reduce=reduce, adapter=adapter, partial=None if shard else partial)
    return _finalise(windows, plan, acc, sample), timing


def _forward_loop(model, windows: TokenWindows, plan: ExtractionPlan, *, device: str, dtype: str, pad_id: int,
                  progress: Callable[[Progress], None], cancel: Callable[[], bool] | None,
                  layers: Sequence[int] | None = None, shard=None, reduce=None, adapter=None, partial=None):
    """The batch loop: forward, then every float64 accumulator and the sample rows, on the device.

    Its concerns, each a function below: the layers kept (`_kept_layers`), this process's batches
    (`_my_batches`), the accumulators (`_allocate`, from core.stats.sums), one batch's forward with its
    out-of-memory split (`_forward_batch`) and its analysed grid (`_batch_grid`, `_trim`), the partial
    results (`_Partials`), the torchrun reduction (`_reduce_ranks`) and the timing (`_timing`).
    """
    dev = torch.device(device)
    tdt = torch_dtype(dtype)
    adapter = adapter or TextAdapter()
    n_hidden, d = adapter.dims(model)
    kept = _kept_layers(n_hidden, layers)
    widths = _layer_widths(adapter, kept, d)
    batches = _my_batches(windows, plan, shard)
    N = plan.n_tokens if shard is None else int(sum(int(plan.n_an[b].sum()) for b in batches))
    acc = _allocate({"L": len(kept), "d": d, "G": plan.cfg.bootstrap_groups, "I": len(plan.tracked),
                     "F": plan.cfg.freq_bins}, dev)
    docs = _DocSums(windows.doc, batches)
    scratch: dict = {}  # the float64 temporaries of _accumulate, reused from chunk to chunk
    sample = torch.zeros(len(kept), plan.sample_size, d, dtype=torch.float32, device=dev)
    luts = _luts(windows, plan, dev)
    t0 = time.perf_counter()
    done_tokens, n_splits = 0, 0
    partials = _Partials(partial, windows, plan, kept, t0)
    progress(Progress("forward", 0, N, message=f"{len(batches)} batches"))
    queue = list(reversed(batches))  # a stack: a batch that runs out of memory comes back halved
    with torch.inference_mode():
        while queue:
            b = queue.pop()
            if cancel is not None and cancel():
                raise Cancelled("Cancelled by the user; nothing was stored.")
            an = _batch_grid(windows, plan, b)
            got = _forward_batch(model, adapter, windows, b, dev, pad_id, tdt)
            if got is None:  # out of memory: retry the two halves (the exception is gone: memory can be freed)
                n_splits += 1
                half = len(b) // 2
                queue += [b[half:], b[:half]]
                progress(Progress("forward", done_tokens, N, message=f"out of memory: batch of {len(b)} split in two"))
                continue
            hs, ids_t, an = _trim(got, an, kept, dev)
            an_t = torch.as_tensor(an).to(dev, non_blocking=True)
            _accumulate_batch(acc, sample, hs, an_t, ids_t, an, b, plan, luts, dtype, docs, scratch, widths)
            del got, hs
            done_tokens += int(an.sum())
            el = time.perf_counter() - t0
            rate = done_tokens / el if el > 0 else 0.0
            progress(Progress("forward", done_tokens, N, rate, (N - done_tokens) / rate if rate else float("nan"),
                              f"{done_tokens:,} of {N:,} tokens"))
            partials.after(b, acc, docs, N, more=bool(queue))
    key = acc.pop("max_abs_key")
    if reduce is not None:  # every process's sums (and sample rows) into each: the torchrun path
        sample = _reduce_ranks(acc, sample, key, reduce)
    el = time.perf_counter() - t0
    progress(Progress("forward", N, N, N / el if el > 0 else 0.0, 0.0, "done"))
    timing = _timing(windows, plan, el, n_splits, partials)
    if docs.carry:
        raise RuntimeError(f"documents {sorted(docs.carry)} were not complete at the end of the run")
    arrays = {k: v.cpu().numpy() for k, v in acc.items()}
    arrays["layer_index"] = np.asarray(kept, dtype=np.int64)
    return arrays, sample.cpu().numpy(), timing


def _kept_layers(n_hidden: int, layers: Sequence[int] | None) -> list[int]:
    """The hidden-state layers kept, sorted (all by default); the accumulators and the sample scale with them."""
    kept = list(range(n_hidden)) if layers is None else sorted({int(x) for x in layers})
    if not kept or kept[0] < 0 or kept[-1] >= n_hidden:
        raise ValueError(f"layers must lie in 0..{n_hidden - 1}, got {layers!r}")
    return kept


def _layer_widths(adapter, kept: list[int], d: int) -> list[int]:
    """Each kept layer's real width: a CNN stage's channels (the rest of d is zero padding), else d."""
    channels = getattr(adapter, "channels", None)
    return [int(channels[i]) for i in kept] if channels is not None else [d] * len(kept)


def _my_batches(windows: TokenWindows, plan: ExtractionPlan, shard) -> list[np.ndarray]:
    """The plan's batches this process runs: all of them, or its share under `shard` (each batch's forward is a
    single process's; batches that share a document go to one process together: its sum is squared once
    complete)."""
    if shard is None:
        return plan.batches
    chains = _batch_chains(windows.doc, plan.batches)
    by_first = {int(c[0][0]): c for c in chains}
    picked = shard([np.concatenate(c) for c in chains], np.asarray([len(w) for w in windows.ids]))
    return [b for merged in picked for b in by_first[int(merged[0])]]


def _allocate(dims: dict[str, int], dev) -> dict:
    """The forward accumulators of core.stats.sums.FORWARD, float64 on the device, at their declared fill."""
    return {s.name: torch.full(shape_of(s, dims), s.fill, dtype=torch.float64, device=dev) for s in FORWARD}


def _luts(windows: TokenWindows, plan: ExtractionPlan, dev) -> dict:
    """The plan's lookup tables on the device (log frequency, bin, tracked slot of each token id)."""
    luts = {"logf": torch.as_tensor(plan.logf_lut, dtype=torch.float64, device=dev),
            "bin": torch.as_tensor(plan.bin_lut, device=dev), "slot": torch.as_tensor(plan.id_slot, device=dev)}
    if not getattr(windows, "has_token_ids", True):  # images, audio: pseudo id 0 everywhere, one bin
        luts["one_bin"], luts["logf0"] = int(plan.bin_lut[0]), float(plan.logf_lut[0])
    return luts


def _batch_grid(windows: TokenWindows, plan: ExtractionPlan, b: np.ndarray) -> np.ndarray:
    """(B, T) the analysed positions of batch `b` on its padded grid."""
    T = max(len(windows.ids[i]) for i in b)
    an = np.zeros((len(b), T), dtype=bool)
    for r, i in enumerate(b):
        an[r, :len(windows.ids[i])] = plan.analysed[i]
    return an


def _forward_batch(model, adapter, windows: TokenWindows, b: np.ndarray, dev, pad_id: int, tdt):
    """(every hidden state, layer 0 first; token ids or None) of batch `b`; None when it ran out of memory and can
    be split (a batch of one re-raises)."""
    try:
        with torch.autocast(dev.type, dtype=tdt, enabled=dev.type == "cuda" and tdt != torch.float32):
            return adapter.forward(model, windows, b, dev, pad_id)
    except torch.OutOfMemoryError:
        if len(b) == 1:
            raise
    if dev.type == "cuda":  # outside the handler: the exception and its frames are gone, memory can be freed
        torch.cuda.empty_cache()
    return None


def _trim(got, an: np.ndarray, kept: list[int], dev):
    """(kept hidden states, token ids, analysed grid), cut after the last column holding an analysed position.

    Trailing columns with no analysed position in any row (padding; audio frames past the end of every clip of
    the batch: most of a 30 s Whisper window) never reach a statistic. The kept layers move to the accumulators'
    device (with device_map="auto" they live on several GPUs)."""
    out, ids_t = got
    cols = np.flatnonzero(an.any(0))
    Ta = int(cols[-1]) + 1 if len(cols) else 1
    an = an[:, :Ta]
    hs = [out[i][:, :Ta].to(dev) for i in kept]
    if ids_t is None:  # no token ids (images, audio): pseudo id 0 everywhere
        ids_t = torch.zeros((len(an), Ta), dtype=torch.long, device=dev)
    else:
        ids_t = ids_t[:, :Ta]
    return hs, ids_t, an


class _Partials:
    """The partial results: after a batch, `partial(partial_arrays(...), N)` when one is due (`next_partial_due`),
    never after the last batch; the time they take is kept for the timing."""

    def __init__(self, partial, windows: TokenWindows, plan: ExtractionPlan, kept: list[int], t0: float):
        self.partial, self.windows, self.plan, self.kept = partial, windows, plan, kept
        self.done: list[np.ndarray] = []  # the windows of the batches processed so far
        self.next, self.seconds = t0, 0.0  # when the next one is due; the time spent publishing them

    def after(self, b: np.ndarray, acc: dict, docs: "_DocSums", N: int, more: bool) -> None:
        self.done.append(b)
        now = time.perf_counter()
        if self.partial is not None and more and now >= self.next:
            self.partial(partial_arrays(self.windows, self.plan, acc, docs, np.concatenate(self.done), self.kept), N)
            cost = time.perf_counter() - now
            self.seconds += cost
            self.next = next_partial_due(now, cost)


def _reduce_ranks(acc: dict, sample, key, reduce):
    """Every rank's accumulators and sample rows into each (`reduce` all-reduces in place by core.stats.sums'
    reduction); returns the reduced sample. Where each max sits, as one process finds it: among the processes
    whose own maximum is the global one, the token first in the plan's order (ties are common at layer 0: every
    occurrence of a token has the same embedding); that process offers its index (-1 elsewhere)."""
    at = acc.pop("max_abs_at")
    local_max = acc["max_abs"].clone()
    acc["sample"] = sample
    reduce(acc)
    sample = acc.pop("sample")
    mine = local_max == acc["max_abs"]
    first = {"k": torch.where(mine, -key, torch.full_like(key, -math.inf))}
    reduce(first, max_keys=("k",))
    acc["max_abs_at"] = torch.where(mine & (key == -first["k"]), at, torch.full_like(at, -1.0))
    reduce({"max_abs_at": acc["max_abs_at"]}, max_keys=("max_abs_at",))
    return sample


def _timing(windows: TokenWindows, plan: ExtractionPlan, el: float, n_splits: int, partials: _Partials) -> dict:
    timing = {"forward_s": el, "tokens_per_s": plan.n_tokens / el if el > 0 else 0.0,
              "padding_fraction": padding_fraction(windows, plan.batches), "n_batches": len(plan.batches),
              "oom_splits": n_splits}
    if partials.partial is not None:
        timing["partial_s"] = partials.seconds  # the time spent on partial results (bench: their share)
    return timing


def _batch_chains(doc: np.ndarray, batches: list[np.ndarray]) -> list[list[np.ndarray]]:
    """`batches` cut into runs of consecutive batches that no document straddles.

    >>> [len(c) for c in _batch_chains(np.array([0, 0, 1, 2, 2]), [np.array([0]), np.array([1, 2]),
    ...                                                           np.array([3]), np.array([4])])]
    [2, 2]
    """
    doc = np.asarray(doc)
    first: dict = {}
    last: dict = {}
    for i, b in enumerate(batches):
        for dd in doc[b].tolist():
            first.setdefault(dd, i)
            last[dd] = i
    open_after = np.zeros(len(batches) + 1, dtype=np.int64)  # documents open across the gap after batch i
    for dd, lo in first.items():
        open_after[lo] += 1
        open_after[last[dd]] -= 1
    open_after = np.cumsum(open_after)
    chains, cur = [], []
    for i, b in enumerate(batches):
        cur.append(b)
        if open_after[i] == 0:
            chains.append(cur)
            cur = []
    if cur:
        chains.append(cur)
    return chains


class _DocSums:
    """sum_D ||S_D||^2 over documents, whose windows may fall in several batches: a document's sum of
    u stays open (on the device) until its last window is processed. With `plan_batches`' order
    at most one document is open at a time."""

    def __init__(self, doc: np.ndarray, batches: list[np.ndarray]):
        self.doc = np.asarray(doc)
        mine = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
        uniq, counts = np.unique(self.doc[mine], return_counts=True)
        self.left = dict(zip(uniq.tolist(), counts.tolist()))  # windows not yet processed, per document
        self.carry: dict = {}  # open document -> (L+1, d) partial sum of u

    def add(self, acc_doc_sq, b: np.ndarray, S_all) -> None:
        """S_all (L+1, B, d): per-window sums of u of batch `b`; adds complete documents' ||S_D||^2."""
        docs = self.doc[b]
        uniq, loc = np.unique(docs, return_inverse=True)
        D = torch.zeros(S_all.shape[0], len(uniq), S_all.shape[2], dtype=S_all.dtype, device=S_all.device)
        D.index_add_(1, torch.as_tensor(loc, device=S_all.device), S_all)
        done = []
        for j, dd in enumerate(uniq.tolist()):
            if dd in self.carry:
                D[:, j] += self.carry.pop(dd)
            self.left[dd] -= int((docs == dd).sum())
            if self.left[dd] > 0:
                self.carry[dd] = D[:, j].clone()
            else:
                done.append(j)
        if done:
            Dd = D[:, torch.as_tensor(done, device=S_all.device)]
            acc_doc_sq += (Dd * Dd).sum((1, 2))


def _sample_positions(b: np.ndarray, an: np.ndarray, plan: ExtractionPlan) -> tuple[np.ndarray, np.ndarray]:
    """Sample positions inside this batch: flat indices into the (B, T) grid, and their sample rows."""
    T = an.shape[1]
    sel_flat, sel_k = [], []
    for r, i in enumerate(b):
        lo, hi = plan.offsets[i], plan.offsets[i + 1]
        a, z = np.searchsorted(plan.sample_global, [lo, hi])
        if z > a:
            sel_flat.append(r * T + np.flatnonzero(an[r])[plan.sample_global[a:z] - lo])
            sel_k.append(np.arange(a, z))
    if not sel_flat:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(sel_flat), np.concatenate(sel_k)


def _accumulate_batch(acc, sample, hs, an_t, ids_t, an, b, plan: ExtractionPlan, luts, dtype, docs: _DocSums,
                      scratch: dict | None = None, widths: Sequence[int] | None = None) -> None:
    """Every layer of one batch into the accumulators and the sample; stops on a non-finite value.

    Statistics on the padded grid with non-analysed positions selected out: dense reductions, no
    per-token scatter but for the tracked ids; in chunks of rows so the float64 temporaries stay
    bounded whatever the window length.
    """
    dev = an_t.device
    B, T = an.shape
    d = hs[0].shape[-1]
    step = max(1, STATS_CHUNK_TOKENS // T)
    seq_n = torch.as_tensor(an.sum(1), dtype=torch.float64, device=dev)
    grp = torch.as_tensor(plan.group_of[b], device=dev)
    chunks = [_chunk_inputs(an_t[r0:r0 + step], ids_t[r0:r0 + step], seq_n[r0:r0 + step], grp[r0:r0 + step],
                            luts, plan.cfg.freq_bins, r0, len(plan.tracked)) for r0 in range(0, B, step)]
    if TRACK_MAX_POSITION:
        gidx = np.full((B, T), -1.0)  # the global analysed index of each position (-1: not analysed)
        for r, i in enumerate(b):
            gidx[r, an[r]] = plan.offsets[i] + np.arange(plan.n_an[i])
        gidx_t = torch.as_tensor(gidx, dtype=torch.float64, device=dev)
        gkey_t = torch.as_tensor(_order_keys(plan, b, T), dtype=torch.float64, device=dev)
        for c in chunks:
            c["gidx"] = gidx_t[c["r0"]:c["r0"] + len(c["seq_n"])].reshape(-1)
            c["gkey"] = gkey_t[c["r0"]:c["r0"] + len(c["seq_n"])].reshape(-1)
    sel_flat, sel_k = _sample_positions(b, an, plan)
    sel_flat_t, sel_k_t = torch.as_tensor(sel_flat, device=dev), torch.as_tensor(sel_k, device=dev)
    norm_sums = torch.zeros(len(hs), dtype=torch.float64, device=dev)
    S_all = torch.zeros(len(hs), B, d, dtype=torch.float64, device=dev)  # per-window sums of u
    for layer, h in enumerate(hs):
        for c in chunks:
            r0, r1 = c["r0"], c["r0"] + len(c["seq_n"])
            norm_sums[layer] += _accumulate(acc, layer, h[r0:r1], c, S_all[layer, r0:r1], scratch,
                                            d if widths is None else widths[layer])
        if len(sel_k):
            sample[layer, sel_k_t] = h.reshape(-1, d)[sel_flat_t].float()
    if not bool(torch.isfinite(norm_sums).all()):  # one host sync per batch
        _report_non_finite(hs, an_t, ids_t, norm_sums, dtype)
    docs.add(acc["sum_doc_sq"], b, S_all)


def _report_non_finite(hs, an_t, ids_t, norm_sums, dtype: str) -> None:
    """Raise NonFiniteHiddenState naming the first layer, token id and position holding a NaN/inf."""
    layer = int(torch.nonzero(~torch.isfinite(norm_sums))[0])
    bad = (~torch.isfinite(hs[layer].float()).all(-1)) & an_t
    r, t = (int(v) for v in torch.nonzero(bad)[0])
    kind = "NaN" if bool(torch.isnan(hs[layer][r, t]).any()) else "inf"
    where = f"The hidden state at layer {layer} is {kind} for token id {int(ids_t[r, t])} (position {t} of its window)"
    if dtype in ("float32", "float64"):  # full precision already: no other dtype helps
        raise NonFiniteHiddenState(
            f"{where} in {dtype}, which is full precision: the model or its input produces it (a damaged weight file; "
            "for an image or speech corpus, a file whose pixels or samples hold NaN or inf). Check the model and the "
            "corpus's files.")
    raise NonFiniteHiddenState(
        f"{where} in {dtype}: the activations overflow this precision. Run again with dtype float32 (--dtype float32).")


def _counts(windows: TokenWindows, plan: ExtractionPlan, idx: np.ndarray) -> dict:
    """The sums that need no model, over the windows `idx` (all of them, or those processed so far)."""
    cfg = plan.cfg
    analysed, n_an = plan.analysed, plan.n_an[idx]
    all_tok = np.concatenate([windows.ids[i][analysed[i]] for i in idx]) if len(idx) else np.zeros(0, np.int64)
    all_seq = np.repeat(idx, n_an)
    occ_logf_all = plan.logf_lut[all_tok]
    doc_n = np.bincount(np.unique(windows.doc[idx], return_inverse=True)[1], weights=n_an.astype(np.float64))
    # Self-similarity's pair counts: per tracked id, sum over sequences of (occurrences in it)^2.
    slots = plan.id_slot[all_tok]
    occ = slots >= 0
    m = max(len(plan.tracked), 1)
    pair_keys, per_seq = np.unique(all_seq[occ] * m + slots[occ], return_counts=True)
    return dict(
        n=np.float64(n_an.sum()), n_seq=np.float64((n_an > 0).sum()),
        sum_doc_n_sq=np.float64((doc_n ** 2).sum()),
        id_seq_n_sq=np.bincount(pair_keys % m, weights=per_seq.astype(np.float64) ** 2,
                                minlength=len(plan.tracked))[:len(plan.tracked)],
        group_n=np.bincount(plan.group_of[all_seq], minlength=cfg.bootstrap_groups).astype(np.float64),
        sum_f=np.float64(occ_logf_all.sum()), sum_f2=np.float64((occ_logf_all ** 2).sum()),
        id_counts=_slot_counts(slots, len(plan.tracked)), id_list=plan.tracked,
        bin_n=np.bincount(plan.bin_lut[all_tok], minlength=cfg.freq_bins).astype(np.float64),
        bin_edges=plan.bin_edges,
    ), all_tok


def partial_arrays(windows: TokenWindows, plan: ExtractionPlan, acc: dict, docs: "_DocSums", idx: np.ndarray,
                   kept: Sequence[int]) -> dict:
    """The statistics' arrays over the windows `idx` processed so far: what `extract_stats` returns for a
    corpus of those windows alone (with this corpus's frequencies, tracked ids and groups), without the
    sample (it fills in corpus order; a partial one would be a biased sample).

    A document still open (its other windows not processed yet) counts with the windows seen so far.
    """
    arrays = {k: v.detach().cpu().numpy().copy() for k, v in acc.items()}
    for S_D in docs.carry.values():  # (L+1, d) partial sums of the open documents
        arrays["sum_doc_sq"] += (S_D * S_D).sum(1).cpu().numpy()
    arrays.update(_counts(windows, plan, np.sort(idx))[0])
    arrays["layer_index"] = np.asarray(kept, dtype=np.int64)
    return arrays


def _finalise(windows: TokenWindows, plan: ExtractionPlan, arrays: dict, sample: np.ndarray) -> dict:
    """The counts that need no model, and the metadata of the sampled tokens."""
    analysed, offsets = plan.analysed, plan.offsets
    counts, all_tok = _counts(windows, plan, np.arange(len(windows.ids)))
    arrays = dict(arrays)
    arrays.update(counts, sample=sample)
    # Metadata of the sampled tokens: id, window, position, document, corpus frequency.
    win_of = np.searchsorted(offsets, plan.sample_global, side="right") - 1
    pos = np.asarray([np.flatnonzero(analysed[w])[g - offsets[w]] for w, g in zip(win_of, plan.sample_global)],
                     dtype=np.int64)
    s_ids = all_tok[plan.sample_global]
    if "max_abs_at" in arrays:  # where each layer's max |x_d| sits: token id and position in its window
        at = arrays.pop("max_abs_at").astype(np.int64)
        ok = at >= 0  # -1: the dim is zero at every analysed token
        g = np.where(ok, at, 0)
        w_of = np.searchsorted(offsets, g, side="right") - 1
        ranks = g - offsets[w_of]  # rank among the window's analysed positions
        firsts = [np.flatnonzero(m) for m in analysed]
        pos_at = np.asarray([firsts[w][r] if len(firsts[w]) else 0 for w, r in zip(w_of.ravel(), ranks.ravel())],
                            dtype=np.int64).reshape(at.shape)
        arrays.update(max_abs_token_id=np.where(ok, all_tok[g] if len(all_tok) else 0, -1),
                      max_abs_position=np.where(ok, pos_at, -1))
    arrays.update(sample_token_id=s_ids, sample_window=win_of, sample_position=pos,
                  sample_doc=windows.doc[win_of], sample_freq=plan.freq_lut[s_ids])
    return arrays


def _slot_counts(slots: np.ndarray, n: int) -> np.ndarray:
    """Occurrences of each tracked id among these tokens (a sum, so shards add up)."""
    return np.bincount(slots[slots >= 0], minlength=n).astype(np.float64)


def _chunk_inputs(an, ids, seq_n, grp, luts: dict, n_bins: int, r0: int, n_tracked: int) -> dict:
    """Per-chunk tensors shared by every layer: masks, log frequencies, bins, tracked-id slots and
    the (sequence, tracked id) pair of each tracked occurrence."""
    if "one_bin" in luts:  # no token ids: no per-position frequencies or bins to look up
        return {"r0": r0, "mk": an.unsqueeze(-1), "one_bin": luts["one_bin"], "logf0": luts["logf0"],
                "any_keep": False, "seq_n": seq_n, "grp": grp}
    safe = torch.where(an, ids, 0)  # padding ids may lie outside the lookup tables
    slots = luts["slot"][safe].reshape(-1)
    keep_idx = torch.nonzero((slots >= 0) & an.reshape(-1)).squeeze(1)  # one host sync per chunk
    keep_slots = slots[keep_idx]
    pairs, pair_of = torch.unique((keep_idx // an.shape[1]) * max(n_tracked, 1) + keep_slots, return_inverse=True)
    onehot = torch.nn.functional.one_hot(luts["bin"][safe], n_bins) * an.unsqueeze(-1)
    return {"r0": r0, "mk": an.unsqueeze(-1), "logf": torch.where(an, luts["logf"][safe], 0.0),
            "onehot_bins": onehot.reshape(-1, n_bins).to(torch.float64).T, "keep_idx": keep_idx,
            "keep_slots": keep_slots, "any_keep": len(keep_idx) > 0, "seq_n": seq_n, "grp": grp,
            "pair_of": pair_of, "pair_slot": pairs % max(n_tracked, 1), "n_pairs": len(pairs)}


def _buffer(scratch: dict | None, name: str, like):
    """A float64 tensor shaped like `like`, reused across calls (a fresh multi-megabyte tensor per
    operation costs more than the operation: the allocator maps and zeroes new pages each time)."""
    if scratch is None:
        return torch.empty(like.shape, dtype=torch.float64, device=like.device)
    n = like.numel()
    buf = scratch.get(name)
    if buf is None or buf.numel() < n or buf.device != like.device:
        buf = scratch[name] = torch.empty(n, dtype=torch.float64, device=like.device)
    return buf[:n].view(like.shape)


def _accumulate(acc: dict, layer: int, h, c: dict, S_out, scratch: dict | None = None, width: int | None = None):
    """Add one chunk of one layer's hidden states h (B, T, d) to the float64 accumulators; write
    the per-window sums of u into S_out (B, d) (the per-document sums are made from them).

    Returns the chunk's sum of norms (a NaN or inf at an analysed position makes it non-finite).
    A hidden state that is exactly zero has u = 0: counted in n, with cosine 0 to every token.
    Three (B, T, d) float64 temporaries, from `scratch` when given: x, u and one for |x|, x^2, u^2.
    The sums declared with an `add` (core.stats.sums.ADDED) get their contribution of the chunk at the end, from x
    (`width`: the layer's real width, d by default).
    """
    d = h.shape[-1]
    x = _buffer(scratch, "x", h).copy_(h)
    x.masked_fill_(~c["mk"], 0.0)  # (B, T, d); never NaN * 0 from a padded position
    norm = x.norm(dim=-1)  # (B, T)
    u = torch.div(x, norm.clamp_min(1e-30).unsqueeze(-1), out=_buffer(scratch, "u", h))
    t = _buffer(scratch, "t", h)
    S = u.sum(1)  # (B, d) per-sequence sums of u
    S_out.copy_(S)
    acc["group_sum_u"][layer].index_add_(0, c["grp"], S)
    uu = torch.mul(u, u, out=t)
    usq = uu.sum(-1)  # (B, T): 1, or 0 for a zero hidden state (and for non-analysed positions)
    acc["group_u_sq"][layer].index_add_(0, c["grp"], usq.sum(1))
    acc["sum_u_sq"][layer] += uu.sum((0, 1))
    norm_sum = norm.sum()
    acc["sum_norm"][layer] += norm_sum
    Sx = x.sum(1)  # (B, d) per-sequence sums of x
    acc["sum_x"][layer] += Sx.sum(0)
    acc["sum_abs2"][layer] += torch.mul(x, x, out=t).sum((0, 1))
    ax = torch.abs(x, out=t)
    sum_ax = ax.sum((0, 1))
    acc["sum_abs"][layer] += sum_ax
    if "gidx" in c:
        top, at = _max_with_position(ax)  # (d,) the chunk's max |x_d| and its flat position (the first on ties)
        key = c["gkey"][at]
        cur = acc["max_abs"][layer]
        # larger, or as large and earlier in the plan's order: the token first in that order holds a maximum,
        # whatever order the batches ran in (one process, several, or a batch split after running out of memory)
        better = (top > cur) | ((top == cur) & (key < acc["max_abs_key"][layer]))
        acc["max_abs"][layer] = torch.where(better, top, cur)
        acc["max_abs_at"][layer] = torch.where(better, c["gidx"][at], acc["max_abs_at"][layer])
        acc["max_abs_key"][layer] = torch.where(better, key, acc["max_abs_key"][layer])
    else:
        acc["max_abs"][layer] = torch.maximum(acc["max_abs"][layer], ax.amax((0, 1)))
    intra, n_intra = M.intra_sentence_sums(S, Sx, c["seq_n"])  # Ethayarajh's intra-sentence similarity
    acc["intra_sum"][layer] += intra
    acc["intra_n"][layer] += n_intra
    uf = u.reshape(-1, d)
    if "one_bin" in c:  # one pseudo id: one log frequency, one bin (the same sums, without the lookups)
        acc["sum_f_abs"][layer] += c["logf0"] * sum_ax
        acc["bin_sum_u"][layer, c["one_bin"]] += S.sum(0)
        acc["bin_u_sq"][layer, c["one_bin"]] += usq.sum()
    else:
        acc["sum_f_abs"][layer] += torch.einsum("bt,btd->d", c["logf"], ax)
        acc["bin_sum_u"][layer] += c["onehot_bins"] @ uf
        acc["bin_u_sq"][layer] += c["onehot_bins"] @ usq.reshape(-1)
    if c["any_keep"]:
        kept = uf[c["keep_idx"]]
        acc["id_sum_u"][layer].index_add_(0, c["keep_slots"], kept)
        # Self-similarity over different sequences: sum over (sequence, id) of ||S_{id,seq}||^2.
        P = torch.zeros(c["n_pairs"], d, dtype=kept.dtype, device=kept.device).index_add_(0, c["pair_of"], kept)
        acc["id_seq_sq"][layer].index_add_(0, c["pair_slot"], (P * P).sum(1))
    if ADDED:
        tok = Tokens(x, norm, c["mk"][..., 0], d if width is None else int(width), torch)
        for added in ADDED:
            acc[added.name][layer] += added.add(tok)
    return norm_sum


ORDER_T = 1 << 20  # positions per window in the order keys (longer than any window)


def _order_keys(plan: ExtractionPlan, b: np.ndarray, T: int) -> np.ndarray:
    """(B, T) the place of each position of batch `b` in the plan's order: its window's rank times ORDER_T
    plus the position (a batch's grid is row-major in that order, so the first of tied positions in a grid
    has the smallest key). Exact in float64 up to 2^33 windows."""
    return (plan.window_rank[np.asarray(b)][:, None] * ORDER_T + np.arange(T)[None, :]).astype(np.float64)


def _max_with_position(ax):
    """max over the (B, T) positions of ax (B, T, d) per dim, and the flat index b*T + t holding it (the
    first one on ties): what `ax.reshape(-1, d).max(0)` returns, in about a third of its time on CPU.

    `max` with indices over a strided dim runs an index-tracking loop over all B*T*d values; here the one
    full pass is a plain `amax` per window, and the indices are found among the B window maxima, then among
    the T values of the winning window of each dim.
    """
    B, T, d = ax.shape
    top, win = ax.amax(1).max(0)  # (d,): the first window holding each dim's maximum
    dims = torch.arange(d, device=ax.device)
    return top, win * T + ax[win, :, dims].argmax(1)  # (d, T) values of that window; its first maximum


def merge_stats(a: dict, b: dict) -> dict:
    """Merge two accumulators of the same model and layout exactly (shards, processes, machines), by each sum's
    declared merge (core.stats.sums: added, the larger, or following the larger max).

    Samples are not merged here (each shard keeps its own); the sums are.
    """
    return _merge(a, b)
