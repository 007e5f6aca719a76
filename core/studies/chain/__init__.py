"""The outlier chain (issue 24): super weights -> massive activations -> outlier dims -> attention sinks
-> anisotropy, measured on one run.

- `summary` (numpy): the massive-activation and high-norm sections of a run's statistics;
- `hooks` (torch): the hooks on the MLP output projections and the projection inputs;
- `run`: the chain pass over a run's corpus and a probe prompt, and chain.json.

Nothing is imported here, so that core.stats.assemble can read `summary` without importing the runs.
"""
