"""The dashboard's views: results/stats in, a View (figure + its data + manifest) out.

One module per page (`layers`, `outliers`, `projection`, `compare`), plus `common` (the View record
and run labels). A page calls one function per view and shows `view.figure` / `view.data`; the
export module turns the same View into PNG/SVG/PDF/HTML/CSV/JSON with the manifest embedded.
Inputs are what the pipeline returns (results dicts, RunStats, projection dicts), read through
`core.views.results.Results`; no I/O, cheap to test on synthetic runs. Layer 0 is the embedding output.
Everything is re-exported here, so `from core import views; views.layer_curves(...)` works.
"""

from .common import (
                     Results,
                     View,
                     as_results,
                     corpus_display,
                     corpus_label,
                     depth_of,
                     layer_at_depth,
                     model_label,
                     n_layers,
                     post_for,
                     run_name,
)
from .compare import cka_across, compare_summary, comparison_sentence, outlier_counts, same_tokens
from .controls import add_seed_bands
from .difference import mean_cosine_difference
from .layers import METRIC_COLUMNS, cka_heatmap, frequency_deciles, layer_curves, metric_table, pairwise_histogram
from .lens import lens_curves, lens_tokens, lens_why
from .outliers import (
                     ablation_dims,
                     ablation_view,
                     cosine_contribution_bars,
                     massive_activations,
                     outlier_bars,
                     outlier_definitions,
                     outlier_heatmap,
                     outlier_summary,
)
from .partial import partial_count, partial_view, sample_wait_note
from .projection import check_color, metadata_columns, projection
from .single_dim import (
                     FREQUENCY_COLUMNS,
                     dimension_r,
                     dimension_scatter,
                     dimension_tokens,
                     frequency_correlation,
                     frequency_r_table,
                     outlier_set,
                     position_for,
                     set_label,
)

__all__ = ["View", "Results", "as_results", "corpus_display", "corpus_label", "model_label", "run_name", "n_layers",
           "depth_of", "layer_at_depth", "post_for", "layer_curves", "metric_table", "pairwise_histogram", "cka_heatmap",
           "frequency_deciles", "METRIC_COLUMNS", "outlier_bars", "outlier_heatmap", "cosine_contribution_bars",
           "outlier_definitions", "outlier_summary", "massive_activations", "frequency_correlation",
           "ablation_dims", "ablation_view", "projection", "outlier_counts", "compare_summary", "comparison_sentence",
           "frequency_r_table", "outlier_set", "position_for", "FREQUENCY_COLUMNS", "dimension_tokens",
           "dimension_scatter", "dimension_r", "mean_cosine_difference",
           "add_seed_bands", "cka_across", "same_tokens", "check_color", "metadata_columns", "partial_view",
           "partial_count", "sample_wait_note", "set_label", "lens_curves", "lens_tokens", "lens_why"]
