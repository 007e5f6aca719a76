"""Experiments built on runs: attention, the outlier chain, training, checkpoint series, drift, the papers, and the
dashboard's selection of runs.
"""
