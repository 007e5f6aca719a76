"""The attention section from the accumulated sums (numpy only): per block and head, the entropy,
sinks, outlier link and query/key geometry; and the (L, H) / (L, H, D) arrays the views read."""

from __future__ import annotations

import math

import numpy as np

KEY_SETS = ("included", "excluded")  # special tokens among the key positions of the outlier link


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
            "alpha_first": div(acc["sum_alpha_first"][l], acc["n_windows"][l]).tolist(),
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
