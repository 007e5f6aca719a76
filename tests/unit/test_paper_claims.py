"""The papers' claims tables (core.studies.papers.claims) are computed from the numbers: flip the numbers and the
verdict flips; no model, no verdict typed in."""

import numpy as np
import pytest

from core.studies.papers import claims as C


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
    # the model's recorded fact is context, labelled, never the reason; nothing measured explains it here
    assert "a sentence encoder" not in row["reason"] and row["reason"] == C.UNKNOWN
    assert "a sentence encoder" in row["context"] and row["context"].startswith("context (a recorded fact")


def test_godey_training_claim_is_judged_against_the_control_without_its_shared_input():
    """The issue's MiniLM case: the control as built is above the trained model only through its shared input."""
    def lv(v, c=None, ci=None):
        return {"mean_cosine": {"value": v, "ci": ci}, "centred_mean_cosine": {"value": c, "ci": None}}

    trained = _run("m", [0.06, 0.15, 0.15], group="g", note="a sentence encoder", levels=lv(0.15, 0.02, [0.14, 0.16]))
    control = _run("u", [0.36, 0.39, 0.39], role="control", group="g", levels=lv(0.39, -0.0005, [0.38, 0.40]))
    rows = C.godey_claims([trained, control], None)
    row = _verdict(rows, "Training makes M")
    assert row["verdict"] == C.DISAGREES and "vector shared by all its tokens" in row["reason"]
    assert "raw and centred disagree" in row["reason"] and "0.39 [0.38, 0.40]" in row["measured"]
    ns = _run("n", [0.01, 0.02, 0.02], role="control", group="g", noshared=True,
              levels=lv(0.02, -0.0005, [0.015, 0.025]))
    rows = C.godey_claims([trained, control, ns], None)
    row = _verdict(rows, "Training makes M")
    assert row["verdict"] == C.AGREES and "shared-input share 95%" in row["measured"] and row["reason"] == ""
    iso = _verdict(rows, "Untrained Transformers are close to isotropic (N)")
    assert iso["verdict"] == C.AGREES
    ns["levels"] = lv(0.2, 0.0)
    ns["mean_cosine"] = [0.01, 0.05, 0.35]
    assert _verdict(C.godey_claims([trained, control, ns], None), "Untrained Transformers")["verdict"] == C.DISAGREES


def test_godey_frequency_claim_reads_the_uniform_random_run():
    wiki = _run("m", [0.1, 0.4, 0.4])
    uni = {**_run("m", [0.1, 0.3, 0.3], role="frequency"), "corpus": "uniform-random"}
    wiki["corpus"] = "wiki-en"
    row = _verdict(C.godey_claims([wiki, uni], None), "Anisotropy is not explained by token frequency")
    assert row["verdict"] == C.AGREES and "uniform-random 0.30" in row["measured"] and "wiki-en 0.40" in row["measured"]
    uni["mean_cosine"] = [0.0, 0.02, 0.03]
    row = _verdict(C.godey_claims([wiki, uni], None), "Anisotropy is not explained by token frequency")
    assert row["verdict"] == C.DISAGREES and row["reason"] == C.UNKNOWN


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


def _exp(cos, ent, within=None, inp=None):
    n = len(cos)
    return {"output_mean_cosine": cos, "attention_entropy": ent,
            "output_within_sequence_cosine": within if within is not None else cos,
            "input_mean_cosine": inp if inp is not None else [0.0] * n}


FLAT = [[0.07, 0.07], [0.07, 0.07], [0.07, 0.07]]
ISO = {"alphas": [0.0, 1.0, 4.0], "taus": [0.25, 1.0], "experiments": {
    "query_key": _exp([[0.07, 0.08], [0.3, 0.2], [0.6, 0.5]], [[0.8, 0.9], [0.6, 0.85], [0.2, 0.7]]),
    "key": _exp(FLAT, [[0.8, 0.9]] * 3),
    "input": _exp([[0.07, 0.07], [0.5, 0.5], [0.95, 0.95]], [[0.8, 0.9], [0.85, 0.9], [0.98, 0.99]],
                  inp=[0.0, 0.5, 0.94])}}


def test_drift_claims_flip_with_the_isolated_grid():
    rows = C.drift_claims(ISO)
    assert _verdict(rows, C.DRIFT_C1)["verdict"] == C.AGREES  # 0.07 -> 0.60 at tau = 0.25
    assert _verdict(rows, C.DRIFT_C2)["verdict"] == C.AGREES  # the entropy falls at both temperatures
    assert _verdict(rows, C.DRIFT_KEY_ONLY)["verdict"] == C.AGREES
    flipped = {**ISO, "experiments": {**ISO["experiments"], "query_key": _exp(
        ISO["experiments"]["query_key"]["output_mean_cosine"][::-1],
        ISO["experiments"]["query_key"]["attention_entropy"][::-1])}}
    rows = C.drift_claims(flipped)
    assert _verdict(rows, C.DRIFT_C1)["verdict"] == C.DISAGREES and _verdict(rows, C.DRIFT_C2)["verdict"] == C.DISAGREES
    moved = {**ISO, "experiments": {**ISO["experiments"], "key": _exp([[0.07, 0.07], [0.07, 0.07], [0.2, 0.07]],
                                                                       [[0.8, 0.9]] * 3)}}
    assert _verdict(C.drift_claims(moved), C.DRIFT_KEY_ONLY)["verdict"] == C.DISAGREES


def test_input_drift_without_query_key_drift_is_the_baseline_not_the_mechanism():
    # the inputs drift (output 0.07 -> 0.95) while the isolated query/key drift moves nothing
    exps = {**ISO["experiments"], "query_key": _exp(FLAT, [[0.8, 0.9]] * 3)}
    rows = C.drift_claims({**ISO, "experiments": exps})
    base = _verdict(rows, "Baseline, input drift")
    assert base["verdict"] == C.AGREES and base["source"] == C.CONTROL
    assert "0.07 → 0.95" in base["measured"] and "the inputs themselves 0.00 → 0.94" in base["measured"]
    mech = _verdict(rows, C.DRIFT_C1)
    assert mech["verdict"] == C.DISAGREES and mech["source"] == C.GODEY_DRIFT
    assert "isolated" in mech["measured"] and "+0.00" in mech["reason"]
    # a record with input drift only (today's records before the isolated experiment: flat grids) tests nothing
    old = {"alphas": [0.0, 4.0], "taus": [1.0], "output_mean_cosine": [[0.3], [0.95]],
           "input_mean_cosine": [[0.0], [0.94]], "attention_entropy": [[0.9], [0.99]]}
    rows = C.drift_claims(old)
    assert _verdict(rows, C.DRIFT_C1)["verdict"] == C.UNTESTED and "baseline" in _verdict(rows, C.DRIFT_C1)["reason"]
    assert _verdict(rows, C.DRIFT_C2)["verdict"] == C.UNTESTED
    assert _verdict(rows, "Baseline, input drift")["verdict"] == C.AGREES


def test_a_rise_within_sequences_only_is_said_in_the_reason():
    exps = {**ISO["experiments"], "query_key": _exp([[0.07, 0.08], [0.09, 0.1], [0.12, 0.12]],
                                                    [[0.8, 0.9], [0.6, 0.85], [0.2, 0.7]],
                                                    within=[[0.16, 0.2], [0.3, 0.25], [0.68, 0.5]])}
    row = _verdict(C.drift_claims({**ISO, "experiments": exps}), C.DRIFT_C1)
    assert row["verdict"] == C.DISAGREES
    assert "+0.05" in row["reason"] and "+0.52" in row["reason"] and "0.16 → 0.68" in row["measured"]


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


def test_reproduce_refuses_a_token_budget_past_the_largest_run(tmp_path):
    """Issue 37 item 14: `reproduce --max-tokens` had no upper bound."""
    import subprocess
    import sys
    from pathlib import Path

    from core.base.errors import InputError
    from core.studies.papers.run import MAX_TOKENS, Settings, check_settings

    check_settings(Settings(max_tokens=MAX_TOKENS))
    with pytest.raises(InputError, match="at most 10,000,000"):
        check_settings(Settings(max_tokens=MAX_TOKENS + 1))
    r = subprocess.run([sys.executable, "-m", "core", "reproduce", "godey", "--max-tokens", str(10**12),
                        "--cache-dir", str(tmp_path)],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "at most 10,000,000" in r.stderr, (r.stdout, r.stderr)


def _iso(v, ci):
    return _run("u", [0.0, v, v], role="control", noshared=True, levels={"mean_cosine": {"value": v, "ci": ci}})


def _iso_rows(v, ci):
    return [r for r in C.godey_claims([_iso(v, ci)], None) if r["claim"].startswith("Untrained")]


def test_a_verdict_that_flips_between_seeds_is_not_robust_and_one_that_holds_is():
    main = _iso_rows(0.02, [0.01, 0.03])
    held = C.robustness(main, {"budget 32": _iso_rows(0.03, [0.02, 0.04]), "seed 1": _iso_rows(0.025, [0.02, 0.03])})
    assert held[0]["robust"] == C.ROBUST and held[0]["robust_why"] == ""
    flips = C.robustness(main, {"budget 32": _iso_rows(0.03, [0.02, 0.04]), "seed 1": _iso_rows(0.2, [0.15, 0.25])})
    assert flips[0]["robust"] == C.NOT_ROBUST and "does not agree at seed 1" in flips[0]["robust_why"]
    # the same verdict everywhere, but one interval straddles the rule's 0.1: not robust either
    wide = C.robustness(main, {"budget 32": _iso_rows(0.06, [0.02, 0.12]), "seed 1": _iso_rows(0.02, [0.01, 0.03])})
    assert wide[0]["robust"] == C.NOT_ROBUST and "straddles 0.1 at budget 32" in wide[0]["robust_why"]
    gone = C.robustness(main, {"seed 1": []})
    assert gone[0]["robust"] == C.NOT_ROBUST and "absent at seed 1" in gone[0]["robust_why"]


def test_robustness_of_rows_without_intervals_and_of_untestable_rows():
    main = _iso_rows(0.02, None)
    got = C.robustness(main, {"seed 1": _iso_rows(0.03, None)})
    assert got[0]["robust"] == C.ROBUST and got[0]["robust_why"].startswith("verdict only")
    untested = C.drift_claims(None)
    assert all(r["robust"] == "" for r in C.robustness(untested, {"seed 1": untested}))


def test_a_robust_row_says_where_it_had_no_interval():
    # intervals at two settings but none at budget 32 (a character run of one document): still robust on its
    # verdict there, and the row says so instead of reading as interval-checked at all three settings
    main = _iso_rows(0.02, [0.01, 0.03])
    got = C.robustness(main, {"budget 32": _iso_rows(0.03, None), "seed 1": _iso_rows(0.025, [0.02, 0.03])})
    assert got[0]["robust"] == C.ROBUST and got[0]["robust_why"].startswith("no interval at budget 32")
    # a straddling interval elsewhere still makes it not robust
    wide = C.robustness(main, {"budget 32": _iso_rows(0.03, None), "seed 1": _iso_rows(0.06, [0.02, 0.12])})
    assert wide[0]["robust"] == C.NOT_ROBUST and "straddles 0.1 at seed 1" in wide[0]["robust_why"]


def test_two_compared_intervals_that_overlap_are_not_robust():
    t = _run("m", [0.1, 0.5, 0.5], group="g", levels={"mean_cosine": {"value": 0.5, "ci": [0.4, 0.6]}})
    c = _run("u", [0.0, 0.1, 0.1], role="control", group="g", levels={"mean_cosine": {"value": 0.3, "ci": [0.2, 0.45]}})
    rows = C.godey_claims([t, c], None)
    got = _verdict(C.robustness(rows, {"seed 1": rows}), "Training makes M")
    assert got["verdict"] == C.AGREES and got["robust"] == C.NOT_ROBUST and "overlaps [0.2" in got["robust_why"]


def test_ethayarajh_and_puccetti_rows_carry_their_intervals():
    ev = {"layers": [[0.05, 0.07], [0.11, 0.13], [0.29, 0.31]], "min": [0.11, 0.13], "halves_diff": [0.17, 0.21],
          "shape_r": {"bert-base-cased": [0.2, 0.9]}}
    run = {**_eth([0.06, 0.12, 0.3], None), "evidence": ev}
    rows = C.ethayarajh_claims([run], [{"model": "bert-base-cased", "metric": "mean_cosine", "values": [0.1, 0.2, 0.3]}])
    every = _verdict(rows, "Representations are anisotropic")
    assert "0.12 [0.11, 0.13] (layer 1, the lowest)" in every["measured"] and every["margins"][0]["ci"] == [0.11, 0.13]
    assert "upper minus lower 0.18 [0.17, 0.21]" in _verdict(rows, "Anisotropy is higher")["measured"]
    shape = _verdict(rows, "The published bert-base-cased")
    assert "[0.2, 0.9]" in shape["measured"]
    # r's interval reaches under the rule's 0.5: whatever the verdict, it is not robust
    assert C.robustness([shape], {"seed 1": [shape]})[0]["robust"] == C.NOT_ROBUST
    ab = {"delta": 8.0, "random_delta_mean": 0.3, "random_delta_std": 0.2, "dims": [3, 7], "random_deltas": [0.1, 0.5]}
    p = {**_puc([3, 7], [7, 9], [0.5, 0.6, 0.4], [0.1, 0.2, 0.1], ab),
         "evidence": {"frequency": {"layers_above": [2.0, 3.0], "mean_diff": [0.3, 0.4]}}}
    rows = C.puccetti_claims([p], [])
    freq = _verdict(rows, "Outlier dims' magnitude")
    assert "interval on the token sample: 2-3" in freq["measured"] and freq["margins"][0]["vs"] == 1.5
    assert "2 draws from +0.10 to +0.50" in _verdict(rows, "Zeroing the outlier dims")["measured"]


def test_the_robustness_variants_and_their_settings():
    from core.base.errors import InputError
    from core.studies.papers.run import Settings, job_params, settings_of, variants

    s = Settings(max_tokens=1024, sample=250, seed=3)
    v = variants(s)
    assert list(v) == ["budget 512", "seed 4"]
    assert (v["budget 512"].max_tokens, v["budget 512"].sample, v["budget 512"].drift_seqs, v["budget 512"].seed) == (
        512, 125, 16, 3)
    assert (v["seed 4"].max_tokens, v["seed 4"].seed) == (1024, 4) and not any(x.robust for x in v.values())
    assert settings_of(job_params("godey", s)) == ("godey", s)  # the job's parameters round-trip
    assert settings_of({"paper": "godey", "robust": "no"})[1].robust  # only a JSON false turns the check off
    assert not settings_of({"paper": "godey", "robust": False})[1].robust
    for bad in ({"drift_seqs": 1}, {"drift_seqs": 10**6}, {"seed": 2**32 - 1}):
        with pytest.raises(InputError):
            settings_of({"paper": "godey", **bad})
