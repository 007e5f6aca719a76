"""The one configuration of every analysis rule, and the code version of what computes results.

Every number that decides what a result *means* (a sigma, a persistence threshold, how many
contexts a token needs, how many bootstrap draws, how many dims are "top") lives in
`AnalysisConfig`. It is frozen, and its hash is part of the cache keys of statistics and results
(`cache_identity`), together with a hash of the source of the modules that compute them
(`key_code`: the import closure of each kind's entry modules, `key_modules`): changing a rule or the
code recomputes instead of serving stale numbers. There is no hand-bumped version number and no
hand-kept list of modules.

    >>> CONFIG.outlier_sigma
    3.0
    >>> AnalysisConfig(top_k_contributions=5).top_k_contributions
    5
    >>> len(config_hash()) == 16
    True
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

# What each kind of cache key hashes: the source of its entry modules and of every core module they import,
# at the top or inside a function, followed through the imports of those (`key_modules`, read with ast: nothing
# is imported). A module of the product is in a key because the code that makes the entry reaches it, never
# because a list names it; parent packages count (their __init__ runs on import). Nothing outside core/ is
# walked: core imports neither ui/ nor pages/, and the torch-side modules it reaches (the extraction, the
# torchrun reduction, the model loaders) all change numbers, so none is left out.
KEY_ENTRIES: dict[str, tuple[str, ...]] = {
    # the statistics: core.compute.pipeline's get_stats, and on a miss (its in-function import) core.compute.forward_run
    # (prepare's windows, the extraction, the norm parameters, the manifest)
    "stats": ("core.compute.pipeline",),
    # what is derived from statistics: results.json (with core.stats.chain_summary's massive_activations), the
    # post-processing what-ifs, the isotropic baselines and the LM-loss ablations (core.compute.pipeline calls them)
    "results": ("core.stats.assemble", "core.compute.ablation"),
    "lens": ("core.compute.lens",),  # added to the statistics' key of a run with the logit lens only
    "attention": ("core.studies.attention.run", "core.studies.attention.viewer"),
    "drift": ("core.studies.drift",),
    "chain": ("core.studies.chain.run",),
    "chain-ablation": ("core.studies.chain.ablate_links",),
}
# Import edges a kind's walk does not follow, each with why the imported module cannot change what is stored under
# that key (the module still counts when another module of the walk imports it).
KEY_CUTS: dict[str, dict[tuple[str, str], str]] = {
    "stats": {
        ("core.compute.pipeline", "core.stats.assemble"): "core.compute.pipeline calls it for results, which have their own key "
                                            "(the statistics' key and the 'results' code), and for the partial results shown "
                                            "while a run computes, which are never stored",
        ("core.compute.forward_run", "core.compute.lens"): "its numbers enter the statistics only with spec.logit_lens, and then "
                                           "the key adds the 'lens' code (so that the keys of runs without it stay)",
    },
}


@dataclass(frozen=True)
class AnalysisConfig:
    """Every analysis rule of the workbench, in one place (DESIGN.md "Definitions")."""

    # Outlier dimensions: activation rule (m_d > mean(m) + sigma std(m)) and Puccetti et al.'s
    # norm-parameter rule (|w_d - mean(w)| > sigma std(w)).
    outlier_sigma: float = 3.0
    activation_persistence: float = 0.25  # persistent when flagged in >= 25% of the layers
    norm_persistence_blocks: int = 3  # Puccetti et al.: persistent when flagged in MORE than 3 blocks
    massive_top: int = 5  # dims reported per layer in the massive-activations table
    # Self-similarity (Ethayarajh 2019): the most frequent ids among those seen in enough contexts.
    self_sim_ids: int = 200
    min_contexts: int = 5  # distinct sequences a token id must occur in to be tracked
    # Bootstrap CI of mean_cosine: documents are dealt into groups; groups are resampled.
    bootstrap_groups: int = 64
    bootstrap_draws: int = 1000
    ci_level: float = 0.95
    # Cosine contributions (Timkey & van Schijndel 2021): dims reported, ranked by |CC_d|.
    top_k_contributions: int = 20
    # Frequency analysis (Puccetti et al. 2022): equal-token frequency bins; random baseline dims.
    freq_bins: int = 10
    frequency_random_dims: int = 10
    # Ablation: random draws of as many dims, held-out text, its window length and batch size.
    ablation_random_draws: int = 5
    ablation_held_out_tokens: int = 4096
    ablation_max_seq_len: int = 256
    ablation_batch_size: int = 16
    # Pairwise-cosine histogram of the sample.
    hist_bins: int = 100
    hist_max_pairs: int = 2_000_000
    # Isotropic Gaussian baselines of the sample metrics (same K and d): their seed.
    isotropic_seed: int = 12345
    # Attention (Puccetti et al.'s outlier link): random non-outlier dims of the baseline; positions
    # of the single-window attention viewer (the first ones of the window).
    attention_random_dims: int = 10
    attention_viewer_tokens: int = 64

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CONFIG = AnalysisConfig()


def _stable_hash(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def config_hash(cfg: AnalysisConfig = CONFIG) -> str:
    """16 hex digits identifying the rules of `cfg`."""
    return _stable_hash(cfg.to_dict())[:16]


_CORE = Path(__file__).resolve().parents[1]  # the core package, where the walk reads its modules


def _source(module: str) -> Path | None:
    """The file of core module `module` (a package's __init__.py), None when there is none."""
    parts = module.split(".")
    if parts[0] != "core":
        return None
    base = _CORE.joinpath(*parts[1:])
    for path in ((base / "__init__.py",) if len(parts) == 1 else (base.with_suffix(".py"), base / "__init__.py")):
        if path.is_file():
            return path
    return None


def _longest_module(name: str) -> str | None:
    """The longest prefix of dotted `name` that is a core module (`core.x.f` -> `core.x`)."""
    parts = name.split(".")
    while parts and _source(".".join(parts)) is None:
        parts.pop()
    return ".".join(parts) or None


@functools.lru_cache(maxsize=None)
def imported_modules(module: str) -> frozenset[str]:
    """The core modules that `module` imports anywhere in its source (at the top, inside functions, under
    TYPE_CHECKING), and its parent packages. Read with ast; nothing is imported."""
    path = _source(module)
    if path is None:
        raise RuntimeError(f"cannot find the source of {module}")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from . import x`: the submodule x when there is one, else the package it is read from
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        out.update(m for m in map(_longest_module, names) if m)
    out.discard(module)
    return frozenset(out)


@functools.lru_cache(maxsize=None)
def key_modules(kind: str) -> tuple[str, ...]:
    """The core modules whose source is hashed into cache keys of `kind` (KEY_ENTRIES), sorted: the entry
    modules and everything they import, directly or not, except through the edges of KEY_CUTS."""
    if kind not in KEY_ENTRIES:
        raise ValueError(f"unknown cache key kind {kind!r}: one of {sorted(KEY_ENTRIES)}")
    cuts = KEY_CUTS.get(kind, {})
    seen: set[str] = set()
    todo = list(KEY_ENTRIES[kind])
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(d for d in imported_modules(m) if (m, d) not in cuts)
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=None)
def code_version(modules: tuple[str, ...]) -> str:
    """16 hex digits of the sha256 of the source files of `modules`, taken in sorted order (read, not
    imported: a cache hit never imports torch). Any edit to them changes every key built on it."""
    h = hashlib.sha256()
    for name in sorted(set(modules)):
        path = _source(name)
        if path is None:
            raise RuntimeError(f"cannot find the source of {name}")
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def key_code(kind: str) -> str:
    """16 hex digits of the code behind cache keys of `kind`: `code_version(key_modules(kind))`."""
    return code_version(key_modules(kind))


def cache_identity(kind: str, cfg: AnalysisConfig = CONFIG) -> dict:
    """What a cache key of `kind` (a key of KEY_ENTRIES: "stats", "results", "attention", "drift", ...) must
    include beyond the run's spec: the rules and the code."""
    return {"config": config_hash(cfg), "code": key_code(kind)}
