"""The reproductions: which runs each paper needs, run in one process, and the small record they leave.

    reproduce("godey", cache_dir=..., progress=..., cancel=...) -> record (cached like any run)

A record keeps what the Papers page and `python -m core reproduce` show: per run its curves, outlier
sets, frequency summary and ablation, the published values, and the claims table computed from them
(`core.papers.claims`). Each run is an ordinary analysis (`pipeline.analyze`, same RunSpec, same
cache key as `python -m core analyze` with the same settings), so a reproduction reuses what the
dashboard or the CLI computed before and leaves every run in the cache for the other pages.

One process for all runs (the speed of Godey et al.'s 14 models): the documents of a corpus are read
once and tokenized once per tokenizer (the pipeline's `memo`), the built-in images and audio decoded
and fingerprinted once (`modalities.shared_decoding`), torch and transformers imported once, and every
model converted once (the conversions are cached on disk).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import __version__
from ..chain.run import chain_section
from ..config import CONFIG, cache_identity
from ..drift import DriftSpec, drift_experiment
from ..errors import Cancelled, InputError
from ..modalities import corpus_modality, shared_decoding
from ..models import describe_model, list_models
from ..pipeline import analyze, get_store, run_ablation
from ..progress import Progress
from ..reference import reference_curves, reference_outlier_dims
from ..spec import RunSpec, stable_hash
from . import claims as C


@dataclass(frozen=True)
class Part:
    """One run of a reproduction: a model on a corpus, trained or the random-init control of `group`."""

    model: str
    corpus: str
    role: str = "trained"  # "trained" | "control"
    group: str = ""


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    citation: str
    parts: tuple[Part, ...]
    what: str  # one line: what the reproduction measures


# What is known about each model beyond its registry entry, used to group the runs and to say why a
# claim does not hold for it (the verdict itself is always computed).
FACTS: dict[str, dict] = {
    "minilm-l6": {"family": "transformer", "tokenization": "subword", "analogue": "bert-base-cased",
                  "note": "a sentence encoder fine-tuned with a contrastive objective (all-MiniLM-L6-v2), "
                          "known to flatten anisotropy"},
    "untrained-minilm-l6": {"family": "transformer", "tokenization": "subword"},
    "untrained-bert-base": {"family": "transformer", "tokenization": "subword"},
    "smollm2-135m": {"family": "transformer", "tokenization": "subword", "analogue": "gpt2",
                     "note": "a LLaMA-type causal LM (its weights 4-bit dequantized)"},
    "untrained-smollm2": {"family": "transformer", "tokenization": "subword"},
    "untrained-canine-s": {"family": "transformer", "tokenization": "character"},
    "untrained-byt5-small": {"family": "transformer", "tokenization": "character"},
    "dinov2-vits14": {"family": "transformer", "note": "a self-supervised vision Transformer (DINOv2)"},
    "untrained-vit-s14": {"family": "transformer"},
    "mobilenet-v2": {"family": "cnn", "note": "a CNN whose blocks end in linear bottlenecks (only its ReLU6 "
                                              "stages are non-negative)"},
    "untrained-mobilenet-v2": {"family": "cnn"},
    "untrained-resnet50": {"family": "cnn"},
    "whisper-tiny-en": {"family": "transformer", "note": "a speech encoder (Whisper tiny.en)"},
    "untrained-whisper-tiny": {"family": "transformer",
                               "note": "a speech encoder whose log-mel front end and fixed positions give every "
                                       "frame a shared component"},
}

G = Part
PAPERS: dict[str, Paper] = {p.name: p for p in [
    Paper("ethayarajh", "How Contextual are Contextualized Word Representations?",
          "Ethayarajh, K. (2019). EMNLP-IJCNLP 2019.",
          (G("minilm-l6", "wiki-en"), G("smollm2-135m", "wiki-en")),
          "anisotropy, self-similarity and intra-sentence similarity by layer, against the published BERT and "
          "GPT-2 curves"),
    Paper("godey", "Is Anisotropy Inherent to Transformers?",
          "Godey, N., de la Clergerie, É., Sagot, B. (2023). NAACL SRW 2023; and (2024) 'Anisotropy Is Inherent "
          "to Self-Attention in Transformers', EACL 2024.",
          # text first, then images, then audio: one corpus's documents (or pictures, clips) in memory at a time
          (G("minilm-l6", "wiki-en", "trained", "minilm"), G("untrained-minilm-l6", "wiki-en", "control", "minilm"),
           G("untrained-bert-base", "wiki-en", "control", "bert-base"),
           G("smollm2-135m", "wiki-en", "trained", "smollm2"), G("untrained-smollm2", "wiki-en", "control", "smollm2"),
           G("untrained-canine-s", "wiki-en", "control", "canine"),
           G("untrained-byt5-small", "wiki-en", "control", "byt5"),
           G("dinov2-vits14", "images-crops", "trained", "vit"), G("untrained-vit-s14", "images-crops", "control", "vit"),
           G("mobilenet-v2", "images-crops", "trained", "mobilenet"),
           G("untrained-mobilenet-v2", "images-crops", "control", "mobilenet"),
           G("untrained-resnet50", "images-crops", "control", "resnet50"),
           G("whisper-tiny-en", "speech-human", "trained", "whisper"),
           G("untrained-whisper-tiny", "speech-human", "control", "whisper")),
          "the mean cosine by layer of text, character, vision, speech and CNN models with their random-init "
          "controls, and the query/key drift experiment"),
    Paper("puccetti", "Outlier Dimensions that Disrupt Transformers Are Driven by Frequency",
          "Puccetti, G., Rogers, A., Drozd, A., Dell'Orletta, F. (2022). Findings of EMNLP 2022.",
          (G("minilm-l6", "wiki-en"), G("smollm2-135m", "wiki-en")),
          "LayerNorm-parameter outlier dims, their link with token frequency and the loss when they are zeroed"),
    Paper("chain", "The outlier chain: super weights, massive activations, outlier dims, attention sinks",
          "Sun, M. et al. (2024). Massive Activations in Large Language Models. COLM 2024; Yu, M. et al. (2024). "
          "The Super Weight in Large Language Models; Gu, X. et al. (2025). When Attention Sink Emerges in Language "
          "Models. ICLR 2025.",
          (G("smollm2-135m", "wiki-en"),),
          "the largest activation of each layer against the median, where it sits, the super weight that makes it "
          "and the attention sinks it feeds (`core chain`)"),
]}
NAMES = tuple(PAPERS)

DEFAULT_MAX_TOKENS = 8192  # the setting of docs/findings.md's Godey table: runs are shared with it
DEFAULT_SAMPLE = 2000
CURVES = ("mean_cosine", "intra_sentence_similarity", "intra_sentence_adjusted", "self_similarity",
          "self_similarity_adjusted", "cross_sequence_cosine")
_CODE_FILES = ("claims.py", "run.py")


@dataclass(frozen=True)
class Settings:
    """What a reproduction's numbers depend on beyond the paper (part of its cache key)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    sample: int = DEFAULT_SAMPLE
    seed: int = 0
    models: tuple[str, ...] | None = None  # a subset of the paper's runs (tests; a quick look)

    def to_dict(self) -> dict:
        return {"max_tokens": self.max_tokens, "sample": self.sample, "seed": self.seed,
                "models": list(self.models) if self.models is not None else None}


def paper(name: str) -> Paper:
    if name not in PAPERS:
        raise InputError(f"Unknown paper {name!r}: choose one of {', '.join(NAMES)}.")
    return PAPERS[name]


def parts_of(p: Paper, s: Settings) -> tuple[Part, ...]:
    if s.models is None:
        return p.parts
    known = {x.model for x in p.parts}
    bad = [m for m in s.models if m not in known]
    if bad:
        raise InputError(f"{', '.join(bad)}: not among the runs of {p.name} ({', '.join(sorted(known))}).")
    if not s.models:
        raise InputError("Give at least one model of the paper's runs.")
    return tuple(x for x in p.parts if x.model in s.models)


def check_settings(s: Settings) -> None:
    if s.max_tokens < 2:
        raise InputError(f"max_tokens must be at least 2, got {s.max_tokens}.")
    if s.sample < 1:
        raise InputError(f"sample must be positive, got {s.sample}.")


def _code() -> str:
    h = hashlib.sha256()
    for f in _CODE_FILES:
        h.update((Path(__file__).parent / f).read_bytes())
    return h.hexdigest()[:16]


def record_key(name: str, s: Settings) -> str:
    """The cache key of a reproduction's record: paper, settings, and the code of the runs and the claims.
    No model is fingerprinted: reopening the Papers page reads the record at once."""
    return "paper:" + stable_hash({"paper": name, "settings": s.to_dict(), "code": _code(),
                                   "stats": cache_identity("stats"), "results": cache_identity("results")})


def cached(name: str, s: Settings = Settings(), cache_dir=None) -> dict | None:
    """The stored record of a reproduction, or None (never computes)."""
    got = get_store(cache_dir).get_json(record_key(name, s))
    return None if got is None else {**got, "cache_hit": True}


# ----------------------------------------------------------------------------- one run's record
def _mini_manifest(res: dict) -> dict:
    """What names the numbers of a run (the export path's provenance reads these keys)."""
    m = res["manifest"]
    return {"model": {"id": m["spec"]["model"], "label": m["model"]["label"], "fingerprint": m["model"].get("fingerprint")},
            "corpus": {"id": m["corpus"]["id"], "sha256": m["corpus"].get("sha256")},
            "tokens": {"analysed": m["tokens"]["analysed"]}, "seed": m.get("seed"), "dtype": m.get("dtype"),
            "device": m.get("device"), "cache_key": m.get("cache_key"), "spec": m["spec"]}


def _run_record(part: Part, res: dict) -> dict:
    info = res["manifest"]["model"]
    facts = FACTS.get(part.model, {"family": "transformer"})
    modality = res["manifest"].get("modality", "text")
    return {"model": part.model, "corpus": part.corpus, "label": info["label"], "modality": modality,
            "role": part.role, "group": part.group or part.model, "family": facts.get("family", "transformer"),
            "tokenization": facts.get("tokenization"), "note": facts.get("note"), "analogue": facts.get("analogue"),
            "n_tokens": int(res["manifest"]["tokens"]["analysed"]), "d": int(info.get("hidden_size") or 0),
            "manifest": _mini_manifest(res),
            "curves": {c: [lay.get(c) for lay in res["layers"]] for c in CURVES},
            "layer_ids": [int(lay["layer"]) for lay in res["layers"]]}


def _frequency_summary(res: dict) -> dict:
    import numpy as np

    f = res.get("frequency") or {}
    lays = f.get("layers") or []
    if not lays or not f.get("outlier_dims"):
        return {"why": "no outlier dims to correlate (or no token frequencies)"}

    def mean_abs(v):
        a = np.abs(np.asarray(v, dtype=float))
        return float(np.nanmean(a)) if a.size and np.isfinite(a).any() else float("nan")

    return {"outlier_dims": f["outlier_dims"], "random_dims": f.get("random_dims", []),
            "layers": [int(x["layer"]) for x in lays],
            "outlier_abs_r": [mean_abs(x["outlier_r"]) for x in lays],
            "random_abs_r": [mean_abs(x["random_r"]) for x in lays]}


def _outlier_record(res: dict) -> dict:
    o = res.get("outliers") or {}
    return {"norm_persistent": list((o.get("norm_parameters") or {}).get("persistent") or []),
            "activation_persistent": list((o.get("activation") or {}).get("persistent") or []),
            "freq": _frequency_summary(res)}


def _chain_record(sec: dict, res: dict) -> dict:
    keep = ("layer", "ratio", "dim", "top", "median", "position_class", "token")
    sr = sec.get("sink_rate") or {}
    return {"massive": [{k: m.get(k) for k in keep} for m in sec["massive"]],
            "super_weights": [{k: w[k] for k in ("block", "module", "row", "col", "value", "ratio_to_median", "on_probe")}
                              for w in sec["super_weights"]],
            "n_blocks": int(res["manifest"]["model"].get("n_layers") or len(res["layers"]) - 1),
            "sink_rate": sr.get("rate"), "alpha_first_mean": sr.get("alpha_first_mean"),
            "outlier_dims": list(sec.get("outlier_dims") or [])}


def _published_dims(records: list[dict]) -> list[dict]:
    offline = {m["id"] for m in list_models()}
    out = []
    for e in reference_outlier_dims():
        here = e["model"] in offline
        ours = next((r["norm_persistent"] for r in records if r["model"] == e["model"]), None) if here else None
        stand_in = ", ".join(r["label"] for r in records)
        out.append({"model": e["model"], "dims": list(e["dims"]), "ours": ours, "estimator": e["estimator"],
                    "source": e["source"],
                    "why": None if here else f"{e['model']} is not among the offline models; the offline stand-ins "
                                             f"are {stand_in}"})
    return out


# ----------------------------------------------------------------------------- the reproduction
def reproduce(name: str, s: Settings = Settings(), *, cache_dir=None,
              progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
              force: bool = False) -> dict:
    """The reproduction of paper `name` under settings `s`: its record, from the cache or computed.

    Every run is `pipeline.analyze` of its RunSpec (cached apart, shared with the other pages); the
    record itself is cached under `record_key`. `progress` hears each run's own steps, their messages
    prefixed with "run i of n"; `cancel` is polled between the steps and batches (nothing of a
    cancelled reproduction's record is stored; runs that finished stay cached as any run).
    """
    p = paper(name)
    check_settings(s)
    parts = parts_of(p, s)
    store = get_store(cache_dir)
    key = record_key(name, s)
    if not force:
        got = store.get_json(key)
        if got is not None:
            return {**got, "cache_hit": True}
    say = progress or (lambda _p: None)
    t0 = time.perf_counter()
    records, timing = [], []
    memo: dict = {}  # one corpus's documents and its windows per tokenizer, shared by the text runs
    with shared_decoding():  # built-in pictures and clips decoded and fingerprinted once
        for i, part in enumerate(parts):
            if cancel is not None and cancel():
                raise Cancelled("The reproduction was cancelled; its record was not stored.")
            label = describe_model(part.model)["label"]
            head = f"run {i + 1} of {len(parts)}: {label} on {part.corpus}"

            def inner(q: Progress, head=head) -> None:
                say(Progress(q.stage, q.done, q.total, q.rate, q.eta_s, f"{head}: {q.message}" if q.message else head))

            say(Progress("read", message=head))
            spec = RunSpec(model=part.model, corpus=part.corpus, max_tokens=s.max_tokens, sample=s.sample, seed=s.seed)
            t1 = time.perf_counter()
            text = corpus_modality(part.corpus) == "text"
            res = analyze(spec, cache_dir=cache_dir, progress=inner, cancel=cancel, memo=memo if text else None)
            rec = _run_record(part, res)
            if name == "puccetti":
                rec.update(_outlier_record(res))
                if res["manifest"]["model"].get("causal_lm"):
                    say(Progress("ablation", 0, 1, message=f"{head}: ablation"))
                    try:
                        rec["ablation"] = run_ablation(spec, cache_dir=cache_dir, progress=inner, cancel=cancel)
                    except InputError as e:
                        rec["ablation"], rec["ablation_note"] = None, str(e)
                else:
                    rec["ablation"] = None
                    rec["ablation_note"] = (f"the loss needs a language-model head; {rec['label']} "
                                            f"({res['manifest']['model'].get('model_class', 'this model')}) has none")
            if name == "chain":
                say(Progress("metrics", message=f"{head}: the chain pass"))
                sec = chain_section(spec, cache_dir=cache_dir, progress=inner, cancel=cancel)
                rec.update(_chain_record(sec, res))
            records.append(rec)
            timing.append({"model": part.model, "corpus": part.corpus, "wall_s": time.perf_counter() - t1,
                           "cache_hit": bool(res["manifest"].get("cache_hit"))})
    rec = {"paper": name, "title": p.title, "citation": p.citation, "what": p.what, "settings": s.to_dict(),
           "runs": records, "key": key, "core_version": __version__,
           "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if name == "godey":  # the controlled query/key drift experiment: a random block, seconds on CPU
        say(Progress("metrics", message="the query/key drift experiment"))
        d = drift_experiment(DriftSpec(), cache_dir=cache_dir)
        rec["drift"] = {k: d[k] for k in ("spec", "output_mean_cosine", "input_mean_cosine", "attention_entropy",
                                          "n_tokens", "block")}
        rec["drift"].update(alphas=list(d["spec"]["alphas"]), taus=list(d["spec"]["taus"]))
        rec["published"] = []  # the paper gives its curves as figures only
    elif name == "ethayarajh":
        rec["published"] = [c for m in ("mean_cosine", "intra_sentence_similarity") for c in reference_curves(m)]
    elif name == "chain":
        rec["published"] = []
    else:
        rec["published"] = _published_dims(records)
        rec["ablation_settings"] = {"n_random": CONFIG.ablation_random_draws,
                                    "held_out_tokens": CONFIG.ablation_held_out_tokens}
    rec["claims"] = claims_of(rec)
    rec["timing"] = {"wall_s": time.perf_counter() - t0, "runs": timing}
    if cancel is not None and cancel():
        raise Cancelled("The reproduction was cancelled; its record was not stored.")
    store.put(key, rec)
    return {**rec, "cache_hit": False}


def claims_of(rec: dict) -> list[dict]:
    """The claims table of a record, computed from its numbers."""
    name = rec["paper"]
    if name == "godey":
        runs = [{**r, "mean_cosine": r["curves"]["mean_cosine"]} for r in rec["runs"]]
        return C.godey_claims(runs, rec.get("drift"))
    if name == "ethayarajh":
        return C.ethayarajh_claims(rec["runs"], rec["published"])
    if name == "chain":
        return C.chain_claims(rec["runs"])
    return C.puccetti_claims(rec["runs"], rec["published"])


# ----------------------------------------------------------------------------- the job kind
def settings_of(params: dict) -> tuple[str, Settings]:
    models = params.get("models")
    s = Settings(max_tokens=int(params.get("max_tokens", DEFAULT_MAX_TOKENS)),
                 sample=int(params.get("sample", DEFAULT_SAMPLE)), seed=int(params.get("seed", 0)),
                 models=tuple(str(m) for m in models) if models is not None else None)
    name = str(params.get("paper"))
    parts_of(paper(name), s)  # only the paper's own built-in runs (the queue's parameters are checked here)
    check_settings(s)
    return name, s


def job_params(name: str, s: Settings = Settings()) -> dict:
    return {"paper": name, **s.to_dict()}


def job_reproduce_key(params: dict) -> str:
    name, s = settings_of(params)
    return record_key(name, s)


def job_reproduce(params: dict, progress, cancel) -> dict:
    """The "reproduce" job: a paper's runs, its record and claims table, into the cache."""
    name, s = settings_of(params)
    rec = reproduce(name, s, progress=progress, cancel=cancel)
    return {"paper": name, "key": rec["key"], "runs": len(rec["runs"]), "claims": C.summary(rec["claims"]),
            "cache_hit": bool(rec.get("cache_hit"))}
