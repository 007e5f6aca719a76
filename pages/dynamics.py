"""Dynamics: how anisotropy and outlier dimensions develop over training, read from the analysed
checkpoints of runs trained on the Train page (each checkpoint cached like any run)."""

import streamlit as st

from core.base.errors import InputError
from core.studies.selection import LIMITS, MAX_DYNAMICS_RUNS, METRICS
from core.views import chain as C
from core.views import dynamics as D
from ui import page, state, training

page.title("Training dynamics")
with st.expander("A hub model's revisions as a series (e.g. Pythia's step0, step1000, …; needs the hub)"):
    with st.form("hub_series_form"):
        h1, h2 = st.columns([2, 3])
        hub_id = h1.text_input("Hub model", "", placeholder="EleutherAI/pythia-70m", key="dyn_hub")
        hub_revs = h2.text_input("Revisions (named stepN, comma-separated)", "",
                                 placeholder="step0,step1000,step8000,step143000", key="dyn_hub_revs")
        add = st.form_submit_button("Add and analyse", icon=":material/cloud_download:")
    if add:
        try:  # offline, only revisions already in the local hub cache (HF_HOME) are accepted
            hub_run = training.add_hub_series(hub_id, hub_revs, max_tokens=state.selection().dyn_tokens)
        except InputError as e:  # a bad id or revision, the hub unreachable
            st.error(page.md(str(e)), icon=":material/error:")
        except OSError as e:  # the series record or the queue could not be written
            st.error(page.md(f"The series could not be added: {e}"), icon=":material/error:")
        else:
            state.log().dynamics_runs = [hub_run]
            st.toast(f"Queued: the analysis of every revision of {hub_id.strip()}.")
page.job_panel()
runs = training.series_on_disk()
if not runs:
    st.info("No trained run yet: train one (or a preset) on the **Train** page.", icon=":material/arrow_back:")
    st.stop()
lg = state.log()
sel = state.selection()
# A preset's runs reach the disk one after the other: the box follows them (all of them once trained) until
# the set to open on changes no more; the user's own pick stays otherwise. Without a preset of this session, the
# box opens on the selection's runs (a link's druns), else on the first run.
missing = [r for r in sel.dyn_runs if r not in runs]
if missing:
    st.caption(f":material/link_off: Not on this server: {page.md(', '.join(missing))} (this link's runs).")
default = [r for r in lg.dynamics_runs if r in runs] or [r for r in sel.dyn_runs if r in runs] or runs[:1]
if st.session_state.get("_dyn_default") != default:
    st.session_state["_dyn_default"] = default
    st.session_state["dyn_pick"] = default


def _name(run: str) -> str:
    """A run by the name its preset gave it ("BPE · <run>"), else by its run name."""
    return f"{lg.dynamics_labels[run]} · {run}" if run in lg.dynamics_labels else run


chosen = st.multiselect("Runs (two to compare)", runs, max_selections=MAX_DYNAMICS_RUNS, key="dyn_pick",
                        format_func=_name)
c1, c2 = st.columns(2)
max_tokens = c1.number_input("Tokens analysed per checkpoint", *LIMITS["dyn_tokens"], sel.dyn_tokens, step=1000,
                             key="dyn_tokens")
metric = c2.selectbox("Metric of the heatmap and the comparison", list(METRICS), index=list(METRICS).index(sel.metric),
                      format_func=lambda k: METRICS[k][0], key="dyn_metric")
# what is drawn is in the selection (and the URL: druns, dtokens, metric)
sel = state.update(dyn_runs=tuple(chosen), dyn_tokens=int(max_tokens), metric=metric)
kw = {"max_tokens": sel.dyn_tokens}

series = {}
for run in chosen:
    ser = training.cached_series(run, **kw)
    if ser is None:
        st.caption(f":material/hourglass_empty: {run}: checkpoints not all analysed for these settings.")
        if st.button(f"Analyse every checkpoint of {run}", key=f"an_{run}", type="primary"):
            training.submit_series(run, **kw)
            st.rerun()  # the job panel above shows it
        continue
    label = lg.dynamics_labels.get(run, run)  # figures and sentences name the run as its preset did
    series[run if label in series else label] = ser  # (two presets' "BPE": the second by its run name)

if series:
    summaries = {run: D.summary(ser) for run, ser in series.items()}
    st.subheader("What the data shows")
    for line in D.compare_findings(summaries) if len(summaries) > 1 else next(iter(summaries.values()))["findings"]:
        st.markdown(f"- {line}")
    if len(series) > 1:
        page.show(D.compare_runs(series, sel.metric), "dyn_cmp")  # the chosen statistic of the registry
    for run, ser in series.items():
        st.subheader(run)
        page.show(D.metric_heatmap(ser, sel.metric), f"dyn_heat_{run}")
        page.show(D.cosine_curves(ser), f"dyn_curves_{run}")
        page.show(D.metric_heatmap(ser, "intrinsic_dim_twonn"), f"dyn_id_{run}")
        page.show(D.cka_to_final(ser), f"dyn_cka_{run}")
        if D.has_loss(ser):  # a hub model's revisions come without losses
            page.show(D.loss_curves(ser), f"dyn_loss_{run}")
        if D.has_attention(ser):  # query/key drift of the attention statistics, per block and head
            for stat in D.DRIFT_STATS:
                page.show(D.qk_drift(ser, stat), f"dyn_{stat}_{run}")
        elif ser.get("attention_note"):
            st.caption("No query/key drift: " + page.md(ser["attention_note"]))
        page.show(D.outlier_counts(ser), f"dyn_counts_{run}")
        page.show(D.outlier_identity(ser), f"dyn_ident_{run}")
        # top-1/median, super weight, sink rate, high-norm share over the checkpoints
        chain = C.chain_dynamics(training.with_chain(ser))
        page.show(chain, f"dyn_chain_{run}")
        st.markdown("\n".join(f"- {page.md(line)}" for line in chain.notes))
