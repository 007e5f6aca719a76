"""Papers: Ethayarajh 2019, Godey et al. 2023, Puccetti et al. 2022 and the outlier chain reproduced in one click on the
offline models: the paper's figure redrawn, the published values beside ours, the claims table."""

import streamlit as st

from core.base.errors import InputError
from core.studies.selection import METRICS
from core.views import lab as LV
from core.views import papers as PV
from ui import lab as ui_lab
from ui import page, state
from ui import papers as ui_papers


def lab_claims() -> None:
    """Beside Godey et al.'s claims: the same question answered by controlled training (the Lab page's labs)."""
    st.subheader("Is anisotropy inherent to Transformers? (the lab)")
    page.show(LV.papers_claims(ui_lab.labs()[0]), "paper_lab_claims", static=True)
    st.caption("The grid, the curves over training and the main effects of each lab: the **Lab** page.")


page.title("Papers", "Each reproduction is one job that runs every model the paper needs (one process: documents read "
                     "and tokenized once, images and audio decoded once), then computes the paper's claims from the "
                     "numbers. Runs and records are cached: reopening a reproduction is instant, and every run also "
                     "opens on the other pages.")
# The paper, its budget and its runs are in the selection (and the URL: paper, pbudget, pruns).
sel = state.selection()
names = list(ui_papers.PAPER_NAMES)
name = st.segmented_control("Paper", names, default=sel.paper, key="paper_pick",
                            format_func=ui_papers.paper_label) or sel.paper
if name != sel.paper:  # another paper: its own runs (all of them)
    sel = state.update(paper=name, paper_runs=None)
info = ui_papers.paper(name)
st.markdown(f"**{page.md(info.title)}** · {page.md(info.citation)}  \n{page.md(info.what)}.")
budgets = list(ui_papers.BUDGETS)
tokens = st.radio("Positions per run", budgets, index=budgets.index(sel.paper_tokens), format_func=ui_papers.BUDGETS.get,
                  horizontal=True, key="paper_tokens")
every = list(dict.fromkeys(p.model for p in info.parts))  # a model may run on two corpora
picked = st.multiselect("Runs (all by default; fewer for a quick look)", every, default=list(sel.paper_runs or every),
                        key=f"paper_models_{name}",
                        format_func=lambda m: m + next((" (random-init control)" for p in info.parts
                                                         if p.model == m and p.role == "control"), ""))
sel = state.update(paper_tokens=int(tokens), paper_runs=tuple(picked) or None)
s = ui_papers.settings(sel.paper_tokens, sel.paper_runs)
rec = ui_papers.record(name, s)
if rec is None:
    if ui_papers.active(name, s):
        st.info("Reproducing: the progress is shown below; the figures appear here when the job ends (other pages "
                "stay usable meanwhile).", icon=":material/hourglass_top:")
    elif st.button(f"Reproduce {ui_papers.paper_label(name)}", key="paper_run", type="primary",
                   icon=":material/play_arrow:"):
        try:
            ui_papers.submit(name, s)
            st.rerun()
        except InputError as e:
            st.error(page.md(str(e)))
    ui_papers.panel(name, s)
    if name == "godey":
        lab_claims()
else:
    views = PV.paper_views(rec)
    st.success(PV.headline(rec), icon=":material/task_alt:")
    st.subheader("The claims")
    for v in views["claims"]:
        page.show(v, f"paper_{name}_claims", static=True)  # a short table drawn whole: verdicts and reasons wrapped
    if name == "godey":
        lab_claims()
    st.subheader("The paper's figure, redrawn on the offline models")
    for i, v in enumerate(views["figures"]):
        page.show(v, f"paper_{name}_fig{i}")
    if views["published"]:
        st.subheader("Published values beside ours")
        for i, v in enumerate(views["published"]):
            page.show(v, f"paper_{name}_pub{i}")
    with st.expander("The runs"):
        for v in views["runs"]:
            page.show(v, f"paper_{name}_runs")
    keys = PV.statistics_of(rec)
    if keys:  # every per-layer statistic of the registry, for the paper's runs
        with st.expander("Any statistic of these runs"):
            key = st.selectbox("Statistic", keys, format_func=lambda k: METRICS[k][0], key=f"paper_{name}_stat")
            page.show(PV.statistic_view(rec, key), f"paper_{name}_stat")
