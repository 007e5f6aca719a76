"""Issue 28 item 12: a projection coloured by a metadata column of an uploaded table corpus.

One synthetic run of a CSV with a text column, a categorical column (topic) and a numeric one (year), plus
a CSV without those columns beside it for Compare (its own budget: the runs of the other app tests stay
theirs). Each document's words start with its topic, so every sampled token shows
which document value it must take.
"""

from __future__ import annotations

import json

import pytest
import synthetic_runs
from app_helpers import by_title, no_exception

from core.studies.selection import from_query_params

TOPICS = ("rivers", "mountains", "deserts")
PROJ = "of sampled token representations"


@pytest.fixture(scope="module")
def upload(cache_dir):
    import pandas as pd

    from core.inputs.uploads import save_upload, upload_id

    rows = []
    for i in range(30):
        t = TOPICS[i % 3]
        rows.append({"text": " ".join(f"{t}{(i * 7 + j) % 23}" for j in range(30)), "topic": t, "year": 1990 + i})
    rows.insert(5, {"text": "", "topic": "empty", "year": 0})  # no text: no document, and no shift of the others
    path = save_upload(pd.DataFrame(rows).to_csv(index=False).encode(), "topics.csv", cache_dir)
    plain = [{"text": " ".join(f"plain{(i * 5 + j) % 31}" for j in range(30))} for i in range(20)]
    other = save_upload(pd.DataFrame(plain).to_csv(index=False).encode(), "plain.csv", cache_dir)
    uids = upload_id(path), upload_id(other)
    sel, problems = from_query_params({k: [v] for k, v in _query(uids).items()})
    assert not problems
    for spec in sel.specs():  # stored directly (no worker: Run and its jobs are tested elsewhere)
        synthetic_runs.seed(spec)
    return uids


def _query(uids, **kw) -> dict:
    return {"corpus": uids[0], "col": "text", "vs": f"{uids[1]}#text", "tokens": "1500", "sample": "300", **kw}


def test_colour_by_a_categorical_column(app, upload):
    at = app(page="pages/projection.py", **_query(upload, color="meta:topic"))
    no_exception(at)
    assert at.selectbox(key="p_color").value == "meta:topic"
    assert "corpus column: year" in at.selectbox(key="p_color").options  # the other columns are offered
    fig = by_title(at, PROJ)
    groups = {t["name"]: t for t in fig["data"]}
    assert set(TOPICS) <= set(groups) and "empty" not in groups
    assert len({groups[t]["marker"]["color"] for t in TOPICS}) == 3  # distinct legend colours
    for t in TOPICS:  # each token took its own document's value
        assert all(h.startswith(f"<b>{t}") for h in groups[t]["text"]), t
    assert fig["layout"]["legend"]["title"]["text"] == "topic"
    assert "topic" in fig["layout"]["title"]["subtitle"]["text"]
    assert at.query_params["color"] in ("meta:topic", ["meta:topic"])


def test_colour_by_a_numeric_column_and_the_export(app, upload):
    at = app(page="pages/projection.py", **_query(upload, color="meta:year"))
    no_exception(at)
    fig = by_title(at, PROJ)
    (tr,) = [t for t in fig["data"] if t.get("marker", {}).get("coloraxis")]
    assert min(tr["marker"]["color"]) >= 1990 and max(tr["marker"]["color"]) <= 2019  # a colour scale of years
    assert fig["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "year"
    # the CSV and JSON exports carry each point's value (the view as the page draws it)
    from core import views
    from core.compute.pipeline import analyze, get_stats
    from core.compute.projection import project, sample_table
    from core.inputs.corpora import document_metadata
    from core.studies.selection import Selection
    from core.views import export

    spec = Selection(corpus=upload[0], text_column="text", max_tokens=1500, sample=300).spec("minilm-l6")
    table = sample_table(get_stats(spec), document_metadata(spec.corpus, "text"))
    v = views.projection([(analyze(spec), project(spec, 3), table)], "meta:year")
    rows = export.export_bytes(v, "csv").decode().splitlines()
    year = rows[0].split(",").index("year")
    assert {int(r.split(",")[year]) for r in rows[1:]} <= set(range(1990, 2020))
    assert "meta:year" in json.dumps(json.loads(export.export_bytes(v, "json"))["manifest"])


def test_an_unknown_column_from_the_url_is_said_not_raised(app, upload):
    at = app(page="pages/projection.py", **_query(upload, color="meta:<b>nope</b>"))
    no_exception(at)
    msg = " ".join(w.value for w in at.warning)
    assert "no column" in msg and "topic" in msg and "year" in msg
    fig = by_title(at, PROJ)
    assert "log corpus" in fig["layout"]["coloraxis"]["colorbar"]["title"]["text"]
    assert "color" not in at.query_params  # the link drops it


def test_compare_panels_colour_by_the_column_and_name_their_corpus(app, upload):
    at = app(page="pages/compare.py", **_query(upload, color="meta:topic", ctab="projections"))
    no_exception(at)
    fig = by_title(at, PROJ)
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert any("topics.csv" in t for t in titles) and any("plain.csv" in t for t in titles)
    names = {t["name"] for t in fig["data"] if t.get("showlegend")}
    assert set(TOPICS) <= names and "no value" in names  # plain.csv has no topic: grey
    assert any("has no column 'topic'" in c.value for c in at.caption)
    assert at.selectbox(key="c_color").value == "meta:topic"
