"""Synthetic runs for the app tier: statistics written into the test cache under a run's real key, so
that every page finds them as a cache hit and no model is ever loaded.

- `seed(spec)` reads the corpus with the project's own reader and budget (core.inputs.corpora), tokenizes it
  with a whitespace tokenizer, draws hidden states (numpy: an isotropic Gaussian plus an offset that
  grows with depth and one outlier dimension driven by token frequency), accumulates the streaming sums
  with the layout core.compute.extract produces, and stores them with the project's cache writer
  (`core.base.cache.get_store(...).put` under `pipeline.run_key(spec)`). `pipeline.analyze` then builds the
  results from them, as after a real run.
- The worker of the app tier runs the "analyze" job kind below (ANISO_JOB_MODULES=synthetic_jobs, set by
  tests/app/conftest.py): it seeds the run, then runs the real job (a cache hit), so Run, progress,
  Cancel and "computed in" go through the real queue and worker.

Model shapes (layers, width) are those of the real models, so the pages show the same layout.
Real models run in tests/integration and tests/browser only.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from core.base.cache import get_store
from core.base.config import CONFIG
from core.base.errors import Cancelled
from core.base.spec import RunSpec
from core.compute.pipeline import is_cached, run_key
from core.entry import job_records
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import describe_model, is_local_folder
from core.stats.sums import SUMS, Tokens, check_layout

SHAPES = {"minilm-l6": (6, 384), "untrained-minilm-l6": (6, 384), "untrained-bert-base": (12, 768),
          "smollm2-135m": (30, 576), "untrained-gpt2": (12, 768)}  # (blocks, width) of the real models
CLS, SEP, PAD, FIRST_WORD = 101, 102, 0, 1000
OUTLIER = 5  # the planted outlier dimension


class WordTokenizer:
    """A whitespace tokenizer with [CLS] ... [SEP] around each text: enough for core.inputs.corpora."""

    all_special_ids = [PAD, CLS, SEP]
    pad_token_id = PAD

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: dict[int, str] = {PAD: "[PAD]", CLS: "[CLS]", SEP: "[SEP]"}

    def __len__(self) -> int:
        return FIRST_WORD + 3000  # uniform-random draws from here

    def _ids(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = FIRST_WORD + len(self.vocab)
                self.words[self.vocab[w]] = w
            out.append(self.vocab[w])
        return out

    def __call__(self, text, add_special_tokens: bool = True):
        one = isinstance(text, str)
        ids = [([CLS] if add_special_tokens else []) + self._ids(t) + ([SEP] if add_special_tokens else [])
               for t in ([text] if one else text)]
        return {"input_ids": ids[0] if one else ids}

    def token(self, i: int) -> str:
        return self.words.get(int(i), f"w{int(i)}")


def shape(model: str) -> tuple[int, int]:
    """(blocks, width) of a built-in, or from a local folder's config.json."""
    if model in SHAPES:
        return SHAPES[model]
    if is_local_folder(model):
        cfg = json.loads((Path(model).expanduser() / "config.json").read_text())
        return (int(cfg.get("num_hidden_layers") or cfg.get("n_layer")),
                int(cfg.get("hidden_size") or cfg.get("n_embd")))
    return 4, 64


def _stack(rows: list[np.ndarray], d: int) -> np.ndarray:
    return np.stack(rows) if rows else np.zeros((0, d))


def synthetic_entry(spec: RunSpec) -> tuple[dict, dict, dict]:
    """(manifest, meta, arrays) of a synthetic run of `spec`, laid out as core.compute.extract lays out a real one."""
    tok = WordTokenizer()
    documents = load_documents(spec.corpus, spec.text_column, spec.encoding)
    windows = tokenize_budget(documents, tok, spec.max_tokens, spec.max_seq_len, spec.seed, spec.corpus)
    analysed = [~s if spec.special_tokens == "exclude" else np.ones(len(s), bool) for s in windows.special]
    ids = np.concatenate([w[m] for w, m in zip(windows.ids, analysed)]).astype(np.int64)
    seq = np.repeat(np.arange(len(windows.ids)), [int(m.sum()) for m in analysed])
    pos = np.concatenate([np.flatnonzero(m) for m in analysed]).astype(np.int64)
    N, n_win = len(ids), len(windows.ids)
    blocks, d = shape(spec.model)
    L1 = blocks + 1
    rng = np.random.default_rng([spec.seed, d, L1])
    uniq, cnt = np.unique(ids, return_counts=True)
    freq_lut = np.zeros(int(ids.max()) + 1)
    freq_lut[uniq] = cnt
    logf = np.log(np.maximum(freq_lut[ids], 1))
    nb, ng = CONFIG.freq_bins, CONFIG.bootstrap_groups
    bins = np.minimum((np.argsort(np.argsort(logf, kind="stable"), kind="stable") * nb) // N, nb - 1)
    edges = np.asarray([[logf[bins == k].min(), logf[bins == k].max()] if (bins == k).any() else [np.nan, np.nan]
                        for k in range(nb)])
    n_ctx = {int(t): len(np.unique(seq[ids == t])) for t in uniq}
    tracked = np.asarray(sorted((int(t) for t in uniq if n_ctx[int(t)] >= CONFIG.min_contexts),
                                key=lambda t: (-freq_lut[t], t))[:CONFIG.self_sim_ids], dtype=np.int64)
    group_of = np.random.default_rng([spec.seed, 1]).integers(0, ng, size=int(windows.doc.max()) + 1)[windows.doc]
    K = min(spec.sample, N)
    sample_idx = np.sort(rng.choice(N, size=K, replace=False))
    common = rng.normal(size=d)
    # the forward sums of core.stats.sums: a naive formula each below, or the declared `add` (numpy) for the others
    forward = [z for z in SUMS if z.source == "forward" and not z.transient]
    acc: dict[str, list] = {z.name: [] for z in forward}
    sample = np.zeros((L1, K, d), dtype=np.float32)
    doc_idx = np.unique(windows.doc, return_inverse=True)[1][seq]
    for layer in range(L1):
        X = rng.normal(size=(N, d)) + 0.6 * layer * common
        X[:, OUTLIER] += (4.0 + layer) * (1 + logf)
        u = X / np.linalg.norm(X, axis=1, keepdims=True)
        ax = np.abs(X)
        g = group_of[seq]
        acc["group_sum_u"].append(np.stack([u[g == k].sum(0) for k in range(ng)]))
        acc["group_u_sq"].append(np.bincount(g, weights=(u * u).sum(1), minlength=ng))
        acc["sum_u_sq"].append((u * u).sum(0))
        S = np.stack([u[doc_idx == k].sum(0) for k in range(doc_idx.max() + 1)])
        acc["sum_doc_sq"].append((S * S).sum())
        acc["sum_norm"].append(np.linalg.norm(X, axis=1).sum())
        acc["sum_x"].append(X.sum(0))
        acc["sum_abs"].append(ax.sum(0))
        acc["sum_abs2"].append((ax * ax).sum(0))
        acc["max_abs"].append(ax.max(0))
        acc["sum_f_abs"].append(logf @ ax)
        seq_u = np.stack([u[seq == s].sum(0) for s in range(n_win)])
        seq_x = np.stack([X[seq == s].sum(0) for s in range(n_win)])
        dot = (seq_u * seq_x).sum(1)
        den = np.bincount(seq, minlength=n_win) * np.linalg.norm(seq_x, axis=1)
        ok = den > 0
        acc["intra_sum"].append(float((dot[ok] / den[ok]).sum()))
        acc["intra_n"].append(float(ok.sum()))
        acc["id_sum_u"].append(_stack([u[ids == t].sum(0) for t in tracked], d))
        acc["id_seq_sq"].append(np.asarray([sum(float(np.sum(u[(ids == t) & (seq == s)].sum(0) ** 2))
                                                for s in np.unique(seq[ids == t])) for t in tracked]))
        acc["bin_sum_u"].append(np.stack([u[bins == b].sum(0) for b in range(nb)]))
        acc["bin_u_sq"].append(np.bincount(bins, weights=(u * u).sum(1), minlength=nb))
        tok_x = Tokens(X, np.linalg.norm(X, axis=1), np.ones(N, dtype=bool), d)
        for z in forward:
            if z.add is not None:
                acc[z.name].append(z.add(tok_x))
            elif len(acc[z.name]) != layer + 1:
                raise KeyError(f"core.stats.sums declares {z.name!r}: give it a naive formula here (or an `add` there)")
        sample[layer] = X[sample_idx]
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in acc.items()}
    arrays["id_sum_u"] = arrays["id_sum_u"].reshape(L1, len(tracked), d)
    arrays["id_seq_sq"] = arrays["id_seq_sq"].reshape(L1, len(tracked))
    doc_n = np.bincount(doc_idx).astype(np.float64)
    arrays.update(
        n=np.float64(N), n_seq=np.float64(len(np.unique(seq))), sum_doc_n_sq=np.float64((doc_n ** 2).sum()),
        group_n=np.bincount(group_of[seq], minlength=ng).astype(np.float64),
        sum_f=np.float64(logf.sum()), sum_f2=np.float64((logf ** 2).sum()),
        id_counts=freq_lut[tracked].astype(np.float64), id_list=tracked,
        id_seq_n_sq=np.asarray([float(sum(np.sum((ids == t) & (seq == s)) ** 2 for s in np.unique(seq[ids == t])))
                                for t in tracked]),
        bin_n=np.bincount(bins, minlength=nb).astype(np.float64), bin_edges=edges, sample=sample,
        sample_token_id=ids[sample_idx], sample_window=seq[sample_idx], sample_position=pos[sample_idx],
        sample_doc=windows.doc[seq[sample_idx]].astype(np.int64), sample_freq=freq_lut[ids[sample_idx]],
        layer_index=np.arange(L1),
    )
    check_layout(arrays, {"L": L1, "d": d, "G": ng, "I": len(tracked), "F": nb}, positions=False)
    w = 1 + 0.05 * rng.normal(size=(blocks, d))
    w[:, OUTLIER] = 3.0  # the planted dim is also a norm-parameter outlier in every block
    arrays["norm_weight"], arrays["norm_bias"] = w, 0.05 * rng.normal(size=(blocks, d))

    def context(i: int) -> str:
        win, p = windows.ids[seq[i]], pos[i]
        left = " ".join(tok.token(t) for t in win[max(0, p - 8):p] if t >= FIRST_WORD)
        right = " ".join(tok.token(t) for t in win[p + 1:p + 9] if t >= FIRST_WORD)
        return f"{left} [{tok.token(win[p])}] {right}".strip()

    meta = {"sample_tokens": [tok.token(t) for t in ids[sample_idx]],
            "sample_context": [context(int(i)) for i in sample_idx],
            "norm_modules": [f"encoder.layer.{b}.output.LayerNorm" for b in range(blocks)],
            "norm_kind": "LayerNorm", "norm_placement": "post", "norm_layer_offset": 1}
    info = describe_model(spec.model)
    spec_d = {**spec.to_dict(), "device": "cpu", "dtype": "float32"}
    manifest = {
        "spec": spec_d,
        "model": {**info, "model_class": _model_class(info), "n_params": 0, "hidden_size": d, "n_layers": blocks,
                  "fingerprint": "synthetic"},
        "corpus": {"id": spec.corpus if "/" not in spec.corpus else Path(spec.corpus).name, "sha256": "synthetic",
                   "text_column": spec.text_column, "n_documents": windows.n_documents, "n_windows": n_win},
        "tokens": {"analysed": N, "fed_to_model": windows.n_tokens_total, "content": windows.n_content_tokens,
                   "sample": K, "max_seq_len": spec.max_seq_len, "special_tokens": spec.special_tokens},
        "layers": {"n": L1, "layer_0": "embedding output (hidden_states[0])", "kept": list(range(L1)),
                   "model_layers": L1},
        "device": "cpu", "dtype": "float32", "seed": spec.seed, "device_map": None, "versions": {},
        "timing": {}, "created_utc": "2026-01-01T00:00:00+00:00", "warnings": [], "synthetic": True,
    }
    return manifest, meta, arrays


def _model_class(info: dict) -> str:
    """The real model's class family (the pages' published curves apply to BERT and GPT-2 runs only)."""
    desc = str(info.get("description", "")).lower()
    return "BertModel" if "bert" in desc else "GPT2Model" if "gpt-2" in desc else "Synthetic"


def seed(spec: RunSpec, cache_dir=None) -> str:
    """Store a synthetic run of `spec` under its real run key (unless one is there); returns the key."""
    key = run_key(spec, cache_dir)
    if not is_cached(spec, cache_dir):
        manifest, meta, arrays = synthetic_entry(spec)
        get_store(cache_dir).put(key, {"manifest": manifest, "meta": meta}, arrays)
    return key


def job_analyze(params: dict, progress, cancel) -> dict:
    """The app tier's "analyze" job: the real job on a synthetic run. A run of more than 100,000 tokens
    first spends a few seconds in steps (checking Cancel), so that a test can cancel it while it runs."""
    from core.compute.analysis_jobs import job_analyze as real

    refuse_models()  # in the worker, before anything runs (tests/app/conftest.py does it in the test process)
    spec = RunSpec.from_dict(params["spec"])
    steps = spec.max_tokens // 20_000 if spec.max_tokens > 100_000 else 0
    for i in range(steps):
        if cancel():
            raise Cancelled("cancelled")
        progress(stage="forward", done=i, total=steps, message="synthetic forward")
        time.sleep(1.0)
    seed(spec)
    return real(params, progress, cancel)


class ModelLoaded(AssertionError):
    pass


_REAL: dict = {}  # the real core.inputs.models.load_model


def _refused(model, *a, **k):
    raise ModelLoaded(f"the app tier loads no model (asked for {model!r}): seed a synthetic run, or move the "
                      "test to tests/integration")


def refuse_models() -> list[str]:
    """Make every core module's `load_model` fail in this process; returns the modules patched now."""
    from core.inputs import models

    _REAL.setdefault("load_model", models.load_model)
    real = _REAL["load_model"]
    patched = []
    for name, mod in list(sys.modules.items()):
        if (name == "core" or name.startswith("core.")) and getattr(mod, "load_model", None) is real:
            mod.load_model = _refused
            patched.append(name)
    return patched


def allow_models() -> None:
    """Undo `refuse_models` in this process (every core module that holds the refusal, imported since
    included, gets the real loader back): the tiers after the app tier load models."""
    for name, mod in list(sys.modules.items()):
        if (name == "core" or name.startswith("core.")) and getattr(mod, "load_model", None) is _refused:
            mod.load_model = _REAL["load_model"]
    job_records.KINDS["analyze"] = _REAL.get("analyze", job_records.KINDS["analyze"])  # a job run here after the app tier is real


def use_synthetic_analyze() -> None:
    """The "analyze" job kind runs `job_analyze` in this process (the app tier's worker: synthetic_jobs.py;
    the test process while the app tier runs). `allow_models` gives the real kind back."""
    _REAL.setdefault("analyze", job_records.KINDS["analyze"])
    job_records.register("analyze", "synthetic_runs:job_analyze", "core.compute.analysis_jobs:job_analyze_key", "extraction")
