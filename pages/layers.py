"""Layers, in three sections of which only the open one is built: the per-layer curves of every
metric, models overlaid, with the published references and the post-processing what-if; the table
of numbers; at one layer, the pairwise-cosine distribution and the mean cosine by token-frequency
decile; the logit lens of causal LMs."""

import streamlit as st

from core import views
from core.studies.selection import LAYERS_SECTIONS, METRICS, SAMPLE_METRICS
from ui import data, page, state

SECTIONS = ("Curves", "Numbers", "At one layer", "Logit lens")

sel, runs = page.header("Anisotropy by layer")
page.live(sel, runs, "layers")  # the curves so far of the runs still computing
if page.need_runs(runs):
    # Only the open section is computed and drawn (as on Outliers and Compare): the curves, the table
    # and the two one-layer figures together were 3 figures and a grid per visit (one user's browser:
    # 0.87 s of CPU per visit, 0.41 s for the curves alone; python -m bench.load measures 8 users).
    # The open one is in the URL (ltab).
    tabs = page.lazy_tabs(SECTIONS, "layers_section", SECTIONS[LAYERS_SECTIONS.index(sel.layers_section)])
    sel = state.update(layers_section=page.open_section(tabs, LAYERS_SECTIONS))
    curves_tab, numbers_tab, one_tab, lens_tab = tabs
    if curves_tab.open:
        with curves_tab:
            c1, c2, c3 = st.columns([3, 2, 2], vertical_alignment="bottom")
            metric = c1.selectbox("Metric", list(METRICS), index=list(METRICS).index(sel.metric),
                                  format_func=lambda k: METRICS[k][0], key="metric")
            ref = c3.toggle("Published curves (Ethayarajh 2019)", sel.reference, key="reference")
            # the "auto" note goes under the row: inside c2 it pushed the radio up, out of line with the Metric box
            x_axis = page.x_axis_picker(sel.replace(metric=metric, reference=ref), runs, c2, "x_axis",
                                        note=st.container())
            sel = state.update(metric=metric, reference=ref, **({"x_axis": x_axis} if x_axis else {}))
            x_axis = sel.x_axis_for([r.n_layers for r in runs])
            posts = page.posts_for(sel, runs)
            post_rows = [data.post_rows(r.spec, p) if not p.is_identity else None for r, p in zip(runs, posts)]
            curves = views.layer_curves([r.results for r in runs], sel.metric, x_axis, sel.reference,
                                        post_rows=post_rows, post_labels=[p.label() for p in posts])
            curves = views.add_seed_bands(curves, [r.results for r in runs], [r.controls for r in runs], sel.metric,
                                          x_axis)
            page.show(curves, "curves")
            page.definition(sel.metric)
            box = page.lazy_expander("Post-processing what-if (dashed curves)", "post_open_layers",
                                     expanded=not sel.post.is_identity or sel.drop_outliers)
            if box is not None:
                with box:
                    page.post_form(sel, runs, "layers")
                    if sel.metric not in SAMPLE_METRICS:
                        st.caption("Choose a sample metric (mean cosine, PC1 ratio, effective rank, IsoScore, "
                                   "partition isotropy) to see the what-if curves.")

    if numbers_tab.open:
        with numbers_tab:
            page.show(views.metric_table([r.results for r in runs]), "table")

    if one_tab.open:
        with one_tab:
            layers = page.layer_picker(sel, runs, "layers")
            h1, h2 = st.columns(2)
            with h1:
                page.show(data.pairwise_histogram(tuple(r.spec for r in runs), layers), "hist", half=True)
            with h2:
                page.show(views.frequency_deciles([r.results for r in runs], list(layers)), "deciles", half=True)
            page.show(views.cka_heatmap([r.results for r in runs]), "cka")

    if lens_tab.open:
        with lens_tab:
            lens = views.lens_curves([r.results for r in runs], sel.x_axis_for([r.n_layers for r in runs]))
            page.show(lens, "lens")
            if lens.figure is not None:  # the tokens table only beside curves (not the same 'not applicable' twice)
                page.show(views.lens_tokens([r.results for r in runs]), "lens_tokens")
            st.caption("The lens is opt-in (Advanced options → Logit lens, or `--logit-lens`): it reads up to 512 "
                       "sampled positions with the full vocabulary at every layer, which costs more than 10% of a run.")
