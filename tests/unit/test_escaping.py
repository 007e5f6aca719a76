"""Text from files, tokenizers and URLs shown as text: figures, markdown, CSV (core/base/escape.py)."""

import copy
import re

import numpy as np
import pandas as pd

from core import views
from core.base.escape import csv_cell, html_text, markdown_code, markdown_text, visible
from core.compute.projection import pca_2d, sample_table
from core.views import export
from tests.synthetic import synthetic_run

HOSTILE = "x<br><b>bold</b><a href='https://evil.example'>link</a>"


def test_legend_names_are_escaped():
    _, res = synthetic_run(label=HOSTILE)
    v = views.layer_curves([res], "mean_cosine", "layer", reference=False)
    names = [t.name for t in v.figure.data if t.name]
    assert names and all("<b>" not in n and "<a " not in n and "<br>" not in n for n in names)
    assert any("&lt;b&gt;bold&lt;/b&gt;" in n for n in names)


def test_token_strings_and_invisible_characters_in_hovers():
    st, res = synthetic_run()
    st = copy.copy(st)
    toks = list(st.meta["sample_tokens"])
    toks[0], toks[1] = "<img src=x onerror=alert(1)>", "abc\u202edef\u200b"
    st.meta = {**st.meta, "sample_tokens": toks}
    xy, ev = pca_2d(st.sample(2).astype(float))
    proj = {"xy": xy, "method": "pca", "params": {}, "layer": 2, "post": "raw", "n_points": len(xy),
            "explained_variance": ev}
    table = sample_table(st)
    v = views.projection([(res, proj, table)], "log_frequency")
    text = list(v.figure.data[0].text)
    assert any("&lt;img src=x onerror=alert(1)&gt;" in t for t in text)
    assert not any("<img" in t for t in text)
    assert any("abc&lt;U+202E&gt;def&lt;U+200B&gt;" in t for t in text)
    assert not any("\u202e" in t or "\u200b" in t for t in text)


def test_csv_cells_that_look_like_formulas_are_prefixed():
    _, res = synthetic_run()
    v = views.layer_table([res]) if hasattr(views, "layer_table") else views.layer_curves([res], "mean_cosine",
                                                                                            "layer", reference=False)
    v.data = pd.DataFrame({"token": ["=HYPERLINK(\"http://e\",\"x\")", "+1", "-2", "@SUM(A1)", "plain"],
                           "value": [1.0, -2.0, 3.0, 4.0, 5.0]})
    body = export.data_bytes(v, "csv").decode()
    rows = pd.read_csv(__import__("io").StringIO(body), comment="#")
    assert rows["token"].tolist() == ["'=HYPERLINK(\"http://e\",\"x\")", "'+1", "'-2", "'@SUM(A1)", "plain"]
    assert rows["value"].tolist() == [1.0, -2.0, 3.0, 4.0, 5.0]  # numbers stay numbers
    assert csv_cell(-3) == -3 and csv_cell("a=b") == "a=b"


def test_markdown_escaping():
    for hostile in ("[Your session expired](https://evil.example)", "![x](https://evil.example/p.png)",
                    ":red[alarm] :material/home:", "<img src=x onerror=alert(1)>", "**bold** `code`",
                    "www.evil.example", "write to me@evil.example"):
        out = markdown_text(hostile)
        assert "](" not in out and "![" not in out and ":red[" not in out and not re.search(r"(?<!\\)<img", out)
        assert "**" not in out
        outside_code = re.sub(r"`+ .*? `+", "", out)
        assert "://" not in outside_code and "www." not in outside_code  # autolinks only inside code spans
    assert markdown_text("line one\n\n# heading") == "line one \\# heading"
    assert markdown_code("a`b``c") == "``` a`b``c ```"
    assert markdown_code("x" * 500).count("x") < 130


def test_visible_and_html_text():
    assert visible("plain text") == "plain text"
    assert visible("a\u202eb\u2066c\ufeffd\x07") == "a<U+202E>b<U+2066>c<U+FEFF>d<U+0007>"
    assert html_text("<s>") == "&lt;s&gt;"
    assert np.all([visible(c) == c for c in "äöü€😀中"])  # ordinary non-ASCII stays as it is
