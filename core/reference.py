"""Published reference values (data in ``core/data/reference_values.json``).

Per-layer curves from Ethayarajh (2019) (kawine/contextual) to overlay on our results, and the
outlier dimensions reported by Puccetti et al. (2022) (gpucce/outliersvsfreq). Each entry keeps
the estimator the authors used, which differs from ours (e.g. random word pairs vs. our exact
all-pairs mean), and its source (paper, repository, file, commit).
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources

__all__ = ["load_reference", "reference_curves", "reference_outlier_dims", "REFERENCE_FILE", "ENGLISH_CORPORA",
           "ENGLISH_SHARE_MIN", "english_share"]

REFERENCE_FILE = "reference_values.json"


@lru_cache(maxsize=1)
def _load() -> dict:
    text = resources.files("core").joinpath("data", REFERENCE_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def load_reference() -> dict:
    """The whole reference file as a dict (a copy: callers may mutate it)."""
    return copy.deepcopy(_load())


def reference_curves(metric: str) -> list[dict]:
    """Published per-layer curves of one metric.

    Parameters
    ----------
    metric : str
        A metric name of our results, e.g. ``"mean_cosine"`` or ``"intra_sentence_similarity"``.

    Returns
    -------
    list of dict
        Each with ``label`` ("published: <model> (<paper>)"), ``model``, ``metric``, ``layers``,
        ``values``, ``estimator`` and ``source``. Empty when nothing is published for ``metric``.
    """
    out = []
    for c in _load()["curves"]:
        if c["metric"] != metric:
            continue
        out.append(
            {
                "label": f"published: {c['model']} ({c['paper']})",
                "model": c["model"],
                "metric": c["metric"],
                "layers": list(c["layers"]),
                "values": list(c["values"]),
                "estimator": c["estimator"],
                "source": dict(c["source"]),
            }
        )
    return out


def reference_outlier_dims() -> list[dict]:
    """Published outlier dimensions: ``model``, ``dims`` (0-based), ``paper``, ``estimator``, ``source``."""
    return copy.deepcopy(_load()["outlier_dims"])


# Where Ethayarajh's English-text curves apply: the corpus language (here, not in core.corpora, whose code
# is part of every statistics cache key).
ENGLISH_CORPORA = ("wiki-en", "python-docs")  # built-in corpora in English
# The most frequent English words: about 40% of the words of English prose, a few % of French or German.
_ENGLISH_WORDS = frozenset("the of and to a in is that for it as was with be by on not he this are or his from at "
                           "which but have an they you were her she there been one all we their has would when if "
                           "so no will can more its".split())
ENGLISH_SHARE_MIN = 0.2  # above it, a corpus counts as English (Ethayarajh's published curves apply)


def english_share(documents: list[str], max_words: int = 200_000) -> float:
    """Share of the first `max_words` words (lower-cased, punctuation stripped) that are among the most
    frequent English words: ~0.4 for English prose, < 0.1 for other languages. NaN without words.

    >>> round(english_share(["The cat sat on the mat and it was happy."]), 2)
    0.6
    """
    n = hit = 0
    for d in documents:
        for w in d.lower().split():
            w = w.strip(".,;:!?\"'()[]{}«»“”‘’")
            if not w:
                continue
            n += 1
            hit += w in _ENGLISH_WORDS
            if n >= max_words:
                return hit / n
    return hit / n if n else float("nan")
