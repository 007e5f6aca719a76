"""Numpy only: the metric kernels, the statistic registry, geometry, outlier and chain rules, and the assembly of
results.json from statistics.
"""
