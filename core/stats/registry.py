"""The statistic registry: one declaration per per-layer statistic of results.json.

Each `Statistic` says what its key is, how its kernel computes it (from the run's streaming sums at
one layer, or from the layer's token sample), which sums it reads, its kind, its definition
(one line, formula, reading, paper), whether it gets an isotropic-Gaussian baseline, the
modalities it applies to, and its figure defaults. Every surface derives from `STATISTICS`:

- results.json's per-layer rows (`layer_row`, in registry order) and the `<key>_isotropic`
  baselines (`isotropic_baseline`), the post-processing what-if (`sample_values`);
- the picker and its labels (`picker`, read by core.studies.selection.METRICS), the sample metrics the
  what-if changes (`sample_metrics_map`), Compare and Dynamics (they list the picker);
- the Numbers table and its CSV/JSON export (`table_columns`), the report zip (`report_keys`),
  bench/gpu.py's exactness lists (`report_keys(kind)`);
- the hover lines and "What is ...?" panels (`DEFINITIONS`, `docs_section`: the section of
  docs/metrics.md, or the entry's own text for a statistic without one).

A new per-layer statistic is one entry here, its kernel (core/stats/kernels.py) and its test; the
registry test (tests/unit/test_statistics.py) checks that it then appears on every surface.
Layer 0 is the embedding output. Numpy only: no torch, no streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np

from ..base.config import CONFIG
from ..base.definitions import DOCS_PATH, Definition
from ..base.definitions import docs_section as _docs_section
from . import chain_rules as C
from . import geometry as G
from . import kernels as M
from .outliers import activation_outliers

LENS_POSITIONS = 512  # core.compute.lens.LENS_POSITIONS (core.compute.lens needs torch: the registry stays numpy only)

__all__ = ["Statistic", "Figure", "STATISTICS", "BY_KEY", "DEFINITIONS", "DOCS_PATH", "Definition", "Run", "Sample",
           "layer_row", "sample_values", "isotropic_baseline", "picker", "sample_metrics_map", "table_columns",
           "report_keys", "baseline_keys", "token_id_keys", "applies", "short", "docs_section", "get", "partial_row",
           "sample_based_keys"]

KINDS = ("exact", "sample", "lens", "per-dim", "count")
SCALAR_KINDS = ("exact", "sample", "lens")  # one number per layer: pickable, plotted, in the table
TEXT = ("text",)  # statistics defined on token ids: not applicable to images, audio, feature maps


@dataclass(frozen=True)
class Figure:
    """Figure defaults of a statistic's per-layer curve."""

    log_y: bool = False
    y_range: tuple[float, float] | None = None
    estimate: str = ""  # how it is estimated, for the subtitle ('' = from the kind)


@dataclass(frozen=True)
class Statistic:
    """One per-layer value of results.json.

    kind: "exact" (streaming, over all analysed tokens), "sample" (on the K sampled positions; the
    post-processing what-if changes it), "lens" (the logit lens: read at run time with the model's own
    unembedding, on a subset of the sampled positions; null unless the run asked for it), "per-dim"
    (a list over dimensions or bins), "count".
    sums: the RunStats arrays the kernel reads ("sample" = the token sample). A statistic whose
    sums are ("sample",) has a kernel of a `Sample`; any other, of a `Layer`.
    """

    key: str
    kind: str
    kernel: Callable[[Any], Any]
    sums: tuple[str, ...]
    label: str = ""  # picker / axis label ("" for counts and per-dim lists)
    axis: str = ""  # what the y axis (or the column) shows
    definition: Definition | None = None
    baseline: bool = False  # reported beside it as `<key>_isotropic`: the value for an isotropic Gaussian
    modalities: tuple[str, ...] | None = None  # None: every modality
    adjusts: str | None = None  # an anisotropy adjustment of this statistic (X - mean cosine)
    interval: Callable[[Any], Any] | None = None  # `<key>_ci`, from a Layer
    sample_twin: str | None = None  # the same quantity on the sample: what the what-if shows for it
    table: bool = True  # a column of the Numbers table
    report: bool = True  # a curve of the report zip
    menu_last: bool = False  # listed after the others in the picker
    figure: Figure = Figure()

    @property
    def scalar(self) -> bool:
        return self.kind in SCALAR_KINDS

    @property
    def on_sample(self) -> bool:
        return self.sums == ("sample",)

    @property
    def reads_sample(self) -> bool:
        """It needs the token sample (alone or beside the sums): a partial result has none of it."""
        return "sample" in self.sums


# ----------------------------------------------------------------------------- kernel inputs
class Sample:
    """A layer's token sample X (K, d) as the sample kernels read it, with the shared decompositions."""

    def __init__(self, X: np.ndarray):
        self.raw = np.asarray(X)  # as stored (float32): |x| and its median are read from it, exactly
        self.X = np.asarray(X, dtype=np.float64)
        self.K = int(self.X.shape[0])

    @cached_property
    def scatter(self) -> np.ndarray:
        """(d, d) Xc^T Xc of the centred sample: the covariance times K - 1 (shared by the spectral statistics
        and, with the mean added back, by the matrix entropy)."""
        Xc = M.as_sample(self.X) - self.X.mean(axis=0)
        return Xc.T @ Xc

    @cached_property
    def eigvals(self) -> np.ndarray:
        """Covariance eigenvalues (descending), shared by the spectral statistics (as metrics._cov_eigvals)."""
        return np.clip(np.linalg.eigvalsh(self.scatter / (self.K - 1))[::-1], 0.0, None)

    @cached_property
    def matrix_entropy(self) -> float:
        """Matrix entropy of the uncentred sample (geometry.matrix_entropy): for d <= K its Gram X^T X is the
        scatter plus K mu mu^T (no second product of the sample)."""
        if self.X.shape[1] > self.K:
            return G.matrix_entropy(self.X)
        mu = self.X.mean(axis=0)
        return G.entropy_of_gram(self.scatter + self.K * np.outer(mu, mu))

    @cached_property
    def abs_summary(self) -> tuple[float, dict]:
        """The median of |x| over the K x d values of the sample (massive activations' reference) and how many
        values exceed 100x / 1000x it (chainstats.abs_summary: one |x| buffer, a radix select)."""
        return C.abs_summary(self.raw)

    @property
    def abs_median(self) -> float:
        return self.abs_summary[0]

    @cached_property
    def neighbours(self) -> tuple[np.ndarray, int]:
        """(distances of each distinct vector to its nearest distinct neighbours (K', 2 max(GRIDE scales)),
        the number of duplicate vectors dropped), shared by the intrinsic-dimension statistics; at most
        `geometry.ID_POSITIONS` distinct vectors are read (a seeded subset, the same for the isotropic baseline)."""
        U, dropped = G.unique_rows(self.X)
        U = U[G.cka_positions(len(U), G.ID_POSITIONS)]  # at most ID_POSITIONS of them (a seeded subset)
        return G.neighbour_distances(U, 2 * max(G.GRIDE_SCALES)), dropped

    @cached_property
    def gride_scales(self) -> list:
        """GRIDE at every scale of geometry.GRIDE_SCALES (the registered GRIDE is the one at GRIDE_N1)."""
        return G.gride_scales(self.neighbours[0])


class Run:
    """The run-wide arrays that per-layer kernels index (computed once per run, on first use)."""

    def __init__(self, stats):
        self.stats = stats
        self.a = stats.arrays
        self.n = int(self.a["n"])
        self.ids = stats.layer_ids
        self.modality = stats.manifest.get("modality", "text")

    @cached_property
    def S(self) -> np.ndarray:
        """(L+1, d) sum of u_t per layer."""
        return self.a["group_sum_u"].sum(1)

    @cached_property
    def widths(self) -> np.ndarray:
        """(L+1,) the real width of each layer (a CNN stage's channel count; the rest is zero padding)."""
        if "layer_dims" in self.a:
            return np.asarray(self.a["layer_dims"], dtype=np.int64)
        return np.full(self.stats.n_layers, self.stats.d_model, dtype=np.int64)

    @cached_property
    def mean_abs(self) -> np.ndarray:
        return self.a["sum_abs"] / self.a["n"]

    @cached_property
    def cosine_contributions(self) -> np.ndarray:
        """(L+1, d) CC_d per layer (Timkey & van Schijndel 2021); rows sum to mean_cosine."""
        return np.stack([M.cosine_contribution(self.S[l], self.a["sum_u_sq"][l], self.n) for l in range(len(self.S))])

    def sample(self, l: int) -> np.ndarray:
        """(K, d_l) the sample at layer l, without a CNN stage's zero padding."""
        return self.stats.sample(l)[:, :int(self.widths[l])]


class Layer:
    """What a kernel of the streaming sums reads at layer `l`; `values` holds the row so far."""

    def __init__(self, run: Run, l: int, values: dict):
        self.run, self.l, self.values = run, l, values
        self.a, self.n = run.a, run.n

    @cached_property
    def sample(self) -> Sample:
        return Sample(self.run.sample(self.l))


# ----------------------------------------------------------------------------- kernels
def _mean_cosine(c: Layer) -> float:
    return M.mean_cosine(c.run.S[c.l], c.n, float(c.a["sum_u_sq"][c.l].sum()))


def _mean_cosine_ci(c: Layer) -> list:
    lo, hi = M.mean_cosine_ci(c.a["group_sum_u"][c.l], c.a["group_n"], n_boot=CONFIG.bootstrap_draws,
                              seed=int(c.run.ids[c.l]), level=CONFIG.ci_level, group_u_sq=c.a["group_u_sq"][c.l])
    return [lo, hi]


def _intra(c: Layer) -> float:
    return float(c.a["intra_sum"][c.l] / c.a["intra_n"][c.l]) if c.a["intra_n"][c.l] > 0 else math.nan


def _self_similarity(c: Layer) -> float:
    a = c.a
    return (M.self_similarity(a["id_sum_u"][c.l], a["id_counts"], a["id_seq_sq"][c.l], a["id_seq_n_sq"])
            if len(a["id_counts"]) else math.nan)


def _adjusted(key: str) -> Callable[[Layer], float]:
    return lambda c: c.values[key] - c.values["mean_cosine"]


def _outlier_dims(c: Layer) -> list[int]:
    return activation_outliers(c.run.mean_abs[c.l:c.l + 1, :int(c.run.widths[c.l])])[0]


def _massive_ratio(c: Layer) -> float:
    """Top-1 max |x_d| over all analysed tokens / the median |x| of the layer's sample (Sun et al. 2024)."""
    if c.sample.K < 1:
        return math.nan
    return C.massive_layer(c.a["max_abs"][c.l, :int(c.run.widths[c.l])], c.sample.abs_median)["ratio"]


def _massive_count(factor: float) -> Callable[[Sample], int]:
    return lambda s: s.abs_summary[1][factor]


def _frequency_binned(c: Layer) -> list:
    return M.frequency_binned_cosine(c.a["bin_sum_u"][c.l], c.a["bin_n"], c.a["bin_u_sq"][c.l]).tolist()


def _lens(name: str) -> Callable[[Layer], float | None]:
    """A logit-lens value of the run's arrays (core.compute.lens), None for a run without the lens."""
    return lambda c: float(c.a[name][c.l]) if name in c.a else None


LENS_ESTIMATE = (f"on a seeded subset of up to {LENS_POSITIONS} of the sampled positions, the model's own final "
                 "norm and unembedding (opt-in: --logit-lens)")


def _spectral(f: Callable[[np.ndarray], float]) -> Callable[[Sample], float]:
    return lambda s: f(s.eigvals)


# ----------------------------------------------------------------------------- the registry
STATISTICS: tuple[Statistic, ...] = (
    Statistic("n_tokens", "count", lambda c: c.n, ("n",), axis="analysed tokens (the same in every layer)"),
    Statistic("n_sequences", "count", lambda c: int(c.a["n_seq"]), ("n_seq",), axis="sequences (windows) read",
              table=False),
    Statistic(
        "mean_cosine", "exact", _mean_cosine, ("group_sum_u", "sum_u_sq", "n"),
        "Mean cosine similarity", "mean cos(x_i, x_j), all pairs i != j",
        Definition(
            "mean of cos(x_i, x_j) over all ordered pairs i != j of analysed tokens: (||sum u||^2 - N) / (N (N - 1)), "
            "exact (Ethayarajh 2019; Godey et al. 2023)",
            r"\overline{\cos} = \frac{1}{N(N-1)}\sum_{i \ne j}\cos(x_i, x_j) = \frac{\lVert\sum_t u_t\rVert^2 - N}{N(N-1)}",
            "near 1: every token vector points the same way (anisotropic, a narrow cone)",
            "near 0: directions spread out as for random vectors (isotropic); below 0 is possible but rare",
            "Ethayarajh 2019; Godey et al. 2023 (per layer, trained vs untrained)"),
        interval=_mean_cosine_ci, sample_twin="sample_mean_cosine",
        figure=Figure(estimate="exact over all token pairs; band: 95% bootstrap CI over groups of documents")),
    Statistic(
        "centred_mean_cosine", "sample", lambda s: M.centred_mean_cosine(s.X), ("sample",),
        "Mean cosine, centred (sample)", "mean cos(x_i - mu, x_j - mu) over pairs of the token sample",
        Definition(
            "mean cos over all ordered pairs of the token sample after the sample's mean vector mu is subtracted from "
            "every token: what is left of the mean cosine once a component shared by all tokens is removed",
            r"\frac{1}{K(K-1)}\sum_{i \ne j}\cos(x_i - \mu, x_j - \mu),\quad \mu = \tfrac{1}{K}\textstyle\sum_t x_t",
            "the tokens share directions beyond their common mean (anisotropy of the spread itself)",
            "near 0 (about -1/(K-1)): the raw mean cosine is all one shared vector, e.g. a bias or token-type "
            "embedding added to every token",
            "Mu & Viswanath 2018 (the common mean removed first); a control for Godey et al. 2023's random-init models")),
    Statistic(
        "cross_sequence_cosine", "exact",
        lambda c: M.cross_sequence_cosine(c.run.S[c.l], c.n, float(c.a["sum_doc_sq"][c.l]), float(c.a["sum_doc_n_sq"])),
        ("group_sum_u", "sum_doc_sq", "sum_doc_n_sq", "n"),
        "Cross-sequence cosine", "mean cos, pairs from different documents",
        Definition(
            "mean cos over pairs of tokens from different documents (two windows of one document are one context)",
            r"\frac{\lVert\sum_t u_t\rVert^2 - \sum_D \lVert S_D\rVert^2}{N^2 - \sum_D n_D^2},\quad S_D = \sum_{t \in D} u_t",
            "tokens of different documents still align: anisotropy not explained by shared context",
            "near 0: the mean cosine comes from tokens of the same document",
            "Ethayarajh 2019 (random pairs from different contexts)")),
    Statistic(
        "intra_sentence_similarity", "exact", _intra, ("intra_sum", "intra_n"),
        "Intra-sentence similarity", "mean cos(x_t, sequence mean)",
        Definition(
            "mean over sequences of mean_t cos(x_t, mean of the sequence) (Ethayarajh 2019)",
            r"\frac{1}{|S|}\sum_{s}\frac{1}{n_s}\sum_{t \in s}\cos\big(x_t, \tfrac{1}{n_s}\textstyle\sum_{t' \in s} x_{t'}\big)",
            "tokens of one sequence share a direction (context is mixed in)",
            "tokens of a sequence stay distinct",
            "Ethayarajh 2019")),
    Statistic(
        "intra_sentence_adjusted", "exact", _adjusted("intra_sentence_similarity"), ("intra_sum", "intra_n"),
        "Intra-sentence similarity, anisotropy-adjusted", "intra-sentence similarity - mean cosine",
        Definition(
            "intra-sentence similarity - mean cosine (Ethayarajh 2019's anisotropy adjustment)",
            r"\text{intra-sentence similarity} - \overline{\cos}",
            "more similar within a sequence than any two tokens are anyway",
            "near 0: the within-sequence similarity is only the anisotropy",
            "Ethayarajh 2019 (anisotropy-adjusted)"),
        adjusts="intra_sentence_similarity", report=False),
    Statistic(
        "self_similarity", "exact", _self_similarity, ("id_sum_u", "id_counts", "id_seq_sq", "id_seq_n_sq"),
        "Self-similarity", "mean cos between occurrences of a token id in different sequences",
        Definition(
            "per tracked token id, mean cos over pairs of its occurrences in different sequences; unweighted mean over "
            "the 200 most frequent ids seen in >= 5 sequences (Ethayarajh 2019)",
            r"\frac{1}{|W|}\sum_{w \in W}\operatorname{mean}_{i \ne j\ \text{in different sequences}}\cos(x_{w,i}, x_{w,j})",
            "a token id keeps the same representation whatever its context (static)",
            "its representation changes with context (contextual)",
            "Ethayarajh 2019 (tracked ids: the 200 most frequent with at least 5 contexts)"),
        modalities=TEXT),
    Statistic(
        "self_similarity_adjusted", "exact", _adjusted("self_similarity"),
        ("id_sum_u", "id_counts", "id_seq_sq", "id_seq_n_sq"),
        "Self-similarity, anisotropy-adjusted", "self-similarity - mean cosine",
        Definition(
            "self-similarity - mean cosine (Ethayarajh 2019's anisotropy adjustment)",
            r"\text{self-similarity} - \overline{\cos}",
            "a token is more similar to itself across contexts than random tokens are to each other",
            "near 0: its self-similarity is only the anisotropy",
            "Ethayarajh 2019 (anisotropy-adjusted)"),
        modalities=TEXT, adjusts="self_similarity", report=False),
    Statistic("self_similarity_n_ids", "count", lambda c: len(c.a["id_counts"]), ("id_counts",),
              axis="token ids tracked for self-similarity", table=False),
    Statistic(
        "mean_norm", "exact", lambda c: float(c.a["sum_norm"][c.l] / c.n), ("sum_norm", "n"),
        "Mean norm", "mean ||x_t|| (hidden-state units)",
        Definition(
            "mean of ||x_t|| over analysed tokens",
            r"\frac{1}{N}\sum_t \lVert x_t\rVert",
            "large activations (often a few outlier dimensions carry them)",
            "small activations",
            "context for the outlier analyses (Kovaleva et al. 2021; Puccetti et al. 2022)")),
    Statistic(
        "token_kurtosis", "exact", lambda c: M.mean_token_kurtosis(*c.a["sum_token_kurtosis"][c.l]),
        ("sum_token_kurtosis",),
        "Token kurtosis (across dims)", "mean over tokens of the kurtosis of x_t's values (log scale)",
        Definition(
            "mean over analysed tokens of the kurtosis of each hidden state's values across its dimensions, "
            "m4 / m2^2 of x_t - mean_d x_t (Pearson: about 3 for a Gaussian vector, about d - 2 when one dimension "
            "holds it all); exact over all analysed tokens",
            r"\frac{1}{N}\sum_t \frac{\tfrac{1}{d}\sum_d (x_{t,d} - \bar x_t)^4}"
            r"{\big(\tfrac{1}{d}\sum_d (x_{t,d} - \bar x_t)^2\big)^2},\quad \bar x_t = \tfrac{1}{d}\textstyle\sum_d x_{t,d}",
            "far above 3: a few dimensions carry each token (a privileged basis: outlier or massive dimensions)",
            "about 3: each token's values spread like a Gaussian over the dimensions (no basis direction stands out)",
            "Elhage et al. 2023 (Privileged Bases in the Transformer Residual Stream); Bondarenko et al. 2021; "
            "Puccetti et al. 2022"),
        figure=Figure(log_y=True)),
    Statistic("n_sample", "count", lambda s: s.K, ("sample",), axis="sampled tokens (the same positions in every layer)"),
    Statistic(
        "sample_mean_cosine", "sample", lambda s: M.sample_mean_cosine(s.X), ("sample",),
        "Mean cosine (sample)", "mean cos over pairs of the token sample",
        Definition(
            "mean cos over all ordered pairs of the token sample (exact on the sample)",
            r"\text{mean cosine over the pairs of the token sample (K tokens)}",
            "as mean cosine, on the sample that the post-processing what-if changes",
            "as mean cosine",
            "Ethayarajh 2019"),
        report=False, menu_last=True),
    Statistic(
        "pc1_variance_ratio", "sample", _spectral(M.pc1_ratio_of_eigvals), ("sample",),
        "PC1 variance ratio", "top eigenvalue / trace of the covariance",
        Definition(
            "top eigenvalue / trace of the covariance of the centred sample",
            r"\lambda_1 / \operatorname{tr}(\Sigma)\ \text{of the sample covariance}",
            "one direction carries most of the variance",
            "variance spread over many directions (1/d for an isotropic cloud)",
            "Ethayarajh 2019; Cai et al. 2021"),
        baseline=True),
    Statistic(
        "effective_rank", "sample", _spectral(M.effective_rank_of_eigvals), ("sample",),
        "Effective rank", "exp(entropy of normalised singular values), dimensions",
        Definition(
            "exp of the entropy of the normalised singular values of the centred sample (Roy & Vetterli 2007)",
            r"\exp\Big(-\sum_i p_i \log p_i\Big),\quad p_i = \sigma_i / \textstyle\sum_j \sigma_j\ \text{(centred sample)}",
            "many dimensions in use (at most d)",
            "the cloud lives in a few dimensions",
            "Roy & Vetterli 2007"),
        baseline=True),
    Statistic(
        "isoscore", "sample", _spectral(M.isoscore_of_eigvals), ("sample",),
        "IsoScore", "IsoScore (0 = one direction, 1 = isotropic)",
        Definition(
            "IsoScore of the sample (Rudman et al. 2022): 1 = isotropic, 0 = one direction",
            r"\text{IsoScore} \in [0, 1]:\ \text{distance of the normalised PCA variances from the identity}",
            "1: isotropic (uses every dimension equally)",
            "0: all variance in one dimension",
            "Rudman et al. 2022"),
        baseline=True),
    Statistic(
        "partition_isotropy", "sample", lambda s: M.partition_isotropy_unchecked(M.as_sample(s.X)), ("sample",),
        "Partition isotropy", "min Z(c) / max Z(c) (1 = isotropic)",
        Definition(
            "min_c Z(c) / max_c Z(c), Z(c) = sum_t exp(c . w_t), c the eigenvectors of W^T W, W = sample rescaled to "
            "unit mean norm (Mu & Viswanath 2018)",
            r"\frac{\min_c Z(c)}{\max_c Z(c)},\quad Z(c) = \sum_t \exp(c^\top w_t),\ c \text{ eigenvectors of } W^\top W",
            "1: isotropic",
            "lower: a dominant direction (about 1/e for one common direction; vectors rescaled to unit mean norm)",
            "Mu & Viswanath 2018"),
        baseline=True),
    Statistic(
        "intrinsic_dim_twonn", "sample", lambda s: G.twonn(s.neighbours[0]), ("sample",),
        "Intrinsic dimension (TwoNN)", "TwoNN intrinsic dimension, dimensions",
        Definition(
            "TwoNN (Facco et al. 2017) on the distinct vectors of the sample: the slope through the origin of "
            "-log(1 - F(mu)) against log mu, mu = r2 / r1 (second / first neighbour distance), the 10% largest mu left out",
            r"-\log\big(1 - F(\mu)\big) = d \log \mu,\quad \mu_i = r_2(i) / r_1(i)",
            "the cloud fills many dimensions locally (an isotropic Gaussian of the same K and d: see the baseline)",
            "the tokens lie near a low-dimensional manifold (Valeriani et al. 2023: the minimum marks the semantic layers)",
            "Facco et al. 2017; Valeriani et al. 2023"),
        baseline=True,
        figure=Figure(estimate=f"on up to {G.ID_POSITIONS:,} distinct vectors of the sample (duplicates dropped)")),
    Statistic(
        "intrinsic_dim_gride", "sample", lambda s: s.gride_scales[G.GRIDE_SCALES.index(G.GRIDE_N1)], ("sample",),
        "Intrinsic dimension (GRIDE, 16th/8th neighbour)", "GRIDE intrinsic dimension, dimensions",
        Definition(
            f"GRIDE (Denti et al. 2022): the maximum-likelihood dimension of mu = r_{2 * G.GRIDE_N1} / r_{G.GRIDE_N1} "
            "(neighbour distances of the sample's distinct vectors): a larger scale than TwoNN, less sensitive to noise",
            r"\hat d = \arg\max_d \sum_i \log f(\mu_i \mid d),\quad \mu_i = r_{16}(i) / r_{8}(i)",
            "many dimensions at the scale of the 8th-16th neighbours",
            "a low-dimensional manifold at that scale",
            "Denti et al. 2022; Valeriani et al. 2023"),
        baseline=True,
        figure=Figure(estimate=f"on up to {G.ID_POSITIONS:,} distinct vectors of the sample (duplicates dropped), "
                               "n1 = 8, n2 = 16")),
    Statistic(
        "matrix_entropy", "sample", lambda s: s.matrix_entropy, ("sample",),
        "Matrix entropy", "entropy of the trace-normalised Gram matrix, nats",
        Definition(
            "Shannon (alpha = 1) entropy of the eigenvalues of the trace-normalised Gram matrix X X^T / tr(X X^T) "
            "of the uncentred sample (Skean et al. 2025); at most log(min(K, d))",
            r"S_1 = -\sum_i \lambda_i \log \lambda_i,\quad "
            r"\lambda_i = \operatorname{eig}\big(XX^\top / \operatorname{tr}(XX^\top)\big)",
            "the sample spreads its energy over many directions (log d for an isotropic cloud with K > d)",
            "a few directions (the common mean direction included) carry the energy; 0 for rank 1",
            "Skean et al. 2025 (Layer by Layer); Giraldo et al. 2014"),
        baseline=True),
    Statistic(
        "high_norm_share", "sample", lambda s: M.high_norm_share(s.X), ("sample",),
        "High-norm token share", "share of sampled tokens above Otsu's threshold on log ||x_t||",
        Definition(
            "share of the sampled tokens whose norm is above Otsu's threshold on that layer's log-norms: of all splits "
            "of the sorted log ||x_t|| between two distinct values, the one maximising the between-class variance "
            "w0 w1 (mu0 - mu1)^2, counted only where that split separates two groups (Otsu's effectiveness, "
            "between-class over total variance, at least 0.8; a normal gives 0.64), else 0 (zero vectors count as low)",
            r"\frac{1}{K}\big|\{t : \log\lVert x_t\rVert > \tau\}\big|,\quad \tau = \arg\max_\tau\, w_0 w_1 (\mu_0 - \mu_1)^2"
            r"\ \text{(Otsu, on the log-norms)}",
            "0: the log-norms form one group (no high-norm tokens)",
            "a few percent: a small separate group of tokens with far larger norms (high-norm tokens)",
            "Darcet et al. 2024 (Vision Transformers Need Registers); Otsu 1979")),
    Statistic(
        "massive_ratio", "exact", _massive_ratio, ("max_abs", "sample"),
        "Massive activation (top-1 / median)", "max_t,d |x_td| / median |x| (log scale)",
        Definition(
            "the largest |x_td| of the layer over all analysed tokens and dims, divided by the median of |x_td| over "
            "the K x d values of the layer's token sample (Sun et al. 2024's top-1 / median)",
            r"\frac{\max_{t,d} |x_{t,d}|}{\operatorname{median}_{t \in \text{sample},\,d} |x_{t,d}|}",
            "thousands: a massive activation (one value per sequence far above the rest, usually at the first token)",
            "tens or less: no value stands out",
            "Sun et al. 2024 (Massive Activations in Large Language Models)"),
        figure=Figure(log_y=True, estimate="top: max over all analysed tokens; median: over the K x d values of "
                                            "the layer's token sample")),
    Statistic(
        "massive_count_100x", "count", _massive_count(100.0), ("sample",),
        axis="values |x_td| of the layer's token sample above 100 x its median |x|",
        definition=Definition(
            "how many of the K x d values |x_td| of the layer's token sample exceed 100 times their median",
            r"\big|\{(t, d) : |x_{t,d}| > 100\,\operatorname{median} |x|\}\big|\ \text{(token sample)}",
            "massive activations in the sample", "none", "Sun et al. 2024")),
    Statistic(
        "massive_count_1000x", "count", _massive_count(1000.0), ("sample",),
        axis="values |x_td| of the layer's token sample above 1000 x its median |x|",
        definition=Definition(
            "how many of the K x d values |x_td| of the layer's token sample exceed 1000 times their median",
            r"\big|\{(t, d) : |x_{t,d}| > 1000\,\operatorname{median} |x|\}\big|\ \text{(token sample)}",
            "massive activations in the sample", "none", "Sun et al. 2024")),
    Statistic(
        "logit_lens_kl", "lens", _lens("lens_kl"), ("lens_kl",),
        "Logit lens: KL(final || lens)", "mean KL(final || lens_l), nats",
        Definition(
            "mean over sampled positions of KL(p_final || p_l), p_l = softmax(W_U norm(h_l)) with the model's own final "
            "norm and unembedding, p_final its output distribution (0 at the last layer)",
            r"\frac{1}{n}\sum_t \mathrm{KL}\big(p_{\text{final}}(t)\,\Vert\,\operatorname{softmax}(W_U\,"
            r"\mathrm{norm}(h_{l,t}))\big)",
            "the layer's state, read as a prediction, is far from the model's answer",
            "the layer already predicts what the model outputs",
            "nostalgebraist 2020 (logit lens); Belrose et al. 2023 (tuned lens)"),
        modalities=TEXT, figure=Figure(estimate=LENS_ESTIMATE)),
    Statistic(
        "logit_lens_entropy", "lens", _lens("lens_entropy"), ("lens_entropy",),
        "Logit lens: entropy", "mean entropy of lens_l, nats",
        Definition(
            "mean over sampled positions of the entropy of the lens distribution softmax(W_U norm(h_l)) (nats; at most "
            "log V)",
            r"\frac{1}{n}\sum_t H\big(\operatorname{softmax}(W_U\,\mathrm{norm}(h_{l,t}))\big)",
            "a flat distribution over the vocabulary: the layer commits to no token",
            "a peaked distribution: the layer already commits to a few tokens",
            "nostalgebraist 2020; Belrose et al. 2023"),
        modalities=TEXT, figure=Figure(estimate=LENS_ESTIMATE)),
    Statistic(
        "logit_lens_top1_agreement", "lens", _lens("lens_agreement"), ("lens_agreement",),
        "Logit lens: top-1 agreement", "share of positions whose lens top-1 = the output's top-1",
        Definition(
            "share of sampled positions where argmax of the lens at layer l is the model's own top-1 prediction "
            "(1 at the last layer)",
            r"\frac{1}{n}\sum_t \big[\arg\max W_U\,\mathrm{norm}(h_{l,t}) = \arg\max p_{\text{final}}(t)\big]",
            "the layer's top token is already the model's answer",
            "the answer is not yet readable at this layer",
            "nostalgebraist 2020; Belrose et al. 2023"),
        modalities=TEXT, figure=Figure(y_range=(0.0, 1.0), estimate=LENS_ESTIMATE)),
    Statistic("intrinsic_dim_duplicates", "count", lambda s: s.neighbours[1], ("sample",),
              axis="duplicate sample vectors dropped before the intrinsic dimension"),
    Statistic(
        "intrinsic_dim_gride_scales", "per-dim", lambda s: list(s.gride_scales), ("sample",),
        axis=f"GRIDE intrinsic dimension at n1 = {', '.join(map(str, G.GRIDE_SCALES))} (n2 = 2 n1)",
        definition=Definition(
            f"GRIDE at the scales n1 = {', '.join(map(str, G.GRIDE_SCALES))} with n2 = 2 n1 (n1 = 1 is TwoNN's "
            "maximum-likelihood estimate): how the dimension changes with the neighbourhood size",
            r"\hat d(n_1),\ \mu_i = r_{2 n_1}(i) / r_{n_1}(i)",
            "flat: the same dimension at every scale", "falling with the scale: noise inflates the small scales",
            "Denti et al. 2022"),
        table=False, report=False),
    Statistic(
        "outlier_dims", "per-dim", _outlier_dims, ("sum_abs", "n"), axis="activation outlier dimensions",
        definition=Definition(
            f"dims d with m_d > mean(m) + {CONFIG.outlier_sigma:g} std(m), m_d = mean_t |x_td| over that layer's dims",
            r"\{d : m_d > \bar m + 3\,\mathrm{sd}(m)\},\quad m_d = \tfrac{1}{N}\textstyle\sum_t |x_{t,d}|",
            "a few dimensions carry most of the magnitude",
            "no dimension stands out", "after Puccetti et al. 2022 (rule of this tool)"),
        report=False),
    Statistic(
        "cosine_contribution", "per-dim",
        lambda c: M.top_contributions(c.run.cosine_contributions[c.l], CONFIG.top_k_contributions),
        ("group_sum_u", "sum_u_sq", "n"), axis="top dimensions of the mean cosine, with their share",
        definition=Definition(
            "CC_d = (S_d^2 - Q_d) / (N (N - 1)), S = sum u, Q_d = sum_t u_td^2; the CC_d add up to mean_cosine",
            r"CC_d = \frac{S_d^2 - Q_d}{N(N-1)}",
            "a few dimensions make the mean cosine (rogue dimensions)",
            "the mean cosine is spread over many dimensions", "Timkey & van Schijndel 2021"),
        table=False, report=False),
    Statistic(
        "frequency_binned_cosine", "per-dim", _frequency_binned, ("bin_sum_u", "bin_n", "bin_u_sq"),
        axis="mean cosine within each token-frequency decile (1 = rarest)",
        definition=Definition(
            "mean cos among the tokens of each corpus-frequency decile (bins of equal token counts)",
            r"\overline{\cos}\ \text{within each frequency bin}",
            "frequent (or rare) tokens share a direction", "tokens of that bin spread out",
            "Gao et al. 2019; Puccetti et al. 2022"),
        modalities=TEXT, table=False, report=False),
)
BY_KEY: dict[str, Statistic] = {s.key: s for s in STATISTICS}
DEFINITIONS: dict[str, Definition] = {s.key: s.definition for s in STATISTICS if s.definition is not None}


def get(key: str) -> Statistic | None:
    return BY_KEY.get(key)


# ----------------------------------------------------------------------------- evaluation
def applies(key: str, modality: str) -> bool:
    """Whether `key` is defined for runs of `modality` (token-id statistics are text only)."""
    s = BY_KEY.get(key)
    return s is None or s.modalities is None or modality in s.modalities


def _value(s: Statistic, c: Layer) -> Any:
    if not applies(s.key, c.run.modality):
        return None
    if s.on_sample:
        if s.kind != "count" and c.sample.K < 2:  # one token: no pair, no spread ("not enough data": null)
            return math.nan
        return s.kernel(c.sample)
    return s.kernel(c)


def baseline_keys() -> list[str]:
    return [s.key for s in STATISTICS if s.baseline]


def layer_row(run: Run, l: int, isotropic: dict | None = None) -> dict:
    """results.json's object for layer position `l`: every statistic in registry order, `<key>_ci`
    after a statistic with an interval, the `<key>_isotropic` baselines after the last one that has one."""
    row: dict = {"layer": int(run.ids[l])}
    c = Layer(run, l, row)
    base = baseline_keys()
    for s in STATISTICS:
        row[s.key] = _value(s, c)
        if s.interval is not None:
            row[f"{s.key}_ci"] = s.interval(c)
        if base and s.key == base[-1]:
            row.update({f"{k}_isotropic": (isotropic or {}).get(k) for k in base})
    return row


def partial_row(run: Run, l: int) -> dict:
    """`layer_row` of a run still computing (sums over the batches processed so far, no sample): every
    statistic of the streaming sums with its interval; those of the token sample are None (the sample
    fills in corpus order, so the part filled so far is not a sample of the tokens read)."""
    row: dict = {"layer": int(run.ids[l])}
    c = Layer(run, l, row)
    for s in STATISTICS:
        row[s.key] = None if s.reads_sample else _value(s, c)
        if s.interval is not None:
            row[f"{s.key}_ci"] = s.interval(c)
    return row


def sample_based_keys() -> list[str]:
    """The per-layer scalars computed on the token sample: a partial result has none of them."""
    return [s.key for s in STATISTICS if s.reads_sample and s.scalar]


def sample_values(X: np.ndarray) -> dict:
    """Every statistic of the sample X (K, d) (the post-processing what-if: X is post-processed)."""
    smp = Sample(X)
    return {s.key: (math.nan if s.kind != "count" and smp.K < 2 else s.kernel(smp)) for s in STATISTICS if s.on_sample}


def isotropic_baseline(K: int, d: int, seed: int = 0) -> dict:
    """The baseline statistics of an isotropic Gaussian sample of the same size K and width d.

    Finite samples are biased: an isotropic Gaussian of K = 5000 scores IsoScore 0.87 at d = 768
    and lower as d grows, so a model's value is read against this baseline (`<key>_isotropic`).
    Seeded, so the same (K, d, seed) gives the same numbers.

    >>> b = isotropic_baseline(2000, 8)
    >>> 0.9 < b["isoscore"] <= 1.0 and 7.5 < b["effective_rank"] <= 8.0
    True
    """
    K, d = M.as_count(K, "K"), M.as_count(d, "d")
    if K < 2 or d < 1:
        raise ValueError(f"need K >= 2 and d >= 1, got K={K}, d={d}")
    smp = Sample(np.random.default_rng(seed).standard_normal((K, d)))
    return {s.key: s.kernel(smp) for s in STATISTICS if s.baseline}


# ----------------------------------------------------------------------------- surfaces
def picker() -> dict[str, tuple[str, str]]:
    """Per-layer scalars in menu order: key -> (label, what the y axis shows)."""
    scal = [s for s in STATISTICS if s.scalar]
    return {s.key: (s.label, s.axis) for s in [s for s in scal if not s.menu_last] + [s for s in scal if s.menu_last]}


def sample_metrics_map() -> dict[str, str]:
    """Picker key -> key of the post-processed sample rows: the sample statistics, and each exact
    statistic that has a sample twin (mean cosine -> its value on the sample)."""
    out = {s.key: s.key for s in STATISTICS if s.scalar and s.kind == "sample"}
    out.update({s.key: s.sample_twin for s in STATISTICS if s.sample_twin})
    return out


def table_columns() -> list[str]:
    """The Numbers table's per-layer columns: scalars (and `<key>_ci`), isotropic baselines, counts,
    per-dimension lists, each group in registry order."""
    cols: list[str] = []
    for s in STATISTICS:
        if s.scalar and s.table:
            cols += [s.key] + ([f"{s.key}_ci"] if s.interval is not None else [])
    cols += [f"{k}_isotropic" for k in baseline_keys()]
    cols += [s.key for s in STATISTICS if s.kind == "count" and s.table]
    cols += [s.key for s in STATISTICS if s.kind == "per-dim" and s.table]
    return cols


def report_keys(kind: str | None = None) -> list[str]:
    """The per-layer curves of the report zip (optionally of one kind): scalars that are not an
    adjustment or a sample twin."""
    return [s.key for s in STATISTICS if s.scalar and s.report and (kind is None or s.kind == kind)]


def token_id_keys() -> list[str]:
    """The statistics defined on token ids (their own, not their anisotropy adjustments)."""
    return [s.key for s in STATISTICS if s.modalities == TEXT and s.adjusts is None]


def short(key: str) -> str:
    """The one-line definition of `key` ('' for a key without one)."""
    d = DEFINITIONS.get(key)
    return d.short if d is not None else ""


def estimate(key: str, sample_sizes: str) -> str:
    """How `key` is estimated, for subtitles and captions."""
    s = BY_KEY[key]
    if s.figure.estimate:
        return s.figure.estimate
    return f"on a sample of {sample_sizes} per layer" if s.kind == "sample" else "over all analysed tokens"


def docs_section(key: str) -> str | None:
    """The section of docs/metrics.md about `key`; for a statistic without one, its entry's text."""
    got = _docs_section(key)
    s = BY_KEY.get(key)
    if got or s is None or s.definition is None:
        return got
    d = s.definition
    sums = ", ".join(f"`{a}`" for a in s.sums)
    return (f"### `{key}`\n\n{d.short}. Kind: {s.kind}; reads {sums}"
            + (f"; {', '.join(s.modalities)} only" if s.modalities else "") + ".\n\n"
            f"- High: {d.high}.\n- Low: {d.low}.\n- Paper: {d.paper}.")
