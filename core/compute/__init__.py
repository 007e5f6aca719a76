"""One run computed: prepare, the extraction (and under torchrun), the cached pipeline, projections, the norm
ablations and the logit lens.
"""
