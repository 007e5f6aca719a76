"""Attention: entropy, sinks, query/key drift per block and head, Puccetti's outlier link, one
window's attention map beside its ablated twin, and the controlled drift experiment."""

import streamlit as st

from core.base.errors import InputError
from core.studies.drift import DriftSpec
from core.studies.selection import ATTN_KEYS, DRIFT_LIMITS, MAX_GRID
from core.views import attention as AV
from ui import data, page, state
from ui import run as ui_run


def _numbers(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.replace(";", ",").split(",") if x.strip())


def drift_section() -> None:
    st.subheader("Controlled experiment: query/key drift vs input drift, at a temperature")
    st.caption("Godey et al.'s mechanism without trained weights: a random pre-norm Transformer block reads isotropic "
               "Gaussian tokens. Isolated: only the queries and keys receive a shared direction of relative norm "
               "alpha (inputs and values stay isotropic). Baseline, input drift: the shared vector is added to the "
               "inputs, which are then anisotropic themselves. The attention logits are divided by a temperature "
               "tau. Seeded and cached; seconds on CPU.")
    shown = state.selection().drift  # the experiment on show is in the selection (and the URL: drift, dr_*)
    cur = shown or DriftSpec()
    lim = DRIFT_LIMITS
    with st.form("drift"):
        c1, c2, c3, c4 = st.columns(4)
        d = c1.number_input("width d", *lim["d"], cur.d, step=8, key="dr_d")
        heads = c2.number_input("heads", *lim["heads"], cur.heads, key="dr_heads")
        seq = c3.number_input("tokens per sequence", *lim["seq_len"], cur.seq_len, key="dr_seq")
        seed = c4.number_input("seed", *lim["seed"], cur.seed, key="dr_seed")
        c5, c6, c7 = st.columns([2, 2, 1])
        alphas = c5.text_input("drift norms alpha", ", ".join(f"{a:g}" for a in cur.alphas), key="dr_alphas")
        taus = c6.text_input("temperatures tau", ", ".join(f"{t:g}" for t in cur.taus), key="dr_taus")
        biases = c7.checkbox("block biases", cur.biases, key="dr_bias",
                             help="PyTorch's default bias init: a vector shared by every token, which makes the "
                                  "output anisotropic with no drift at all (off: a bias-free block)")
        go = st.form_submit_button("Run experiment", type="primary")
    if go:
        try:
            spec = DriftSpec(d=int(d), heads=int(heads), seq_len=int(seq), n_seq=cur.n_seq,
                             alphas=_numbers(alphas), taus=_numbers(taus), seed=int(seed), biases=bool(biases))
            if max(len(spec.alphas), len(spec.taus)) > MAX_GRID:
                raise InputError(f"At most {MAX_GRID} alphas and {MAX_GRID} taus.")
        except (InputError, ValueError) as e:
            st.error(f"Experiment not run: {page.md(str(e))}")
            return
        shown = state.update(drift=spec).drift
    if shown is not None:
        with st.spinner("Running the block…"):
            res = data.drift(shown)
        page.show(AV.drift_findings(res), "drift_findings", static=True)
        for key in ("output_mean_cosine", "output_within_sequence_cosine", "attention_entropy"):
            page.show(AV.drift_heatmap(res, key), f"drift_{key}")


sel, runs = page.header("Attention")
if page.need_runs(runs):
    run = page.focus_picker(sel, runs, "attention")
    res = run.results
    st.caption("Per block (1 = first) and head: attention entropy, the share paid to the first position and to "
               "special tokens, the mean query/key geometry (projection outputs before any rotary embedding) and "
               "Puccetti et al.'s link between outlier dimensions and the attention a token receives. Computed apart "
               "from the run (eager attention, one more pass over the corpus), then cached.")
    if not data.attention_cached(run.spec):
        if ui_run.job_active("attention", run.spec):  # no second Compute button while it runs
            st.info(f"Computing the attention statistics of {run.label}: the progress is shown at the top of the "
                    "page; the figures appear here when the job ends (other pages stay usable meanwhile).",
                    icon=":material/hourglass_top:")
        else:
            st.info(f"Attention statistics of {run.label} are not computed yet for these settings.",
                    icon=":material/hourglass_empty:")
            if st.button("Compute attention statistics", key="attn_compute", type="primary",
                         icon=":material/visibility:"):
                try:
                    ui_run.submit_attention(run.spec)
                    st.rerun()  # the jobs panel above shows its progress; the page redraws when it ends
                except InputError as e:
                    st.error(page.md(str(e)))
    else:
        sec = data.attention(run.spec)
        # Every choice below is in the selection, so the URL reproduces the view (astat, akeys, alink, win, block, head).
        stat = st.selectbox("Statistic", list(AV.HEATMAP_STATS), index=list(AV.HEATMAP_STATS).index(sel.attn_stat),
                            format_func=lambda k: AV.ATTN_STATS[k][0], key="attn_stat")
        sel = state.update(attn_stat=stat)
        a, b = st.columns(2)
        with a:
            page.show(AV.head_heatmap(res, sec, stat), "attn_heat")
        with b:
            pairs = [(r.results, data.attention(r.spec)) for r in runs
                     if r.spec == run.spec or data.attention_cached(r.spec)]
            page.show(AV.attention_curves(pairs, stat), "attn_curve")

        st.subheader("Outlier link (Puccetti et al. 2022)")
        c1, c2 = st.columns(2)
        ks = c1.radio("Key positions", list(ATTN_KEYS), index=ATTN_KEYS.index(sel.attn_keys), horizontal=True,
                      key="attn_keys", format_func=lambda k: f"special tokens {k}")
        how = c2.radio("Summary over each panel's dims", list(AV.LINK_SUMMARIES), horizontal=True,
                       index=list(AV.LINK_SUMMARIES).index(sel.attn_summary),
                       key="attn_link_summary", format_func=AV.LINK_SUMMARIES.get,
                       help="mean |r|: how strongly the dims track the received attention, whatever the sign "
                            "(a signed mean lets dims of opposite signs cancel); r of the strongest dim: the "
                            "dim with the largest |r| in that block and head (hover names it).")
        sel = state.update(attn_keys=ks, attn_summary=how)
        page.show(AV.link_grid(res, sec, ks, how), "attn_link")
        with st.expander("By block: outlier dims vs random dims (mean and max |r|)"):
            page.show(AV.link_table(res, sec), "attn_link_table")

        st.subheader("One window's attention, with the outlier dims zeroed beside it")
        n_win = int(res["manifest"]["corpus"]["n_windows"])
        docs = AV.window_documents(sec, n_win)
        # (window, block, head from 1) of the map on show
        shown = (sel.attn_window, sel.attn_block, sel.attn_head) if sel.attn_window is not None else None
        if shown is not None and not 0 <= shown[0] < n_win:  # a stale or foreign value: nothing shown
            shown = None
        at_doc = next((i for i, e in enumerate(docs) if shown and shown[0] in e["windows"]), 0)
        c1, c2 = st.columns([3, 2])
        di = c1.selectbox(f"Document ({len(docs)} in the run, by corpus index)", range(len(docs)), index=at_doc,
                          format_func=lambda i: AV.document_label(docs[i]), key="attn_doc")
        entry = docs[di]
        wins = entry["windows"]
        k = c2.selectbox("Window of the document", range(len(wins)), key=f"attn_doc_win_{di}",
                         index=wins.index(shown[0]) if shown and shown[0] in wins else 0,
                         format_func=lambda k: AV.window_label(entry, k))
        c3, c4 = st.columns(2)
        block = c3.slider("block", 1, sec["n_blocks"], min(sel.attn_block, sec["n_blocks"]), key="attn_block")
        head = c4.slider("head (1 = first)", 1, sec["n_heads"], min(sel.attn_head, sec["n_heads"]), key="attn_head")
        st.caption("Show runs the model on the chosen window (twice: as is, and with the outlier dims zeroed); "
                   "block and head then switch between that window's maps at once.")
        show = st.button("Show attention map", key="attn_show", icon=":material/grid_on:")
        window = wins[k] if show else shown[0] if shown else None
        sel = state.update(attn_window=window, attn_block=int(block), attn_head=int(head))
        head = int(head) - 1  # numbered from 1 as blocks are; the arrays index from 0
        if window is not None:
            try:
                with st.spinner("Running the model on one window (twice: as is, and with the outlier dims zeroed)…"):
                    maps = ui_run.attention_maps(run.spec, window)  # a job; the page only waits for it
                if maps is None:
                    st.info("The map's job waits behind other jobs (see the jobs panel): press **Show attention "
                            "map** again once it has run.")
                else:
                    page.show(AV.attention_map_pair(res, maps, int(block), int(head)), "attn_map")
                    if maps["dims"]:
                        page.show(AV.attention_map_change(res, maps, int(block), int(head)), "attn_map_change")
            except InputError as e:
                st.error(page.md(str(e)))
drift_section()
