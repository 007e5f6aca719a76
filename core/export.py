"""Bytes of every download: figures (PNG, SVG, PDF, standalone HTML), data (CSV, JSON), report zip.

Each export carries the run manifest: PNG in a tEXt chunk plus a caption line under the plot,
SVG in <metadata> plus the caption, PDF in the caption, HTML in layout.meta and a JSON block,
CSV in '#'-commented header lines (pandas: ``read_csv(..., comment="#")``), JSON under "manifest".
Static images go through kaleido 1.x, whose Chromium server is started once per process.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import struct
import threading
import warnings
import zipfile
import zlib
from typing import Sequence

from . import __version__
from . import figures as F
from .analysis import json_safe

FIGURE_FORMATS = ("png", "svg", "pdf", "html")
DATA_FORMATS = ("csv", "json")
MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html",
        "csv": "text/csv", "json": "application/json", "zip": "application/zip"}
PNG_SCALE = 2

_kaleido_lock = threading.Lock()  # kaleido's sync server pairs requests and answers through one queue
_kaleido_started = False


def _ensure_kaleido() -> None:
    global _kaleido_started
    if not _kaleido_started:
        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        _kaleido_started = True


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
    with _kaleido_lock:
        _ensure_kaleido()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "kopts is ignored when using a server"
            img = fig.to_image(format=fmt, width=F.WIDTH, scale=PNG_SCALE if fmt == "png" else 1)
    if fmt == "png":
        return _png_with_text(img, "manifest", mjson)
    if fmt == "svg":
        return _svg_with_metadata(img, mjson)
    return img


def data_bytes(view, fmt: str) -> bytes:
    """The view's data as CSV (manifest in '#' header lines) or JSON ({"manifest", "data"})."""
    if fmt == "csv":
        head = [f"# anisotropy-workbench {__version__}: {view.title}"]
        if view.caption:
            head.append(f"# {view.caption}")
        head.append("# manifest: " + manifest_json(view.manifest))
        return ("\n".join(head) + "\n" + view.data.to_csv(index=False)).encode("utf-8")
    if fmt == "json":
        records = json.loads(view.data.to_json(orient="records", double_precision=15))
        doc = {"manifest": json_safe(view.manifest), "title": view.title, "caption": view.caption,
               "notes": view.notes, "data": records}
        return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")
    raise ValueError(f"fmt must be one of {DATA_FORMATS}, got {fmt!r}")


def export_bytes(view, fmt: str) -> bytes:
    return figure_bytes(view, fmt) if fmt in FIGURE_FORMATS else data_bytes(view, fmt)


def file_name(view, fmt: str) -> str:
    return f"{view.name}.{fmt}"


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
               image_formats: Sequence[str] = ("png", "svg", "pdf")) -> bytes:
    """A zip: every figure as images + CSV + JSON, report.html, and results.json of each run."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        index = []
        for v in views:
            files = []
            if v.figure is not None:
                for fmt in image_formats:
                    z.writestr(f"figures/{file_name(v, fmt)}", figure_bytes(v, fmt))
                    files.append(f"figures/{file_name(v, fmt)}")
            for fmt in DATA_FORMATS:
                z.writestr(f"data/{file_name(v, fmt)}", data_bytes(v, fmt))
                files.append(f"data/{file_name(v, fmt)}")
            index.append({"view": v.name, "title": v.title, "caption": v.caption, "files": files})
        for res in results:
            m = res["manifest"]
            stem = f"{m['model']['id']}".replace("/", "_").replace(" ", "_")
            z.writestr(f"results/{stem}.results.json", json.dumps(json_safe(res), indent=1))
        z.writestr("report.html", report_html(views))
        z.writestr("manifest.json", json.dumps({"app": "anisotropy-workbench", "core_version": __version__,
                                                "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(
                                                    timespec="seconds"),
                                                "selection": selection or {}, "views": index,
                                                "runs": [json_safe(r["manifest"]) for r in results]}, indent=1))
    return buf.getvalue()
