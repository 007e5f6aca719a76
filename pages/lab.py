"""Lab: is anisotropy inherent to Transformers? A grid of small models trained identically but for one factor at a
time (family, optimizer, tied embeddings, the attention gate...), seeds for intervals: the grid, one curve per cell
over training, the main effects with their 95% intervals, and the claims they answer (core/studies/lab.py)."""

import streamlit as st

from core.base.errors import InputError
from core.inputs.access import quote_ident
from core.views import lab as LV
from ui import lab as ui_lab
from ui import page, state

page.title("Lab: is anisotropy inherent to Transformers?",
           "A grid of small models trained on the same tokens, in the same order, for the same steps, that differ in "
           "one factor at a time; seeds give each number a 95% interval, and a run that did not learn (held-out loss "
           "not below the unigram entropy) is listed, not averaged in. The lab is one job; each run in it is an "
           "ordinary cached training. Also `python -m core lab --factor arch=gpt2,mamba --seeds 3 --out lab.json`.")
sel = state.selection()
stored, notes = ui_lab.labs()
for n in notes:  # a damaged or foreign file in the labs folder: said, not drawn
    st.warning(page.md(n), icon=":material/warning:")


# ----------------------------------------------------------------------------- start a lab
def _quick() -> None:
    """The quick lab's settings into the form (before its widgets exist in the rerun this click starts)."""
    for k, levels in ui_lab.quick_levels().items():
        st.session_state[f"lab_f_{k}"] = levels
    for k in ui_lab.factors_offered():
        if k not in ui_lab.quick_levels():
            st.session_state[f"lab_f_{k}"] = []
    for k, v in ui_lab.QUICK.items():
        st.session_state[f"lab_{k}"] = v


with st.expander("Start a lab", expanded=not stored, icon=":material/science:"):
    q = ui_lab.QUICK
    st.button(f"Quick lab ({LV.plural(len(ui_lab.quick_levels()['arch']), 'family', 'families')} × "
              f"{LV.plural(q['seeds'], 'seed')}, {q['steps']} steps, {q['n_layers']} layers, d = {q['d_model']})",
              key="lab_quick", on_click=_quick, icon=":material/bolt:",
              help="Fills the form with issue 41's quick lab (every family trained here); press Start to queue it.")
    offered = ui_lab.factors_offered()
    with st.form("lab_form"):
        picked = {}
        # the families on a row of their own: the quick lab's four chips overflow a third of the width (the first
        # one scrolled out of sight in chromium)
        rest = [k for k in offered if k != "arch"]
        cols = st.columns(min(len(rest), 3) or 1)
        for k, levels in offered.items():
            st.session_state.setdefault(f"lab_f_{k}", list(levels[:2]) if k == "arch" else [])
            where = st if k == "arch" else cols[rest.index(k) % len(cols)]
            picked[k] = where.multiselect(ui_lab.FACTOR_TITLES.get(k, k), list(levels), key=f"lab_f_{k}",
                                          format_func=ui_lab.level_text)
        c1, c2, c3, c4 = st.columns(4)
        d = ui_lab.DEFAULT
        for k, v in d.items():
            st.session_state.setdefault(f"lab_{k}", v)
        seeds = c1.number_input("Seeds", 1, 10, key="lab_seeds")
        steps = c2.number_input("Steps", 1, 1_000_000, key="lab_steps")
        layers = c3.number_input("Layers", 1, 48, key="lab_n_layers")
        width = c4.number_input("Width (d_model)", 16, 4096, step=16, key="lab_d_model")
        go = st.form_submit_button("Start the lab", type="primary", icon=":material/play_arrow:")
    st.caption("Each factor with two or more levels is crossed with the others; one level is a setting of every run. "
               "On a GPU, larger sizes train in the same time (`--layers/--d-model`).")
if go:
    try:
        params = ui_lab.lab_params(picked, int(seeds), int(steps), int(layers), int(width))
        ui_lab.submit(params)
    except InputError as e:  # no factor, a setting TrainSpec refuses, no "lab" job here
        st.error(page.md(str(e)), icon=":material/error:")
    except OSError as e:
        st.error(page.md(f"The lab could not be queued: {e}"), icon=":material/error:")
    else:
        st.toast("Queued: the lab runs as one job (navigating or closing the tab does not stop it).")
ui_lab.panel()

# ----------------------------------------------------------------------------- pick a lab (URL: lab)
ids = [x["id"] for x in stored]
if sel.lab is not None and sel.lab not in ids:
    problem = (f"URL parameter lab={quote_ident(sel.lab)} ignored: no lab of that id is stored here"
               + ("; showing the newest." if ids else "."))
    st.warning(page.md(problem), icon=":material/link_off:")
    state.log().url_problems.append(problem)
    sel = state.update(lab=None)
if not stored:
    st.info("No lab is stored yet: start one above (or `python -m core lab ...`).", icon=":material/info:")
    st.stop()
by_id = {x["id"]: x for x in stored}
cur = sel.lab or ids[0]
choice = st.selectbox("Lab (newest first)", ids, index=ids.index(cur), key="lab_pick",
                      format_func=lambda i: LV.lab_label(by_id[i]))
if choice != cur:
    sel = state.update(lab=choice)
lab = by_id[choice]
s = LV.lab_summary(lab)
(st.success if s["status"] == "done" else st.info)(
    page.md(f"{s['factors']} · {LV.plural(s['seeds'], 'seed')} · {s['cells']} cells · runs done: {s['runs done']} · status: "
            f"{s['status']}" + ("" if s["status"] == "done" else " (cells fill in as their runs finish)")),
    icon=":material/task_alt:" if s["status"] == "done" else ":material/hourglass_top:")
if len(stored) > 1:
    with st.expander("Every stored lab"):
        page.show(LV.labs_table(stored), "lab_list")

st.subheader("The claims")
page.show(LV.claims_view(lab), "lab_claims", static=True)

st.subheader("The grid")
grid = LV.grid_view(lab)
st.dataframe(LV.grid_text(lab), hide_index=True, width="stretch", key="lab_grid_table")
st.caption(page.md(grid.caption))
page.downloads(grid, "lab_grid")

st.subheader("Over training")
page.show(LV.curves_view(lab), "lab_curves")

st.subheader("Main effects")
stats = LV.effect_statistics(lab)
if sel.lab_stat is not None and sel.lab_stat not in stats:
    problem = (f"URL parameter lstat={quote_ident(sel.lab_stat)} ignored: this lab's effects are computed for "
               f"{', '.join(stats) or 'no statistic'}.")
    st.warning(page.md(problem), icon=":material/link_off:")
    state.log().url_problems.append(problem)
    sel = state.update(lab_stat=None)
stat = None
if len(stats) > 1:
    cur_stat = sel.lab_stat or stats[0]
    stat = st.segmented_control("Statistic", stats, default=cur_stat, key="lab_stat", format_func=LV.stat_label) \
        or cur_stat
    if stat != (sel.lab_stat or stats[0]):
        sel = state.update(lab_stat=stat)
page.show(LV.effects_view(lab, stat), "lab_effects")
