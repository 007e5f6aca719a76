"""Widgets shared by the pages: the loaded runs, a view with its downloads, the post-processing
form, the model and layer pickers. Each picker writes its choice into the one selection."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from core import export, views
from core.errors import InputError
from core.models import describe_model
from core.postprocess import PostProcess
from core.spec import RunSpec

from . import data, state

PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


@dataclass(frozen=True)
class Loaded:
    spec: RunSpec
    results: dict

    @property
    def label(self) -> str:
        return self.results["manifest"]["model"]["label"]

    @property
    def n_layers(self) -> int:
        return len(self.results["layers"])


def loaded(sel) -> list[Loaded]:
    """The selected runs whose results are on disk (others wait for Run), in selection order."""
    out = []
    for spec in sel.specs():
        try:
            if data.is_cached(spec):
                out.append(Loaded(spec, data.results(spec)))
        except InputError:
            continue  # shown by status()
    return out


def _through_entrypoint() -> None:
    """Make a deep link on a fresh server go through app.py (sidebar, selection, navigation).

    Until st.navigation has run once in the process, Streamlit treats a folder named pages/ as an
    old-style multipage app and runs a linked page file alone. Switch that mode off and rerun:
    the rerun executes app.py, whose st.navigation opens the linked page.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def header(title: str):
    """Title, the Run button's work (progress bars, Cancel) and the status of every selected run.

    Returns the selection and the loaded runs. The Run button lives in the sidebar (app.py); its
    value is read here so the progress shows under the page title.
    """
    from . import run

    _through_entrypoint()
    st.title(title)
    sel = state.selection()
    run.report_interrupted()
    if state.run_pressed():
        run.run(sel)
    status(sel)
    return sel, loaded(sel)


def status(sel) -> None:
    """One line per selected model: loaded from cache / computed now / not computed / error."""
    lg = state.log()
    for p in lg.url_problems:
        st.warning(p)
    for spec in sel.specs():
        rid = state.run_id(spec)
        info = describe_model(spec.model)
        name = f"**{info['label']}** on {views.corpus_display(sel.corpus)}"
        note = f" — :material/warning: {info['note']}" if info.get("note") else ""
        if rid in lg.errors:
            st.error(f"{info['label']}: {lg.errors[rid]}", icon=":material/error:")
            continue
        try:
            cached = data.is_cached(spec)
        except InputError as e:
            st.error(str(e), icon=":material/error:")
            continue
        if cached:
            res = data.results(spec)
            n = res["manifest"]["tokens"]["analysed"]
            how = (f"computed in {lg.computed[rid]:.1f} s" if rid in lg.computed else "loaded from cache")
            st.caption(f":material/check_circle: {name}: {how} · {n:,} tokens · {len(res['layers'])} layers{note}")
        else:
            st.caption(f":material/hourglass_empty: {name}: not computed yet for these settings — press **Run** "
                       f"in the sidebar{note}")


def show(view: views.View, key: str) -> None:
    """The figure (or table), its caption and notes, and its downloads."""
    if view.figure is not None:
        st.plotly_chart(view.figure, theme=None, width="stretch", key=f"fig_{key}", config=PLOTLY_CONFIG)
    else:
        st.dataframe(view.data, hide_index=True, width="stretch", key=f"df_{key}")
    for n in view.notes:
        st.caption(f":material/info: {n}")
    downloads(view, key)


def downloads(view: views.View, key: str) -> None:
    """Download buttons; the bytes are made only when clicked (kaleido takes ~0.2 s per image)."""
    fmts = (list(export.FIGURE_FORMATS) if view.figure is not None else []) + list(export.DATA_FORMATS)
    row = st.container(horizontal=True, gap="small", key=f"dl_{key}")
    with row:
        st.caption("Download", width="content")
        for fmt in fmts:
            st.download_button(fmt.upper(), data=partial(export.export_bytes, view, fmt),
                               file_name=export.file_name(view, fmt), mime=export.MIME[fmt], key=f"dl_{key}_{fmt}",
                               on_click="ignore", type="tertiary", help=f"{view.title} as {fmt.upper()}, manifest included")


def focus_picker(sel, runs: list[Loaded], key: str) -> Loaded:
    """The model of the single-model views (only shown when several are loaded)."""
    if len(runs) == 1:
        return runs[0]
    ids = [r.spec.model for r in runs]
    cur = sel.focus_model if sel.focus_model in ids else ids[0]
    labels = {r.spec.model: r.label for r in runs}
    choice = st.selectbox("Model", ids, index=ids.index(cur), format_func=labels.get, key=f"focus_{key}")
    if choice != sel.focus_model:
        state.update(focus=choice)
    return runs[ids.index(choice)]


def layer_slider(sel, n_layers: int, key: str, label: str = "Layer (0 = embeddings)", help: str | None = None) -> int:
    cur = sel.layer_for(n_layers)
    if n_layers <= 1:
        return 0
    v = st.slider(label, 0, n_layers - 1, cur, key=f"layer_{key}", help=help)
    if v != cur:
        state.update(layer=int(v))
    return int(v)


def post_form(sel, runs: list[Loaded], key: str) -> None:
    """The post-processing what-if (applied on submit only: it recomputes sample metrics)."""
    d_min = min(int(r.results["manifest"]["model"].get("hidden_size") or 0) for r in runs) or 1
    with st.form(f"post_{key}", border=True):
        st.markdown("**Post-processing what-if** (applied to the token sample of every layer)")
        c1, c2, c3 = st.columns(3)
        center = c1.checkbox("Center (subtract the mean)", sel.post.center, key=f"pp_center_{key}")
        zscore = c1.checkbox("Z-score each dimension", sel.post.zscore, key=f"pp_zscore_{key}")
        abtt = c2.number_input("All-but-the-top: remove D directions", 0, max(d_min - 1, 0), sel.post.abtt,
                               key=f"pp_abtt_{key}",
                               help="Mu & Viswanath 2018: remove the mean and the top-D principal directions.")
        whiten = c2.checkbox("Whiten (Su et al. 2021)", sel.post.whiten, key=f"pp_whiten_{key}")
        wk = c2.number_input("whitening: keep k components (0 = all)", 0, d_min, sel.post.whiten_k or 0,
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
            st.error(f"Post-processing not applied: {e}")
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
        st.info("Nothing to show yet: choose models and a corpus in the sidebar, then press **Run**. "
                "Results already computed for a selection appear at once.", icon=":material/arrow_back:")
        return False
    return True
