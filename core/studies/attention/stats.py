"""Streamed attention statistics per layer and head (Godey et al. 2023/2024; Puccetti et al. 2022).

The model runs with eager attention, so that every attention module returns its probabilities;
a forward hook on each attention module reduces them at once (float32 over one row or column,
float64 sums) and drops them, so no attention matrix outlives its layer (memory is flat in the
corpus size). Hooks on the query
and key projections capture q and k as the projections output them: BEFORE any rotary position
embedding (LLaMA-type models rotate them afterwards; GPT-NeoX/Pythia rotates the first
`partial_rotary_factor` of each head's dims, 1/4 by default, and leaves the others as they are),
with grouped-query attention's key heads as they are (query head h reads key head h // (H / H_kv)).
Fused projections are split as the model splits them: GPT-2's c_attn is [q | k | v], GPT-NeoX's
query_key_value is [q_h | k_h | v_h] for each head h in turn.

Blocks are numbered 1..L: block l reads hidden_states[l - 1] and writes hidden_states[l]
(layer 0 = embeddings). Per block and query head, over the windows' positions:

- queries: the analysed positions (the run's special-token policy), padding never;
- `entropy`: mean over those queries (with >= 2 visible keys) of H(a_q) / log(n_visible(q));
- `sink_first`: mean attention paid to the window's first position; `sink_special`: to the
  special tokens ([CLS], [SEP], <s>...), `sink_special_not_first` the same without position 0;
- `alpha_first` (Gu et al. 2025's alpha_1, over every real query, whatever the policy): per window
  the mean over its real queries of the attention to position 0, then the mean over windows;
- received attention S_t of each real key position t: the mean of a_{q,t} over the real queries
  that can see t (every real query, or q >= t when causal);
- `link` (Puccetti): Pearson r between |x_{t,d}| (x = hidden_states[l - 1], the residual stream
  the block reads) and S_t, over real key positions with special tokens included or excluded, for
  the persistent outlier dims and for random non-outlier dims;
- query/key geometry over analysed positions: mu_Q, mu_K, the drift ratios ||mu|| / E||q||,
  cos(mu_Q, mu_K) (signed), the mean pairwise cosine among queries and among keys (the exact
  closed form (||sum u||^2 - N) / (N (N - 1))), and over the visible (query, key) pairs of
  analysed positions the mean logit q.k / sqrt(d_h) and the share of it carried by the terms that
  contain a mean: with q = mu_Q + q~, k = mu_K + k~, the mean of mu_Q.mu_K + mu_Q.k~ + q~.mu_K
  over those pairs, divided by the mean logit.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ...base.config import CONFIG
from ...base.errors import Cancelled
from ...base.progress import Progress
from ...inputs.corpora import TokenWindows
from ...inputs.models import torch_dtype
from ...stats.batching import analysed_masks, pad_batch, plan_batches
from .arch import Arch, attention_arch, eager_attention, head_dim, hook_handles, probabilities

# Sums over tokens (merge by addition).
SUM_KEYS = ("n_q", "sum_entropy", "n_entropy", "sum_first", "sum_special", "sum_special_nf", "sum_alpha_first",
            "n_windows",
            "link_n", "link_a", "link_a2", "link_s", "link_s2", "link_as",
            "qk_n", "sum_q", "sum_qnorm", "sum_qu", "sum_k", "sum_knorm", "sum_ku",
            "pairs", "pair_q", "pair_k", "pair_qk")
MAX_KEYS: tuple[str, ...] = ()  # maxima (merge by max); a torchrun run reduces every key by one of the two rules


_CHUNK = 1 << 18  # float32 values per pass of the entropy: a chunk stays in the CPU's cache
_TINY = 1.1754943508222875e-38  # torch.finfo(torch.float32).tiny: clamping zeros to a subnormal slows log ~6x


@dataclass
class _Batch:
    """Per-batch masks shared by the hooks (B, T), and the weights derived from them once per batch
    (not once per layer): `weights(causal)`."""

    real: object
    analysed: object
    special: object
    n_real: object  # (B,) float64
    stash: dict = field(default_factory=dict)
    _derived: dict = field(default_factory=dict)

    def weights(self, causal: bool) -> dict:
        """Float64 (B, T) weights of the reductions (zeros where a position does not count):
        `an` analysed queries, `ent` analysed queries with >= 2 visible keys divided by
        log(n_visible), `see` 1 / (number of real queries that see key t) on real keys, `special`
        and `special_nf` the special keys (the latter without position 0); float32 `cols`
        (B, 1, 2, T: real queries, analysed queries) for the one matrix product with the
        probabilities that sums each key's column over those queries; `n_an`, `n_ent` counts.
        For the query/key sums, float32 (B, T): `an32` the analysed positions, and (B, 2, T)
        `vc_q` = [an32, visible analysed keys of each analysed query], `vc_k` = [an32, analysed
        queries that see each analysed key]; `n_pairs` the visible (query, key) pairs."""
        got = self._derived.get(causal)
        if got is not None:
            return got
        # lazy: keeps torch out of a cache hit
        import torch

        B, T = self.real.shape
        pos = torch.arange(T, device=self.real.device, dtype=torch.float64)
        n_vis = (pos + 1).expand(B, T) if causal else self.n_real[:, None].expand(B, T)
        n_see = (self.n_real[:, None] - pos[None, :]) if causal else self.n_real[:, None].expand(B, T)
        ent_ok = self.analysed & (n_vis >= 2)
        got = {
            "an": self.analysed.to(torch.float64),
            "ent": ent_ok.to(torch.float64) / torch.log(n_vis.clamp_min(2)),
            "see": self.real.to(torch.float64) / n_see.clamp_min(1),
            "cols": torch.stack([self.real, self.analysed], 1).to(torch.float32)[:, None],
            "special": self.special.to(torch.float64),
            "special_nf": torch.cat([torch.zeros_like(self.special[:, :1]), self.special[:, 1:]], 1).to(torch.float64),
            "n_an": self.analysed.sum(), "n_ent": ent_ok.sum(),
        }
        an32 = self.analysed.to(torch.float32)
        n_row = an32.sum(1, keepdim=True)  # (B, 1) analysed positions per window (exact in float32)
        if causal:
            rank = torch.cumsum(an32, 1) * an32  # 1-based rank among the window's analysed positions
            v, c = rank, (n_row - rank + 1) * an32  # keys visible to query i; queries that see key j
        else:
            v = c = n_row * an32
        got.update(an32=an32, vc_q=torch.stack([an32, v], 1), vc_k=torch.stack([an32, c], 1),
                   n_pairs=v.to(torch.float64).sum())
        self._derived[causal] = got
        return got


class AttentionAccumulator:
    """Float64 sums of one run's attention statistics, updated by hooks during the forward.

    The fields (`acc`, all sums over tokens, merged by addition: SUM_KEYS), per block l of L,
    query head h of H, key/value head of Hkv, head dim dh, tracked dim of D, key set s of
    KEY_SETS:

    - n_q (L): analysed queries; sum_entropy (L, H) and n_entropy (L): normalised entropies of the
      analysed queries with >= 2 visible keys; sum_first, sum_special, sum_special_nf (L, H):
      attention of analysed queries to position 0, to special tokens, to special tokens after 0;
      sum_alpha_first (L, H) and n_windows (L): Gu et al.'s alpha_1 of each window (the mean over
      all its real queries of the attention to position 0) summed over the windows, and the windows;
    - link_n (L, 2), link_a, link_a2 (L, 2, D), link_s, link_s2 (L, 2, H), link_as (L, 2, H, D):
      the Pearson sums of |x_d| and S_t over real key positions of set s;
    - qk_n (L): analysed positions; sum_q, sum_qu (L, H, dh) and sum_qnorm (L, H): q, q/||q||,
      ||q||; sum_k, sum_ku (L, Hkv, dh), sum_knorm (L, Hkv) the same for k;
    - pairs (L): visible (query, key) pairs of analysed positions; pair_q (L, H, dh): q summed
      once per visible key; pair_k (L, Hkv, dh): k summed once per query that sees it; pair_qk
      (L, H): q.k summed over those pairs.

    The hooks reduce in the dtype of the tensors they get (float32) over one row or column of a
    window (at most T terms) and accumulate in float64; nothing of size B x H x T x T is kept
    beyond one layer's call except a reused scratch buffer.
    """

    def __init__(self, arch: Arch, dims: list[int], device, head_dim: int | None = None):
        # lazy: keeps torch out of a cache hit
        import torch

        self.arch, self.dims, self.dev = arch, list(dims), device
        L, H, Hkv, D = len(arch.layers), arch.n_heads, arch.n_kv_heads, len(dims)
        dh = head_dim or arch.d_model // H
        self.dh = dh
        z = lambda *s: torch.zeros(*s, dtype=torch.float64, device=device)  # noqa: E731
        self.acc = {
            "n_q": z(L), "sum_entropy": z(L, H), "n_entropy": z(L), "sum_first": z(L, H), "sum_special": z(L, H),
            "sum_special_nf": z(L, H), "sum_alpha_first": z(L, H), "n_windows": z(L),
            "link_n": z(L, 2), "link_a": z(L, 2, D), "link_a2": z(L, 2, D), "link_s": z(L, 2, H),
            "link_s2": z(L, 2, H), "link_as": z(L, 2, H, D),
            "qk_n": z(L), "sum_q": z(L, H, dh), "sum_qnorm": z(L, H), "sum_qu": z(L, H, dh),
            "sum_k": z(L, Hkv, dh), "sum_knorm": z(L, Hkv), "sum_ku": z(L, Hkv, dh),
            "pairs": z(L), "pair_q": z(L, H, dh), "pair_k": z(L, Hkv, dh), "pair_qk": z(L, H),
        }
        self.dims_t = torch.as_tensor(self.dims, dtype=torch.long, device=device)
        self.batch: _Batch | None = None
        self.received: list = [None] * L  # S_t of the current batch, per layer (B, H, T) float64
        self._scratch = None  # float32 buffer for x log x, reused by every layer and batch

    # -- hooks
    def _proj_hook(self, l: int, which: str):
        def hook(_mod, _args, out):
            if self.batch is not None:
                self.batch.stash[(l, which)] = out
        return hook

    def _attn_hook(self, l: int):
        def hook(_mod, _args, out):
            if self.batch is None:
                return None
            w = probabilities(out)
            self._attention(l, w)
            self._geometry(l)
            # The output is left as it is: without output_attentions the block drops the
            # probabilities, so no layer's matrix outlives its block.
            return None
        return hook

    @contextmanager
    def hooks(self) -> Iterator[None]:
        try:
            with hook_handles() as handles:
                for l, al in enumerate(self.arch.layers):
                    handles.append(al.q_mod.register_forward_hook(self._proj_hook(l, "q")))
                    if al.k_mod is not None:
                        handles.append(al.k_mod.register_forward_hook(self._proj_hook(l, "k")))
                    handles.append(al.module.register_forward_hook(self._attn_hook(l)))
                yield
        finally:
            self._scratch = None

    # -- per layer
    def _qk(self, l: int):
        """(q (B, T, H, dh), k (B, T, Hkv, dh)) float32 of the batch, as the projections output them."""
        # lazy: keeps torch out of a cache hit
        import torch

        b = self.batch
        q = b.stash.pop((l, "q"))
        al = self.arch.layers[l]
        if al.k_mod is None:  # a fused projection: GPT-2's [q | k | v], GPT-NeoX's per-head [q_h | k_h | v_h]
            q, k = al.split(q, self.arch.n_heads)
        else:
            k = b.stash.pop((l, "k"))
        B, T = b.real.shape
        H, Hkv = self.arch.n_heads, self.arch.n_kv_heads
        return (q.to(torch.float32).reshape(B, T, H, q.shape[-1] // H),
                k.to(torch.float32).reshape(B, T, Hkv, k.shape[-1] // Hkv))

    def _entropy(self, A, causal: bool):
        """-sum_k a log a of every row of A (B, H, T, T) float32, as (B, H, T) float64 nats.

        Rows go through a reused float32 buffer in chunks of about 2^18 values (clamp to the
        smallest normal float32 so that 0 log 0 = 0, log, times a, sum), so the passes stay in the
        CPU's cache and nothing of A's size is allocated. Causal: a chunk of rows [r0, r1) reads the
        keys before r1 only (the rest of those rows is exactly 0), so about half of A is skipped."""
        # lazy: keeps torch out of a cache hit
        import torch

        B, H, T, _ = A.shape
        BH = B * H
        need = max(_CHUNK, BH * T)
        if self._scratch is None or self._scratch.numel() < need or self._scratch.device != A.device:
            self._scratch = torch.empty(need, dtype=torch.float32, device=A.device)
        out = torch.empty(B, H, T, dtype=torch.float32, device=A.device)
        if not causal:
            rows, flat = A.view(-1, T), out.view(-1)
            step = max(1, _CHUNK // max(T, 1))
            for i in range(0, rows.shape[0], step):
                r = rows[i:i + step]
                buf = self._scratch[:r.numel()].view(r.shape)
                torch.clamp(r, min=_TINY, out=buf)  # the smallest normal float: log of a subnormal is ~6x slower
                buf.log_().mul_(r)
                torch.sum(buf, -1, out=flat[i:i + step])
            return out.double().neg_()
        c = _CHUNK / BH  # rows r0..r0+n of every (window, head) with keys < r0 + n: n (r0 + n) <= c
        r0 = 0
        while r0 < T:
            n = max(1, int((math.sqrt(r0 * r0 + 4 * c) - r0) / 2))
            r1 = min(T, r0 + n)
            r = A[:, :, r0:r1, :r1]
            buf = self._scratch[:r.numel()].view(r.shape)
            torch.clamp(r, min=_TINY, out=buf)
            buf.log_().mul_(r)
            out[:, :, r0:r1] = buf.sum(-1)
            r0 = r1
        return out.double().neg_()

    def _attention(self, l: int, w) -> None:
        # lazy: keeps torch out of a cache hit
        import torch

        a, b = self.acc, self.batch
        A = w if w.dtype == torch.float32 else w.float()  # (B, H, T, T); padded keys carry exactly 0
        if not A.is_contiguous():
            A = A.contiguous()
        causal = self.arch.layers[l].causal
        wt = b.weights(causal)
        a["sum_entropy"][l] += torch.einsum("bht,bt->h", self._entropy(A, causal), wt["ent"])
        a["n_entropy"][l] += wt["n_ent"]
        a["n_q"][l] += wt["n_an"]
        # One product sums each key's column over the real queries and over the analysed queries:
        # the first gives the received attention, the second the attention paid to position 0 and
        # to the special tokens.
        C = torch.matmul(wt["cols"], A).double()  # (B, H, 2, T)
        an_cols = C[:, :, 1]
        a["sum_first"][l] += an_cols[:, :, 0].sum(0)
        a["sum_special"][l] += torch.einsum("bht,bt->h", an_cols, wt["special"])
        a["sum_special_nf"][l] += torch.einsum("bht,bt->h", an_cols, wt["special_nf"])
        # alpha_1 (Gu et al. 2025): per window, the mean over every real query of its attention to position 0.
        a["sum_alpha_first"][l] += (C[:, :, 0, 0] / b.n_real[:, None]).sum(0)
        a["n_windows"][l] += C.shape[0]
        # Received attention S_t: the mean over the real queries that see t (0 on padding).
        self.received[l] = C[:, :, 0] * wt["see"][:, None, :]

    def _geometry(self, l: int) -> None:
        """Query/key sums over the analysed positions: each window's sum over its positions (at most
        T terms) in float32, by one batched product with the (B, T) weights; windows added in float64."""
        # lazy: keeps torch out of a cache hit
        import torch

        a, b = self.acc, self.batch
        wt = b.weights(self.arch.layers[l].causal)
        q, k = self._qk(l)  # (B, T, H, dh), (B, T, Hkv, dh) float32, every position
        B, T, H, dh = q.shape
        Hkv = k.shape[2]
        an = wt["an32"][:, None]  # (B, 1, T)
        qn, kn = torch.linalg.vector_norm(q, dim=-1), torch.linalg.vector_norm(k, dim=-1)  # (B, T, H|Hkv)
        qf, kf = q.reshape(B, T, H * dh), k.reshape(B, T, Hkv * dh)

        def win_sum(w, x):  # (B, r, T) @ (B, T, C): per window in float32, then over windows in float64
            return torch.bmm(w, x).to(torch.float64).sum(0)

        sq, sk = win_sum(wt["vc_q"], qf), win_sum(wt["vc_k"], kf)  # rows: [analysed sum, pair-weighted sum]
        a["qk_n"][l] += wt["n_an"]
        a["sum_q"][l] += sq[0].view(H, dh)
        a["pair_q"][l] += sq[1].view(H, dh)
        a["sum_k"][l] += sk[0].view(Hkv, dh)
        a["pair_k"][l] += sk[1].view(Hkv, dh)
        a["sum_qnorm"][l] += win_sum(an, qn)[0]
        a["sum_knorm"][l] += win_sum(an, kn)[0]
        a["sum_qu"][l] += win_sum(an, (q / qn.clamp_min(1e-30)[..., None]).view(B, T, H * dh))[0].view(H, dh)
        a["sum_ku"][l] += win_sum(an, (k / kn.clamp_min(1e-30)[..., None]).view(B, T, Hkv * dh))[0].view(Hkv, dh)
        # Visible pairs (query i, key j) of analysed positions in one window; query head h reads
        # key head h // (H / Hkv), so the query heads are grouped by their key head.
        rep = H // Hkv
        if self.arch.layers[l].causal:  # q_i . (sum of the analysed k_j, j <= i), summed over analysed i
            # In float64: the running sums of drifted keys are large and mean_term_share divides by
            # this sum's mean, which can be near 0 (float32 left 2e-6 relative error there).
            kc = torch.cumsum(kf.to(torch.float64) * wt["an"][..., None], 1).view(B, T, Hkv, 1, dh)
            dots = (q.view(B, T, Hkv, rep, dh) * kc).sum(-1).view(B, T, H)  # float64 (type promotion)
            a["pair_qk"][l] += torch.einsum("bth,bt->h", dots, wt["an"])
        else:  # (sum of the window's analysed q) . (sum of its analysed k), per window
            qs = torch.bmm(an, qf).to(torch.float64).view(B, Hkv, rep, dh)
            ks = torch.bmm(an, kf).to(torch.float64).view(B, Hkv, 1, dh)
            a["pair_qk"][l] += (qs * ks).sum((0, 3)).reshape(H)
        a["pairs"][l] += wt["n_pairs"]

    def link(self, hidden_states) -> None:
        """Outlier-link sums of the current batch (hidden_states: the model's, block l reads [l])."""
        # lazy: keeps torch out of a cache hit
        import torch

        a, b = self.acc, self.batch
        sets = torch.stack([b.real, b.real & ~b.special]).to(torch.float64)  # (2, B, T)
        n_set = sets.sum((1, 2))
        for l in range(len(self.arch.layers)):
            x = hidden_states[l].index_select(-1, self.dims_t).to(torch.float64).abs()  # (B, T, D)
            S = self.received[l]  # (B, H, T)
            xm = sets[..., None] * x  # (2, B, T, D)
            Sm = sets[:, :, None, :] * S  # (2, B, H, T)
            a["link_n"][l] += n_set
            a["link_a"][l] += xm.sum((1, 2))
            a["link_a2"][l] += (xm * xm).sum((1, 2))
            a["link_s"][l] += Sm.sum((1, 3))
            a["link_s2"][l] += (Sm * Sm).sum((1, 3))
            a["link_as"][l] += torch.einsum("sbht,sbtd->shd", Sm, xm)
            self.received[l] = None

    def numpy(self) -> dict[str, np.ndarray]:
        return {k: v.cpu().numpy() for k, v in self.acc.items()}


def merge_attention(a: dict, b: dict) -> dict:
    """Two accumulators of the same model, dims and layout add up exactly."""
    return {k: (a[k] + b[k]) if k in SUM_KEYS else a[k] for k in a}


def pick_dims(outlier_dims: list[int], d: int, n_random: int = CONFIG.attention_random_dims,
              seed: int = 0) -> tuple[list[int], list[int]]:
    """(outlier dims, seeded random non-outlier dims): the dims whose link is tracked."""
    outl = sorted({int(x) for x in outlier_dims if 0 <= int(x) < d})
    pool = np.setdiff1d(np.arange(d), outl)
    k = min(int(n_random), pool.size)
    rand = sorted(int(i) for i in np.random.default_rng(seed).choice(pool, size=k, replace=False)) if k else []
    return outl, rand


def extract_attention(model, windows: TokenWindows, dims: list[int], *, special_policy: str = "exclude",
                      batch_size: int = 16, device: str = "cpu", dtype: str = "float32", pad_id: int = 0,
                      progress: Callable[[Progress], None] | None = None,
                      cancel: Callable[[], bool] | None = None,
                      shard: Callable[[list[np.ndarray], np.ndarray], list[np.ndarray]] | None = None,
                      reduce: Callable[[dict], None] | None = None) -> tuple[dict, dict, Arch]:
    """Run `model` (a transformers base model) over `windows` with the statistics' hooks.

    Returns (sums as numpy arrays, timing, arch). The model's attention implementation is
    switched to eager for the call and restored afterwards.
    `shard(batches, window_lengths)` -> the batches this process runs, and `reduce(sums)`, which
    adds up (in place, on the device) the sums of every process: the torchrun path
    (`core.compute.distributed`). Every statistic is per window, so any split of the batches is exact.
    """
    # lazy: keeps torch out of a cache hit
    import torch

    progress = progress or (lambda p: None)
    arch = attention_arch(model)
    dev = torch.device(device)
    tdt = torch_dtype(dtype)
    analysed = analysed_masks(windows, special_policy)
    N = int(sum(int(m.sum()) for m in analysed))
    acc = AttentionAccumulator(arch, dims, dev, head_dim=head_dim(model, arch))
    batches = plan_batches(windows, batch_size)
    if shard is not None:  # this process's share; each batch's forward is the single process's
        batches = shard(batches, np.asarray([len(w) for w in windows.ids]))
        N = int(sum(int(analysed[i].sum()) for b in batches for i in b))
    use_autocast = dev.type == "cuda" and tdt != torch.float32
    t0, done = time.perf_counter(), 0
    progress(Progress("attention", 0, N, message=f"{len(batches)} batches"))
    with eager_attention(model), acc.hooks(), torch.inference_mode():
        for bi, b in enumerate(batches):
            if cancel is not None and cancel():
                raise Cancelled("Cancelled by the user; nothing was stored.")
            ids, att = pad_batch([windows.ids[i] for i in b], pad_id)
            real = att.astype(bool)
            an = np.zeros_like(real)
            spc = np.zeros_like(real)
            for r, i in enumerate(b):
                n = len(windows.ids[i])
                an[r, :n] = analysed[i]
                spc[r, :n] = windows.special[i]
            real_t = torch.as_tensor(real, device=dev)
            acc.batch = _Batch(real=real_t, analysed=torch.as_tensor(an, device=dev),
                               special=torch.as_tensor(spc, device=dev),
                               n_real=real_t.sum(1).to(torch.float64))
            ids_t = torch.as_tensor(ids, device=dev)
            with torch.autocast(dev.type, dtype=tdt, enabled=use_autocast):
                out = model(input_ids=ids_t, attention_mask=real_t.long(), output_hidden_states=True)
            acc.link(out.hidden_states)
            acc.batch = None
            del out
            done += int(an.sum())
            el = time.perf_counter() - t0
            rate = done / el if el > 0 else 0.0
            progress(Progress("attention", done, N, rate, (N - done) / rate if rate else float("nan"),
                              f"batch {bi + 1}/{len(batches)}"))
    if reduce is not None:  # every process's sums into each (the torchrun path)
        unknown = sorted(set(acc.acc) - set(SUM_KEYS) - set(MAX_KEYS))
        if unknown:
            raise RuntimeError(f"attention accumulators {unknown} are in neither SUM_KEYS nor MAX_KEYS")
        reduce(acc.acc)
    el = time.perf_counter() - t0
    return acc.numpy(), {"forward_s": el, "tokens_per_s": N / el if el > 0 else 0.0}, arch
