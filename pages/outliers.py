"""Outliers: mean |x_d| per dimension, the layers x dimensions map, cosine contributions, the two
outlier definitions side by side, the frequency link, and the ablation (behind a button)."""

import streamlit as st

from core import jobs, views
from core.errors import InputError
from core.escape import markdown_text
from ui import data, page, state
from ui import run as ui_run

sel, runs = page.header("Outlier dimensions")
if page.need_runs(runs):
    run = page.focus_picker(sel, runs, "outliers") if len(runs) > 1 else runs[0]
    layer = page.layer_picker(state.selection(), [run], "outliers")[0]
    res = run.results

    page.show(data.outlier_bars(run.spec, layer), "bars")
    page.show(data.cosine_contribution_bars(run.spec, layer), "cc")
    st.markdown("**Persistent outlier dimensions**")
    page.show(views.outlier_summary(res), "summary", static=True)
    st.caption("Published dims (Puccetti et al. 2022) belong to other models with another d: context, "
               "not a check of this run.")
    page.show(data.outlier_heatmap(run.spec), "heatmap")

    st.subheader("Two definitions: activations vs LayerNorm parameters")
    defs = views.outlier_definitions(res)
    page.show(defs, "defs")
    with st.expander("Per layer: activation rule vs norm-parameter rule (Jaccard overlap)"):
        st.dataframe(defs.data, hide_index=True, width="stretch", key="df_agreement")
    with st.expander("Massive activations (largest max |x_d| per layer)"):
        page.show(views.massive_activations(res), "massive")

    st.subheader("Frequency")
    freq, freq_table = data.frequency_views(run.spec)
    page.show(freq, "freq")
    with st.expander("Pearson r per outlier dimension (table)"):
        page.show(freq_table, "freq_table")

    st.subheader("Drill into a dimension")
    page.dimension_picker(state.selection(), run, "outliers")
    dim = state.selection().dim_for(run.results)
    tokens, scatter, rprof = data.dimension_views(run.spec, dim, layer)
    s1, s2 = st.columns(2)
    with s1:
        page.show(rprof, "dim_r", half=True)
    with s2:
        page.show(scatter, "dim_scatter", half=True)
    st.markdown(f"**Top-activating tokens of dim {dim} at layer {layer}** (largest |x_{dim}| in the sample)")
    page.show(tokens, "dim_tokens")

    st.subheader("Ablation: zero the outlier dimensions in every norm")
    dims = views.ablation_dims(res)
    st.caption(f"Dimensions: {dims or 'none'} (persistent outliers of either definition). The LM loss on held-out "
               "text is compared with zeroing as many random dimensions (5 draws). Runs as a job (progress above; "
               "it loads the model, then 7 forward passes): keep browsing meanwhile.")
    ab = data.cached_ablation(run.spec)
    if ab is not None:
        if not sel.ablation:
            state.update(ablation=True)  # the URL now restores this view
        page.show(views.ablation_view(ab, res), "ablation")
    elif not res["manifest"]["model"].get("causal_lm"):
        if st.button("Run ablation", key="ablate", icon=":material/science:"):
            st.error(f"Ablation needs a causal language model with an LM head; {run.label} has none. "
                     "Try smollm2-135m or untrained-gpt2.")
    elif not dims:
        st.info("No persistent outlier dimensions in this run: nothing to ablate.")
    else:
        job = jobs.status(ui_run.job_id("ablation", run.spec))
        if job is not None and job.active:
            st.caption(":material/hourglass_top: The ablation job is running: its progress is shown at the top of "
                       "the page; the result appears here when it ends.")
        elif st.button("Run ablation", key="ablate", icon=":material/science:",
                       help="Queue the ablation as a job (Cancel in its progress panel)."):
            try:
                ui_run.submit_ablation(run.spec)
                state.update(ablation=True)
                st.rerun()
            except InputError as e:
                st.error(markdown_text(str(e)))
        elif sel.ablation:
            st.caption("This link shows the ablation, which is not computed for this run yet: press **Run ablation**.")
