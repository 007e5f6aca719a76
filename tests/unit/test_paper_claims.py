"""The papers' claims tables (core.papers.claims) are computed from the numbers: flip the numbers and the
verdict flips; no model, no verdict typed in."""

import numpy as np
import pytest

from core.papers import claims as C


def _run(model, mc, role="trained", group=None, modality="text", family="transformer", tokenization="subword",
         note=None, **kw):
    return {"model": model, "label": model.upper(), "modality": modality, "family": family,
            "tokenization": tokenization, "role": role, "group": group or model, "note": note, "mean_cosine": mc, **kw}


def _verdict(rows, start):
    hits = [r for r in rows if r["claim"].startswith(start)]
    assert len(hits) == 1, [r["claim"] for r in rows]
    return hits[0]


DRIFT = {"alphas": [0.0, 1.0, 4.0], "taus": [0.25, 1.0],
         "output_mean_cosine": [[0.3, 0.3], [0.6, 0.6], [0.95, 0.95]],
         "attention_entropy": [[0.8, 0.9], [0.85, 0.9], [0.98, 0.99]]}


def test_godey_training_claim_flips_with_the_numbers():
    trained = _run("m", [0.1, 0.5, 0.5, 0.5], group="g", note="a sentence encoder")
    control = _run("u", [0.0, 0.1, 0.1, 0.1], role="control", group="g")
    row = _verdict(C.godey_claims([trained, control], DRIFT), "Training makes M")
    assert row["verdict"] == C.AGREES and row["reason"] == ""
    trained["mean_cosine"], control["mean_cosine"] = control["mean_cosine"], trained["mean_cosine"]
    row = _verdict(C.godey_claims([trained, control], DRIFT), "Training makes M")
    assert row["verdict"] == C.DISAGREES
    assert "a sentence encoder" in row["reason"] and "0.50" in row["reason"]  # the model's fact and the number


def test_godey_anisotropy_per_modality_and_untested_without_a_trained_model():
    runs = [_run("t", [0.0, 0.3, 0.4]), _run("v", [0.0, 0.02, 0.03], modality="image")]
    rows = C.godey_claims(runs, None)
    assert _verdict(rows, "Trained Transformers are anisotropic (text)")["verdict"] == C.AGREES
    assert _verdict(rows, "Trained Transformers are anisotropic (image)")["verdict"] == C.DISAGREES
    assert _verdict(rows, "Trained Transformers are anisotropic (audio)")["verdict"] == C.UNTESTED
    assert _verdict(rows, "Character-level")["verdict"] == C.UNTESTED  # no trained character model
    runs.append(_run("c", [0.0, 0.4, 0.4], tokenization="character"))
    assert _verdict(C.godey_claims(runs, None), "Character-level")["verdict"] == C.AGREES
    assert all(r["verdict"] == C.UNTESTED for r in C.drift_claims(None))


def test_drift_claims_flip_with_the_grid():
    rows = C.drift_claims(DRIFT)
    assert rows[0]["verdict"] == C.AGREES  # 0.30 -> 0.95
    assert rows[1]["verdict"] == C.DISAGREES  # entropy rises with the drift
    flipped = {**DRIFT, "output_mean_cosine": DRIFT["output_mean_cosine"][::-1],
               "attention_entropy": DRIFT["attention_entropy"][::-1]}
    rows = C.drift_claims(flipped)
    assert rows[0]["verdict"] == C.DISAGREES and rows[1]["verdict"] == C.AGREES


def _eth(mc, ss):
    return {"model": "m", "label": "M", "note": None, "analogue": "bert-base-cased",
            "curves": {"mean_cosine": mc, "self_similarity_adjusted": ss}}


def test_ethayarajh_claims_flip():
    pub = [{"model": "bert-base-cased", "metric": "mean_cosine", "values": [0.1, 0.2, 0.3, 0.4, 0.5]}]
    rising, falling = [0.05, 0.2, 0.3, 0.4, 0.5], [0.05, 0.5, 0.4, 0.3, 0.2]
    rows = C.ethayarajh_claims([_eth(rising, [0.0, 0.5, 0.4, 0.2, 0.1])], pub)
    assert _verdict(rows, "Representations are anisotropic")["verdict"] == C.AGREES
    assert _verdict(rows, "Anisotropy is higher in the upper")["verdict"] == C.AGREES
    assert _verdict(rows, "Upper layers are more context-specific")["verdict"] == C.AGREES
    assert _verdict(rows, "The published bert-base-cased")["verdict"] == C.AGREES
    rows = C.ethayarajh_claims([_eth(falling, [0.0, 0.1, 0.2, 0.4, 0.5])], pub)
    assert _verdict(rows, "Anisotropy is higher in the upper")["verdict"] == C.DISAGREES
    assert _verdict(rows, "Upper layers are more context-specific")["verdict"] == C.DISAGREES
    assert _verdict(rows, "The published bert-base-cased")["verdict"] == C.DISAGREES
    low = [0.05, 0.2, 0.03, 0.4, 0.5]
    row = _verdict(C.ethayarajh_claims([_eth(low, [0.0] * 5)], pub), "Representations are anisotropic")
    assert row["verdict"] == C.DISAGREES and "layer 2" in row["reason"]


def _puc(norm, act, o, z, ab):
    return {"model": "m", "label": "M", "note": None, "d": 100, "norm_persistent": norm, "activation_persistent": act,
            "freq": {"outlier_abs_r": o, "random_abs_r": z}, "ablation": ab, "ablation_note": "no LM head"}


def test_puccetti_claims_flip():
    ab = {"delta": 8.0, "random_delta_mean": 0.3, "random_delta_std": 0.2, "dims": [3, 7]}
    pub = [{"model": "bert-base-uncased", "dims": [308, 381], "ours": None, "why": "not offline"},
           {"model": "x", "dims": [3], "ours": [3, 7]}]
    rows = C.puccetti_claims([_puc([3, 7], [7, 9], [0.5, 0.6, 0.4], [0.1, 0.2, 0.1], ab)], pub)
    assert [r["verdict"] for r in rows] == [C.AGREES] * 4 + [C.UNTESTED, C.AGREES]
    ab = {**ab, "delta": 0.5}
    rows = C.puccetti_claims([_puc(list(range(10)), [50], [0.1, 0.1, 0.4], [0.3, 0.3, 0.1], ab)], pub[:1])
    assert [r["verdict"] for r in rows] == [C.DISAGREES] * 4 + [C.UNTESTED]
    rows = C.puccetti_claims([_puc([], [1], [], [], None)], [])
    assert [r["verdict"] for r in rows] == [C.DISAGREES, C.UNTESTED, C.UNTESTED, C.UNTESTED]
    assert rows[-1]["reason"] == "no LM head"


def test_helpers():
    assert C.level([9.0, 1.0, 3.0]) == 2.0  # layer 0 left out
    assert C.halves([9.0, 1.0, 2.0, 3.0, 4.0]) == (1.5, 3.5)
    assert np.allclose(C.relative_depth_interp([0.0, 1.0], 3), [0.0, 0.5, 1.0])
    assert C.summary([C.row("a", "s", "m", C.AGREES)])[C.AGREES] == 1
    with pytest.raises(ValueError):
        C.row("a", "s", "m", "maybe")


def _chain(ratios, dims, where, sw, sink, outliers=(7,)):
    massive = [{"layer": i, "ratio": r, "dim": d, "position_class": w} for i, (r, d, w) in enumerate(zip(ratios, dims, where))]
    return {"label": "S", "note": None, "massive": massive, "super_weights": sw, "n_blocks": 8, "sink_rate": sink,
            "outlier_dims": list(outliers)}


def test_chain_claims_flip():
    sw = [{"block": 1, "module": "mlp.down_proj", "row": 7, "col": 3, "value": -9.0}]
    r = _chain([5, 900, 1200, 800], [1, 7, 7, 7], ["other", "first position"] * 2, sw, 0.6)
    r["massive"][2]["position_class"] = "first position"
    assert [x["verdict"] for x in C.chain_claims([r])] == [C.AGREES] * 6
    r = _chain([5, 20, 30, 10], [1, 2, 3, 4], ["other"] * 4, [], 0.1)
    assert [x["verdict"] for x in C.chain_claims([r])] == [C.DISAGREES, C.UNTESTED, C.DISAGREES, C.DISAGREES]
    late = {**sw[0], "block": 7}
    r = _chain([500, 600, 700, 800], [1, 2, 3, 4], ["other"] * 4, [late], None, outliers=())
    assert [x["verdict"] for x in C.chain_claims([r])] == [C.AGREES, C.DISAGREES, C.DISAGREES, C.DISAGREES,
                                                            C.DISAGREES, C.UNTESTED]


def test_verdicts_are_words_that_any_font_draws():
    """Issue 36 item 7: the verdicts were emoji (✅ ❌ ➖), empty boxes in Debian's chromium without an emoji font."""
    import unicodedata

    from core.views import papers as PV

    claims = [{"claim": f"claim {v}", "source": "paper", "measured": "0.5", "verdict": v, "reason": ""}
              for v in (C.AGREES, C.DISAGREES, C.UNTESTED)]
    rec = {"paper": "godey", "title": "T", "claims": claims, "runs": [], "settings": {}, "key": "k"}
    shown = list(PV.claims_view(rec).data["verdict"])
    assert shown == ["agrees", "does not agree", "not testable here"]
    for text in shown:
        assert all(unicodedata.category(ch)[0] in "LZ" for ch in text), text  # letters and spaces only
