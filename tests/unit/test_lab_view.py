"""The Lab's views (core/views/lab.py) on synthetic lab records (tests/synthetic_lab.py): every number drawn is the
record's, a single seed draws no interval and says so, a statistic that does not apply says why, and the reader
refuses hostile ids and damaged files with a message."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from synthetic_lab import NO_ATTENTION, NOT_LEARNED, synthetic_lab, write_lab

from core.base.errors import InputError
from core.studies.selection import DEFAULT, from_query_params, to_query_params
from core.views import export
from core.views import lab as LV


@pytest.fixture
def lab() -> dict:
    return {**synthetic_lab(), "id": "lab-new"}


def _bars(view) -> dict[str, dict]:
    return {t.name: t for t in view.figure.data if t.type == "bar"}


def test_effects_chart_draws_the_record_s_deltas_and_intervals(lab):
    for stat in ("mid_mean_cosine", "max_massive_ratio"):
        view = LV.effects_view(lab, stat)
        bars = _bars(view)
        want = [e for e in lab["effects"] if e["statistic"] == stat]
        assert len(bars) == len(want) == 4  # arch: gpt2 → 3 families, optimizer: adamw → sgd
        for e in want:
            b = bars[f"{e['factor']}: {e['from']} → {e['to']}"]
            assert b.y[0] == pytest.approx(e["delta"])
            assert b.error_y.visible and not b.error_y.symmetric
            assert b.y[0] + b.error_y.array[0] == pytest.approx(e["hi"])  # the interval is the record's, asymmetric
            assert b.y[0] - b.error_y.arrayminus[0] == pytest.approx(e["lo"])
        assert list(view.data["delta"]) == pytest.approx([e["delta"] for e in want])
        assert list(view.data["n"]) == [e["n"] for e in want]
    # a family's bar has that family's colour in the curves; the optimizer's contrast (a dash there) is grey
    curves = {t.name: t.line.color for t in LV.curves_view(lab).figure.data if t.line.color and "adamw" in (t.name or "")}
    bars = _bars(LV.effects_view(lab, "mid_mean_cosine"))
    for fam in ("mamba", "rwkv", "lstm"):
        colour = next(c for name, c in curves.items() if f"arch={fam}" in name)
        assert bars[f"arch: gpt2 → {fam}"].marker.color == colour
    assert bars["optimizer: adamw → sgd"].marker.color == "#8c8c8c"


def test_one_seed_draws_no_interval_and_says_so():
    lab = {**synthetic_lab(seeds=(0,), pending=None, status="done"), "id": "one"}
    view = LV.effects_view(lab)
    assert view.figure is not None
    for b in _bars(view).values():
        assert b.error_y.visible is False
        assert "no interval: 1 seed" in b.text[0] and "no interval:<br>1 seed" in b.x[0]  # said under the bar
    assert view.data["lo"].isna().all() and view.data["hi"].isna().all()
    grid = LV.grid_text(lab)
    assert grid["mean cosine (mid-depth)"].str.endswith("(no interval: 1 seed)").all()


def test_a_lab_without_effects_says_why_instead_of_a_blank_chart(lab):
    view = LV.effects_view({**lab, "effects": []})
    assert view.figure is None and view.notes and "No effect to draw" in view.caption


def key_of(cell: dict) -> tuple:
    return cell["levels"]["arch"], cell["levels"]["optimizer"]


def test_the_grid_reads_each_cell_s_summary_and_says_what_does_not_apply(lab):
    num = LV.grid_view(lab).data.set_index("cell")
    text = LV.grid_text(lab).set_index(["arch", "optimizer"])
    for c in lab["cells"]:
        s = c["summary"]
        row = num.loc[c["cell"]]
        if not any(r["status"] == "done" for r in c["runs"]):  # the pending cell: no number, said as pending
            assert np.isnan(row["mid_mean_cosine"]) and row["state"] == "pending"
            assert text.loc[key_of(c), "mean cosine (mid-depth)"] == "—"
            assert text.loc[key_of(c), "mean cosine first ≥ 0.2"] == "—"
            continue
        for key in ("held_out_loss", "mid_mean_cosine", "mid_centred_mean_cosine", "mid_input_shared",
                    "max_massive_ratio"):
            assert row[key] == pytest.approx(s[key]["mean"]) and row[f"{key}_lo"] == pytest.approx(s[key]["lo"])
            assert row[f"{key}_n"] == s[key]["n"]
        # the first crossing of each threshold: the median step of the seeds that crossed, and how many did
        for t in ("0.2", "0.5"):
            fc = s["first_crossing"][t]
            crossed = sorted(x for x in fc["steps"] if x is not None)
            shown = text.loc[key_of(c), f"mean cosine first ≥ {t}"]
            if crossed:
                assert row[f"first_crossing_{t}_median_step"] == crossed[(len(crossed) - 1) // 2]
                assert shown.startswith(f"step {crossed[(len(crossed) - 1) // 2]:,} ({len(crossed)} of {fc['n']} seed")
            else:
                assert pd.isna(row[f"first_crossing_{t}_median_step"]) and shown == f"never (0 of {fc['n']} seeds)"
        arch = c["levels"]["arch"]
        if arch in NO_ATTENTION:
            assert text.loc[key_of(c), "sink share (mid-depth)"] == f"not applicable: {NO_ATTENTION[arch]}"
            assert row["mid_sink_share_not_applicable"] == NO_ATTENTION[arch]
        else:
            assert text.loc[key_of(c), "sink share (mid-depth)"].startswith(f"{s['mid_sink_share']['mean']:.3g} [")
        assert row["params_total"] == c["runs"][0]["params"]["total"]
    arch, opt, seed = NOT_LEARNED
    bad = text.loc[(arch, opt), "excluded runs"]
    assert bad.startswith(f"seed {seed}: held-out loss 6.400 not below the unigram entropy 6.200: it did not learn")


def test_curves_average_the_learned_seeds_with_their_range_as_band(lab):
    view = LV.curves_view(lab)
    assert view.figure.layout.xaxis.type == "log"
    lines = {t.name.split(" (")[0]: t for t in view.figure.data if t.mode == "lines+markers"}
    bands = [t for t in view.figure.data if t.fill == "toself"]
    cells = {c["cell"]: c for c in lab["cells"]}
    assert set(lines) == {n for n, c in cells.items() if c["summary"]["mid_mean_cosine"]["n"]}  # the pending cell has
    assert "arch=lstm / optimizer=sgd" not in lines  # no curve...
    assert any("no curve (no run finished yet)" in n for n in view.notes)  # ...and says so
    arch, opt, seed = NOT_LEARNED
    c = cells[f"arch={arch} / optimizer={opt}"]
    ok = [r for r in c["runs"] if r["seed"] != seed]
    y = np.mean([r["mid_mean_cosine_by_step"] for r in ok], axis=0)
    t = lines[c["cell"]]
    assert list(t.y) == pytest.approx(list(y))  # the run that did not learn is left out
    assert t.x[0] == 0.5 and list(t.x[1:]) == ok[0]["steps"][1:]  # step 0 drawn at 0.5 on the log axis
    lo = np.min([r["mid_mean_cosine_by_step"] for r in ok], axis=0)
    hi = np.max([r["mid_mean_cosine_by_step"] for r in ok], axis=0)
    assert any(np.allclose(list(b.y), list(hi) + list(lo)[::-1]) for b in bands)
    assert len(view.data) == sum(len(r["steps"]) for cc in cells.values() for r in LV._learned_done(cc))


def test_claims_and_the_papers_block(lab):
    claims = LV.claims_view(lab).data
    assert list(claims["verdict"]) == [c["verdict"] for c in lab["claims"]]
    c0 = lab["claims"][0]
    assert claims.iloc[0]["delta [95% interval]"] == f"{c0['delta']:+.3g} [{c0['lo']:+.3g}, {c0['hi']:+.3g}]"
    # the Papers page: only finished labs count, the newest first; none: "not tested" and how to test it
    assert set(LV.papers_claims([lab]).data["verdict"]) == {"not tested"}  # lab-new is still running
    older = {**synthetic_lab(seeds=(0, 1), pending=None, status="done", seed=3), "id": "lab-old"}
    newer = {**synthetic_lab(archs=("gpt2",), pending=None, status="done"), "id": "lab-gpt2-only"}
    rows = LV.papers_claims([newer, lab, older]).data.set_index("claim")
    row = rows.loc["A non-Transformer trained identically is anisotropic"]
    assert row["lab"] == "lab-old" and row["verdict"] == older["claims"][0]["verdict"]  # the newest with the factor
    assert row["numbers"] == older["claims"][0]["numbers"]
    # the optimizer factor is there but coupled Adam was not a level: the lab's own "not tested" and why
    coupled = rows.loc["Coupled Adam lowers anisotropy"]
    assert coupled["verdict"] == "not tested" and "coupled-adam" in coupled["why"]
    gate = rows.loc["The attention gate removes massive activations"]
    assert gate["why"].startswith("not tested: run the lab with --factor gate") and gate["lab"] == ""


def test_the_reader_lists_newest_first_and_refuses_what_is_not_a_lab(tmp_path, lab):
    write_lab(tmp_path, "lab-old", lab, mtime=1_000)
    write_lab(tmp_path, "lab-new", lab, mtime=2_000)
    (tmp_path / "labs" / "broken.json").write_text("{", encoding="utf-8")
    write_lab(tmp_path, "v2", {**lab, "version": 2})
    write_lab(tmp_path, "nocells", {"kind": "lab", "version": 1, "spec": {"factors": {}}})
    got, notes = LV.list_labs(tmp_path)
    assert [x["id"] for x in got] == ["lab-new", "lab-old"]
    joined = " ".join(notes)
    assert "'broken'" in joined and "damaged" in joined and "version '2'" in joined and "'nocells'" in joined
    assert LV.load_lab("lab-old", tmp_path)["cells"] == json.loads(json.dumps(lab["cells"]))
    for bad in ("../labs/lab-old", "/etc/passwd", "..", ".hidden", "a/b", "x" * 101, ""):
        with pytest.raises(InputError, match="is not a lab id"):
            LV.load_lab(bad, tmp_path)
    with pytest.raises(InputError, match="No lab 'nosuch' is stored here"):
        LV.load_lab("nosuch", tmp_path)
    assert LV.list_labs(tmp_path / "nothing") == ([], [])


def test_lab_and_statistic_round_trip_through_the_url_and_hostile_values_are_refused():
    sel = DEFAULT.replace(lab="lab-1.b_c", lab_stat="max_massive_ratio")
    q = to_query_params(sel, "lab")
    assert q["lab"] == "lab-1.b_c" and q["lstat"] == "max_massive_ratio"
    assert "lab" not in to_query_params(sel, "layers")  # another page's link leaves the Lab's keys out
    back, problems = from_query_params({k: [v] if isinstance(v, str) else v for k, v in q.items()})
    assert back.lab == sel.lab and back.lab_stat == sel.lab_stat and not problems
    for value in ("../../etc/passwd", "/etc", "[a](https://evil.example)", "x" * 300, "a\x00b", "-1"):
        back, problems = from_query_params({"lab": [value], "lstat": [value]})
        assert back.lab is None and back.lab_stat is None
        assert any(p.startswith("URL parameter lab ") for p in problems), problems
        assert any(p.startswith("URL parameter lstat ") for p in problems), problems


def test_the_lab_figures_export_with_their_manifest(lab):
    view = LV.effects_view(lab)
    html = export.export_bytes(view, "html").decode("utf-8")
    assert "lab-new" in html and "Main effects" in html
    doc = json.loads(export.export_bytes(view, "json"))
    assert doc["manifest"]["params"]["lab"] == "lab-new" and doc["manifest"]["params"]["statistic"] == "mid_mean_cosine"
    grid = pd.read_csv(io.BytesIO(export.export_bytes(LV.grid_view(lab), "csv")))
    assert len(grid) == len(lab["cells"]) and "mid_mean_cosine_lo" in grid.columns
    pub = export.publication_figure(LV.curves_view(lab), export.PubStyle(width_in=3.5))
    assert pub.layout.title.text is None and pub.layout.width == round(3.5 * export.CSS_PX_PER_IN)


@pytest.mark.parametrize("damage", [
    lambda d: d.update(cells={"a": 1}),
    lambda d: d["cells"][0].update(summary=[1, 2]),
    lambda d: d["cells"][0].update(summary={"mid_mean_cosine": 0.4}),
    lambda d: d["cells"][0]["runs"].append("run"),
    lambda d: d["cells"][0]["runs"][0].update(steps="0,1,2"),
    lambda d: d["cells"][0]["runs"][0].update(params=[1, 2]),
    lambda d: d.update(effects=["x"]),
    lambda d: d.update(claims={"id": "x"}),
    lambda d: d["spec"].update(factors={"arch": "gpt2"}),
    lambda d: d["spec"].update(base=["gpt2"]),
], ids=["cells", "summary", "summary-value", "run", "steps", "params", "effects", "claims", "levels", "base"])
def test_a_record_of_the_wrong_shape_is_refused_before_any_view_reads_it(lab, damage):
    damage(lab)
    with pytest.raises(InputError, match="damaged|not what a lab writes"):
        LV.check_lab(lab)
