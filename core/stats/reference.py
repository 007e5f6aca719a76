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
           "ENGLISH_SHARE_MIN", "LEGACY_ENGLISH_WORDS_MIN", "ENGLISH_DETECTION", "english_share"]

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


# Where Ethayarajh's English-text curves apply: the corpus language (here, not in core.inputs.corpora, whose code
# is part of every statistics cache key).
ENGLISH_CORPORA = ("wiki-en", "python-docs")  # built-in corpora in English
# The most frequent English words: about 40% of the words of English prose, a few % of French or German.
_ENGLISH_WORDS = frozenset("the of and to a in is that for it as was with be by on not he this are or his from at "
                           "which but have an they you were her she there been one all we their has would when if "
                           "so no will can more its".split())
# Frequent function words of French, Spanish, German, Italian, Portuguese and Dutch that English does not use: the
# evidence against English in a document that holds a few English-looking words ("a", "on", "in", "was").
_OTHER_WORDS = frozenset("le la les des du une et est dans pour sur au aux ce qui que pas sont avec ne se "
                         "el los las del y es por con para lo su como más al "
                         "der die das und ist nicht mit den dem ein eine zu sich auf für von im auch "
                         "il di che per della sono gli delle nel "
                         "não uma com os das dos em "
                         "het een van zijn voor niet op te".split()) - _ENGLISH_WORDS
ENGLISH_SHARE_MIN = 0.5  # above it, a corpus counts as English (Ethayarajh's published curves apply)
# Runs made before the share of English was measured per document recorded the share of common English words
# among all words (0.34-0.40 for English text; no "english_detection" in their manifest): their threshold.
LEGACY_ENGLISH_WORDS_MIN = 0.2
ENGLISH_DETECTION = "per document: more common English than other-language function words"
_UNDECIDED_CHARS = 100  # a document this long (letters and digits) with no function word of either list: not English
_PUNCT = ".,;:!?\"'()[]{}«»“”‘’¿¡"


def english_share(documents: list[str], max_words: int = 200_000) -> float:
    """The share of the corpus's text that is English: each document (its first words, up to `max_words` in all)
    is English when it holds more of the most frequent English words than of the function words of other European
    languages, and is weighted by its characters (spaces excluded). A document with neither is not English when it
    is long (100 characters or more: a Chinese text, a table of numbers), and left out when it is short (a title or
    a label says nothing). 1.0 for English text, 0.0 for French; NaN when no document says.

    >>> round(english_share(["The cat sat on the mat and it was happy.", "Le chat est sur le tapis."]), 2)  # 31, 20 chars
    0.61
    >>> english_share(["The results of the model are in the table."])
    1.0
    """
    english = decided = 0
    left = int(max_words)
    for d in documents:
        words = str(d).split()[:left]
        if not words:
            continue
        left -= len(words)
        en = other = 0
        for w in words:
            w = w.lower().strip(_PUNCT)
            en += w in _ENGLISH_WORDS
            other += w in _OTHER_WORDS
        chars = sum(len(w) for w in words)
        if en > other:
            english += chars
            decided += chars
        elif en or other or chars >= _UNDECIDED_CHARS:
            decided += chars
        if left <= 0:
            break
    return english / decided if decided else float("nan")
