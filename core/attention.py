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

from .batching import pad_batch, plan_batches
from .config import CONFIG, cache_identity
from .corpora import TokenWindows
from .errors import Cancelled
from .extract import Progress, analysed_masks
from .models import torch_dtype
from .outliers import run_outlier_dims

KEY_SETS = ("included", "excluded")  # special tokens among the key positions of the outlier link

# Sums over tokens (merge by addition).
SUM_KEYS = ("n_q", "sum_entropy", "n_entropy", "sum_first", "sum_special", "sum_special_nf",
            "link_n", "link_a", "link_a2", "link_s", "link_s2", "link_as",
            "qk_n", "sum_q", "sum_qnorm", "sum_qu", "sum_k", "sum_knorm", "sum_ku",
            "pairs", "pair_q", "pair_k", "pair_qk")
MAX_KEYS: tuple[str, ...] = ()  # maxima (merge by max); a torchrun run reduces every key by one of the two rules


_CHUNK = 1 << 18  # float32 values per pass of the entropy: a chunk stays in the CPU's cache
_TINY = 1.1754943508222875e-38  # torch.finfo(torch.float32).tiny: clamping zeros to a subnormal slows log ~6x

# ----------------------------------------------------------------------------- architecture
@dataclass
class AttnLayer:
    """One block's attention module and where its q and k come from."""

    module: object
    q_mod: object
    k_mod: object | None  # None: q_mod is a fused q/k/v projection, laid out as `fused` says
    causal: bool
    fused: str = ""  # "qkv": GPT-2's c_attn, [q | k | v]; "per_head": GPT-NeoX's query_key_value, [q_h | k_h | v_h] per head

    def split(self, out, n_heads: int):
        """(q, k) (..., H * dh) from a fused projection's output (..., 3 * H * dh)."""
        if self.fused == "qkv":
            d = out.shape[-1] // 3
            return out[..., :d], out[..., d:2 * d]
        qkv = out.unflatten(-1, (n_heads, 3, out.shape[-1] // (3 * n_heads)))  # GPT-NeoX: view(..., H, 3 dh).chunk(3)
        return qkv[..., 0, :].flatten(-2), qkv[..., 1, :].flatten(-2)


@dataclass
class Arch:
    layers: list[AttnLayer]
    n_heads: int
    n_kv_heads: int
    d_model: int


# Fused projections whose layout is neither GPT-2's [q | k | v] nor GPT-NeoX's per-head one
# (GPT-BigCode: per head, or [q | k | v] with one key/value head)
_OTHER_FUSED = ("gpt_bigcode",)


def _record_targets(model) -> list:
    """The (class, layer-name suffix) transformers itself records as `attentions`."""
    spec = getattr(type(model), "_can_record_outputs", None) or {}
    got = spec.get("attentions")
    if got is None:
        return []
    items = got if isinstance(got, (list, tuple)) else [got]
    out = []
    for it in items:
        if isinstance(it, type):
            out.append((it, None))
        elif getattr(it, "target_class", None) is not None:
            out.append((it.target_class, getattr(it, "layer_name", None)))
    return out


def attention_arch(model) -> Arch:
    """Find every block's self-attention module and its query/key projections.

    Supported: separate projections named q_proj/k_proj (LLaMA, Mistral, Qwen, ...) or query/key
    (BERT, RoBERTa, ...), GPT-2's fused c_attn and GPT-NeoX's (Pythia's) fused query_key_value.
    Raises ValueError otherwise.
    """
    cfg = model.config
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    H = int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0))
    Hkv = int(getattr(cfg, "num_key_value_heads", 0) or H)
    d = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0))
    model_type = getattr(cfg, "model_type", "")
    targets = _record_targets(model)
    mods = []
    for name, m in model.named_modules():
        if targets:  # a recorder's layer name (GPT-2: ".attn") tells self- from cross-attention
            hit = any(isinstance(m, c) and (ln is None or name.rsplit(".", 1)[-1] == ln.rsplit(".", 1)[-1])
                      for c, ln in targets)
        else:
            hit = type(m).__name__.endswith(("SelfAttention", "Attention")) and not getattr(m, "is_cross_attention", False)
        if hit and not getattr(m, "is_cross_attention", False):
            mods.append(m)
    if not H or not mods:
        raise ValueError(f"{type(model).__name__}: no self-attention modules found for attention statistics")
    layers = []
    for m in mods:
        if hasattr(m, "q_proj") and hasattr(m, "k_proj"):
            q, k = m.q_proj, m.k_proj
        elif hasattr(m, "query") and hasattr(m, "key"):
            q, k = m.query, m.key
        elif hasattr(m, "c_attn") and model_type not in _OTHER_FUSED:
            q, k, fused = m.c_attn, None, "qkv"
        elif hasattr(m, "query_key_value") and model_type == "gpt_neox":
            q, k, fused = m.query_key_value, None, "per_head"
        elif hasattr(m, "c_attn") or hasattr(m, "query_key_value"):  # Falcon, Bloom, GPT-BigCode, ...: other layouts
            raise ValueError(f"{type(m).__name__}: the layout of its fused query/key/value projection is not "
                             f"among the known ones (GPT-2's c_attn, GPT-NeoX's query_key_value)")
        else:
            raise ValueError(f"{type(m).__name__}: query/key projections not recognised (q_proj/k_proj, "
                             f"query/key, c_attn or query_key_value expected)")
        layers.append(AttnLayer(m, q, k, bool(getattr(m, "is_causal", False)), fused if k is None else ""))
    return Arch(layers, H, Hkv, d)


@contextmanager
def eager_attention(model) -> Iterator[None]:
    """Eager attention (which returns the probabilities) for the duration; the previous
    implementation (SDPA by default) is restored on exit, so runs without attention keep it."""
    prev = getattr(model.config, "_attn_implementation", None)
    if prev == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if prev is not None:
            model.set_attn_implementation(prev)


# ----------------------------------------------------------------------------- accumulation
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
        import torch

        self.arch, self.dims, self.dev = arch, list(dims), device
        L, H, Hkv, D = len(arch.layers), arch.n_heads, arch.n_kv_heads, len(dims)
        dh = head_dim or arch.d_model // H
        self.dh = dh
        z = lambda *s: torch.zeros(*s, dtype=torch.float64, device=device)  # noqa: E731
        self.acc = {
            "n_q": z(L), "sum_entropy": z(L, H), "n_entropy": z(L), "sum_first": z(L, H), "sum_special": z(L, H),
            "sum_special_nf": z(L, H),
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
            w = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
            if w is None:
                raise RuntimeError("the attention module returned no probabilities (eager attention needed)")
            self._attention(l, w)
            self._geometry(l)
            # The output is left as it is: without output_attentions the block drops the
            # probabilities, so no layer's matrix outlives its block.
            return None
        return hook

    @contextmanager
    def hooks(self) -> Iterator[None]:
        handles = []
        try:
            for l, al in enumerate(self.arch.layers):
                handles.append(al.q_mod.register_forward_hook(self._proj_hook(l, "q")))
                if al.k_mod is not None:
                    handles.append(al.k_mod.register_forward_hook(self._proj_hook(l, "k")))
                handles.append(al.module.register_forward_hook(self._attn_hook(l)))
            yield
        finally:
            for h in handles:
                h.remove()
            self._scratch = None

    # -- per layer
    def _qk(self, l: int):
        """(q (B, T, H, dh), k (B, T, Hkv, dh)) float32 of the batch, as the projections output them."""
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
        # Received attention S_t: the mean over the real queries that see t (0 on padding).
        self.received[l] = C[:, :, 0] * wt["see"][:, None, :]

    def _geometry(self, l: int) -> None:
        """Query/key sums over the analysed positions: each window's sum over its positions (at most
        T terms) in float32, by one batched product with the (B, T) weights; windows added in float64."""
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
    (`core.distributed`). Every statistic is per window, so any split of the batches is exact.
    """
    import torch

    progress = progress or (lambda p: None)
    arch = attention_arch(model)
    dev = torch.device(device)
    tdt = torch_dtype(dtype)
    analysed = analysed_masks(windows, special_policy)
    N = int(sum(int(m.sum()) for m in analysed))
    acc = AttentionAccumulator(arch, dims, dev, head_dim=_head_dim(model, arch))
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


def _head_dim(model, arch: Arch) -> int:
    cfg = model.config
    hd = getattr(cfg, "head_dim", None)
    return int(hd) if isinstance(hd, int) and hd > 0 else arch.d_model // arch.n_heads


# ----------------------------------------------------------------------------- finishing
def _pearson(n, sx, sx2, sy, sy2, sxy):
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = n * sxy - sx * sy
        vx = n * sx2 - sx * sx
        vy = n * sy2 - sy * sy
        r = cov / np.sqrt(vx * vy)
    # a (numerically) constant variable has no correlation: relative threshold against round-off
    return np.where((vx > 1e-12 * n * sx2) & (vy > 1e-12 * n * sy2), r, np.nan)


def _cos(a, b):
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((na > 0) & (nb > 0), (a * b).sum(-1) / (na * nb), np.nan)


def _closed_form_cosine(su: np.ndarray, n: float) -> np.ndarray:
    """Mean pairwise cosine over ordered pairs i != j from the sum of unit vectors (DESIGN.md)."""
    if n < 2:
        return np.full(su.shape[:-1], np.nan)
    return ((su * su).sum(-1) - n) / (n * (n - 1))


def finish(acc: dict, arch_info: dict, outlier_dims: list[int], random_dims: list[int]) -> dict:
    """The `attention` section of results.json from the sums (plain JSON-ready Python)."""
    L, H = acc["sum_entropy"].shape
    Hkv = acc["sum_k"].shape[1]
    dh = acc["sum_q"].shape[-1]
    kv_of = np.arange(H) // max(1, H // Hkv)
    D_o = len(outlier_dims)
    layers = []
    for l in range(L):
        nq, ne, nqk, P = acc["n_q"][l], acc["n_entropy"][l], acc["qk_n"][l], acc["pairs"][l]
        div = lambda s, n: (s / n) if n > 0 else np.full(np.shape(s), np.nan)  # noqa: E731
        mu_q = div(acc["sum_q"][l], nqk)  # (H, dh)
        mu_k = div(acc["sum_k"][l], nqk)  # (Hkv, dh)
        mu_kh = mu_k[kv_of]
        eq, ek = div(acc["sum_qnorm"][l], nqk), div(acc["sum_knorm"][l], nqk)
        with np.errstate(invalid="ignore", divide="ignore"):
            q_drift = np.linalg.norm(mu_q, axis=-1) / eq
            k_drift = (np.linalg.norm(mu_k, axis=-1) / ek)[kv_of]
            mean_logit = div(acc["pair_qk"][l], P) / math.sqrt(dh)
            mean_terms = ((mu_q * div(acc["pair_k"][l], P)[kv_of]).sum(-1) + (div(acc["pair_q"][l], P) * mu_kh).sum(-1)
                          - (mu_q * mu_kh).sum(-1)) / math.sqrt(dh)
            share = mean_terms / mean_logit
        r = _pearson(acc["link_n"][l][:, None, None], acc["link_a"][l][:, None, :], acc["link_a2"][l][:, None, :],
                     acc["link_s"][l][:, :, None], acc["link_s2"][l][:, :, None], acc["link_as"][l])  # (2, H, D)
        layers.append({
            "layer": l + 1,
            "n_queries": int(nq),
            "entropy": div(acc["sum_entropy"][l], ne).tolist(),
            "sink_first": div(acc["sum_first"][l], nq).tolist(),
            "sink_special": div(acc["sum_special"][l], nq).tolist(),
            "sink_special_not_first": div(acc["sum_special_nf"][l], nq).tolist(),
            "q_drift": q_drift.tolist(), "k_drift": k_drift.tolist(),
            "cos_mu_qk": _cos(mu_q, mu_kh).tolist(),
            "q_mean_cosine": _closed_form_cosine(acc["sum_qu"][l], nqk).tolist(),
            "k_mean_cosine": _closed_form_cosine(acc["sum_ku"][l], nqk)[kv_of].tolist(),
            "mean_logit": mean_logit.tolist(), "mean_term_logit": mean_terms.tolist(), "mean_term_share": share.tolist(),
            "mu_q": mu_q.tolist(), "mu_k": mu_k.tolist(),
            "link": {s: {"outlier_r": r[si, :, :D_o].tolist(), "random_r": r[si, :, D_o:].tolist(),
                         "n_keys": int(acc["link_n"][l, si])}
                     for si, s in enumerate(KEY_SETS)},
        })
    return {**arch_info, "outlier_dims": list(outlier_dims), "random_dims": list(random_dims), "layers": layers}


def layer_means(section: dict, key: str) -> list[float]:
    """Mean over heads of a per-head statistic, one value per block (NaN heads ignored)."""
    out = []
    for row in section["layers"]:
        v = np.asarray(row[key], dtype=float)
        out.append(float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"))
    return out


def head_matrix(section: dict, key: str) -> np.ndarray:
    """(L, H) array of a per-head statistic (block 1 in row 0)."""
    return np.asarray([row[key] for row in section["layers"]], dtype=float)


def link_matrix(section: dict, key_set: str = "excluded", which: str = "outlier_r") -> np.ndarray:
    """(L, H, D) Pearson r of the outlier link."""
    return np.asarray([row["link"][key_set][which] for row in section["layers"]], dtype=float)


# ----------------------------------------------------------------------------- the cached run
def link_dims(results: dict) -> list[int]:
    """The outlier dims whose link is measured: the run's persistent outliers of either definition
    (activation rule, norm-parameter rule), as for the ablation."""
    return run_outlier_dims(results["outliers"])


def attention_key(results: dict, n_random: int = CONFIG.attention_random_dims) -> str:
    """Cache key of the attention section: the run's results, the dims, the rules and the code."""
    from .spec import stable_hash

    return "attention:" + stable_hash({"run": results["manifest"]["cache_key"], **cache_identity("attention"),
                                       "dims": link_dims(results), "n_random": int(n_random),
                                       "seed": int(results["manifest"].get("seed", 0))})


def is_cached(spec, cache_dir=None) -> bool:
    """Whether the attention section of `spec` is on disk (no torch, no model; the run's results
    must be cached too)."""
    from .pipeline import analyze, get_store, resolve
    from .pipeline import is_cached as run_cached

    run = resolve(spec, cache_dir)
    if not run_cached(run, cache_dir):
        return False
    return attention_key(analyze(run, cache_dir)) in get_store(cache_dir)


def run_attention(spec, cache_dir=None, progress: Callable[[Progress], None] | None = None,
                  cancel: Callable[[], bool] | None = None, force: bool = False,
                  n_random: int = CONFIG.attention_random_dims, group=None, memo: dict | None = None) -> dict | None:
    """The `attention` section of results.json for `spec`, cached apart from the run's results
    (which are computed first if needed: the outlier dims come from them). `memo`: a dict shared
    by the checkpoints of a series (core/series.py): the corpus and its token windows are kept there.

    With a `core.distributed.Group` (torchrun), every rank runs its share of the batches, the sums
    are added up across ranks, and rank 0 alone reads and writes the cache and returns the section
    (the other ranks return None).
    """
    from .pipeline import analyze, get_store, resolve

    run = resolve(spec, cache_dir)
    spec = run.spec
    if group is not None:
        return _run_attention_group(run, cache_dir, progress, cancel, force, n_random, group)
    res = analyze(run, cache_dir, progress, cancel)
    store = get_store(cache_dir)
    key = attention_key(res, n_random)
    got = None if force else store.get_json(key)
    if got is not None:
        return {**got, "cache_hit": True}
    with store.lock(key):
        got = None if force else store.get_json(key)
        if got is not None:
            return {**got, "cache_hit": True}
        got = _attention_section(spec, res["manifest"], link_dims(res), cache_dir, progress, cancel, n_random,
                                 memo=memo)
        store.put(key, got)
    return {**got, "cache_hit": False}


def _run_attention_group(run, cache_dir, progress, cancel, force: bool, n_random: int, group) -> dict | None:
    import contextlib

    from .pipeline import analyze, get_store

    spec = run.spec
    res = analyze(run, cache_dir, progress, cancel, group=group)  # rank 0: the results; others None

    def look() -> dict:  # rank 0: what every rank needs to know (the run's manifest and dims, or a cache hit)
        key = attention_key(res, n_random)
        return {"key": key, "hit": not force and key in get_store(cache_dir), "manifest": res["manifest"],
                "dims": link_dims(res)}

    seen = group.share(look)
    if seen["hit"]:
        return run_attention(run, cache_dir, progress, cancel, n_random=n_random) if group.is_main else None
    import functools

    reduce = functools.partial(group.reduce, max_keys=MAX_KEYS)
    with contextlib.ExitStack() as stack:
        if group.is_main:
            store = get_store(cache_dir)
            stack.enter_context(store.lock(seen["key"]))
        got = group.run(lambda: _attention_section(spec, seen["manifest"], seen["dims"], cache_dir, progress, cancel,
                                                   n_random, device=group.device, shard=group.shard, reduce=reduce))
        if not group.is_main:
            return None
        got["distributed"] = {"world_size": group.world, "backend": group.backend}
        store.put(seen["key"], got)
    return {**got, "cache_hit": False}


def _attention_section(spec, m: dict, dims: list[int], cache_dir, progress, cancel, n_random: int,
                       device: str | None = None, shard=None, reduce=None, memo: dict | None = None) -> dict:
    """Compute the attention section of the run whose manifest is `m` (outlier dims `dims`)."""
    import torch

    from .analysis import json_safe
    from .errors import InputError
    from .prepare import prepare

    device, dtype = device or m["device"], m["dtype"]
    prep = prepare(spec, device=device, dtype=dtype, cache_dir=cache_dir, memo=memo,
                   corpus_sha=m["corpus"].get("sha256"), fingerprint=m["model"].get("fingerprint"), progress=progress,
                   load_message=f"loading {spec.model} for attention statistics")
    lm, docs, windows = prep.lm, prep.documents, prep.windows
    d = int(m["model"].get("hidden_size") or 0) or int(lm.info["hidden_size"])
    outl, rand = pick_dims(dims, d, n_random, spec.seed)
    try:
        sums, timing, arch = extract_attention(
            lm.base, windows, outl + rand, special_policy=spec.special_tokens, batch_size=spec.batch_size,
            device=device, dtype=dtype, pad_id=prep.pad_id, progress=progress,
            cancel=cancel, shard=shard, reduce=reduce)
    except ValueError as e:
        raise InputError(f"Attention statistics are not available for {m['model']['label']}: {e}") from None
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {device} computing attention with batch size {spec.batch_size}: "
                         f"lower it (attention probabilities take B x heads x T x T per layer).") from None
    info = {"n_blocks": len(arch.layers), "n_heads": arch.n_heads, "n_kv_heads": arch.n_kv_heads,
            "head_dim": int(sums["sum_q"].shape[-1]), "causal": bool(arch.layers[0].causal),
            "projections": "query/key projection outputs before any rotary position embedding",
            "blocks": "block l reads hidden_states[l-1] (layer 0 = embeddings) and writes hidden_states[l]",
            "link_hidden_state": "hidden_states[l-1], the residual stream block l reads",
            "run_key": m["cache_key"], **cache_identity("attention"), "timing": timing,
            "special_tokens": spec.special_tokens, "n_windows": len(windows.ids), **document_index(windows, docs)}
    return json_safe(finish(sums, info, outl, rand))


DOC_START_CHARS = 60  # how much of a document's text names it in the viewer's document list


def doc_start(text: str, n: int = DOC_START_CHARS) -> str:
    """The first `n` characters of a document, whitespace runs collapsed (a name for it in lists)."""
    s = " ".join(str(text)[:4 * n].split())
    return s if len(s) <= n else s[:n - 1].rstrip() + "…"


def document_index(windows: TokenWindows, docs: list[str]) -> dict:
    """Which document each window comes from (`window_docs`, the corpus index of each window's
    document, in window order) and, per document in corpus order, its first words (`documents`:
    {"doc", "start", "n_windows"}): the attention viewer picks a window by document with it."""
    wd = [int(d) for d in windows.doc]
    counts: dict[int, int] = {}
    for d in wd:
        counts[d] = counts.get(d, 0) + 1
    return {"window_docs": wd,
            "documents": [{"doc": d, "start": doc_start(docs[d]) if 0 <= d < len(docs) else "", "n_windows": c}
                          for d, c in sorted(counts.items())]}


# ----------------------------------------------------------------------------- one document's maps
def job_attention(params: dict, progress, cancel) -> dict:
    """The "attention" job: the attention section of one run, into the cache (the run first if needed)."""
    from . import settings
    from .pipeline import resolve, run_of

    run = resolve(run_of(params))  # carried in the job's parameters by the submitter
    nproc = settings.current().torchrun_nproc  # ANISO_TORCHRUN_NPROC: a torchrun job of K processes computes it
    if nproc > 1 and not is_cached(run):
        from .distributed import run_torchrun, spec_args

        run_torchrun(["attention", *spec_args(run.spec)], nproc, progress, cancel)  # rank 0 stores run and section
    sec = run_attention(run, progress=progress, cancel=cancel)
    return {"blocks": len(sec.get("layers", [])) if isinstance(sec, dict) else 0}


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
    from .errors import InputError
    from .pipeline import analyze, get_store, resolve
    from .prepare import prepare
    from .spec import stable_hash

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

    from .outliers import ablation_modules, zeroed_dims

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
