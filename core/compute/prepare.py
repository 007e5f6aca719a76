"""The one way a run is prepared: its documents decoded, its model loaded, its windows planned.

    prep = prepare(spec, device=..., dtype=...)   -> Prepared(documents, lm, seq_len, windows)

Analysis (`pipeline`), the outlier ablation, the attention pass and its viewer, series, training
analysis and the distributed path all call `prepare`, so they read the same documents (in the
spec's encoding) and plan the same windows. Image and audio runs get their items here too.

torch is imported inside `prepare` and `_prepare_items` (to check that the GPU asked for is there): this module is
imported on a cache hit and by the app's first page (core.entry.cli takes `keeping_models`; core.compute.pipeline and
core.studies' attention and chain import `prepare` at their top and call it on a miss).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..base.errors import Cancelled, InputError
from ..base.progress import Progress
from ..base.spec import RunSpec, stable_hash
from ..inputs.corpora import TokenWindows, load_documents, tokenize_budget
from ..inputs.hub_fetch import fetch
from ..inputs.modalities import corpus_modality
from ..inputs.modalities import run as modal
from ..inputs.modalities.adapters import adapter_for
from ..inputs.models import BUILTIN_MODELS, describe_model, is_hub_model, load_model, model_modality


@dataclass
class Prepared:
    """A run ready for forward passes. `documents` is None for image and audio runs (`windows` then
    holds the modality's items and `modality` names it)."""

    spec: RunSpec
    lm: object  # models.LoadedModel
    device: str
    dtype: str
    documents: list[str] | None
    windows: object  # TokenWindows (text) or the modality's items
    seq_len: int | None = None
    modality: str = "text"
    adapter: object = None  # the modality adapter of an image or audio run

    @property
    def pad_id(self) -> int:
        return int(getattr(self.lm.tokenizer, "pad_token_id", None) or 0)  # images, audio: no tokenizer

    def windows_after(self, max_tokens: int, seq_len: int) -> TokenWindows:
        """Windows of `max_tokens` from the documents that follow the run's own (held-out text)."""
        s = self.spec
        return tokenize_budget(self.documents, self.lm.tokenizer, max_tokens, seq_len, s.seed, s.corpus,
                               start=max(self.windows.next_position, 1))


MODELS = ("models",)  # the slot of a memo that keeps loaded models: only where its owner asks (`keeping_models`)


def keeping_models(memo: dict | None = None) -> dict:
    """A memo (see `read_documents`) that also keeps the models `prepare` loads, keyed by identifier, device,
    dtype and placement: one command's stages (`core chain`: the analysis, the chain pass, the ablations) load
    the model once. Never for a memo that outlives the command (a worker's between jobs)."""
    memo = {} if memo is None else memo
    memo.setdefault(MODELS, {})
    return memo


def read_documents(spec: RunSpec, memo: dict | None = None, corpus_sha: str | None = None) -> list[str]:
    """The documents of a text run, decoded with the spec's encoding. No torch.

    `memo` (a dict shared by the runs of one series) keeps one corpus: read once for all of them."""
    if memo is None:
        return load_documents(spec.corpus, spec.text_column, spec.encoding)
    dkey = ("documents", spec.corpus, spec.text_column, spec.encoding, corpus_sha)
    if dkey not in memo:
        models = memo.get(MODELS)
        memo.clear()  # one corpus per memo: a series never holds two
        if models is not None:
            memo[MODELS] = models
        memo[dkey] = load_documents(spec.corpus, spec.text_column, spec.encoding)
    return memo[dkey]


def prepare(spec: RunSpec, *, device: str, dtype: str, cache_dir=None, device_map: str | None = None,
            memo: dict | None = None, corpus_sha: str | None = None, fingerprint: str | None = None,
            progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
            load_message: str | None = None, commit: str | None = None) -> Prepared:
    """Decode `spec`'s documents, load its model once (on `device`, in `dtype`) and plan its windows.

    Bad input fails before torch is imported (corpus) or before any forward pass (layers beyond the
    model, token ids beyond its embeddings). `memo`: see `read_documents`; the windows are kept in it
    too (same tokenizer, same windows), and the model where the memo was made by `keeping_models`.
    `fingerprint`: the model's, from the run's resolution (see `pipeline.resolve`), so that loading asks no hub
    again; `commit`: a hub model's, from the same resolution.
    `progress` hears "read", "download" (a hub model whose files the local hub cache does not hold whole: bytes,
    rate and ETA per file), "load" then "tokenize"; `cancel` is polled between the steps and during a download.
    """
    if corpus_modality(spec.corpus) != "text" or model_modality(spec.model) != "text":
        return _prepare_items(spec, device, dtype, cache_dir, progress, fingerprint, cancel, commit)
    progress = progress or (lambda p: None)
    progress(Progress("read", message="reading the corpus"))
    documents = read_documents(spec, memo, corpus_sha)  # a bad corpus fails before importing torch
    progress(Progress("read", len(documents), len(documents), message=f"{len(documents):,} documents read"))
    check_cancel(cancel)
    commit = fetch_model(spec, device, dtype, cache_dir, progress, cancel, commit)  # a refusal before torch too
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("CUDA was requested but no GPU is available here: use --device cpu (or auto).")
    models = memo.get(MODELS) if memo is not None else None
    mkey = (spec.model, device, dtype, device_map, spec.trust_remote_code, commit)
    lm = models.get(mkey) if models is not None else None
    if lm is None:
        progress(Progress("load", 0, 1, message=load_message or loading_message(spec.model)))
        lm = load_model(spec.model, device=device, dtype=dtype, cache_dir=Path(cache_dir) if cache_dir else None,
                        trust_remote_code=spec.trust_remote_code, device_map=device_map, fingerprint=fingerprint,
                        commit=commit)
        if models is not None:
            models[mkey] = lm
    check_cancel(cancel)
    got = adapter_for(lm.base).modality
    if got != "text":  # a hub model's modality is known once its config is here
        raise InputError(f"{spec.model} reads {got}, but the corpus {spec.corpus!r} holds text: pick "
                         f"{'an image' if got == 'image' else 'a speech'} corpus (python -m core corpora lists them).")
    progress(Progress("tokenize", 0, 1, message="tokenizing"))
    n_hidden = int(lm.info["n_layers"]) + 1
    if spec.layers is not None and spec.layers[-1] >= n_hidden:
        raise InputError(f"--layers {spec.layers[-1]} is beyond {spec.model}'s hidden-state layers "
                         f"(0..{n_hidden - 1}; 0 = embeddings).")
    seq_len = effective_seq_len(spec, lm)
    memo = {} if memo is None else memo
    wkey = ("windows", tokenizer_identity(lm.tokenizer), spec.max_tokens, seq_len, spec.seed)
    if wkey not in memo:
        memo[wkey] = tokenize_budget(documents, lm.tokenizer, spec.max_tokens, seq_len, spec.seed, spec.corpus,
                                     cancel=cancel)
    windows = memo[wkey]
    check_cancel(cancel)
    _check_vocabulary(spec, lm, windows)
    return Prepared(spec, lm, device, dtype, documents, windows, seq_len)


def fetch_model(spec: RunSpec, device: str, dtype: str, cache_dir, progress, cancel, commit: str | None = None):
    """A hub model's files into the local hub cache (the "download" stage; nothing for other models). Returns its
    commit (None for other models)."""
    if not is_hub_model(spec.model):
        return None
    got = fetch(spec.model, dtype=dtype, device=device, trust_remote_code=spec.trust_remote_code,
                progress=progress, cancel=cancel, cache_dir=cache_dir, suggest=BUILTIN_MODELS, commit=commit)
    check_cancel(cancel)
    return got.commit


def _prepare_items(spec: RunSpec, device: str, dtype: str, cache_dir, progress, fingerprint, cancel=None,
                   commit: str | None = None) -> Prepared:
    """An image or audio run: payloads read (before torch), the model loaded, items laid out by its adapter."""

    commit = fetch_model(spec, device, dtype, cache_dir, progress, cancel, commit)  # its modality is in its config
    info = describe_model(spec.model)
    modality = modal.check_pairing(info["modality"], spec.corpus, info["label"])
    if progress:
        progress(Progress("read", message="reading the corpus"))
    payloads = modal.load_payloads(modality, spec.corpus, cache_dir)  # a bad corpus fails before torch
    if progress:
        progress(Progress("read", len(payloads), len(payloads), message=f"{len(payloads):,} items read"))
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("CUDA was requested but no GPU is available here: use --device cpu (or auto).")
    if progress:
        progress(Progress("load", 0, 1, message=f"loading {spec.model}"))
    lm = load_model(spec.model, device=device, dtype=dtype, cache_dir=Path(cache_dir) if cache_dir else None,
                    trust_remote_code=spec.trust_remote_code, fingerprint=fingerprint, commit=commit)
    adapter = adapter_for(lm.base)
    items = modal.build_items(modality, payloads, adapter, lm.base, spec.max_tokens, spec.seed)
    return Prepared(spec, lm, device, dtype, None, items, modality=modality, adapter=adapter)


def _check_vocabulary(spec: RunSpec, lm, windows: TokenWindows) -> None:
    try:
        n_emb = int(lm.base.get_input_embeddings().num_embeddings)
    except Exception:  # noqa: BLE001 - an architecture without a plain embedding table: no check
        return
    if max(int(w.max()) for w in windows.ids) >= n_emb:
        raise InputError(f"The tokenizer of {spec.model!r} produces token ids beyond the model's {n_emb} "
                         f"embeddings: tokenizer and model do not match.")


def effective_seq_len(spec: RunSpec, lm) -> int:
    """max_seq_len, capped at what the model's position embeddings take (special tokens included)."""
    cap = lm.max_positions
    return min(spec.max_seq_len, cap) if cap else spec.max_seq_len


def tokenizer_identity(tok) -> str:
    """What decides a tokenizer's ids: its class, vocabulary and (fast) pipeline."""
    backend = getattr(tok, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else sorted(tok.get_vocab().items())
    return stable_hash([type(tok).__name__, body, tok.all_special_tokens])


def check_cancel(cancel) -> None:
    if cancel is not None and cancel():
        raise Cancelled("The run was cancelled; nothing partial was stored.")


def loading_message(ident: str, why: str = "") -> str:
    """What the progress panel says while a model loads (untrained ones are built from a config)."""
    what = "building the model (random weights)" if ident.startswith("untrained-") else f"loading {ident}"
    return f"{what} {why}".strip()
