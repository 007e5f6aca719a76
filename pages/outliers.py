"""Outliers, one section at a time: the outlier dimensions at the chosen layer (mean |x_d| per
dimension, cosine contributions), across layers (the persistent dims, the layers x dimensions map),
the two outlier definitions side by side, the frequency link, the drill-down into one dimension, and
the ablation (behind a button)."""

import streamlit as st

from core import views
from core.base.errors import InputError
from core.base.escape import markdown_text
from core.studies.selection import MAX_TYPED_DIMS, OUTLIERS_SECTIONS, parse_dims
from core.views import chain as chain_views
from ui import data, page, state
from ui import run as ui_run

OUTLIER_SETS = {"persistent": "persistent dims (all layers)", "layer": "3-sigma dims at this layer",
                "typed": "dims I type"}
SECTIONS = ("Outlier dimensions", "Across layers", "Two definitions", "Frequency", "Drill into a dimension", "Ablation")


def _set_picker(sel, run, layer: int) -> tuple[str, list[int], str]:
    """The outlier set of the Frequency, drill-down and ablation tabs (kept in the URL: oset, odims).
    Returns (which, dims, the set's short label); typed dims that do not fit the model are said, and the
    persistent set is used meanwhile."""
    d = int(run.results["manifest"]["model"].get("hidden_size") or 1)
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    which = c1.radio("Outlier set", list(OUTLIER_SETS), index=list(OUTLIER_SETS).index(sel.outlier_set),
                     format_func=OUTLIER_SETS.get, horizontal=True, key="w_outlier_set",
                     help="Persistent: flagged by the 3-sigma rule in many layers, or by the norm-parameter rule. "
                          "At this layer: the dims over the 3-sigma rule at the layer picked above (the first tab's). "
                          "Typed: the dims you list on the right.")
    if which != sel.outlier_set:
        sel = state.update(outlier_set=which)
    if which == "typed":
        typed = c2.text_input(f"Dims (0-{d - 1}, commas between them)", ", ".join(map(str, sel.typed_dims)),
                              key="w_typed_dims", placeholder="e.g. 308, 8",
                              help=f"At most {min(MAX_TYPED_DIMS, d // 2)} dims of this model's {d}.")
        try:
            got = parse_dims(typed)
            if got != sel.typed_dims:
                sel = state.update(typed_dims=got)
            dims, name = views.outlier_set(run.results, "typed", layer, got)
        except (InputError, ValueError) as e:
            st.error(f"Typed dims: {markdown_text(str(e))} Meanwhile this tab uses the persistent dims.",
                     icon=":material/error:")
            which = "persistent"
    if which != "typed":
        dims, name = views.outlier_set(run.results, which, layer)
    st.caption(f"This tab uses {name}: {dims or 'none'}.")
    return which, dims, views.set_label(which, layer, len(dims))


def _ablation(sel, run, layer: int) -> None:
    """The stored ablation of the run's chosen set, or the button that queues it as a job."""
    res = run.results
    _, dims, label = _set_picker(sel, run, layer)
    st.caption("Zero the set's dimensions in every norm. The LM loss on held-out text is compared with zeroing as "
               "many random dimensions (5 draws). Runs as a job (progress above; it loads the model, then 7 forward "
               "passes): keep browsing meanwhile. Each set's result is kept with the run (and goes into the report).")
    ab = data.cached_ablation(run.spec, tuple(dims)) if dims else None
    if ab is not None:
        if not sel.ablation:
            state.update(ablation=True)  # the URL now restores this view
        page.show(views.ablation_view(ab, res, label), "ablation")
    elif not res["manifest"]["model"].get("causal_lm"):
        if st.button("Run ablation", key="ablate", icon=":material/science:"):
            st.error(f"Ablation needs a causal language model with an LM head; {run.label} has none. "
                     "Try smollm2-135m or untrained-gpt2.")
    elif not dims:
        st.info("This set holds no dimension in this run: nothing to ablate. Pick another set above.")
    else:
        if ui_run.job_active("ablation", run.spec, tuple(dims)):
            st.caption(":material/hourglass_top: The ablation job is running: its progress is shown at the top of "
                       "the page; the result appears here when it ends.")
        elif st.button("Run ablation", key="ablate", icon=":material/science:",
                       help="Queue the ablation as a job (Cancel in its progress panel)."):
            try:
                ui_run.submit_ablation(run.spec, tuple(dims))
                state.update(ablation=True)
                st.rerun()
            except InputError as e:
                st.error(markdown_text(str(e)))
        elif sel.ablation:
            st.caption("This link shows the ablation, which is not computed for this run yet: press **Run ablation**.")
    cab = data.cached_chain_ablation(run.spec)
    if cab is not None and "outlier_dims" in cab["ablations"]:  # the Chain page's job: the same dims, layer by layer
        page.show(chain_views.ablation_curves(cab, res, ("outlier_dims", "outlier_random")), "ablation_curves")


sel, runs = page.header("Outlier dimensions")
page.live(sel, runs, "outliers")  # the curves so far of the runs still computing
if page.need_runs(runs):
    run = page.focus_picker(sel, runs, "outliers") if len(runs) > 1 else runs[0]
    layer = page.layer_picker(state.selection(), [run], "outliers")[0]
    res = run.results

    # Only the open section is computed and drawn: the whole page was 7 figures and 5 tables, about
    # 2 s of one core in the browser per visit (the at-one-layer and across-layers figures apart too:
    # 0.87 -> 0.7-0.8 s, one user). A link with a dim or the ablation opens on that section.
    # The open one is in the URL (otab).
    first = sel.outliers_section or ("dimension" if sel.dim is not None else "ablation" if sel.ablation else "dims")
    tabs = page.lazy_tabs(SECTIONS, "outliers_section", SECTIONS[OUTLIERS_SECTIONS.index(first)])
    opened = page.open_section(tabs, OUTLIERS_SECTIONS)
    if opened != first or sel.outliers_section is not None:
        sel = state.update(outliers_section=opened)
    dims_tab, across_tab, defs_tab, freq_tab, drill_tab, ablation_tab = tabs
    if dims_tab.open:
        with dims_tab:
            here, _ = views.outlier_set(res, "layer", layer)
            persistent, _ = views.outlier_set(res)
            st.caption(f"This tab uses the dims over the 3-sigma rule at layer {layer} ({here or 'none'}). The "
                       f"Frequency, Drill and Ablation tabs use the run's {len(persistent)} persistent outlier dims "
                       "by default (flagged in many layers, or by the norm-parameter rule); each can switch to this "
                       "layer's set or to dims you type.")
            page.show(data.outlier_bars(run.spec, layer), "bars")
            page.show(data.cosine_contribution_bars(run.spec, layer), "cc")

    if across_tab.open:
        with across_tab:
            page.show(data.outlier_heatmap(run.spec), "heatmap")
            st.markdown("**Persistent outlier dimensions**")
            page.show(views.outlier_summary(res), "summary", static=True)
            st.caption("Published dims (Puccetti et al. 2022) belong to other models with another d: context, "
                       "not a check of this run.")

    if defs_tab.open:
        with defs_tab:
            st.markdown("**Activations vs LayerNorm parameters**")
            defs = views.outlier_definitions(res)
            page.show(defs, "defs")
            st.markdown("**Per layer: activation rule vs norm-parameter rule (Jaccard overlap)**")
            st.dataframe(defs.data, hide_index=True, width="stretch", key="df_agreement")
            with st.expander("Massive activations (top-1 / median per layer, log scale; the tokens holding them)"):
                massive = views.massive_activations(res)
                page.show(massive, "massive")
                st.dataframe(massive.data, hide_index=True, width="stretch", key="df_massive")

    if freq_tab.open:
        with freq_tab:
            which, set_dims, _ = _set_picker(sel, run, layer)
            freq, freq_table = data.frequency_views(run.spec, which, layer, tuple(set_dims))
            page.show(freq, "freq")
            st.markdown("**Pearson r per outlier dimension**")
            page.show(freq_table, "freq_table", shown=freq.notes)  # the position warning: once, above
            with st.expander("What the columns mean"):
                st.markdown("\n".join(f"- **{k}**: {markdown_text(v)}" for k, v in views.FREQUENCY_COLUMNS.items()))

    if drill_tab.open:
        with drill_tab:
            _, set_dims, _ = _set_picker(sel, run, layer)
            page.dimension_picker(state.selection(), run, "outliers", set_dims)
            dim = state.selection().dim_for(run.results)
            tokens, scatter, rprof = data.dimension_views(run.spec, dim, layer)
            s1, s2 = st.columns(2)
            with s1:
                page.show(rprof, "dim_r", half=True)
            with s2:
                page.show(scatter, "dim_scatter", half=True)
            st.markdown(f"**Top-activating tokens of dim {dim} at layer {layer}** (largest |x_{dim}| in the sample)")
            page.show(tokens, "dim_tokens")

    if ablation_tab.open:
        with ablation_tab:
            _ablation(sel, run, layer)
