"""Bytes of every download: figures (PNG, SVG, PDF, standalone HTML), data (CSV, JSON), report zip.

Each export carries the run manifest: PNG in a tEXt chunk plus a caption line under the plot,
SVG in <metadata> plus the caption, PDF in its document information (pypdf) plus the caption,
HTML in layout.meta and a JSON block, JSON under "manifest". CSV is plain (``pandas.read_csv``
and spreadsheets read it as is): its manifest goes into a sidecar JSON (`sidecar_bytes`).
The publication style (`PubStyle`) drops the title and the caption from the figure itself (the
manifest stays in the file's metadata and the sidecar), sizes it for one or two paper columns,
and gives every line its own dash and marker so it survives greyscale printing.
Static images go through kaleido 1.x, whose Chromium server is started once per process; each
image is bounded by ANISO_EXPORT_TIMEOUT_S (a Chromium that cannot start would otherwise block the
request, and the server's exit, for good). After a timeout, static exports are refused at once with
the same message until the process restarts; the report zip then holds every other file.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import struct
import threading
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

from .. import __version__
from ..base.errors import InputError
from ..base.escape import csv_cell
from ..base.settings import current as current_settings
from ..inputs.uploads import display_name, slug
from ..stats.assemble import json_safe
from . import figures as F

FIGURE_FORMATS = ("png", "svg", "pdf", "html")
DATA_FORMATS = ("csv", "json")
MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
        "csv": "text/csv", "json": "application/json", "zip": "application/zip"}
PNG_SCALE = 2

_kaleido_lock = threading.Lock()  # kaleido's sync server pairs requests and answers through one queue
_kaleido_started = False
_kaleido_failed: str | None = None  # why static export is off in this process (after a timeout)


class StaticExportError(InputError):
    """A static image (PNG, SVG, PDF) could not be made here; HTML and data exports still work."""


def _ensure_kaleido() -> None:
    global _kaleido_started
    if not _kaleido_started:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        _kaleido_started = True


def _kaleido_server():
    """kaleido's process-wide sync server (a private object of kaleido 1.x; None if it moved)."""
    try:
        from kaleido._sync_server import GlobalKaleidoServer
    except ImportError:
        return None
    return GlobalKaleidoServer()


def _give_up_kaleido(why: str) -> StaticExportError:
    """Stop waiting for a Chromium that does not answer: static export off for this process, and kaleido's
    exit hook (which would join the hung thread, so SIGTERM never ends the server) made a no-op."""
    global _kaleido_failed
    _kaleido_failed = why
    server = _kaleido_server()
    if server is not None and getattr(server, "_initialized", False):
        server._initialized = False  # its close() now returns at once; the hung threads are daemons
    return StaticExportError(why)


def _to_image(fig, **kw) -> bytes:
    """fig.to_image through kaleido's server, bounded by ANISO_EXPORT_TIMEOUT_S."""
    if _kaleido_failed:
        raise StaticExportError(_kaleido_failed)
    timeout = current_settings().export_timeout_s
    box: dict = {}

    def work():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "kopts is ignored when using a server"
                box["img"] = fig.to_image(**kw)
        except Exception as e:  # noqa: BLE001 - handed to the caller below
            box["err"] = e

    with _kaleido_lock:
        _ensure_kaleido()
        t = threading.Thread(target=work, name="kaleido-export", daemon=True)
        t.start()
        deadline = time.monotonic() + timeout
        server = _kaleido_server()
        while t.is_alive() and time.monotonic() < deadline:
            t.join(0.2)
            thread = getattr(server, "_thread", None)
            if t.is_alive() and thread is not None and not thread.is_alive():
                break  # kaleido's server died (Chromium failed to start): nobody will answer
        if t.is_alive():
            raise _give_up_kaleido(
                f"Static image export (PNG, SVG, PDF) did not answer within {timeout:g} s: kaleido's Chromium "
                f"could not start here (install it: apt-get install chromium, or set BROWSER_PATH). The HTML "
                f"and data (CSV, JSON) exports work without it; static exports stay off until the server "
                f"restarts (ANISO_EXPORT_TIMEOUT_S sets the wait).")
    if "err" in box:
        e = box["err"]
        raise StaticExportError(f"Static image export (PNG, SVG, PDF) failed: {type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else ''} (is Chromium installed? apt-get "
                                f"install chromium). The HTML and data (CSV, JSON) exports work without it.") from e
    return box["img"]


def manifest_json(manifest: dict, indent: int | None = None) -> str:
    return json.dumps(json_safe(manifest), indent=indent, ensure_ascii=True, sort_keys=False, default=str)


def provenance(manifest: dict) -> list[str]:
    """Lines naming what produced the numbers (for captions under static images): one per run."""
    bits = []
    for m in manifest.get("runs", []):
        mod, cor = m.get("model", {}), m.get("corpus", {})
        bits.append(f"{mod.get('label', '?')} [fp {str(mod.get('fingerprint', ''))[:8]}] on {cor.get('id', '?')} "
                    f"[sha256 {str(cor.get('sha256', ''))[:8]}], {m.get('tokens', {}).get('analysed', '?')} tokens, "
                    f"seed {m.get('seed', '?')}, {m.get('dtype', '?')}/{m.get('device', '?')}")
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    head = f"anisotropy-workbench {__version__}, exported {created}"
    if len(bits) == 1:
        return [f"{head} · {bits[0]}"]
    return [head] + bits


def caption_lines(view) -> list[str]:
    lines = [view.caption] if view.caption else []
    return lines + provenance(view.manifest)


def _static_figure(view):
    return F.with_caption(view.figure, caption_lines(view), meta={"manifest": json_safe(view.manifest)})


# ----------------------------------------------------------------------------- publication style
CSS_PX_PER_IN = 96  # kaleido lays figures out in CSS pixels; PDF/SVG keep the physical size at 96 px/in
PT_PER_IN = 72
COLUMN_WIDTHS_IN = {"one column (3.5 in)": 3.5, "two columns (7 in)": 7.0}
LINE_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
LINE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "triangle-down", "star")


@dataclass(frozen=True)
class PubStyle:
    """A figure for a paper: width in inches (3.5: one column, 7: two), font size in points, no title
    or caption inside the figure, a distinct dash and marker per line (greyscale-safe)."""

    width_in: float = 3.5
    font_pt: float = 8.0
    height_in: float | None = None  # of the plot area (the legend adds to it); None: 0.62 / 0.4 of the width

    def __post_init__(self):
        if not 1.0 <= float(self.width_in) <= 12.0:
            raise ValueError(f"width_in must be in [1, 12] inches, got {self.width_in!r}")
        if not 4.0 <= float(self.font_pt) <= 24.0:
            raise ValueError(f"font_pt must be in [4, 24] points, got {self.font_pt!r}")

    @property
    def size_px(self) -> tuple[int, int]:
        h = self.height_in or self.width_in * (0.62 if self.width_in <= 4 else 0.4)
        return int(round(self.width_in * CSS_PX_PER_IN)), int(round(h * CSS_PX_PER_IN))

    @property
    def font_px(self) -> float:
        return self.font_pt * CSS_PX_PER_IN / PT_PER_IN


def publication_figure(view, style: PubStyle = PubStyle()):
    """A copy of the view's figure in the publication style (see PubStyle); the manifest in layout.meta."""
    import plotly.graph_objects as go

    if view.figure is None:
        raise ValueError(f"view {view.name!r} is a table: no figure to export")
    fig = go.Figure(view.figure)
    w, ph = style.size_px  # ph: the plot area's height; the legend goes under it, one entry a line
    f = style.font_px
    n_legend = sum(1 for t in fig.data if t.showlegend is not False and (t.name or "")) if fig.layout.showlegend \
        is not False else 0
    b = int(3.2 * f + (n_legend * 1.35 * f + 0.5 * f if n_legend else 0))
    t = int(1.0 * f)
    fig.update_layout(title=None, width=w, height=ph + t + b, meta={"manifest": json_safe(view.manifest)},
                      font=dict(size=f, family=F.FONT, color="black"),
                      margin=dict(l=int(4.5 * f), r=int(1.2 * f), t=t, b=b),
                      legend=dict(orientation="v", x=0, xanchor="left", y=-(3.0 * f) / max(ph - t, 1), yanchor="top",
                                  font=dict(size=f * 0.9), bgcolor="rgba(0,0,0,0)", borderwidth=0,
                                  tracegroupgap=0))
    fig.update_annotations(font_size=f * 0.9)
    fig.update_xaxes(title_font_size=f, tickfont_size=f * 0.9, title_standoff=2)
    fig.update_yaxes(title_font_size=f, tickfont_size=f * 0.9, title_standoff=2, automargin=True)
    for ax in [k for k in fig.layout.to_plotly_json() if k.startswith(("xaxis", "yaxis"))]:
        title = fig.layout[ax].title.text
        if title:  # typeset maths, not ASCII (≠, ‖·‖, subscripts)
            fig.layout[ax].title.text = F.pretty_math(title)
    F.hide_thin_bands(fig)  # at this size a thin interval band is invisible: no legend entry for it
    k = 0
    for tr in fig.data:  # every drawn line gets its own dash and marker: readable in greyscale
        if getattr(tr, "type", "") != "scatter" or tr.fill == "toself" or "lines" not in (tr.mode or ""):
            continue
        tr.line.dash = LINE_DASHES[k % len(LINE_DASHES)]
        tr.line.width = 1.2
        tr.marker.symbol = LINE_SYMBOLS[k % len(LINE_SYMBOLS)]
        tr.marker.size = max(3, f * 0.45)
        k += 1
    return fig


def publication_bytes(view, fmt: str = "pdf", style: PubStyle = PubStyle()) -> bytes:
    """The view's figure in the publication style as vector PDF/SVG (or a 300 dpi PNG), manifest in
    the file's metadata; no title, subtitle or provenance line inside the figure."""
    if fmt not in ("pdf", "svg", "png"):
        raise ValueError(f"fmt must be one of ('pdf', 'svg', 'png'), got {fmt!r}")
    fig = publication_figure(view, style)
    w, h = fig.layout.width, fig.layout.height
    img = _to_image(fig, format=fmt, width=w, height=h, scale=300 / CSS_PX_PER_IN if fmt == "png" else 1)
    return _with_metadata(img, fmt, view)


def _pdf_with_metadata(pdf: bytes, view, mjson: str) -> bytes:
    """Title, subject (the caption) and the manifest (a custom /AnisotropyManifest key) in the PDF's info."""
    from pypdf import PdfReader, PdfWriter

    w = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    w.add_metadata({"/Title": view.title, "/Subject": view.caption or view.title,
                    "/Creator": f"anisotropy-workbench {__version__}", "/AnisotropyManifest": mjson})
    out = io.BytesIO()
    w.write(out)
    return out.getvalue()


def pdf_manifest(pdf: bytes) -> dict:
    """The manifest embedded in an exported PDF."""
    from pypdf import PdfReader

    return json.loads(PdfReader(io.BytesIO(pdf)).metadata["/AnisotropyManifest"])


def _with_metadata(img: bytes, fmt: str, view) -> bytes:
    mjson = manifest_json(view.manifest)
    if fmt == "png":
        return _png_with_text(img, "manifest", mjson)
    if fmt == "svg":
        return _svg_with_metadata(img, mjson)
    return _pdf_with_metadata(img, view, mjson)


def _png_with_text(png: bytes, key: str, text: str) -> bytes:
    """Insert a tEXt chunk right after IHDR (PNG readers keep it: PIL's `.text`, exiftool)."""
    sig, ihdr_len = png[:8], struct.unpack(">I", png[8:12])[0]
    cut = 8 + 12 + ihdr_len
    data = key.encode("latin-1") + b"\x00" + text.encode("latin-1", "replace")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data) & 0xFFFFFFFF)
    return sig + png[8:cut] + chunk + png[cut:]


def _svg_with_metadata(svg: bytes, text: str) -> bytes:
    s = svg.decode("utf-8")
    i = s.find(">", s.find("<svg")) + 1
    meta = f'<metadata id="anisotropy-workbench-manifest"><![CDATA[{text.replace("]]>", "]]]]><![CDATA[>")}]]></metadata>'
    return (s[:i] + meta + s[i:]).encode("utf-8")


def figure_bytes(view, fmt: str) -> bytes:
    """The view's figure as png/svg/pdf (kaleido, with a caption line) or standalone html."""
    if view.figure is None:
        raise ValueError(f"view {view.name!r} is a table: no figure to export")
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"fmt must be one of {FIGURE_FORMATS}, got {fmt!r}")
    mjson = manifest_json(view.manifest)
    if fmt == "html":
        fig = F.with_caption(view.figure, caption_lines(view), meta={"manifest": json_safe(view.manifest)})
        body = fig.to_html(include_plotlyjs=True, full_html=True, config={"displaylogo": False},
                           div_id=f"fig-{view.name}")
        head = (f"<!-- anisotropy-workbench {__version__}: {view.title}. The run manifest is in the JSON block "
                f"#manifest and in the figure's layout.meta. -->\n")
        safe = mjson.replace("</", "<\\/")
        block = f'<script type="application/json" id="manifest">{safe}</script>'
        return (head + body.replace("</body>", block + "\n</body>", 1)).encode("utf-8")
    fig = _static_figure(view)
    img = _to_image(fig, format=fmt, width=F.WIDTH, scale=PNG_SCALE if fmt == "png" else 1)
    return _with_metadata(img, fmt, view)


def sidecar_bytes(view, fmt: str = "csv", publication: bool = False) -> bytes:
    """The JSON that travels next to a plain CSV (or a figure): title, caption, notes, columns, manifest."""
    doc = {"app": "anisotropy-workbench", "core_version": __version__, "file": file_name(view, fmt, publication),
           "title": view.title, "caption": view.caption, "notes": view.notes,
           "columns": [str(c) for c in view.data.columns], "manifest": json_safe(view.manifest)}
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")


def sidecar_name(view, fmt: str = "csv", publication: bool = False) -> str:
    return f"{file_name(view, fmt, publication)}.manifest.json"


def data_bytes(view, fmt: str) -> bytes:
    """The view's data as plain CSV (manifest: `sidecar_bytes`) or JSON ({"manifest", "data"})."""
    if fmt == "csv":
        import pandas as pd

        # Cells from data (tokens, contexts, names) that a spreadsheet would run as formulas get a '.
        df = view.data.rename(columns=lambda c: csv_cell(str(c)))
        df = df.apply(lambda c: c.map(csv_cell) if c.dtype == object or pd.api.types.is_string_dtype(c) else c)
        return df.to_csv(index=False).encode("utf-8")
    if fmt == "json":
        records = json.loads(view.data.to_json(orient="records", double_precision=15))
        doc = {"manifest": json_safe(view.manifest), "title": view.title, "caption": view.caption,
               "notes": view.notes, "data": records}
        return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")
    raise ValueError(f"fmt must be one of {DATA_FORMATS}, got {fmt!r}")


def export_bytes(view, fmt: str) -> bytes:
    return figure_bytes(view, fmt) if fmt in FIGURE_FORMATS else data_bytes(view, fmt)


def corpus_part(view) -> str:
    """The corpora of a view's runs as a file-name part ("wiki-en", "my-corpus.csv_text", "wiki-en+wiki-fr")."""
    names = []
    for m in view.manifest.get("runs", []):
        c = m.get("corpus", {}) if isinstance(m, dict) else {}
        if c.get("id"):
            names.append(slug(c.get("name") or display_name(str(c["id"]), c.get("text_column"))))
    return "+".join(dict.fromkeys(names))


def page_view_name(name: str, page: str | None) -> str:
    """The file-name stem of a view exported from a page: the page first ("compare_layers_mean_cosine" from Compare,
    "layers_mean_cosine" from Layers), so the same view exported from two pages keeps apart, and a file says where it
    came from. A name that starts with the page's name (or its singular) is kept as it is.

    >>> page_view_name("layers_mean_cosine", "compare"), page_view_name("outlier_bars_layer3", "outliers")
    ('compare_layers_mean_cosine', 'outlier_bars_layer3')
    """
    if not page:
        return name
    stem = page[:-1] if page.endswith("s") else page
    return name if name.startswith(stem) else f"{page}_{name}"


def file_name(view, fmt: str, publication: bool = False) -> str:
    """<view>__<corpora>[_pub].<fmt>: the corpus as the user named it is part of every exported file name."""
    part = corpus_part(view)
    return f"{view.name}{'__' + part if part else ''}{'_pub' if publication else ''}.{fmt}"


def report_html(views: Sequence, title: str = "Anisotropy report") -> bytes:
    """All figures in one standalone HTML page (plotly.js embedded once), captions and manifests."""
    parts, first = [], True
    for v in views:
        if v.figure is not None:
            parts.append(f"<h2>{F.esc(v.title)}</h2>")
            parts.append(v.figure.to_html(include_plotlyjs=first, full_html=False, config={"displaylogo": False}))
            first = False
        else:
            parts.append(f"<h2>{F.esc(v.title)}</h2>" + v.data.to_html(index=False, border=0, na_rep=""))
        parts.append(f"<p class='cap'>{F.esc(' '.join(caption_lines(v)))}</p>")
    style = ("body{font-family:Arial,Helvetica,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "p.cap{color:#555;font-size:12px}table{border-collapse:collapse;font-size:12px}"
             "td,th{padding:2px 8px;border-bottom:1px solid #ddd}")
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{F.esc(title)}</title><style>{style}</style>"
           f"</head><body><h1>{F.esc(title)}</h1>" + "\n".join(parts) + "</body></html>")
    return doc.encode("utf-8")


def report_zip(views: Sequence, results: Sequence[dict], selection: dict | None = None,
               image_formats: Sequence[str] = ("png", "svg", "pdf"),
               tick: Callable[[int, int, str], None] | None = None) -> bytes:
    """A zip: every figure as images + CSV + JSON, report.html, and results.json of each run.
    `tick(done, total, what)`: called before each view is written (and once at the end); the report job's
    progress, Cancel and time bound (it raises to stop)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        index = []
        static_off = None  # why the static images are missing (Chromium did not answer), once
        for i, v in enumerate(views):
            if tick is not None:
                tick(i, len(views), v.name)
            files = []
            if v.figure is not None:
                for fmt in image_formats:
                    if static_off is None:
                        try:
                            z.writestr(f"figures/{file_name(v, fmt)}", figure_bytes(v, fmt))
                            files.append(f"figures/{file_name(v, fmt)}")
                        except StaticExportError as e:
                            static_off = str(e)
                if static_off:  # the figure as standalone HTML instead (no Chromium needed)
                    z.writestr(f"figures/{file_name(v, 'html')}", figure_bytes(v, "html"))
                    files.append(f"figures/{file_name(v, 'html')}")
            for fmt in DATA_FORMATS:
                z.writestr(f"data/{file_name(v, fmt)}", data_bytes(v, fmt))
                files.append(f"data/{file_name(v, fmt)}")
            z.writestr(f"data/{sidecar_name(v)}", sidecar_bytes(v))
            files.append(f"data/{sidecar_name(v)}")
            index.append({"view": v.name, "title": v.title, "caption": v.caption, "files": files})
        for res in results:
            m = res["manifest"]
            c = m.get("corpus", {})
            stem = f"{m['model']['id']}__{slug(display_name(str(c.get('id', '')), c.get('text_column')))}" \
                .replace("/", "_").replace(" ", "_")
            z.writestr(f"results/{stem}.results.json", json.dumps(json_safe(res), indent=1))
        if static_off:
            z.writestr("figures/STATIC-IMAGES-MISSING.txt", static_off + "\nEach figure is here as standalone HTML.\n")
        if tick is not None:
            tick(len(views), len(views), "report.html and manifest.json")
        z.writestr("report.html", report_html(views))
        z.writestr("manifest.json", json.dumps({"app": "anisotropy-workbench", "core_version": __version__,
                                                "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(
                                                    timespec="seconds"),
                                                "selection": selection or {}, "views": index,
                                                "runs": [json_safe(r["manifest"]) for r in results]}, indent=1))
    return buf.getvalue()


# ----------------------------------------------------------------------------- tables to files (the Python API)
TABLE_SUFFIXES = (".parquet", ".csv")
PARQUET_MANIFEST_KEY = b"aniso.manifest"  # the sidecar's JSON (title, caption, columns, manifest) in the file


def parquet_bytes(view) -> bytes:
    """The view's data as Parquet, the sidecar's JSON (`sidecar_bytes`: manifest, title, caption, columns) in
    the file's key-value metadata under `aniso.manifest` (pyarrow.parquet.read_schema(f).metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(view.data, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[PARQUET_MANIFEST_KEY] = sidecar_bytes(view, "parquet")
    buf = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(meta), buf)
    return buf.getvalue()


def write_table(view, path) -> list:
    """Write the view's data to `path` (.parquet: the manifest inside; .csv: the manifest beside it as
    <path>.manifest.json), each file whole or not at all. Returns the paths written."""
    from pathlib import Path

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise InputError(f"{path.name}: write a table as {' or '.join(TABLE_SUFFIXES)}, not {suffix or '(none)'}.")
    if path.is_dir() or not path.parent.is_dir():
        raise InputError(f"{str(path)!r}: give a file name in an existing folder.")
    files = {path: parquet_bytes(view)} if suffix == ".parquet" else \
        {path: data_bytes(view, "csv"), path.with_name(path.name + ".manifest.json"): sidecar_bytes(view, "csv")}
    for p, data in files.items():
        tmp = p.with_name(f".{p.name}.tmp")
        try:
            tmp.write_bytes(data)
            tmp.replace(p)
        except OSError as e:
            raise InputError(f"Could not write {str(p)!r}: {e.strerror or e}.") from None
        finally:
            tmp.unlink(missing_ok=True)
    return list(files)
