"""Query/key drift over training (core/views/dynamics.py) on a synthetic series: numbers in, the
same numbers out of the figure's data, per step, block and head."""

import math

import numpy as np
import pytest

from core.views import dynamics as D

STEPS = [0, 1, 2, 4]
N_BLOCKS, N_HEADS = 2, 3


def _series(attention=True):
    rng = np.random.default_rng(0)
    results = [{"manifest": {"tokens": {"analysed": 500}, "corpus": {"id": "wiki-en"}, "cache_key": f"k{s}"},
                "layers": [{"layer": l, "mean_cosine": 0.1 * l} for l in range(N_BLOCKS + 1)]} for s in STEPS]
    att = [{"layers": [{"layer": b + 1, **{k: rng.uniform(-1, 1, N_HEADS).tolist() for k in D.DRIFT_STATS}}
                       for b in range(N_BLOCKS)]} for _ in STEPS]
    att[1]["layers"][0]["q_drift"][2] = None  # an undefined head (no analysed position) stays a gap
    return {"run": "synthetic", "steps": STEPS, "results": results, "attention": att if attention else None,
            "record": {"spec": {"arch": "gpt2", "n_layers": N_BLOCKS, "d_model": 16, "tokenizer": "bpe"}}}


@pytest.mark.parametrize("stat", list(D.DRIFT_STATS))
def test_qk_drift_data_are_the_sections_numbers(stat):
    ser = _series()
    view = D.qk_drift(ser, stat)
    assert len(view.data) == len(STEPS) * N_BLOCKS * N_HEADS
    got = view.data.set_index(["step", "block", "head"])[stat]
    for step, sec in zip(STEPS, ser["attention"]):
        for row in sec["layers"]:
            for h, v in enumerate(row[stat]):
                x = got.loc[(step, row["layer"], h + 1)]  # heads numbered from 1, as blocks
                assert (math.isnan(x) if v is None else x == pytest.approx(v))
    # one solid line per block (mean over its heads, NaN heads left out) and a dotted line per head
    assert len(view.figure.data) == N_BLOCKS * (1 + N_HEADS)
    mean_b1 = np.asarray(view.figure.data[0].y, dtype=float)
    want = [np.nanmean([np.nan if v is None else v for v in sec["layers"][0][stat]]) for sec in ser["attention"]]
    np.testing.assert_allclose(mean_b1, want)
    assert view.figure.data[1].line.dash == "dot"


def test_qk_summary_and_sentence():
    ser = _series()
    qk = D._qk_summary(ser)
    last_block = ser["attention"][-1]["layers"][-1]
    assert qk["cos_mu_qk"]["last"][-1] == pytest.approx(np.mean(last_block["cos_mu_qk"]))
    assert len(qk["q_drift"]["first"]) == N_BLOCKS


def test_a_series_without_attention_says_so():
    ser = _series(attention=False)
    assert not D.has_attention(ser)
    with pytest.raises(ValueError, match="no attention statistics"):
        D.qk_drift(ser)
    with pytest.raises(ValueError, match="Unknown statistic"):
        D.qk_drift(_series(), "v_drift")


def test_step_axes_are_labelled_at_the_checkpoints():
    """The log step axis of the runs compared and of the loss: a tick at each checkpoint, step 0 (drawn at
    0.5) labelled "0", not Plotly's own log ticks (0.5 read as "5", then 6, 7, 8, 9 before step 1)."""
    ser = _series()
    ser["record"] |= {"checkpoints": [{"step": s, "held_out_loss": 5.0 - s / 4} for s in STEPS],
                      "data": {"held_out_tokens": 100}, "log": []}
    for fig in (D.compare_runs({"a": ser, "b": ser}).figure, D.loss_curves(ser).figure):
        ax = fig.layout.xaxis
        assert ax.type == "log" and list(ax.tickvals) == [0.5, 1, 2, 4] and list(ax.ticktext) == ["0", "1", "2", "4"]


def _mc_series(per_step):
    """A series whose layer l at step s has mean cosine per_step[s][l]."""
    ser = _series(attention=False)
    for res, mc in zip(ser["results"], per_step):
        res["layers"] = [{"layer": i, "mean_cosine": v} for i, v in enumerate(mc)]
        res["outliers"] = {"activation": {"persistent": []}}
    return ser


def test_the_peak_over_training_is_a_tie_when_two_cells_are_within_the_tolerance():
    clear = D.summary(_mc_series([[0.1, 0.2, 0.3], [0.1, 0.6, 0.3], [0.1, 0.3, 0.3], [0.1, 0.2, 0.35]]))
    assert (clear["peak"]["layer"], clear["peak"]["step"]) == (1, 1) and len(clear["peak"]["ties"]) == 1
    assert any("Anisotropy was transient: layer 1 peaked at 0.600 at step 1" in f for f in clear["findings"])
    # layer 1 at step 1 (0.600) and layer 2 at step 4 (0.597): 0.003 apart, inside 1% of 0.6 -> a tie
    tie = D.summary(_mc_series([[0.1, 0.2, 0.3], [0.1, 0.6, 0.3], [0.1, 0.3, 0.3], [0.1, 0.2, 0.597]]))
    assert [(t["layer"], t["step"]) for t in tie["peak"]["ties"]] == [(1, 1), (2, 4)]
    text = " ".join(tie["findings"])
    assert "a tie between layer 1 at step 1 (0.600), layer 2 at step 4 (0.597)" in text and "transient" not in text


def test_the_most_anisotropic_last_layer_is_a_tie_when_two_layers_are_equal():
    text = " ".join(D.summary(_mc_series([[0.1, 0.2, 0.3]] * 3 + [[0.1, 0.5, 0.4999]]))["findings"])
    assert "the most anisotropic layers at the end are a tie: layers 1, 2 (0.500, 0.500" in text
    text = " ".join(D.summary(_mc_series([[0.1, 0.2, 0.3]] * 3 + [[0.1, 0.5, 0.4]]))["findings"])
    assert "the most anisotropic layer at the end is layer 1 (0.500)" in text
