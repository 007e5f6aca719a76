"""A small typed accessor for results.json, so views never reach into the dict by string paths.

`Results` wraps the dict that `pipeline.analyze` returns (and the CLI writes) without copying it;
every view reads a run through it. Layer 0 is the embedding output.

    >>> r = Results({"manifest": {"model": {"label": "m", "hidden_size": 4}, "corpus": {"id": "c"},
    ...              "tokens": {"analysed": 10, "sample": 5}},
    ...              "layers": [{"layer": 0, "mean_cosine": 0.1}, {"layer": 1, "mean_cosine": None}]})
    >>> r.n_layers, r.n_tokens, r.values("mean_cosine")
    (2, 10, [0.1, nan])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..inputs.uploads import display_name
from ..stats.outliers import run_outlier_dims


def _float(v) -> float:
    return math.nan if v is None else float(v)


def corpus_display(cid: str, text_column: str | None = None) -> str:
    """A corpus for people: a built-in id as is, an upload by the name it was uploaded (or renamed) under,
    with a table's text column ("my-corpus.csv [text]"); see core.inputs.uploads.display_name."""

    return display_name(cid, text_column)


def not_enough_data(results: dict) -> str | None:
    """What a tiny corpus cannot give (those metrics are null in results.json), or None.

    >>> not_enough_data({"manifest": {"tokens": {"analysed": 1}}, "layers": [{"n_sequences": 1}]})
    'one token: no pair of tokens, so no cosine, spread or spectrum (shown as gaps, null in results.json).'
    """
    n = int(results["manifest"]["tokens"]["analysed"])
    n_seq = int((results.get("layers") or [{}])[0].get("n_sequences") or 0)
    if n < 2:
        return f"{'one token' if n == 1 else 'no token'}: no pair of tokens, so no cosine, spread or spectrum " \
               "(shown as gaps, null in results.json)."
    if n_seq == 1:
        return "one sequence: no pair of tokens from different sequences, so no cross-sequence cosine or " \
               "self-similarity (null in results.json)."
    return None


@dataclass(frozen=True)
class Results:
    """Read-only view of one run's results dict."""

    raw: dict

    # ------------------------------------------------------------------ the run
    @property
    def manifest(self) -> dict:
        return self.raw["manifest"]

    @property
    def model(self) -> dict:
        return self.manifest["model"]

    @property
    def model_label(self) -> str:
        return self.model["label"]

    @property
    def hidden_size(self) -> int | None:
        d = self.model.get("hidden_size")
        return int(d) if d else None

    @property
    def corpus_label(self) -> str:
        c = self.manifest["corpus"]
        return corpus_display(str(c.get("id", "?")), c.get("text_column"))

    @property
    def run_name(self) -> str:
        return f"{self.model_label} · {self.corpus_label}"

    @property
    def cache_key(self):
        return self.manifest.get("cache_key")

    @property
    def n_tokens(self) -> int:
        return int(self.manifest["tokens"]["analysed"])

    @property
    def n_sample(self) -> int:
        return int(self.manifest["tokens"]["sample"])

    # ------------------------------------------------------------------ per layer
    @property
    def layers(self) -> list[dict]:
        return self.raw["layers"]

    @property
    def n_layers(self) -> int:
        """Hidden-state layers, embeddings included (L + 1)."""
        return len(self.layers)

    @property
    def last_layer(self) -> int:
        """L, at least 1 (so that layer / last_layer is a relative depth)."""
        return max(self.n_layers - 1, 1)

    def layer(self, layer: int) -> dict:
        return self.layers[layer]

    def values(self, metric: str) -> list[float]:
        """`metric` at every layer, nan where it is null."""
        return [_float(r.get(metric)) for r in self.layers]

    def value(self, layer: int, metric: str) -> float:
        return _float(self.layers[layer].get(metric))

    def ci(self, metric: str = "mean_cosine") -> tuple[list[float], list[float]]:
        """(low, high) of `<metric>_ci` at every layer, nan where null."""
        cis = [r.get(f"{metric}_ci") or [None, None] for r in self.layers]
        return [_float(c[0]) for c in cis], [_float(c[1]) for c in cis]

    # ------------------------------------------------------------------ outliers and frequency
    @property
    def outliers(self) -> dict:
        return self.raw["outliers"]

    @property
    def activation_outliers(self) -> list[list[int]]:
        """Per layer, the dims flagged by the activation rule."""
        return [list(ds) for ds in self.outliers["activation"]["per_layer"]]

    @property
    def persistent_activation_outliers(self) -> list[int]:
        return list(self.outliers["activation"]["persistent"])

    @property
    def norm_parameters(self) -> dict:
        return self.outliers.get("norm_parameters") or {}

    @property
    def outlier_dims(self) -> list[int]:
        """The outlier dims of the run (persistent, either definition): `outliers.run_outlier_dims`."""
        return run_outlier_dims(self.outliers)

    @property
    def frequency(self) -> dict:
        return self.raw["frequency"]

    @property
    def frequency_bins(self) -> dict:
        return self.raw.get("frequency_bins") or {}


def as_results(r) -> Results:
    """`r` as a Results (a results dict or a Results)."""
    return r if isinstance(r, Results) else Results(r)
