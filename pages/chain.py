"""The outlier chain: super weights, massive activations, outlier dims, attention sinks and mean cosine on
one depth axis, a sentence per link from the numbers, and the ablations link by link (a job)."""

import streamlit as st

from core.base.errors import InputError
from core.base.escape import markdown_text
from core.studies.selection import METRICS
from core.views import chain as C
from ui import data, page, state
from ui import run as ui_run

sel, runs = page.header("The outlier chain")
if page.need_runs(runs):
    run = page.focus_picker(sel, runs, "chain") if len(runs) > 1 else runs[0]
    res = data.chain_results(run.spec)  # with the chain section when it is computed
    att = data.attention(run.spec) if data.attention_cached(run.spec) else None
    ab = data.cached_chain_ablation(run.spec)
    if "chain" not in res:
        if ui_run.job_active("chain", run.spec):
            st.caption(":material/hourglass_top: The chain statistics are running (progress above).")
        elif st.button("Compute the chain statistics", key="chain_stats", icon=":material/link:", type="primary",
                       help="Super weights, sink rate, LLM.int8 outliers: one more pass over the run's windows "
                            "(a job; it loads the model)."):
            try:
                ui_run.submit_chain(run.spec)
                st.rerun()
            except InputError as e:
                st.error(markdown_text(str(e)))
    stats = C.statistics_of(res)  # the last panel: any per-layer statistic of the registry
    stat = st.selectbox("Last panel", stats, index=stats.index("mean_cosine") if "mean_cosine" in stats else 0,
                        format_func=lambda k: METRICS[k][0], key="chain_stat") if stats else "mean_cosine"
    view = C.chain_view(res, att, ab, stat)
    page.show(view, "chain")
    for extra, key in ((C.candidates_view(res), "chain_candidates"), (C.high_norm_view(res), "chain_high_norm"),
                       (C.int8_view(res), "chain_int8")):
        if extra is not None:  # the chain section's candidates, high-norm tokens and LLM.int8 sets
            page.show(extra, key, static=extra.figure is None)
    st.subheader("Ablations, link by link")
    targets = data.chain_targets(run.spec)
    sw = targets["super_weights"]
    m = targets["massive"]
    weights = ", ".join(f"block {s['block']} {s['module']}[{s['row']}, {s['col']}]" for s in sw) or "none found"
    alone = ", ".join(f"block {s['block']} [{s['row']}, {s['col']}]" for s in targets.get("single") or []) or "none"
    massive = f"{m['dims']} in the residual stream from block {m['from_block']} on" if m else \
        "none (no layer over 100x its median)"
    st.caption(markdown_text(
        f"Zero the super-weight candidates {weights} together (controls: as many random weights of the same matrix, "
        f"and its largest other weights), and each of {alone} alone (controls: one random weight of its matrix, and "
        f"its largest non-candidate weight); the massive dim(s) {massive} (control: random dims); the outlier dims "
        f"{targets['outlier_dims'] or 'none'} in every norm (control: random dims). Before and after each: loss, "
        f"mean cosine, outlier count, top-1/median and sink share per layer. "
        f"Runs as a job (progress above); keep browsing meanwhile."))
    if ab is not None:
        if not sel.chain_ablation:
            state.update(chain_ablation=True)  # the URL now restores this view
        page.show(C.ablation_curves(ab, res), "chain_ablations")
        alone_view = C.single_ablations(ab, res)
        if alone_view is not None:
            page.show(alone_view, "chain_single_ablations")
    elif ui_run.job_active("chain-ablation", run.spec):
        st.caption(":material/hourglass_top: The chain ablations are running: their progress is shown at the top of "
                   "the page; the curves appear here when they end.")
    elif not (sw or m or targets["outlier_dims"]):
        st.info("Nothing to ablate in this run: no super weight, no massive dim, no outlier dim.")
    elif st.button("Run the chain ablations", key="chain_ablate", icon=":material/science:",
                   help="Queue the ablations as a job (Cancel in its progress panel)."):
        try:
            ui_run.submit_chain_ablation(run.spec)
            state.update(chain_ablation=True)
            st.rerun()
        except InputError as e:
            st.error(markdown_text(str(e)))
    elif sel.chain_ablation:
        st.caption("This link shows the chain ablations, which are not computed for this run yet: press "
                   "**Run the chain ablations**.")
