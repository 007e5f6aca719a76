"""Exports: the right bytes for each format, with the run manifest embedded (core/export.py).

Static images go through kaleido and Debian's chromium (~2 s to start, then ~0.2 s an image).
"""

import io
import json
import shutil
import xml.etree.ElementTree as ET
import zipfile

import pandas as pd
import pytest

from core import export, views
from core.analysis import json_safe
from tests.synthetic import synthetic_run

needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None and not shutil.os.path.exists("/usr/bin/chromium"),
                                    reason="kaleido needs a Chromium (apt-get install chromium)")


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
def test_pdf(view):
    pdf = export.figure_bytes(view, "pdf")
    assert pdf.startswith(b"%PDF") and len(pdf) > 5_000


def test_html_is_standalone_with_the_manifest(view, manifest_json):
    html = export.figure_bytes(view, "html").decode()
    assert html.lstrip().startswith("<!-- anisotropy-workbench") and "Plotly.newPlot" in html
    assert 'src="https://cdn.plot.ly' not in html and len(html) > 1_000_000  # plotly.js embedded: works offline
    block = html.split('<script type="application/json" id="manifest">', 1)[1].split("</script>", 1)[0]
    assert json.loads(block.replace("<\\/", "</")) == manifest_json


def test_csv_has_a_commented_manifest_and_reads_back(view, manifest_json):
    csv = export.data_bytes(view, "csv").decode()
    head = [l for l in csv.splitlines() if l.startswith("#")]
    assert json.loads(head[-1].split("# manifest: ", 1)[1]) == manifest_json
    df = pd.read_csv(io.StringIO(csv), comment="#")
    pd.testing.assert_frame_equal(df, view.data.reset_index(drop=True), check_dtype=False)


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
    assert export.file_name(view, "csv") == "outlier_bars_layer2.csv"


@needs_chromium
def test_report_zip(view):
    st, res = synthetic_run()
    vs = [view, views.layer_curves([res], "mean_cosine"), views.compare_summary([res])]
    blob = export.report_zip(vs, [res], selection={"tokens": "600"}, image_formats=("png",))
    z = zipfile.ZipFile(io.BytesIO(blob))
    names = set(z.namelist())
    assert {"figures/outlier_bars_layer2.png", "figures/layers_mean_cosine.png", "data/compare_summary.csv",
            "data/layers_mean_cosine.json", "report.html", "manifest.json",
            "results/synthetic-net.results.json"} <= names
    assert "figures/compare_summary.png" not in names  # a table has no image
    man = json.loads(z.read("manifest.json"))
    assert man["selection"] == {"tokens": "600"} and len(man["views"]) == 3
    assert json.loads(z.read("results/synthetic-net.results.json"))["manifest"]["model"]["label"] == "synthetic-net"
    assert z.read("figures/layers_mean_cosine.png")[:4] == b"\x89PNG"
