"""core.reference: the published values ship with the package and match the sources."""

import json
from pathlib import Path

import pytest

from core import reference

ETH = {
    ("mean_cosine", "bert-base-cased"): [.105, .168, .219, .245, .327, .377, .420, .398, .399, .484, .561, .675, .477],
    ("mean_cosine", "gpt2"): [.611, .644, .597, .614, .587, .573, .578, .582, .595, .617, .667, .758, .978],
    ("intra_sentence_similarity", "bert-base-cased"):
        [.435, .522, .570, .590, .642, .695, .726, .711, .720, .771, .820, .870, .776],
    ("intra_sentence_similarity", "gpt2"): [.808, .825, .583, .549, .537, .559, .586, .614, .635, .658, .693, .768, .990],
}


def test_json_file_is_valid_and_next_to_module():
    path = Path(reference.__file__).parent / "data" / reference.REFERENCE_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == reference.load_reference()


@pytest.mark.parametrize("metric", ["mean_cosine", "intra_sentence_similarity"])
def test_curves_match_published_values(metric):
    curves = reference.reference_curves(metric)
    assert {c["model"] for c in curves} == {"bert-base-cased", "gpt2"}
    for c in curves:
        assert c["layers"] == list(range(13))
        assert len(c["values"]) == 13
        assert c["values"] == pytest.approx(ETH[(metric, c["model"])], abs=1e-12)
        assert c["label"] == f"published: {c['model']} (Ethayarajh 2019)"
        assert "kawine/contextual" in c["source"]["repo"]
        assert c["source"]["file"].endswith("embedding_space_stats.json")
        assert c["estimator"]


def test_unknown_metric_has_no_curve():
    assert reference.reference_curves("isoscore") == []


def test_outlier_dims():
    dims = {e["model"]: e["dims"] for e in reference.reference_outlier_dims()}
    assert dims == {"bert-base-uncased": [308, 381], "roberta-base": [77, 588]}
    for e in reference.reference_outlier_dims():
        assert "outliersvsfreq" in e["source"]["repo"] and e["source"]["file"]


def test_returned_values_are_copies():
    reference.reference_curves("mean_cosine")[0]["values"][0] = 99.0
    reference.reference_outlier_dims()[0]["dims"].append(1)
    reference.load_reference()["curves"].clear()
    assert reference.reference_curves("mean_cosine")[0]["values"][0] != 99.0
    assert len(reference.reference_outlier_dims()[0]["dims"]) == 2
