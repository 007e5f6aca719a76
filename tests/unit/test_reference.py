"""core.reference: the published values ship with the package and match the sources.

The expected values below are transcribed from the authors' files, not from ours: Ethayarajh 2019's
kawine/contextual at 84d2f97 ({bert,gpt2}/embedding_space_stats.json, keys "mean cosine similarity across
words" and "mean cosine similarity between sentence and words", layer_0..layer_12), and the outlier
dimensions Puccetti et al. 2022 report for BERT-base (308, 381) and RoBERTa-base (77, 588).
"""

import re
from importlib import resources

import pytest

from core import reference

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
