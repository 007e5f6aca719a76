"""Helpers of the foundation tests: small text corpora and the headless CLI in a subprocess."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

WORDS = (
    "the cat sat on a mat while the dog ran to the old red barn and a bird sang in the tall tree "
    "near river stone house light water under over green small quick"
).split()


def make_documents(lengths, seed=0) -> list[str]:
    """Documents of `lengths` words drawn from a small vocabulary (many repeated tokens), each unique."""
    rng = np.random.default_rng(seed)
    return [f"doc{i} " + " ".join(rng.choice(WORDS, size=n)) for i, n in enumerate(lengths)]


def write_txt(path: Path, docs: list[str]) -> Path:
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


LAB_WORDS = "the cat dog sat ran on under a mat tree house red blue small big and then it was there".split()


def zipf_corpus(path: Path, n_docs: int, seed: int = 0) -> str:
    """`n_docs` documents of 8 to 29 words drawn from LAB_WORDS with Zipf weights (a corpus a tiny LM can learn)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(LAB_WORDS) + 1)
    docs = [" ".join(rng.choice(LAB_WORDS, size=int(rng.integers(8, 30)), p=p / p.sum())) + "." for _ in range(n_docs)]
    path.write_text("\n\n".join(docs))
    return str(path)


def tiny_train_spec(corpus: str, **kw):
    """A TrainSpec of a one-layer, 16-wide model trained 8 steps on CPU; `kw` overrides any field."""
    from core.studies.train_spec import TrainSpec

    base = dict(
        corpus=corpus,
        n_layers=1,
        d_model=16,
        n_heads=2,
        seq_len=16,
        batch_size=4,
        steps=8,
        vocab_size=512,
        eval_tokens=256,
        lr=3e-3,
        device="cpu",
    )
    return TrainSpec(**{**base, **kw})


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


def cli_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "core", *map(str, args)]


def run_cli(*args, timeout=300, **env) -> subprocess.CompletedProcess:
    """`python -m core ARGS` from the repository root, offline; returns the finished process."""
    return subprocess.run(cli_cmd(*args), cwd=ROOT, env=cli_env(**env), capture_output=True, text=True, timeout=timeout)
