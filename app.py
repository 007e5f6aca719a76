"""Anisotropy workbench: `streamlit run app.py`.

The shared sidebar (models, corpus, budget, Run) and the page navigation. No computation here:
the Run button hands over to ui.run, every page reads the selection and calls core.views.
"""

import streamlit as st

from ui import data, jobs_panel, page, sidebar, state

page.entered()  # this run goes through the entrypoint: a page run alone (Streamlit's pages/ mode) reruns through it
st.set_page_config(page_title="Anisotropy workbench", page_icon=":material/scatter_plot:", layout="wide")
data.warmup()  # a process of its own compiles umap's kernels now and fits every UMAP (core.compute.projection)
jobs_panel.prestart_worker()  # the job worker imports torch and loads the default model before the first Run

nav = st.navigation([
    st.Page("pages/layers.py", title="Layers", icon=":material/show_chart:", default=True, url_path="home"),
    # The default page is served at "/": this hidden alias makes a typed or shared ".../layers" work too.
    st.Page("pages/layers.py", title="Layers", icon=":material/show_chart:", url_path="layers", visibility="hidden"),
    st.Page("pages/outliers.py", title="Outliers", icon=":material/bar_chart:", url_path="outliers"),
    st.Page("pages/chain.py", title="Chain", icon=":material/link:", url_path="chain"),
    st.Page("pages/projection.py", title="Projection", icon=":material/scatter_plot:", url_path="projection"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("pages/train.py", title="Train", icon=":material/model_training:", url_path="train"),
    st.Page("pages/dynamics.py", title="Dynamics", icon=":material/timeline:", url_path="dynamics"),
    st.Page("pages/lab.py", title="Lab", icon=":material/science:", url_path="lab"),
    st.Page("pages/attention.py", title="Attention", icon=":material/visibility:", url_path="attention"),
    st.Page("pages/papers.py", title="Papers", icon=":material/menu_book:", url_path="papers"),
])
here = state.set_page(nav.url_path)  # the URL carries the keys of this page only
sel = sidebar.render(state.selection(), here)  # a Run click queues its jobs here, on every page
state.sync_url(sel)
nav.run()
