"""Projection: PCA or UMAP of the token sample at one layer, coloured by frequency, position,
document, a searched token or a column of the corpus table (e.g. its topic), with the post-processing
what-if side by side. The parameters are in a form: a projection is computed on submit, never on a slider tick."""

import streamlit as st

from core import views
from core.stats.postprocess import PostProcess
from ui import data, page, state

sel, runs = page.header("Projection of the token sample")
if page.need_runs(runs):
    run = page.focus_picker(sel, runs, "projection")
    table = data.sample_table(run.spec)
    colors = page.color_options([table])
    shown_color = page.projection_color(sel, [table])
    with st.form("projection_form"):
        c1, c2, c3 = st.columns([3, 2, 2])
        layer = c1.slider("Layer (0 = embeddings)", 0, run.n_layers - 1, sel.layer_for(run.n_layers), key="p_layer")
        method = c2.radio("Method", ["pca", "umap"], index=["pca", "umap"].index(sel.proj_method), horizontal=True,
                          format_func=str.upper, key="p_method")
        color = c3.selectbox("Colour by", colors, index=colors.index(shown_color), format_func=page.color_label,
                             key="p_color", help="A table corpus (an uploaded CSV...) adds its other columns: each "
                                                 "token takes its document's value.")
        d1, d2, d3 = st.columns([2, 2, 3])
        nn = d1.number_input("UMAP n_neighbors", 2, 200, sel.n_neighbors, key="p_nn")
        md = d2.number_input("UMAP min_dist", 0.0, 1.0, float(sel.min_dist), step=0.05, key="p_md")
        search = d3.text_input("Search a token (colour: a searched token)", sel.search, key="p_search",
                               placeholder="e.g. the")
        go = st.form_submit_button("Project", type="primary")
    if go:
        new_search = search.strip() and search.strip() != sel.search  # a new search term switches the colouring
        state.update(layer=int(layer), layer_by="index", proj_method=method, proj_color="search" if new_search else color,
                     n_neighbors=int(nn), min_dist=float(md), search=search.strip())
        st.rerun()
    sel = state.selection()
    layer = sel.layer_for(run.n_layers)
    post = views.post_for(run.results, sel.post, sel.drop_outliers)
    posts = [PostProcess()] + ([post] if not post.is_identity else [])
    what = "UMAP (the first one in a fresh server also compiles numba: up to a minute)" if sel.proj_method == "umap" \
        else "PCA"
    with st.spinner(f"{what} of {run.results['manifest']['tokens']['sample']:,} sampled tokens…"):
        panels = [(run.results, data.projection(run.spec, layer, sel.proj_method, p, sel.n_neighbors, sel.min_dist,
                                                sel.seed), table) for p in posts]
    page.show(views.projection(panels, shown_color, sel.search), "projection")
    box = page.lazy_expander("Post-processing what-if (shown side by side)", "post_open_projection",
                             expanded=len(posts) > 1)
    if box is not None:
        with box:
            page.post_form(sel, [run], "projection")
