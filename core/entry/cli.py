"""Headless interface (stable: scripts and CI depend on it).

    python -m core serve [--port 8501]       # the dashboard (installed: `aniso serve`; every command is `aniso ...`)
    python -m core models
    python -m core corpora
    python -m core analyze --model M --corpus C [...] --out results.json
    python -m core outliers --model M --corpus C [--ablate] [...] --out outliers.json
    python -m core train [--preset P] [--arch A] [--tokenizer T] [...] [--analyze] [--out run.json]
    python -m core series --run R [--corpus C] [...] --out series.json
    python -m core lab --factor arch=gpt2,llama [--factor optimizer=adamw,sgd] [--seeds 3] [--steps N] [--quick] [--out lab.json]
    python -m core series --hub ORG/NAME --revisions step0,step1000,... [...] --out series.json
    python -m core worker                     # run the job worker (the app starts one itself)
    python -m core jobs list|cancel ID|retry ID
    python -m core analyze ... --attention      (adds the `attention` section, cached apart)
    python -m core attention --model M --corpus C [...] --out attention.json
    python -m core analyze ... --chain          (adds the `chain` section: the outlier chain, cached apart)
    python -m core chain --model M --corpus C [--max-tokens N] [--ablate] [...] --out chain.json
    python -m core drift-experiment [--d 64 --heads 4 --alphas ... --taus ...] --out drift.json
    python -m core reproduce ethayarajh|godey|puccetti [--max-tokens N] [--models A,B] [--out DIR]

Errors print one clear line and exit non-zero, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..base.cache import get_store
from ..base.config import CONFIG
from ..base.errors import Cancelled, InputError
from ..base.settings import use_cache_dir
from ..base.spec import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CORPUS,
    DEFAULT_MAX_SEQ_LEN,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_SAMPLE,
    DEVICES,
    DTYPES,
    SPECIAL_POLICIES,
    RunSpec,
)
from ..compute.distributed import RankFailed, rank_from_env, world_size_from_env
from ..compute.pipeline import analyze, analyze_params, resolve, run_ablation
from ..compute.prepare import keeping_models
from ..inputs.anatomy import markdown_table
from ..inputs.corpora import list_corpora
from ..inputs.hub_fetch import fmt_bytes, plan_of, size_report
from ..inputs.hub_series import register
from ..inputs.modalities import list_modal_corpora
from ..inputs.models import BUILTIN_MODELS, check_model_ident, is_hub_model, list_models
from ..studies import lab as LAB
from ..studies.attention import layer_means, run_attention
from ..studies.chain.run import ablations as chain_ablations
from ..studies.chain.run import chain_section
from ..studies.drift import DriftSpec, drift_experiment
from ..studies.papers.claims import drift_claims
from ..studies.papers.run import DEFAULT_MAX_TOKENS as P_TOKENS
from ..studies.papers.run import DEFAULT_SAMPLE as P_SAMPLE
from ..studies.papers.run import NAMES as PAPER_NAMES
from ..studies.papers.run import Settings, reproduce
from ..studies.series import SERIES_MAX_TOKENS, SERIES_SAMPLE, analyze_series
from ..studies.train_spec import (
    ARCHS,
    OPTIMIZERS,
    PRESETS,
    REFUSED_ARCHS,
    TOKENIZERS,
    TrainSpec,
    check_train_size,
    default_lr,
    learned_note,
    matched_spec,
    preset_specs,
)
from . import api, job_queue, job_records, jobs, worker
from .serve import serve


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer indices such as 0,6,12, got {text!r}") from None


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="built-in id (see `models`), local folder or hub id[@rev]")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="built-in id (see `corpora`) or a file path")
    p.add_argument("--text-column", default=None, help="text column of a .csv/.tsv/.jsonl/.parquet corpus")
    p.add_argument("--encoding", default=None,
                   help="encoding of a text/CSV corpus without a byte-order mark (default UTF-8), e.g. latin-1")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--max-seq-len", type=int, default=DEFAULT_MAX_SEQ_LEN)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--dtype", choices=DTYPES, default="auto")
    p.add_argument("--special-tokens", choices=SPECIAL_POLICIES, default="exclude")
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help="sampled token positions (all layers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=_layer_list, default=None,
                   help="comma-separated layers to keep statistics for (0 = embeddings), e.g. 0,6,12; default all")
    p.add_argument("--device-map", choices=("auto",), default=None,
                   help="auto: spread a model too large for one GPU over this node's GPUs (accelerate)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow a model folder/hub repo to run its own Python code (off by default)")
    p.add_argument("--logit-lens", action="store_true",
                   help="also read each layer with a causal LM's own final norm and unembedding (the logit lens, on "
                        "up to 512 sampled positions; opt-in: it costs more than 10%% of a run)")
    p.add_argument("--cache-dir", default=None, help="cache directory (default: ./cache)")
    p.add_argument("--force", action="store_true", help="recompute even if cached")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, help="where to write the JSON results")


def _spec(a) -> RunSpec:
    # The Python API's spec (core/entry/api.py): identifiers written as the dashboard writes them, so that a run of
    # the CLI, of a notebook and of the dashboard is one cache entry.
    return api.run_spec(a.model, a.corpus, text_column=a.text_column, max_tokens=a.max_tokens,
                        max_seq_len=a.max_seq_len, batch_size=a.batch_size, device=a.device, dtype=a.dtype,
                        special_tokens=a.special_tokens, sample=a.sample, seed=a.seed,
                        trust_remote_code=a.trust_remote_code, device_map=a.device_map, layers=a.layers,
                        encoding=a.encoding, logit_lens=a.logit_lens)


def _check_out(path: str) -> None:
    """--out must be a file in an existing, writable folder: checked before any work."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise InputError(f"--out {path!r} is a folder; give a file name such as {str(out / 'results.json')!r}.")
    parent = out.parent
    if not parent.is_dir():
        raise InputError(f"--out {path!r}: the folder {str(parent)!r} does not exist; create it first.")
    if not os.access(parent, os.W_OK):
        raise InputError(f"--out {path!r}: the folder {str(parent)!r} is not writable.")


def _parse_dims(text: str) -> list[int]:
    dims = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            d = int(part)
        except ValueError:
            raise InputError(f"--dims: {part!r} is not a dimension index; give integers such as --dims 63,157.") \
                from None
        if d < 0:
            raise InputError(f"--dims: {d} is negative; dimension indices start at 0.")
        dims.append(d)
    if not dims:
        raise InputError("--dims is empty; give integers such as --dims 63,157.")
    return sorted(set(dims))


class _Bar:
    """A one-line progress bar on stderr: tokens done, tokens/s, ETA."""

    open_line = False  # a progress line without its newline is on stderr (one bar at a time)

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.last = 0.0

    def __call__(self, p) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if p.stage in ("forward", "download") and p.done < p.total and now - self.last < 0.5:
            return
        self.last = now
        if p.stage == "forward" and p.total:
            frac = p.done / p.total
            bar = "#" * int(30 * frac)
            eta = f"{p.eta_s:5.0f}s" if p.eta_s is not None else "  ?  "
            msg = f"\r[{bar:<30}] {p.done:>9,}/{p.total:,} tokens  {p.rate:8.0f} tok/s  ETA {eta}"
        elif p.stage == "download" and p.total:  # bytes, rate and ETA of the whole download; the file in hand
            eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "?"
            msg = (f"\rdownload [{'#' * int(30 * p.done / p.total):<30}] {fmt_bytes(p.done)}/{fmt_bytes(p.total)} "
                   f"{fmt_bytes(p.rate)}/s ETA {eta}: {p.message}")[:160].ljust(100)
        else:
            msg = f"\r{p.stage}: {p.message}".ljust(80)
        sys.stderr.write(msg)
        _Bar.open_line = True
        if p.stage in ("forward", "download") and p.total and p.done >= p.total:
            sys.stderr.write("\n")
            _Bar.open_line = False
        sys.stderr.flush()

    @staticmethod
    def end_line() -> None:
        """Finish a pending progress line, so that the next message starts a line of its own."""
        if _Bar.open_line:
            sys.stderr.write("\n")
            sys.stderr.flush()
            _Bar.open_line = False


def _write(path: str, obj) -> None:
    """Write the JSON whole or not at all (the API's writer: a temporary file in the same folder, then renamed)."""
    api.write_json(Path(path).expanduser(), obj)


def cmd_models(a) -> int:
    if a.anatomy:  # the architecture families (core/inputs/anatomy.py), as docs/models.md shows them
        print(markdown_table())
        return 0
    models = list_models()
    for modality in ("text", "image", "audio"):
        print(f"# {modality}")
        for m in (m for m in models if m.get("modality", "text") == modality):
            note = f"  [{m['note']}]" if m["note"] else ""
            print(f"{m['id']:<24} {m['description']}{note}")
    print("(also: a local model folder, or a hub identifier[@revision] where the hub is reachable, e.g. "
          "google/byt5-small (its encoder) or google/canine-s)")
    return 0


def cmd_model_info(a) -> int:
    """A hub model's size before anything but its config and weight headers is fetched: files, bytes,
    parameters, memory at --dtype, whether this machine (and ANISO_MAX_MODEL_GB) holds it."""
    check_model_ident(a.model)
    if not is_hub_model(a.model):
        raise InputError(f"{a.model!r} is not a hub model id: model-info sizes a hub model before it is fetched "
                         f"(built-in models: `python -m core models`).")
    spec = RunSpec(model=a.model, device=a.device, dtype=a.dtype)
    device = spec.resolved_device()
    plan = plan_of(a.model, trust_remote_code=a.trust_remote_code, suggest=BUILTIN_MODELS)
    rep = size_report(plan, spec.resolved_dtype(device), device)
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        print(f"{rep['id']} at {rep['commit'][:12]}: {rep['summary'][len('found: '):]}")
        print(f"  {len(rep['files'])} files, {fmt_bytes(rep['bytes'])} ({fmt_bytes(rep['download_bytes'])} to download); "
              f"weights {rep['weight_format']} {fmt_bytes(rep['weight_bytes'])}, "
              + ", ".join(f"{k} {v:,}" for k, v in rep["stored_dtypes"].items()))
        print(f"  {rep['reason']}")
    return 0 if rep["fits"] else 1


def cmd_corpora(a) -> int:
    print("# text")
    for c in list_corpora():
        print(f"{c['id']:<18} {c['description']}")
    print("(also: a .txt/.md file, documents separated by blank lines, or .csv/.tsv/.jsonl/.parquet "
          "with --text-column)")
    for modality in ("image", "audio"):
        print(f"# {modality}")
        for c in list_modal_corpora():
            if c["modality"] == modality:
                print(f"{c['id']:<18} {c['description']}")
    print("(also: a folder or .zip of images (png/jpg/...) or of audio files (wav/flac/ogg), or one such file)")
    return 0


def _wait_for_job(kind: str, params: dict, a) -> None:
    """When the worker is computing (or about to compute) this very thing, wait for its job
    instead of starting a second computation; the result is then read from the cache."""
    if not a.force:
        api.wait_for_job(kind, params, a.cache_dir, progress=_Bar(a.quiet), say=_say)
        _Bar.end_line()


def _say(msg: str) -> None:
    _Bar.end_line()
    print(msg, file=sys.stderr)


_ranks = api.ranks  # the torchrun job this process is a rank of, for the duration (None for a plain run)


def _quiet(a, group) -> bool:
    return a.quiet or (group is not None and not group.is_main)  # rank 0 alone shows progress


def _analyze(a, spec, group=None):
    """analyze() alone or as one rank of a torchrun job (None on ranks other than 0)."""

    return analyze(spec, cache_dir=a.cache_dir, progress=_Bar(_quiet(a, group)), force=a.force, group=group)


def _validate(a) -> RunSpec:
    """Every option checked before any work (no model loaded, nothing computed yet)."""
    spec = _spec(a)
    _check_out(a.out)
    if getattr(a, "dims", None) is not None and not a.ablate:
        raise InputError("--dims chooses the dimensions of the ablation: add --ablate (or drop --dims).")
    if getattr(a, "ablate", False):
        if a.n_random < 1:
            raise InputError(f"--n-random must be at least 1 (random-dimension draws), got {a.n_random}.")
        if a.held_out_tokens < 1:
            raise InputError(f"--held-out-tokens must be a positive number of tokens, got {a.held_out_tokens}.")
        a.dim_list = _parse_dims(a.dims) if a.dims is not None else None
    return spec


def _warnings(m: dict) -> None:
    for e in m.get("cache_events", []) + m.get("warnings", []):
        print(f"warning: {e}", file=sys.stderr)


def cmd_analyze(a) -> int:
    spec = _validate(a)
    t0 = time.perf_counter()
    # The Python API's path (core/entry/api.py: aniso.analyze is the same call)
    res = api.run_analysis(spec, cache_dir=a.cache_dir, progress=_Bar(a.quiet), force=a.force, attention=a.attention,
                           chain=a.chain, say=_say)
    if res is None:  # a rank other than 0 of a torchrun job: rank 0 writes
        return 0
    _write(a.out, res)
    _Bar.end_line()
    m = res["manifest"]
    _warnings(m)
    hit = "cache hit" if m.get("cache_hit") else "computed"
    print(f"{m['model']['label']} on {m['corpus']['id']}: {m['tokens']['analysed']:,} tokens, "
          f"{len(res['layers'])} layers ({hit}, {time.perf_counter() - t0:.1f} s) -> {a.out}", file=sys.stderr)
    return 0


def cmd_outliers(a) -> int:
    spec = _validate(a)
    run = resolve(spec, a.cache_dir)  # identifiers resolved and the key computed once for the command
    if world_size_from_env() <= 1:
        _wait_for_job("analyze", analyze_params(run), a)
    with _ranks(spec) as group:
        res = _analyze(a, run, group)
    if res is None:  # a rank other than 0 of a torchrun job: rank 0 writes (and runs the ablation)
        return 0
    out = {"manifest": res["manifest"], "outliers": res["outliers"], "frequency": res["frequency"]}
    if a.ablate:
        dims = a.dim_list
        _wait_for_job("ablation", {**analyze_params(run), "dims": dims, "n_random": a.n_random,
                                   "held_out_tokens": a.held_out_tokens}, a)
        out["ablation"] = run_ablation(run, dims=dims, n_random=a.n_random, cache_dir=a.cache_dir,
                                       held_out_tokens=a.held_out_tokens, progress=_Bar(a.quiet))
    _write(a.out, out)
    _Bar.end_line()
    _warnings(res["manifest"])
    o = res["outliers"]
    print(f"persistent activation outliers: {o['activation']['persistent']}", file=sys.stderr)
    if "persistent" in o.get("norm_parameters", {}):
        print(f"persistent norm-parameter outliers: {o['norm_parameters']['persistent']}", file=sys.stderr)
    # lazy: plotly and pandas only for the commands that report a series
    from ..views.single_dim import position_notes  # the same warning as the Frequency tab

    for note in position_notes(res):
        print(f"note: {note}", file=sys.stderr)
    if a.ablate:
        ab = out["ablation"]
        print(f"ablation of {ab['dims']}: loss {ab['baseline_loss']:.4f} -> {ab['ablated_loss']:.4f} "
              f"(delta {ab['delta']:+.4f}; random dims: {ab['random_delta_mean']:+.4f} "
              f"± {ab['random_delta_std']:.4f})", file=sys.stderr)
    return 0


def dashboard_link(results: dict, port: int = 8501) -> str:
    """The dashboard URL that opens the run of a results.json (computed anywhere: on a cluster too)."""
    try:
        RunSpec.from_dict(results["manifest"]["spec"])
    except (KeyError, TypeError) as e:
        raise InputError(f"not a results.json of `python -m core analyze` (no manifest spec: {e})") from None
    return api.Run(results, None).link(port)


def cmd_link(a) -> int:
    try:
        results = json.loads(Path(a.results).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {a.results!r}: {e}") from None
    print(dashboard_link(results, a.port))
    return 0


def _train_lr(a) -> float:
    """--lr: a number; "swept" (the family's rate, `default_lr`); none given: AdamW keeps the Train default
    (1e-3, so its runs keep their names), SGD and Coupled Adam take the family's rate."""
    if a.lr is None:
        return TrainSpec.lr if a.optimizer == "adamw" else default_lr(a.arch, a.optimizer)[0]
    if a.lr.strip().lower() == "swept":
        return default_lr(a.arch, a.optimizer)[0]
    try:
        return float(a.lr)
    except ValueError:
        raise InputError(f"--lr must be a number or 'swept', got {a.lr!r}.") from None


def _train_spec(a):
    spec = TrainSpec(corpus=a.corpus, text_column=a.text_column, arch=a.arch, tokenizer=a.tokenizer,
                     vocab_size=a.vocab_size, n_layers=a.layers, d_model=a.d_model, n_heads=a.heads,
                     seq_len=a.seq_len, batch_size=a.batch_size, steps=a.steps, lr=_train_lr(a), seed=a.seed,
                     eval_tokens=a.eval_tokens, device=a.device, name=a.name, optimizer=a.optimizer,
                     tied=not a.untied, attn_gate=a.attn_gate, d_inner=a.d_inner)
    return matched_spec(spec) if a.matched else spec


class _TrainBar(_Bar):
    """Training progress: steps, tokens/s, ETA; other stages as one line."""

    def __call__(self, p) -> None:
        if self.quiet:
            return
        if p.stage != "train":
            return super().__call__(p)
        now = time.monotonic()
        if 0 < p.done < p.total and now - self.last < 0.5:
            return
        self.last = now
        bar = "#" * int(30 * p.done / max(p.total, 1))
        eta = f"{p.eta_s:5.0f}s" if p.eta_s is not None else "  ?  "
        sys.stderr.write(f"\r[{bar:<30}] step {p.done:>7,}/{p.total:,}  {p.rate:8.0f} tok/s  ETA {eta}")
        _Bar.open_line = True
        sys.stderr.flush()


def cmd_train(a) -> int:
    base = _train_spec(a)
    if a.out:
        _check_out(a.out)  # before the training, not after it
    runs = preset_specs(a.preset, base) if a.preset else {base.run_name(): base}
    for spec in runs.values():
        check_train_size(spec)  # every run of a preset, before the first one starts
    # lazy: keeps torch out of every other command (a cached `analyze` is a cache hit)
    from ..studies.training import train

    out = {"preset": a.preset, "runs": {}}
    for label, spec in runs.items():
        t0 = time.perf_counter()
        rec = train(spec, cache_dir=a.cache_dir, progress=_TrainBar(a.quiet), force=a.force)
        _Bar.end_line()
        last = rec["checkpoints"][-1]
        pc = rec.get("params")  # a run recorded before the counts were kept has n_params only
        size = f"{pc['total']:,} parameters, {pc['non_embedding']:,} non-embedding, " if pc else ""
        print(f"{label}: trained/{rec['run']} ({size}{len(rec['checkpoints'])} checkpoints, held-out loss "
              f"{rec['checkpoints'][0]['held_out_loss']:.3f} -> {last['held_out_loss']:.3f}, "
              f"{rec['timing']['tokens_per_s']:,.0f} tok/s, {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        if (note := learned_note(rec)) is not None:
            print(f"{label}: {note}", file=sys.stderr)
        entry = {"record": rec}
        if a.analyze:
            # lazy: plotly and pandas only for the commands that report a series
            from ..views.dynamics import summary

            ser = analyze_series(rec["run"], cache_dir=a.cache_dir, progress=_Bar(a.quiet),
                                 corpus=a.analysis_corpus, max_tokens=a.analysis_tokens)
            _Bar.end_line()
            entry["summary"] = summary(ser)
        out["runs"][label] = entry
    if a.analyze:
        # lazy: plotly and pandas only for the commands that report a series
        from ..views.dynamics import compare_findings

        out["findings"] = compare_findings({k: v["summary"] for k, v in out["runs"].items()})
        for line in out["findings"]:
            print("- " + line, file=sys.stderr)
    if a.out:
        _write(a.out, out)
    return 0


def cmd_series(a) -> int:
    # lazy: plotly and pandas only for the commands that report a series
    from ..views.dynamics import summary

    if a.out:
        _check_out(a.out)
    t0 = time.perf_counter()
    if a.hub is not None:
        if not a.revisions:
            raise InputError("--hub needs --revisions (e.g. --revisions step0,step1000,step2000).")
        a.run = register(a.hub, a.revisions, a.cache_dir)
    elif a.revisions:
        raise InputError("--revisions goes with --hub (a trained run's checkpoints are its own).")
    a.run = a.run.removeprefix("trained/").split("@")[0]
    with _ranks(RunSpec(device=a.device, dtype=a.dtype)) as group:  # under torchrun: each checkpoint shared
        ser = analyze_series(a.run, cache_dir=a.cache_dir, progress=_Bar(_quiet(a, group)), corpus=a.corpus,
                             text_column=a.text_column, max_tokens=a.max_tokens, sample=a.sample, seed=a.seed,
                             batch_size=a.batch_size, device=a.device, dtype=a.dtype, group=group)
    if ser is None:  # a rank other than 0 of a torchrun job: rank 0 writes
        return 0
    _Bar.end_line()
    summ = summary(ser)
    _write(a.out, {"run": ser["run"], "steps": ser["steps"], "duplicates": ser["duplicates"],
                   "record": ser["record"], "summary": summ,
                   "results": ser["results"], "attention": ser.get("attention"),
                   "attention_note": ser.get("attention_note")})
    for line in summ["findings"]:
        print("- " + line, file=sys.stderr)
    if ser.get("attention_note"):
        print(f"- no query/key drift: {ser['attention_note']}", file=sys.stderr)
    print(f"{len(ser['steps'])} checkpoints of {a.run} analysed ({time.perf_counter() - t0:.1f} s) -> {a.out}",
          file=sys.stderr)
    return 0


def _lab_factors(items: list[str]) -> dict:
    out: dict = {}
    for item in items:
        name, eq, levels = item.partition("=")
        name = name.strip()
        if not eq or not name or not levels.strip():
            raise InputError(f"--factor {item!r}: write NAME=LEVEL,LEVEL (e.g. --factor arch=gpt2,llama); "
                             f"factors: {', '.join(LAB.FACTORS)}.")
        if name in out:
            raise InputError(f"--factor {name} is given twice: list its levels once (--factor {name}=A,B).")
        out[name] = [x.strip() for x in levels.split(",") if x.strip()]
    return out


def _lab_seeds(text: str) -> tuple[int, ...]:
    try:
        if "," in text:
            return tuple(int(x) for x in text.split(",") if x.strip())
        n = int(text)
    except ValueError:
        raise InputError(f"--seeds {text!r}: give a count (3: seeds 0, 1, 2) or a list (0,1,2).") from None
    if n < 1:
        raise InputError(f"--seeds must be at least 1, got {n}.")
    return tuple(range(n))


def _lab_spec(a) -> "LAB.LabSpec":
    """The lab of the flags: --quick gives the quick lab's sizes, one seed and (without --factor) its families."""
    factors = _lab_factors(a.factor)
    if not factors and not a.quick:
        raise InputError("Give at least one --factor (e.g. --factor arch=gpt2,llama), or --quick.")
    if a.quick and not factors:
        factors = {"arch": list(LAB.QUICK_FAMILIES)}
    sizes = {"steps": a.steps, "n_layers": a.layers, "d_model": a.d_model}
    if a.quick:
        sizes = {k: v if v is not None else LAB.QUICK[k] for k, v in sizes.items()}
    base = {k: v for k, v in {**sizes, "n_heads": a.heads, "seq_len": a.seq_len, "batch_size": a.batch_size,
                              "corpus": a.corpus, "text_column": a.text_column, "vocab_size": a.vocab_size,
                              "eval_tokens": a.eval_tokens, "device": a.device}.items() if v is not None}
    seeds = _lab_seeds(a.seeds) if a.seeds is not None else (LAB.QUICK["seeds"] if a.quick else (0, 1, 2))
    th = _floats(a.thresholds, "thresholds") if a.thresholds else LAB.THRESHOLDS
    return LAB.LabSpec(factors=factors, seeds=seeds, base=base, lr=a.lr, analysis_tokens=a.analysis_tokens,
                       analysis_sample=a.analysis_sample, thresholds=th)


class _LabBar(_Bar):
    """A lab's progress: one line, the run it is at and where that run is ("run 2 of 4: gpt2 / seed 1, step 80 of 500")."""

    def __call__(self, p) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if now - self.last < 0.5 and p.stage not in ("start", "done"):
            return
        self.last = now
        sys.stderr.write(f"\r{p.message[:150]}".ljust(100))
        _Bar.open_line = True
        sys.stderr.flush()


def cmd_lab(a) -> int:
    spec = _lab_spec(a)  # every cell's training checked before anything runs
    if a.out:
        _check_out(a.out)
    for cell in spec.cells():
        for ts, _, _ in LAB.cell_specs(spec, cell):
            check_train_size(ts)
    n = len(spec.cells()) * len(spec.seeds)
    _say(f"lab {spec.lab_id}: {len(spec.cells())} cells x {len(spec.seeds)} seeds = {n} runs")
    t0 = time.perf_counter()
    doc = LAB.run_lab(spec, cache_dir=a.cache_dir, progress=_LabBar(a.quiet))
    _Bar.end_line()
    print(f"lab {doc['id']}: {n} runs in {time.perf_counter() - t0:.0f} s (stored as labs/{doc['id']}.json)",
          file=sys.stderr)
    print("Main effects (final checkpoint; learned runs only):")
    for line in LAB.effects_lines(doc):
        print("  " + line)
    print("Claims:")
    for line in LAB.claims_lines(doc):
        print("  " + line)
    gone = LAB.excluded_lines(doc)
    if gone:
        print("Not averaged in:")
        for line in gone:
            print("  " + line)
    if a.out:
        _write(a.out, doc)
    return 0


def _queue_notes(jobs, cache_dir) -> None:
    for n in job_queue.notes(cache_dir):  # a corrupted queue set aside, a read-only queue: said once, here
        print("warning: " + " ".join(n.split()), file=sys.stderr)


def cmd_worker(a) -> int:
    _queue_notes(jobs, a.cache_dir)
    return worker.run_worker(a.cache_dir, workers=a.workers, idle_exit=a.idle_exit, warm=a.warm)


def cmd_jobs(a) -> int:
    _queue_notes(jobs, a.cache_dir)
    if a.action == "list":
        rows = jobs.list_jobs(a.cache_dir)
        if not a.all:
            rows = rows[:a.limit]
        if a.json:
            print(json.dumps([json.loads(j.to_json()) for j in rows], indent=1))
            return 0
        pid = worker.worker_pid(a.cache_dir)
        print(f"worker: {'pid ' + str(pid) if pid else 'not running (the app starts one; or python -m core worker)'}")
        if not rows:
            print("no jobs")
        for j in rows:
            flag = " (cancelling)" if j.cancel_requested and j.active else ""
            print(f"{j.id:<22} {j.status:<9} {job_records.utc(j.created)}  {j.describe()}{flag}")
        return 0
    if not a.id:
        raise InputError(f"`jobs {a.action}` needs a job id (see `python -m core jobs list`).")
    if a.action == "cancel":
        j = jobs.cancel(a.id, a.cache_dir)
        print(f"{j.id}: {'cancelled' if j.status == jobs.CANCELLED else 'cancel requested (stops within seconds)'}")
    elif a.action == "retry":
        j = jobs.retry(a.id, a.cache_dir)
        print(f"{j.id}: {j.status} (attempt {j.attempt})")
        if worker.worker_pid(a.cache_dir) is None:
            print("note: no worker is running: start one with `python -m core worker`", file=sys.stderr)
    else:  # show
        j = jobs.status(a.id, a.cache_dir)
        if j is None:
            raise InputError(f"No job {a.id!r} (see `python -m core jobs list`).")
        print(json.dumps(json.loads(j.to_json()), indent=1))
    return 0


def cmd_cache(a) -> int:
    """`cache size` / `cache clear`: the whole cache (every result and upload), from the command line only
    on a shared server (the dashboard's button clears only one browser's uploads there)."""
    store = get_store(a.cache_dir)
    before = store.size_bytes()
    if a.action == "clear":
        print(f"cache cleared: {store.clear():,} bytes freed")
    else:
        print(f"{before:,} bytes used of {store.size_limit:,}")
    return 0


def cmd_attention(a) -> int:
    spec = _spec(a)
    _check_out(a.out)
    run = resolve(spec, a.cache_dir)  # identifiers resolved and the key computed once for the command
    with _ranks(spec) as group:  # under torchrun: every rank runs its share of the batches, rank 0 writes
        res = analyze(run, cache_dir=a.cache_dir, progress=_Bar(_quiet(a, group)), group=group)
        sec = run_attention(run, cache_dir=a.cache_dir, progress=_Bar(_quiet(a, group)), force=a.force,
                            group=group)
    if res is None:
        return 0
    _write(a.out, {"manifest": res["manifest"], "attention": sec})
    _Bar.end_line()
    hit = "cache hit" if sec.get("cache_hit") else "computed"
    first = layer_means(sec, "sink_first")
    print(f"{res['manifest']['model']['label']}: {sec['n_blocks']} blocks x {sec['n_heads']} heads "
          f"({sec['n_kv_heads']} key/value heads), {hit}; attention to the first position by block: "
          + " ".join(f"{v:.2f}" for v in first) + f" -> {a.out}", file=sys.stderr)
    return 0


def cmd_chain(a) -> int:
    spec = _spec(a)
    _check_out(a.out)
    run = resolve(spec, a.cache_dir)  # identifiers resolved and the key computed once for the command
    t0 = time.perf_counter()
    memo = keeping_models()  # the corpus read and the model loaded once for the analysis, the pass and the ablations
    res = analyze(run, cache_dir=a.cache_dir, progress=_Bar(a.quiet), force=a.force, memo=memo)
    sec = chain_section(run, cache_dir=a.cache_dir, progress=_Bar(a.quiet), force=a.force, memo=memo)
    out = {"manifest": res["manifest"], **sec,
           "ablations": (chain_ablations(run, sec, res, cache_dir=a.cache_dir, progress=_Bar(a.quiet), memo=memo)
                         if a.ablate else None)}
    _write(a.out, out)
    _Bar.end_line()
    _warnings(res["manifest"])
    peak = max(sec["massive"], key=lambda m: m["ratio"] if m["ratio"] is not None else -1.0)
    sw = ", ".join(f"block {s['block']} {s['module']}[{s['row']}, {s['col']}] = {s['value']:.3g}"
                   for s in sec["super_weights"]) or "none"
    others = ", ".join(f"block {c['block']} [{c['row']}, {c['col']}] {c['class']}"
                       for c in sec.get("super_weight_candidates") or [] if c["class"] != "confirmed")
    sw += f" (confirmed by ablation on the probe; other candidates: {others})" if others else ""
    sink = sec["sink_rate"].get("rate")
    print(f"{res['manifest']['model']['label']}: super weights: {sw}; top-1/median peaks at layer {peak['layer']} "
          f"(x{peak['ratio']:.0f}, dim {peak['dim']}, {peak.get('position_class') or 'position unknown'}); "
          f"sink rate {'n/a' if sink is None else f'{sink:.2f}'}; LLM.int8 outlier dims {sec['int8_outliers']['dims']} "
          f"({'cache hit' if sec.get('cache_hit') else 'computed'}, {time.perf_counter() - t0:.1f} s) -> {a.out}",
          file=sys.stderr)
    return 0


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"--{name} takes comma-separated numbers, got {text!r}.") from None


def cmd_drift(a) -> int:
    if a.out:
        _check_out(a.out)
    spec = DriftSpec(d=a.d, heads=a.heads, seq_len=a.seq_len, n_seq=a.n_seq, alphas=_floats(a.alphas, "alphas"),
                     taus=_floats(a.taus, "taus"), seed=a.seed, biases=a.biases)
    res = drift_experiment(spec, cache_dir=a.cache_dir)
    _write(a.out, res)
    hit = "cache hit" if res["cache_hit"] else "computed"
    print(f"drift experiment ({len(spec.alphas)} alphas x {len(spec.taus)} taus, d={spec.d}, {spec.heads} heads, "
          f"{res['n_tokens']:,} tokens, {'with' if spec.biases else 'no'} block biases; {hit}) -> {a.out}",
          file=sys.stderr)
    for r in drift_claims({**res, "alphas": spec.alphas, "taus": spec.taus}):
        print(f"- {r['claim']}: {r['verdict']}. {r['measured']}" + (f" ({r['reason']})" if r["reason"] else ""),
              file=sys.stderr)
    return 0


def cmd_reproduce(a) -> int:
    # lazy: plotly and pandas only for the commands that draw figures
    from ..views import export
    from ..views.papers import headline, paper_views, robust_text

    out = None
    if a.out:
        out = Path(a.out).expanduser()
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {a.out!r} is a file; give a folder (created if missing).")
        if not out.parent.is_dir():
            raise InputError(f"--out {a.out!r}: the folder {str(out.parent)!r} does not exist; create it first.")
    fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
    bad = [f for f in fmts if f not in export.FIGURE_FORMATS + export.DATA_FORMATS]
    if bad:
        raise InputError(f"--formats: {', '.join(bad)} unknown; choose among "
                         f"{', '.join(export.FIGURE_FORMATS + export.DATA_FORMATS)}.")
    models = tuple(m.strip() for m in a.models.split(",") if m.strip()) if a.models else None
    s = Settings(max_tokens=a.max_tokens, sample=a.sample, seed=a.seed, models=models)
    t0 = time.perf_counter()
    bar = _Bar(a.quiet)
    last = [""]

    def progress(p):
        head = p.message.split(":")[0]
        if head.startswith("run ") and head != last[0] and not a.quiet:
            _Bar.end_line()
            print(head, file=sys.stderr)
            last[0] = head
        bar(p)

    rec = reproduce(a.name, s, cache_dir=a.cache_dir, progress=progress, force=a.force)
    _Bar.end_line()
    if out is not None:
        out.mkdir(exist_ok=True)
        _write(str(out / f"{a.name}.json"), rec)
        views = paper_views(rec)
        for v in (v for group in views.values() for v in group):
            for fmt in fmts:
                if fmt in export.FIGURE_FORMATS and v.figure is None:
                    continue
                (out / export.file_name(v, fmt)).write_bytes(export.export_bytes(v, fmt))
    for c in rec["claims"]:
        why = f" ({c['reason']})" if c["reason"] else ""
        rob = robust_text(c)
        print(f"- [{c['verdict']}{' · ' + rob if rob else ''}] {c['claim']}: {c['measured']}{why}", file=sys.stderr)
    hit = "cache hit" if rec.get("cache_hit") else "computed"
    print(f"{a.name}: {headline(rec)} ({hit}, {time.perf_counter() - t0:.1f} s)"
          + (f" -> {out}" if out is not None else ""), file=sys.stderr)
    return 0


def cmd_serve(a) -> int:
    return serve(a.port, a.address, a.cache_dir, headless=not a.browser)


def build_parser(prog: str = "python -m core") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Anisotropy workbench, headless.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="open the dashboard (streamlit run app.py; `aniso serve`)")
    sv.add_argument("--port", type=int, default=8501)
    sv.add_argument("--address", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    sv.add_argument("--cache-dir", default=None, help="cache directory (default: the usual one)")
    sv.add_argument("--browser", action="store_true", help="also open a browser tab")
    sv.set_defaults(fn=cmd_serve)
    mo = sub.add_parser("models", help="list the model identifiers available here")
    mo.add_argument("--anatomy", action="store_true", help="the architecture families instead: where each keeps its "
                                                           "blocks, norms, attention and MLP, and what applies")
    mo.set_defaults(fn=cmd_models)
    sub.add_parser("corpora", help="list the corpus identifiers available here").set_defaults(fn=cmd_corpora)
    mi = sub.add_parser("model-info", help="a hub model's files, parameters and memory, and whether it fits here, "
                                           "before it is fetched")
    mi.add_argument("model", help="hub id, org/name[@revision]")
    mi.add_argument("--dtype", default="auto", choices=DTYPES, help="the dtype it would run at (auto: float32 on CPU)")
    mi.add_argument("--device", default="auto", choices=DEVICES)
    mi.add_argument("--trust-remote-code", action="store_true", help="size a repository that ships its own code")
    mi.add_argument("--json", action="store_true", help="one JSON object (id, commit, files, bytes, n_params, dtype, "
                                                       "memory_bytes, fits, reason, ...)")
    mi.set_defaults(fn=cmd_model_info)
    an = sub.add_parser("analyze", help="per-layer anisotropy metrics -> results.json")
    _add_run_args(an)
    an.add_argument("--attention", action="store_true",
                    help="add the `attention` section (attention statistics per layer and head; cached apart)")
    an.add_argument("--chain", action="store_true",
                    help="add the `chain` section (super weights, massive activations, high-norm tokens, sink rate, "
                         "LLM.int8 outliers; cached apart)")
    an.set_defaults(fn=cmd_analyze)
    ou = sub.add_parser("outliers", help="outlier dimensions, frequency link and (--ablate) the LM-loss ablation")
    _add_run_args(ou)
    ou.add_argument("--ablate", action="store_true", help="zero the outlier dims in every norm, measure LM loss")
    ou.add_argument("--dims", default=None, help="comma-separated dims to ablate (default: persistent outliers)")
    ou.add_argument("--n-random", type=int, default=CONFIG.ablation_random_draws,
                    help="random-dimension draws for the baseline")
    ou.add_argument("--held-out-tokens", type=int, default=CONFIG.ablation_held_out_tokens,
                    help="tokens of held-out text for the loss")
    ou.set_defaults(fn=cmd_outliers)
    li = sub.add_parser("link", help="the dashboard link of a results.json (e.g. of a cluster run; same cache needed)")
    li.add_argument("results", help="a results.json written by `analyze`")
    li.add_argument("--port", type=int, default=8501)
    li.set_defaults(fn=cmd_link)

    d = TrainSpec()
    tr = sub.add_parser("train", help="train a small Transformer from scratch, keeping log-spaced checkpoints")
    tr.add_argument("--preset", choices=list(PRESETS), default=None,
                    help="train the preset's runs (same budget and seed; only the compared setting differs)")
    tr.add_argument("--corpus", default=d.corpus, help="built-in id or a file path")
    tr.add_argument("--text-column", default=None)
    tr.add_argument("--arch", choices=[*ARCHS, *REFUSED_ARCHS], default=d.arch,
                    help="gpt2/llama: pre-norm causal LM; bert: masked LM; bert-causal: post-norm causal LM; "
                         "mamba (Mamba-2), rwkv, lstm: no attention")
    tr.add_argument("--untied", action="store_true", help="a separate output matrix (default: tied to the input "
                                                          "embeddings)")
    tr.add_argument("--attn-gate", action="store_true",
                    help="llama only: the sigmoid gate on the attention output (Qiu et al. 2025)")
    tr.add_argument("--d-inner", type=int, default=None,
                    help="the family's inner width (MLP, RWKV channel mix, Mamba-2 expansion, LSTM MLP)")
    tr.add_argument("--matched", action="store_true",
                    help="choose --d-inner so that both parameter counts match GPT-2's at this size (within 10%%)")
    tr.add_argument("--tokenizer", choices=list(TOKENIZERS), default=d.tokenizer,
                    help="bpe: GPT-2's BPE (first merges); bytes: ByT5-style; uniform: random-token control")
    tr.add_argument("--vocab-size", type=int, default=d.vocab_size, help="BPE vocabulary (bpe, uniform)")
    tr.add_argument("--layers", type=int, default=d.n_layers)
    tr.add_argument("--d-model", type=int, default=d.d_model)
    tr.add_argument("--heads", type=int, default=d.n_heads)
    tr.add_argument("--seq-len", type=int, default=d.seq_len)
    tr.add_argument("--batch-size", type=int, default=d.batch_size)
    tr.add_argument("--steps", type=int, default=d.steps)
    tr.add_argument("--optimizer", choices=list(OPTIMIZERS), default=d.optimizer,
                    help="adamw (default), sgd (momentum 0.9) or coupled-adam (Stollenwerk & Stollenwerk 2025)")
    tr.add_argument("--lr", default=None,
                    help=f"learning rate, or 'swept': the family's rate from `python -m bench lab-lr` (default: "
                         f"{d.lr:g} for adamw, the family's rate for sgd and coupled-adam)")
    tr.add_argument("--seed", type=int, default=d.seed)
    tr.add_argument("--eval-tokens", type=int, default=d.eval_tokens, help="held-out tokens for the loss")
    tr.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    tr.add_argument("--name", default=None, help="run name (default: built from the settings)")
    tr.add_argument("--analyze", action="store_true", help="then analyse every checkpoint (the series)")
    tr.add_argument("--analysis-corpus", default=None, help="corpus of the analysis (default: the training one)")
    tr.add_argument("--analysis-tokens", type=int, default=SERIES_MAX_TOKENS)
    tr.add_argument("--cache-dir", default=None)
    tr.add_argument("--force", action="store_true", help="train again from scratch")
    tr.add_argument("--quiet", action="store_true")
    tr.add_argument("--out", default=None, help="write the run record(s) (and series summaries) as JSON")
    tr.set_defaults(fn=cmd_train)

    se = sub.add_parser("series", help="analyse every checkpoint of a trained run, or the revisions of a hub "
                                       "model (cached per checkpoint)")
    which = se.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", "--training", dest="run",
                       help="a trained run (see `models`: trained/<run>@step-N), or hub:org/name (a hub series "
                            "made before); under torchrun write --training "
                            "(torchrun takes --run for an abbreviation of its own --run-path)")
    which.add_argument("--hub", default=None, help="a hub model whose revisions form the series (needs the hub, "
                                                   "or the revisions in the local hub cache), with --revisions")
    se.add_argument("--revisions", default=None,
                    help="with --hub: comma-separated revisions named stepN, e.g. step0,step1000,step2000")
    se.add_argument("--corpus", default=None, help="analysis corpus (default: the run's training corpus)")
    se.add_argument("--text-column", default=None)
    se.add_argument("--max-tokens", type=int, default=SERIES_MAX_TOKENS)
    se.add_argument("--sample", type=int, default=SERIES_SAMPLE)
    se.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--device", choices=DEVICES, default="auto")
    se.add_argument("--dtype", choices=DTYPES, default="auto")
    se.add_argument("--cache-dir", default=None)
    se.add_argument("--quiet", action="store_true")
    se.add_argument("--out", required=True)
    se.set_defaults(fn=cmd_series)
    lb = sub.add_parser("lab", help="train a grid of small models that differ in one factor at a time; each factor's "
                                    "effect on anisotropy with a 95%% interval over seeds, and the claims it answers")
    lb.add_argument("--factor", action="append", default=[], metavar="NAME=LEVEL,LEVEL",
                    help="a factor and its levels, the first the reference (repeatable); factors: "
                         + "; ".join(f"{k}: {','.join(v)}" for k, v in LAB.FACTORS.items()))
    lb.add_argument("--seeds", default=None, help="a count (3: seeds 0,1,2; default 3, --quick 1) or a list 0,1,2")
    lb.add_argument("--quick", action="store_true",
                    help=f"the quick lab: {','.join(LAB.QUICK_FAMILIES)} (without --factor) x 1 seed, "
                         f"{LAB.QUICK['steps']} steps, {LAB.QUICK['n_layers']} layers, d {LAB.QUICK['d_model']}")
    lb.add_argument("--steps", type=int, default=None, help=f"training steps (default {d.steps})")
    lb.add_argument("--layers", type=int, default=None, help=f"blocks (default {d.n_layers})")
    lb.add_argument("--d-model", type=int, default=None, help=f"width (default {d.d_model})")
    lb.add_argument("--heads", type=int, default=None)
    lb.add_argument("--seq-len", type=int, default=None)
    lb.add_argument("--batch-size", type=int, default=None)
    lb.add_argument("--vocab-size", type=int, default=None)
    lb.add_argument("--eval-tokens", type=int, default=None, help="held-out tokens for the loss")
    lb.add_argument("--corpus", default=None, help=f"training corpus (default {d.corpus})")
    lb.add_argument("--text-column", default=None)
    lb.add_argument("--lr", type=float, default=None,
                    help="one learning rate for every cell (default: each family's stated rate where there is one)")
    lb.add_argument("--analysis-tokens", type=int, default=LAB.ANALYSIS_TOKENS, help="tokens analysed per checkpoint")
    lb.add_argument("--analysis-sample", type=int, default=LAB.ANALYSIS_SAMPLE, help="sampled positions per checkpoint")
    lb.add_argument("--thresholds", default=None, help="mean cosines whose first crossing is reported (default 0.2,0.5)")
    lb.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None)
    lb.add_argument("--cache-dir", default=None)
    lb.add_argument("--quiet", action="store_true")
    lb.add_argument("--out", default=None, help="also write lab.json here")
    lb.set_defaults(fn=cmd_lab)
    wk = sub.add_parser("worker", help="run the job worker of a cache directory (the app starts one itself)")
    wk.add_argument("--cache-dir", default=None, help="cache directory (default: ./cache)")
    wk.add_argument("--workers", type=int, default=None, help="jobs at once (threads; default ANISO_WORKERS or 1)")
    wk.add_argument("--idle-exit", type=float, default=None, help="exit after this many seconds without jobs")
    wk.add_argument("--warm", action="store_true", help="before the first job, import what an analysis needs and "
                    "load the default model once (the worker the app starts does)")
    wk.set_defaults(fn=cmd_worker)
    jb = sub.add_parser("jobs", help="the job queue: list, cancel ID, retry ID, show ID")
    jb.add_argument("action", choices=("list", "cancel", "retry", "show"))
    jb.add_argument("id", nargs="?", default=None)
    jb.add_argument("--cache-dir", default=None, help="cache directory (default: ./cache)")
    jb.add_argument("--all", action="store_true", help="every job, not only the latest")
    jb.add_argument("--limit", type=int, default=30)
    jb.add_argument("--json", action="store_true", help="records as JSON")
    jb.set_defaults(fn=cmd_jobs)
    ca = sub.add_parser("cache", help="the disk cache: size, or clear it whole (results and uploads)")
    ca.add_argument("action", choices=("size", "clear"))
    ca.add_argument("--cache-dir", default=None, help="cache directory (default: ./cache)")
    ca.set_defaults(fn=cmd_cache)
    at = sub.add_parser("attention", help="attention entropy, sinks, outlier link, query/key geometry per head")
    _add_run_args(at)
    at.set_defaults(fn=cmd_attention)
    ch = sub.add_parser("chain", help="the outlier chain: super weights, massive activations, high-norm tokens, "
                                      "sink rate, LLM.int8 outliers (--ablate: break it link by link)")
    _add_run_args(ch)
    ch.add_argument("--ablate", action="store_true",
                    help="add the `ablations` section: super weights, massive dims, outlier dims zeroed, with controls")
    ch.set_defaults(fn=cmd_chain)
    dr = sub.add_parser("drift-experiment", help="random block: query/key drift (isolated) and input drift (baseline), alpha x "
                                            "temperature tau (Godey et al.)")
    dr.add_argument("--d", type=int, default=64, help="model width")
    dr.add_argument("--heads", type=int, default=4)
    dr.add_argument("--seq-len", type=int, default=32)
    dr.add_argument("--n-seq", type=int, default=32, help="sequences of isotropic Gaussian tokens")
    dr.add_argument("--alphas", default="0,0.25,0.5,1,2,4", help="drift norms, comma-separated")
    dr.add_argument("--taus", default="0.25,0.5,1,2,4", help="attention temperatures, comma-separated")
    dr.add_argument("--seed", type=int, default=0)
    dr.add_argument("--biases", action="store_true",
                    help="keep PyTorch's default biases in the block (a vector shared by every token; default: none)")
    dr.add_argument("--cache-dir", default=None)
    dr.add_argument("--out", required=True)
    dr.set_defaults(fn=cmd_drift)
    rp = sub.add_parser("reproduce", help="reproduce a paper on the offline models: its figure, the published values "
                                          "beside ours and its claims table (one process for all its runs; cached)")
    rp.add_argument("name", choices=PAPER_NAMES)
    rp.add_argument("--max-tokens", type=int, default=P_TOKENS, help="tokens (positions) per run")
    rp.add_argument("--sample", type=int, default=P_SAMPLE, help="sampled positions per run")
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("--models", default=None, help="comma-separated subset of the paper's models (default: all)")
    rp.add_argument("--formats", default="html,csv,json",
                    help="with --out: figure and data formats to write (png,svg,pdf,html,csv,json)")
    rp.add_argument("--cache-dir", default=None)
    rp.add_argument("--force", action="store_true", help="recompute the record (the runs stay cached)")
    rp.add_argument("--quiet", action="store_true")
    rp.add_argument("--out", default=None, help="folder for the record (NAME.json) and every figure and table")
    rp.set_defaults(fn=cmd_reproduce)
    return p


def main(argv: list[str] | None = None, prog: str = "python -m core") -> int:
    args = build_parser(prog).parse_args(argv)
    # --cache-dir is this command's cache everywhere, also where no cache_dir is passed down (trained
    # checkpoints named by a model identifier); in-process callers (tests, scripts) keep their own afterwards
    with use_cache_dir(getattr(args, "cache_dir", None)):
        return _run(args)


def _run(args) -> int:
    try:
        return args.fn(args)
    except (InputError, Cancelled) as e:
        _Bar.end_line()
        if isinstance(e, RankFailed) and rank_from_env() != 0:
            return 2  # rank 0 prints the failing rank's message once
        print("error: " + " ".join(str(e).split()), file=sys.stderr)  # one line, whatever the message
        return 2
    except KeyboardInterrupt:
        _Bar.end_line()
        print("error: interrupted; nothing partial was stored", file=sys.stderr)
        return 130
    except MemoryError:
        _Bar.end_line()
        print("error: out of memory: lower --max-tokens, --batch-size or --sample", file=sys.stderr)
        return 3
    except OSError as e:  # a disk that is full or read-only, a file that vanished...
        _Bar.end_line()
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
        return 2
