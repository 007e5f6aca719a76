"""Exports: the right bytes for each format, with the run manifest embedded (core/views/export.py).

Static images go through kaleido and Debian's chromium (~2 s to start, then ~0.2 s an image).
"""

import io
import json
import shutil
import xml.etree.ElementTree as ET
import zipfile

import pandas as pd
import pytest

from core import views
from core.stats.assemble import json_safe
from core.views import export
from tests.synthetic import synthetic_run

_no_chromium = pytest.mark.skipif(shutil.which("chromium") is None and not shutil.os.path.exists("/usr/bin/chromium"),
                                  reason="kaleido needs a Chromium (apt-get install chromium)")


def needs_chromium(test):
    """A test that starts a real Chromium (2-7 s each): `slow`, so out of the fast tier, and skipped without one."""
    return pytest.mark.slow(_no_chromium(test))


@pytest.fixture(scope="module")
def view():
    st, res = synthetic_run()
    return views.outlier_bars(st, res, 2)


@pytest.fixture(scope="module")
def manifest_json(view):
    return json.loads(json.dumps(json_safe(view.manifest)))


def _png_text_chunks(png: bytes) -> dict:
    out, i = {}, 8
    while i < len(png):
        n = int.from_bytes(png[i:i + 4], "big")
        kind = png[i + 4:i + 8]
        if kind == b"tEXt":
            k, v = png[i + 8:i + 8 + n].split(b"\x00", 1)
            out[k.decode()] = v.decode("latin-1")
        i += 12 + n
    return out


@needs_chromium
def test_png_is_a_png_with_the_manifest(view, manifest_json):
    png = export.figure_bytes(view, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert json.loads(_png_text_chunks(png)["manifest"]) == manifest_json
    from PIL import Image  # the inserted chunk keeps the file valid (CRC checked on load)

    img = Image.open(io.BytesIO(png))
    img.load()
    assert img.size == (2 * 960, img.size[1]) and json.loads(img.text["manifest"])["view"] == "outlier_bars"


@needs_chromium
def test_svg_is_xml_with_metadata_and_caption(view, manifest_json):
    svg = export.figure_bytes(view, "svg")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    meta = root.find("{http://www.w3.org/2000/svg}metadata")
    assert meta is not None and json.loads(meta.text) == manifest_json
    assert b"anisotropy-workbench" in svg and b"synthetic-net" in svg  # the caption line under the plot


@needs_chromium
def test_pdf_has_the_manifest_in_its_metadata(view, manifest_json):
    pdf = export.figure_bytes(view, "pdf")
    assert pdf.startswith(b"%PDF") and len(pdf) > 5_000
    assert export.pdf_manifest(pdf) == manifest_json


@needs_chromium
def test_publication_pdf_is_sized_titleless_and_carries_the_manifest(manifest_json):
    from pypdf import PdfReader

    _, res = synthetic_run()
    v = views.layer_curves([res, res], "mean_cosine", reference=True)
    for width in (3.5, 7.0):
        pdf = export.publication_bytes(v, "pdf", export.PubStyle(width_in=width, font_pt=8))
        page = PdfReader(io.BytesIO(pdf)).pages[0]
        assert abs(float(page.mediabox.width) - width * 72) < 2  # points: 3.5 in = 252 pt
        text = page.extract_text()
        assert "by layer" not in text and "anisotropy-workbench" not in text  # no title, no footer
        assert export.pdf_manifest(pdf)["view"] == "layer_curves"
    fig = export.publication_figure(v, export.PubStyle(width_in=3.5, font_pt=9))
    lines = [t for t in fig.data if t.mode and "lines" in t.mode and t.fill != "toself"]
    assert len({(t.line.dash, t.marker.symbol) for t in lines}) == len(lines)  # greyscale: each line its own style
    assert fig.layout.title.text is None and fig.layout.font.size == pytest.approx(12)  # 9 pt at 96 px/in
    svg = export.publication_bytes(v, "svg", export.PubStyle(width_in=7.0))
    assert b"<metadata" in svg and b"by layer" not in svg
    with pytest.raises(ValueError, match="font_pt"):
        export.PubStyle(font_pt=40)


def test_html_is_standalone_with_the_manifest(view, manifest_json):
    html = export.figure_bytes(view, "html").decode()
    assert html.lstrip().startswith("<!-- anisotropy-workbench") and "Plotly.newPlot" in html
    assert 'src="https://cdn.plot.ly' not in html and len(html) > 1_000_000  # plotly.js embedded: works offline
    block = html.split('<script type="application/json" id="manifest">', 1)[1].split("</script>", 1)[0]
    assert json.loads(block.replace("<\\/", "</")) == manifest_json


def test_csv_is_plain_and_its_manifest_is_a_sidecar(view, manifest_json):
    csv = export.data_bytes(view, "csv").decode()
    assert not csv.startswith("#")
    df = pd.read_csv(io.StringIO(csv))  # plain: no comment= needed
    pd.testing.assert_frame_equal(df, view.data.reset_index(drop=True), check_dtype=False)
    side = json.loads(export.sidecar_bytes(view, "csv"))
    assert side["manifest"] == manifest_json and side["file"] == export.file_name(view, "csv")
    assert side["columns"] == list(df.columns)
    assert export.sidecar_name(view) == export.file_name(view, "csv") + ".manifest.json"


def test_json_holds_manifest_and_data(view, manifest_json):
    doc = json.loads(export.data_bytes(view, "json"))
    assert doc["manifest"] == manifest_json and doc["title"] == view.title
    assert len(doc["data"]) == len(view.data) and doc["data"][5]["outlier"] is True


def test_tables_have_no_figure_and_formats_are_checked(view):
    _, res = synthetic_run()
    with pytest.raises(ValueError, match="table"):
        export.figure_bytes(views.compare_summary([res]), "png")
    with pytest.raises(ValueError, match="fmt"):
        export.export_bytes(view, "gif")
    assert export.file_name(view, "csv") == "outlier_bars_layer2__synthetic.csv"


@needs_chromium
def test_report_zip(view):
    st, res = synthetic_run()
    vs = [view, views.layer_curves([res], "mean_cosine"), views.compare_summary([res])]
    blob = export.report_zip(vs, [res], selection={"tokens": "600"}, image_formats=("png",))
    z = zipfile.ZipFile(io.BytesIO(blob))
    names = set(z.namelist())
    c = "__synthetic"
    assert {f"figures/outlier_bars_layer2{c}.png", f"figures/layers_mean_cosine{c}.png", f"data/compare_summary{c}.csv",
            f"data/compare_summary{c}.csv.manifest.json", f"data/layers_mean_cosine{c}.json", "report.html",
            "manifest.json", "results/synthetic-net__synthetic.results.json"} <= names
    assert f"figures/compare_summary{c}.png" not in names  # a table has no image
    man = json.loads(z.read("manifest.json"))
    assert man["selection"] == {"tokens": "600"} and len(man["views"]) == 3
    assert json.loads(z.read("results/synthetic-net__synthetic.results.json"))["manifest"]["model"]["label"] == "synthetic-net"
    assert z.read(f"figures/layers_mean_cosine{c}.png")[:4] == b"\x89PNG"


HUNG_EXPORT = r"""
import sys, time, zipfile, io
from core import views
from core.views import export
from tests.synthetic import synthetic_run
_, res = synthetic_run()
view = views.layer_curves([res], "mean_cosine", "layer", reference=False)
t0 = time.monotonic()
try:
    export.figure_bytes(view, "png")
except export.StaticExportError as e:
    print("REFUSED", round(time.monotonic() - t0, 1), str(e))
t1 = time.monotonic()
try:
    export.figure_bytes(view, "pdf")
except export.StaticExportError as e:
    print("AGAIN", round(time.monotonic() - t1, 1))
z = zipfile.ZipFile(io.BytesIO(export.report_zip([view], [res])))
print("ZIP", sorted(n for n in z.namelist() if n.startswith("figures/")))
print("NOTE", z.read("figures/STATIC-IMAGES-MISSING.txt").decode().splitlines()[0][:40])
"""


@pytest.mark.slow  # waits out ANISO_EXPORT_TIMEOUT_S (4 s) in a fresh interpreter
@pytest.mark.parametrize("browser", ["hangs", "fails"])
def test_a_chromium_that_cannot_start_gives_a_message_within_the_timeout(tmp_path, browser):
    """Issue 27 item 13: Export never answered and the server then ignored SIGTERM. A fake Chromium
    that hangs (or exits at once): the export says why within ANISO_EXPORT_TIMEOUT_S, the next one at
    once, the report zip holds HTML figures instead, and the process exits (nothing left to join)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n" + ("exec sleep 600\n" if browser == "hangs" else "exit 1\n"))
    fake.chmod(0o755)
    env = {**os.environ, "BROWSER_PATH": str(fake), "ANISO_EXPORT_TIMEOUT_S": "4"}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", HUNG_EXPORT], cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    lines = {ln.split(" ", 1)[0]: ln for ln in out.stdout.splitlines()}
    assert "REFUSED" in lines, out.stdout + out.stderr[-3000:]
    assert float(lines["REFUSED"].split()[1]) <= 4 + 2 and "Chromium" in lines["REFUSED"]
    assert float(lines["AGAIN"].split()[1]) < 1  # refused at once from then on
    assert "mean_cosine" in lines["ZIP"] and ".html" in lines["ZIP"] and ".png" not in lines["ZIP"]
    assert "Static image export" in lines["NOTE"]
    assert took < 60  # and the process ended: kaleido's exit hook no longer joins a hung thread


def test_publication_figure_typesets_the_axis_maths_and_drops_invisible_bands():
    from core.views import figures as F

    _, res = synthetic_run()
    v = views.layer_curves([res], "mean_cosine", reference=False)
    ytitle = v.figure.layout.yaxis.title.text
    fig = export.publication_figure(v)
    if "!=" in ytitle or "_" in ytitle:  # the registry's ASCII axis label, typeset (issue 28 item 9)
        assert "!=" not in fig.layout.yaxis.title.text and ("≠" in fig.layout.yaxis.title.text
                                                           or "<sub>" in fig.layout.yaxis.title.text)
    x = list(range(5))
    series = [{"name": "thin", "x": x, "y": [0.0, 0.2, 0.5, 0.8, 1.0], "color": 0, "band_name": "thin: 95% CI",
               "band": ([v - 1e-4 for v in [0.0, 0.2, 0.5, 0.8, 1.0]], [v + 1e-4 for v in [0.0, 0.2, 0.5, 0.8, 1.0]])},
              {"name": "wide", "x": x, "y": [0.5] * 5, "color": 1, "band_name": "wide: 95% CI",
               "band": ([0.3] * 5, [0.7] * 5)}]
    chart = F.line_chart(series, title="t", subtitle="s", x_title="x", y_title="mean cos(x_i, x_j), i != j")
    bands = {t.name: t.showlegend for t in chart.data if t.fill == "toself"}
    assert bands == {"thin: 95% CI": False, "wide: 95% CI": True}  # no legend entry for a band nobody can see
    assert export.publication_figure(views.View("t", "t", chart, pd.DataFrame(), {})).layout.yaxis.title.text \
        == "mean cos(x<sub>i</sub>, x<sub>j</sub>), i ≠ j"


def test_an_export_is_named_after_its_page():
    """Issue 36 item 7: a figure exported from Compare was named layers_... (the view's own name)."""
    assert export.page_view_name("layers_mean_cosine", "compare") == "compare_layers_mean_cosine"
    assert export.page_view_name("layers_mean_cosine", "layers") == "layers_mean_cosine"
    assert export.page_view_name("mean_cosine_difference", "compare") == "compare_mean_cosine_difference"
    assert export.page_view_name("outlier_bars_layer3", "outliers") == "outlier_bars_layer3"
    assert export.page_view_name("godey_claims", "papers") == "papers_godey_claims"
    assert export.page_view_name("layers_mean_cosine", None) == "layers_mean_cosine"
