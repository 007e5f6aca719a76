"""What a run reads: corpora, uploads, the model registry and loaders, the hub, trained checkpoints, modalities,
converters, and each architecture's anatomy.
"""
