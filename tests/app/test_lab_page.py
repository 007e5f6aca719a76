"""The Lab page and the lab's claims on the Papers page via AppTest, on synthetic lab records written where the lab
stores them (<cache_dir>/labs/<id>.json; tests/synthetic_lab.py): the grid, the curves, the main effects and the
claims come from the stored record; ?lab= and ?lstat= are restored, and hostile values are said and ignored."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
from app_helpers import by_title, figures, no_exception
from synthetic_lab import synthetic_lab, write_lab

PAGE = "pages/lab.py"


@pytest.fixture
def labs(cache_dir):
    """Two stored labs: "lab-old" (finished, one seed, older) and "lab-new" (4 x 2 x 3, still running)."""
    now = time.time()
    old = synthetic_lab(seeds=(0,), pending=None, status="done", seed=1)
    new = synthetic_lab()
    write_lab(cache_dir, "lab-old", old, mtime=now - 3600)
    write_lab(cache_dir, "lab-new", new, mtime=now)
    yield {"lab-old": old, "lab-new": new}
    shutil.rmtree(cache_dir / "labs", ignore_errors=True)


def _effect_bars(at) -> dict[str, float]:
    fig = by_title(at, "Main effects")
    return {t["name"]: float(t["y"][0]) for t in fig["data"] if t["type"] == "bar"}


def _grid(at):
    return next(d.value for d in at.dataframe if "excluded runs" in d.value.columns)


def _row(grid, arch, opt):
    return grid[(grid["arch"] == arch) & (grid["optimizer"] == opt)].iloc[0]


def test_the_newest_lab_is_shown_with_its_grid_curves_effects_and_claims(app, labs):
    at = app(page=PAGE)
    no_exception(at)
    assert next(s for s in at.selectbox if s.key == "lab_pick").value == "lab-new"  # newest first
    grid = _grid(at)
    assert len(grid) == 8
    mamba = _row(grid, "mamba", "adamw")
    assert mamba["sink share (mid-depth)"] == "not applicable: Mamba has no attention (a selective state-space model)"
    rwkv = _row(grid, "rwkv", "sgd")
    assert rwkv["excluded runs"].startswith("seed 1: held-out loss 6.400 not below the unigram entropy 6.200")
    assert "(n=2)" in rwkv["mean cosine (mid-depth)"]  # the run that did not learn is not averaged in
    assert _row(grid, "lstm", "sgd")["state"] == "pending"
    # one curve per cell with a finished run that learned (the pending cell has none, and says so)
    curves = by_title(at, "Mid-depth mean cosine over training")
    lines = [t for t in curves["data"] if t.get("mode") == "lines+markers"]
    assert len(lines) == 7 and curves["layout"]["xaxis"]["type"] == "log"
    assert any("arch=lstm / optimizer=sgd: no curve (no run finished yet)" in c.value.replace("\\", "") for c in at.caption)
    # the effects chart draws the record's numbers, with their intervals
    want = {f"{e['factor']}: {e['from']} → {e['to']}": e for e in labs["lab-new"]["effects"]
            if e["statistic"] == "mid_mean_cosine"}
    bars = _effect_bars(at)
    assert bars.keys() == want.keys()
    for name, e in want.items():
        assert bars[name] == pytest.approx(e["delta"])
    claims = next(t.value for t in at.table if "verdict" in t.value.columns)
    assert list(claims["verdict"]) == [c["verdict"] for c in labs["lab-new"]["claims"]]


def test_the_url_restores_the_lab_and_the_statistic(app, labs):
    at = app(page=PAGE, lab="lab-old", lstat="max_massive_ratio")
    no_exception(at)
    assert not at.warning, [w.value for w in at.warning]
    assert next(s for s in at.selectbox if s.key == "lab_pick").value == "lab-old"
    assert at.query_params.get("lab") in ("lab-old", ["lab-old"])
    bars = _effect_bars(at)
    want = {f"{e['factor']}: {e['from']} → {e['to']}": e["delta"] for e in labs["lab-old"]["effects"]
            if e["statistic"] == "max_massive_ratio"}
    assert bars == pytest.approx(want)
    fig = by_title(at, "Main effects")
    assert all(not t.get("error_y", {}).get("visible", True) for t in fig["data"] if t["type"] == "bar")  # 1 seed
    assert all("no interval:<br>1 seed" in t["x"][0] for t in fig["data"] if t["type"] == "bar")  # said under the bar
    # picking another lab writes it into the URL
    next(s for s in at.selectbox if s.key == "lab_pick").set_value("lab-new").run()
    no_exception(at)
    assert at.query_params.get("lab") in ("lab-new", ["lab-new"])


@pytest.mark.parametrize("value", ["../../etc/passwd", "[Login](https://evil.example)", "nosuchlab", "x" * 300,
                                   ":red[danger]"])
def test_hostile_lab_ids_are_said_and_the_newest_lab_shown(app, labs, value):
    at = app(page=PAGE, lab=value, lstat="../x")
    no_exception(at)
    warned = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "URL parameter lab" in warned and "URL parameter lstat" in warned, warned
    for w in at.warning:
        assert "](" not in w.value and ":red[" not in w.value, w.value
    assert next(s for s in at.selectbox if s.key == "lab_pick").value == "lab-new"
    assert at.query_params.get("lab") in (None, [], "")


def test_a_damaged_lab_file_is_said_not_drawn(app, labs, cache_dir):
    (cache_dir / "labs" / "broken.json").write_text("{not json", encoding="utf-8")
    (cache_dir / "labs" / "foreign.json").write_text('{"kind": "paper"}', encoding="utf-8")
    at = app(page=PAGE)
    no_exception(at)
    warned = " ".join(w.value for w in at.warning)
    assert "broken" in warned and "damaged" in warned and "not a lab record" in warned
    assert [o.split(" · ")[0] for o in next(s for s in at.selectbox if s.key == "lab_pick").options] == \
        ["lab-new", "lab-old"]


def test_without_a_lab_the_page_offers_the_form(app, cache_dir):
    shutil.rmtree(cache_dir / "labs", ignore_errors=True)
    at = app(page=PAGE)
    no_exception(at)
    assert any("No lab is stored yet" in i.value for i in at.info)
    at.button(key="lab_quick").click().run()
    no_exception(at)
    assert at.number_input(key="lab_steps").value == 500 and at.number_input(key="lab_seeds").value == 1
    # issue 41's quick lab: the four families, every one of which this version trains
    assert at.multiselect(key="lab_f_arch").value == ["gpt2", "mamba", "rwkv", "lstm"]


def test_the_papers_page_shows_the_lab_claims_beside_godey(app, labs):
    at = app(page="pages/papers.py")
    no_exception(at)
    t = next(t.value for t in at.table if "verdict" in t.value.columns and "lab" in t.value.columns)
    # the newest *finished* lab with the factor: lab-old (lab-new is still running)
    row = t.loc["A non-Transformer trained identically is anisotropic"]
    claim = next(c for c in labs["lab-old"]["claims"] if c["id"] == "non_transformer_anisotropic")
    assert row["verdict"] == claim["verdict"] and row["lab"] == "lab-old"
    assert row["numbers"] == claim["numbers"]
    gate = t.loc["The attention gate removes massive activations"]
    assert gate["verdict"] == "not tested" and "run the lab with --factor gate" in gate["why"]


def test_the_papers_page_says_how_to_test_without_a_lab(app, cache_dir):
    shutil.rmtree(cache_dir / "labs", ignore_errors=True)
    at = app(page="pages/papers.py")
    no_exception(at)
    t = next(t.value for t in at.table if "verdict" in t.value.columns and "lab" in t.value.columns)
    assert set(t["verdict"]) == {"not tested"}
    assert "run the lab with --factor arch=gpt2,mamba,rwkv,lstm --seeds 3 (or the Lab page)" in \
        t.loc["A non-Transformer trained identically is anisotropic"]["why"]
    assert not np.any([f for f in figures(at) if "Main effects" in str(f["layout"].get("title"))])


def test_a_lab_needs_a_factor_with_two_levels(app, labs):
    at = app(page=PAGE)
    at.multiselect(key="lab_f_arch").set_value(["gpt2"])
    at.button(key="FormSubmitter:lab_form-Start the lab").click().run()
    no_exception(at)
    assert any("Choose two or more levels of at least one factor" in e.value for e in at.error), \
        [e.value for e in at.error]


def test_the_form_queues_one_lab_job_that_the_lab_reads(app, cache_dir, monkeypatch):
    """The submit path (lead, at the merge): the form's grid becomes one queued job of kind "lab" whose params the
    lab itself reads (core.studies.lab.LabSpec); submitting the same grid again joins that job."""
    from core.entry import jobs
    from core.studies.lab import LabSpec

    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")  # queued, not run: the lab's runs are test_lab.py's
    at = app(page=PAGE)
    at.multiselect(key="lab_f_arch").set_value(["gpt2", "llama"])
    at.button(key="FormSubmitter:lab_form-Start the lab").click().run()
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    [job] = jobs.list_jobs(kinds=("lab",))
    assert job.status == jobs.QUEUED and "gpt2" in job.label and "llama" in job.label
    spec = LabSpec.from_dict(job.params["lab"])
    assert spec.factors == {"arch": ["gpt2", "llama"]} and len(spec.cells()) == 2
    at.button(key="FormSubmitter:lab_form-Start the lab").click().run()  # a second click: the same job
    assert [j.id for j in jobs.list_jobs(kinds=("lab",))] == [job.id]
    jobs.cancel(job.id)  # never run: a worker a later test starts in this cache would train the whole grid
    assert not jobs.status(job.id).active
