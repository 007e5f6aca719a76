"""Attention statistics per block and head, one job per module:

    arch.py     where a model keeps its attention (modules, q/k projections), eager attention on demand
    stats.py    the streamed accumulation: hooks reduce each layer's probabilities and q/k (torch)
    summary.py  the attention section from the sums, and the arrays the views read (numpy only)
    run.py      the cached section of a run (through `prepare`), its key, the torchrun path, the job
    viewer.py   one window's attention maps beside their ablated twin (the viewer's job)

The names below are the package's public interface (`from core.studies import attention as A`).
"""

from .arch import Arch, AttnLayer, attention_arch, eager_attention
from .run import (
    attention_key,
    doc_start,
    document_index,
    is_cached,
    job_attention,
    link_dims,
    run_attention,
)
from .stats import MAX_KEYS, SUM_KEYS, AttentionAccumulator, extract_attention, merge_attention, pick_dims
from .summary import KEY_SETS, finish, head_matrix, layer_means, link_matrix
from .viewer import attention_maps, cached_maps, job_attention_maps, maps_params

__all__ = [
    "Arch", "AttnLayer", "AttentionAccumulator", "KEY_SETS", "MAX_KEYS", "SUM_KEYS", "attention_arch", "attention_key",
    "attention_maps", "cached_maps", "doc_start", "document_index", "eager_attention", "extract_attention", "finish",
    "head_matrix", "is_cached", "job_attention", "job_attention_maps", "layer_means", "link_dims", "link_matrix",
    "maps_params", "merge_attention", "pick_dims", "run_attention",
]
