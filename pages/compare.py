"""Compare: two or more runs (models, corpora, or both), aligned by relative depth (layer / L), with the
bootstrap interval of the difference of two runs' mean cosine per layer, one section at a time (curves,
outliers and summary, attention, projections). Text, image and speech models each read the corpus of
their modality (Godey et al. 2023's all-modalities figure is a preset)."""

import streamlit as st

from core import views
from core.base.escape import markdown_text
from core.stats.postprocess import PostProcess
from core.studies.selection import COMPARE_SECTIONS, GODEY_PRESET, METRICS
from core.views import attention as AV
from ui import data, page, state

SECTIONS = ("By relative depth", "Outliers and summary", "Attention", "Projections")


def _by_depth(sel, runs, results) -> None:
    """The metric's curves by relative depth and the bootstrap interval of a difference of two runs."""
    metric = st.selectbox("Metric", list(METRICS), index=list(METRICS).index(sel.metric),
                          format_func=lambda k: METRICS[k][0], key="c_metric")
    sel = state.update(metric=metric)
    page.show(views.add_seed_bands(views.layer_curves(results, sel.metric, "depth", sel.reference), results,
                                   [r.controls for r in runs], sel.metric, "depth"), "c_curves")
    if len(runs) >= 2:
        st.markdown(markdown_text(views.comparison_sentence(results, sel.metric)))
    page.definition(sel.metric)
    if len(runs) >= 2:
        st.subheader("Is the difference real? Mean cosine of A minus B")
        # A and B are in the selection (and the URL: ca, cb), so a link draws the same difference, sign included.
        want_a, want_b = page.compare_pair(sel, runs)
        d1, d2 = st.columns(2)
        ia = d1.selectbox("Run A", range(len(runs)), index=want_a, format_func=lambda j: runs[j].label, key="c_run_a")
        ib = d2.selectbox("Run B", range(len(runs)), index=want_b, format_func=lambda j: runs[j].label, key="c_run_b")
        if (ia, ib) != (want_a, want_b):
            sel = page.choose_pair(sel, runs, ia, ib)
        if ia == ib:
            st.caption("Pick two different runs.")
        else:
            with st.spinner("Bootstrapping…"):
                page.show(data.difference(runs[ia].spec, runs[ib].spec, "depth"), "c_diff")  # as the curves above
            with st.spinner("CKA between the layers of A and B…"):
                page.show(data.cka_across(runs[ia].spec, runs[ib].spec), "c_cka")
    if any(views.lens_why(r) is None for r in results):  # causal LMs run with the lens: side by side
        page.show(views.lens_curves(results, "depth"), "c_lens")


def _attention(sel, runs) -> None:
    """Per-block attention means by relative depth, for the runs whose attention is computed."""
    pairs = [(r.results, data.attention(r.spec)) for r in runs if data.attention_cached(r.spec)]
    if pairs:
        stats = list(AV.CURVE_STATS)
        stat = st.selectbox("Attention statistic (mean over heads)", stats, index=stats.index(sel.compare_attn_stat),
                            format_func=lambda k: AV.ATTN_STATS[k][0], key="c_attn_stat")
        sel = state.update(compare_attn_stat=stat)  # in the URL: cattn
        page.show(AV.attention_curves(pairs, sel.compare_attn_stat, "depth"), "c_attn")
    missing = [r.label for r in runs if not data.attention_cached(r.spec)]
    if missing:
        st.caption(f"No attention statistics yet for {', '.join(missing)}: compute them on the Attention page.")


def _projections(sel, runs) -> None:
    """Every run's projection at the same relative depth, coloured alike (a table corpus's column too)."""
    tables = [data.sample_table(r.spec) for r in runs]
    colors = [c for c in page.color_options(tables) if c != "search"]  # the search box is the Projection page's
    color = page.projection_color(sel, tables)
    color = color if color in colors else "log_frequency"
    with st.form("compare_projection"):
        c1, c2, c3 = st.columns([3, 2, 2])
        depth = c1.slider("Relative depth (0 = embeddings, 1 = last layer)", 0.0, 1.0, float(sel.depth), step=0.05,
                          key="c_depth")
        method = c2.radio("Method", ["pca", "umap"], index=["pca", "umap"].index(sel.proj_method),
                          horizontal=True, format_func=str.upper, key="c_method")
        picked = c3.selectbox("Colour by", colors, index=colors.index(color), format_func=page.color_label,
                              key="c_color", help="A table corpus (an uploaded CSV...) adds its other columns: each "
                                                  "token takes its document's value; runs on another corpus are grey.")
        go = st.form_submit_button("Project", type="primary")
    if go:
        state.update(depth=float(depth), proj_method=method, proj_color=picked)
        st.rerun()
    with st.spinner("Projecting…"):
        panels = [(r.results, data.projection(r.spec, views.layer_at_depth(r.results, sel.depth), sel.proj_method,
                                              PostProcess(), sel.n_neighbors, sel.min_dist, sel.seed), t)
                  for r, t in zip(runs, tables)]
    page.show(views.projection(panels, color), "c_proj")


sel, runs = page.header("Compare runs")
page.live(sel, runs, "compare")  # the curves so far of the runs still computing
# every model with its untrained control; what was chosen for other models (a dim, an ablation) is dropped. The
# preset is applied in the click's callback, before the sidebar's widgets are drawn (they show it at once).
st.button("Preset: Godey et al. 2023, all modalities by relative depth", key="c_godey",
          icon=":material/auto_graph:", on_click=state.apply_preset,
          kwargs=dict(models=GODEY_PRESET, metric="mean_cosine", x_axis="depth", focus=None, dim=None, ablation=False),
          help="MiniLM (text), DINOv2 ViT-S/14 (images), Whisper tiny.en encoder (speech) and MobileNetV2 (CNN), "
               "each with its untrained control (same architecture, random weights), mean cosine by relative depth. "
               "Press Run in the sidebar to compute what is not cached.")
if page.need_runs(runs):
    if len(runs) < 2 and len(sel.specs()) > 1:  # the others are not computed yet (a job, or Run not pressed)
        st.info("The comparison appears here as soon as a second selected run is computed (progress above; "
                "press Run in the sidebar for runs that are not queued).", icon=":material/hourglass_top:")
    elif len(runs) < 2:
        st.info("Add a second model (e.g. an untrained control) or a second corpus (*Compare with more corpora*: "
                "e.g. wiki-fr or the uniform-random control) in the sidebar, and press Run to compare.",
                icon=":material/add:")
    results = [r.results for r in runs]
    # One section at a time: only the open one is computed and drawn; the open one is in the URL (ctab).
    tabs = page.lazy_tabs(SECTIONS, "compare_section", SECTIONS[COMPARE_SECTIONS.index(sel.compare_section)])
    sel = state.update(compare_section=page.open_section(tabs, COMPARE_SECTIONS))
    depth_tab, outliers_tab, attention_tab, projection_tab = tabs
    if depth_tab.open:
        with depth_tab:
            _by_depth(sel, runs, results)
    if outliers_tab.open:
        with outliers_tab:
            page.show(views.outlier_counts(results), "c_counts")
            st.markdown("**Summary**")
            page.show(views.compare_summary(results), "c_summary")
    if attention_tab.open:
        with attention_tab:
            _attention(sel, runs)
    if projection_tab.open:
        with projection_tab:
            _projections(sel, runs)
