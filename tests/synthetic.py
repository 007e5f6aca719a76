"""A synthetic RunStats (numpy only) with the layout core.compute.extract produces, for view/figure tests.

Hidden states: isotropic Gaussian plus a shared offset that grows with depth (anisotropy rises
with the layer) and one planted outlier dimension whose magnitude tracks log token frequency.
"""

from __future__ import annotations

import numpy as np

from core.base.config import CONFIG
from core.compute.pipeline import RunStats
from core.stats.sums import SUMS, Tokens, check_layout

N_FREQ_BINS = CONFIG.freq_bins
N_GROUPS = CONFIG.bootstrap_groups


def synthetic_stats(n_layers: int = 5, d: int = 24, n_seq: int = 30, seq_len: int = 20, K: int = 300,
                    outlier: int = 5, seed: int = 0, label: str = "synthetic-net", with_norms: bool = True,
                    lens: bool = True) -> RunStats:
    rng = np.random.default_rng(seed)
    N = n_seq * seq_len
    ids = (rng.zipf(1.6, size=N) % 60).astype(np.int64)
    seq = np.repeat(np.arange(n_seq), seq_len)
    uniq, cnt = np.unique(ids, return_counts=True)
    freq_lut = np.zeros(ids.max() + 1)
    freq_lut[uniq] = cnt
    logf = np.log(np.maximum(freq_lut[ids], 1))
    bins = np.minimum((np.argsort(np.argsort(logf, kind="stable"), kind="stable") * N_FREQ_BINS) // N,
                      N_FREQ_BINS - 1)
    edges = np.asarray([[logf[bins == k].min(), logf[bins == k].max()] if (bins == k).any() else [np.nan, np.nan]
                        for k in range(N_FREQ_BINS)])
    tracked = np.asarray([k for k, c in sorted(zip(uniq, cnt), key=lambda kv: -kv[1]) if c >= 5][:20])
    group_of = rng.integers(0, N_GROUPS, size=n_seq)
    sample_idx = np.sort(rng.choice(N, size=K, replace=False))
    common = rng.normal(size=d)
    L1 = n_layers
    # The layout reads core.stats.sums: every forward sum of the declaration, from a naive formula here or, for a sum
    # declared with an `add`, from that function on the whole layer (numpy); `check_layout` below checks the shapes.
    forward = [s for s in SUMS if s.source == "forward" and not s.transient]
    acc: dict[str, list] = {s.name: [] for s in forward}
    sample = np.zeros((L1, K, d), dtype=np.float32)
    for l in range(L1):
        X = rng.normal(size=(N, d)) + 0.6 * l * common
        X[:, outlier] += (4.0 + l) * (1 + logf)  # a frequency-driven outlier dimension
        norm = np.linalg.norm(X, axis=1, keepdims=True)
        u = X / norm
        ax = np.abs(X)
        S = np.stack([u[seq == s].sum(0) for s in range(n_seq)])  # one window per document here
        M = np.stack([X[seq == s].mean(0) for s in range(n_seq)])
        M = M / np.linalg.norm(M, axis=1, keepdims=True)
        cos_t = (u * M[seq]).sum(1)
        naive = {
            "group_sum_u": lambda: np.stack([u[group_of[seq] == g].sum(0) for g in range(N_GROUPS)]),
            "group_u_sq": lambda: np.bincount(group_of[seq], minlength=N_GROUPS).astype(np.float64),
            "sum_u_sq": lambda: (u * u).sum(0),
            "sum_doc_sq": lambda: (S * S).sum(),
            "sum_norm": lambda: norm.sum(),
            "sum_x": lambda: X.sum(0),
            "sum_abs": lambda: ax.sum(0),
            "sum_abs2": lambda: (ax * ax).sum(0),
            "max_abs": lambda: ax.max(0),
            "sum_f_abs": lambda: logf @ ax,
            "intra_sum": lambda: sum(cos_t[seq == s].mean() for s in range(n_seq)),
            "intra_n": lambda: float(n_seq),
            "id_sum_u": lambda: np.stack([u[ids == t].sum(0) for t in tracked]),
            "id_seq_sq": lambda: np.asarray([sum(float(np.sum(u[(ids == t) & (seq == s_)].sum(0) ** 2))
                                                 for s_ in range(n_seq)) for t in tracked]),
            "bin_sum_u": lambda: np.stack([u[bins == b].sum(0) for b in range(N_FREQ_BINS)]),
            "bin_u_sq": lambda: np.bincount(bins, minlength=N_FREQ_BINS).astype(np.float64),
        }
        tok = Tokens(X, norm[:, 0], np.ones(N, dtype=bool), d)
        for s in forward:
            if s.add is None and s.name not in naive:
                raise KeyError(f"core.stats.sums declares {s.name!r}: give it a naive formula here (or an `add` there)")
            acc[s.name].append(s.add(tok) if s.add is not None else naive[s.name]())
        sample[l] = X[sample_idx]
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in acc.items()}
    arrays.update(
        n=np.float64(N), n_seq=np.float64(n_seq),
        sum_doc_n_sq=np.float64(n_seq * seq_len ** 2),
        group_n=np.bincount(group_of[seq], minlength=N_GROUPS).astype(np.float64),
        sum_f=np.float64(logf.sum()), sum_f2=np.float64((logf ** 2).sum()),
        id_counts=freq_lut[tracked].astype(np.float64), id_list=tracked,
        id_seq_n_sq=np.asarray([float(sum(np.sum((ids == t) & (seq == s_)) ** 2 for s_ in range(n_seq)))
                                for t in tracked]),
        bin_n=np.bincount(bins, minlength=N_FREQ_BINS).astype(np.float64), bin_edges=edges, sample=sample,
        sample_token_id=ids[sample_idx], sample_window=seq[sample_idx], sample_position=sample_idx % seq_len,
        sample_doc=seq[sample_idx], sample_freq=freq_lut[ids[sample_idx]],
    )
    check_layout(arrays, {"L": L1, "d": d, "G": N_GROUPS, "I": len(tracked), "F": N_FREQ_BINS}, positions=False)
    meta = {"sample_tokens": [f"tok{t}" for t in ids[sample_idx]],
            "sample_context": [f"ctx before [tok{t}] after" for t in ids[sample_idx]]}
    if with_norms:
        w = 1 + 0.05 * rng.normal(size=(L1 - 1, d))
        w[:, outlier] = 3.0  # the planted dim is also a norm-parameter outlier in every block
        arrays["norm_weight"] = w
        arrays["norm_bias"] = 0.05 * rng.normal(size=(L1 - 1, d))
        meta.update(norm_modules=[f"block.{b}.norm" for b in range(L1 - 1)], norm_kind="LayerNorm",
                    norm_placement="post", norm_layer_offset=1)
    else:
        meta.update(norm_modules=[], norm_error="no norm modules found")
    if lens:  # a logit lens that reaches the output at the last layer (KL 0, agreement 1)
        depth = np.arange(L1) / (L1 - 1)
        arrays.update(lens_kl=3.0 * (1 - depth) ** 2, lens_entropy=6.0 - 4.0 * depth, lens_agreement=depth ** 2)
        meta["logit_lens"] = {"n_positions": min(K, 512), "sample_size": K, "positions": f"all {K} sampled positions",
                              "top_tokens": [[{"token_id": t, "text": f"tok{t}", "count": 10 - t} for t in range(3)]
                                             for _ in range(L1)]}
    manifest = {
        "spec": {"model": label, "corpus": "synthetic", "max_tokens": N, "sample": K, "seed": seed},
        "model": {"id": label, "label": label, "hidden_size": d, "n_layers": L1 - 1, "causal_lm": False,
                  "trained": True, "note": "", "fingerprint": "f" * 32, "n_params": 0},
        "corpus": {"id": "synthetic", "sha256": "0" * 64, "text_column": None, "n_documents": n_seq,
                   "n_windows": n_seq},
        "tokens": {"analysed": N, "fed_to_model": N, "content": N, "sample": K, "special_tokens": "exclude"},
        "layers": {"n": L1, "layer_0": "embedding output (hidden_states[0])"},
        "device": "cpu", "dtype": "float32", "seed": seed, "versions": {}, "timing": {},
        "created_utc": "2026-01-01T00:00:00+00:00",
    }
    return RunStats(key=f"stats:synthetic-{label}-{seed}", manifest=manifest, meta=meta, arrays=arrays)


def synthetic_run(**kw) -> tuple[RunStats, dict]:
    """(stats, results) with results built by the real core.stats.assemble.build_results."""
    from core.stats.assemble import build_results

    st = synthetic_stats(**kw)
    return st, build_results(st)
