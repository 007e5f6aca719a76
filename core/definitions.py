"""What each metric means: the one-line definition (hovers, tables), the formula, how to read high
and low values, the paper. The one place for these texts: the figures (core.views) and the app's
"What is ...?" panels read them here.

The exact definitions (estimators, edge cases) are in docs/metrics.md; these short texts follow
it and the app links there. Layer l; tokens t in the analysed set T, N = |T|, u_t = x_t / ||x_t||.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCS_PATH = "docs/metrics.md"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Definition:
    short: str  # one line of plain text: the exact definition, for hovers and tables
    formula: str  # LaTeX (st.latex)
    high: str
    low: str
    paper: str


DEFINITIONS: dict[str, Definition] = {
    "mean_cosine": Definition(
        "mean of cos(x_i, x_j) over all ordered pairs i != j of analysed tokens: (||sum u||^2 - N) / (N (N - 1)), "
        "exact (Ethayarajh 2019; Godey et al. 2023)",
        r"\overline{\cos} = \frac{1}{N(N-1)}\sum_{i \ne j}\cos(x_i, x_j) = \frac{\lVert\sum_t u_t\rVert^2 - N}{N(N-1)}",
        "near 1: every token vector points the same way (anisotropic, a narrow cone)",
        "near 0: directions spread out as for random vectors (isotropic); below 0 is possible but rare",
        "Ethayarajh 2019; Godey et al. 2023 (per layer, trained vs untrained)"),
    "cross_sequence_cosine": Definition(
        "mean cos over pairs of tokens from different documents (two windows of one document are one context)",
        r"\frac{\lVert\sum_t u_t\rVert^2 - \sum_D \lVert S_D\rVert^2}{N^2 - \sum_D n_D^2},\quad S_D = \sum_{t \in D} u_t",
        "tokens of different documents still align: anisotropy not explained by shared context",
        "near 0: the mean cosine comes from tokens of the same document",
        "Ethayarajh 2019 (random pairs from different contexts)"),
    "intra_sentence_similarity": Definition(
        "mean over sequences of mean_t cos(x_t, mean of the sequence) (Ethayarajh 2019)",
        r"\frac{1}{|S|}\sum_{s}\frac{1}{n_s}\sum_{t \in s}\cos\big(x_t, \tfrac{1}{n_s}\textstyle\sum_{t' \in s} x_{t'}\big)",
        "tokens of one sequence share a direction (context is mixed in)",
        "tokens of a sequence stay distinct",
        "Ethayarajh 2019"),
    "intra_sentence_adjusted": Definition(
        "intra-sentence similarity - mean cosine (Ethayarajh 2019's anisotropy adjustment)",
        r"\text{intra-sentence similarity} - \overline{\cos}",
        "more similar within a sequence than any two tokens are anyway",
        "near 0: the within-sequence similarity is only the anisotropy",
        "Ethayarajh 2019 (anisotropy-adjusted)"),
    "self_similarity": Definition(
        "per tracked token id, mean cos over pairs of its occurrences in different sequences; unweighted mean over the "
        "200 most frequent ids seen in >= 5 sequences (Ethayarajh 2019)",
        r"\frac{1}{|W|}\sum_{w \in W}\operatorname{mean}_{i \ne j\ \text{in different sequences}}\cos(x_{w,i}, x_{w,j})",
        "a token id keeps the same representation whatever its context (static)",
        "its representation changes with context (contextual)",
        "Ethayarajh 2019 (tracked ids: the 200 most frequent with at least 5 contexts)"),
    "self_similarity_adjusted": Definition(
        "self-similarity - mean cosine (Ethayarajh 2019's anisotropy adjustment)",
        r"\text{self-similarity} - \overline{\cos}",
        "a token is more similar to itself across contexts than random tokens are to each other",
        "near 0: its self-similarity is only the anisotropy",
        "Ethayarajh 2019 (anisotropy-adjusted)"),
    "mean_norm": Definition(
        "mean of ||x_t|| over analysed tokens",
        r"\frac{1}{N}\sum_t \lVert x_t\rVert",
        "large activations (often a few outlier dimensions carry them)",
        "small activations",
        "context for the outlier analyses (Kovaleva et al. 2021; Puccetti et al. 2022)"),
    "pc1_variance_ratio": Definition(
        "top eigenvalue / trace of the covariance of the centred sample",
        r"\lambda_1 / \operatorname{tr}(\Sigma)\ \text{of the sample covariance}",
        "one direction carries most of the variance",
        "variance spread over many directions (1/d for an isotropic cloud)",
        "Ethayarajh 2019; Cai et al. 2021"),
    "effective_rank": Definition(
        "exp of the entropy of the normalised singular values of the centred sample (Roy & Vetterli 2007)",
        r"\exp\Big(-\sum_i p_i \log p_i\Big),\quad p_i = \sigma_i / \textstyle\sum_j \sigma_j\ \text{(centred sample)}",
        "many dimensions in use (at most d)",
        "the cloud lives in a few dimensions",
        "Roy & Vetterli 2007"),
    "isoscore": Definition(
        "IsoScore of the sample (Rudman et al. 2022): 1 = isotropic, 0 = one direction",
        r"\text{IsoScore} \in [0, 1]:\ \text{distance of the normalised PCA variances from the identity}",
        "1: isotropic (uses every dimension equally)",
        "0: all variance in one dimension",
        "Rudman et al. 2022"),
    "partition_isotropy": Definition(
        "min_c Z(c) / max_c Z(c), Z(c) = sum_t exp(c . w_t), c the eigenvectors of W^T W, W = sample rescaled to unit "
        "mean norm (Mu & Viswanath 2018)",
        r"\frac{\min_c Z(c)}{\max_c Z(c)},\quad Z(c) = \sum_t \exp(c^\top w_t),\ c \text{ eigenvectors of } W^\top W",
        "1: isotropic",
        "lower: a dominant direction (about 1/e for one common direction; vectors rescaled to unit mean norm)",
        "Mu & Viswanath 2018"),
    "sample_mean_cosine": Definition(
        "mean cos over all ordered pairs of the token sample (exact on the sample)",
        r"\text{mean cosine over the pairs of the token sample (K tokens)}",
        "as mean cosine, on the sample that the post-processing what-if changes",
        "as mean cosine",
        "Ethayarajh 2019"),
}


def short(metric: str) -> str:
    """The one-line definition of `metric` ('' for a key without one)."""
    d = DEFINITIONS.get(metric)
    return d.short if d is not None else ""


def docs_section(metric: str) -> str | None:
    """The section of docs/metrics.md about `metric` (by its key in a heading), if the file has one."""
    path = ROOT / DOCS_PATH
    try:
        text = path.read_text("utf-8")
    except OSError:
        return None
    lines, out, inside, level = text.splitlines(), [], False, 0
    for line in lines:
        if line.startswith("#"):
            lvl = len(line) - len(line.lstrip("#"))
            if inside and lvl <= level:
                break
            if not inside and f"`{metric}`" in line:
                inside, level = True, lvl
        if inside:
            out.append(line)
    return "\n".join(out).strip() or None
