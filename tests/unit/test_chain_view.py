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
    assert "largest in block 2, which writes hidden state 3 (0.80)" in lines[2]
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
    from core import export

    v = C.chain_view(_run())
    for fmt in ("html", "csv", "json"):
        assert export.export_bytes(v, fmt)
    assert b"top1_median" in export.data_bytes(v, "csv")
