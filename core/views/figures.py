"""Every Plotly figure of the product: plain data in, go.Figure out (no streamlit, no pipeline).

One template for all figures, fit for a paper: white background, black axis lines, axis titles
with units, the Okabe-Ito colour-blind-safe palette, the model and corpus in legend names and
the sample size in every subtitle. `core.views` derives the data; pages only display.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import colorcet as _cc
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..base.escape import html_text

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
HIGHLIGHT = "#D55E00"  # vermillion: outliers, search matches
MUTED = "#B3B3B3"
# Categories (a metadata column's values): Okabe-Ito without its faint yellow, then three of Tol's muted
# colours; the rarer categories are grouped in MUTED.
CATEGORICAL = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#882255", "#999933",
               "#44AA99"]
MISSING = "#DDDDDD"  # no value (an empty cell, or a run whose corpus has no such column)
REFERENCE = "#555555"
# Published curves: grey, told apart by dash and marker (never mistaken for a measured colour).
REFERENCE_STYLES = [("dot", "x-thin"), ("dashdot", "cross-thin"), ("longdash", "asterisk-open"), ("dash", "y-up-open")]
SEQUENTIAL = "Viridis"  # perceptually uniform, colour-blind safe
WIDTH, HEIGHT = 960, 520  # export size in CSS pixels (PNG is rendered at scale 2)
SUBTITLE_CHARS = 88  # subtitle line length that fits a half-width figure in the app
FONT = "Arial, Helvetica, sans-serif"

_axis = dict(showline=True, linecolor="black", linewidth=1, ticks="outside", tickcolor="black",
             mirror=False, showgrid=True, gridcolor="#E6E6E6", zeroline=False, title=dict(standoff=8))
TEMPLATE = go.layout.Template(layout=go.Layout(
    font=dict(family=FONT, size=13, color="#222222"),
    paper_bgcolor="white", plot_bgcolor="white", colorway=OKABE_ITO,
    xaxis=_axis, yaxis=_axis,
    # Title block pinned to the top: margins below it are free for legends and panel titles.
    title=dict(x=0.0, xanchor="left", yref="container", y=1.0, yanchor="top", pad=dict(t=14, l=6),
               font=dict(size=16), subtitle=dict(font=dict(size=12, color="#555555"))),
    legend=dict(bgcolor="rgba(255,255,255,0.85)", bordercolor="#CCCCCC", borderwidth=1, font=dict(size=11)),
    margin=dict(l=70, r=30, t=80, b=60),
    hoverlabel=dict(font=dict(family=FONT, size=12), align="left"),
    colorscale=dict(sequential=SEQUENTIAL),
))


def color(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


_MATH_WORDS = {"mu": "μ", "sigma": "σ", "Delta": "Δ", "lambda": "λ", "tau": "τ", "alpha": "α"}


def pretty_math(text: str) -> str:
    """ASCII maths in a (plotly) label as typeset text: ``!=`` -> ≠, ``<=``/``>=`` -> ≤/≥, ``||x||`` ->
    ‖x‖, Greek names -> letters, ``x_i`` -> x<sub>i</sub> (one-character subscripts only), `` - `` -> −.

    >>> pretty_math("mean cos(x_i, x_j), all pairs i != j")
    'mean cos(x<sub>i</sub>, x<sub>j</sub>), all pairs i ≠ j'
    >>> pretty_math("||mu_Q|| / E||q||")
    '‖μ<sub>Q</sub>‖ / E‖q‖'
    """
    import re

    s = str(text).replace("!=", "≠").replace("<=", "≤").replace(">=", "≥").replace("||", "‖").replace(" - ", " − ")
    s = re.sub(r"\b(" + "|".join(_MATH_WORDS) + r")(?=\b|_)", lambda m: _MATH_WORDS[m.group(1)], s)
    return re.sub(r"(?<![A-Za-z0-9_])([A-Za-zμσλτα])_([A-Za-z0-9])(?![A-Za-z0-9_])", r"\1<sub>\2</sub>", s)


def esc(s: str) -> str:
    """Text safe for Plotly's HTML-ish labels: tags shown as text (tokens such as <s> stay
    visible), bidi controls and zero-width characters shown as <U+XXXX>. Every name, title and
    hover from data goes through it (trace names too: Plotly renders <b>, <a>, <br> in legends)."""
    return html_text(s)


def _wrap(text: str, width: int = 70) -> str:
    words, lines, cur = str(text).split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    if cur:
        lines.append(cur)
    return "<br>".join(esc(l) for l in lines)


def wrap_segments(text: str, width: int = SUBTITLE_CHARS) -> str:
    """Break an (already escaped) subtitle at its ' · ' separators into lines of ~`width` characters."""
    lines, cur = [], ""
    for seg in str(text).split(" · "):
        if cur and len(cur) + 3 + len(seg) > width:
            lines.append(cur)
            cur = seg
        else:
            cur = f"{cur} · {seg}" if cur else seg
        while len(cur) > width and " " in cur[:width]:  # a long segment: break it at a space
            cut = cur.rfind(" ", 0, width)
            lines.append(cur[:cut])
            cur = cur[cut + 1:]
    if cur:
        lines.append(cur)
    return "<br>".join(lines)


def _titles(fig: go.Figure, title: str, subtitle: str) -> None:
    sub = wrap_segments(subtitle)
    n = sub.count("<br>") + 1 if sub else 0
    fig.update_layout(title=dict(text=esc(title), subtitle=dict(text=sub)), margin=dict(t=58 + 17 * n))


def base(title: str, subtitle: str = "", x_title: str = "", y_title: str = "", height: int = HEIGHT) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template=TEMPLATE, height=height, xaxis_title=x_title, yaxis_title=y_title)
    _titles(fig, title, subtitle)
    return fig


def _legend_right(fig: go.Figure) -> None:
    fig.update_layout(legend=dict(x=1.02, xanchor="left", y=1.0, yanchor="top"))


HALF_SUBTITLE_CHARS = 60


def legend_below(fig: go.Figure, subtitle_chars: int = HALF_SUBTITLE_CHARS) -> go.Figure:
    """A copy for a half-width slot: the legend under the plot (the plot keeps the width) and the
    subtitle wrapped to fit the column."""
    out = go.Figure(fig)
    n = sum(1 for t in out.data if t.showlegend is not False and t.name)
    sub = out.layout.title.subtitle.text or ""
    lines = wrap_segments(sub.replace("<br>", " "), subtitle_chars) if sub else ""
    k = lines.count("<br>") + 1 if lines else 0
    out.update_layout(title=dict(subtitle=dict(text=lines)), margin=dict(t=58 + 17 * k, r=20, b=70 + 20 * n),
                      height=(out.layout.height or HEIGHT) + 20 * n,
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.12 - 0.0 * n, yanchor="top",
                                  entrywidth=1.0, entrywidthmode="fraction"))
    return out


# ----------------------------------------------------------------------------- lines
def line_chart(series: Sequence[dict], references: Sequence[dict] = (), *, title: str, subtitle: str,
               x_title: str, y_title: str, x_range: tuple[float, float] | None = None,
               x_dtick: float | None = None) -> go.Figure:
    """Lines with markers, one per series, an optional band, and dotted published references.

    series: dicts with ``name``, ``x``, ``y``, ``color`` (index or hex), optional ``dash``
    ("solid"/"dash"/"dot"), ``band`` ((lo, hi) lists), ``band_name``, ``band_alpha``, ``band_edge`` (outline
    the band), ``hover`` (per-point text), ``width``, ``marker_size``, ``opacity``, ``group`` (legend group),
    ``band_only`` (draw the band alone, e.g. a baseline range).
    references: ``name``, ``x``, ``y``, ``estimator`` (hover text).
    """
    fig = base(title, subtitle, x_title, y_title)
    for s in series:
        c = s["color"] if isinstance(s.get("color"), str) else color(int(s.get("color", 0)))
        group = s.get("group", s["name"])
        if s.get("band") is not None:
            lo, hi = s["band"]
            x = list(s["x"])
            fig.add_trace(go.Scatter(
                x=x + x[::-1], y=list(hi) + list(lo)[::-1], mode="lines", fill="toself",
                fillcolor=rgba(c, s.get("band_alpha", 0.18)),
                line=dict(width=1, color=rgba(c, 0.9)) if s.get("band_edge") else dict(width=0), hoverinfo="skip",
                name=esc(s.get("band_name") or f"{s['name']}: 95% CI"),
                legendgroup=group, showlegend=bool(s.get("band_name"))))
        if s.get("band_only"):  # a shaded range with its own legend entry (e.g. a baseline), no line
            continue
        hover = s.get("hover")
        fig.add_trace(go.Scatter(
            x=list(s["x"]), y=list(s["y"]), mode="lines+markers", name=esc(s["name"]), legendgroup=group,
            line=dict(color=c, width=s.get("width", 2.2), dash=s.get("dash", "solid")),
            marker=dict(size=s.get("marker_size", 6), symbol=s.get("symbol", "circle"), color=c),
            opacity=s.get("opacity", 1.0),
            text=list(hover) if hover is not None else None,
            hovertemplate=("%{text}<extra></extra>" if hover is not None
                           else f"{esc(s['name'])}<br>x=%{{x}}<br>y=%{{y:.4g}}<extra></extra>")))
    for j, r in enumerate(references):
        est = _wrap(r.get("estimator", ""))
        dash, symbol = REFERENCE_STYLES[j % len(REFERENCE_STYLES)]
        fig.add_trace(go.Scatter(
            x=list(r["x"]), y=list(r["y"]), mode="lines+markers", name=esc(r["name"]),
            line=dict(color=REFERENCE, width=1.5, dash=dash), marker=dict(size=6, symbol=symbol,
                                                                         line=dict(width=1.5, color=REFERENCE)),
            customdata=list(r.get("layers", r["x"])),
            hovertemplate=f"<b>{esc(r['name'])}</b><br>layer %{{customdata}}: %{{y:.3f}}<br>{est}<extra></extra>"))
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    if x_dtick is not None:
        fig.update_xaxes(dtick=x_dtick)
    _legend_right(fig)
    hide_thin_bands(fig)
    return fig


def line_panels(panels: Sequence[dict], *, title: str, subtitle: str, x_title: str, height: int = HEIGHT) -> go.Figure:
    """Line charts side by side (one y axis each), one legend: each panel has ``title``, ``y_title``,
    optional ``y_range``, and ``series`` (``name``, ``x``, ``y``, ``color`` index, ``hover`` per point);
    a series name appears once in the legend."""
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[esc(p["title"]) for p in panels],
                        horizontal_spacing=0.07)
    fig.update_layout(template=TEMPLATE, height=height)
    _titles(fig, title, subtitle)
    seen = set()
    for i, p in enumerate(panels, start=1):
        for s in p["series"]:
            c = color(int(s.get("color", 0)))
            hover = s.get("hover")
            fig.add_trace(go.Scatter(
                x=list(s["x"]), y=list(s["y"]), mode="lines+markers", name=esc(s["name"]), legendgroup=s["name"],
                showlegend=s["name"] not in seen, line=dict(color=c, width=2.2), marker=dict(size=6, color=c),
                text=list(hover) if hover is not None else None,
                hovertemplate="%{text}<extra></extra>" if hover is not None else None), row=1, col=i)
            seen.add(s["name"])
        fig.update_xaxes(title_text=x_title, row=1, col=i)
        fig.update_yaxes(title_text=p.get("y_title", ""), row=1, col=i)
        if p.get("y_range") is not None:
            fig.update_yaxes(range=list(p["y_range"]), row=1, col=i)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.18, yanchor="top"),
                      margin=dict(b=110))
    return fig


THIN_BAND = 0.01  # a band narrower than this share of the y span hides under its line


def hide_thin_bands(fig: go.Figure, frac: float = THIN_BAND) -> list[str]:
    """Drop the legend entry of every band (a filled polygon) narrower than `frac` of the plot's y span
    everywhere: an entry for something nobody can see misleads. Returns the names of those bands."""
    def ys(t):
        return np.asarray([np.nan if v is None else v for v in (t.y or [])], dtype=float)

    lines = [ys(t) for t in fig.data if getattr(t, "fill", None) != "toself"]
    finite = np.concatenate([y[np.isfinite(y)] for y in lines]) if lines else np.array([])
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    hidden = []
    for t in fig.data:
        if getattr(t, "fill", None) != "toself" or t.showlegend is False or span <= 0:
            continue
        y = ys(t)
        n = len(y) // 2
        width = np.abs(y[:n] - y[n:][::-1])
        if n and np.isfinite(width).any() and np.nanmax(width) < frac * span:
            t.showlegend = False
            hidden.append(t.name)
    return hidden


def histogram_lines(series: Sequence[dict], *, title: str, subtitle: str, x_title: str,
                    y_title: str = "density") -> go.Figure:
    """Histograms drawn as step lines (several overlaid stay readable). series: name, edges, density."""
    fig = base(title, subtitle, x_title, y_title)
    for i, s in enumerate(series):
        edges = np.asarray(s["edges"], dtype=float)
        centers = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(go.Scatter(
            x=centers, y=np.asarray(s["density"], dtype=float), mode="lines", name=esc(s["name"]),
            line=dict(color=color(s.get("color", i)), width=2, shape="hvh"),
            hovertemplate=f"{esc(s['name'])}<br>cos %{{x:.3f}}<br>density %{{y:.3g}}<extra></extra>"))
        if s.get("mean") is not None:
            fig.add_vline(x=float(s["mean"]), line=dict(color=color(s.get("color", i)), dash="dash", width=1))
    fig.update_xaxes(range=[-1, 1])
    _legend_right(fig)
    return fig


# ----------------------------------------------------------------------------- bars
def dim_bars(values: Sequence[float], highlight: Iterable[int], *, threshold: float | None, title: str,
             subtitle: str, y_title: str, x_title: str = "dimension d") -> go.Figure:
    """One bar per dimension; highlighted dims in vermillion, a dashed threshold line."""
    v = np.asarray(values, dtype=float)
    hi = set(int(i) for i in highlight)
    dims = np.arange(len(v))
    fig = base(title, subtitle, x_title, y_title)
    mask = np.isin(dims, sorted(hi))
    # Explicit widths: plotly would size the few outlier bars from their own (wide) spacing.
    fig.add_trace(go.Bar(x=dims[~mask], y=v[~mask], name="other dimensions", marker_color=MUTED, width=1.0,
                         marker_line_width=0, hovertemplate="dim %{x}<br>%{y:.4g}<extra></extra>"))
    fig.add_trace(go.Bar(x=dims[mask], y=v[mask], name="outlier dimensions", marker_color=HIGHLIGHT, width=1.0,
                         marker_line_width=0, hovertemplate="<b>outlier dim %{x}</b><br>%{y:.4g}<extra></extra>"))
    if threshold is not None and np.isfinite(threshold):
        # The threshold is named in the legend, not by an annotation that outlier labels could overlap.
        fig.add_trace(go.Scatter(x=[-0.5, len(v) - 0.5], y=[float(threshold)] * 2, mode="lines",
                                 name="threshold: mean + 3 std", line=dict(color="black", dash="dash", width=1),
                                 hovertemplate="mean + 3 std = %{y:.4g}<extra></extra>"))
    for d in sorted(hi)[:12]:
        fig.add_annotation(x=d, y=float(v[d]), text=str(d), showarrow=False, yshift=10,
                           font=dict(size=10, color=HIGHLIGHT))
    fig.update_layout(bargap=0.0, barmode="overlay")
    fig.update_xaxes(range=[-0.5, len(v) - 0.5])
    _legend_right(fig)
    return fig


def ranked_bars(labels: Sequence[str], values: Sequence[float], highlight: Sequence[bool], *, title: str,
                subtitle: str, y_title: str, x_title: str, hover: Sequence[str] | None = None) -> go.Figure:
    """Bars in the given order (e.g. the top dims by cosine contribution); highlighted ones coloured."""
    fig = base(title, subtitle, x_title, y_title)
    colors = [HIGHLIGHT if h else OKABE_ITO[0] for h in highlight]
    fig.add_trace(go.Bar(x=list(labels), y=list(values), marker_color=colors, name="dimension",
                         text=list(hover) if hover is not None else None, textposition="none",
                         hovertemplate="dim %{x}<br>%{y:.4g}<br>%{text}<extra></extra>", showlegend=False))
    # Legend entries for the two colours.
    fig.add_trace(go.Bar(x=[None], y=[None], marker_color=HIGHLIGHT, name="outlier dimension"))
    fig.add_trace(go.Bar(x=[None], y=[None], marker_color=OKABE_ITO[0], name="other dimension"))
    fig.update_xaxes(type="category")
    fig.update_layout(legend=dict(x=0.99, xanchor="right", y=0.99, yanchor="top"))  # bars fall to the right
    return fig


def delta_bars(items: Sequence[dict], *, title: str, subtitle: str, y_title: str) -> go.Figure:
    """Bars with error bars, their values written on them, and the individual draws as points.
    items: name, value, std, points, color, label (default: the value, ± std)."""
    fig = base(title, subtitle, "", y_title)
    for i, it in enumerate(items):
        c = color(it.get("color", i)) if not isinstance(it.get("color"), str) else it["color"]
        label = it.get("label", f"{it['value']:+.3g}" + (f" ± {it['std']:.2g}" if it.get("std") is not None else ""))
        fig.add_trace(go.Bar(x=[esc(it["name"])], y=[it["value"]], name=esc(it["name"]), marker_color=c,
                             text=[esc(label)], textposition="outside", cliponaxis=False,
                             textfont=dict(size=13, color="#222222"),
                             error_y=dict(type="data", array=[it.get("std") or 0.0], visible=it.get("std") is not None),
                             hovertemplate=f"{esc(it['name'])}<br>%{{y:.4f}}<extra></extra>"))
        pts = it.get("points") or []
        if pts:
            fig.add_trace(go.Scatter(x=[it["name"]] * len(pts), y=pts, mode="markers", showlegend=False,
                                     marker=dict(color="black", size=7, symbol="circle-open"),
                                     hovertemplate="draw: %{y:.4f}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(showlegend=False, bargap=0.45)
    return fig


def interval_bars(items: Sequence[dict], *, title: str, subtitle: str, y_title: str) -> go.Figure:
    """Bars with asymmetric error bars (an interval [lo, hi] around each value), each value written under its name.
    items: name, value, lo, hi (None: no error bar), label, hover, color; a newline in a name or label breaks its
    line under the bar."""
    fig = base(title, subtitle, "", y_title)
    for i, it in enumerate(items):
        c = color(it.get("color", i)) if not isinstance(it.get("color"), str) else it["color"]
        has = it.get("lo") is not None and it.get("hi") is not None
        v = float(it["value"])
        err = dict(type="data", symmetric=False, array=[float(it["hi"]) - v if has else 0.0],
                   arrayminus=[v - float(it["lo"]) if has else 0.0], visible=has, color="black", thickness=1.5, width=6)
        # the value and its interval under the bar's name (on the bar they collide with the error bar)
        tick = "<br>".join(esc(part) for part in str(it["name"]).split("\n"))
        value = "<br>".join(esc(part) for part in str(it.get("label", f"{v:+.3g}")).split("\n"))
        fig.add_trace(go.Bar(x=[f"{tick}<br><b>{value}</b>"], y=[v],
                             name=esc(str(it["name"]).replace("\n", " ")), marker_color=c, error_y=err,
                             text=[esc(str(it.get("label", f"{v:+.3g}")).replace("\n", " "))], textposition="none",
                             hovertext=[esc(it.get("hover", ""))],
                             hovertemplate=f"{tick}<br>%{{y:.4f}}<br>%{{hovertext}}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(showlegend=False, bargap=0.45)
    # several short lines under each bar, never rotated and cut; the margin holds them (a caption goes below it)
    lines = max((str(t.x[0]).count("<br>") + 1 for t in fig.data), default=1)
    fig.update_xaxes(tickangle=0, automargin=True)
    fig.update_layout(margin=dict(b=24 + 17 * lines))
    return fig


# ----------------------------------------------------------------------------- matrices
def heatmap(z: np.ndarray, *, title: str, subtitle: str, x_title: str, y_title: str, colorbar_title: str,
            zmin: float | None = None, zmax: float | None = None, hover: np.ndarray | None = None) -> go.Figure:
    """A (rows, cols) heatmap, row 0 at the bottom (layer 0 = embeddings)."""
    z = np.asarray(z, dtype=float)
    fig = base(title, subtitle, x_title, y_title, height=max(420, 140 + 24 * z.shape[0]))
    fig.add_trace(go.Heatmap(
        z=z, x=np.arange(z.shape[1]), y=np.arange(z.shape[0]), colorscale=SEQUENTIAL, zmin=zmin, zmax=zmax,
        colorbar=dict(title=dict(text=colorbar_title, side="right"), thickness=14),
        customdata=hover, hovertemplate=("layer %{y}, dim %{x}<br>%{customdata}<extra></extra>" if hover is not None
                                         else "layer %{y}, dim %{x}<br>%{z:.3g}<extra></extra>")))
    fig.update_yaxes(dtick=1 if z.shape[0] <= 16 else 2, showgrid=False)
    fig.update_xaxes(showgrid=False)
    return fig


def dim_matrix(groups: Sequence[dict], *, title: str, subtitle: str, n_layers: int, d: int) -> go.Figure:
    """Which dims each definition flags at each layer: groups of (layer, dim) points, one marker each.

    groups: name, layers, dims, symbol, color.
    """
    fig = base(title, subtitle, "dimension d", "layer (0 = embeddings)",
               height=max(360, 140 + 20 * n_layers))
    for g in groups:
        fig.add_trace(go.Scatter(
            x=list(g["dims"]), y=list(g["layers"]), mode="markers", name=esc(g["name"]),
            marker=dict(symbol=g.get("symbol", "circle"), size=g.get("size", 10), color=g["color"],
                        line=dict(width=g.get("line", 0), color=g["color"])),
            hovertemplate=f"{esc(g['name'])}<br>layer %{{y}}, dim %{{x}}<extra></extra>"))
    fig.update_xaxes(range=[-0.5, d - 0.5])
    fig.update_yaxes(range=[-0.5, n_layers - 0.5], dtick=1 if n_layers <= 16 else 2)
    # Legend above the plot: the dims axis needs the full width.
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=1.01, yanchor="bottom"),
                      margin=dict(t=fig.layout.margin.t + 28))
    return fig


# ----------------------------------------------------------------------------- 2-D projections
PANEL_TITLE_CHARS = 44  # a panel title's line when two panels share the width


def scatter_panels(panels: Sequence[dict], *, title: str, subtitle: str, color_mode: str,
                   color_title: str = "", height: int | None = None) -> go.Figure:
    """Side-by-side 2-D scatter panels sharing one colour scale.

    panels: ``title``, ``x``, ``y``, ``x_title``, ``y_title``, ``hover`` (list of HTML strings),
    ``color`` (numeric values for "continuous", NaN: no value, drawn grey; hex colours for "discrete"),
    for ``color_mode == "highlight"``, ``match`` (bools: drawn on top in vermillion), and for
    ``color_mode == "categorical"``, ``groups`` (``name``, ``mask``, ``color``: one legend entry per
    name, shared by the panels).
    """
    n = len(panels)
    cols = min(n, 2) if n > 2 else n
    rows = int(np.ceil(n / cols))
    # Side by side, a long panel title ("untrained Whisper tiny encoder · speech-human, layer 2/4, raw") ran
    # into its neighbour's: wrapped onto lines that fit half the page's width
    names = [_wrap(p["title"], PANEL_TITLE_CHARS) if cols > 1 else esc(p["title"]) for p in panels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names,
                        horizontal_spacing=0.08, vertical_spacing=0.14 if rows > 1 else 0.1)
    fig.update_layout(template=TEMPLATE, height=height or (560 if rows == 1 else 440 * rows))
    _titles(fig, title, subtitle)
    extra = 18 * max(t.count("<br>") for t in names)  # a wrapped title's further lines
    fig.update_layout(margin=dict(t=fig.layout.margin.t + 40 + extra))  # room for the panel titles
    hover_t = "%{text}<extra></extra>"
    shown: set[str] = set()  # legend entries already drawn (one per name across the panels)

    def first(name: str) -> bool:
        new = name not in shown
        shown.add(name)
        return new

    for i, p in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        x, y = np.asarray(p["x"], dtype=float), np.asarray(p["y"], dtype=float)
        hv = np.asarray(p["hover"], dtype=object)
        if color_mode == "highlight":
            m = np.asarray(p["match"], dtype=bool)
            fig.add_trace(go.Scatter(x=x[~m], y=y[~m], mode="markers", text=hv[~m], hovertemplate=hover_t,
                                     marker=dict(size=4, color=MUTED, opacity=0.6), name="other tokens",
                                     legendgroup="other", showlegend=i == 0), row=r, col=c)
            fig.add_trace(go.Scatter(x=x[m], y=y[m], mode="markers", text=hv[m], hovertemplate=hover_t,
                                     marker=dict(size=9, color=HIGHLIGHT, line=dict(width=1, color="black")),
                                     name="matches", legendgroup="match", showlegend=i == 0), row=r, col=c)
        elif color_mode == "continuous":
            v = np.asarray(p["color"], dtype=float)
            ok = np.isfinite(v)
            if not ok.all():
                fig.add_trace(go.Scatter(x=x[~ok], y=y[~ok], mode="markers", text=hv[~ok], hovertemplate=hover_t,
                                         marker=dict(size=4, color=MISSING, opacity=0.75), name="no value",
                                         legendgroup="no value", showlegend=first("no value")), row=r, col=c)
            fig.add_trace(go.Scatter(x=x[ok], y=y[ok], mode="markers", text=hv[ok], hovertemplate=hover_t,
                                     showlegend=False, marker=dict(size=4, opacity=0.75, color=v[ok],
                                                                   coloraxis="coloraxis")), row=r, col=c)
        elif color_mode == "categorical":
            for g in p["groups"]:
                m = np.asarray(g["mask"], dtype=bool)
                if not m.any():
                    continue
                fig.add_trace(go.Scatter(x=x[m], y=y[m], mode="markers", text=hv[m], hovertemplate=hover_t,
                                         marker=dict(size=4, opacity=0.8, color=g["color"]), name=esc(g["name"]),
                                         legendgroup=esc(g["name"]), showlegend=first(g["name"])), row=r, col=c)
        else:
            fig.add_trace(go.Scatter(x=x, y=y, mode="markers", text=hv, hovertemplate=hover_t, showlegend=False,
                                     marker=dict(size=4, opacity=0.75, color=list(p["color"]))), row=r, col=c)
        fig.update_xaxes(title_text=p.get("x_title", ""), row=r, col=c)
        fig.update_yaxes(title_text=p.get("y_title", ""), row=r, col=c)
    if color_mode == "continuous":
        fig.update_layout(coloraxis=dict(colorscale=SEQUENTIAL, colorbar=dict(title=dict(text=color_title),
                                                                             thickness=14)))
    if color_mode == "highlight":
        fig.update_layout(legend=dict(x=1.0, xanchor="right", y=1.0, yanchor="top"))
    if color_mode == "categorical":
        fig.update_layout(legend=dict(title=dict(text=color_title), itemsizing="constant"))
    elif color_mode == "continuous" and shown:  # "no value" beside the colour bar: inside the plot instead
        fig.update_layout(legend=dict(x=1.0, xanchor="right", y=1.0, yanchor="top", itemsizing="constant"))
    return fig


def scatter_xy(x: Sequence[float], y: Sequence[float], hover: Sequence[str], *, title: str, subtitle: str,
               x_title: str, y_title: str, name: str, color_values: Sequence[float] | None = None,
               color_title: str = "", groups: Sequence[dict] | None = None) -> go.Figure:
    """One cloud of points (WebGL for large samples) with per-point hover text.

    groups: instead of one cloud, one legend entry per group (name, mask, color, symbol, size), drawn in order.
    """
    fig = base(title, subtitle, x_title, y_title)
    marker = dict(size=5, opacity=0.55, color=OKABE_ITO[0])
    if groups:
        x, y, hover = np.asarray(x), np.asarray(y), np.asarray(list(hover), dtype=object)
        for g in groups:
            m = np.asarray(g["mask"], dtype=bool)
            if not m.any():
                continue
            fig.add_trace(go.Scattergl(x=x[m].tolist(), y=y[m].tolist(), mode="markers", name=esc(g["name"]),
                                       marker=dict(size=g.get("size", 5), opacity=g.get("opacity", 0.55),
                                                   color=g["color"], symbol=g.get("symbol", "circle")),
                                       text=hover[m].tolist(), hovertemplate="%{text}<extra></extra>"))
        return fig
    if color_values is not None:
        marker.update(color=list(color_values), colorscale=SEQUENTIAL,
                      colorbar=dict(title=dict(text=color_title), thickness=14))
    fig.add_trace(go.Scattergl(x=list(x), y=list(y), mode="markers", name=name, marker=marker, text=list(hover),
                               hovertemplate="%{text}<extra></extra>", showlegend=False))
    return fig


# ----------------------------------------------------------------------------- export decoration
def with_caption(fig: go.Figure, lines: Sequence[str], meta: dict | None = None) -> go.Figure:
    """A copy of `fig` with caption lines under the plot (for static images) and `meta` embedded."""
    out = go.Figure(fig)
    lines = [w for l in lines for w in _wrap(l, 150).split("<br>")]  # ~150 characters fit 960 px at 10 px
    mb = out.layout.margin.b if out.layout.margin.b is not None else 60
    extra = 14 * len(lines) + 14
    height = out.layout.height or HEIGHT
    out.update_layout(height=height + extra, margin=dict(b=mb + extra))
    out.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, y=0,
                       xanchor="left", yanchor="top", yshift=-(mb + 4), showarrow=False, align="left",
                       font=dict(size=10, color="#444444"))
    if meta is not None:
        out.update_layout(meta=meta)
    return out


# ----------------------------------------------------------------------------- attention
# Signed quantities (correlations, cosines): Kovesi's CET-D1A blue-white-red (colorcet), a perceptually
# uniform diverging map (L* 20 -> 91 -> 20, linear in each half). ColorBrewer's RdBu, used before, puts
# a third of its lightness change between 0.2 and 0.3 of the scale: a visible band at about -0.45 and
# +0.45 on a -1..1 range.
DIVERGING = [[i / (len(_cc.CET_D1A) - 1), c] for i, c in enumerate(_cc.CET_D1A)]


def heat_panels(panels: Sequence[dict], *, title: str, subtitle: str, colorbar_title: str,
                zmin: float | None = None, zmax: float | None = None, diverging: bool = False,
                height: int | None = None) -> go.Figure:
    """Heatmaps side by side on one colour scale (e.g. layers x heads, or an attention map beside
    its ablated twin). Rows start at the bottom unless a panel says ``reverse_y``.

    panels: ``z`` (rows, cols), ``title``, ``x_title``, ``y_title``, optional ``x_labels`` /
    ``y_labels`` (tick text, escaped here; positions stay numeric so repeated tokens stay apart),
    ``max_labels`` (tick labels per axis, 40 unless given: above it every k-th; ``x_max_labels``,
    ``y_max_labels`` for one axis), ``label_size``
    (their font size), ``y_ticks`` (False: no y tick labels, e.g. a twin panel beside the first),
    ``x_angle`` (tick label angle, -60 unless given), ``hover`` (rows, cols) of already escaped
    text, ``reverse_y``.
    """
    n = len(panels)
    rows = max(np.asarray(p["z"]).shape[0] for p in panels)
    fig = make_subplots(rows=1, cols=n, subplot_titles=[esc(p["title"]) for p in panels], horizontal_spacing=0.08)
    fig.update_layout(template=TEMPLATE, height=height or max(420, 160 + 22 * min(rows, 40)))
    _titles(fig, title, subtitle)
    for i, p in enumerate(panels, start=1):
        z = np.asarray(p["z"], dtype=float)
        hover = p.get("hover")
        fig.add_trace(go.Heatmap(
            z=z, x=np.arange(z.shape[1]), y=np.arange(z.shape[0]), coloraxis="coloraxis",
            customdata=hover, hovertemplate=("%{customdata}<extra></extra>" if hover is not None
                                             else "row %{y}, column %{x}<br>%{z:.3g}<extra></extra>")), row=1, col=i)
        xa, ya = dict(showgrid=False, title_text=p.get("x_title", "")), dict(showgrid=False, title_text=p.get("y_title", ""))
        for ax, key, size in ((xa, "x_labels", z.shape[1]), (ya, "y_labels", z.shape[0])):
            labels = p.get(key)
            if labels is not None:
                cap = p.get(key[0] + "_max_labels", p.get("max_labels", 40))
                step = max(1, int(np.ceil(size / cap)))  # above the cap: every k-th label
                ax.update(tickmode="array", tickvals=list(range(0, size, step)),
                          ticktext=[esc(labels[j]) for j in range(0, size, step)])
                if p.get("label_size"):
                    ax["tickfont"] = dict(size=p["label_size"])
        if p.get("x_labels") is not None:
            xa["tickangle"] = p.get("x_angle", -60)
        if p.get("y_ticks") is False:
            ya["showticklabels"] = False
        if p.get("reverse_y"):
            ya["autorange"] = "reversed"
        fig.update_xaxes(**xa, row=1, col=i)
        fig.update_yaxes(**ya, row=1, col=i)
    fig.update_layout(coloraxis=dict(colorscale=DIVERGING if diverging else SEQUENTIAL, cmin=zmin, cmax=zmax,
                                     cmid=0 if diverging and zmin is None else None,
                                     colorbar=dict(title=dict(text=colorbar_title, side="right"), thickness=14)))
    return fig
