"""The reproductions: which runs each paper needs, run in one process, and the small record they leave.

    reproduce("godey", cache_dir=..., progress=..., cancel=...) -> record (cached like any run)

A record keeps what the Papers page and `python -m core reproduce` show: per run its curves, outlier
sets, frequency summary and ablation, the published values, and the claims table computed from them
(`core.studies.papers.claims`). Each run is an ordinary analysis (`pipeline.analyze`, same RunSpec, same
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ... import __version__
from ...base.cache import get_store
from ...base.config import CONFIG, cache_identity
from ...base.errors import Cancelled, InputError
from ...base.progress import Progress, overall
from ...base.spec import RunSpec, stable_hash
from ...compute.pipeline import analyze, get_stats, run_ablation
from ...inputs.modalities import corpus_modality, shared_decoding
from ...inputs.models import NO_SHARED, control_variant, describe_model, list_models
from ...stats import registry as S
from ...stats.kernels import centred_mean_cosine, mean_cosine
from ...stats.reference import reference_curves, reference_outlier_dims
from ..chain.run import chain_section
from ..drift import DriftSpec, drift_experiment
from . import claims as C
from . import evidence as E


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
    "untrained-minilm-l6": {"family": "transformer", "tokenization": "subword", "shared": "token-type row 0"},
    "untrained-bert-base": {"family": "transformer", "tokenization": "subword", "shared": "token-type row 0"},
    "smollm2-135m": {"family": "transformer", "tokenization": "subword", "analogue": "gpt2",
                     "note": "a LLaMA-type causal LM (its weights 4-bit dequantized)"},
    "untrained-smollm2": {"family": "transformer", "tokenization": "subword", "shared": "nothing"},
    "untrained-canine-s": {"family": "transformer", "tokenization": "character", "shared": "token-type row 0"},
    "untrained-byt5-small": {"family": "transformer", "tokenization": "character", "shared": "nothing"},
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
# a control without its shared input (the registry's `shared_of`): its control's facts, less what is shared
FACTS.update({k: {**{f: v for f, v in FACTS[c].items() if f not in ("shared", "note")}, "noshared": True}
              for k, c in NO_SHARED.items() if c in FACTS})

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
           G("untrained-minilm-l6-noshared", "wiki-en", "control", "minilm"),
           G("untrained-bert-base", "wiki-en", "control", "bert-base"),
           G("untrained-bert-base-noshared", "wiki-en", "control", "bert-base"),
           G("smollm2-135m", "wiki-en", "trained", "smollm2"), G("untrained-smollm2", "wiki-en", "control", "smollm2"),
           # frequency: the same trained models on token ids drawn uniformly (no frequency structure)
           G("minilm-l6", "uniform-random", "frequency", "minilm"),
           G("smollm2-135m", "uniform-random", "frequency", "smollm2"),
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
# Every per-layer scalar of the registry, in menu order: each run's record keeps its curve (a statistic added to
# core/stats/registry.py is then in every reproduction, and the Papers page draws any of them for the paper's runs).
CURVES = tuple(S.picker())
_CODE_FILES = ("claims.py", "run.py")


@dataclass(frozen=True)
class Settings:
    """What a reproduction's numbers depend on beyond the paper (part of its cache key)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    sample: int = DEFAULT_SAMPLE
    seed: int = 0
    models: tuple[str, ...] | None = None  # a subset of the paper's runs (tests; a quick look)
    robust: bool = True  # also run the robustness variants (`variants`) and judge every verdict across them
    drift_seqs: int = DriftSpec().n_seq  # the drift experiment's sequences (Godey): its "budget"

    def to_dict(self) -> dict:
        return {"max_tokens": self.max_tokens, "sample": self.sample, "seed": self.seed,
                "models": list(self.models) if self.models is not None else None, "robust": self.robust,
                "drift_seqs": self.drift_seqs}


def variants(s: Settings) -> dict[str, Settings]:
    """The other settings every verdict is judged at (docs/metrics.md, "A verdict's robustness"): half the token
    budget (and half the sample and the drift experiment's sequences), and the next seed (other windows, another
    sample and, for the random-init controls, another draw of their weights). With `s` itself that is two
    budgets and two seeds; the variants run without variants."""
    half = max(2, s.max_tokens // 2)
    return {f"budget {half:,}": replace(s, max_tokens=half, sample=max(1, s.sample // 2),
                                        drift_seqs=max(2, s.drift_seqs // 2), robust=False),
            f"seed {s.seed + 1}": replace(s, seed=s.seed + 1, robust=False)}


def run_model(part: Part, seed: int) -> str:
    """The model a part runs at `seed`: a random-init control is drawn again for each seed from 1 to 99 (its
    `@seedK` variant, `core.inputs.models.control_variant`); every other model is the part's own."""
    if part.role == "control" and 1 <= seed <= 99:
        return control_variant(part.model, seed)
    return part.model


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


MAX_TOKENS = 10_000_000  # the largest token budget of one run (as in the dashboard and uniform-random's cap)


def check_settings(s: Settings) -> None:
    if s.max_tokens < 2:
        raise InputError(f"max_tokens must be at least 2, got {s.max_tokens}.")
    if s.max_tokens > MAX_TOKENS:
        raise InputError(f"max_tokens must be at most {MAX_TOKENS:,} (the largest budget of one run), got "
                         f"{s.max_tokens:,}.")
    if s.sample < 1:
        raise InputError(f"sample must be positive, got {s.sample}.")
    if not 0 <= s.seed < 2**32 - 1:
        raise InputError(f"seed must be in [0, 2**32 - 2] (the robustness check also runs seed + 1), got {s.seed}.")
    if not 2 <= s.drift_seqs <= 2048:
        raise InputError(f"drift_seqs must be in [2, 2048], got {s.drift_seqs}.")


def _code() -> str:
    h = hashlib.sha256()
    for f in _CODE_FILES:
        h.update((Path(__file__).parent / f).read_bytes())
    return h.hexdigest()[:16]


def record_key(name: str, s: Settings) -> str:
    """The cache key of a reproduction's record: paper, settings, and the code of the runs and the claims.
    No model is fingerprinted: reopening the Papers page reads the record at once."""
    return "paper:" + stable_hash({"paper": name, "settings": s.to_dict(), "code": _code(),
                                   "stats": cache_identity("stats"), "results": cache_identity("results"),
                                   "drift": cache_identity("drift")})


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


def _levels(spec: RunSpec, cache_dir) -> dict:
    """The levels (mean over layers 1..L) of the mean cosine and of the centred mean cosine with their 95%
    bootstrap intervals over groups of documents (core.studies.papers.evidence), from the run's cached statistics."""
    st = get_stats(spec, cache_dir=cache_dir)
    a, n = st.arrays, int(st.arrays["n"])
    layers = list(range(1, st.n_layers)) if st.n_layers > 1 else [0]
    raw = float(np.mean([mean_cosine(a["group_sum_u"][i].sum(0), n, float(a["sum_u_sq"][i].sum())) for i in layers]))
    out = {"mean_cosine": {"value": raw, "ci": E.level_interval(a["group_sum_u"], a["group_n"], a.get("group_u_sq"),
                                                                n_boot=CONFIG.bootstrap_draws, level=CONFIG.ci_level)}}
    samples = [st.sample(i) for i in range(st.n_layers)]
    if len(samples[0]) >= 2:
        cen = float(np.mean([centred_mean_cosine(samples[i]) for i in layers]))
        docs = a.get("sample_doc")
        ci = (E.centred_level_interval(samples, np.asarray(docs), n_boot=CONFIG.bootstrap_draws, level=CONFIG.ci_level)
              if docs is not None and len(docs) == len(samples[0]) else None)
        out["centred_mean_cosine"] = {"value": cen, "ci": ci}
    return out


def _curve_evidence(spec: RunSpec, cache_dir) -> dict:
    """Ethayarajh's comparisons with their 95% bootstrap intervals (over groups of documents, one set of weights
    per replicate shared by the layers: `evidence.curve_replicates`): each layer's mean cosine, the least
    anisotropic non-input layer's value, upper half minus lower half, and the shape r with each published curve."""
    st = get_stats(spec, cache_dir=cache_dir)
    a, lv = st.arrays, CONFIG.ci_level
    reps = E.curve_replicates(a["group_sum_u"], a["group_n"], a.get("group_u_sq"), n_boot=CONFIG.bootstrap_draws)
    if reps is None:
        return {}

    def diff(r):
        lo, hi = C.halves(r)
        return hi - lo

    out = {"layers": [E.replicate_interval(reps[:, [i]], lambda r: r[0], lv) for i in range(reps.shape[1])],
           "min": E.replicate_interval(reps, lambda r: np.nanmin(r[1:]) if r.size > 1 else r[0], lv),
           "halves_diff": E.replicate_interval(reps, diff, lv), "shape_r": {}}
    for c in reference_curves("mean_cosine"):
        out["shape_r"][c["model"]] = E.replicate_interval(reps, lambda r, v=c["values"]: C.shape_r(r, v), lv)
    return out


def _frequency_evidence(spec: RunSpec, cache_dir, freq: dict) -> dict:
    """Puccetti et al.'s frequency comparison with its interval: per bootstrap replicate of the token sample's
    documents, in how many layers the outlier dims' mean |r| with log frequency is above the random dims'
    (the claim's count), and the mean over layers of the difference. On the sample (K tokens), not all tokens:
    an interval at least as wide as the all-token value's."""
    if not freq.get("outlier_dims") or not freq.get("random_dims"):
        return {}
    st = get_stats(spec, cache_dir=cache_dir)
    a, lv = st.arrays, CONFIG.ci_level
    docs, sf = a.get("sample_doc"), a.get("sample_freq")
    if docs is None or sf is None or a["sample"].shape[1] < 3:
        return {}
    reps = E.frequency_above_replicates(a["sample"], np.log(np.maximum(np.asarray(sf, dtype=float), 1)), np.asarray(docs),
                                        freq["outlier_dims"], freq["random_dims"], n_boot=CONFIG.bootstrap_draws)
    if reps is None or reps.shape[1] != len(freq.get("outlier_abs_r") or []):
        return {}
    return {"layers_above": E.replicate_interval(reps, lambda r: float(np.sum(r > 0)), lv),
            "mean_diff": E.replicate_interval(reps, lambda r: float(np.nanmean(r)), lv), "on": "sample"}


def _run_record(part: Part, res: dict) -> dict:
    info = res["manifest"]["model"]
    facts = FACTS.get(part.model, {"family": "transformer"})
    modality = res["manifest"].get("modality", "text")
    return {"model": part.model, "corpus": part.corpus, "label": info["label"], "modality": modality,
            "role": part.role, "group": part.group or part.model, "family": facts.get("family", "transformer"),
            "tokenization": facts.get("tokenization"), "note": facts.get("note"), "analogue": facts.get("analogue"),
            "noshared": bool(facts.get("noshared")), "shared": facts.get("shared"),
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
    record itself is cached under `record_key`. With `s.robust` the same job also reproduces the paper at
    `variants(s)` (half the budget; the next seed), each variant's record cached under its own key, and every
    claim gets its `robust` verdict (`claims.robustness`). `progress` hears each run's own steps, their
    messages prefixed with "run i of n"; `cancel` is polled between the steps and batches (nothing of a
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
    # The bar is the share of the whole job: runs weighted by their tokens, the variants' runs after the
    # main ones, the current run's progress inside its share (core.base.progress.overall).
    others = variants(s) if s.robust else {}
    todo = [("", s)] + list(others.items())
    weights = [float(x.max_tokens) for _, x in todo for _ in parts]
    got, done = {}, 0
    for tag, x in todo:
        vkey = record_key(name, x)
        hit = None if (force or not tag) else store.get_json(vkey)
        if hit is not None:
            got[tag] = hit
        else:
            got[tag] = _compute(name, p, parts, x, cache_dir, say, cancel, weights, done, tag)
            if tag:
                store.put(vkey, got[tag])
        done += len(parts)
    rec = got[""]
    if others:
        rec["claims"] = C.robustness(rec["claims"], {tag: got[tag]["claims"] for tag in others})
        rec["robustness"] = {"rule": C.ROBUST_RULE,
                             "variants": [{"label": tag, "settings": x.to_dict(), "key": record_key(name, x),
                                           "claims": [{k: c.get(k) for k in ("claim", "verdict", "measured")}
                                                      for c in got[tag]["claims"]]}
                                          for tag, x in others.items()]}
    rec["timing"]["wall_s"] = time.perf_counter() - t0
    if cancel is not None and cancel():
        raise Cancelled("The reproduction was cancelled; its record was not stored.")
    store.put(key, rec)
    return {**rec, "cache_hit": False}


def _compute(name: str, p: Paper, parts: tuple[Part, ...], s: Settings, cache_dir, say, cancel, weights: list[float],
             offset: int, tag: str) -> dict:
    """The record of paper `p` at settings `s` (its runs, published values and claims), its runs' share of the
    progress bar starting at run `offset` of `weights`; `tag` names a robustness variant in the messages."""
    t0 = time.perf_counter()
    records, timing = [], []
    memo: dict = {}  # one corpus's documents and its windows per tokenizer, shared by the text runs
    total = sum(weights)
    with shared_decoding():  # built-in pictures and clips decoded and fingerprinted once
        for j, part in enumerate(parts):
            i = offset + j
            if cancel is not None and cancel():
                raise Cancelled("The reproduction was cancelled; its record was not stored.")
            label = describe_model(part.model)["label"]
            model = run_model(part, s.seed)
            head = f"run {i + 1} of {len(weights)}: {label} on {part.corpus}" + (f" ({tag})" if tag else "")

            def inner(q: Progress, head=head, i=i) -> None:
                share = overall(sum(weights[:i]), total, weights[i], q)
                say(Progress(q.stage, q.done, q.total, q.rate, q.eta_s, f"{head}: {q.message}" if q.message else head,
                             overall=share))

            inner(Progress("read"))
            spec = RunSpec(model=model, corpus=part.corpus, max_tokens=s.max_tokens, sample=s.sample, seed=s.seed)
            t1 = time.perf_counter()
            text = corpus_modality(part.corpus) == "text"
            res = analyze(spec, cache_dir=cache_dir, progress=inner, cancel=cancel, memo=memo if text else None)
            rec = _run_record(part, res)
            rec["label"] = label  # another draw of a control keeps its name: the claims match across the variants
            if name in ("godey", "ethayarajh"):
                rec["levels"] = _levels(spec, cache_dir)
            if name == "ethayarajh":
                rec["evidence"] = _curve_evidence(spec, cache_dir)
            if name == "puccetti":
                rec.update(_outlier_record(res))
                rec["evidence"] = {"frequency": _frequency_evidence(spec, cache_dir, rec["freq"])}
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
            timing.append({"model": model, "corpus": part.corpus, "wall_s": time.perf_counter() - t1,
                           "cache_hit": bool(res["manifest"].get("cache_hit"))})
    rec = {"paper": name, "title": p.title, "citation": p.citation, "what": p.what, "settings": s.to_dict(),
           "runs": records, "key": record_key(name, s), "core_version": __version__,
           "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if name == "godey":  # the controlled query/key drift experiment: a random block, seconds on CPU
        say(Progress("metrics", message="the query/key drift experiment" + (f" ({tag})" if tag else "")))
        d = drift_experiment(drift_spec(s), cache_dir=cache_dir)
        rec["drift"] = {k: d[k] for k in ("spec", "experiments", "n_tokens", "block", "alpha_unit")}
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
    return rec


def drift_spec(s: Settings) -> DriftSpec:
    """The drift experiment of a reproduction at settings `s`: the default block drawn with the settings' seed,
    on `s.drift_seqs` sequences."""
    return DriftSpec(seed=s.seed, n_seq=s.drift_seqs)


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
                 models=tuple(str(m) for m in models) if models is not None else None,
                 robust=params.get("robust", True) is not False,
                 drift_seqs=int(params.get("drift_seqs", DriftSpec().n_seq)))
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
