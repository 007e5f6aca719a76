"""Results from statistics: the per-layer metrics, outliers and frequency link (results.json).

Everything here is derived from a RunStats (streaming sums + the sample): cheap, numpy only,
and cached by the pipeline under the run's key.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..base.config import CONFIG, cache_identity
from . import chain_rules as C
from . import kernels as M
from . import outliers as O
from . import registry as S
from . import single_dim as D
from .chain_summary import massive_section
from .geometry import cka_section
from .postprocess import PostProcess


def json_safe(obj):
    """Replace NaN/inf by None and numpy scalars by Python ones, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def mean_abs(stats) -> np.ndarray:
    """(L+1, d) mean |x_d| per layer over all analysed tokens."""
    return S.Run(stats).mean_abs


def cosine_contributions(stats) -> np.ndarray:
    """(L+1, d) CC_d per layer (Timkey & van Schijndel 2021); rows sum to mean_cosine."""
    return S.Run(stats).cosine_contributions


def frequency_r(stats) -> np.ndarray:
    """(L+1, d) Pearson r between log corpus frequency of the token and |x_d|, over all tokens."""
    a = stats.arrays
    return np.stack([M.pearson_from_sums(a["n"], a["sum_f"], a["sum_f2"], a["sum_abs"][l], a["sum_abs2"][l],
                                         a["sum_f_abs"][l]) for l in range(stats.n_layers)])


def sample_metrics(X: np.ndarray, post: PostProcess | None = None) -> dict:
    """Every sample-based statistic of one layer (core.stats.registry), after an optional post-processing what-if."""
    if post is not None and not post.is_identity:
        X = post.apply(X)
    return S.sample_values(X)


def not_applicable_keys() -> list[str]:
    """What results.json lists as not applicable without token ids: the token-id scalars, the
    frequency link, the token-id per-dimension statistics."""
    keys = S.token_id_keys()
    return ([k for k in keys if S.BY_KEY[k].scalar] + ["frequency_correlation"]
            + [k for k in keys if not S.BY_KEY[k].scalar])


def has_token_ids(stats) -> bool:
    return stats.manifest.get("modality", "text") == "text"


def layer_sample(stats, layer: int) -> np.ndarray:
    """(K, d_l) the sample at `layer`, without a CNN stage's zero padding."""
    return S.Run(stats).sample(layer)


def layer_rows(stats, isotropic: dict | None = None, step: Callable[[int, int], None] | None = None) -> list[dict]:
    """The per-layer statistics of core.stats.registry over the whole analysed corpus (streaming) and the sample.

    `isotropic`: the baseline statistics of an isotropic Gaussian of the same K and d
    (`statistics.isotropic_baseline`), reported beside each as `<metric>_isotropic`.
    `step(l, n)`: called before each layer (the job's progress and its Cancel: it may raise Cancelled).
    """
    run = S.Run(stats)
    rows = []
    for l in range(stats.n_layers):
        if step is not None:
            step(l, stats.n_layers)
        rows.append(S.layer_row(run, l, isotropic))
    return rows


def _relabel(rows: list[dict], ids: np.ndarray) -> list[dict]:
    """Row position -> model layer in dicts with a "layer" (a run that kept a subset of layers)."""
    return [{**r, "layer": int(ids[r["layer"]])} for r in rows]


def _agreement(act: list[list[int]], norm_union: list[list[int]], offset: int, ids: np.ndarray) -> list[dict]:
    """Norm vs activation outliers, per block whose hidden layer the run kept."""
    by_layer: list = [None] * (int(ids.max()) + 1)
    for l, i in enumerate(ids):
        by_layer[int(i)] = act[l]
    got = O.agreement([a or [] for a in by_layer], norm_union, layer_offset=offset)
    return [g for g in got if by_layer[g["layer"]] is not None]


def outlier_report(stats, rows: list[dict]) -> dict:
    """Both outlier definitions side by side, their agreement, and massive activations."""
    a = stats.arrays
    act = [r["outlier_dims"] for r in rows]
    med = np.asarray([C.abs_median(C.abs_values(layer_sample(stats, l))) for l in range(stats.n_layers)])
    out = {
        "activation": {"rule": f"mean_t |x_td| > mean(m) + {CONFIG.outlier_sigma:g} std(m) per layer; persistent in "
                               f">= {CONFIG.activation_persistence:.0%} of layers",
                       "per_layer": act, "persistent": O.persistent_activation_outliers(act)},
        "massive_activations": [
            {**m, **{k: v for k, v in where.items() if k not in ("layer", "median", "ratio")}}
            for m, where in zip(_relabel(O.massive_activations(a["max_abs"], med), stats.layer_ids),
                                massive_section(stats, medians=med))],
    }
    if "norm_weight" in a:
        norm = O.norm_param_outliers(a["norm_weight"], a.get("norm_bias"))
        offset = int(stats.meta.get("norm_layer_offset", 1))
        out["norm_parameters"] = {
            "rule": f"norm weight (and bias) > {CONFIG.outlier_sigma:g} std from that vector's mean; persistent in "
                    f"> {CONFIG.norm_persistence_blocks} blocks",
            "modules": stats.meta.get("norm_modules", []), "kind": stats.meta.get("norm_kind"),
            "placement": stats.meta.get("norm_placement"), "layer_offset": offset, **norm}
        out["agreement"] = _agreement(act, norm["union"], offset, stats.layer_ids)
    else:
        out["norm_parameters"] = {"error": stats.meta.get("norm_error", "no norm modules found")}
        out["agreement"] = []
    return out


def frequency_report(stats, outliers: dict, seed: int = 0) -> dict:
    if not has_token_ids(stats):
        return {"not_applicable": f"{stats.manifest.get('modality')} inputs have no token ids, so no token "
                                  "frequency: the frequency link is defined for text only"}
    rep = O.frequency_correlation(frequency_r(stats), O.run_outlier_dims(outliers), seed=seed)
    rep["layers"] = _relabel(rep["layers"], stats.layer_ids)
    rep["variable"] = "Pearson r between log corpus frequency of the token and |x_d|, over all analysed tokens"
    rep["special_tokens"] = stats.manifest["tokens"]["special_tokens"]
    a = stats.arrays
    if a["sample"].shape[1] >= 3:  # the position confound, on the token sample (core.stats.single_dim)
        special = stats.meta.get("sample_special")
        pos = D.position_report(a["sample"], np.log(np.maximum(a["sample_freq"], 1)), a["sample_position"],
                                None if special is None else np.asarray(special, dtype=bool), rep["outlier_dims"])
        pos["layers"] = _relabel(pos["layers"], stats.layer_ids)
        rep["position"] = pos
    return rep


def isotropic_baseline(stats) -> dict:
    """The isotropic Gaussian baseline of this run's sample size and width (seeded by the config)."""
    K = int(stats.arrays["sample"].shape[1])
    return S.isotropic_baseline(K, stats.d_model, CONFIG.isotropic_seed) if K >= 2 else {}


def lens_section(stats) -> dict:
    """results.json's `logit_lens`: how the per-layer lens values were computed and the most frequent lens
    top-1 tokens per layer, or `not_applicable` with the reason (no LM head, not text, not asked for)."""
    got = stats.meta.get("logit_lens")
    if got and not got.get("not_applicable"):
        return {"estimator": "logit lens: the model's own final norm and unembedding on each hidden state "
                             "(nostalgebraist 2020); KL(final || lens) and entropy in nats",
                "layers": [int(x) for x in stats.layer_ids], **got}
    if got:
        return {"not_applicable": got["not_applicable"]}
    model = stats.manifest.get("model", {})
    if not has_token_ids(stats):
        why = f"{stats.manifest.get('modality')} encoders have no vocabulary to read hidden states into"
    elif not model.get("causal_lm"):
        why = f"{model.get('label', 'this model')} has no LM head (the lens needs a causal LM's own unembedding)"
    else:
        why = ("not computed for this run: the lens is opt-in (`--logit-lens`, or Logit lens under the sidebar's "
               "Advanced options), since it costs more than 10% of a run")
    return {"not_applicable": why}


def build_results(stats, isotropic: dict | None = None, step: Callable[[int, int], None] | None = None) -> dict:
    """results.json: manifest + one object per layer + outliers + frequency (strict JSON).

    `isotropic`: `isotropic_baseline(stats)` when the caller has it cached; computed otherwise.
    `step(i, n)`: called before each layer's metrics and before each section after them (n = layers + 3):
    a job's progress through the per-layer metrics, and where its Cancel is honoured (it raises Cancelled).
    """
    if isotropic is None:
        isotropic = isotropic_baseline(stats)
    n = stats.n_layers + 3
    say = step or (lambda i, n: None)
    rows = layer_rows(stats, isotropic, step=lambda l, _n: say(l, n))
    say(stats.n_layers, n)
    outl = outlier_report(stats, rows)
    say(stats.n_layers + 1, n)
    freq = frequency_report(stats, outl, seed=int(stats.manifest.get("seed", 0)))
    say(stats.n_layers + 2, n)
    return json_safe({
        "manifest": {**stats.manifest, "analysis": {"config": CONFIG.to_dict(), **cache_identity("results")},
                     "cache_key": stats.key},
        "layers": rows,
        "outliers": outl,
        "frequency": freq,
        "cka": cka_section(stats),
        "logit_lens": lens_section(stats),
        "not_applicable": ([] if has_token_ids(stats) else not_applicable_keys()),
        "frequency_bins": {"rule": f"token types sorted by corpus frequency, cut at each 1/{CONFIG.freq_bins} of the "
                                   "tokens",
                           "log_freq_range": stats.arrays["bin_edges"].tolist(),
                           "n_tokens": stats.arrays["bin_n"].tolist()},
    })


def partial_results(stats, total_tokens: int) -> dict:
    """The results of a run still computing, from the sums over the batches processed so far (`stats`: a
    RunStats whose arrays are `core.compute.extract.partial_arrays`, whose manifest is the run's so far).

    The shape of results.json where the sums give an answer: the per-layer exact statistics with their
    bootstrap intervals, the activation outliers; None for every statistic of the token sample (IsoScore,
    effective rank, projections, intrinsic dimension, CKA wait for the sample to fill). `partial` says
    how far the run is. Never cached: the final results replace it.
    """
    run = S.Run(stats)
    rows = [S.partial_row(run, l) for l in range(stats.n_layers)]
    act = [r["outlier_dims"] for r in rows]
    n = int(stats.arrays["n"])
    manifest = {**stats.manifest, "cache_key": stats.key}
    manifest["tokens"] = {**manifest.get("tokens", {}), "analysed": n, "sample": 0}
    return json_safe({
        "manifest": manifest,
        "layers": rows,
        "outliers": {"activation": {"rule": f"mean_t |x_td| > mean(m) + {CONFIG.outlier_sigma:g} std(m) per layer; "
                                            f"persistent in >= {CONFIG.activation_persistence:.0%} of layers",
                                    "per_layer": act, "persistent": O.persistent_activation_outliers(act)},
                     "massive_activations": [], "norm_parameters": {"error": "computed when the run ends"},
                     "agreement": []},
        "not_applicable": ([] if has_token_ids(stats) else not_applicable_keys()),
        "partial": {"tokens": n, "total_tokens": int(total_tokens), "sample_metrics": S.sample_based_keys()},
    })


def postprocessed_rows(stats, post: PostProcess) -> list[dict]:
    """Sample-based metrics of every layer after `post` (the before/after what-if)."""
    return json_safe([{"layer": int(stats.layer_ids[l]), "post": post.label(),
                        **sample_metrics(layer_sample(stats, l), post)}
                      for l in range(stats.n_layers)])
