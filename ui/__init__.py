"""Streamlit-side helpers shared by app.py and the pages: selection state, cached accessors, the
sidebar, the run panel and the figure/download widgets. No math here: everything computed comes
from core (core.views builds the figures, core.views.export the download bytes)."""
