"""core.stats.reference: the published values ship with the package and match the sources.

The expected values below are transcribed from the authors' files, not from ours: Ethayarajh 2019's
kawine/contextual at 84d2f97 ({bert,gpt2}/embedding_space_stats.json, keys "mean cosine similarity across
words" and "mean cosine similarity between sentence and words", layer_0..layer_12), and the outlier
dimensions Puccetti et al. 2022 report for BERT-base (308, 381) and RoBERTa-base (77, 588).
"""

import math
import re
from importlib import resources

import pytest

from core.stats import reference

ETH = {
    ("mean_cosine", "bert-base-cased"): [.105, .168, .219, .245, .327, .377, .420, .398, .399, .484, .561, .675, .477],
    ("mean_cosine", "gpt2"): [.611, .644, .597, .614, .587, .573, .578, .582, .595, .617, .667, .758, .978],
    ("intra_sentence_similarity", "bert-base-cased"):
        [.435, .522, .570, .590, .642, .695, .726, .711, .720, .771, .820, .870, .776],
    ("intra_sentence_similarity", "gpt2"): [.808, .825, .583, .549, .537, .559, .586, .614, .635, .658, .693, .768, .990],
}


# Layers of the published curves: BERT-base and GPT-2 (small) have 12 blocks, + the embedding output.
PUBLISHED_LAYERS = {"bert-base-cased": 13, "gpt2": 13}


def test_file_ships_inside_the_package():
    assert resources.files("core").joinpath("data", reference.REFERENCE_FILE).is_file()


def test_spot_checks_against_the_paper():
    """What Ethayarajh 2019 says in words, on the curves the loader returns: GPT-2's last layer is almost
    perfectly anisotropic (random words' cosine near 1), BERT's upper layers are more anisotropic than its
    lower ones, and BERT's last layer is less so than the one before it."""
    cos = {c["model"]: c["values"] for c in reference.reference_curves("mean_cosine")}
    assert cos["gpt2"][12] > 0.95 and cos["gpt2"][12] == max(cos["gpt2"])
    assert cos["bert-base-cased"][11] > cos["bert-base-cased"][1] and cos["bert-base-cased"][12] < cos["bert-base-cased"][11]
    for layer, value in ((0, .105), (6, .420), (12, .477)):
        assert cos["bert-base-cased"][layer] == value
    for layer, value in ((0, .611), (11, .758), (12, .978)):
        assert cos["gpt2"][layer] == value
    intra = {c["model"]: c["values"] for c in reference.reference_curves("intra_sentence_similarity")}
    assert (intra["bert-base-cased"][11], intra["gpt2"][12]) == (.870, .990)


@pytest.mark.parametrize("metric", ["mean_cosine", "intra_sentence_similarity"])
def test_curves_match_published_values(metric):
    curves = reference.reference_curves(metric)
    assert {c["model"] for c in curves} == {"bert-base-cased", "gpt2"}
    for c in curves:
        assert c["layers"] == list(range(PUBLISHED_LAYERS[c["model"]]))  # layer 0 = embeddings, in order
        assert len(c["values"]) == len(c["layers"]) and all(-1.0 <= v <= 1.0 for v in c["values"])
        assert c["values"] == pytest.approx(ETH[(metric, c["model"])], abs=1e-12)
        assert c["label"] == f"published: {c['model']} (Ethayarajh 2019)"
        assert c["source"]["repo"] == "https://github.com/kawine/contextual"
        folder = "bert" if c["model"].startswith("bert") else "gpt2"
        assert c["source"]["file"] == f"{folder}/embedding_space_stats.json"  # the model's own file
        assert re.fullmatch(r"[0-9a-f]{40}", c["source"]["commit"]) and "Ethayarajh" in c["source"]["paper"]
        assert c["estimator"]


def test_unknown_metric_has_no_curve():
    assert reference.reference_curves("isoscore") == []


def test_outlier_dims():
    dims = {e["model"]: e["dims"] for e in reference.reference_outlier_dims()}
    assert dims == {"bert-base-uncased": [308, 381], "roberta-base": [77, 588]}
    for e in reference.reference_outlier_dims():
        assert e["source"]["repo"] == "https://github.com/gpucce/outliersvsfreq" and e["source"]["file"]
        assert "Puccetti" in e["source"]["paper"] and re.fullmatch(r"[0-9a-f]{40}", e["source"]["commit"])
        assert all(0 <= d < 768 for d in e["dims"])  # 0-based indices into a 768-wide base model


def test_returned_values_are_copies():
    reference.reference_curves("mean_cosine")[0]["values"][0] = 99.0
    reference.reference_outlier_dims()[0]["dims"].append(1)
    reference.load_reference()["curves"].clear()
    assert reference.reference_curves("mean_cosine")[0]["values"][0] != 99.0
    assert len(reference.reference_outlier_dims()[0]["dims"]) == 2


# Issue 36 item 7: english_share was 0.365 for an all-English CSV: it was the share of the 60 most frequent English
# words among all words (about 0.38 in English prose), read as the share of English. It is now the share of the text
# (characters, spaces excluded) in documents that are English.
ENGLISH_ROWS = ["The model was trained on a small corpus of news articles.",
                "Anisotropy is a property of the hidden states of a transformer.",
                "We report the mean cosine similarity for each layer of the network.",
                "Transformers everywhere.",  # no function word, and short: it says nothing and is left out
                "It is not clear whether this holds for larger models, and we leave it for future work."]
FRENCH_ROWS = ["Le modèle a été entraîné sur un petit corpus de dépêches.",
               "L'anisotropie est une propriété des états cachés du réseau.",
               "Nous donnons la similarité cosinus moyenne pour chaque couche du réseau."]


def _csv(path, rows):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text", "label"])
        w.writerows([i, r, "x"] for i, r in enumerate(rows))
    return str(path)


def _chars(text: str) -> int:
    return len("".join(text.split()))


def test_english_share_of_an_all_english_csv_is_one(tmp_path):
    from core.inputs.corpora import load_documents

    docs = load_documents(_csv(tmp_path / "en.csv", ENGLISH_ROWS), "text", None)
    assert len(docs) == len(ENGLISH_ROWS)
    assert reference.english_share(docs) == 1.0
    assert reference.english_share(docs) >= reference.ENGLISH_SHARE_MIN


def test_english_share_of_a_mixed_text_is_its_english_part(tmp_path):
    from core.inputs.corpora import load_documents

    rows = [r for pair in zip(ENGLISH_ROWS, FRENCH_ROWS + [""] * 2) for r in pair if r]
    docs = load_documents(_csv(tmp_path / "mixed.csv", rows), "text", None)
    decided = [r for r in ENGLISH_ROWS if r != "Transformers everywhere."]
    want = sum(map(_chars, decided)) / (sum(map(_chars, decided)) + sum(map(_chars, FRENCH_ROWS)))
    assert reference.english_share(docs) == pytest.approx(want, rel=1e-12)
    assert 0.5 < want < 0.7
    french = load_documents(_csv(tmp_path / "fr.csv", FRENCH_ROWS), "text", None)
    assert reference.english_share(french) == 0.0
    assert math.isnan(reference.english_share(["Transformers everywhere."]))  # short, no function word: undecided
    long_numbers = " ".join(str(i) for i in range(60))  # long, and no word of either list: not English
    assert reference.english_share([long_numbers, ENGLISH_ROWS[0]]) == pytest.approx(
        _chars(ENGLISH_ROWS[0]) / (_chars(ENGLISH_ROWS[0]) + _chars(long_numbers)))
