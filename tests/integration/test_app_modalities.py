"""Every page with a text, an image and a speech model selected together (AppTest, real models: the
item layouts of images and audio come from the models' adapters; tests/app runs on synthetic text runs).

The three runs are computed once through the pipeline with the selection's own specs, so the app
loads them from the cache; token-id metrics must say "not applicable" for images and audio.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
from app_helpers import TIMEOUT, app_factory, entrypoint_runs_every_time, figures, no_exception  # noqa: E402

from core.compute.pipeline import analyze  # noqa: E402
from core.entry import worker  # noqa: E402
from core.studies.selection import GODEY_PRESET, Selection  # noqa: E402

pytestmark = pytest.mark.slow

MODELS = ("minilm-l6", "untrained-vit-s14", "untrained-whisper-tiny")
QUERY = {"tokens": "600", "sample": "300", "seeds": "1"}  # one seed per control: no band to compute
PAGES = ["pages/layers.py", "pages/outliers.py", "pages/projection.py", "pages/compare.py"]


@pytest.fixture(autouse=True, scope="module")
def _app_module(cache_dir):
    """As tests/app/conftest.py: the entrypoint on every rerun; the worker stopped at the end."""
    with entrypoint_runs_every_time():
        yield
    worker.stop_worker(cache_dir)


@pytest.fixture
def app(cache_dir):
    """As tests/app/conftest.py's factory, with room for three models on a busy machine."""
    return app_factory(TIMEOUT * 4)


@pytest.fixture(scope="module")
def computed(cache_dir):
    sel = Selection(models=MODELS, max_tokens=600, sample=300, control_seeds=1)
    out = {s.model: analyze(s, cache_dir) for s in sel.specs()}
    assert [s.corpus for s in sel.specs()] == ["wiki-en", "images-crops", "speech-human"]
    return out


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("page", PAGES)
def test_three_modalities_every_page(app, computed, page):
    at = app(models=MODELS, page=page, **QUERY)
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    figs = figures(at)
    assert figs and all(f["data"] for f in figs)  # never an empty chart
    if page.endswith("layers.py"):
        names = [t["name"] for t in figs[0]["data"] if t.get("fill") != "toself"]
        assert sum(any(k in n for n in names) for k in ("MiniLM", "ViT", "Whisper")) == 3
        at.session_state["layers_section"] = "At one layer"
        at.run()
        no_exception(at)
        assert "not applicable" in _captions(at)  # frequency deciles: images and audio left out, said so
    if page.endswith("compare.py"):
        curves = figs[0]
        assert len([t for t in curves["data"] if t.get("fill") != "toself"]) >= 3


def test_image_model_outliers_and_projection(app, computed):
    at = app(models=MODELS, page="pages/outliers.py", focus="untrained-vit-s14", **QUERY)
    no_exception(at)
    at.session_state["outliers_section"] = "Frequency"
    at.run()
    no_exception(at)
    assert "Not applicable" in _captions(at)  # the frequency link needs token ids
    at = app(models=MODELS, page="pages/projection.py", focus="untrained-vit-s14", **QUERY)
    no_exception(at)
    hover = " ".join(str(h) for f in figures(at) for t in f["data"] for h in (t.get("hovertext") or t.get("text") or []))
    assert "patch row" in hover and "crop" in hover  # image and patch on hover
    assert "coloured by patch position" in _captions(at)


def test_audio_projection_hover_shows_clip_and_time(app, computed):
    at = app(models=MODELS, page="pages/projection.py", focus="untrained-whisper-tiny", **QUERY)
    no_exception(at)
    hover = " ".join(str(h) for f in figures(at) for t in f["data"] for h in (t.get("hovertext") or t.get("text") or []))
    assert re.search(r"\d+\.\d\d s", hover), hover[:300]  # the clip and the time in seconds
    assert "time in the clip" in _captions(at)


def test_godey_preset_selects_every_modality(app, computed):
    at = app(page="pages/compare.py", **QUERY)
    at.button(key="c_godey").click().run()
    no_exception(at)
    assert list(at.query_params["models"]) == list(GODEY_PRESET)
    assert at.query_params["x"] == ["depth"] or at.query_params["x"] == "depth"
