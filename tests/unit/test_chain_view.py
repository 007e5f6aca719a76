"""The Chain view (core/views/chain.py) on a hand-made run: the sentence of each link is built from the
numbers (a planted super weight, its massive dim, the sink share, the mean cosine), and a link that was
not measured is said to be missing."""

from __future__ import annotations

import numpy as np

from core.views import chain as C


def _run(chain: bool = True) -> dict:
    L = 6
    ratio = [3.0, 4.0, 2500.0, 3000.0, 2800.0, 50.0]
    raw = {"manifest": {"model": {"label": "tiny", "hidden_size": 16}, "corpus": {"id": "wiki-en"},
                        "tokens": {"analysed": 1234, "sample": 100}, "modality": "text"},
           "layers": [{"layer": i, "mean_cosine": 0.1 * i} for i in range(L)],
           "outliers": {"activation": {"persistent": [7]}, "norm_parameters": {"persistent": []},
                        "massive_activations": [{"layer": i, "dims": [7 if i >= 2 else 3], "ratio": r,
                                                 "position_class": "first position"} for i, r in enumerate(ratio)]}}
    if chain:
        raw["chain"] = {"super_weights": [{"block": 1, "module": "mlp.down_proj", "row": 7, "col": 11, "value": -9.5}],
                        "sink_rate": {"rate": 0.4, "per_layer": [0.0, 0.2, 0.6, 0.6, 0.6], "epsilon": 0.3}}
    return raw


def test_sentences_follow_the_numbers():
    att = {"layers": [{"sink_first": [0.1, 0.1]}, {"sink_first": [0.2, 0.4]}, {"sink_first": [0.9, 0.7]},
                      {"sink_first": [0.8, 0.8]}, {"sink_first": [0.5, 0.5]}]}
    n = C.chain_numbers(_run(), att)
    assert n["first_massive_layer"] == 2 and n["massive_dims"] == [7]
    lines = C.chain_sentences(n)
    assert lines[0].startswith("Block 1's mlp.down_proj[7, 11] (value -9.5) → dim 7 is the largest at hidden state 2 "
                               "(×2,500 the median) → dim 7 is an outlier dim.")
    assert "Massive activations from hidden state 2 on (×2,500 the median, dim 7, at the first position)" in lines[1]
    assert "[7] among" in lines[1]
    # blocks 2 and 3 both give the first position 0.80: a tie, not "largest in block 2" (issue 35)
    assert "largest in a tie of blocks 2, 3 (writing hidden states 3, 4; 0.80, within 0.008 of the largest)" in lines[2]
    assert "Sink rate: 0.40" in lines[3]
    assert lines[4] == "Mean cosine: 0.05 before hidden state 2, 0.35 from it on (last layer 0.50)."
    # the numbers change, so do the sentences
    other = _run()
    other["outliers"]["activation"]["persistent"] = [2]
    assert "dim 7 is not an outlier dim" in C.chain_sentences(C.chain_numbers(other, att))[0]


def test_missing_links_are_said_missing_and_the_figure_has_four_panels(monkeypatch):
    v = C.chain_view(_run(chain=False))
    assert any("not scanned" in s for s in v.notes) and any("not measured" in s for s in v.notes)
    assert "not measured" in v.figure.layout.title.subtitle.text
    assert len({tr.yaxis for tr in v.figure.data}) == 3  # no sink panel trace without attention and chain
    assert v.figure.layout.yaxis.type == "log"
    assert v.notes[-1] == C.BLOCKS_NOTE  # the numbering said beside the sentences (the Attention page counts from 1)
    # the massive-dim panel: few dims, one evenly spaced row each, in numeric order (323 and 324 overprinted)
    assert v.figure.layout.yaxis2.type == "category" and list(v.figure.layout.yaxis2.categoryarray) == ["3", "7"]
    many = _run(chain=False)
    for i, m in enumerate(many["outliers"]["massive_activations"]):
        m["dims"] = [300 + 5 * i]
    monkeypatch.setattr(C, "MAX_DIM_ROWS", 5)  # six distinct dims: more than rows allowed
    wide = C.chain_view(many).figure.layout.yaxis2
    assert wide.type != "category" and wide.tickformat == "d"
    assert list(v.data.columns[:3]) == ["layer", "top1_median", "top_dim"] and len(v.data) == 6
    assert np.isnan(v.data["sink_share"].astype(float)).all()


def test_the_chain_over_training_and_the_step_each_link_first_crosses_its_threshold():
    def res(ratio, hn, sw):
        r = _run(chain=sw is not None)
        for m in r["outliers"]["massive_activations"]:
            m["ratio"] = ratio
        for row in r["layers"]:
            row["high_norm_share"] = hn
        if sw is not None:
            r["chain"]["super_weights"][0]["ratio_to_median"] = sw
        return r

    # alpha_1 (every real query) makes the rate; the analysed queries' first-position share is another number
    att = [{"layers": [{"alpha_first": [a, 0.1], "sink_first": [0.9, 0.9]}]} for a in (0.1, 0.5, 0.9)]
    ser = {"run": "tiny", "steps": [0, 10, 100], "results": [res(5.0, 0.0, 3.0), res(50.0, 0.0, 300.0),
                                                               res(500.0, 0.02, 900.0)], "attention": att}
    c = C.chain_over_training(ser)
    assert c["values"]["sink_rate"] == [0.0, 0.5, 0.5]
    assert c["first_step"] == {"top1_median": 100, "super_weight": 10, "sink_rate": 10, "high_norm_share": 100}
    v = C.chain_dynamics(ser)
    assert "first above 100 at step 100" in v.notes[0] and list(v.data["step"]) == [0, 10, 100]
    old = [{"layers": [{"sink_first": [0.9, 0.9]}]}] * 3  # stored before alpha_1 was measured: not a rate
    assert np.isnan(C.chain_over_training({**ser, "attention": old})["values"]["sink_rate"]).all()
    ser = {**ser, "attention": None, "results": [res(5.0, 0.0, None)] * 3}
    notes = C.chain_dynamics(ser).notes
    assert "never above 100" in notes[0] and "not measured" in notes[1] and "not measured" in notes[2]


def test_the_chain_figures_export():
    from core.views import export

    v = C.chain_view(_run())
    for fmt in ("html", "csv", "json"):
        assert export.export_bytes(v, fmt)
    assert b"top1_median" in export.data_bytes(v, "csv")


def _candidate(block, col, cls, change, share, r_in, r_out, r_zero, value, contribution, dim_in):
    return {"block": block, "module": "mlp.down_proj", "row": 7, "col": col, "value": value, "found_on": "both",
            "class": cls, "change": change, "share": share, "ratio_in": r_in, "ratio_out": r_out,
            "ratio_out_zeroed": r_zero, "peak_after": r_out, "peak_after_zeroed": r_zero,
            "sign": {"token_position": 0, "contribution": contribution, "dim_value_in": dim_in}}


def test_candidates_are_named_by_what_zeroing_them_showed():
    raw = _run()
    raw["chain"]["super_weight_candidates"] = [
        _candidate(1, 11, "confirmed", "rises", 0.74, 4.0, 2500.0, 700.0, -9.5, 4000.0, 1.0),
        _candidate(4, 3, "eraser", "falls", 0.83, 2800.0, 50.0, 2300.0, -5.8, -3000.0, 3500.0)]
    raw["chain"]["onset"] = {"dim": 7, "hidden_state": 2, "block": 1, "massive": 100.0, "ratios": [3, 4, 2500, 3000],
                             "module": "mlp.down_proj", "token_position": 0, "value_in": 1.0, "value_out": 4001.0,
                             "change": 4000.0, "mlp_part": 3600.0, "rest_part": 400.0,
                             "top_channels": [{"col": 11, "weight": -9.5, "input": -400.0, "contribution": 3800.0,
                                               "share_of_mlp": 1.06}],
                             "top_weight": {"ratio_out_zeroed": 700.0, "share": 0.72, "class": "confirmed"}}
    lines = C.chain_sentences(C.chain_numbers(raw))
    assert lines[0].startswith("Super-weight candidates: 2, each zeroed alone on the probe prompt; 1 confirmed")
    assert "0 amplifier, 1 eraser, 0 unconfirmed" in lines[0]
    assert lines[1].startswith("Block 1's mlp.down_proj[7, 11] (value -9.5, found on the corpus and the probe): a super "
                               "weight, confirmed by ablation.")
    assert "from ×4 at hidden state 1 to ×2,500 at hidden state 2" in lines[1] and "74% of the rise removed" in lines[1]
    # block 4 is the last of five: the hidden state it writes is taken before the final norm
    assert "an eraser, not a super weight" in lines[2] and "hidden state 5 (before the final norm)" in lines[2]
    assert "it writes -3,000 to dim 7 at position 0, where the dim is +3,500" in lines[2]
    assert "83% of the fall undone" in lines[2]
    assert lines[3].startswith("Onset: on the probe dim 7 first exceeds 100× the median at hidden state 2 (×2,500; ×4 "
                               "at hidden state 1), written by block 1")
    assert "(90%)" in lines[3] and "72% of the rise removed" in lines[3]
    assert not any("Block 1's mlp.down_proj[7, 11] (value -9.5) →" in t for t in lines)  # no legacy sentence beside


def _ab(what, control_of, loss_after, peak_after, targets=None):
    L = 4
    return {"what": what, "control_of": control_of, "targets": targets or [{}], "loss_before": 2.0,
            "loss_after": loss_after, "loss_delta": loss_after - 2.0,
            "top1_median_before": [1.0, 10.0, 1000.0, 900.0], "top1_median_after": [1.0, 10.0, peak_after, peak_after],
            "mean_cosine_before": [0.1] * L, "mean_cosine_after": [0.2] * L}


def test_each_candidate_alone_beside_its_controls_and_the_joint_ablation():
    ab = {"baseline": {"loss": 2.0, "loss_tokens": 4065, "n_positions": 4104, "mean_cosine": [0.1] * 4,
                       "top1_median": [1.0, 10.0, 1000.0, 900.0]},
          "ablations": {"super_weights": _ab("the super-weight candidates zeroed together", None, 4.0, 300.0, [{}, {}]),
                        "single:1:7:11": _ab("block 1 mlp.down_proj[7, 11] zeroed alone", None, 5.9, 250.0),
                        "single_random:1:7:11": _ab("a random weight (control)", "single:1:7:11", 2.0, 1000.0),
                        "single_largest:1:7:11": _ab("its largest other weight (control)", "single:1:7:11", 2.1, 900.0)},
          "loss": "causal", "held_out_tokens": 4104}
    v = C.single_ablations(ab, _run())
    assert list(v.data["ablation"]) == ["zeroed alone", "a random weight of its matrix", "its largest other weight",
                                         "zeroed together"]
    assert v.notes[0] == ("Block 1 mlp.down_proj[7, 11] zeroed alone: loss +3.9 nats/token, largest top-1/median 25% "
                          "of its as-is value; a random weight of its matrix: loss +0 nats/token, 100%; its largest "
                          "other weight: loss +0.1 nats/token, 90%.")
    assert v.notes[1].startswith("All 2 corpus candidates zeroed together: loss +2 nats/token")
    # one token count on the page: the one the loss is averaged over
    assert "4,065 held-out tokens" in v.figure.layout.title.subtitle.text
    curves = C.ablation_curves(ab, _run())
    assert "4,065 held-out tokens" in curves.figure.layout.title.subtitle.text and "4,104" not in str(curves.notes)
    assert {tr.name for tr in curves.figure.data} == {"as is", "the super-weight candidates zeroed together"}
    # the ablation sentences quote the peak as a share, never a second absolute peak beside the run's
    assert "largest top-1/median over the layers 30% of its as-is value" in curves.notes[0]
    assert C.single_ablations({"ablations": {"super_weights": ab["ablations"]["super_weights"]}}, _run()) is None


def test_high_norm_tokens_int8_sets_and_candidates_on_the_page():
    raw = _run()
    hn = [{"layer": i, "n": 11 if i >= 2 else 0, "K": 1076, "share": 11 / 1076 if i >= 2 else 0.0,
           "separation": 0.9 if i >= 2 else 0.5, "threshold": 40.0,
           "where": {"position_classes": {"first position": 11 if i >= 2 else 0, "BOS/special": 0,
                                          "delimiter/punctuation": 0, "other": 0}}} for i in range(6)]
    raw["chain"]["high_norm"] = hn
    raw["chain"]["int8_outliers"] = {
        "threshold": 6.0, "layer_share": 0.25, "position_share": 0.06, "dims": [247], "rule": "r",
        "sites": {"attention": {"dims": [247]}, "mlp": {"dims": []}},
        "overlap": {"sets": {"int8": [247], "activation_3sigma": [247, 308, 507], "norm_parameters": [13, 247, 507]},
                    "pairs": [{"a": "int8", "b": "activation_3sigma", "intersection": [247], "jaccard": 1 / 3}],
                    "all": [247]}}
    raw["chain"]["super_weight_candidates"] = [
        _candidate(4, 3, "eraser", "falls", 0.83, 2800.0, 50.0, 2300.0, -5.8, -3000.0, 3500.0)]
    v = C.high_norm_view(raw)
    assert v.notes[0] == ("High-norm tokens (Otsu's split of the log-norms, separation ≥ 0.8): at layers 2-5, "
                          "1.0% of the sample (11 of 1,076 tokens), 100% at the first position.")
    assert [tr.name for tr in v.figure.data][0] == "first position" and list(v.figure.data[0].y) == [0, 0, 11, 11, 11, 11]
    i8 = C.int8_view(raw)
    assert i8.figure is None and "dims [247] (attention input: [247]; MLP input: none)" in i8.notes[0]
    assert "in all: [247]" in i8.notes[0] and list(i8.data["n"]) == [1, 3, 3, 1, 1]
    cv = C.candidates_view(raw)
    row = cv.data.iloc[0]
    assert (row["class"], row["writes"], row["share"]) == ("eraser", "hidden state 5 (before the final norm)",
                                                           "83% of the fall undone")
    assert C.high_norm_view(_run(chain=False)) is None and C.int8_view(_run(chain=False)) is None
    raw["chain"]["high_norm"] = [{**h, "n": 0, "share": 0.0, "separation": 0.6} for h in hn]
    assert "none" in C.high_norm_view(raw).notes[0] and "separation 0.60-0.60" not in C.high_norm_view(raw).notes[0]


def test_a_clear_sink_maximum_is_named_and_a_near_tie_is_not_broken():
    def line(shares):
        att = {"layers": [{"sink_first": [v, v]} for v in shares]}
        return next(x for x in C.chain_sentences(C.chain_numbers(_run(), att)) if x.startswith("First-position"))

    assert "largest in block 2, which writes hidden state 3 (0.90)" in line([0.1, 0.2, 0.9, 0.8, 0.5])
    tie = line([0.1, 0.2, 0.9, 0.895, 0.5])  # 0.005 apart: inside 1% of 0.9
    assert "a tie of blocks 2, 3" in tie and "block 2, which" not in tie
