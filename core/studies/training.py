"""Train a small Transformer from scratch and keep checkpoints along the way.

    train(TrainSpec(...)) -> run record (core/inputs/checkpoints.py stores it; every checkpoint is a model)

`TrainSpec`, the presets and the memory check are core/studies/train_spec.py (no torch: the Train page and the
CLI read it); this module is the torch side and imports torch and transformers at its top.

The loop is transformers' `Trainer` (seeded, deterministic on CPU, bf16 autocast on a GPU); a
callback saves safetensors checkpoints at log-spaced steps (0, 1, 2, 4, ... and the last) with
the held-out loss of each. Tokenisation, one of:

- `bpe`: GPT-2's byte-level BPE cut to its first `vocab_size - 2` tokens (ids 0-255 are the
  bytes, id 256 + i is merge i, so the first merges form a complete smaller BPE), plus an
  end-of-text and a mask token;
- `bytes`: UTF-8 bytes, ByT5-style (`ByT5Tokenizer`: id = byte + 3, no vocabulary file);
- `uniform`: the control: the `bpe` corpus with every token replaced by one drawn uniformly
  from the same vocabulary (seeded); documents, end-of-text positions and sequence lengths stay.

Documents are taken in a seeded order; the first ones (`eval_tokens`, at most a tenth of the
documents) are held out, the rest
are packed (end-of-text between documents) into rows of `seq_len` tokens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime as _dt
import fcntl
import hashlib
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import transformers as tf
from tokenizers import Tokenizer
from transformers import ByT5Tokenizer, PreTrainedTokenizerFast
from transformers.trainer_utils import get_last_checkpoint

from ..base.errors import Cancelled, InputError
from ..base.integrity import weights_digest
from ..base.progress import Progress
from ..inputs import checkpoints as trained
from ..inputs import lab_models
from ..inputs.corpora import BUILTIN_CORPORA, corpus_fingerprint, load_documents
from ..inputs.models import gpt2_tokenizer_file, package_versions
from ..stats.kernels import sample_mean_cosine
from . import series
from .optimizers import trainer_optimizer
from .train_spec import MAMBA_CHUNK, MAMBA_STATE, TrainSpec, check_train_size, inner_width, lr_source, unigram_entropy

MASK_PROB = 0.15  # BERT's masking rate (80% [MASK], 10% random, 10% kept)
BYTE_OFFSET = 3  # ByT5: ids 0-2 are pad, </s>, <unk>; byte b is id b + 3

# ----------------------------------------------------------------------------- tokenizers
def bpe_tokenizer(vocab_size: int, seq_len: int):
    """GPT-2's BPE cut to its first `vocab_size - 2` tokens, + <|endoftext|> and <mask>."""
    data = json.loads(Path(gpt2_tokenizer_file()).read_text())
    k = vocab_size - 2
    model = data["model"]
    model["vocab"] = {t: i for t, i in model["vocab"].items() if i < k}
    model["merges"] = model["merges"][:k - 256]
    data["added_tokens"] = [
        {"id": k, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": k + 1, "content": "<mask>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    data["post_processor"] = None
    tok = Tokenizer.from_str(json.dumps(data))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>", mask_token="<mask>",
                                   model_max_length=seq_len)


def bytes_tokenizer(seq_len: int):
    """ByT5's byte tokenizer (no vocabulary file); special-token strings in text stay plain bytes."""
    return ByT5Tokenizer(model_max_length=seq_len, mask_token="<extra_id_0>", split_special_tokens=True)


def byte_ids(text: str) -> np.ndarray:
    """The ids ByT5's tokenizer gives a text (without </s>), computed directly: byte + 3."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64) + BYTE_OFFSET


def make_tokenizer(spec: TrainSpec):
    if spec.tokenizer == "bytes":
        return bytes_tokenizer(spec.seq_len)
    return bpe_tokenizer(spec.vocab_size, spec.seq_len)


# ----------------------------------------------------------------------------- data
@dataclass
class TrainData:
    train: np.ndarray  # (n_rows, seq_len) int64, packed documents
    held_out: np.ndarray  # (n_rows, seq_len) int64, documents never trained on
    vocab_size: int  # rows of the embedding table
    eos_id: int
    mask_id: int
    n_documents: int
    content_ids: np.ndarray  # the ids a uniform draw (and the MLM's random replacement) uses


def _encode(docs: list[str], tok, spec: TrainSpec) -> list[np.ndarray]:
    if spec.tokenizer == "bytes":
        return [byte_ids(d) for d in docs]
    enc = tok(docs, add_special_tokens=False)["input_ids"]
    return [np.asarray(e, dtype=np.int64) for e in enc]


def _pack(docs: list[np.ndarray], eos: int, seq_len: int, want_rows: int | None) -> np.ndarray:
    """Documents joined with end-of-text, cut into full rows (the last partial row is dropped)."""
    parts, n = [], 0
    for d in docs:
        parts += [d, np.asarray([eos], dtype=np.int64)]
        n += len(d) + 1
        if want_rows is not None and n >= want_rows * seq_len:
            break
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    rows = len(stream) // seq_len
    if want_rows is not None:
        rows = min(rows, want_rows)
    return stream[:rows * seq_len].reshape(rows, seq_len)


def build_data(spec: TrainSpec, tok, progress: Callable[[Progress], None] | None = None) -> TrainData:
    """Held-out and training rows of `spec`'s corpus under its tokenisation (seeded, no torch)."""
    docs = load_documents(spec.corpus, spec.text_column)
    if progress:
        progress(Progress("tokenize", 0, 1, message=f"tokenizing {len(docs):,} documents"))
    order = np.random.default_rng(spec.seed).permutation(len(docs))
    want_train_rows = spec.steps * spec.batch_size  # one pass over fresh text when the corpus has enough
    need_tokens = (want_train_rows + 1) * spec.seq_len + spec.eval_tokens
    encoded, n = [], 0
    for c0 in range(0, len(order), 256):  # tokenize only what the budget needs
        chunk = _encode([docs[i] for i in order[c0:c0 + 256]], tok, spec)
        encoded += [e for e in chunk if len(e)]
        n += sum(len(e) + 1 for e in chunk)
        if n >= need_tokens:
            break
    if spec.tokenizer == "bytes":
        eos, mask, vocab = int(tok.eos_token_id), int(tok.mask_token_id), len(tok)
        content = np.arange(BYTE_OFFSET, BYTE_OFFSET + 256)
    else:
        eos, mask, vocab = int(tok.eos_token_id), int(tok.mask_token_id), spec.vocab_size
        content = np.arange(spec.vocab_size - 2)
    if len(encoded) < 2:  # one document is held out whole: none would be left to train on
        raise InputError(f"Corpus {spec.corpus!r} holds {len(encoded)} document{'s' if len(encoded) != 1 else ''} "
                         f"with text: training needs at least two, since whole documents are held out for the "
                         f"held-out loss. Separate documents with a blank line (or one row each in a table).")
    n_held, held_docs = 0, 0
    max_held = max(1, len(encoded) // 10)  # a small corpus keeps 90% of its documents for training
    while held_docs < max_held and n_held < spec.eval_tokens:
        n_held += len(encoded[held_docs]) + 1
        held_docs += 1
    held = _pack(encoded[:held_docs], eos, spec.seq_len, None)
    train = _pack(encoded[held_docs:], eos, spec.seq_len, want_train_rows)
    if len(train) < spec.batch_size or len(held) < 1:
        raise InputError(f"Corpus {spec.corpus!r} is too small for training: {len(train)} rows of "
                         f"{spec.seq_len} tokens after holding out {n_held:,} tokens; need at least "
                         f"{spec.batch_size} (lower --batch-size, --seq-len or --eval-tokens).")
    if spec.tokenizer == "uniform":
        rng = np.random.default_rng([spec.seed, 1])
        for arr in (train, held):
            keep = arr == eos
            arr[...] = np.where(keep, eos, rng.choice(content, size=arr.shape))
    return TrainData(train, held, vocab, eos, mask, len(encoded), content)


# ----------------------------------------------------------------------------- model
def build_model(spec: TrainSpec, vocab_size: int, eos_id: int, pad_id: int):
    """A freshly initialised model of `spec`'s architecture (call after seeding). Dropout off:
    tiny models, few steps, and the bare-loop benchmark runs the same computation.

    Every family is a transformers class (the gated LLaMA and the LSTM: ours, core/inputs/lab_models.py);
    `spec.tied` ties the output matrix to the input embeddings; `spec.d_inner` is the family's inner width
    (train_spec.inner_width: the default, or what matched_spec chose)."""
    d, L, H, T = spec.d_model, spec.n_layers, spec.n_heads, spec.seq_len
    f, tied = inner_width(spec), spec.tied
    ids = dict(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id, tie_word_embeddings=tied)
    if spec.arch == "gpt2":
        cfg = tf.GPT2Config(vocab_size=vocab_size, n_positions=T, n_embd=d, n_layer=L, n_head=H, n_inner=f,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids)
        return tf.GPT2LMHeadModel(cfg)
    if spec.arch == "llama":
        kw = dict(vocab_size=vocab_size, hidden_size=d, intermediate_size=f, num_hidden_layers=L, num_attention_heads=H,
                  num_key_value_heads=H, max_position_embeddings=T, attention_dropout=0.0, **ids)
        if spec.attn_gate:
            return lab_models.GatedLlamaForCausalLM(lab_models.GatedLlamaConfig(**kw))
        return tf.LlamaForCausalLM(tf.LlamaConfig(**kw))
    if spec.arch in ("bert", "bert-causal"):
        # post-norm; one token type (a shared vector added to every position otherwise); bert-causal: the same
        # blocks as a decoder (causal self-attention, no cross-attention), next-token loss
        cfg = tf.BertConfig(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=L, num_attention_heads=H,
                            intermediate_size=f, max_position_embeddings=T, type_vocab_size=1,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                            is_decoder=spec.arch == "bert-causal", **ids)
        return tf.BertLMHeadModel(cfg) if spec.arch == "bert-causal" else tf.BertForMaskedLM(cfg)
    if spec.arch == "mamba":
        # Mamba-2 (Dao & Gu 2024) through its chunked torch path (SSD): 0.06 s per default step on CPU, where Mamba-1's
        # reference selective scan takes 0.55 s (docs/training.md); spec.n_heads SSM heads, one B/C group
        cfg = tf.Mamba2Config(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=L, num_heads=H, head_dim=f // H,
                              expand=f // d if f % d == 0 else f / d, state_size=MAMBA_STATE, n_groups=1,
                              chunk_size=MAMBA_CHUNK, residual_in_fp32=True, use_cache=False, **ids)
        return tf.Mamba2ForCausalLM(cfg)
    if spec.arch == "rwkv":
        # rescale_every=0: RWKV's inference-time halving of the hidden states every 6 blocks is off (it changes
        # the hidden states the extraction reads, not the predictions)
        cfg = tf.RwkvConfig(vocab_size=vocab_size, context_length=T, hidden_size=d, num_hidden_layers=L,
                            attention_hidden_size=d, intermediate_size=f, rescale_every=0, use_cache=False, **ids)
        return tf.RwkvForCausalLM(cfg)
    if spec.arch == "lstm":
        return lab_models.LstmLMForCausalLM(lab_models.LstmLMConfig(vocab_size=vocab_size, hidden_size=d,
                                                                      num_hidden_layers=L, intermediate_size=f, **ids))
    raise InputError(f"No model builder for arch {spec.arch!r}.")


def model_parameters(model) -> dict:
    """{"total", "non_embedding"} of a built model: every distinct parameter once (a tied output matrix counts
    once); non-embedding leaves out the token and position embeddings (every nn.Embedding) and the output layer
    (its matrix where untied, its bias where it has one), as train_spec.count_parameters counts them."""
    seen = {id(p): p for p in model.parameters()}
    emb = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            emb.update({id(p): p for p in m.parameters()})
    out = model.get_output_embeddings()
    if out is not None:
        emb.update({id(p): p for p in out.parameters()})
    total = sum(p.numel() for p in seen.values())
    return {"total": int(total), "non_embedding": int(total - sum(p.numel() for p in emb.values()))}


class Collator:
    """Rows -> a batch. Causal: labels = inputs (the model shifts). Masked: BERT's 15% (80/10/10),
    drawn from torch's global generator (seeded by the Trainer, so runs repeat)."""

    def __init__(self, masked: bool, mask_id: int, content_ids: np.ndarray, generator=None):
        self.masked, self.mask_id, self.generator = masked, mask_id, generator
        self.content = torch.as_tensor(content_ids)

    def __call__(self, rows):
        ids = torch.stack([torch.as_tensor(r["input_ids"]) if isinstance(r, dict) else torch.as_tensor(r)
                           for r in rows])
        if not self.masked:
            return {"input_ids": ids, "labels": ids.clone()}
        g = self.generator
        pick = torch.rand(ids.shape, generator=g) < MASK_PROB
        labels = torch.where(pick, ids, torch.full_like(ids, -100))
        u = torch.rand(ids.shape, generator=g)
        rand_tok = self.content[torch.randint(len(self.content), ids.shape, generator=g)]
        ids = torch.where(pick & (u < 0.8), torch.full_like(ids, self.mask_id), ids)
        ids = torch.where(pick & (u >= 0.8) & (u < 0.9), rand_tok, ids)
        return {"input_ids": ids, "labels": labels}


class _Rows:
    """The training rows as a map-style dataset (the Trainer's seeded sampler shuffles them)."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i]}


def held_out_batches(data: TrainData, spec: TrainSpec, batch_size: int | None = None) -> list[dict]:
    """Fixed evaluation batches (the masked positions drawn once, from a seeded generator), of the
    training batch size by default (batches of 64 rows were slower on CPU: 64 x seq_len x vocab logits)."""
    batch_size = batch_size or spec.batch_size
    g = torch.Generator().manual_seed(spec.seed + 7)
    col = Collator(spec.masked, data.mask_id, data.content_ids, generator=g)
    return [col(list(data.held_out[i:i + batch_size])) for i in range(0, len(data.held_out), batch_size)]


def embedding_mean_cosine(model) -> float:
    """The mean cosine between the rows of the model's input embedding matrix: each token type counted once, not
    by its frequency (Stollenwerk & Stollenwerk's measure of an embedding's anisotropy; the hidden states' mean
    cosine weighs each token by its occurrences)."""
    return sample_mean_cosine(model.get_input_embeddings().weight.detach().float().cpu().numpy())


def checkpoint_embedding_mean_cosine(rec: dict, step: int, cache_dir=None) -> float:
    """`embedding_mean_cosine` of the checkpoint at `step` of the run whose record is `rec` (`trained.read_run`),
    from its saved weights (for runs trained before their records held it)."""
    lab_models.register()
    cls = tf.AutoModelForMaskedLM if rec.get("objective") == "masked" else tf.AutoModelForCausalLM
    return embedding_mean_cosine(cls.from_pretrained(str(trained.resolve(trained.ident_of(rec["run"], step), cache_dir))))


def held_out_loss(model, batches: list[dict], device: str, masked: bool) -> float:
    """Mean loss per predicted token over the held-out batches."""
    was_training = model.training
    model.eval()
    tot, n = 0.0, 0
    with torch.inference_mode():
        for b in batches:
            labels = b["labels"]
            k = int((labels != -100).sum()) if masked else int(labels[:, 1:].numel())  # causal: shifted
            out = model(input_ids=b["input_ids"].to(device), labels=labels.to(device))
            tot += float(out.loss) * k
            n += k
    model.train(was_training)
    return tot / max(n, 1)


def checkpoint_schedule(steps: int) -> list[int]:
    """0, 1, 2, 4, ... (powers of two below `steps`) and `steps`."""
    out, s = [0], 1
    while s < steps:
        out.append(s)
        s *= 2
    return out + [steps]


# ----------------------------------------------------------------------------- the run
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(spec: TrainSpec, cache_dir=None, progress: Callable[[Progress], None] | None = None,
          cancel: Callable[[], bool] | None = None, force: bool = False) -> dict:
    """Train `spec` (or resume it), returning its run record. A finished run is returned as is.

    Cancelling stops at the next step and keeps the Trainer's resumable checkpoint: calling
    `train` again with the same spec continues from there.
    """
    progress = progress or (lambda p: None)
    check_train_size(spec)  # before the tokenizer, the data or the model exist
    run = spec.run_name()
    folder = trained.trained_dir(cache_dir) / run
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # one spec, one training: wait for the other process, then reuse its run
            progress(Progress("wait", 0, 1, message=f"{run} is being trained by another process: waiting"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        if force:
            for p in folder.iterdir():
                if p.name != ".lock":
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        if (folder / "run.json").exists():
            rec = trained.read_run(run, cache_dir)
            if rec.get("status") == "done":
                return rec
            if rec.get("spec") and TrainSpec.from_dict(rec["spec"]).replace(name=None) != spec.replace(name=None):
                raise InputError(f"Run name {run!r} is taken by a different training; choose another name.")
        return _train(spec, run, folder, cache_dir, progress, cancel)


def _train(spec: TrainSpec, run: str, folder: Path, cache_dir, progress, cancel) -> dict:
    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    device = spec.resolved_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("CUDA was requested but no GPU is available here: use --device cpu (or auto).")
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    tok = make_tokenizer(spec)
    data = build_data(spec, tok, progress)
    tf.set_seed(spec.seed)
    model = build_model(spec, data.vocab_size, data.eos_id, int(tok.pad_token_id))
    params = model_parameters(model)
    n_params = params["total"]
    schedule = checkpoint_schedule(spec.steps)
    rec = trained.read_run(run, cache_dir) if (folder / "run.json").exists() else {}
    done_ckpts = {int(c["step"]): c for c in rec.get("checkpoints", [])}
    rec.update({
        "run": run, "spec": spec.to_dict(), "status": "running", "max_steps": spec.steps,
        "schedule": schedule, "device": device, "dtype": "bfloat16 autocast" if bf16 else "float32",
        # the same seed gives the same checkpoint at the same thread count: another count reorders float sums
        "torch_threads": torch.get_num_threads(),
        "vocab_size": data.vocab_size, "n_params": n_params, "params": params,
        "model_class": type(model).__name__, "objective": "masked" if spec.masked else "causal",
        "data": {"train_rows": int(len(data.train)), "train_tokens": int(data.train.size),
                 "held_out_tokens": int(data.held_out.size), "documents": data.n_documents,
                 "epochs": round(spec.steps * spec.batch_size / len(data.train), 3),
                 "corpus_sha256": corpus_fingerprint(spec.corpus, spec.text_column),
                 "corpus": spec.corpus if spec.corpus in BUILTIN_CORPORA else Path(spec.corpus).name},
        "versions": package_versions(),
        "created_utc": rec.get("created_utc") or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })
    # the optimizer, its rate and where the rate comes from; the floor a run must beat to count as learned
    rec.update({"optimizer": spec.optimizer, "lr": spec.lr, "lr_source": lr_source(spec),
                "unigram_entropy": unigram_entropy(data.train, data.vocab_size)})
    trained.write_run(run, {**rec, "checkpoints": sorted(done_ckpts.values(), key=lambda c: c["step"])}, cache_dir)
    eval_batches = held_out_batches(data, spec)
    tokens_per_step = spec.batch_size * spec.seq_len
    # where the time outside the training steps goes: log-spaced checkpoints (saving, held-out loss)
    # and the Trainer's resumable checkpoints (model, optimizer, RNG states)
    timing = {"checkpoint_s": 0.0, "held_out_s": 0.0, "resume_save_s": 0.0}
    log: list[dict] = list(rec.get("log", []))

    def save(step: int, model_) -> None:
        t0 = time.perf_counter()
        out = folder / f"step-{step}"
        tmp = folder / f".step-{step}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model_.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        last_train = next((e["loss"] for e in reversed(log) if e["step"] <= step and "loss" in e), None)
        t1 = time.perf_counter()
        loss = held_out_loss(model_, eval_batches, device, spec.masked)
        timing["held_out_s"] += time.perf_counter() - t1
        done_ckpts[step] = {"step": step, "model": trained.ident_of(run, step), "held_out_loss": loss,
                            "train_loss": last_train, "tokens_seen": step * tokens_per_step,
                            "embedding_mean_cosine": embedding_mean_cosine(model_),
                            "sha256": (sha := _sha256(out / "model.safetensors")),
                            "weights_sha256": weights_digest({"model.safetensors": sha})}
        trained.write_run(run, {**rec, "log": log, "checkpoints": sorted(done_ckpts.values(), key=lambda c: c["step"])},
                          cache_dir)
        timing["checkpoint_s"] += time.perf_counter() - t0

    class Checkpoints(tf.TrainerCallback):
        def __init__(self):
            self.t0 = time.perf_counter()
            self.step0 = 0
            self.t_step_end = self.t0

        def on_train_begin(self, args, state, control, model=None, **kw):
            self.step0 = state.global_step
            self.t0 = time.perf_counter()
            if 0 not in done_ckpts:
                save(0, model)

        def on_step_end(self, args, state, control, model=None, **kw):
            s = state.global_step
            if s in schedule and s not in done_ckpts:
                save(s, model)
            el = time.perf_counter() - self.t0 - timing["checkpoint_s"] - timing["resume_save_s"]
            rate = (s - self.step0) * tokens_per_step / max(el, 1e-9)
            progress(Progress("train", s, spec.steps, rate=rate,
                              eta_s=(spec.steps - s) * tokens_per_step / rate if rate else float("nan"),
                              message=f"step {s:,}/{spec.steps:,}"))
            if cancel is not None and cancel():
                control.should_training_stop = True
                control.should_save = True  # a resumable Trainer checkpoint at this step
            self.t_step_end = time.perf_counter()
            return control

        def on_save(self, args, state, control, **kw):  # the Trainer saved its resumable state just now
            timing["resume_save_s"] += time.perf_counter() - self.t_step_end

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                log.append({"step": state.global_step, "loss": float(logs["loss"]),
                            "lr": float(logs.get("learning_rate", 0.0))})

    args = tf.TrainingArguments(
        output_dir=str(folder / "trainer"), max_steps=spec.steps, per_device_train_batch_size=spec.batch_size,
        learning_rate=spec.lr, weight_decay=spec.weight_decay, warmup_steps=spec.warmup_steps,
        lr_scheduler_type="cosine", max_grad_norm=1.0, logging_steps=max(1, spec.steps // 200),
        save_strategy="steps", save_steps=max(50, spec.steps // 10), save_total_limit=1,
        report_to="none", seed=spec.seed, data_seed=spec.seed, use_cpu=device == "cpu", bf16=bf16,
        dataloader_num_workers=0, disable_tqdm=True, remove_unused_columns=False)
    trainer = _trainer_class(tf)(model=model, args=args, train_dataset=_Rows(data.train),
                         data_collator=Collator(spec.masked, data.mask_id, data.content_ids),
                         callbacks=[Checkpoints()], optimizer_cls_and_kwargs=trainer_optimizer(spec, model, args))
    trainer.remove_callback(tf.trainer_callback.PrinterCallback)  # our progress callback reports instead
    if device == "cpu":
        rec["steady_malloc"] = steady_malloc()
    resume = get_last_checkpoint(str(folder / "trainer")) if (folder / "trainer").is_dir() else None
    progress(Progress("train", 0, spec.steps, message="training" + (" (resumed)" if resume else "")))
    t0 = time.perf_counter()
    try:
        out = trainer.train(resume_from_checkpoint=resume)
    except torch.OutOfMemoryError:
        raise InputError(f"Out of memory on {device} with batch size {spec.batch_size}: lower it.") from None
    wall = time.perf_counter() - t0
    steps_done = int(trainer.state.global_step)
    rec.update(log=log, checkpoints=sorted(done_ckpts.values(), key=lambda c: c["step"]))
    ran = steps_done - (int(resume.rsplit("-", 1)[1]) if resume else 0)
    rec["timing"] = {"train_s": round(wall, 3), "checkpoint_s": round(timing["checkpoint_s"], 3),
                     "held_out_s": round(timing["held_out_s"], 3), "resume_save_s": round(timing["resume_save_s"], 3),
                     "steps": ran, "tokens_per_s": round(ran * tokens_per_step / max(wall, 1e-9), 1),
                     "train_runtime_s": float(out.metrics.get("train_runtime", wall))}
    if steps_done < spec.steps:
        rec["status"] = "cancelled"
        rec["resume_step"] = steps_done
        trained.write_run(run, rec, cache_dir)
        raise Cancelled(f"Training {run!r} cancelled at step {steps_done}; run it again to resume.")
    rec["status"] = "done"
    rec["learned"] = bool(rec["checkpoints"][-1]["held_out_loss"] < rec["unigram_entropy"])
    rec["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    trained.write_run(run, rec, cache_dir)
    shutil.rmtree(folder / "trainer", ignore_errors=True)  # the resumable state is not needed any more
    progress(Progress("done", spec.steps, spec.steps, message=f"trained {run}"))
    return rec


MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value (64-bit)
TRIM_THRESHOLD = 256 << 20


def steady_malloc() -> bool:
    """Let glibc's malloc keep freed memory for reuse (Linux only; True when set). With its defaults,
    blocks over ~128 KiB to a few MiB (the logits, activations and gradients of every step) are
    mmap-ed and unmapped at each step, and every fresh page faults on first touch: ~6,000 page
    faults per step of the default model on CPU. Here blocks below 32 MiB come from the heap and
    up to 256 MiB of freed memory stays mapped: the same arithmetic, fewer page faults. It applies to
    the whole process from now on (glibc cannot report the previous, dynamic setting to restore)."""
    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim, m_mmap = -1, -3  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD (malloc.h)
        return bool(libc.mallopt(m_mmap, MMAP_THRESHOLD)) and bool(libc.mallopt(m_trim, TRIM_THRESHOLD))
    except (OSError, AttributeError):  # not glibc (musl...): nothing to tune
        return False


def _trainer_class(tf):
    """transformers' Trainer, less per-step work that does not change the run: its FLOP count for
    the logs recounts the model's parameters at every step (a walk over every module); here the
    count is taken once (the same number: 6 x input tokens x non-embedding parameters)."""

    class _Trainer(tf.Trainer):
        _flops_per_token = None

        def floating_point_ops(self, inputs):
            ids = inputs.get(getattr(self.model, "main_input_name", "input_ids")) if isinstance(inputs, dict) else None
            if ids is None or not hasattr(self.model, "num_parameters"):
                return super().floating_point_ops(inputs)
            if self._flops_per_token is None:
                self._flops_per_token = 6 * self.model.num_parameters(exclude_embeddings=True)
            return ids.numel() * self._flops_per_token

    return _Trainer


def job_train(params: dict, progress, cancel) -> dict:
    """The "train" job: train (or resume) `params["spec"]`; with `params["analyse"]`, then analyse
    every checkpoint (`params["series"]`: keywords of `series.analyze_series`)."""
    spec = TrainSpec.from_dict(params["spec"])
    rec = train(spec, progress=progress, cancel=cancel)
    out = {"run": rec["run"], "checkpoints": len(rec.get("checkpoints", []))}
    if params.get("analyse"):
        series.analyze_series(rec["run"], progress=progress, cancel=cancel, **(params.get("series") or {}))
        out["analysed"] = True
    return out
