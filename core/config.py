"""The one configuration of every analysis rule, and the code version of what computes results.

Every number that decides what a result *means* (a sigma, a persistence threshold, how many
contexts a token needs, how many bootstrap draws, how many dims are "top") lives in
`AnalysisConfig`. It is frozen, and its hash is part of the cache keys of statistics and results
(`cache_identity`), together with a hash of the source of the modules that compute them
(`code_version`): changing a rule or the code recomputes instead of serving stale numbers. There
is no hand-bumped version number.

    >>> CONFIG.outlier_sigma
    3.0
    >>> AnalysisConfig(top_k_contributions=5).top_k_contributions
    5
    >>> len(config_hash()) == 16
    True
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
from dataclasses import dataclass

# Modules whose code determines the streaming statistics (the extraction) ...
STATS_MODULES = ("core.extract", "core.batching", "core.corpora", "core.config", "core.modalities.adapters",
                 "core.modalities.items", "core.modalities.run", "core.convert.dinov2", "core.convert.whisper",
                 "core.convert.mobilenet", "core.convert.ct2")
# ... and those that turn statistics into results (results.json, what-ifs, baselines).
RESULTS_MODULES = ("core.analysis", "core.statistics", "core.metrics", "core.outliers", "core.chainstats", "core.ablation",
                   "core.anatomy", "core.postprocess",
                   "core.config", "core.dimension", "core.geometry")
# ... the attention statistics (their own pass over the corpus) and the controlled drift experiment.
ATTENTION_MODULES = ("core.anatomy", "core.attention.arch", "core.attention.stats", "core.attention.summary",
                     "core.attention.run", "core.attention.viewer", "core.batching", "core.corpora", "core.config")
DRIFT_MODULES = ("core.drift", "core.config")


@dataclass(frozen=True)
class AnalysisConfig:
    """Every analysis rule of the workbench, in one place (DESIGN.md "Definitions")."""

    # Outlier dimensions: activation rule (m_d > mean(m) + sigma std(m)) and Puccetti et al.'s
    # norm-parameter rule (|w_d - mean(w)| > sigma std(w)).
    outlier_sigma: float = 3.0
    activation_persistence: float = 0.25  # persistent when flagged in >= 25% of the layers
    norm_persistence_blocks: int = 3  # Puccetti et al.: persistent when flagged in MORE than 3 blocks
    massive_top: int = 5  # dims reported per layer in the massive-activations table
    # Self-similarity (Ethayarajh 2019): the most frequent ids among those seen in enough contexts.
    self_sim_ids: int = 200
    min_contexts: int = 5  # distinct sequences a token id must occur in to be tracked
    # Bootstrap CI of mean_cosine: documents are dealt into groups; groups are resampled.
    bootstrap_groups: int = 64
    bootstrap_draws: int = 1000
    ci_level: float = 0.95
    # Cosine contributions (Timkey & van Schijndel 2021): dims reported, ranked by |CC_d|.
    top_k_contributions: int = 20
    # Frequency analysis (Puccetti et al. 2022): equal-token frequency bins; random baseline dims.
    freq_bins: int = 10
    frequency_random_dims: int = 10
    # Ablation: random draws of as many dims, held-out text, its window length and batch size.
    ablation_random_draws: int = 5
    ablation_held_out_tokens: int = 4096
    ablation_max_seq_len: int = 256
    ablation_batch_size: int = 16
    # Pairwise-cosine histogram of the sample.
    hist_bins: int = 100
    hist_max_pairs: int = 2_000_000
    # Isotropic Gaussian baselines of the sample metrics (same K and d): their seed.
    isotropic_seed: int = 12345
    # Attention (Puccetti et al.'s outlier link): random non-outlier dims of the baseline; positions
    # of the single-window attention viewer (the first ones of the window).
    attention_random_dims: int = 10
    attention_viewer_tokens: int = 64

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CONFIG = AnalysisConfig()


def _stable_hash(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def config_hash(cfg: AnalysisConfig = CONFIG) -> str:
    """16 hex digits identifying the rules of `cfg`."""
    return _stable_hash(cfg.to_dict())[:16]


@functools.lru_cache(maxsize=None)
def code_version(modules: tuple[str, ...]) -> str:
    """16 hex digits of the sha256 of the source files of `modules` (read, not imported: a cache
    hit never imports torch). Any edit to them changes every key built on it."""
    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            raise RuntimeError(f"cannot find the source of {name}")
        h.update(name.encode())
        with open(spec.origin, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def cache_identity(kind: str, cfg: AnalysisConfig = CONFIG) -> dict:
    """What a cache key of `kind` ("stats", "results", "attention" or "drift") must include beyond
    the run's spec."""
    modules = {"stats": STATS_MODULES, "attention": ATTENTION_MODULES, "drift": DRIFT_MODULES}.get(kind, RESULTS_MODULES)
    return {"config": config_hash(cfg), "code": code_version(modules)}
