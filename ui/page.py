"""Widgets shared by the pages: the loaded runs, a view with its downloads, the post-processing
form, the model and layer pickers. Each picker writes its choice into the one selection."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import streamlit as st

from core import views
from core.base.cache import get_store
from core.base.errors import InputError
from core.base.escape import markdown_text
from core.base.spec import RunSpec
from core.entry import job_queue, jobs
from core.stats.postprocess import PostProcess
from core.stats.registry import DEFINITIONS, DOCS_PATH, docs_section
from core.studies.selection import LAYER_BY, META_PREFIX, METRICS, PROJ_COLORS, strongest_dims
from core.views import export
from core.views.figures import legend_below
from core.views.results import not_enough_data

from . import data, jobs_panel, run, state

PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


@dataclass(frozen=True)
class Loaded:
    spec: RunSpec
    results: dict
    corpus: str = ""  # the selection's entry for the corpus (a built-in id, an upload id[#column])
    controls: tuple = ()  # results of an untrained control's other seeds (computed ones)

    @property
    def label(self) -> str:
        """Model and corpus ("all-MiniLM-L6-v2 · wiki-en"): one model may run on several corpora."""
        return views.run_name(self.results)

    @property
    def n_layers(self) -> int:
        return len(self.results["layers"])


def md(s: str) -> str:
    """User text (file names, corpus names) inside markdown: shown as typed, no formatting or links."""
    return markdown_text(s)


def loaded(sel) -> list[Loaded]:
    """The selected runs whose results are on disk (others wait for Run), in selection order."""
    out = []
    for m in sel.models:
        for c in sel.corpora:
            try:
                spec = sel.spec(m, c)
                if data.is_cached(spec):
                    res = data.results(spec)
                    if int(res["manifest"]["tokens"]["analysed"]) < 2:
                        continue  # no pair, no spread: status() says "not enough data"
                    seeds = tuple(data.results(s) for s in sel.control_specs(m, c) if data.is_cached(s))
                    out.append(Loaded(spec, res, c, seeds))
            except InputError:
                continue  # shown by status()
    return out


_entry = threading.local()  # this script run went through app.py (`entered`): per script-runner thread


def entered() -> None:
    """app.py's first call: this script run goes through the entrypoint (sidebar, selection, navigation)."""
    _entry.ran = True


def _through_entrypoint() -> None:
    """Make every page run go through app.py (sidebar, selection, navigation).

    Until st.navigation has run once in the process, Streamlit treats a folder named pages/ as an old-style
    multipage app: a session's run executes a page file alone, and the browser's sidebar lists the files
    ("app", "attention", "chain"...) instead of the pages, with no sidebar widgets. Such a run is told by app.py
    not having run in it (`entered`), not by Streamlit's process-wide flag: the sessions that opened at once on
    a fresh server all start in that mode, and only the first of them saw the flag still set (the others, run
    alone, kept the file list and no sidebar for good: bench.busy's 14 of 25 navigations that never found
    their link). Switch the mode off and rerun, once: the rerun executes app.py, whose st.navigation opens the
    page and sends the real navigation.
    """
    from streamlit.runtime.pages_manager import PagesManager

    ran = getattr(_entry, "ran", False)
    _entry.ran = False
    if ran:
        st.session_state.pop("_entry_rerun", None)
        return
    PagesManager.uses_pages_directory = False
    if not st.session_state.get("_entry_rerun"):  # once: a page that still runs alone is drawn, never a loop
        st.session_state["_entry_rerun"] = True
        st.rerun()


def header(title: str):
    """Title and the jobs panel: every selected run's status, with live progress, Cancel and Retry
    while its job is queued or running (the sidebar's Run queued them, whatever the page).

    Returns the selection and the loaded runs.
    """
    _through_entrypoint()
    st.title(title)
    sel = state.selection()
    if state.log().no_models:  # the models box is empty: nothing of the previous selection is shown
        return sel, []
    status(sel)
    return sel, loaded(sel)


def title(text: str, caption: str = "") -> None:
    """The top of a page that shows no selected run (Train, Dynamics): title and caption; its job
    panel is `job_panel()`, drawn where the page queues its jobs."""
    _through_entrypoint()
    st.title(text)
    if caption:
        st.caption(caption)
    url_warnings()


def url_warnings() -> None:
    """What the link asked for that was ignored or clamped (from_query_params' problems), one warning each."""
    for p in state.log().url_problems:
        st.warning(markdown_text(p), icon=":material/link_off:")


def job_panel() -> None:
    """The job panel of a page that shows no selected run: the trainings and series, and the
    selection's jobs that are queued or running (a Run pressed there: every page shows what Run
    started). Draw it after the page's own submit buttons, so a job queued in this run shows at once."""
    run.panel(state.selection(), active_only=True, trainings=True)


def status(sel) -> None:
    """URL problems, then one line per selected run: loaded / computing (progress) / failed / not computed."""
    lg = state.log()
    store = get_store()
    for note in ([store.degraded] if store.degraded else []) + store.notes:  # unwritable; a damaged index set aside
        st.warning(markdown_text(note), icon=":material/warning:")
    for note in job_queue.notes():  # the job queue set aside (corrupted) or read-only
        st.warning(markdown_text(note), icon=":material/warning:")
    url_warnings()
    if lg.corpus_problem:
        st.error(f"{markdown_text(lg.corpus_problem)} Shown below: the results for the previous corpus, "
                 f"**{md(views.corpus_display(sel.corpus, sel.text_column))}**.", icon=":material/error:")
    run.panel(sel)
    for spec in sel.specs():  # what a computed run says about its corpus
        try:
            if not data.is_cached(spec):
                continue
            res = data.results(spec)
        except InputError:
            continue
        for w in res["manifest"].get("warnings", []):
            st.warning(markdown_text(w), icon=":material/warning:")
        short = not_enough_data(res)
        if short:
            st.warning(f"Not enough data: {markdown_text(short)}", icon=":material/data_alert:")


PARTIAL_POLL_S = 1.0  # how often the partial curves of a running extraction are read again


def live(sel, runs: list[Loaded], kind: str) -> bool:
    """The partial results of the selected runs still computing (`kind`: "layers", "outliers", "compare"):
    the curves so far, redrawn every PARTIAL_POLL_S while a job runs; the final results replace them when
    the job ends (the job panel reruns the page). A failed run's last partial curve is shown as such, with
    the error. Returns True when something is shown."""
    if state.log().no_models:
        return False
    done = {r.spec for r in runs}
    specs = tuple(s for s in sel.specs() if s not in done)
    rows = run.partials(specs) if specs else []
    if not rows:
        return False
    if any(job.active for _, job, _ in rows):
        _live_partials(specs, kind)
    else:
        _partials(rows, kind, polling=False)
    return True


@st.fragment(run_every=PARTIAL_POLL_S)
def _live_partials(specs: tuple, kind: str) -> None:
    _partials(run.partials(specs), kind, polling=True)


def _partials(rows, kind: str, polling: bool) -> None:
    sel = state.selection()
    running = [(s, j, p) for s, j, p in rows if j.active and p is not None]
    failed = [(s, j, p) for s, j, p in rows if j.status == jobs.FAILED and p is not None]
    waiting = [s for s, j, p in rows if j.active and p is None]
    with st.container(border=True, key=f"partial_{kind}"):
        if waiting and not running:
            st.caption(":material/hourglass_top: The first partial curve appears after the first batch of the "
                       "forward pass (progress above).")
        note = views.sample_wait_note(sel.metric) if kind != "outliers" else None
        if running and note:
            st.info(markdown_text(note), icon=":material/hourglass_top:")
        for group, is_failed in ((running, False), (failed, True)):
            if not group:
                continue
            view = _partial_view(group, kind, sel.metric, sel.x_axis_for([len(p["layers"]) for _, _, p in group]),
                                 is_failed)
            if is_failed:
                for _, j, p in group:
                    st.error(f"The run failed at {views.partial_count(p)}: {jobs_panel.job_error(j)}. The curve below "
                             "is its last partial result, not a result.", icon=":material/error:")
            else:
                st.caption(":material/pending: **Partial results**: the sums over the tokens read so far, redrawn every "
                           "few seconds; the final result replaces them when the run ends.")
            key = f"partial_{kind}_{'failed' if is_failed else 'live'}"
            st.plotly_chart(view.figure, theme=None, width="stretch", key=f"fig_{key}", config=PLOTLY_CONFIG)
            if kind == "outliers":
                dims = ", ".join(f"{views.run_name(p)}: {p['outliers']['activation']['persistent'] or 'none'}"
                                 for _, _, p in group)
                st.caption(f"Persistent activation outlier dims so far: {markdown_text(dims)}. The norm-parameter "
                           "rule, massive activations, the frequency link and every sample view come with the "
                           "final result.")


def _partial_view(group, kind: str, metric: str, x_axis: str, failed: bool) -> views.View:
    """The partial figure, built again only when a job published a new partial result (the fragment
    polls every second; a partial result comes every few seconds)."""
    sig = (kind, metric, x_axis, failed, tuple((j.id, j.attempt, p.get("published")) for _, j, p in group))
    memo = st.session_state.setdefault("_partial_views", {})
    if sig not in memo:
        if len(memo) >= 4:
            memo.clear()
        memo[sig] = views.partial_view([p for _, _, p in group], kind, metric, x_axis, failed=failed)
    return memo[sig]


def show(view: views.View, key: str, half: bool = False, static: bool = False, shown: Sequence[str] = ()) -> None:
    """The figure (or table), its caption and notes, and its downloads.

    half: the view sits in one of two columns (legend under the plot, subtitle wrapped narrower);
    static: a small table drawn whole, cells wrapped (nothing cut off);
    shown: notes already on screen just above (another view's): not written again, still in the exports.
    """

    if view.figure is not None:
        fig = legend_below(view.figure) if half else view.figure
        st.plotly_chart(fig, theme=None, width="stretch", key=f"fig_{key}", config=PLOTLY_CONFIG)
    elif static:
        st.table(view.data.set_index(view.data.columns[0]))
    else:
        st.dataframe(view.data, hide_index=True, width="stretch", key=f"df_{key}")
    for n in view.notes:
        if n not in shown:
            st.caption(f":material/info: {markdown_text(n)}")
    downloads(view, key)


def downloads(view: views.View, key: str) -> None:
    """The figure's exports, under two lazy popovers: "Download" (every format, the bytes made only when
    a button is clicked: kaleido takes ~0.2 s per image) and "For a paper". Closed, they draw two
    buttons; a row of six download buttons with their tooltips under every figure cost the browser
    about 0.025 s of CPU per figure and page visit (one user, old and new rows alternated)."""
    view = dataclasses.replace(view, name=export.page_view_name(view.name, state.page_name()))  # files say their page
    with st.container(horizontal=True, gap="small", key=f"dl_{key}"):
        box = lazy_popover("Download", f"dlpop_{key}", icon=":material/download:",
                           help=f"{view.title}: the figure or the data, manifest included")
        if box is not None:
            with box:
                download_buttons(view, key)
        paper = lazy_popover("For a paper", f"paper_{key}", icon=":material/article:")
        if paper is not None:
            with paper:
                publication_form(view, key)


def lazy_popover(label: str, key: str, **kw):
    """A popover whose body is made only while it is open (Streamlit's stateful popover), not once per
    figure and run. Returns it when open, else None."""
    box = st.popover(label, type="tertiary", key=key, on_change="rerun", **kw)
    return box if box.open else None


def download_buttons(view: views.View, key: str) -> None:
    """One button per format; each file carries the manifest (the plain CSV: its JSON or sidecar)."""
    fmts = (list(export.FIGURE_FORMATS) if view.figure is not None else []) + list(export.DATA_FORMATS)
    with st.container(horizontal=True, gap="small"):
        for fmt in fmts:
            st.download_button(fmt.upper(), data=partial(export.export_bytes, view, fmt),
                               file_name=export.file_name(view, fmt), mime=export.MIME[fmt], key=f"dl_{key}_{fmt}",
                               on_click="ignore", type="tertiary",
                               help=f"{view.title} as {fmt.upper()}, manifest included" if fmt != "csv" else
                               f"{view.title} as plain CSV (its manifest: the JSON download, or the sidecar under "
                               "'For a paper')")
    st.caption("Figures: PNG, SVG, PDF, HTML (interactive); data: CSV, JSON. The manifest (model, corpus, "
               "settings, versions) is inside each file, except the plain CSV's: it is the JSON download, or "
               "the sidecar under *For a paper*.")


def publication_form(view: views.View, key: str) -> None:
    """The publication export: width preset, font size, vector format; manifest in the file and a sidecar."""
    if view.figure is not None:
        st.caption("No title or footer inside the figure; colour-blind-safe colours and a distinct dash and "
                   "marker per line (survives greyscale). The manifest is in the file's metadata and the sidecar.")
        c1, c2, c3 = st.columns(3)
        width = c1.radio("Width", list(export.COLUMN_WIDTHS_IN), key=f"pub_w_{key}")
        font = c2.number_input("Font size (pt)", 5, 16, 8, key=f"pub_f_{key}")
        fmt = c3.radio("Format", ["pdf", "svg", "png"], key=f"pub_fmt_{key}",
                       format_func=lambda f: {"pdf": "PDF (vector)", "svg": "SVG (vector)", "png": "PNG (300 dpi)"}[f])
        style = export.PubStyle(width_in=export.COLUMN_WIDTHS_IN[width], font_pt=float(font))
        st.download_button(f"Figure ({fmt.upper()})", data=partial(export.publication_bytes, view, fmt, style),
                           file_name=export.file_name(view, fmt, publication=True), mime=export.MIME[fmt],
                           key=f"pub_dl_{key}", on_click="ignore", icon=":material/download:")
        st.download_button("Its manifest (sidecar JSON)", data=partial(export.sidecar_bytes, view, fmt, True),
                           file_name=export.sidecar_name(view, fmt, publication=True), mime="application/json",
                           key=f"pub_side_{key}", on_click="ignore")
    st.download_button("Data: plain CSV", data=partial(export.data_bytes, view, "csv"),
                       file_name=export.file_name(view, "csv"), mime="text/csv", key=f"pub_csv_{key}",
                       on_click="ignore")
    st.download_button("Data's manifest (sidecar JSON)", data=partial(export.sidecar_bytes, view, "csv"),
                       file_name=export.sidecar_name(view, "csv"), mime="application/json", key=f"pub_csvside_{key}",
                       on_click="ignore")


def focus_picker(sel, runs: list[Loaded], key: str) -> Loaded:
    """The (model, corpus) run of the single-run views (only shown when several are loaded)."""
    if len(runs) == 1:
        return runs[0]
    keys = [(r.spec.model, r.corpus) for r in runs]
    cur = (sel.focus_model, sel.focus_corpus or sel.corpus)
    i = keys.index(cur) if cur in keys else 0
    choice = st.selectbox("Run (model · corpus)", range(len(runs)), index=i, format_func=lambda j: runs[j].label,
                          key=f"focus_{key}")
    if keys[choice] != cur:
        state.update(focus=keys[choice][0], focus_corpus=None if keys[choice][1] == sel.corpus else keys[choice][1])
    return runs[choice]


def compare_pair(sel, runs: list[Loaded]) -> tuple[int, int]:
    """The indices in `runs` of Compare's runs A and B: the selection's (compare_a/_b and their corpora), else the
    first two runs (a choice whose run is not computed here falls back too, and is said)."""
    keys = [(r.spec.model, r.corpus) for r in runs]
    out = []
    for which, default in (("a", 0), ("b", 1 if len(runs) > 1 else 0)):
        model = getattr(sel, f"compare_{which}")
        if model is None:
            out.append(default)
            continue
        want = (model, getattr(sel, f"compare_{which}_corpus") or sel.corpus)
        if want in keys:
            out.append(keys.index(want))
        else:
            st.caption(f"Run {which.upper()} of this view ({md(want[0])} · {md(want[1])}) is not computed: showing "
                       f"{md(runs[default].label)} instead.")
            out.append(default)
    return out[0], out[1]


def choose_pair(sel, runs: list[Loaded], ia: int, ib: int):
    """Compare's A and B picked: into the selection (and the URL)."""
    kw = {}
    for which, i in (("a", ia), ("b", ib)):
        r = runs[i]
        kw[f"compare_{which}"] = r.spec.model
        kw[f"compare_{which}_corpus"] = None if r.corpus == sel.corpus else r.corpus
    return state.update(**kw)


def x_axis_picker(sel, runs: list[Loaded], container, key: str, note=None) -> str | None:
    """Layer index or relative depth for the layer curves; auto (depth when the models' depths differ
    or published curves are overlaid) until the user picks one. Returns the explicit choice, if any.
    note: where the "auto: ..." caption goes (default: under the radio, in `container`; a row of
    bottom-aligned controls puts it under the row, or the controls beside it sit lower)."""
    counts = [r.n_layers for r in runs]
    cur = sel.x_axis_for(counts)
    opts = ["layer", "depth"]
    pick = container.radio("x axis", opts, index=opts.index(cur), horizontal=True, key=f"{key}_{cur}",
                           format_func={"layer": "layer index", "depth": "relative depth (layer / L)"}.get,
                           help="Relative depth puts models of different depths (and the published 12-layer curves) "
                                "on one 0-1 axis.")
    if sel.x_axis is None:
        why = "published curves overlaid" if sel.overlays_published else "models of different depths"
        (note or container).caption(f"x axis auto: {'relative depth (' + why + ')' if cur == 'depth' else 'layer index'}")
    return pick if pick != cur or sel.x_axis is not None else None


def layer_picker(sel, runs: list[Loaded], key: str) -> tuple[int, ...]:
    """The layer of the one-layer views, for every run: by relative depth or by layer index, said
    explicitly, with each model's resulting layer and a note when an index is past a model's last layer."""

    deep = deepest(runs)
    c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
    by = c1.radio("Layer by", LAYER_BY, index=LAYER_BY.index(sel.layer_by), horizontal=True, key=f"layer_by_{key}",
                  format_func={"depth": "relative depth", "index": "layer index"}.get,
                  help="Relative depth: each model at the same fraction of its depth (0 = embeddings, 1 = last "
                       "layer). Layer index: the same index in every model (clamped to a shallower model's last).")
    if by != sel.layer_by:
        # Switching keeps the layer the first model shows now, so the view does not jump.
        first = sel.layer_for(runs[0].n_layers)
        sel = state.update(layer_by=by, layer=first, depth=round(first / max(runs[0].n_layers - 1, 1), 2))
    if sel.layer_by == "depth":
        v = c2.slider("Relative depth (0 = embeddings, 1 = last layer)", 0.0, 1.0, float(sel.depth), step=0.05,
                      key=f"depth_{key}")
        if v != sel.depth:
            sel = state.update(depth=float(v))
    elif deep > 1:
        cur = sel.layer if sel.layer is not None else sel.layer_for(deep)
        v = c2.slider("Layer index (0 = embeddings)", 0, deep - 1, min(int(cur), deep - 1), key=f"layer_{key}")
        if v != cur:
            sel = state.update(layer=int(v))
    layers = tuple(sel.layer_for(r.n_layers) for r in runs)
    parts = []
    for r, l in zip(runs, layers):
        part = f"{md(r.label)}: layer {l} of {r.n_layers - 1}"
        if sel.layer_clamped(r.n_layers):
            part += f" (**clamped**: it has no layer {sel.layer})"
        parts.append(part)
    st.caption(":material/layers: " + " · ".join(parts))
    return layers


COLOR_LABELS = {"log_frequency": "log token frequency", "position": "position in sequence",
                "document": "document", "search": "a searched token"}


def color_options(tables) -> list[str]:
    """The projection's colourings: the built-in ones, then the corpus table's columns (meta:<name>)."""
    return list(PROJ_COLORS) + [META_PREFIX + c for c in views.metadata_columns(tables)]


def color_label(key: str) -> str:
    return COLOR_LABELS.get(key) or f"corpus column: {key[len(META_PREFIX):]}"


def projection_color(sel, tables) -> str:
    """The selection's colouring, checked against the runs' columns (the URL names any): an unknown column is
    said once and the projection is coloured by log token frequency."""
    color, problem = views.check_color(sel.proj_color, tables)
    if problem:
        st.warning(md(problem), icon=":material/palette:")
        state.update(proj_color=color)  # the link drops the unknown column
    return color


def lazy_expander(label: str, key: str, expanded: bool = False, **kw):
    """An expander whose body is made only while it is open (Streamlit's stateful expander): the
    script and the browser skip what nobody looks at. Returns it when open, else None. `expanded`
    is its state on a page's first run (kept as widget state, so a test can open it)."""
    st.session_state.setdefault(key, expanded)
    box = st.expander(label, key=key, on_change="rerun", **kw)
    return box if box.open else None


def lazy_tabs(labels, key: str, default: str | None = None) -> list:
    """Tabs of which only the open one should be built (Streamlit's stateful tabs: `.open` says which):
    a page of sections computes and draws one section per visit. `default` is the tab open on a page's
    first run; it is kept as widget state rather than passed as `default`, so that a test or a callback
    can choose the section through st.session_state[key] without a warning."""
    st.session_state.setdefault(key, default if default is not None else labels[0])
    return st.tabs(labels, key=key, on_change="rerun")


def open_section(tabs, names: Sequence[str]) -> str:
    """The URL name of the open tab of `lazy_tabs` (names: the page's sections as written in the URL)."""
    return next((n for n, t in zip(names, tabs) if t.open), names[0])


def definition(metric: str) -> None:
    """Formula, how to read it, the paper, and the section of docs/metrics.md."""

    d = DEFINITIONS.get(metric)
    if d is None:
        return
    box = lazy_expander(f"What is {METRICS[metric][0].lower()}?", "what_is", icon=":material/function:")
    if box is None:
        return
    with box:
        st.latex(d.formula)
        st.markdown(f"**High:** {d.high}.  \n**Low:** {d.low}.  \n**Paper:** {d.paper}.  \n"
                    f"Exact definition: `{DOCS_PATH}` in the repository (below where it has a section).")
        sec = docs_section(metric)
        if sec:
            st.markdown(sec)


def dimension_picker(sel, run: Loaded, key: str, dims: list[int] | None = None) -> int:
    """The dim drilled into: one of `dims` (default: the run's persistent outlier dims, strongest first),
    or any dim typed in (kept in the URL). Both boxes show the selection's dim: picking in one updates the other."""
    res = run.results
    d = int(res["manifest"]["model"].get("hidden_size") or 1)
    strong = strongest_dims(res["outliers"])
    outs = strong if dims is None else sorted(dims, key=lambda x: (strong.index(x) if x in strong else len(strong), x))
    cur = sel.dim_for(res)
    kp, ka = f"dim_pick_{key}", f"dim_any_{key}"
    opts = outs + ([cur] if cur not in outs else [])
    st.session_state[kp] = st.session_state[ka] = cur  # the selection is the truth (set before the widgets exist)

    def chosen(k: str) -> None:  # runs before the rerun's script: the selection (and URL) take the new dim
        state.update(dim=int(st.session_state[k]))

    c1, c2 = st.columns([2, 1], vertical_alignment="bottom")
    c1.selectbox("Dimension", opts, key=kp, on_change=chosen, args=(kp,),
                 format_func=lambda x: f"dim {x}" + (" (outlier)" if x in outs else ""),
                 help="The outlier set's dims, the strongest first; type any other dim on the right.")
    c2.number_input(f"or any dim (0-{d - 1})", 0, d - 1, key=ka, on_change=chosen, args=(ka,))
    return cur


def post_form(sel, runs: list[Loaded], key: str) -> None:
    """The post-processing what-if (applied on submit only: it recomputes sample metrics)."""
    d_min = min(int(r.results["manifest"]["model"].get("hidden_size") or 0) for r in runs) or 1
    with st.form(f"post_{key}", border=True):
        st.markdown("**Post-processing what-if** (applied to the token sample of every layer)")
        c1, c2, c3 = st.columns(3)
        center = c1.checkbox("Center (subtract the mean)", sel.post.center, key=f"pp_center_{key}")
        zscore = c1.checkbox("Z-score each dimension", sel.post.zscore, key=f"pp_zscore_{key}")
        abtt = c2.number_input("All-but-the-top: remove D directions", 0, max(d_min - 1, 0),
                               min(sel.post.abtt, max(d_min - 1, 0)),
                               key=f"pp_abtt_{key}",
                               help="Mu & Viswanath 2018: remove the mean and the top-D principal directions.")
        whiten = c2.checkbox("Whiten (Su et al. 2021)", sel.post.whiten, key=f"pp_whiten_{key}")
        wk = c2.number_input("whitening: keep k components (0 = all)", 0, d_min, min(sel.post.whiten_k or 0, d_min),
                             key=f"pp_k_{key}")
        drop = c3.text_input("Remove dimensions (e.g. 63, 157)", ", ".join(map(str, sel.post.remove)),
                             key=f"pp_drop_{key}")
        drop_out = c3.checkbox("Remove each model's persistent outlier dims", sel.drop_outliers,
                               key=f"pp_outliers_{key}")
        b1, b2 = st.columns([1, 4])
        ok = b1.form_submit_button("Apply post-processing", type="primary")
        reset = b2.form_submit_button("Reset to raw")
    if reset:
        state.forget_widgets(f"pp_{n}_{key}" for n in ("center", "zscore", "abtt", "whiten", "k", "drop", "outliers"))
        state.update(post=PostProcess(), drop_outliers=False)
        st.rerun()
    if ok:
        try:
            dims = tuple(sorted({int(x) for x in drop.replace(";", ",").split(",") if x.strip()}))
            post = PostProcess(center=center, zscore=zscore, abtt=int(abtt), whiten=whiten,
                               whiten_k=int(wk) if whiten and wk else None, remove=dims)
        except ValueError as e:
            st.error(markdown_text(f"Post-processing not applied: {e}"))
            return
        state.update(post=post, drop_outliers=drop_out)
        st.rerun()


def posts_for(sel, runs: list[Loaded]) -> list[PostProcess]:
    return [views.post_for(r.results, sel.post, sel.drop_outliers) for r in runs]


def deepest(runs: list[Loaded]) -> int:
    """Hidden-state layers of the deepest loaded model (the range of a shared layer slider)."""
    return max(r.n_layers for r in runs)


def need_runs(runs: list[Loaded]) -> bool:
    if not runs:
        if state.log().no_models:
            st.info("No model is selected: choose at least one in the sidebar.", icon=":material/arrow_back:")
        elif state.log().jobs_active:
            st.info("Computing: the final figures appear here when the job ends (progress and partial curves "
                    "above). Browse the other pages meanwhile; leaving or closing this tab does not stop the job.",
                    icon=":material/hourglass_top:")
        else:
            st.info("Nothing to show yet: choose models and a corpus in the sidebar, then press **Run**. "
                    "Results already computed for a selection appear at once.", icon=":material/arrow_back:")
        return False
    return True
