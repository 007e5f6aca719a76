"""The Attention page via AppTest on a synthetic run: the controlled experiment and its errors.

Computing the attention statistics needs the model: that flow (the button's job, heatmaps equal to the
section, the outlier link, the single-window viewer beside its ablated twin) is in
tests/integration/test_app_models.py."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import by_title, no_exception
from synthetic_runs import seed

from core.studies.selection import Selection

PAGE = "pages/attention.py"
TOKENS = 1500  # not the other app tests' selection: their first test expects a cold cache
SEQ = 128


@pytest.fixture(scope="module")
def spec(cache_dir):
    s = Selection(models=("minilm-l6",), max_tokens=TOKENS, sample=500, max_seq_len=SEQ).spec("minilm-l6")
    seed(s)  # the run itself is cached (as after pressing Run); its attention is not
    return s


def test_controlled_experiment_from_the_page(app, spec):
    at = app(page=PAGE, tokens=str(TOKENS), seqlen=str(SEQ))
    at.text_input(key="dr_alphas").set_value("0, 1, 3")
    at.text_input(key="dr_taus").set_value("0.5, 2")
    at.number_input(key="dr_d").set_value(32)
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    no_exception(at)
    cos = by_title(at, "Controlled experiment: output mean cosine")
    titles = [a["text"] for a in cos["layout"]["annotations"]]
    assert "query and key drift (isolated)" in titles and "input drift (baseline)" in titles  # side by side, named
    iso, base = (np.asarray(t["z"]) for t in cos["data"][:2])
    assert iso.shape == base.shape == (3, 2)
    assert (np.diff(base, axis=0) > 0).all()  # the baseline grows with alpha at each tau (anisotropic inputs)
    ent = np.asarray(by_title(at, "Controlled experiment: attention entropy")["data"][0]["z"])
    assert (ent[-1] < ent[0]).all()  # the isolated query drift sharpens attention
    found = [t.value for t in at.table if "verdict" in t.value.columns]
    assert found and any("Baseline, input drift" in c for c in found[0].index)
    at.text_input(key="dr_taus").set_value("0, 1")
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    no_exception(at)
    assert any("taus" in e.value for e in at.error)
    at.text_input(key="dr_taus").set_value("one")
    at.button(key="FormSubmitter:drift-Run experiment").click().run()
    assert at.error and not at.exception
