"""The statistic registry (core/stats/registry.py): every declared statistic appears on every surface.

Walks `STATISTICS` and checks the picker, results.json's per-layer rows of a synthetic run, the
post-processing what-if, the Numbers table and its CSV/JSON export, the report zip, Compare,
Dynamics, the definitions and docs/metrics.md. A statistic added to the registry is checked here
without editing this file. Numpy only (no model).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import types
import zipfile

import numpy as np
import pytest

from core import views
from core.base.definitions import ROOT
from core.stats import registry as S
from core.stats.assemble import postprocessed_rows
from core.stats.postprocess import PostProcess
from core.studies.selection import METRICS, SAMPLE_METRICS, Selection
from core.views import dynamics as D
from core.views import export
from tests.synthetic import synthetic_run

SCALARS = [s for s in S.STATISTICS if s.scalar]


def _companions(s: S.Statistic) -> list[str]:
    return [s.key] + ([f"{s.key}_ci"] if s.interval is not None else []) + ([f"{s.key}_isotropic"] if s.baseline else [])


@pytest.fixture(scope="module")
def runs():
    """Two synthetic text runs of different depth (built by the real core.stats.assemble.build_results)."""
    a = synthetic_run(n_layers=5, seed=0, label="net-a")
    b = synthetic_run(n_layers=4, d=16, seed=1, label="net-b")
    return a, b


def _num(v) -> float:
    return math.nan if v is None else float(v)


def test_every_entry_is_complete():
    assert len(S.BY_KEY) == len(S.STATISTICS), "duplicate keys"
    for s in S.STATISTICS:
        assert s.kind in S.KINDS and s.sums and callable(s.kernel), s.key
        assert re.fullmatch(r"[a-z][a-z0-9_]*", s.key), s.key
        if s.scalar:
            assert s.label and s.axis and s.definition is not None, s.key
        if s.kind in ("sample", "per-dim"):
            assert s.definition is not None, s.key
        if s.baseline:
            assert s.on_sample, f"{s.key}: an isotropic baseline is computed from a Gaussian sample"
        if s.adjusts:
            assert s.adjusts in S.BY_KEY, s.key
        if s.sample_twin:
            assert S.BY_KEY[s.sample_twin].kind == "sample", s.key


def test_every_statistic_reads_sums_that_a_run_accumulates(runs):
    (st, _), _ = runs
    for s in S.STATISTICS:
        for name in s.sums:
            assert name == "sample" or name in st.arrays, f"{s.key} reads {name!r}, which a RunStats does not have"


def test_picker_lists_numbers_of_results_json_and_what_ifs_change_sample_ones(runs):
    # checked against what results.json and the what-if rows hold, not against the registry they are made from
    numbers = {k for _, res in runs for row in res["layers"] for k, v in row.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert set(METRICS) <= numbers, set(METRICS) - numbers
    assert list(METRICS)[-1] == "sample_mean_cosine" and list(METRICS)[0] == "mean_cosine"
    labels = [label for label, _ in METRICS.values()]
    assert all(labels) and len(set(labels)) == len(labels), "two picker entries read alike"
    assert all(axis for _, axis in METRICS.values())
    st, res = runs[0]
    rows = postprocessed_rows(st, PostProcess(center=True))
    for key, post_key in SAMPLE_METRICS.items():  # a what-if changes these: its rows hold them
        assert key in METRICS and all(post_key in r for r in rows), key
    assert "mean_cosine" in SAMPLE_METRICS and "n_sample" not in SAMPLE_METRICS


def test_results_layers_hold_every_statistic_and_only_registered_keys(runs):
    for st, res in runs:
        for row in res["layers"]:
            want = ["layer"] + [k for s in S.STATISTICS for k in _companions(s)]
            assert set(row) == set(want), set(row) ^ set(want)
            for s in SCALARS:
                assert row[s.key] is None or isinstance(row[s.key], (int, float)), s.key
        assert [r[f"{k}_isotropic"] for r in res["layers"] for k in S.baseline_keys()].count(None) == 0


def test_post_processing_rows_hold_every_sample_statistic(runs):
    (st, _), _ = runs
    rows = postprocessed_rows(st, PostProcess(center=True))
    for s in S.STATISTICS:
        if s.on_sample:
            assert all(s.key in r for r in rows), s.key
    for key, post_key in SAMPLE_METRICS.items():
        assert all(post_key in r for r in rows), key


def test_token_id_statistics_are_null_and_listed_for_an_image_run(runs):
    from core.stats.assemble import build_results

    (st, _), _ = runs
    img = type(st)(key=st.key + "-img", manifest={**st.manifest, "modality": "image"}, meta=st.meta, arrays=st.arrays)
    res = build_results(img)
    for s in S.STATISTICS:
        if s.modalities and "image" not in s.modalities:
            assert all(r[s.key] is None for r in res["layers"]), s.key
            if s.adjusts is None:
                assert s.key in res["not_applicable"], s.key


def test_numbers_table_and_its_csv_json_export_have_every_column(runs):
    results = [r for _, r in runs]
    v = views.metric_table(results)
    want = [c for c in S.table_columns() if not c.endswith("_ci")] + ["ci_low", "ci_high"]
    for s in S.STATISTICS:
        if s.table:
            assert s.key in v.data.columns, s.key
    assert set(want) <= set(v.data.columns)
    header = next(csv.reader(io.StringIO(export.data_bytes(v, "csv").decode())))
    assert set(want) <= set(header)
    doc = json.loads(export.data_bytes(v, "json"))
    assert set(want) <= set(doc["data"][0])
    for s in SCALARS:  # the numbers themselves
        got = v.data[s.key].to_numpy(dtype=float)
        exp = np.asarray([_num(r[s.key]) for res in results for r in res["layers"]])
        np.testing.assert_array_equal(got, exp)


def test_every_reportable_statistic_is_a_report_curve_and_in_the_zip(runs, monkeypatch):
    from core.views import report

    for s in SCALARS:  # what is left out of the report is an adjustment or the sample twin of another
        assert s.report or s.adjusts or s.key in {t.sample_twin for t in S.STATISTICS}, s.key
    monkeypatch.setattr(report, "project", lambda *a, **k: None)  # projections need the disk cache: not here
    monkeypatch.setattr(report, "sample_table", lambda *a, **k: None)
    monkeypatch.setattr(report.views, "projection", lambda *a, **k: views.compare_summary([runs[0][1]]))
    cached = [(types.SimpleNamespace(model=st.manifest["model"]["label"]), res, st) for st, res in runs]
    vs = report.report_views(Selection(), cached)
    names = {v.name for v in vs}
    for key in S.report_keys():
        assert f"layers_{key}" in names, key
    blob = export.report_zip(vs, [r for _, r, _ in cached], image_formats=())
    z = zipfile.ZipFile(io.BytesIO(blob))
    files = z.namelist()
    for key in S.report_keys():
        assert any(f.startswith(f"data/layers_{key}_") for f in files), key
    table = next(f for f in files if f.startswith("data/layers_table") and f.endswith(".csv"))
    header = next(csv.reader(io.StringIO(z.read(table).decode())))
    assert {s.key for s in S.STATISTICS if s.table} <= set(header)


@pytest.mark.parametrize("key", list(METRICS))
def test_compare_draws_every_picker_statistic_by_depth(runs, key):
    results = [r for _, r in runs]
    v = views.add_seed_bands(views.layer_curves(results, key, "depth", False), results, [[], []], key, "depth")
    measured = [t for t in v.figure.data if t.name and "(N = " in t.name and t.fill in (None, "none")]
    assert len(measured) == 2, key
    for t, res in zip(measured, results):
        np.testing.assert_array_equal(np.asarray(t.y, dtype=float), [_num(r[key]) for r in res["layers"]])
        assert float(t.x[-1]) == 1.0


@pytest.fixture(scope="module")
def series():
    """A checkpoint series of three synthetic steps."""
    results = [synthetic_run(n_layers=4, seed=s, label="net")[1] for s in (0, 1, 2)]
    return {"run": "synthetic", "steps": [0, 1, 2], "results": results,
            "record": {"spec": {"arch": "gpt2", "n_layers": 3, "d_model": 24, "tokenizer": "bpe"}}}


@pytest.mark.parametrize("key", list(METRICS))
def test_dynamics_shows_every_picker_statistic_over_steps(series, key):
    results = series["results"]
    assert key in D.series_table(series).columns
    v = D.metric_heatmap(series, key)
    z = np.asarray(v.figure.data[0].z, dtype=float)
    np.testing.assert_array_equal(z[:, 1], [_num(r[key]) for r in results[1]["layers"]])
    assert key in D.compare_runs({"a": series}, key).data.columns


def test_every_statistic_has_its_definition_and_docs_text():
    for s in S.STATISTICS:
        if s.definition is None:
            continue
        d = S.DEFINITIONS[s.key]
        assert d.short and d.formula and d.high and d.low and d.paper and "\n" not in d.short, s.key
        assert f"`{s.key}`" in (S.docs_section(s.key) or ""), s.key


def test_docs_metrics_names_only_registered_statistics():
    """Every `### \\`key\\`` heading of docs/metrics.md is a statistic of the registry (or one of its
    companions): the docs cannot keep a statistic that no longer exists."""
    text = (ROOT / S.DOCS_PATH).read_text("utf-8")
    headings = re.findall(r"^### `([a-z0-9_]+)`", text, flags=re.M)
    assert headings
    known = {k for s in S.STATISTICS for k in _companions(s)}
    assert set(headings) <= known, set(headings) - known
